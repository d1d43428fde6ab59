"""Figures of section 09_rope: rotated 2-D pairs at two pairs of positions, the rotation of one
pair with the angle table (the widget), which dimensions form a pair in the two layouts, score
tables and scores vs relative distance Δ = m − n, and the angles and scores that long-context
methods produce.

The notebook computes every tensor and number it shows; these helpers only draw them.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib.patches import Arc, Rectangle

from utils.plotting import (BLUE, DASHES, GREEN, ORANGE, PALETTE, VERMILLION, demo_figure, describe, heading,
                            heatmap, line_style, one_line, text_color_on)

Q_COLOR, K_COLOR = BLUE, ORANGE
PAIR_COLORS = PALETTE


def _np(t) -> np.ndarray:
    return t.detach().double().cpu().numpy() if isinstance(t, torch.Tensor) else np.asarray(t, dtype=float)


def _plane(ax, radius: float) -> None:
    ax.axhline(0, color="#cccccc", lw=0.8)
    ax.axvline(0, color="#cccccc", lw=0.8)
    ax.add_patch(plt.Circle((0, 0), radius, fill=False, ls=":", color="#999999"))
    ax.set_xlim(-1.25 * radius, 1.25 * radius)
    ax.set_ylim(-1.25 * radius, 1.25 * radius)
    ax.set_aspect("equal")
    ax.set_xlabel("第一个分量")
    ax.set_ylabel("第二个分量")


def _finish(fig, suptitle: str = "") -> None:
    if suptitle:
        fig.suptitle(suptitle)
    fig.tight_layout(rect=(0, 0, 1, 0.94) if suptitle else (0, 0, 1, 1))


def _arrow(ax, xy, color, label, alpha=1.0, ls="-", tip: str = "") -> None:
    """An arrow from the origin to ``xy``, in the legend as ``label``; ``tip`` names it at its head."""
    ax.annotate("", xy=(xy[0], xy[1]), xytext=(0, 0),
                arrowprops=dict(arrowstyle="->", color=color, lw=2.2, alpha=alpha, ls=ls))
    ax.plot([], [], color=color, lw=2.2, alpha=alpha, ls=ls, label=label)
    if tip:
        # regular weight: the CJK font the course ships (mplfonts) has no bold, and asking for one printed
        # matplotlib's findfont warning on stderr in the learner's notebook
        ax.annotate(tip, (xy[0], xy[1]), textcoords="offset points", xytext=(4, 4), fontsize=10, color=color)


# --- §2 two rotated vectors ------------------------------------------------------------------

@demo_figure
def plot_rotated_pairs(panels: Sequence[Mapping], suptitle: str = ""):
    """One panel per (m, n): q and k before (faint) and after rotation, the angle between them.

    Each panel: {"title", "q", "k", "q_rot", "k_rot"} with 2-D tensors.
    """
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 4.4), squeeze=False)
    radius = max(float(np.linalg.norm(_np(p[key]))) for p in panels for key in ("q", "k"))
    for ax, p in zip(axes[0], panels):
        _plane(ax, radius)
        _arrow(ax, _np(p["q"]), Q_COLOR, "q（旋转前）", alpha=0.3, ls="--")
        _arrow(ax, _np(p["k"]), K_COLOR, "k（旋转前）", alpha=0.3, ls="--")
        q_rot, k_rot = _np(p["q_rot"]), _np(p["k_rot"])
        _arrow(ax, q_rot, Q_COLOR, "R(mθ) q", tip="q")
        _arrow(ax, k_rot, K_COLOR, "R(nθ) k", tip="k")
        a_q, a_k = np.degrees(np.arctan2(q_rot[1], q_rot[0])), np.degrees(np.arctan2(k_rot[1], k_rot[0]))
        lo, hi = sorted((a_q, a_k))
        if hi - lo > 180:
            lo, hi = hi, lo + 360
        ax.add_patch(Arc((0, 0), 0.7 * radius, 0.7 * radius, theta1=lo, theta2=hi, color=GREEN, lw=2))
        ax.set_title(p["title"], fontsize=10)
        ax.legend(loc="lower left", fontsize=7)
    _finish(fig, suptitle)
    angles = "；".join(f"{one_line(p['title'])}：旋转后 q 与 k 的夹角 {_angle(p['q_rot'], p['k_rot']):.0f}°"
                      for p in panels)
    describe(fig, f"{heading(suptitle)}每张图里，虚线是旋转前的 q、k，实线是旋转后的（箭头旁标着 q、k），"
                  f"弧线是它们的夹角。{angles}。")
    return fig


def _angle(a, b) -> float:
    """The angle between two 2-D vectors, in degrees."""
    a, b = _np(a), _np(b)
    return float(np.degrees(np.arccos(np.clip(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)), -1, 1))))


# --- §3 the widget: one pair rotating, and the table of angles -------------------------------

@demo_figure
def draw_rotation(trail: torch.Tensor, cos_table: torch.Tensor, m: int, i: int, title: str):
    """Left: pair i of a unit vector at positions 0 … m (the trail), the current one as an arrow.
    Right: cos(angle[m, i]) for every position and pair, the current cell framed."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.6), gridspec_kw={"width_ratios": [1, 1.5]})
    _plane(left, 1.0)
    xy = _np(trail)
    colors = plt.get_cmap("viridis")(np.linspace(0, 1, len(xy)))
    left.scatter(xy[:, 0], xy[:, 1], c=colors, s=18, zorder=3)
    for position in range(min(len(xy), 6)):
        left.annotate(str(position), xy[position] * 1.1, ha="center", va="center", fontsize=8, color="#555555")
    _arrow(left, xy[-1], VERMILLION, f"位置 m = {m}")
    left.legend(loc="lower left", fontsize=8)
    left.set_title(f"第 {i} 对分量：位置 0…{m} 各转到哪里", fontsize=10)
    image = right.imshow(_np(cos_table), aspect="auto", cmap="RdBu_r", vmin=-1, vmax=1)
    right.add_patch(Rectangle((i - 0.5, m - 0.5), 1, 1, fill=False, ec="black", lw=2))
    right.set_xlabel("频率编号 i（越往右转得越慢）")
    right.set_ylabel("位置 m")
    right.set_title("cos(角度[m, i])：整张角度表", fontsize=10)
    fig.colorbar(image, ax=right, fraction=0.04)
    _finish(fig, title)
    table = _np(cos_table)
    describe(fig, f"{heading(title)}左图：第 {i} 对分量在位置 0…{m} 依次转到的点（单位圆上），位置 {m} 画成箭头，"
                  f"转了 {np.degrees(np.arctan2(xy[-1, 1], xy[-1, 0])) % 360:.0f}°。右图：整张 cos(角度) 表，"
                  f"{table.shape[0]} 个位置 × {table.shape[1]} 个频率，框出的格子（位置 {m}、频率 {i}）是 "
                  f"{table[m, i]:.2f}。")
    return fig


