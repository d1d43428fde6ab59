"""Figures of section 07_gqa_and_kv_cache: which query heads share which KV head, the causal
mask of new positions with and without the cache offset, decode time with and without a KV
cache, the KV-cache size of MHA/GQA/MQA vs context, and the widget's combined figure.

The notebook computes every tensor and number it shows; these helpers only draw them.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.patches import FancyBboxPatch

from utils.plotting import (BLUE, GREEN, PALETTE, VERMILLION, YELLOW, demo_figure, describe, heading, heatmap,
                            line_style, log2_axes, one_line, text_color_on)

GROUP_COLORS = [color for color in PALETTE if color != YELLOW]   # text in the group's colour stays readable
KIND_STYLES = {"MHA": line_style(1), "GQA": line_style(0), "MQA": line_style(2)}   # each kind's line
GIB = 2 ** 30


def kind(n_head: int, n_kv_head: int) -> str:
    return "MHA" if n_kv_head == n_head else "MQA" if n_kv_head == 1 else "GQA"


# --- 1. who shares which KV head ------------------------------------------------------------

def draw_grouping(ax, n_head: int, n_kv_head: int, title: str = "") -> None:
    """Query heads on top, KV heads below; query head h is joined to KV head h // n_rep."""
    n_rep = n_head // n_kv_head
    width = max(n_head, 1)
    q_x = np.arange(n_head) + 0.5                                            # query head centres
    kv_x = (np.arange(n_kv_head) + 0.5) * n_rep                              # under the middle of its group
    box = min(0.8, 6.0 / width + 0.3)
    for h in range(n_head):
        j = h // n_rep
        color = GROUP_COLORS[j % len(GROUP_COLORS)]
        ax.plot([q_x[h], kv_x[j]], [1.0, 0.0], color=color, lw=1.6, alpha=0.8, zorder=1)
        ax.add_patch(FancyBboxPatch((q_x[h] - box / 2, 1.0 - 0.12), box, 0.24, boxstyle="round,pad=0.02",
                                    fc=color, ec="white", zorder=2))
        if n_head <= 32:
            ax.text(q_x[h], 1.0, f"Q{h}", ha="center", va="center", color=text_color_on(color),
                    fontsize=8 if n_head <= 16 else 5, zorder=3)
    kv_box = min(0.9 * n_rep, 2.4) if n_kv_head > 1 else min(0.9 * n_head, 3.0)
    for j in range(n_kv_head):
        color = GROUP_COLORS[j % len(GROUP_COLORS)]
        ax.add_patch(FancyBboxPatch((kv_x[j] - kv_box / 2, -0.14), kv_box, 0.28, boxstyle="round,pad=0.02",
                                    fc="white", ec=color, lw=2, zorder=2))
        if n_kv_head <= 32:
            ax.text(kv_x[j], 0.0, f"KV{j}", ha="center", va="center", color=color,
                    fontsize=8 if n_kv_head <= 16 else 5, zorder=3)
    ax.set_xlim(-0.2, width + 0.2)
    ax.set_ylim(-0.35, 1.35)
    ax.axis("off")
    ax.text(-0.1, 1.0, "查询头", ha="right", va="center", fontsize=9)
    ax.text(-0.1, 0.0, "K/V 头", ha="right", va="center", fontsize=9)
    ax.set_title(title or f"{kind(n_head, n_kv_head)}：{n_head} 个查询头，{n_kv_head} 组 K/V（每组 {n_rep} 个查询头）",
                 fontsize=10)


@demo_figure
def plot_groupings(n_head: int, kv_heads: Sequence[int]):
    """One row per n_kv_head: the grouping picture."""
    fig, axes = plt.subplots(len(kv_heads), 1, figsize=(9.5, 1.55 * len(kv_heads) + 0.3), squeeze=False)
    for ax, n_kv in zip(axes[:, 0], kv_heads):
        draw_grouping(ax, n_head, n_kv)
    fig.tight_layout()
    rows = "；".join(_grouping_text(n_head, n) for n in kv_heads)
    describe(fig, f"{n_head} 个查询头怎样共用 K/V 头，每行一种：{rows}。")
    return fig


