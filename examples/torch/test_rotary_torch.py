"""rotary_torch against pure-PyTorch references, gradcheck, exact angles, configs, training, refusals.
Run: python3 -m pytest examples/torch (ctest runs it when python3-torch is installed)."""
import glob
import json
import os
import subprocess

import pytest
import torch

import rotary_torch

HERE = os.path.dirname(os.path.abspath(__file__))
PUBLISHED = os.path.join(HERE, "..", "..", "tests", "inspect", "configs", "published")


def hf_rotate_half(x, pos, theta):  # transformers' apply_rotary_pos_emb, angles in float64
    ang = pos.double()[:, None] * theta[None, :]
    cos = torch.cat([ang.cos(), ang.cos()], -1)[:, None, :]
    sin = torch.cat([ang.sin(), ang.sin()], -1)[:, None, :]
    h = x.shape[-1] // 2
    rot = torch.cat([-x[..., h:], x[..., :h]], -1)
    return x * cos + rot * sin


def gptj_every_two(x, pos, theta):  # GPT-J's rotate_every_two, angles in float64
    ang = pos.double()[:, None] * theta[None, :]
    cos = ang.cos().repeat_interleave(2, -1)[:, None, :]
    sin = ang.sin().repeat_interleave(2, -1)[:, None, :]
    rot = torch.stack([-x[..., 1::2], x[..., ::2]], -1).flatten(-2)
    return x * cos + rot * sin


def ulps(a, b, per_element):
    """|a - b| in units of the last place of b's dtype: at each element's magnitude (per_element), else at the
    largest magnitude of its head (what a float computation a*cos - b*sin can promise near cancellation)."""
    eps = torch.finfo(b.dtype).eps
    scale = b.double().abs() if per_element else b.double().abs().amax(-1, keepdim=True)
    return ((a.double() - b.double()).abs() / (scale.clamp_min(1e-30) * eps)).max().item()


@pytest.mark.parametrize("pairing,ref", [("half_split", hf_rotate_half), ("interleaved", gptj_every_two)])
@pytest.mark.parametrize("dtype,max_ulps", [(torch.float64, 4 + 2 * 100), (torch.float32, 2), (torch.float16, 1),
                                            (torch.bfloat16, 1)])
def test_matches_the_pure_pytorch_forms(pairing, ref, dtype, max_ulps):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(7, 3, 64, generator=g, dtype=torch.float64)
    pos = torch.tensor([0, 1, 2, 5, 17, 64, 100])
    rope = rotary_torch.Rope(64, base=10000.0, pairing=pairing)
    x = x.to(dtype)
    want = ref(x.double(), pos, rope.theta())  # float64, angles m * theta rounded to double (|error| <= m ulps)
    got = rope.apply(x, pos)
    # float64: rotary's angles are exact, the reference's off by up to m/2 ulps (m <= 100); float32: a float
    # computation, within 2 ulps of the head's largest value; 16-bit: computed in float, rounded once, so
    # within one ulp of each element's own value.
    assert ulps(got, want.to(dtype), dtype in (torch.float16, torch.bfloat16)) <= max_ulps


def test_batched_rows_and_gqa_in_one_call():
    g = torch.Generator().manual_seed(2)
    q = torch.randn(2, 5, 8, 128, generator=g)
    k = torch.randn(2, 5, 2, 128, generator=g)
    pos = torch.arange(10).reshape(2, 5) * 7
    rope = rotary_torch.Rope(128, base=500000.0)
    q_out, k_out = rope.apply_qk(q, k, pos)
    for b in range(2):
        assert torch.equal(q_out[b], rope.apply(q[b], pos[b]))
        assert torch.equal(k_out[b], rope.apply(k[b], pos[b]))
    strided = q.transpose(1, 2).contiguous().transpose(1, 2)  # non-contiguous rows: copied once, same bits
    assert torch.equal(rope.apply(strided, pos), rope.apply(q, pos))


def test_gradcheck_x_theta_alpha_rho():
    g = torch.Generator().manual_seed(3)
    pos = torch.tensor([0, 3, 17, 250])
    rope = rotary_torch.Rope(16, pairing="interleaved", rotary_dim=12)
    x = torch.randn(4, 2, 16, generator=g, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: rope.apply(t, pos), (x,))
    q = torch.randn(4, 2, 16, generator=g, dtype=torch.float64, requires_grad=True)
    k = torch.randn(4, 1, 16, generator=g, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda a, b: rope.apply_qk(a, b, pos), (q, k))
    learn = rotary_torch.LearnableRope(16, base=100.0)
    th = learn.theta.detach().clone().requires_grad_()
    assert torch.autograd.gradcheck(lambda t: learn.rotate(q.detach(), k.detach(), pos, t), (th,))
    ar = rotary_torch.AlphaRhoRope(16, base=10000.0, alpha=0.3, rho=0.7)
    a = torch.tensor(0.3, dtype=torch.float64, requires_grad=True)
    r = torch.tensor(0.7, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda u, v: ar.rotate(q.detach(), k.detach(), pos, u, v), (a, r))


