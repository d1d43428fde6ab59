# Generated from solutions/03_single_head_attention/03_single_head_attention.ipynb
# by `python3 course.py build`. Do not edit: edit the notebook.
"""Reference implementations of section 03_single_head_attention (the solution cells of its notebook)."""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

__all__ = ['attention', 'Head']


def attention(q, k, v, mask=None):
    """Scaled dot-product attention: softmax(q kᵀ / √D) v.

    q: (..., Tq, D), k: (..., Tk, D), v: (..., Tk, Dv); mask: bool, broadcastable to
    (..., Tq, Tk), True = may attend. Returns (out (..., Tq, Dv), weights (..., Tq, Tk)).
    """
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))  # (..., Tq, D) @ (..., D, Tk) -> (..., Tq, Tk)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))     # hidden keys get -inf -> weight exactly 0
    weights = F.softmax(scores, dim=-1)                        # (..., Tq, Tk), each row sums to 1
    out = weights @ v                                          # (..., Tq, Tk) @ (..., Tk, Dv) -> (..., Tq, Dv)
    return out, weights


class Head(nn.Module):
    """One head of causal self-attention (the book's src/models/attention.py).

    x: (B, T, n_embed) -> (B, T, head_size); position t attends to positions 0..t only.
    """

    def __init__(self, head_size, n_embed, context_length):
        super().__init__()
        self.key = nn.Linear(n_embed, head_size, bias=False)    # Key projection
        self.query = nn.Linear(n_embed, head_size, bias=False)  # Query projection
        self.value = nn.Linear(n_embed, head_size, bias=False)  # Value projection
        # Lower triangular matrix for causal masking: moves with the module, not trained
        self.register_buffer("tril", torch.tril(torch.ones(context_length, context_length)))

    def forward(self, x):
        B, T, C = x.shape
        k = self.key(x)    # (B, T, head_size)
        q = self.query(x)  # (B, T, head_size)
        v = self.value(x)  # (B, T, head_size)
        scale_factor = 1 / math.sqrt(k.size(-1))
        attn_weights = q @ k.transpose(-2, -1) * scale_factor  # (B, T, hs) @ (B, hs, T) -> (B, T, T)
        attn_weights = attn_weights.masked_fill(self.tril[:T, :T] == 0, float("-inf"))  # future -> -inf
        attn_weights = F.softmax(attn_weights, dim=-1)          # (B, T, T)
        return attn_weights @ v                                  # (B, T, T) @ (B, T, hs) -> (B, T, hs)
