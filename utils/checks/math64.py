"""Float64 oracles that several sections' checks share (see utils/checks/oracle.py)."""
from __future__ import annotations

import math

import torch

from .oracle import oracle


@oracle
def rms_norm(x, w, eps, dims=(-1,), denom=None, sqrt=True, eps_inside=True, center=False):
    """RMSNorm and its misconceptions (the reduction dims, a denominator other than D — given as
    the string "D-1", or "1": the sum of squares —, no square root, eps outside the root, centring first)."""
    x = x.double()
    if center:
        x = x - x.mean(dim=dims, keepdim=True)
    n = math.prod(x.size(d) for d in dims)
    ms = x.pow(2).sum(dim=dims, keepdim=True) / {"D-1": n - 1, "1": 1}.get(denom, n)
    if not sqrt:
        return x / (ms + eps) * w
    if eps_inside:
        return x / torch.sqrt(ms + eps) * w
    return x / (torch.sqrt(ms) + eps) * w


@oracle
def rope_angles(T: int, head_dim: int, base: float, exponent: str = "-2i/d", start: int = 0) -> torch.Tensor:
    """angle[m, i] = (m + start) · base^(exponent(i)) in float64. ``exponent`` names the formula:
    "-2i/d" (RoPE's), or a misconception's: "-i/d" (the pair index without its factor 2), "+2i/d"
    (the sign lost: frequencies grow), "linspace" (exponents spread evenly over [0, -1])."""
    i = torch.arange(head_dim // 2, dtype=torch.float64)                    # (d/2,)
    power = {"-2i/d": -2 * i / head_dim, "-i/d": -i / head_dim, "+2i/d": 2 * i / head_dim,
             "linspace": -i / max(head_dim // 2 - 1, 1)}[exponent]          # (d/2,)
    m = torch.arange(start, start + T, dtype=torch.float64)                 # (T,)
    return m[:, None] * base ** power[None, :]                              # (T, d/2)


@oracle
def rotate_pairs(x1, x2, angles):
    """Each pair (x1, x2) rotated by its angle: (x1 cos − x2 sin, x1 sin + x2 cos)."""
    cos, sin = angles.cos(), angles.sin()                                   # (T, d/2)
    return x1 * cos - x2 * sin, x1 * sin + x2 * cos                         # (..., T, d/2) each


@oracle
def rotate_half(x, angles):
    """RoPE in the rotate-half layout: pairs (i, i + d/2), in float64."""
    x, angles = x.double(), angles.double()
    h = x.size(-1) // 2
    y1, y2 = rotate_pairs(x[..., :h], x[..., h:], angles)
    return torch.cat([y1, y2], dim=-1)                                      # (..., T, d)


@oracle
def rotate_interleaved(x, angles):
    """RoPE in the RoFormer layout: pairs (2i, 2i + 1), in float64."""
    x, angles = x.double(), angles.double()
    y1, y2 = rotate_pairs(x[..., 0::2], x[..., 1::2], angles)
    return torch.stack([y1, y2], dim=-1).flatten(-2)                        # (..., T, d)