# --- §4 / §7 which dimensions are paired -----------------------------------------------------

@demo_figure
def plot_pairings(pairings: Mapping[str, Sequence[int]]):
    """One row per layout: the d dimensions of a vector, each coloured by the pair it belongs to."""
    n = len(pairings)
    d = len(next(iter(pairings.values())))
    fig, axes = plt.subplots(n, 1, figsize=(0.75 * d + 1.5, 1.25 * n + 0.4), squeeze=False)
    for ax, (title, pair_of) in zip(axes[:, 0], pairings.items()):
        for j, pair in enumerate(pair_of):
            color = PAIR_COLORS[pair % len(PAIR_COLORS)]
            ax.add_patch(Rectangle((j, 0), 0.94, 0.94, color=color))
            ax.text(j + 0.47, 0.62, f"x[{j}]", ha="center", va="center", color=text_color_on(color), fontsize=9)
            ax.text(j + 0.47, 0.27, f"对 {pair}", ha="center", va="center", color=text_color_on(color), fontsize=8)
        ax.set_xlim(0, d)
        ax.set_ylim(0, 1)
        ax.axis("off")
        ax.set_title(title, fontsize=10)
    fig.tight_layout()
    layouts = "；".join(f"{one_line(title)}：" + "，".join(
        "与".join(f"x[{j}]" for j, p in enumerate(pair_of) if p == pair) for pair in sorted(set(pair_of)))
        for title, pair_of in pairings.items())
    describe(fig, f"一个 {d} 维向量的哪两个分量组成一对，一起旋转（格子里写着“对 i”）。{layouts}。")
    return fig


