# Generated from solutions/09_rope/09_rope.ipynb
# by `python3 course.py build`. Do not edit: edit the notebook.
"""Reference implementations of section 09_rope (the solution cells of its notebook)."""
import math

import torch

__all__ = ['rope_angles', 'apply_rope', 'apply_rope_interleaved', 'quiz_rope']


def rope_angles(T, head_dim, base=10000.0):
    """RoPE angles for positions 0 … T-1: a [T, head_dim // 2] tensor, angle[m, i] = m · base^(-2i/head_dim)."""
    i = torch.arange(head_dim // 2, dtype=torch.float32)      # (Dh/2,) pair index
    theta = base ** (-2 * i / head_dim)                         # (Dh/2,) frequencies, 1 … ≈1/base
    m = torch.arange(T, dtype=torch.float32)                    # (T,) positions
    return m[:, None] * theta[None, :]                          # (T, 1) * (1, Dh/2) -> (T, Dh/2)


def apply_rope(x, angles):
    """Rotate-half RoPE: rotate each pair (x[..., i], x[..., i + Dh/2]) by angles[:, i].

    x: (..., T, Dh); angles: (T, Dh/2) -> (..., T, Dh).
    """
    half = x.size(-1) // 2
    x1, x2 = x[..., :half], x[..., half:]                       # (..., T, Dh/2) each
    cos, sin = angles.cos(), angles.sin()                       # (T, Dh/2) each, broadcast over ...
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)   # (..., T, Dh)


def apply_rope_interleaved(x, angles):
    """RoFormer-layout RoPE: rotate each pair (x[..., 2i], x[..., 2i + 1]) by angles[:, i].

    x: (..., T, Dh); angles: (T, Dh/2) -> (..., T, Dh).
    """
    x1, x2 = x[..., 0::2], x[..., 1::2]                                   # (..., T, Dh/2) each: even, odd dims
    cos, sin = angles.cos(), angles.sin()                                 # (T, Dh/2) each
    out = torch.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)  # (..., T, Dh/2, 2)
    return out.flatten(-2)                                                # (..., T, Dh): pairs interleaved back


def quiz_rope():
    """Numeric self-test of section 09 (head_dim Dh = 64, base = 10000).

    n_pairs:      how many 2-D pairs (frequencies) one head's q has
    angle:        the angle (radians) of pair i = 8 at position m = 5
    period:       how many positions pair i = 16 needs for one full turn
    pi_position:  position interpolation from L_train = 4096 to L_new = 16384: where position 10000 lands
    rotate_v:     does RoPE rotate V? (True / False)
    cached_angle: 200 positions cached, 4 new tokens: angle[m, 8] of the last new token (graded by the hidden test)
    """
    n_pairs = 64 // 2                               # Dh / 2
    angle = 5 * 10000 ** (-2 * 8 / 64)              # m · base^(-2i/Dh) = 5 · 10000^(-1/4) = 0.5
    period = 2 * math.pi * 10000 ** (2 * 16 / 64)   # 2π / θ_16 = 2π · 100
    pi_position = 10000 * 4096 / 16384              # m · L_train / L_new = 2500
    rotate_v = False                                # only q and k are rotated
    cached_angle = (200 + 3) * 10000 ** (-2 * 8 / 64)   # the new tokens sit at 200 … 203: m = 203
    return {"n_pairs": n_pairs, "angle": angle, "period": period, "pi_position": pi_position,
            "rotate_v": rotate_v, "cached_angle": cached_angle}
