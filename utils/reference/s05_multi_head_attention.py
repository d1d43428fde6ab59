# Generated from solutions/05_multi_head_attention/05_multi_head_attention.ipynb
# by `python3 course.py build`. Do not edit: edit the notebook.
"""Reference implementations of section 05_multi_head_attention (the solution cells of its notebook)."""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

__all__ = ['MultiHeadAttention', 'split_heads', 'merge_heads', 'CausalSelfAttention', 'copy_heads_into',
    'quiz_head_width', 'quiz_attention_memory']


from .s03_single_head_attention import Head  # the single head of section 03


class MultiHeadAttention(nn.Module):
    """the book's loop version: n_head independent Heads, concatenated, then an output projection.

    x: (B, T, n_embed) -> (B, T, n_embed); each head has width n_embed // n_head and is causal.
    """

    def __init__(self, n_embed, n_head, context_length):
        super().__init__()
        self.heads = nn.ModuleList([Head(n_embed // n_head, n_embed, context_length) for _ in range(n_head)])
        self.proj = nn.Linear(n_embed, n_embed)

    def forward(self, x):
        # Concatenate the output of each head along the last dimension (C)
        x = torch.cat([h(x) for h in self.heads], dim=-1)  # H × (B, T, C/H) -> (B, T, C)
        # Apply final linear projection
        return self.proj(x)                                # (B, T, C)


def split_heads(x, n_head):
    """[B, T, C] -> [B, H, T, C // H]; head h gets channels [h·Dh, (h+1)·Dh)."""
    B, T, C = x.shape
    return x.view(B, T, n_head, C // n_head).transpose(1, 2)  # (B, T, H, Dh) -> (B, H, T, Dh)


def merge_heads(x):
    """[B, H, T, Dh] -> [B, T, H·Dh], the inverse of split_heads."""
    B, H, T, Dh = x.shape
    return x.transpose(1, 2).reshape(B, T, H * Dh)  # (B, T, H, Dh) -> (B, T, C)


class CausalSelfAttention(nn.Module):
    """All heads at once: one fused qkv projection, [B, H, T, Dh] tensors, no loop over heads.

    x: (B, T, n_embed) -> (B, T, n_embed); qkv's output is [q | k | v], each n_embed wide.
    """

    def __init__(self, n_embed, n_head, context_length):
        super().__init__()
        assert n_embed % n_head == 0, "n_embed must be divisible by n_head"
        self.n_head = n_head
        self.qkv = nn.Linear(n_embed, 3 * n_embed, bias=False)  # output [q | k | v]
        self.proj = nn.Linear(n_embed, n_embed)
        self.register_buffer("tril", torch.ones(context_length, context_length, dtype=torch.bool).tril())

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=-1)                           # 3 × (B, T, C)
        q, k, v = split_heads(q, self.n_head), split_heads(k, self.n_head), split_heads(v, self.n_head)  # (B, H, T, Dh)
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))        # (B, H, T, T), scale 1/√Dh
        scores = scores.masked_fill(~self.tril[:T, :T], float("-inf"))  # (T, T) mask broadcast over B, H
        weights = F.softmax(scores, dim=-1)                              # (B, H, T, T)
        y = merge_heads(weights @ v)                                     # (B, H, T, Dh) -> (B, T, C)
        return self.proj(y)                                              # (B, T, C)


def copy_heads_into(looped, fused):
    """Copy a MultiHeadAttention's weights into a CausalSelfAttention so both compute the same; return fused.

    fused.qkv.weight rows: [0, C) = q, [C, 2C) = k, [2C, 3C) = v; inside each block, rows
    h·Dh … (h+1)·Dh - 1 are head h's (the channels split_heads gives to head h).
    """
    with torch.no_grad():
        for i, name in enumerate(("query", "key", "value")):
            stacked = torch.cat([getattr(h, name).weight for h in looped.heads], dim=0)  # (C, C), head h = rows h·Dh…
            C = stacked.shape[0]
            fused.qkv.weight[i * C:(i + 1) * C].copy_(stacked)
        fused.proj.weight.copy_(looped.proj.weight)
        fused.proj.bias.copy_(looped.proj.bias)
    return fused


def quiz_head_width():
    """第六章 self-test 3: n_embed = 64, n_head = 8.

    Return a dict with three ints: "head_width" (the width Dh of each head), "concat_width" (the
    width after the heads' outputs are concatenated) and "qkv_params" (the parameters of all the
    heads' query, key and value projections, which have no bias).
    """
    # return {"head_width": ..., "concat_width": ..., "qkv_params": ...}
    return {"head_width": 64 // 8,             # Dh = C / H
            "concat_width": 8 * (64 // 8),     # H heads side by side: H · Dh = C
            "qkv_params": 8 * 3 * 64 * (64 // 8)}  # H heads × 3 projections × C·Dh = 3·C²


def quiz_attention_memory():
    """第六章 self-test 4: the (B, H, T, T) tensor with B doubled and T doubled ("ratio"), and with
    H doubled and T halved ("ratio_heads").

    Return a dict with two numbers: how many times the original memory each change takes.
    """
    # return {"ratio": ..., "ratio_heads": ...}
    return {"ratio": 2 * 2 * 2,               # B once (×2), T twice (×2²)
            "ratio_heads": 2 * (1 / 2) ** 2}  # H once (×2), T twice (×(1/2)²)
