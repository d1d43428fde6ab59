# Generated from solutions/08_ffn_norm_residual/08_ffn_norm_residual.ipynb
# by `python3 course.py build`. Do not edit: edit the notebook.
"""Reference implementations of section 08_ffn_norm_residual (the solution cells of its notebook)."""
import torch
import torch.nn as nn
import torch.nn.functional as F

__all__ = ['RMSNorm', 'layer_norm', 'FeedForward', 'SwiGLU', 'quiz_ffn_share', 'Block']


from .s05_multi_head_attention import CausalSelfAttention  # section 05's fused multi-head causal attention


class RMSNorm(nn.Module):
    """Root-mean-square normalisation over the last dim (§3.1): x / sqrt(mean(x²) + eps) * weight.

    [..., dim] -> [..., dim] in x's dtype; the mean square is taken in float32, so that a float16 module
    does not overflow where x² exceeds float16's range.
    """

    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))                  # (C,)  learnable gain g

    def forward(self, x):
        h = x.float()                                                 # (..., C)  float32: x² of float16 overflows
        ms = h.pow(2).mean(dim=-1, keepdim=True)                      # (..., 1)  mean square of each token
        return (h / torch.sqrt(ms + self.eps)).to(x.dtype) * self.weight   # (..., C)  back to x's dtype


def layer_norm(x, weight, bias, eps=1e-5):
    """LayerNorm over the last dim, by hand: (x - mean) / sqrt(var + eps) * weight + bias."""
    mean = x.mean(dim=-1, keepdim=True)                              # (..., 1)
    var = (x - mean).pow(2).mean(dim=-1, keepdim=True)               # (..., 1)  biased: divide by C
    return (x - mean) / torch.sqrt(var + eps) * weight + bias        # (..., C)


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
    """Gated FFN (SwiGLU): [..., dim] -> [..., dim] through bias-free w_gate, w_up (dim -> hidden), w_down."""

    def __init__(self, dim, hidden):
        super().__init__()
        self.w_gate = nn.Linear(dim, hidden, bias=False)
        self.w_up = nn.Linear(dim, hidden, bias=False)
        self.w_down = nn.Linear(hidden, dim, bias=False)

    def forward(self, x):
        gate = F.silu(self.w_gate(x))                                 # (B, T, hidden)  how much to let through
        up = self.w_up(x)                                             # (B, T, hidden)  what to let through
        return self.w_down(gate * up)                                 # (B, T, C)


def quiz_ffn_share():
    """One Llama-2-13B layer and one Mixtral-8x22B MoE layer, weight matrices only.

    Return a dict:
    "attn_params":     parameters of the attention (int)
    "ffn_params":      parameters of the SwiGLU (int)
    "ffn_share":       the FFN's share of the layer's parameters (attention + FFN), between 0 and 1
    "moe_total_ffn":   FFN parameters of one Mixtral-8x22B MoE layer, all experts (int)
    "moe_active_ffn":  FFN parameters one token uses in that layer (int)
    "ffn_flops_share": the FFN's share of the Llama-2-13B layer's forward FLOPs per token at T = 4096
    """
    C, hidden, T = 5120, 13824, 4096
    attn = 4 * C * C                                                  # W_Q, W_K, W_V, W_O
    ffn = 3 * C * hidden                                              # W_g, W_u, W_d
    expert = 3 * 6144 * 16384                                         # one Mixtral-8x22B expert
    flops_attn, flops_ffn = 2 * attn + 4 * T * C, 2 * ffn             # §6: 2P, plus QKᵀ and AV
    return {"attn_params": attn, "ffn_params": ffn, "ffn_share": ffn / (attn + ffn),
            "moe_total_ffn": 8 * expert, "moe_active_ffn": 2 * expert,
            "ffn_flops_share": flops_ffn / (flops_attn + flops_ffn)}


class Block(nn.Module):
    """A Pre-Norm decoder block (§1, §8): (B, T, n_embed) -> (B, T, n_embed).

    Its parts: norm1, norm2 (RMSNorm), attn (causal), ffn (a SwiGLU of width ffn_hidden, default 4·n_embed).
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
