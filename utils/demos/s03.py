"""Figures of section 03_single_head_attention: the 4-token walk-through (masked scores,
weights, row sums), outputs as weighted averages of values, healthy vs saturated weights,
the future-perturbation test and the "high weight is not a cause" bars.

The notebook builds every tensor it shows; these helpers only draw them.
"""
from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
import torch

from utils.plotting import (BLUE, PALETTE, VERMILLION, bar_style, bars, demo_figure, describe, heading, heatmap,
                            matrix_summary, one_line)


def _t(m) -> torch.Tensor:
    return m.detach().float().cpu() if isinstance(m, torch.Tensor) else torch.as_tensor(m, dtype=torch.float32)


def _positions(n: int) -> list[str]:
    return [str(i) for i in range(n)]


def masked_scores_heatmap(ax, masked, title: str = "掩码后的分数（灰色 = -inf）"):
    """Scores with -inf cells: finite ones on a colour scale, -inf ones grey and labelled."""
    m = _t(masked)
    finite = m[torch.isfinite(m)]
    cmap = plt.get_cmap("viridis").with_extremes(under="#d0d0d0", bad="#d0d0d0")  # -inf is "bad"
    lo, hi = float(finite.min()), float(finite.max())
    image = heatmap(ax, m, title, cmap=cmap, vmin=lo, vmax=hi if hi > lo else lo + 1,
                    labels=_positions(m.size(-1)))
    for text in ax.texts:  # grey -inf cells need dark text
        if text.get_text() == "-inf":
            text.set_color("black")
    return image


@demo_figure
def plot_walkthrough(masked, weights, suptitle: str = ""):
    """Masked scores | weights | row sums of the weights, for one sequence ([T, T] tensors)."""
    masked, weights = _t(masked), _t(weights)
    T = weights.size(-1)
    size = 2.6 + 0.35 * T
    fig, axes = plt.subplots(1, 3, figsize=(3 * size, size), gridspec_kw={"width_ratios": [1, 1, 0.9]})
    masked_scores_heatmap(axes[0], masked, "第二步：掩码后的分数\n（灰色格子 = -inf）")
    heatmap(axes[1], weights, "第三步：注意力权重\n（按行 softmax）", vmin=0.0, vmax=1.0, labels=_positions(T))
    bars(axes[2], weights.sum(-1), "每行权重之和", xlabel="查询位置 t", ylabel="行和", ylim=(0, 1.2))
    if suptitle:
        fig.suptitle(suptitle)
    fig.tight_layout()
    row_sums = "、".join(f"{float(x):.2f}" for x in weights.sum(-1))
    describe(fig, f"{heading(suptitle)}左图是掩码后的分数（{matrix_summary(masked)}），"
                  f"中图是按行 softmax 得到的权重（{matrix_summary(weights)}），右图是每行权重之和：{row_sums}。")
    return fig


@demo_figure
def plot_weighted_average(v, out, weights, title: str = "每个输出都是 value 的加权平均"):
    """2-D values v_s (dots) and outputs out_t (stars); a line from out_t to every v_s it uses."""
    v, out, weights = _t(v), _t(out), _t(weights)
    T = v.size(0)
    fig, ax = plt.subplots(figsize=(5.6, 4.8))
    for t in range(T):
        color = PALETTE[t % len(PALETTE)]
        for s in range(T):
            w = float(weights[t, s])
            if w > 0:
                ax.plot([out[t, 0], v[s, 0]], [out[t, 1], v[s, 1]], color=color, lw=0.5 + 3 * w, alpha=0.45)
        used = "只用到 v_0，与它重合" if t == 0 else f"用到 v_0…v_{t}"
        ax.scatter(out[t, 0], out[t, 1], marker="*", s=220, color=color, edgecolor="black", zorder=5,
                   label=f"out_{t}（{used}）")
        ax.annotate(f"out_{t}", out[t].tolist(), textcoords="offset points", xytext=(-9, -14), fontsize=8,
                    ha="right", color=color)
    ax.scatter(v[:, 0], v[:, 1], s=260, facecolor="none", edgecolor="black", lw=1.2, zorder=4)
    for s in range(T):
        ax.annotate(f"v_{s}", v[s].tolist(), textcoords="offset points", xytext=(9, 6), fontsize=11)
    ax.set_xlabel("第 1 维")
    ax.set_ylabel("第 2 维")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.set_aspect("equal", adjustable="datalim")
    ax.legend(fontsize=8, loc="best")
    fig.tight_layout()
    last = "，".join(f"v_{s} {float(weights[T - 1, s]):.2f}" for s in range(T))
    describe(fig, f"{T} 个 value 向量 v_s（空心圆）和 {T} 个输出 out_t（星号，旁边标着名字）："
                  f"out_t 是 v_0…v_t 的加权平均，连线越粗权重越大。例如 out_{T - 1} 的权重：{last}。")
    return fig


