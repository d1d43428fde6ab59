"""Figures of section 01_qkv_and_scores: vectors and their dot products, labelled score
tables, and one query's row of scores (used by the widget).

The notebook builds every tensor it shows; these helpers only draw them.
"""
from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
import torch
from matplotlib.patches import Rectangle

from utils.env import display_width
from utils.plotting import BLUE, GREEN, ORANGE, PALETTE, PURPLE, VERMILLION, bars, demo_figure, describe


def _as_tensor(m) -> torch.Tensor:
    return m.detach().float().cpu() if isinstance(m, torch.Tensor) else torch.as_tensor(m, dtype=torch.float32)


def plot_vectors(ax, q, keys: dict[str, torch.Tensor], title: str = "",
                 label_offsets: dict[str, tuple[int, int]] | None = None) -> None:
    """Draw a 2-D query and several 2-D keys from the origin; label each key with q·k and cos.

    Longer arrows are drawn first, so collinear vectors stay visible. ``label_offsets`` moves a
    label (in points) away from its arrow tip, keyed by name ("查询 q" for the query).
    """
    q = _as_tensor(q)
    offsets = {"查询 q": (-52, 8), **(label_offsets or {})}
    colors = [GREEN, ORANGE, VERMILLION, PURPLE, *PALETTE[5:]]
    arrows = [("查询 q", q, "black", 0.011)]
    arrows += [(name, _as_tensor(k), color, 0.009) for (name, k), color in zip(keys.items(), colors)]
    for z, (name, v, color, width) in enumerate(sorted(arrows, key=lambda a: -float(a[1].norm()))):
        ax.quiver(0, 0, v[0], v[1], angles="xy", scale_units="xy", scale=1, color=color, width=width, zorder=3 + z)
    reach = 0.0
    for name, v, color, _ in arrows:
        if name == "查询 q":
            text = "查询 q"
        else:
            dot = float(q @ v)
            text = f"{name}\nq·k = {dot:.1f}, cos = {dot / float(q.norm() * v.norm()):.2f}"
        ax.annotate(text, v.tolist(), textcoords="offset points", xytext=offsets.get(name, (6, -4)),
                    fontsize=9 if name != "查询 q" else 10, color=color, zorder=20)
        reach = max(reach, float(v.abs().max()))
    lim = reach * 1.35
    ax.set_xlim(-lim, lim)
    ax.set_ylim(-lim, lim)
    ax.set_aspect("equal")
    ax.axhline(0, color="grey", lw=0.6)
    ax.axvline(0, color="grey", lw=0.6)
    ax.grid(alpha=0.3)
    ax.set_xlabel("第 1 维")
    ax.set_ylabel("第 2 维")
    ax.set_title(title)


def print_table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
    """Print a right-aligned text table whose columns line up with Chinese text (width 2 per CJK char)."""
    cells = [[str(c) for c in header]] + [[str(c) for c in row] for row in rows]
    widths = [max(display_width(row[i]) for row in cells) for i in range(len(header))]
    for row in cells:
        print("  ".join(" " * (w - display_width(c)) + c for c, w in zip(row, widths)))


def matrix_heatmap(ax, matrix, row_labels: Sequence[str] | None = None, col_labels: Sequence[str] | None = None,
                   title: str = "", xlabel: str = "键位置 s", ylabel: str = "查询位置 t",
                   highlight: tuple[int, int] | None = None, highlight_row: int | None = None,
                   annotate: bool = True, fmt: str = "{:.1f}", colorbar: bool = True, fontsize: int = 8):
    """A labelled matrix on a diverging colour scale centred at 0 (red > 0, blue < 0).

    ``highlight=(t, s)`` frames one cell, ``highlight_row=t`` frames a whole row.
    """
    m = _as_tensor(matrix)
    rows, cols = m.shape
    lim = float(m.abs().max()) or 1.0
    image = ax.imshow(m, cmap="RdBu_r", vmin=-lim, vmax=lim)
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_xticks(range(cols), col_labels if col_labels is not None else range(cols))
    ax.set_yticks(range(rows), row_labels if row_labels is not None else range(rows))
    if col_labels is not None and max(len(str(c)) for c in col_labels) > 2:
        ax.tick_params(axis="x", labelrotation=45)
    if annotate:
        for t in range(rows):
            for s in range(cols):
                value = float(m[t, s])
                ax.text(s, t, fmt.format(value), ha="center", va="center", fontsize=fontsize,
                        color="white" if abs(value) > 0.6 * lim else "black")
    if highlight is not None:
        t, s = highlight
        ax.add_patch(Rectangle((s - 0.5, t - 0.5), 1, 1, fill=False, ec="gold", lw=3))
    if highlight_row is not None:
        ax.add_patch(Rectangle((-0.5, highlight_row - 0.5), cols, 1, fill=False, ec="gold", lw=3))
    if colorbar:
        ax.figure.colorbar(image, ax=ax, fraction=0.046, pad=0.04)
    return image


@demo_figure
def draw_query_row(scores, tokens: Sequence[str], t: int, title: str = ""):
    """Left: the whole [T, T] score table with row t framed. Right: row t as bars, its maximum orange and hatched."""
    s = _as_tensor(scores)
    fig, (ax_left, ax_right) = plt.subplots(1, 2, figsize=(11, 4.2), gridspec_kw={"width_ratios": [1, 1.15]})
    matrix_heatmap(ax_left, s, tokens, tokens, title="分数表 S（金框 = 所选查询的那一行）",
                   highlight_row=t, annotate=False)
    row = s[t]
    bars(ax_right, row, title=f"查询“{tokens[t]}”对每个键的分数 S[{t}, s]", xlabel="键 token（位置 s）",
         ylabel=r"分数 $q_t \cdot k_s$", ylim=None)
    best = int(row.argmax())
    for i, patch in enumerate(ax_right.patches):
        patch.set_color(ORANGE if i == best else BLUE)
        if i == best:
            patch.set(hatch="//", edgecolor="white")
    ax_right.set_xticks(range(len(tokens)), tokens)
    ax_right.axhline(0, color="grey", lw=0.8)
    low, high = float(row.min()), float(row.max())
    pad = 0.15 * max(high - low, 1.0)
    ax_right.set_ylim(min(low, 0.0) - pad, max(high, 0.0) + pad)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    scores_of = "，".join(f"{token} {float(v):.1f}" for token, v in zip(tokens, row))
    describe(fig, f"左图是 {len(row)}×{len(row)} 的分数表，查询“{tokens[t]}”那一行加了金框；右图是这一行的分数："
                  f"{scores_of}。最高的是“{tokens[best]}”（{float(row[best]):.1f}，橙色带斜线的柱子）。")
    return fig
