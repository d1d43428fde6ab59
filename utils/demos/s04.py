"""Data and figures of section 04_masks: the "copy the answer" toy task, mask grids per batch
item, fully masked rows side by side, low-precision running sums and the mask widget.

The notebook builds every model, mask and tensor it shows; these helpers only sample the toy
data and draw.
"""
from __future__ import annotations

import math
from collections.abc import Sequence

import matplotlib.pyplot as plt
import torch

from utils.plotting import (BLACK, BLUE, VERMILLION, bar_style, demo_figure, describe, heading, heatmap, heatmaps,
                            line_style, matrix_summary, one_line)

_RUNS = "ABC"   # a run's label starts with its letter: its line and bar style


def _t(m) -> torch.Tensor:
    return m.detach().float().cpu() if isinstance(m, torch.Tensor) else torch.as_tensor(m, dtype=torch.float32)


# --- 1. the toy next-token task -----------------------------------------------------------------

def sample_counting(n: int, length: int, vocab: int, p_step: float, generator: torch.Generator) -> torch.Tensor:
    """n token sequences of the given length over tokens 0..vocab-1 ("counting with noise").

    The first token is uniform; afterwards, with probability p_step the next token is
    (current + 1) % vocab, otherwise a uniformly random token. Returns a long tensor (n, length).
    """
    follow = torch.rand(n, length - 1, generator=generator) < p_step        # (n, L-1)
    noise = torch.randint(vocab, (n, length - 1), generator=generator)     # (n, L-1)
    x = torch.empty(n, length, dtype=torch.long)
    x[:, 0] = torch.randint(vocab, (n,), generator=generator)
    for t in range(length - 1):
        x[:, t + 1] = torch.where(follow[:, t], (x[:, t] + 1) % vocab, noise[:, t])
    return x


def counting_entropy(vocab: int, p_step: float) -> float:
    """Cross-entropy (nats) of the best predictor that sees only the past: H(x_{t+1} | x_t)."""
    p_next = p_step + (1 - p_step) / vocab
    p_other = (1 - p_step) / vocab
    return -(p_next * math.log(p_next) + (vocab - 1) * p_other * math.log(p_other))


@demo_figure
def plot_leak_experiment(curves: dict[str, Sequence[float]], floor: float,
                         metrics: dict[str, dict[str, float]], chance: float, best_acc: float):
    """Left: training loss per step with the entropy floor; right: teacher-forced vs generation metrics.

    ``curves`` maps a run label ("A …") to its losses; ``metrics`` maps the same labels to
    {"训练式": acc, "只给前缀": acc, "贪心生成守规则": share}.
    """
    fig, axes = plt.subplots(1, 2, figsize=(12.5, 4.2), gridspec_kw={"width_ratios": [1.05, 1]}, layout="constrained")
    ax = axes[0]
    for label, losses in curves.items():
        style = line_style(_RUNS.find(label[0]), marker=False)
        ax.plot(range(1, len(losses) + 1), losses, lw=1.4, label=label, **style)
    ax.axhline(floor, color="black", ls=":", lw=1.4, label=f"理论下限 H = {floor:.3f}（只看过去的最优预测）")
    ax.set_xlabel("训练步数")
    ax.set_ylabel("训练 loss（交叉熵，nats）")
    ax.set_title("训练 loss：低于理论下限 = 偷看了答案")
    ax.set_ylim(0, max(max(c) for c in curves.values()) * 1.05)
    ax.legend(fontsize=8, loc="upper right")
    ax.grid(alpha=0.3)

    ax = axes[1]
    kinds = list(next(iter(metrics.values())).keys())
    width = 0.8 / len(metrics)
    for i, (label, values) in enumerate(metrics.items()):
        xs = [j + (i - (len(metrics) - 1) / 2) * width for j in range(len(kinds))]
        heights = [values[k] for k in kinds]
        ax.bar(xs, heights, width, label=label, **bar_style(_RUNS.find(label[0])))
        for x, h in zip(xs, heights):
            ax.text(x, h + 0.01, f"{h:.2f}", ha="center", va="bottom", fontsize=7)
    ax.axhline(best_acc, color="black", ls="--", lw=1.0, label=f"只看过去能达到的最高准确率 {best_acc:.3f}")
    ax.axhline(chance, color="grey", ls=":", lw=1.2, label=f"瞎猜 1/V = {chance:.3f}")
    ax.set_xticks(range(len(kinds)), kinds)
    ax.set_ylim(0, 1.3)
    ax.set_ylabel("准确率 / 比例")
    ax.set_title("同一个模型：训练时的成绩 vs 生成时的成绩")
    ax.legend(fontsize=7.5, loc="upper center", ncols=2)
    runs = "；".join(f"{label}：最后的训练 loss {curves[label][-1]:.3f}，"
                    + "，".join(f"{kind} {value:.2f}" for kind, value in values.items())
                    for label, values in metrics.items())
    describe(fig, f"左图是训练 loss 随步数的变化，理论下限 H = {floor:.3f}；右图是训练式与生成时的成绩"
                  f"（只看过去最高 {best_acc:.3f}，瞎猜 {chance:.3f}）。{runs}。")
    return fig


# --- masks per batch item -----------------------------------------------------------------------

