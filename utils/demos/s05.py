"""Figures of section 05_multi_head_attention: where each channel lands under three ways of
splitting heads, loop vs vectorised vs SDPA timings, per-head attention maps of a tiny trained
model (static grid and the widget's single map), the heads' role scores for two seeds, and the
bytes of the [B, H, T, T] weight tensor vs T.

The notebook computes every tensor and number it shows; these helpers only draw them.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib.colors import ListedColormap
from matplotlib.patches import Rectangle

from utils.plotting import (BLACK, PALETTE, VERMILLION, demo_figure, describe, heading, heatmap, line_style, log2_axes,
                            matrix_summary, one_line, size_text, text_color_on)

HEAD_COLORS = PALETTE
LINES = {"循环版": line_style(1), "向量化版": line_style(0), "SDPA": line_style(2)}   # each version's line


def _t(m) -> torch.Tensor:
    return m.detach().float().cpu() if isinstance(m, torch.Tensor) else torch.as_tensor(m, dtype=torch.float32)


# --- 1. which head gets which channel ----------------------------------------------------------

@demo_figure
def plot_head_layouts(layouts: Mapping[str, torch.Tensor], T: int, C: int):
    """One panel per way of splitting: the [T, C] input grid, each cell coloured by the head it
    lands in and labelled with the row t' it lands on inside that head.

    Every tensor in ``layouts`` is the split of ``arange(T*C).reshape(1, T, C)``, shape
    [1, H, T, Dh]; since the values name their place, value v came from token v // C, channel v % C.
    """
    n = len(layouts)
    fig, axes = plt.subplots(n, 1, figsize=(0.78 * C + 1.6, n * (0.62 * T + 1.05)), squeeze=False)
    for ax, (title, split) in zip(axes[:, 0], layouts.items()):
        split = split[0].long()                                            # (H, T, Dh)
        H = split.size(0)
        head_of = torch.empty(T, C, dtype=torch.long)
        row_of = torch.empty(T, C, dtype=torch.long)
        for h in range(H):
            for t_new in range(split.size(1)):
                for value in split[h, t_new].tolist():
                    head_of[value // C, value % C] = h
                    row_of[value // C, value % C] = t_new
        ax.imshow(head_of.numpy(), cmap=ListedColormap(HEAD_COLORS[:H]), vmin=-0.5, vmax=H - 0.5)
        for t in range(T):
            for c in range(C):
                ax.text(c, t, f"头{int(head_of[t, c])}\n行{int(row_of[t, c])}", ha="center",
                        va="center", fontsize=8, color=text_color_on(HEAD_COLORS[int(head_of[t, c])]))
                if int(row_of[t, c]) != t:  # landed on another row: frame it
                    ax.add_patch(Rectangle((c - 0.44, t - 0.44), 0.88, 0.88, fill=False, ec=BLACK, lw=2.2))
        ax.set_xticks(range(C))
        ax.set_yticks(range(T))
        ax.set_xticks(np.arange(-0.5, C, 1), minor=True)
        ax.set_yticks(np.arange(-0.5, T, 1), minor=True)
        ax.grid(which="minor", color="white", lw=1.5)
        ax.tick_params(which="minor", length=0)
        ax.set_xlabel("通道 c（x 的最后一维）")
        ax.set_ylabel("token 位置 t")
        ax.set_title(title, fontsize=10)
    fig.suptitle("输入 x[0, t, c] 的每一格被分到了哪个头、落在该头的第几行\n"
                 "（黑框 = 落到了别的行：行号不等于原来的 token 位置 t）", fontsize=11)
    fig.tight_layout()
    describe(fig, f"{n} 种拆分方式，输入 {T}×{C}（token 位置 × 通道），每一格写着它落到哪个头、该头的第几行；"
                  + "；".join(f"{one_line(title)}：{split.size(1)} 个头，{_moved(split, C)} 格落到了别的行（加黑框）"
                             for title, split in layouts.items()) + "。")
    return fig


def _moved(split: torch.Tensor, C: int) -> int:
    """Cells of x that land on another row than their token position, in a [1, H, T, Dh] split of arange."""
    rows = torch.arange(split.size(2)).view(1, 1, -1, 1).expand_as(split)
    return int((split.long() // C != rows).sum())


# --- 2. timings ----------------------------------------------------------------------------------

@demo_figure
def plot_timings(Ts: Sequence[int], times: Mapping[str, Sequence[float]], title: str):
    """Left: median forward time (ms) vs T on log–log axes; right: the two speed ratios vs T."""
    Ts = list(Ts)
    fig, axes = plt.subplots(1, 2, figsize=(11.5, 4.2))
    ax = axes[0]
    for label, seconds in times.items():
        ax.plot(Ts, [1e3 * s for s in seconds], label=label, **LINES.get(label, {}))
    log2_axes(ax, Ts, "序列长度 T（对数轴）", "一次前向的中位数时间 / ms（对数轴）", title)
    ax.legend()

    ax = axes[1]
    loop, vec, sdpa = (np.array(times[k]) for k in ("循环版", "向量化版", "SDPA"))
    ax.plot(Ts, loop / vec, label="循环版时间 ÷ 向量化版时间", **LINES["循环版"])
    ax.plot(Ts, vec / sdpa, label="向量化版时间 ÷ SDPA 时间", **LINES["SDPA"])
    for x, r in zip(Ts, loop / vec):
        ax.annotate(f"{r:.1f}×", (x, r), textcoords="offset points", xytext=(0, 7), ha="center", fontsize=8,
                    color=LINES["循环版"]["color"])
    for x, r in zip(Ts, vec / sdpa):
        ax.annotate(f"{r:.1f}×", (x, r), textcoords="offset points", xytext=(0, -14), ha="center", fontsize=8,
                    color=LINES["SDPA"]["color"])
    ax.axhline(1.0, color="grey", lw=1, ls="--")
    ax.text(Ts[0], 1.0, " 1×：一样快", va="bottom", fontsize=8, color="grey")
    log2_axes(ax, Ts, "序列长度 T（对数轴）", "时间之比（> 1 表示后者更快）", "谁比谁快多少（本机实测）")
    ax.legend(fontsize=8)
    fig.tight_layout()
    each = "，".join(f"{label} {1e3 * seconds[0]:.2f} → {1e3 * seconds[-1]:.2f} ms" for label, seconds in times.items())
    describe(fig, f"{heading(title)}T 从 {Ts[0]} 到 {Ts[-1]}，一次前向的中位数时间：{each}。"
                  f"T = {Ts[-1]} 时循环版的时间是向量化版的 {loop[-1] / vec[-1]:.1f} 倍，"
                  f"向量化版是 SDPA 的 {vec[-1] / sdpa[-1]:.1f} 倍。")
    return fig


# --- 3. per-head attention maps ------------------------------------------------------------------

def _token_labels(tokens) -> list[str]:
    return [str(int(t)) for t in tokens]


@demo_figure
def plot_heads_grid(rows: Mapping[str, torch.Tensor], tokens, head_titles: Mapping[str, Sequence[str]],
                    suptitle: str):
    """One row of H weight heatmaps per model (e.g. before / after training), one sequence.

    ``rows`` maps a row label to weights [H, T, T]; ``head_titles`` gives a title per head.
    """
    labels = _token_labels(tokens)
    H = next(iter(rows.values())).size(0)
    fig, axes = plt.subplots(len(rows), H, figsize=(2.9 * H, 3.45 * len(rows)), squeeze=False)
    for r, (row_label, weights) in enumerate(rows.items()):
        for h in range(H):
            ax = axes[r, h]
            heatmap(ax, _t(weights[h]), head_titles[row_label][h], labels=labels, annotate=False,
                    vmin=0.0, vmax=1.0, xlabel="键（token 值）", ylabel="查询（token 值）" if h == 0 else "")
            ax.title.set_fontsize(9)
            ax.tick_params(labelsize=6)
            if h == 0:
                ax.set_ylabel(f"{row_label}\n查询（token 值）")
    fig.suptitle(suptitle, fontsize=11)
    fig.tight_layout()
    per_row = "；".join(f"{row_label}：每个头每行最大权重的平均 "
                        + "、".join(f"{_t(weights[h]).amax(-1).mean().item():.2f}" for h in range(H))
                        for row_label, weights in rows.items())
    describe(fig, f"{heading(suptitle)}{len(rows)} 行、每行 {H} 个头的注意力权重图，{len(labels)} 个 token。{per_row}"
                  "（越接近 1，这个头越只看一个位置）。")
    return fig


@demo_figure
def draw_head(weights, tokens, title: str, marks=None, mark_label: str = ""):
    """One [T, T] weight heatmap with token values on the axes; optional dots on the cells of
    the bool [T, T] ``marks`` (e.g. where the running maximum sits)."""
    weights = _t(weights)
    T = weights.size(-1)
    fig, ax = plt.subplots(figsize=(6.2, 5.4))
    image = heatmap(ax, weights, title, labels=_token_labels(tokens), annotate=False, vmin=0.0, vmax=1.0,
                    xlabel="键：位置 s 上的 token 值", ylabel="查询：位置 t 上的 token 值")
    if marks is not None:
        t_idx, s_idx = torch.nonzero(torch.as_tensor(marks), as_tuple=True)
        ax.scatter(s_idx, t_idx, s=14, facecolor="none", edgecolor=VERMILLION, lw=1.0, label=mark_label)
        ax.legend(loc="upper right", fontsize=8, framealpha=0.85)
    ax.set_xlim(-0.5, T - 0.5)
    ax.set_ylim(T - 0.5, -0.5)
    fig.colorbar(image, ax=ax, fraction=0.046, pad=0.04, label="注意力权重")
    fig.tight_layout()
    marked = f"；{int(torch.as_tensor(marks).sum())} 个圆圈标出{mark_label}" if marks is not None else ""
    describe(fig, f"{heading(title)}{matrix_summary(weights)}{marked}。")
    return fig


@demo_figure
def plot_role_scores(scores: Mapping[str, torch.Tensor], role_names: Sequence[str]):
    """One [roles, H] matrix of role scores per trained model, side by side."""
    n = len(scores)
    fig, axes = plt.subplots(1, n, figsize=(4.4 * n, 2.9), squeeze=False)
    for ax, (title, m) in zip(axes[0], scores.items()):
        m = _t(m)
        image = ax.imshow(m.numpy(), cmap="viridis", vmin=0.0, vmax=1.0)
        for r in range(m.size(0)):
            for h in range(m.size(1)):
                v = float(m[r, h])
                ax.text(h, r, f"{v:.2f}", ha="center", va="center", fontsize=8,
                        color="black" if v > 0.6 else "white")
        ax.set_xticks(range(m.size(1)), [f"头{h}" for h in range(m.size(1))])
        ax.set_yticks(range(m.size(0)), role_names)
        ax.set_title(title, fontsize=10)
    fig.colorbar(image, ax=list(axes[0]), fraction=0.03, pad=0.02, label="平均权重")
    fig.suptitle("每个头的“角色得分”：同一个任务、只换随机种子", fontsize=11, y=1.02)
    models = "；".join(f"{title}：{_best_roles(_t(m), role_names)}" for title, m in scores.items())
    describe(fig, f"每个头的“角色得分”（格子里写着数值）。{models}。")
    return fig


def _best_roles(m: torch.Tensor, role_names: Sequence[str]) -> str:
    """Each head's highest role score of a [roles, H] matrix, in words."""
    return "，".join(f"头{h} 最像“{role_names[int(m[:, h].argmax())]}”（{m[:, h].max().item():.2f}）"
                    for h in range(m.size(1)))