def _grouping_text(n_head: int, n_kv_head: int) -> str:
    n_rep = n_head // n_kv_head
    return f"{kind(n_head, n_kv_head)} 有 {n_kv_head} 组 K/V，每组 {n_rep} 个查询头（查询头 h 用第 h // {n_rep} 组）"


# --- 2. the mask of the new positions -------------------------------------------------------

@demo_figure
def plot_offset_masks(masks: Mapping[str, object], n_cached: int):
    """Boolean [T_new, S] masks side by side; columns left of the red line are cached positions."""
    fig, axes = plt.subplots(1, len(masks), figsize=(5.2 * len(masks), 3.2), squeeze=False)
    for ax, (title, mask) in zip(axes[0], masks.items()):
        m = np.asarray(mask, dtype=float)
        heatmap(ax, m, title, xlabel="键位置 s（红线左边：缓存里的；右边：这次新增的）", ylabel="新增的查询",
                cmap="Greens", vmin=0, vmax=1.4,
                row_labels=[f"位置 {n_cached + i}" for i in range(m.shape[0])], annotate=False)
        for t in range(m.shape[0]):
            for s in range(m.shape[1]):
                ax.text(s, t, "看" if m[t, s] else "×", ha="center", va="center", fontsize=9,
                        color="black" if m[t, s] else "#999999")
        ax.axvline(n_cached - 0.5, color=VERMILLION, lw=2)
    fig.tight_layout()
    seen = "；".join(f"{one_line(title)}：新增的位置 {n_cached}… 依次能看 "
                     + "、".join(str(int(row.sum())) for row in np.asarray(mask, dtype=bool)) + " 个键"
                     for title, mask in masks.items())
    describe(fig, f"新增查询的掩码，格子里“看”= 能看、“×”= 不能看，红线左边的 {n_cached} 列是缓存里的位置。{seen}。")
    return fig


# --- 3. decode time -------------------------------------------------------------------------

@demo_figure
def plot_decode_times(lengths: Sequence[int], with_cache: Sequence[float], without: Sequence[float], title: str):
    """Left: total time to generate n tokens, with and without the cache (log–log); right: the ratio."""
    lengths = list(lengths)
    with_cache, without = np.array(with_cache), np.array(without)
    fig, axes = plt.subplots(1, 2, figsize=(11.5, 4.2))
    ax = axes[0]
    ax.plot(lengths, 1e3 * without, "o-", color=VERMILLION, label="不用缓存：每步重算整个前缀")
    ax.plot(lengths, 1e3 * with_cache, "s-", color=BLUE, label="KV Cache：每步只算新 token")
    log2_axes(ax, lengths, "生成的 token 数（对数轴）", "总时间 / ms（对数轴）", title)
    ax.legend(fontsize=9)
    ax = axes[1]
    ratio = without / with_cache
    ax.plot(lengths, ratio, "o-", color=GREEN)
    for x, r in zip(lengths, ratio):
        ax.annotate(f"{r:.1f}×", (x, r), textcoords="offset points", xytext=(0, 7), ha="center", fontsize=9)
    ax.axhline(1.0, color="grey", lw=1, ls="--")
    ax.set_xscale("log", base=2)
    ax.set_xticks(lengths, [str(n) for n in lengths])
    ax.set_ylim(0, ratio.max() * 1.25)
    ax.set_xlabel("生成的 token 数（对数轴）")
    ax.set_ylabel("加速比 = 不用缓存的时间 ÷ 用缓存的时间")
    ax.set_title("KV Cache 带来的加速比", fontsize=10)
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    describe(fig, f"{heading(title)}生成 {lengths[0]} 到 {lengths[-1]} 个 token：不用缓存的总时间 "
                  f"{1e3 * without[0]:.1f} → {1e3 * without[-1]:.1f} ms，用 KV Cache {1e3 * with_cache[0]:.1f} → "
                  f"{1e3 * with_cache[-1]:.1f} ms；加速比从 {ratio[0]:.1f}× 变为 {ratio[-1]:.1f}×。")
    return fig


