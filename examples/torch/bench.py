"""rotary_torch against the pure-PyTorch HF form (rotate_half with cos/sin tables) on CPU, one thread, in one
process: python3 examples/torch/bench.py. Times are medians of repeated runs; the ratio is HF / rotary."""
import os
import platform
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import rotary_torch  # noqa: E402


def hf_rope(x, cos, sin):  # transformers' apply_rotary_pos_emb with its cached cos/sin, [t, h, d]
    h = x.shape[-1] // 2
    return x * cos + torch.cat([-x[..., h:], x[..., :h]], -1) * sin


def median_time(f, reps):
    f()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        f()
        ts.append(time.perf_counter() - t0)
    ts.sort()
    return ts[len(ts) // 2]


def cpu_name():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def main():
    torch.set_num_threads(1)
    print("rotary_torch vs the HF form, 1 thread, torch %s, %s" % (torch.__version__, cpu_name()))
    rope = rotary_torch.Rope(128, base=10000.0)
    theta = rope.theta()
    for tokens in (1, 512):
        pos = torch.arange(tokens) + 1000
        ang = pos.double()[:, None] * theta[None, :]
        for dtype in (torch.float32, torch.bfloat16):
            x = torch.randn(tokens, 32, 128).to(dtype)
            cos = torch.cat([ang.cos(), ang.cos()], -1)[:, None, :].to(dtype)
            sin = torch.cat([ang.sin(), ang.sin()], -1)[:, None, :].to(dtype)
            reps = 2000 if tokens == 1 else 50
            t_hf = median_time(lambda: hf_rope(x, cos, sin), reps)
            with torch.no_grad():
                t_rot = median_time(lambda: rope.apply(x, pos), reps)
            print("  %4d tok x 32 x 128 %-9s  HF %9.1f us  rotary %9.1f us  HF / rotary %5.2f" %
                  (tokens, str(dtype).replace("torch.", ""), t_hf * 1e6, t_rot * 1e6, t_hf / t_rot))


if __name__ == "__main__":
    main()