# --- 4. memory of the [B, H, T, T] weights ------------------------------------------------------------

@demo_figure
def plot_weight_memory(Ts: Sequence[int], sizes: Mapping[str, Sequence[int]],
                       references: Sequence[tuple[float, str]] = ()):
    """Bytes of the [B, H, T, T] float32 weight tensor vs T (log–log): ``sizes`` maps a curve's label
    to its sizes, one per T."""
    Ts = list(Ts)
    fig, ax = plt.subplots(figsize=(7.6, 4.8))
    for i, (label, row) in enumerate(sizes.items()):
        ax.plot(Ts, list(row), ms=3.5, label=label, **line_style(i))
    for value, label in references:
        ax.axhline(value, color="grey", lw=0.8, ls=":")
        ax.text(Ts[0], value * 1.15, label, fontsize=8, color="dimgray")
    # slope triangle: T x2 -> bytes x4 on the first curve
    first = list(next(iter(sizes.values())))
    i0 = len(Ts) // 2
    T0, y0 = Ts[i0], first[i0]
    ax.plot([T0, 2 * T0, 2 * T0], [y0, y0, 4 * y0], color="black", lw=1.2)
    ax.text(1.42 * T0, y0 * 0.55, "T ×2", ha="center", fontsize=9)
    ax.text(2.1 * T0, 2 * y0, "字节 ×4\n斜率 = 2", va="center", fontsize=9)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    ticks = [T for T in Ts if (T & (T - 1)) == 0 and T >= Ts[0]][::2]
    ax.set_xticks(ticks, [str(T) for T in ticks])
    units = [(2 ** (10 * k + j), f"{2 ** j} {unit}") for k, unit in enumerate(["B", "KiB", "MiB", "GiB", "TiB"])
             for j in (0, 5)]
    lo, hi = first[0], max(max(row) for row in sizes.values())
    shown = [(v, s) for v, s in units if lo / 2 <= v <= hi * 2]
    ax.set_yticks([v for v, _ in shown], [s for _, s in shown])
    ax.set_xlabel("序列长度 T（对数轴）")
    ax.set_ylabel("[B, H, T, T] 权重张量的大小（float32，对数轴）")
    ax.set_title("注意力权重张量的显存：B·H·T²·4 字节（一层）")
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(loc="upper left", fontsize=9)
    fig.tight_layout()
    describe(fig, "[B, H, T, T] 权重张量（float32，一层）的大小随 T 的变化，对数轴：T 每翻一倍，字节数乘 4。"
                  + "；".join(f"{label}：T = {Ts[0]} 时 {size_text(row[0])}，T = {Ts[-1]} 时 {size_text(row[-1])}"
                             for label, row in sizes.items()) + "。")
    return fig
