# Generated from solutions/02_scaling_and_softmax/02_scaling_and_softmax.ipynb
# by `python3 course.py build`. Do not edit: edit the notebook.
"""Reference implementations of section 02_scaling_and_softmax (the solution cells of its notebook)."""
import math

import torch

__all__ = ['dot_product_variance', 'scaled_attention_scores', 'softmax', 'softmax_jacobian']


def dot_product_variance(d, n_samples=100_000, generator=None):
    """Empirical variance of q·k for independent q, k ~ N(0, I_d).

    d: length of the vectors; n_samples: number of (q, k) pairs; generator: a
    torch.Generator passed to torch.randn (same seed -> same result). Returns a float.
    """
    q = torch.randn(n_samples, d, generator=generator)  # (n, d)
    k = torch.randn(n_samples, d, generator=generator)  # (n, d)
    dots = (q * k).sum(dim=-1)                          # (n,)  one q·k per sample
    return dots.var().item()


def scaled_attention_scores(q, k):
    """Scaled scores Q Kᵀ / √D: q (..., Tq, D), k (..., Tk, D) -> (..., Tq, Tk)."""
    scale = 1 / math.sqrt(q.size(-1))          # 1/√D, D = the length of the vectors being dotted
    return q @ k.transpose(-2, -1) * scale     # (..., Tq, D) @ (..., D, Tk) -> (..., Tq, Tk)


def softmax(x, dim=-1):
    """Numerically stable softmax of x along ``dim``, written by hand (no torch.softmax).

    Entries equal to -inf get weight exactly 0, as long as their slice has a finite entry.
    """
    shifted = x - x.amax(dim=dim, keepdim=True)  # largest entry of each slice becomes 0: exp never overflows
    e = shifted.exp()                            # -inf entries become exactly 0
    return e / e.sum(dim=dim, keepdim=True)      # each slice sums to 1 (denominator >= 1)


def softmax_jacobian(p):
    """Jacobian of softmax at its output p (shape [n]): J[i, j] = ∂p_i/∂z_j = p_i (δ_ij - p_j).

    Returns diag(p) - p pᵀ, shape [n, n].
    """
    return torch.diag(p) - torch.outer(p, p)  # (n, n)
