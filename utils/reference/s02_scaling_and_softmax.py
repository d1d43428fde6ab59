# Generated from solutions/02_scaling_and_softmax/02_scaling_and_softmax.ipynb by `python3 course.py build`. Do not edit: edit the notebook.
"""Reference implementations of section 02_scaling_and_softmax (the solution cells of its notebook)."""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

__all__ = ['dot_product_variance', 'scaled_attention_scores', 'softmax', 'softmax_jacobian']


def dot_product_variance(d, n_samples=100_000, generator=None):
    """Empirical variance of q·k for independent q, k ~ N(0, I_d), over n_samples pairs."""
    q = torch.randn(n_samples, d, generator=generator)  # (n, d)
    k = torch.randn(n_samples, d, generator=generator)  # (n, d)
    dots = (q * k).sum(dim=-1)                          # (n,)  one q·k per sample
    return dots.var().item()


def scaled_attention_scores(q, k):
    """Scaled scores Q Kᵀ / √D: q (..., Tq, D), k (..., Tk, D) -> (..., Tq, Tk)."""
    scale = 1 / math.sqrt(q.size(-1))
    return q @ k.transpose(-2, -1) * scale  # (..., Tq, Tk)


def softmax(x, dim=-1):
    """Numerically stable softmax along ``dim``, by hand (no torch.softmax)."""
    shifted = x - x.amax(dim=dim, keepdim=True)  # largest entry becomes 0: exp never overflows
    e = shifted.exp()                            # -inf entries become exactly 0
    return e / e.sum(dim=dim, keepdim=True)


def softmax_jacobian(p):
    """Jacobian of softmax at output p (shape [n]): J[i, j] = ∂p_i/∂z_j = diag(p) - p pᵀ."""
    return torch.diag(p) - torch.outer(p, p)  # (n, n)