def test_exact_angles_at_position_2_pow_24():
    mpmath = pytest.importorskip("mpmath")
    mpmath.mp.prec = 200
    m = 2 ** 24 + 3
    rope = rotary_torch.Rope(128, base=10000.0)
    theta = rope.theta()
    x = torch.zeros(1, 1, 128, dtype=torch.float64)
    x[0, 0, :64] = 1.0  # rotating (1, 0) in each pair gives (cos, sin)
    got = rope.apply(x, torch.tensor([m]))[0, 0]
    exact = [float(mpmath.cos(mpmath.mpf(m) * mpmath.mpf(float(t)))) for t in theta]
    assert max(abs(got[j].item() - exact[j]) for j in range(64)) < 1e-15
    # HF / vLLM / ggml: float32(position) * float32(theta), cos in float32
    f32 = (torch.tensor(float(m), dtype=torch.float32) * theta.float()).cos().double()
    off = max(abs(f32[j].item() - exact[j]) for j in range(64))
    assert off > 0.5, "the float32-angle form is off by %g here (rotary: exact)" % off


@pytest.mark.parametrize("name", ["llama-3.1-8b-instruct", "qwen3-8b", "gpt-j-6b", "phi-2", "deepseek-v3"])
def test_from_hf_config_gives_rotarys_theta(name):
    path = os.path.join(PUBLISHED, name + ".json")
    expected = json.load(open(os.path.join(HERE, "..", "..", "tests", "inspect", "published_expected.json")))[name][0]
    for config in (path, json.load(open(path))):
        rope = rotary_torch.Rope.from_hf_config(config)
        assert rope.rotary_dim == expected["rotary_dim"] and rope.pairing == expected["pairing"]
        theta = rope.theta()
        # the independent derivation (derive_expected.py), to a few ulps of float64
        assert max(abs(a - b) / b for a, b in zip(theta.tolist(), expected["inv_freq"]) if b) < 1e-14


INSPECT = os.environ.get("ROTARY_INSPECT")  # the C++ tool (ctest passes it)


@pytest.mark.skipif(not INSPECT, reason="needs ROTARY_INSPECT, the rotary-inspect tool (ctest passes it)")
@pytest.mark.parametrize("name", ["llama-3.1-8b-instruct", "gpt-j-6b", "phi-2", "qwen3-next-80b-a3b-thinking"])
def test_from_hf_config_bit_for_bit_with_the_cpp_api(name):
    path = os.path.join(PUBLISHED, name + ".json")
    positions = [0, 1, 4097, 131071, 2 ** 24 + 1]
    out = json.loads(subprocess.check_output([INSPECT, path, "--positions", ",".join(map(str, positions))]))
    rope = rotary_torch.Rope.from_hf_config(path)
    assert rope.theta().tolist() == out["inv_freq"]  # theta_j, bit for bit (%.17g round-trips)
    assert out["attention_factor"] == 1
    half, d = rope.rotary_dim // 2, rope.head_dim
    x = torch.zeros(len(positions), 1, d, dtype=torch.float32)  # (1, 0) in every pair: R x = (cos, sin)
    first = slice(0, 2 * half, 2) if rope.pairing == "interleaved" else slice(0, half)
    second = slice(1, 2 * half, 2) if rope.pairing == "interleaved" else slice(half, 2 * half)
    x[..., first] = 1.0
    y = rope.apply(x, torch.tensor(positions))[:, 0]
    # the tool prints floats with 9 digits, which round-trip: compare as float32, bit for bit
    assert torch.equal(y[:, first], torch.tensor(out["cos"], dtype=torch.float32))
    assert torch.equal(y[:, second], torch.tensor(out["sin"], dtype=torch.float32))


def test_learnable_alpha_rho_train():
    """A relative-position task: match the attention scores of an unknown alpha/rho (0.7, 0.5) from a start
    at (0.2, 1.0). The loss falls and both parameters move toward the truth."""
    torch.manual_seed(0)
    pos = torch.arange(48)
    q = torch.randn(48, 2, 32, dtype=torch.float64)
    k = torch.randn(48, 1, 32, dtype=torch.float64)
    truth = rotary_torch.AlphaRhoRope(32, alpha=0.7, rho=0.5, learnable=False)

    def scores(module):
        qo, ko = module(q, k, pos)
        return torch.einsum("thd,sd->hts", qo, ko[:, 0]) / 32 ** 0.5

    target = scores(truth).detach()
    ar = rotary_torch.AlphaRhoRope(32, alpha=0.2, rho=1.0)
    opt = torch.optim.Adam(ar.parameters(), lr=0.03)
    losses = []
    for _ in range(60):
        loss = ((scores(ar) - target) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0], losses[::10]
    assert abs(ar.alpha.item() - 0.7) < abs(0.2 - 0.7) and abs(ar.rho.item() - 0.5) < abs(1.0 - 0.5)


def test_refusals_raise():
    rope = rotary_torch.Rope(64, max_positions=128)
    x = torch.randn(2, 4, 64)
    with pytest.raises(ValueError, match="outside"):
        rope.apply(x, torch.tensor([0, 128]))
    with pytest.raises(ValueError, match="head_dim"):
        rope.apply(torch.randn(2, 4, 32), torch.tensor([0, 1]))
    with pytest.raises(ValueError, match="int32 or int64"):
        rope.apply(x, torch.tensor([0.0, 1.0]))
    with pytest.raises(ValueError, match="float32"):
        rope.apply(x.int(), torch.tensor([0, 1]))
    with pytest.raises(ValueError, match="shape"):
        rope.apply(x, torch.tensor([0, 1, 2]))
    with pytest.raises(ValueError, match="CPU"):
        rope.apply(x.to("meta"), torch.tensor([0, 1]))
    with pytest.raises(ValueError, match="pairing"):
        rotary_torch.Rope(64, pairing="neox")
    with pytest.raises(ValueError, match="rotary_dim"):
        rotary_torch.Rope(64, rotary_dim=7)
    with pytest.raises(ValueError, match="base"):
        rotary_torch.Rope(64, base=-1.0)
