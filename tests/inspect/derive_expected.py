#!/usr/bin/env python3
"""Independent expectations for check_inspect.cpp, from transformers' modeling_rope_utils.py formulas in
Python doubles (math.pow; no rotary code). Prints the C++ table of check_inspect.cpp; rerun and paste
if a case changes:  python3 tests/inspect/derive_expected.py"""
import json, math, os

HERE = os.path.dirname(os.path.abspath(__file__))


def inv(d, b):
    return [1.0 / math.pow(b, 2 * i / d) for i in range(d // 2)]


def llama3(d, b, s, lo, hi, L0):
    out = []
    for x in inv(d, b):
        wl = 2 * math.pi / x
        if wl > L0 / lo:
            out.append(x / s)
        elif wl < L0 / hi:
            out.append(x)
        else:
            sm = (L0 / wl - lo) / (hi - lo)
            out.append((1 - sm) * x / s + sm * x)
    return out


def yarn(d, b, s, L0, beta_fast=32, beta_slow=1, mscale=None, mscale_all_dim=None):
    corr = lambda r: d * math.log(L0 / (r * 2 * math.pi)) / (2 * math.log(b))
    low, high = max(math.floor(corr(beta_fast)), 0), min(math.ceil(corr(beta_slow)), d - 1)
    if low == high:
        high += 0.001
    out = []
    for i, x in enumerate(inv(d, b)):
        ramp = min(max((i - low) / (high - low), 0.0), 1.0)
        w = 1 - ramp  # extrapolation weight
        out.append((x / s) * (1 - w) + x * w)
    m = lambda k: 1.0 if s <= 1 else 0.1 * k * math.log(s) + 1.0
    af = m(mscale) / m(mscale_all_dim) if (mscale and mscale_all_dim) else m(1.0)
    return out, af


def phi3():
    return json.load(open(os.path.join(HERE, "..", "..", "examples", "configs", "phi-3-128k-longrope.json")))


def longrope(long):
    c = phi3()
    f = c["rope_scaling"]["long_factor" if long else "short_factor"]
    return [x / fj for x, fj in zip(inv(96, 10000.0), f)], math.sqrt(1 + math.log(131072 / 4096) / math.log(4096))


def dynamic(d, b, s, L, n):
    n = max(n, L)
    return inv(d, b * math.pow(s * n / L - (s - 1), d / (d - 2)))


qwen, qwen_af = yarn(128, 1e6, 4.0, 32768)
dsv3, dsv3_af = yarn(64, 1e4, 40.0, 4096, mscale=1.0, mscale_all_dim=1.0)
short, phi_af = longrope(False)
long_, _ = longrope(True)

cases = [  # name, rope_type, head_dim, rotary_dim, pairing, rope_theta, attention_factor, inv_freq
    ("llama-2-7b", "default", 128, 128, "half_split", 1e4, 1.0, inv(128, 1e4)),
    ("codellama-7b", "default", 128, 128, "half_split", 1e6, 1.0, inv(128, 1e6)),
    ("llama-3.1-8b", "llama3", 128, 128, "half_split", 5e5, 1.0, llama3(128, 5e5, 8.0, 1.0, 4.0, 8192)),
    ("llama-3.1-8b-interleaved", "llama3", 128, 128, "interleaved", 5e5, 1.0, llama3(128, 5e5, 8.0, 1.0, 4.0, 8192)),
    ("qwen2.5-7b-instruct-yarn", "yarn", 128, 128, "half_split", 1e6, qwen_af, qwen),
    ("phi-3-128k-longrope", "longrope", 96, 96, "half_split", 1e4, phi_af, short),
    ("phi-3-128k-longrope-4096", "longrope", 96, 96, "half_split", 1e4, phi_af, short),
    ("phi-3-128k-longrope-4097", "longrope", 96, 96, "half_split", 1e4, phi_af, long_),
    ("deepseek-v3", "yarn", 64, 64, "interleaved", 1e4, dsv3_af, dsv3),
    ("gpt-neox-20b", "default", 96, 24, "half_split", 1e4, 1.0, inv(24, 1e4)),
    ("phi-2", "default", 80, 32, "half_split", 1e4, 1.0, inv(32, 1e4)),
    ("gpt-j-6b", "default", 256, 64, "interleaved", 1e4, 1.0, inv(64, 1e4)),
    ("gemma-3-4b-it", "linear", 256, 256, "half_split", 1e6, 1.0, [x / 8 for x in inv(256, 1e6)]),
    ("gemma-3-4b-it-sliding", "default", 256, 256, "half_split", 1e4, 1.0, inv(256, 1e4)),
    ("gemma-3-rope-parameters", "linear", 256, 256, "half_split", 1e6, 1.0, [x / 8 for x in inv(256, 1e6)]),
    ("gemma-3-rope-parameters-sliding", "default", 256, 256, "half_split", 1e4, 1.0, inv(256, 1e4)),
    ("llama-2-dynamic", "dynamic", 128, 128, "half_split", 1e4, 1.0, dynamic(128, 1e4, 2.0, 4096, 4096)),
    ("llama-2-dynamic-8192", "dynamic", 128, 128, "half_split", 1e4, 1.0, dynamic(128, 1e4, 2.0, 4096, 8192)),
]

for name, t, hd, rd, pairing, theta, af, f in cases:
    assert len(f) == rd // 2
    idx = sorted(set([0, 1, len(f) // 4, len(f) // 2, (3 * len(f)) // 4, len(f) - 2, len(f) - 1]))
    spots = ", ".join("{%d, %r}" % (j, f[j]) for j in idx)
    print('    {"%s", "%s", %d, %d, "%s", %r, %r, {%s}},' % (name, t, hd, rd, pairing, theta, af, spots))