# --- §5 scores and relative distance ---------------------------------------------------------

@demo_figure
def plot_score_tables(tables: Mapping[str, torch.Tensor], suptitle: str = ""):
    """Score tables S[m, n] side by side (the same q at every m, the same k at every n), one colour scale."""
    fig, axes = plt.subplots(1, len(tables), figsize=(4.4 * len(tables), 4.2), squeeze=False)
    top = max(float(t.abs().max()) for t in tables.values())
    for ax, (title, table) in zip(axes[0], tables.items()):
        image = heatmap(ax, table, title, xlabel="键的位置 n", ylabel="查询的位置 m", cmap="RdBu_r",
                        vmin=-top, vmax=top, annotate=False)
        step = max(1, table.size(0) // 8)
        ax.set_xticks(range(0, table.size(1), step))
        ax.set_yticks(range(0, table.size(0), step))
        fig.colorbar(image, ax=ax, fraction=0.046)
    _finish(fig, suptitle)
    each = "；".join(f"{one_line(title)}：|分数| 最大 {float(t.abs().max()):.2f}，同一条对角线（m − n 相同）上的分数"
                    f"最多相差 {_diagonal_spread(_np(t)):.2g}" for title, t in tables.items())
    describe(fig, f"{heading(suptitle)}分数表 S[m, n]，行是查询的位置 m，列是键的位置 n。{each}。")
    return fig


def _diagonal_spread(table: np.ndarray) -> float:
    """The largest difference between two scores on one diagonal (the same m − n) of a table."""
    rows, cols = table.shape
    return max(float(np.ptp(np.diagonal(table, offset))) for offset in range(-rows + 1, cols))


@demo_figure
def plot_curves(panels: Sequence[Mapping], suptitle: str = ""):
    """Line plots side by side. Each panel: {"title", "x", "curves": {label: y}, "xlabel", "ylabel",
    optional "styles": {label: matplotlib kwargs}, "logx", "logy", "hlines": [(y, label)], "vlines": [(x, label)]}.
    A curve without a dash of its own in "styles" takes the next one no other curve of the panel has."""
    fig, axes = plt.subplots(1, len(panels), figsize=(5.6 * len(panels), 4.2), squeeze=False)
    for ax, p in zip(axes[0], panels):
        x = _np(p["x"])
        styles = p.get("styles", {})
        taken = {s.get("ls", s.get("linestyle")) for label, s in styles.items() if label in p["curves"]}
        free = iter([dash for dash in DASHES if dash not in taken] * len(p["curves"]))
        for k, (label, y) in enumerate(p["curves"].items()):
            own, style = styles.get(label, {}), line_style(k, marker=False)
            if "ls" in own or "linestyle" in own:
                del style["linestyle"]
            else:
                style["linestyle"] = next(free)
            ax.plot(x, _np(y), label=label, **{**style, "lw": 1.8, **own})
        for y, label in p.get("hlines", []):
            ax.axhline(y, color="#555555", ls="--", lw=1)
            ax.text(x[0], y, f" {label}", va="bottom", fontsize=8, color="#555555")
        for x_line, label in p.get("vlines", []):
            ax.axvline(x_line, color="#555555", ls=":", lw=1)
            ax.text(x_line, ax.get_ylim()[0], f" {label}", va="bottom", fontsize=8, color="#555555")
        if p.get("logx"):
            ax.set_xscale("log")
        if p.get("logy"):
            ax.set_yscale("log")
        ax.set_title(p["title"], fontsize=10)
        ax.set_xlabel(p["xlabel"])
        ax.set_ylabel(p["ylabel"])
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    _finish(fig, suptitle)
    describe(fig, heading(suptitle) + "；".join(_curves_text(p) for p in panels) + "。")
    return fig


def _curves_text(panel: Mapping) -> str:
    x = _np(panel["x"])
    curves = "，".join(f"{label} 从 {_np(y)[0]:.3g} 到 {_np(y)[-1]:.3g}（最大 {_np(y).max():.3g}）"
                      for label, y in panel["curves"].items())
    return f"{one_line(panel['title'])}（横轴 {panel['xlabel']}，{x[0]:g} 到 {x[-1]:g}）：{curves}"
