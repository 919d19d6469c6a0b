"""rotary from PyTorch: exact RoPE on CPU tensors, differentiable in x, theta and alpha/rho.

    import rotary_torch                       # from examples/torch: builds the extension on first use
    rope = rotary_torch.Rope(128, base=500000.0)
    q_out, k_out = rope.apply_qk(q, k, positions)

The C++ half (rotary_torch.cpp) is built by `python3 setup.py build_ext --inplace` in this folder, or
else just in time by torch.utils.cpp_extension (cached under ~/.cache/torch_extensions).
"""
import json
import os

import torch

_HERE = os.path.dirname(os.path.abspath(__file__))
_ROOT = os.path.dirname(os.path.dirname(_HERE))


def _load():
    try:
        import rotary_torch_ext  # built in place by setup.py
        return rotary_torch_ext
    except ImportError:
        from torch.utils.cpp_extension import load
        return load(name="rotary_torch_ext", sources=[os.path.join(_HERE, "rotary_torch.cpp")],
                    extra_include_paths=[os.path.join(_ROOT, "include"), "/usr/include/eigen3"],
                    extra_cflags=["-O2", "-std=c++17"], verbose=False)


_C = _load()
_PAIRINGS = ("half_split", "interleaved")


def _check_pairing(pairing):
    if pairing not in _PAIRINGS:
        raise ValueError('pairing must be "half_split" or "interleaved", not %r' % (pairing,))


class _ApplyFn(torch.autograd.Function):
    """y = R(positions) x; dL/dx = R(positions)^T dL/dy (the inverse rotation)."""

    @staticmethod
    def forward(ctx, x, positions, crope, inverse):
        ctx.crope, ctx.inverse = crope, inverse
        ctx.save_for_backward(positions)
        return crope.apply(x, positions, inverse)

    @staticmethod
    def backward(ctx, dy):
        (positions,) = ctx.saved_tensors
        return ctx.crope.apply(dy.contiguous(), positions, not ctx.inverse), None, None, None


class _ApplyQkFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, positions, crope):
        ctx.crope = crope
        ctx.save_for_backward(positions)
        return tuple(crope.apply_qk(q, k, positions, False))

    @staticmethod
    def backward(ctx, dq, dk):
        (positions,) = ctx.saved_tensors
        gq, gk = ctx.crope.apply_qk(dq.contiguous(), dk.contiguous(), positions, True)
        return gq, gk, None, None


class Rope:
    """RoPE of head_dim (rotating rotary_dim of it, all by default) at base, pairing "half_split" (GPT-NeoX,
    HF's rotate_half) or "interleaved" (GPT-J, Meta's complex form). max_positions=None: cache-free, exact
    cos/sin at any position; an int: a cos/sin table of that many positions (a position outside it raises)."""

    def __init__(self, head_dim, base=10000.0, pairing="half_split", rotary_dim=None, max_positions=None):
        _check_pairing(pairing)
        self._c = _C._Rope(int(head_dim), float(base), pairing, int(rotary_dim or 0), int(max_positions or 0))

    @classmethod
    def from_hf_config(cls, config, max_positions=None, layer_type=""):
        """A model's RoPE from its config.json (a path, or the parsed dict), read as transformers reads it."""
        if isinstance(config, (str, os.PathLike)):
            with open(config) as f:
                text = f.read()
        else:
            text = json.dumps(config)
        self = cls.__new__(cls)
        self._c = _C._rope_from_hf_config(text, int(max_positions or 0), layer_type)
        return self

    head_dim = property(lambda self: self._c.head_dim)
    rotary_dim = property(lambda self: self._c.rotary_dim)
    pairing = property(lambda self: self._c.pairing)

    def theta(self):
        """theta_j (float64), rotary_dim / 2 of them."""
        return self._c.theta()

    def apply(self, x, positions, inverse=False):
        """x: [tokens, heads, head_dim] or [batch, tokens, heads, head_dim]; positions: int32/int64 [tokens] or
        [batch, tokens]. A new tensor; differentiable in x."""
        return _ApplyFn.apply(x, positions, self._c, bool(inverse))

    def apply_qk(self, q, k, positions):
        """q and k (any head counts: MHA, GQA, MQA) in one call: (q_out, k_out)."""
        return _ApplyQkFn.apply(q, k, positions, self._c)


