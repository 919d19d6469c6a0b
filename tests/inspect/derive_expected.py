#!/usr/bin/env python3
"""Independent expectations for check_inspect.cpp, from transformers' modeling_rope_utils.py formulas in
Python doubles (math.pow; no rotary code). Without arguments: prints the C++ table of check_inspect.cpp
(rerun and paste if a case changes). --write / --check: published_expected.json, the expectations of
every config in configs/published (see the second half of this file)."""
import json, math, os, sys

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
    # Misspelt or unread keys: transformers' defaults apply (and rotary-inspect warns).
    ("misspelt-rope-theta", "default", 128, 128, "half_split", 1e4, 1.0, inv(128, 1e4)),
    ("misspelt-partial-rotary-factor", "default", 80, 40, "half_split", 1e4, 1.0, inv(40, 1e4)),
    ("gemma-3-top-level-theta", "linear", 256, 256, "half_split", 1e6, 1.0, [x / 8 for x in inv(256, 1e6)]),
]

for name, t, hd, rd, pairing, theta, af, f in (cases if len(sys.argv) == 1 else []):
    assert len(f) == rd // 2
    idx = sorted(set([0, 1, len(f) // 4, len(f) // 2, (3 * len(f)) // 4, len(f) - 2, len(f) - 1]))
    spots = ", ".join("{%d, %r}" % (j, f[j]) for j in idx)
    print('    {"%s", "%s", %d, %d, "%s", %r, %r, {%s}},' % (name, t, hd, rd, pairing, theta, af, spots))


# ---- published configs (tests/inspect/configs/published): the whole of transformers' config reading ----
# An independent Python reading of each config.json as transformers does it (class defaults from
# configuration_<family>.py, text_config, legacy keys, modeling_rope_utils.py formulas); it shares no
# code or table with rotary's hf_config.hpp. Run with --write to regenerate published_expected.json,
# --check (the ctest inspect.published-expected) to fail when the committed file differs.

# Class defaults of each family's configuration class (transformers' configuration_<family>.py): the
# values a config.json that omits the key gets. "?" in a comment: not checked against the source;
# the published configs below all set those keys explicitly.
CLASS_DEFAULTS = {
    "llama": dict(rope_theta=10000.0, max_position_embeddings=2048, hidden_size=4096, num_attention_heads=32),
    "llama4_text": dict(rope_theta=500000.0, max_position_embeddings=4096 * 32, hidden_size=5120,
                        num_attention_heads=40, head_dim=128),
    "mistral": dict(rope_theta=10000.0, max_position_embeddings=4096 * 32, hidden_size=4096, num_attention_heads=32),
    "mixtral": dict(rope_theta=1e6, max_position_embeddings=4096 * 32, hidden_size=4096, num_attention_heads=32),
    "qwen2": dict(rope_theta=10000.0, max_position_embeddings=32768, hidden_size=4096, num_attention_heads=32),
    "qwen3": dict(rope_theta=10000.0, max_position_embeddings=32768, hidden_size=4096, num_attention_heads=32,
                  head_dim=128),
    "qwen3_moe": dict(rope_theta=10000.0, max_position_embeddings=32768, hidden_size=2048, num_attention_heads=32),
    "qwen2_vl": dict(rope_theta=1e6, max_position_embeddings=32768, hidden_size=8192, num_attention_heads=64),
    "qwen2_5_vl": dict(rope_theta=1e6, max_position_embeddings=32768, hidden_size=8192, num_attention_heads=64),
    "qwen3_vl_text": dict(rope_theta=5e6, max_position_embeddings=128000, hidden_size=4096, num_attention_heads=32,
                          head_dim=128),  # max_position_embeddings ?
    "gemma2": dict(rope_theta=10000.0, max_position_embeddings=8192, hidden_size=2304, num_attention_heads=8,
                   head_dim=256),
    "gemma3_text": dict(rope_theta=1e6, rope_local_base_freq=10000.0, max_position_embeddings=131072,
                        hidden_size=2304, num_attention_heads=8, head_dim=256),
    "phi": dict(rope_theta=10000.0, max_position_embeddings=2048, hidden_size=2048, num_attention_heads=32,
                partial_rotary_factor=0.5),
    "phi3": dict(rope_theta=10000.0, max_position_embeddings=4096, original_max_position_embeddings=4096,
                 hidden_size=3072, num_attention_heads=32),
    "deepseek_v2": dict(rope_theta=10000.0, max_position_embeddings=2048, hidden_size=5120, num_attention_heads=128,
                        qk_rope_head_dim=64),
    "deepseek_v3": dict(rope_theta=10000.0, max_position_embeddings=4096, hidden_size=7168, num_attention_heads=128,
                        qk_rope_head_dim=64, rope_interleave=True),
    "gpt_oss": dict(rope_theta=150000.0, max_position_embeddings=131072, hidden_size=2880, num_attention_heads=64,
                    head_dim=64, rope_scaling={"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0,
                                               "beta_slow": 1.0, "truncate": False,
                                               "original_max_position_embeddings": 4096}),
    "glm": dict(rope_theta=10000.0, max_position_embeddings=131072, hidden_size=4096, num_attention_heads=32,
                head_dim=128, partial_rotary_factor=0.5),
    "glm4": dict(rope_theta=10000.0, max_position_embeddings=131072, hidden_size=4096, num_attention_heads=32,
                 head_dim=128, partial_rotary_factor=0.5),
    "cohere": dict(rope_theta=10000.0, max_position_embeddings=8192, hidden_size=8192, num_attention_heads=64),
    "gpt_neox": dict(rotary_emb_base=10000, max_position_embeddings=2048, hidden_size=6144, num_attention_heads=64,
                     rotary_pct=0.25),
    "gptj": dict(n_positions=2048, n_embd=4096, n_head=16, rotary_dim=64),
    "falcon": dict(rope_theta=10000.0, max_position_embeddings=2048, hidden_size=4544, num_attention_heads=71),
    "stablelm": dict(rope_theta=10000, max_position_embeddings=4096, hidden_size=2560, num_attention_heads=32,
                     partial_rotary_factor=0.25),
    "olmo2": dict(rope_theta=10000.0, max_position_embeddings=2048, hidden_size=4096, num_attention_heads=32),
    "granite": dict(rope_theta=10000.0, max_position_embeddings=2048, hidden_size=4096, num_attention_heads=32),
    "minicpm": dict(rope_theta=10000.0, max_position_embeddings=2048, hidden_size=4096, num_attention_heads=32),
    "kimi_k2": dict(rope_theta=10000.0, max_position_embeddings=4096, hidden_size=7168, num_attention_heads=128,
                    qk_rope_head_dim=64),  # DeepseekV3Config (remote code), its own model_type
    "gemma4_text": dict(rope_theta=1e6, rope_local_base_freq=10000.0, max_position_embeddings=131072,
                        hidden_size=2304, num_attention_heads=8, head_dim=256, global_head_dim=512),
    "ernie4_5": dict(rope_theta=500000.0, max_position_embeddings=131072, hidden_size=1024, num_attention_heads=16,
                     head_dim=128),
    "ernie4_5_moe": dict(rope_theta=500000.0, max_position_embeddings=131072, hidden_size=2560,
                         num_attention_heads=20),
    "helium": dict(rope_theta=100000.0, max_position_embeddings=4096, hidden_size=2560, num_attention_heads=20,
                   head_dim=128),
    "glm4_moe": dict(rope_theta=10000.0, max_position_embeddings=131072, hidden_size=4096, num_attention_heads=96,
                     partial_rotary_factor=0.5),
    "qwen3_next": dict(rope_theta=10000.0, max_position_embeddings=32768, hidden_size=2048, num_attention_heads=16,
                       head_dim=256, partial_rotary_factor=0.25),
    "minimax_m2": dict(rope_theta=5e6, max_position_embeddings=196608, hidden_size=3072, num_attention_heads=48,
                       head_dim=128, partial_rotary_factor=0.5),  # rotary_dim = head_dim // 2
    "seed_oss": dict(rope_theta=10000.0, max_position_embeddings=524288, hidden_size=4096, num_attention_heads=80,
                     head_dim=128),
    "smollm3": dict(rope_theta=2e6, max_position_embeddings=32768, hidden_size=2048, num_attention_heads=16),
    "olmo3": dict(rope_theta=10000.0, max_position_embeddings=2048, hidden_size=4096, num_attention_heads=32),
    "hunyuan_v1_dense": dict(rope_theta=10000.0, max_position_embeddings=2048, hidden_size=4096,
                             num_attention_heads=32),
    "hunyuan_v1_moe": dict(rope_theta=10000.0, max_position_embeddings=2048, hidden_size=4096,
                           num_attention_heads=32),
    "lfm2": dict(rope_theta=1e6, max_position_embeddings=128000, hidden_size=2560, num_attention_heads=32),
    # The families of 2025-26 in configs/families (written configs, not published files): each class's defaults.
    "minimax": dict(rope_theta=1e6, max_position_embeddings=131072, hidden_size=4096, num_attention_heads=32),
    "exaone4": dict(rope_theta=10000.0, max_position_embeddings=2048, hidden_size=4096, num_attention_heads=32),
    "apertus": dict(rope_theta=12e6, max_position_embeddings=65536, hidden_size=4096, num_attention_heads=32,
                    rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                  "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}),
    "ministral3": dict(rope_theta=1e6, max_position_embeddings=262144, hidden_size=4096, num_attention_heads=32,
                       head_dim=128, rope_scaling={"rope_type": "yarn", "factor": 16.0, "beta_fast": 32.0,
                                                   "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 1.0,
                                                   "original_max_position_embeddings": 16384}),
    "glm4v_text": dict(rope_theta=10000.0, max_position_embeddings=32768, hidden_size=4096, num_attention_heads=32,
                       partial_rotary_factor=0.5),
    "longcat_flash": dict(rope_theta=1e7, max_position_embeddings=131072, hidden_size=6144, num_attention_heads=64,
                          qk_rope_head_dim=64),
    "qwen3_5_text": dict(rope_theta=10000.0, max_position_embeddings=32768, hidden_size=4096, num_attention_heads=16,
                         head_dim=256, partial_rotary_factor=0.25),
    # HunYuan-A13B's own configuration_hunyuan.py (remote code): attention_head_dim, else hidden // heads.
    "hunyuan": dict(rope_theta=10000.0, max_position_embeddings=2048, hidden_size=4096, num_attention_heads=32),
}

# Pairing in each family's modeling code: rotate_half (half_split) unless listed. Interleaved:
# GPT-J's rotate_every_two; Cohere's and GLM's rotate_half on x[..., ::2], x[..., 1::2]; DeepSeek-V2's
# view_as_complex and V3's rope_interleave; Llama 4's complex freqs_cis over reshape(..., -1, 2).
# ERNIE 4.5 and Helium: GLM's rotate_half on x[..., 0::2], x[..., 1::2] (GLM-4.5, glm4_moe, is rotate_half).
INTERLEAVED = {"gptj", "codegen", "cohere", "cohere2", "glm", "glm4", "deepseek_v2", "deepseek_v3", "llama4_text",
               "ernie4_5", "ernie4_5_moe", "helium", "kimi_k2",
               "glm4v_text", "glm_ocr_text", "longcat_flash"}  # GLM-4.1V / OCR: rotate_half_llm on 0::2, 1::2
# Layer types whose layers carry no RoPE, and the RoPE layer type used by default.
NOPE = {"llama4_text": ("full_attention", "chunked_attention"), "qwen3_next": ("linear_attention", "full_attention"),
        "lfm2": ("conv", "full_attention"), "minimax": ("linear_attention", "full_attention"),
        "qwen3_5_text": ("linear_attention", "full_attention"),
        "exaone4": ("full_attention", "sliding_attention")}  # exaone4: hybrid (sliding_window set) models
# No layer rotates: (why, a fragment of rotary's message).
ALL_NOPE = {"granitemoehybrid": lambda c: c.get("position_embedding_type") != "rope",
            "kimi_linear": lambda c: bool(c.get("mla_use_nope"))}
COMPOSITE_TEXT = {"gemma3": "gemma3_text", "gemma4": "gemma4_text", "llama4": "llama4_text", "qwen3_vl": "qwen3_vl_text",
                  "llava": "llama", "glm4v": "glm4v_text", "qwen3_5": "qwen3_5_text", "mistral3": "ministral3"}


def text_config(cfg):
    if cfg.get("text_config") is not None:
        tc = dict(cfg["text_config"])
        tc.setdefault("model_type", COMPOSITE_TEXT.get(cfg.get("model_type"), cfg.get("model_type")))
        return tc
    return cfg


def yarn_full(d, b, s, L0, beta_fast, beta_slow, truncate, mscale, mscale_all_dim, attention_factor):
    corr = lambda r: d * math.log(L0 / (r * 2 * math.pi)) / (2 * math.log(b))
    low, high = corr(beta_fast), corr(beta_slow)
    if truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, d - 1)
    if low == high:
        high += 0.001
    out = []
    for i, x in enumerate(inv(d, b)):
        ramp = min(max((i - low) / (high - low), 0.0), 1.0)
        out.append((x / s) * ramp + x * (1 - ramp))
    m = lambda k: 1.0 if s <= 1 else 0.1 * k * math.log(s) + 1.0
    if attention_factor is not None:
        af = attention_factor
    elif mscale and mscale_all_dim:
        af = m(mscale) / m(mscale_all_dim)
    else:
        af = m(1.0)
    return out, af


def resolve_v4(c, layer_type):
    """DeepseekV4Config / modeling_deepseek_v4.py: RoPE on int(head_dim * f) values of each head (f:
    partial_rotary_factor, else qk_rope_head_dim / head_dim, else 64 / 512), adjacent pairs. Its
    sliding_attention layers: default RoPE at rope_theta (1e4). The compressed ones: the flat rope_scaling
    at compress_rope_theta (160000), YaRN's attention factor fixed at 1."""
    head = c.get("head_dim") or 512
    f = c.get("partial_rotary_factor") or (c["qk_rope_head_dim"] / head if c.get("qk_rope_head_dim") else 64 / 512)
    d = int(head * f)
    if layer_type == "sliding_attention":
        theta, rope_type, freqs, af = c.get("rope_theta") or 1e4, "default", None, 1.0
    else:
        # The compressed layers' dict: compress_rope_parameters as transformers 5 writes it (the flat
        # rope_parameters with compress_rope_theta), else the flat rope_scaling / rope_parameters.
        rs = c.get("compress_rope_parameters") or c.get("rope_scaling") or c.get("rope_parameters") or {}
        theta = rs.get("rope_theta") or c.get("compress_rope_theta") or 160000.0
        rope_type = rs.get("rope_type", rs.get("type", "default"))
        assert rope_type == "yarn", rope_type
        freqs, _ = yarn_full(d, theta, rs["factor"], rs["original_max_position_embeddings"], rs.get("beta_fast") or 32,
                             rs.get("beta_slow") or 1, rs.get("truncate", True), None, None, None)
        af = 1.0
    return {"layer_type": layer_type, "rope_type": rope_type, "head_dim": d, "rotary_dim": d, "pairing": "interleaved",
            "rope_theta": float(theta), "attention_factor": af, "softmax_scale_factor": 1.0, "mrope_section": [],
            "mrope_interleaved": False, "inv_freq": freqs or inv(d, theta)}


def resolve_py(cfg, layer_type=None, seq_len=None):
    c = text_config(cfg)
    mt = c.get("model_type", "")
    if mt == "deepseek_v4":
        return resolve_v4(c, layer_type or "compressed_sparse_attention")
    dflt = CLASS_DEFAULTS[mt]
    get = lambda k: c[k] if c.get(k) is not None else dflt.get(k)
    # head_dim: MLA's rope slice, else `head_dim or hidden_size // num_attention_heads` (aliases n_embd, n_head)
    if mt == "hunyuan":  # hunyuan.py: self.head_dim = config.attention_head_dim
        head_dim = c.get("attention_head_dim") or get("hidden_size") // get("num_attention_heads")
    elif get("qk_rope_head_dim"):
        head_dim = get("qk_rope_head_dim")
    else:
        hidden = get("hidden_size") or get("n_embd")
        heads = get("num_attention_heads") or get("n_head")
        head_dim = c.get("head_dim", dflt.get("head_dim")) or hidden // heads
    nope, rope_layer = NOPE.get(mt, (None, "full_attention"))
    layer_type = layer_type or rope_layer
    assert layer_type != nope
    rs = c["rope_scaling"] if "rope_scaling" in c else dflt.get("rope_scaling")
    rp = c.get("rope_parameters")
    nested = isinstance(rp, dict) and rp and all(isinstance(v, dict) for v in rp.values())
    flat = isinstance(rp, dict) and rp and not nested
    if nested:  # transformers 5: one complete dict per layer type
        rs = rp[layer_type]
    elif flat and "rope_scaling" not in c:  # transformers 5's one dict, rope_theta inside
        rs = rp
    rs = dict(rs or {})
    rope_type = rs.get("rope_type", rs.get("type", "default"))
    rope_type = {"mrope": "default", "su": "longrope"}.get(rope_type, rope_type)
    theta = rs.get("rope_theta") if (nested or flat) else None
    if theta is None and nested and layer_type == "sliding_attention":
        theta = get("rope_theta") or dflt.get("rope_local_base_freq")
    theta = theta or get("rope_theta") or get("rotary_emb_base") or 10000.0
    if mt == "lfm2" and c.get("theta") is not None:  # Lfm2Config: kwargs.get("theta", rope_theta)
        theta = c["theta"]
    if mt == "gemma4_text" and layer_type == "full_attention":  # head_dim_key="global_head_dim"
        head_dim = get("global_head_dim")
    local = get("rope_local_base_freq")
    if layer_type == "sliding_attention" and local and not nested:  # Gemma-3's rotary_emb_local: default RoPE
        rope_type, theta, rs = "default", local, {}
    if layer_type == "sliding_attention" and mt == "olmo3":  # Olmo3RotaryEmbedding(config, rope_type="default")
        rope_type, rs = "default", {}
    if rope_type == "dynamic" and rs.get("alpha"):  # HunYuan: base * alpha ** (dim / (dim - 2)), no growth
        rope_type = "ntk"
    prf = get("partial_rotary_factor") or rs.get("partial_rotary_factor") or get("rotary_pct") or 1.0
    rotary_dim = head_dim if rope_type == "proportional" else (get("rotary_dim") or int(head_dim * prf))
    if mt == "minimax":  # MiniMaxRotaryEmbedding: the whole head, neither rotary_dim nor partial_rotary_factor
        rotary_dim = head_dim
    L = get("max_position_embeddings") or get("n_positions")
    d = rotary_dim
    af = 1.0
    if rope_type == "default":
        f = inv(d, theta)
    elif rope_type == "proportional":  # _compute_proportional_rope_parameters: zeros past the rotated angles
        angles = int(prf * head_dim // 2)
        f = [math.pow(theta, -(2 * i) / head_dim) / rs.get("factor", 1.0) for i in range(angles)]
        f += [0.0] * (head_dim // 2 - angles)
    elif rope_type == "ntk":
        f = inv(d, theta * math.pow(rs["alpha"], d / (d - 2)))
    elif rope_type == "linear":
        f = [x / rs["factor"] for x in inv(d, theta)]
    elif rope_type == "llama3":
        lo, hi, L0, s = rs["low_freq_factor"], rs["high_freq_factor"], rs["original_max_position_embeddings"], rs["factor"]
        f = []
        for x in inv(d, theta):  # torch.where(wavelen > L0/lo, x/s, x), then the medium band if any
            wl = 2 * math.pi / x
            y = x / s if wl > L0 / lo else x
            if not (wl < L0 / hi) and not (wl > L0 / lo):
                sm = (L0 / wl - lo) / (hi - lo)
                y = (1 - sm) * y / s + sm * y
            f.append(y)
    elif rope_type == "yarn":
        L0 = rs.get("original_max_position_embeddings") or L
        s = rs.get("factor") or L / L0
        f, af = yarn_full(d, theta, s, L0, rs.get("beta_fast") or 32, rs.get("beta_slow") or 1,
                          rs.get("truncate", True), rs.get("mscale"), rs.get("mscale_all_dim"),
                          rs.get("attention_factor"))
    elif rope_type == "longrope":
        L0 = get("original_max_position_embeddings") or rs.get("original_max_position_embeddings") or L
        s = L / L0 if get("original_max_position_embeddings") else (rs.get("factor") or L / L0)
        ext = rs["long_factor"] if (seq_len or 0) > L0 else rs["short_factor"]
        f = [x / e for x, e in zip(inv(d, theta), ext)]
        af = rs.get("attention_factor") or (1.0 if s <= 1 else math.sqrt(1 + math.log(s) / math.log(L0)))
    else:
        raise ValueError(rope_type)
    pairing = "interleaved" if (mt in INTERLEAVED and c.get("rope_interleave", True)) else "half_split"
    softmax = 1.0
    if mt in ("deepseek_v2", "deepseek_v3", "kimi_k2", "longcat_flash") and rope_type != "default" and rs.get("mscale_all_dim"):
        m = 0.1 * rs["mscale_all_dim"] * math.log(rs["factor"]) + 1.0
        softmax = m * m
    return {"layer_type": layer_type, "rope_type": rope_type, "head_dim": head_dim, "rotary_dim": rotary_dim,
            "pairing": pairing, "rope_theta": float(theta), "attention_factor": af, "softmax_scale_factor": softmax,
            "mrope_section": rs.get("mrope_section", []), "mrope_interleaved": bool(rs.get("mrope_interleaved", False)),
            "inv_freq": f}


def expectations_of(cfg):
    """The runs check_inspect makes for one config: its default layer type, the other layer types it has,
    and a long sequence for LongRoPE."""
    mt = text_config(cfg).get("model_type")
    if mt in ALL_NOPE and ALL_NOPE[mt](text_config(cfg)):
        return [{"args": [], "exit_status": 1, "message": "NoPE on every layer"}]
    runs = [dict(args=[], **resolve_py(cfg))]
    if mt in ("gemma3_text", "gemma2", "gpt_oss", "olmo3", "gemma4_text", "deepseek_v4"):  # sliding-window layers
        runs.append(dict(args=["--layer-type", "sliding_attention"], **resolve_py(cfg, "sliding_attention")))
    if mt in NOPE:
        runs.append({"args": ["--layer-type", NOPE[mt][0]], "exit_status": 1, "message": "NoPE"})
    if any(r.get("rope_type") == "longrope" for r in runs):
        runs.append(dict(args=["--seq-len", "131072"], **resolve_py(cfg, seq_len=131072)))
    return runs


def published_expectations():
    """configs/published (verbatim files) and configs/families (configs written for the families no
    published file here covers), by file name."""
    out = {}
    for folder in ("published", "families"):
        pub = os.path.join(HERE, "configs", folder)
        for fn in sorted(f for f in os.listdir(pub) if f.endswith(".json")):
            out[fn[:-5]] = expectations_of(json.load(open(os.path.join(pub, fn))))
    return out


if __name__ == "__main__" and len(sys.argv) > 1:
    path = os.path.join(HERE, "published_expected.json")
    text = json.dumps(published_expectations(), indent=1, sort_keys=True) + "\n"
    if sys.argv[1] == "--write":
        open(path, "w").write(text)
    elif open(path).read() != text:
        sys.exit("published_expected.json is out of date: python3 tests/inspect/derive_expected.py --write")