@demo_figure
def plot_healthy_vs_saturated(w_healthy, w_saturated, titles: Sequence[str]):
    """Two [T, T] weight heatmaps side by side, then the largest weight of every row for both."""
    w_healthy, w_saturated = _t(w_healthy), _t(w_saturated)
    T = w_healthy.size(-1)
    fig, axes = plt.subplots(1, 3, figsize=(12.5, 4.0), gridspec_kw={"width_ratios": [1, 1, 1.15]})
    heatmap(axes[0], w_healthy, titles[0], vmin=0.0, vmax=1.0, labels=_positions(T))
    heatmap(axes[1], w_saturated, titles[1], vmin=0.0, vmax=1.0, labels=_positions(T))
    rows = torch.arange(T, dtype=torch.float32)
    width = 0.38
    for i, (shift, w, label) in enumerate([(-width / 2, w_healthy, "健康"), (width / 2, w_saturated, "饱和（斜线）")]):
        top = w.amax(-1)
        axes[2].bar(rows + shift, top, width, label=label, **bar_style(i))
        for x, value in zip(rows + shift, top):
            axes[2].text(float(x), float(value), f"{float(value):.2f}", ha="center", va="bottom", fontsize=7)
    axes[2].axhline(1.0, color="grey", lw=0.8, ls="--")
    axes[2].set_ylim(0, 1.15)
    axes[2].set_xticks(range(T))
    axes[2].set_xlabel("查询位置 t")
    axes[2].set_ylabel("该行最大的权重")
    axes[2].set_title("每行最大权重（第 0 行恒为 1）")
    axes[2].legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    describe(fig, f"左：{one_line(titles[0])}；中：{one_line(titles[1])}；右图是每行最大的权重，"
                  f"第 1 行起（第 0 行恒为 1，不算在内）健康的平均 {_row_max_mean(w_healthy):.2f}，"
                  f"饱和的平均 {_row_max_mean(w_saturated):.2f}（越接近 1，这一行越只看一个键）。")
    return fig


@demo_figure
def draw_weights(weights, title: str):
    """One weight heatmap sized to T (annotated while T <= 8), for the widget."""
    weights = _t(weights)
    T = weights.size(-1)
    size = min(2.2 + 0.42 * T, 6.0)
    fig, ax = plt.subplots(figsize=(size + 1.0, size))
    image = heatmap(ax, weights, title, vmin=0.0, vmax=1.0, labels=_positions(T))
    fig.colorbar(image, ax=ax, fraction=0.046, pad=0.04, label="注意力权重")
    fig.tight_layout()
    describe(fig, f"{one_line(title)}：{matrix_summary(weights)}；"
                  f"第 1 行起（第 0 行恒为 1，不算在内）每行最大权重的平均 {_row_max_mean(weights):.2f}。")
    return fig


def _row_max_mean(weights: torch.Tensor) -> float:
    """The mean of the largest weight of rows 1 … T-1 of a causal [T, T] table (row 0 is always 1)."""
    return weights[1:].amax(-1).mean().item()