class _LearnedFn(torch.autograd.Function):
    """q, k rotated with a spec whose frequencies depend on parameters: dL/dtheta* from rotary's
    theta_gradient, then mapped to the parameters by `to_params`."""

    @staticmethod
    def forward(ctx, q, k, positions, crope, to_params, *params):
        ctx.crope, ctx.to_params = crope, to_params
        q_out, k_out = crope.apply_qk(q, k, positions, False)
        ctx.save_for_backward(positions, q_out, k_out)
        return q_out, k_out

    @staticmethod
    def backward(ctx, dq, dk):
        positions, q_out, k_out = ctx.saved_tensors
        dq, dk = dq.contiguous(), dk.contiguous()
        gq, gk = ctx.crope.apply_qk(dq, dk, positions, True)
        g_theta = ctx.crope.theta_grad([q_out, k_out], [dq, dk], positions)
        return (gq, gk, None, None, None) + tuple(ctx.to_params(ctx.crope, g_theta))


class AlphaRhoRope(torch.nn.Module):
    """The alpha/rho receptive-field variant, theta*_j = alpha / base^rho + (1 - alpha) theta_j, with alpha and
    rho as nn.Parameters (learnable=False: buffers). Gradients come from rotary's own gradient code."""

    def __init__(self, head_dim, base=10000.0, alpha=0.5, rho=1.0, learnable=True, pairing="half_split"):
        super().__init__()
        _check_pairing(pairing)
        self.head_dim, self.base, self.pairing = int(head_dim), float(base), pairing
        a = torch.tensor(float(alpha), dtype=torch.float64)
        r = torch.tensor(float(rho), dtype=torch.float64)
        if learnable:
            self.alpha, self.rho = torch.nn.Parameter(a), torch.nn.Parameter(r)
        else:
            self.register_buffer("alpha", a)
            self.register_buffer("rho", r)

    @staticmethod
    def _to_params(crope, g_theta):
        d_alpha, d_rho = crope.receptive_field_grad(g_theta)
        return (torch.tensor(d_alpha, dtype=torch.float64), torch.tensor(d_rho, dtype=torch.float64))

    def rotate(self, q, k, positions, alpha, rho):
        """forward() with the given alpha and rho (0-d float64 tensors), differentiable in them."""
        crope = _C._Rope(self.head_dim, self.base, self.pairing, 0, 0, None, float(alpha), float(rho))
        return _LearnedFn.apply(q, k, positions, crope, self._to_params, alpha, rho)

    def forward(self, q, k, positions):
        return self.rotate(q, k, positions, self.alpha, self.rho)


class LearnableRope(torch.nn.Module):
    """theta_j as an nn.Parameter (float64, rotary_dim / 2 of them, starting at base^(-2j/d)); dL/dtheta from
    rotary's theta_gradient."""

    def __init__(self, head_dim, base=10000.0, pairing="half_split"):
        super().__init__()
        _check_pairing(pairing)
        self.head_dim, self.base, self.pairing = int(head_dim), float(base), pairing
        self.theta = torch.nn.Parameter(_C._Rope(self.head_dim, self.base, pairing, 0, 0).theta())

    def rotate(self, q, k, positions, theta):
        """forward() with the given theta (float64, rotary_dim / 2), differentiable in it."""
        crope = _C._Rope(self.head_dim, self.base, self.pairing, 0, 0, theta.detach().tolist())
        return _LearnedFn.apply(q, k, positions, crope, lambda c, g: (g,), theta)

    def forward(self, q, k, positions):
        return self.rotate(q, k, positions, self.theta)