@demo_figure
def plot_mask_grid(masks: Sequence[torch.Tensor], titles: Sequence[str],
                   labels: Sequence[Sequence[str]] | None = None, suptitle: str = "", ncols: int | None = None):
    """Boolean [Tq, Tk] masks as heatmaps (dark = may attend), every cell labelled 1 or 0.

    ``labels`` gives the token text of each panel's positions (the same for rows and columns).
    """
    mats = [_t(m) for m in masks]
    fig = heatmaps(mats, titles, suptitle=suptitle, ncols=ncols, size=3.0, annotate=False,
                   cmap="Blues", vmin=0.0, vmax=1.4)
    for i, (ax, m) in enumerate(zip(fig.axes, mats)):
        rows, cols = m.shape
        for t in range(rows):
            for s in range(cols):
                on = bool(m[t, s] > 0.5)
                ax.text(s, t, "1" if on else "0", ha="center", va="center", fontsize=8,
                        color="white" if on else "#9a9a9a")
        if labels is not None:
            ax.set_xticks(range(cols), labels[i][:cols], rotation=60, fontsize=8)
            ax.set_yticks(range(rows), labels[i][:rows], fontsize=8)
        ax.set_xlabel("键 s（被看的位置）")
        ax.set_ylabel("查询 t（看的位置）")
    fig.tight_layout()
    panels = "；".join(f"{one_line(title)}：{m.shape[0]}×{m.shape[1]}，{int((m > 0.5).sum())} 格可以看"
                       for m, title in zip(mats, titles))
    describe(fig, f"{heading(suptitle)}每张图一个掩码，1 = 可以看，0 = 不能看（格子里写着）。{panels}。")
    return fig


# --- fully masked rows --------------------------------------------------------------------------

@demo_figure
def plot_fully_masked(weights: Sequence[torch.Tensor], titles: Sequence[str], empty_rows: Sequence[int],
                      suptitle: str = ""):
    """[T, T] weight tables side by side; NaN cells grey ("nan"), fully masked rows' labels in red."""
    n = len(weights)
    fig, axes = plt.subplots(1, n, figsize=(3.4 * n, 3.8), squeeze=False, layout="constrained")
    for ax, w, title in zip(axes[0], weights, titles):
        w = _t(w)
        T = w.size(-1)
        heatmap(ax, w, title, vmin=0.0, vmax=1.0, labels=[str(i) for i in range(T)])
        ax.set_yticks(range(T), [f"{t} 全屏蔽" if t in empty_rows else str(t) for t in range(T)])
        for t, label in enumerate(ax.get_yticklabels()):
            if t in empty_rows:
                label.set_color(VERMILLION)
    if suptitle:
        fig.suptitle(suptitle)
    rows = "；".join(f"{one_line(title)}：{_row_in_words(_t(w), empty_rows)}" for w, title in zip(weights, titles))
    describe(fig, f"{heading(suptitle)}{n} 张权重表，第 {'、'.join(map(str, empty_rows))} 行的键全被屏蔽。"
                  f"这些行里：{rows}。")
    return fig


def _row_in_words(weights: torch.Tensor, rows: Sequence[int]) -> str:
    row = weights[rows[0]] if rows else weights[0]
    if row.isnan().any():
        return "NaN"
    return f"每格 {row.mean().item():.2f}，行和 {row.sum().item():.2f}"


# --- low precision ------------------------------------------------------------------------------

@demo_figure
def plot_running_sums(sums: dict[str, torch.Tensor], title: str = ""):
    """Running sum of exp(scores - max) along one long row, one line per accumulator dtype."""
    styles = {"float32": (BLACK, "-"), "float16": (VERMILLION, "--"), "bfloat16": (BLUE, "-.")}
    fig, ax = plt.subplots(figsize=(7.0, 3.8))
    for label, values in sums.items():
        color, ls = styles.get(label.split()[0], (None, "-"))
        v = _t(values)
        ax.plot(range(1, v.numel() + 1), v, color=color, ls=ls, lw=1.6, label=label)
    ax.set_xlabel("已经累加的项数 s")
    ax.set_ylabel(r"累加和 $\sum_{j\leq s} e^{x_j - \max x}$")
    ax.set_title(title or "softmax 分母的累加过程")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=9, loc="upper left")
    fig.tight_layout()
    describe(fig, f"{title or 'softmax 分母的累加过程'}：每条线是一种累加精度，横轴是已经累加的项数。最后的累加和："
                  + "；".join(f"{label} {_t(values)[-1].item():.1f}" for label, values in sums.items()) + "。")
    return fig


# --- widget -------------------------------------------------------------------------------------

@demo_figure
def draw_mask_and_weights(mask: torch.Tensor, weights: torch.Tensor, title: str,
                          labels: Sequence[str] | None = None):
    """The [T, T] boolean mask (left) and the attention weights it produces (right)."""
    mask, weights = _t(mask), _t(weights)
    T = mask.size(-1)
    labels = list(labels) if labels is not None else [str(i) for i in range(T)]
    size = min(2.4 + 0.36 * T, 5.6)
    fig, axes = plt.subplots(1, 2, figsize=(2 * size + 1.2, size))
    heatmap(axes[0], mask, "掩码（1 = 可以看）", cmap="Blues", vmin=0.0, vmax=1.4, labels=labels,
            annotate=False)
    if T <= 12:
        for t in range(T):
            for s in range(T):
                on = bool(mask[t, s] > 0.5)
                axes[0].text(s, t, "1" if on else "0", ha="center", va="center", fontsize=7,
                             color="white" if on else "#9a9a9a")
    image = heatmap(axes[1], weights, "注意力权重（masked_softmax）", vmin=0.0, vmax=1.0, labels=labels,
                    annotate=T <= 8)
    fig.colorbar(image, ax=axes[1], fraction=0.046, pad=0.04)
    for ax in axes:
        ax.tick_params(axis="x", labelrotation=60, labelsize=8)
        ax.tick_params(axis="y", labelsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    describe(fig, f"{one_line(title)}：左图是 {T}×{T} 的掩码，{int((mask > 0.5).sum())} 格可以看；"
                  f"右图是它给出的注意力权重（{matrix_summary(weights)}）。")
    return fig
