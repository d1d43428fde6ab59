# Generated from solutions/08_ffn_norm_residual/08_ffn_norm_residual.ipynb
# by `python3 course.py build`. Do not edit: edit the notebook.
"""Reference implementations of section 08_ffn_norm_residual (the solution cells of its notebook)."""
import torch
import torch.nn as nn
import torch.nn.functional as F

__all__ = ['RMSNorm', 'layer_norm', 'FeedForward', 'SwiGLU', 'quiz_ffn_share', 'Block']


from .s05_multi_head_attention import CausalSelfAttention  # section 05's fused multi-head causal attention


class RMSNorm(nn.Module):
    """Root-mean-square normalisation over the last dim: x / sqrt(mean(x²) + eps) * weight."""

    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))                  # (D,)  learnable gain g

    def forward(self, x):
        ms = x.pow(2).mean(dim=-1, keepdim=True)                      # (..., 1)  mean square of each token
        return x / torch.sqrt(ms + self.eps) * self.weight            # (..., D)


def layer_norm(x, weight, bias, eps=1e-5):
    """LayerNorm over the last dim, by hand: (x - mean) / sqrt(var + eps) * weight + bias."""
    mean = x.mean(dim=-1, keepdim=True)                              # (..., 1)
    var = (x - mean).pow(2).mean(dim=-1, keepdim=True)               # (..., 1)  biased: divide by D
    return (x - mean) / torch.sqrt(var + eps) * weight + bias        # (..., D)


class FeedForward(nn.Module):
    """The classic position-wise FFN: Linear(C, hidden) -> GELU -> Linear(hidden, C), hidden = 4C by default."""

    def __init__(self, n_embed, hidden=None):
        super().__init__()
        hidden = 4 * n_embed if hidden is None else hidden
        self.fc1 = nn.Linear(n_embed, hidden)
        self.fc2 = nn.Linear(hidden, n_embed)

    def forward(self, x):
        h = F.gelu(self.fc1(x))                                       # (B, T, hidden)  up, then non-linear
        return self.fc2(h)                                            # (B, T, C)       back down


class SwiGLU(nn.Module):
    """Gated FFN: w_down(silu(w_gate(x)) * w_up(x)), no biases."""

    def __init__(self, dim, hidden):
        super().__init__()
        self.w_gate = nn.Linear(dim, hidden, bias=False)
        self.w_up = nn.Linear(dim, hidden, bias=False)
        self.w_down = nn.Linear(hidden, dim, bias=False)

    def forward(self, x):
        gate = F.silu(self.w_gate(x))                                 # (B, T, hidden)  how much to let through
        up = self.w_up(x)                                             # (B, T, hidden)  what to let through
        return self.w_down(gate * up)                                 # (B, T, D)


def quiz_ffn_share():
    """Parameter counts of one Llama-2-7B layer and one Mixtral-8x7B MoE layer (weight matrices only)."""
    D, hidden, moe_hidden, n_expert, top_k = 4096, 11008, 14336, 8, 2
    attn = 4 * D * D                                                  # W_Q, W_K, W_V, W_O
    ffn = 3 * D * hidden                                              # W_g, W_u, W_d
    expert = 3 * D * moe_hidden
    return {"attn_params": attn, "ffn_params": ffn, "ffn_share": ffn / (attn + ffn),
            "moe_total_ffn": n_expert * expert, "moe_active_ffn": top_k * expert}


class Block(nn.Module):
    """A Pre-Norm decoder block: x + attn(norm1(x)), then x + ffn(norm2(x)).

    x: (B, T, n_embed) -> (B, T, n_embed); attn is causal, ffn is a SwiGLU of width ffn_hidden (default 4·n_embed).
    """

    def __init__(self, n_embed, n_head, context_length, ffn_hidden=None):
        super().__init__()
        self.norm1 = RMSNorm(n_embed)
        self.attn = CausalSelfAttention(n_embed, n_head, context_length)
        self.norm2 = RMSNorm(n_embed)
        self.ffn = SwiGLU(n_embed, 4 * n_embed if ffn_hidden is None else ffn_hidden)

    def forward(self, x):
        x = x + self.attn(self.norm1(x))                              # (B, T, C)  norm -> attend -> residual
        x = x + self.ffn(self.norm2(x))                               # (B, T, C)  norm -> FFN -> residual
        return x