@demo_figure
def plot_future_perturbation(delta_causal, delta_full, t0: int):
    """Per-position output change after perturbing positions >= t0, with and without the mask."""
    delta_causal, delta_full = _t(delta_causal), _t(delta_full)
    T = delta_causal.numel()
    top = float(max(delta_causal.max(), delta_full.max())) * 1.2 or 1.0
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.4), sharey=True)
    for ax, delta, title in [(axes[0], delta_causal, "有因果掩码（Head）"),
                             (axes[1], delta_full, "去掉掩码（同样的投影）")]:
        for t in range(T):
            ax.bar(t, delta[t], color=BLUE if t < t0 else VERMILLION, hatch="" if t < t0 else "//", edgecolor="white")
        ax.axvspan(t0 - 0.5, T - 0.5, color=VERMILLION, alpha=0.08)
        ax.text(t0 - 0.4, top * 0.92, f"位置 {t0}…{T - 1} 的输入被改动", fontsize=8, color=VERMILLION)
        for t, value in enumerate(delta):
            ax.text(t, float(value), f"{float(value):.2g}", ha="center", va="bottom", fontsize=7)
        ax.set_ylim(0, top)
        ax.set_xticks(range(T))
        ax.set_xlabel("输出位置 t")
        ax.set_title(title)
    axes[0].set_ylabel("max |Δ out_t|")
    fig.suptitle("改动“未来”的输入：过去位置的输出变了吗？")
    fig.tight_layout()
    describe(fig, f"改动位置 {t0}…{T - 1} 的输入之后，位置 0…{t0 - 1} 的输出最多变了多少：有因果掩码时 "
                  f"{delta_causal[:t0].max().item():.2g}，去掉掩码时 {delta_full[:t0].max().item():.2g}"
                  "（被改动的位置画成带斜线的柱子）。")
    return fig


@demo_figure
def plot_attribution(weights, contribution, ablation, labels: Sequence[str]):
    """Three views of how much each key s matters to one query: weight, ‖A v‖, ablation effect.

    The most-attended key is red and hatched in every panel; each panel's own largest bar is marked.
    """
    weights = _t(weights)
    focus = int(weights.argmax())
    fig, axes = plt.subplots(1, 3, figsize=(12, 3.4))
    panels = [(weights, r"注意力权重 $A_{t,s}$", "权重"),
              (_t(contribution), r"贡献大小 $\Vert A_{t,s}\,v_s \Vert$", "范数"),
              (_t(ablation), r"屏蔽键 s 后输出的变化", r"$\Vert \mathrm{out}_t - \mathrm{out}_t^{(-s)} \Vert$")]
    for ax, (values, title, ylabel) in zip(axes, panels):
        best = int(values.argmax())
        for s in range(values.numel()):
            ax.bar(s, values[s], color=VERMILLION if s == focus else BLUE, hatch="//" if s == focus else "",
                   edgecolor="white")
        for s, value in enumerate(values):
            mark = "\n▼最大" if s == best else ""
            ax.text(s, float(value), f"{float(value):.2f}{mark}", ha="center", va="bottom", fontsize=7)
        ax.set_ylim(0, float(values.max()) * 1.3)
        ax.set_xticks(range(values.numel()), labels)
        ax.set_xlabel("键位置 s")
        ax.set_ylabel(ylabel)
        ax.set_title(title)
    fig.suptitle(f"红色斜线 = 注意力权重最大的键（s={focus}）：按另外两种度量，它还是最重要的吗？", fontsize=11)
    fig.tight_layout()
    biggest = [labels[int(_t(values).argmax())] for values, _, _ in panels]
    describe(fig, f"同一个查询对 {weights.numel()} 个键的三种度量：注意力权重最大的是 {biggest[0]}"
                  f"（{weights.max().item():.2f}），贡献大小 ‖A v‖ 最大的是 {biggest[1]}，"
                  f"屏蔽后输出变化最大的是 {biggest[2]}。")
    return fig
