"""Figures of section 12_what_heads_learn: the training curve beside the loss at each position of a
repeated sequence, every head's scores as a [layer, head] table, and the loss of the repeated part with
each head switched off.

The notebook computes every number it shows; these helpers only draw them.
"""
from __future__ import annotations

from collections.abc import Mapping

import matplotlib.pyplot as plt
import numpy as np
import torch

from utils.plotting import BLACK, GREY, VERMILLION, bar_style, demo_figure, describe, heading, line_style, one_line


def _t(values) -> torch.Tensor:
    return values.detach().float().cpu() if isinstance(values, torch.Tensor) else torch.as_tensor(values).float()


def moving_average(values, window: int) -> np.ndarray:
    """The mean of every `window` consecutive values (len(values) - window + 1 of them)."""
    v = np.asarray(values, dtype=float)
    return np.convolve(v, np.ones(window) / window, mode="valid")


@demo_figure
def plot_training(losses, by_position, period: int, ln_v: float, title: str):
    """Left: the loss of every training step (and its moving average). Right: the loss of predicting each
    position of repeated sequences of `period`, the repeated part shaded."""
    losses, by_position = np.asarray(losses, dtype=float), _t(by_position).numpy()
    fig, (left, right) = plt.subplots(1, 2, figsize=(11.5, 3.8))
    window = max(1, min(25, len(losses) // 10))
    left.plot(range(1, len(losses) + 1), losses, color=GREY, lw=0.8, alpha=0.7, label="每一步")
    smooth = moving_average(losses, window)
    left.plot(range(window, len(losses) + 1), smooth, label=f"每 {window} 步平均", **line_style(0, marker=False))
    left.axhline(ln_v, color=BLACK, lw=0.8, ls=":", label="瞎猜 $\\ln V$")
    left.set_xlabel("训练步数")
    left.set_ylabel("交叉熵（整条序列的平均）")
    left.set_title("训练曲线", fontsize=10)
    left.legend(fontsize=8)
    positions = np.arange(1, len(by_position) + 1)                    # entry j - 1 predicts position j
    right.axvspan(period - 0.5, positions[-1] + 0.5, color=VERMILLION, alpha=0.12, label="重复部分（目标位置 ≥ P）")
    right.plot(positions, by_position, **line_style(0))
    right.axhline(ln_v, color=BLACK, lw=0.8, ls=":", label="瞎猜 $\\ln V$")
    right.set_xticks(positions)
    right.set_xlabel("被预测的 token 的位置 j")
    right.set_ylabel("预测它的交叉熵")
    right.set_title(f"训练后：重复序列（P = {period}）上每个位置的损失", fontsize=10)
    right.legend(fontsize=8)
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    first, repeated = by_position[:period - 1].mean(), by_position[period - 1:].mean()
    describe(fig, f"{heading(title)}左图是训练曲线：{len(losses)} 步，第一步 {losses[0]:.2f}，"
                  f"最后 {window} 步平均 {smooth[-1]:.2f}（瞎猜 ln V = {ln_v:.2f}）。右图是每个被预测位置的损失："
                  f"位置 1 到 {period - 1} 平均 {first:.2f}，位置 {period} 到 {len(by_position)}（重复部分）"
                  f"平均 {repeated:.2f}，其中位置 {period} 是 {by_position[period - 1]:.2f}。")
    return fig


def _head_names(L: int, H: int) -> list[str]:
    return [f"第 {layer} 层头 {head}" for layer in range(L) for head in range(H)]


@demo_figure
def plot_scores(tables: Mapping[str, torch.Tensor], title: str, ncols: int | None = None, vmax: float = 1.0):
    """One [n_layer, n_head] table of scores per panel (``ncols`` panels a row), the value written in each cell."""
    n = len(tables)
    ncols = ncols or n
    nrows = -(-n // ncols)
    L, H = _t(next(iter(tables.values()))).shape
    size = (max(2.6, 0.9 * H + 1.4) * ncols + 0.8, (0.6 * L + 1.0) * nrows + 0.6)
    fig, axes = plt.subplots(nrows, ncols, figsize=size, squeeze=False, sharey=True, layout="constrained")
    for ax in axes.flat[n:]:
        ax.axis("off")
    for ax, (name, table) in zip(axes.flat, tables.items()):
        m = _t(table)
        image = ax.imshow(m.numpy(), cmap="viridis", vmin=0.0, vmax=vmax)
        for layer in range(L):
            for head in range(H):
                value = float(m[layer, head])
                ax.text(head, layer, f"{value:.2f}", ha="center", va="center", fontsize=9,
                        color="black" if value > 0.6 * vmax else "white")
        ax.set_xticks(range(H), [f"头 {h}" for h in range(H)])
        ax.set_yticks(range(L), [f"第 {layer} 层" for layer in range(L)])
        ax.set_title(name, fontsize=10)
    fig.colorbar(image, ax=axes.flat[:n], shrink=0.8)
    fig.suptitle(title, fontsize=11)
    panels = "；".join(f"{one_line(name)}：" + "，".join(f"{head} {v:.2f}" for head, v in
                                                        zip(_head_names(L, H), _t(table).flatten().tolist()))
                      for name, table in tables.items())
    describe(fig, f"{heading(title)}每张表一行是一层、一列是一个头，格子里写着分数。{panels}。")
    return fig


@demo_figure
def plot_ablation(losses: torch.Tensor, lines: Mapping[str, float], title: str):
    """The loss with each head switched off, one bar per head (a hatch per layer), and reference lines."""
    m = _t(losses)
    L, H = m.shape
    fig, ax = plt.subplots(figsize=(max(5.0, 1.1 * L * H + 2.0), 3.9))
    for layer in range(L):
        x = np.arange(H) + layer * (H + 1)
        bars = ax.bar(x, m[layer].numpy(), label=f"第 {layer} 层的头", **bar_style(layer))
        for bar, value in zip(bars, m[layer].tolist()):
            ax.text(bar.get_x() + bar.get_width() / 2, value, f"{value:.2f}", ha="center", va="bottom", fontsize=8)
    for i, (label, value) in enumerate(lines.items()):
        ax.axhline(value, color=BLACK if i == 0 else GREY, lw=1.0, ls=(":", "--", "-.")[i % 3], label=label)
    ax.set_xticks([layer * (H + 1) + head for layer in range(L) for head in range(H)],
                  [f"L{layer}\n头 {head}" for layer in range(L) for head in range(H)])
    ax.set_ylabel("重复部分的交叉熵")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    bars_text = "，".join(f"{name} {v:.2f}" for name, v in zip(_head_names(L, H), m.flatten().tolist()))
    lines_text = "，".join(f"{one_line(label)} {value:.2f}" for label, value in lines.items())
    describe(fig, f"{heading(title)}每根柱子是去掉一个头之后重复部分的损失：{bars_text}；参照线：{lines_text}。")
    return fig
