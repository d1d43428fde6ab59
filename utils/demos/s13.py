"""Section 13_long_context_attention: a small character model whose attention takes a mask or a rolling cache
(built from sections 08–10's parts), attention over a band computed block by block, and the section's figures.

The notebook computes every number it shows; the figures here only draw them.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from utils.plotting import BLACK, bar_style, demo_figure, describe, heading, heatmap, line_style
from utils.reference import RMSNorm, SwiGLU, apply_rope, rope_angles   # sections 08, 09


def visible(queries: torch.Tensor, keys: torch.Tensor, window: int, n_sink: int = 0) -> torch.Tensor:
    """(Tq, S) bool: which of the keys at absolute positions ``keys`` the queries at ``queries`` may see
    (causal, the last ``window`` positions, and the first ``n_sink`` of the sequence)."""
    t, s = queries[:, None], keys[None, :]                               # (Tq, 1), (1, S)
    return (s <= t) & ((s > t - window) | (s < n_sink))


# --- a small model whose attention is windowed by a mask or by a rolling cache ---------------------

class WindowedAttention(nn.Module):
    """Multi-head attention with rotate-half RoPE; the keys it may see come from a mask (one pass) or, with a
    rolling cache, from the positions the cache returns."""

    def __init__(self, n_embed: int, n_head: int):
        super().__init__()
        self.n_head = n_head
        self.qkv = nn.Linear(n_embed, 3 * n_embed, bias=False)
        self.out = nn.Linear(n_embed, n_embed, bias=False)

    def forward(self, x, angles, allowed=None, cache=None, window=None, n_sink=0):
        B, T, C = x.shape
        q, k, v = self.qkv(x).view(B, T, 3, self.n_head, -1).permute(2, 0, 3, 1, 4)   # (B, H, T, Dh) each
        q, k = apply_rope(q, angles), apply_rope(k, angles)
        if cache is not None:
            start = len(cache)                                              # the new queries' first position
            k, v, positions = cache.update(k, v)                            # (B, H, S, Dh) ×2, (S,)
            allowed = visible(torch.arange(start, start + T), positions, window, n_sink)   # (T, S)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)      # (B, H, T, Dh)
        return self.out(y.transpose(1, 2).reshape(B, T, C))                 # (B, T, C)


class WindowedBlock(nn.Module):
    def __init__(self, n_embed: int, n_head: int, ffn_hidden: int):
        super().__init__()
        self.attn_norm, self.ffn_norm = RMSNorm(n_embed), RMSNorm(n_embed)
        self.attn = WindowedAttention(n_embed, n_head)
        self.ffn = SwiGLU(n_embed, ffn_hidden)

    def forward(self, x, angles, **attention):
        x = x + self.attn(self.attn_norm(x), angles, **attention)               # (B, T, C)
        return x + self.ffn(self.ffn_norm(x))


class WindowedLM(nn.Module):
    """Embedding -> Pre-Norm blocks -> RMSNorm -> LM head, as 10's DecoderLM, with the attention above.

    forward(idx, allowed=None, caches=None, window=None, n_sink=0) -> logits (B, T, V). ``allowed``: a
    [T, T] bool mask (None: causal); ``caches``: one rolling cache per block, ``window`` and ``n_sink`` saying
    what the new positions may see among what a cache returns."""

    def __init__(self, vocab_size: int, n_embed: int = 64, n_head: int = 4, n_layer: int = 2,
                 ffn_hidden: int = 176, max_positions: int = 4096):
        super().__init__()
        self.tok_emb = nn.Embedding(vocab_size, n_embed)
        self.blocks = nn.ModuleList([WindowedBlock(n_embed, n_head, ffn_hidden) for _ in range(n_layer)])
        self.norm = RMSNorm(n_embed)
        self.lm_head = nn.Linear(n_embed, vocab_size, bias=False)
        self.register_buffer("angles", rope_angles(max_positions, n_embed // n_head), persistent=False)

    def forward(self, idx, allowed=None, caches=None, window=None, n_sink=0):
        T = idx.size(1)
        start = 0 if caches is None else len(caches[0])
        if caches is None and allowed is None:
            allowed = torch.ones(T, T, dtype=torch.bool).tril()            # (T, T) causal
        x = self.tok_emb(idx)                                               # (B, T, C)
        for block, cache in zip(self.blocks, caches or [None] * len(self.blocks)):
            x = block(x, self.angles[start:start + T], allowed=allowed, cache=cache, window=window, n_sink=n_sink)
        return self.lm_head(self.norm(x))                                   # (B, T, V)


def train(model: WindowedLM, ids: torch.Tensor, context: int, steps: int, batch: int = 16, lr: float = 3e-3,
          seed: int = 0) -> list[float]:
    """Train on random crops of ``ids`` of ``context`` + 1 tokens (causal, next-token loss); the losses."""
    g = torch.Generator().manual_seed(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    losses = []
    for _ in range(steps):
        starts = torch.randint(0, len(ids) - context - 1, (batch,), generator=g)
        crop = torch.stack([ids[s:s + context + 1] for s in starts.tolist()])   # (batch, context + 1)
        logits = model(crop[:, :-1])                                        # (batch, context, V)
        loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), crop[:, 1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


@torch.no_grad()
def loss_by_position(model: WindowedLM, ids: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
    """(T − 1,) the loss of predicting each token of ``ids`` (B, T) from the ones before, averaged over the
    batch, with the attention mask ``allowed`` [T, T]."""
    logits = model(ids[:, :-1], allowed=allowed[:-1, :-1])                  # (B, T − 1, V)
    losses = F.cross_entropy(logits.transpose(1, 2), ids[:, 1:], reduction="none")   # (B, T − 1)
    return losses.mean(0)


@torch.no_grad()
def decode_with_caches(model: WindowedLM, idx: torch.Tensor, caches, window: int, n_sink: int,
                       chunks: Sequence[int]) -> torch.Tensor:
    """The logits (B, T, V) of ``idx`` fed chunk by chunk through one rolling cache per block."""
    out, start = [], 0
    for n in chunks:
        out.append(model(idx[:, start:start + n], caches=caches, window=window, n_sink=n_sink))
        start += n
    return torch.cat(out, dim=1)


# --- attention over a band, block by block ---------------------------------------------------------

def banded_attention(q, k, v, window: int):
    """Causal sliding-window attention (no sinks) that computes only the scores inside the band: the queries
    in blocks of ``window``, each block against its own keys and the block before. q, k, v (B, H, T, D)."""
    B, H, T, D = q.shape
    W, n_blocks = window, math.ceil(T / window)
    pad = n_blocks * W - T
    q = F.pad(q, (0, 0, 0, pad)).view(B, H, n_blocks, W, D)                 # (B, H, nb, W, D)
    k = F.pad(k, (0, 0, W, pad)).unfold(2, 2 * W, W).transpose(-1, -2)      # (B, H, nb, 2W, D): keys bW−W … bW+W−1
    v = F.pad(v, (0, 0, W, pad)).unfold(2, 2 * W, W).transpose(-1, -2)
    i, j = torch.arange(W)[:, None], torch.arange(2 * W)[None, :]           # query i of a block, key j of its pair
    allowed = (j > i) & (j <= i + W)                                        # (W, 2W): 0 ≤ distance < W
    first = allowed & (j >= W)                                              # block 0: no keys before position 0
    mask = torch.stack([first] + [allowed] * (n_blocks - 1))                # (nb, W, 2W)
    y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)             # (B, H, nb, W, D)
    return y.reshape(B, H, n_blocks * W, D)[:, :, :T]                       # (B, H, T, D)


# --- figures ---------------------------------------------------------------------------------------

@demo_figure
def plot_masks(masks: Mapping[str, torch.Tensor], suptitle: str):
    """Bool masks side by side: black = may attend, white = masked (readable without colour)."""
    fig, axes = plt.subplots(1, len(masks), figsize=(3.4 * len(masks), 3.5), squeeze=False)
    for ax, (title, m) in zip(axes[0], masks.items()):
        heatmap(ax, m.float(), title, cmap="Greys", vmin=0.0, vmax=1.0, annotate=False)
    fig.suptitle(suptitle)
    fig.tight_layout(rect=(0, 0, 1, 0.94))
    each = "；".join(f"{title}：{int(m.sum())} 个格子可以看，每行最多 {int(m.sum(-1).max())} 个"
                    for title, m in masks.items())
    describe(fig, f"{heading(suptitle)}{len(masks)} 张掩码（黑 = 可以看，白 = 屏蔽；行是查询，列是键）。{each}。")
    return fig


@demo_figure
def plot_receptive_field(reach: Sequence[torch.Tensor], window: int, query: int):
    """Which input positions reach the output at position ``query`` after 1, 2, … layers of a window."""
    fig, ax = plt.subplots(figsize=(9.0, 1.2 + 0.45 * len(reach)))
    rows = torch.stack([r[query].float() for r in reach])                   # (n_layer, T)
    heatmap(ax, rows, f"位置 {query} 的输出依赖哪些输入位置（窗口 {window}）", xlabel="输入位置 s",
            ylabel="层数 ℓ", cmap="Greys", vmin=0.0, vmax=1.0, annotate=False,
            row_labels=[str(i + 1) for i in range(len(reach))])
    ax.set_xticks(range(0, rows.size(1), 4))
    for layer, row in enumerate(rows):
        first = int(row.nonzero()[0])
        ax.annotate(f"{query - first} 格", (first, layer), xytext=(-4, 0), textcoords="offset points",
                    ha="right", va="center", fontsize=8, color=BLACK)
    fig.tight_layout()
    spans = "，".join(f"{i + 1} 层：往回 {query - int(r.nonzero()[0])} 格" for i, r in enumerate(rows))
    describe(fig, f"位置 {query} 的输出依赖的输入位置（窗口 {window}，黑 = 依赖）：{spans}。")
    return fig


@demo_figure
def plot_streaming(curves: Mapping[str, Sequence[float]], trained: int, title: str, every: int = 16):
    """The loss at each position of long text, one line per way of attending (averaged over ``every``
    positions), the trained context marked."""
    fig, ax = plt.subplots(figsize=(7.5, 4.0))
    for i, (label, losses) in enumerate(curves.items()):
        values = np.asarray(losses, dtype=float)
        n = len(values) // every * every
        smooth = values[:n].reshape(-1, every).mean(1)
        ax.plot(np.arange(len(smooth)) * every + every / 2, smooth, label=label, **line_style(i, marker=False))
    ax.axvline(trained, color=BLACK, lw=0.8, ls=":", label=f"训练时的上下文长度 {trained}")
    ax.set_xlabel("被预测的字符的位置")
    ax.set_ylabel(f"交叉熵（每 {every} 个位置平均）")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    each = "；".join(f"{label}：前 {trained} 个位置平均 {np.mean(v[:trained]):.2f}，之后平均 {np.mean(v[trained:]):.2f}"
                    for label, v in curves.items())
    describe(fig, f"{heading(title)}每个位置的损失，{each}。")
    return fig


@demo_figure
def plot_bytes_per_token(groups: Mapping[str, Mapping[str, float]], title: str):
    """KiB of cache per token (all layers), one panel per published model, one bar per kind of attention."""
    fig, axes = plt.subplots(1, len(groups), figsize=(5.2 * len(groups), 3.8), squeeze=False, sharey=True)
    for ax, (model, bars) in zip(axes[0], groups.items()):
        names, values = list(bars), list(bars.values())
        for i, (name, value) in enumerate(zip(names, values)):
            ax.bar(i, value, **bar_style(i))
            ax.text(i, value, f"{value:,.0f}", ha="center", va="bottom", fontsize=8)
        ax.set_xticks(range(len(names)), names, fontsize=8)
        ax.set_yscale("log")
        ax.set_title(model, fontsize=10)
    axes[0][0].set_ylabel("每个 token 的缓存（KiB，对数轴）")
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    each = "；".join(f"{model}：" + "，".join(f"{' '.join(n.split())} {v:,.0f} KiB" for n, v in bars.items())
                    for model, bars in groups.items())
    describe(fig, f"{heading(title)}{each}。")
    return fig