# --- 4. cache size vs context ---------------------------------------------------------------

def _size_axes(ax, contexts, curves: Mapping[str, Sequence[float]], batch: int, references, marker=None):
    for i, (label, sizes) in enumerate(curves.items()):
        style = next((s for k, s in KIND_STYLES.items() if label.startswith(k)), line_style(i))
        ax.plot(contexts, np.array(sizes) / GIB, ms=3, label=label, **style)
    for value, text in references:
        ax.axhline(value / GIB, color="grey", lw=1, ls="--")
        ax.text(contexts[0], value / GIB, f" {text}", va="bottom", fontsize=8, color="grey")
    if marker is not None:
        x, y, text = marker
        ax.plot([x], [y / GIB], "*", ms=16, color="black", zorder=5)
        ax.annotate(text, (x, y / GIB), textcoords="offset points", xytext=(-8, 10), ha="right", fontsize=9)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_ylim(top=ax.get_ylim()[1] * 2.5)                                  # room for the reference labels
    ticks = [c for c in contexts if c >= 1024]
    ax.set_xticks(ticks, [f"{c // 1024}K" for c in ticks])
    ax.set_xlabel("上下文长度（token，对数轴）")
    ax.set_ylabel("KV Cache / GiB（对数轴）")
    ax.set_title(f"批次 B = {batch}", fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")


@demo_figure
def plot_cache_sizes(contexts: Sequence[int], curves_by_batch: Mapping[int, Mapping[str, Sequence[float]]],
                     suptitle: str, references=()):
    """One panel per batch size: KV-cache bytes vs context for each configuration, log–log."""
    fig, axes = plt.subplots(1, len(curves_by_batch), figsize=(5.8 * len(curves_by_batch), 4.3), squeeze=False)
    for ax, (batch, curves) in zip(axes[0], curves_by_batch.items()):
        _size_axes(ax, list(contexts), curves, batch, references)
    fig.suptitle(suptitle, fontsize=11)
    fig.tight_layout()
    longest = contexts[-1]
    panels = "；".join(f"批次 B = {batch}：" + "，".join(f"{label} {sizes[-1] / GIB:.1f} GiB"
                                                       for label, sizes in curves.items())
                       for batch, curves in curves_by_batch.items())
    describe(fig, f"{heading(suptitle)}KV Cache 随上下文长度增长（对数轴），上下文 {longest:,} token 时：{panels}。")
    return fig


@demo_figure
def draw_explorer(n_head: int, n_kv_head: int, context: int, batch: int, contexts: Sequence[int],
                  cache_bytes: Callable[[int, int, int], int], model: str, references=()):
    """The widget's figure: the grouping picture above, the cache-size curve below (with the chosen point)."""
    fig, axes = plt.subplots(2, 1, figsize=(9.5, 7.0), gridspec_kw={"height_ratios": [1, 2.4]})
    draw_grouping(axes[0], n_head, n_kv_head)
    curves = {f"{kind(n_head, n)}：{n} 组 K/V": [cache_bytes(n, c, batch) for c in contexts]
              for n in sorted({n_head, n_kv_head, 1}, reverse=True)}
    chosen = cache_bytes(n_kv_head, context, batch)
    _size_axes(axes[1], list(contexts), curves, batch, references,
               marker=(context, chosen, f"{n_kv_head} 组 K/V，{context:,} token：{chosen / GIB:.2f} GiB"))
    axes[1].set_title(f"{model} 的形状，批次 B = {batch}", fontsize=10)
    fig.tight_layout()
    describe(fig, f"上：{_grouping_text(n_head, n_kv_head)}。下：{model} 的形状、批次 {batch} 时 KV Cache "
                  f"随上下文长度的变化；所选的 {context:,} token 需要 {chosen / GIB:.2f} GiB（星号）。")
    return fig
