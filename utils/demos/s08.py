"""Figures of section 08_ffn_norm_residual: which outputs depend on which inputs (FFN vs causal
attention), the activation functions, the FFN's share of a block's FLOPs vs T, the effect of eps
on small inputs, and gradient norms per layer in deep stacks (Pre-Norm, Post-Norm, no residual).

The notebook computes every tensor and number it shows; these helpers only draw them.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt
import torch

from utils.plotting import demo_figure, heatmap

STYLE_COLORS = {"Pre-Norm（有残差）": "#4C72B0", "Post-Norm（有残差）": "#DD8452", "无残差（有归一化）": "#C44E52"}


def _t(m) -> torch.Tensor:
    return m.detach().float().cpu() if isinstance(m, torch.Tensor) else torch.as_tensor(m, dtype=torch.float32)


@demo_figure
def plot_dependency(maps: Mapping[str, torch.Tensor], suptitle: str):
    """One heatmap per module: entry [t, s] = how much output position t moves with input position s."""
    fig, axes = plt.subplots(1, len(maps), figsize=(4.6 * len(maps), 4.2), squeeze=False)
    for ax, (title, m) in zip(axes[0], maps.items()):
        m = _t(m)
        heatmap(ax, m / m.max(), title=title, xlabel="输入位置 s（被改动的 token）", ylabel="输出位置 t",
                annotate=True, vmin=0.0, vmax=1.0)
    fig.suptitle(suptitle)
    fig.tight_layout()
    return fig


@demo_figure
def plot_activations(z: torch.Tensor, curves: Mapping[str, torch.Tensor]):
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    for name, y in curves.items():
        ax.plot(_t(z).numpy(), _t(y).numpy(), label=name, lw=2)
    ax.axhline(0, color="grey", lw=0.8)
    ax.axvline(0, color="grey", lw=0.8)
    ax.set_xlabel("输入 z")
    ax.set_ylabel("激活值")
    ax.set_title("FFN 与 SwiGLU 用到的激活函数")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


@demo_figure
def plot_ffn_share(Ts: Sequence[int], shares: Mapping[str, Sequence[float]], param_shares: Mapping[str, float]):
    """FFN share of a block's forward FLOPs vs context length T (log x), one line per config;
    the dashed level of each is its share of the block's parameters."""
    fig, ax = plt.subplots(figsize=(7.4, 4.4))
    for (name, ys), color in zip(shares.items(), ["#4C72B0", "#DD8452", "#55A868"]):
        ax.plot(Ts, [100 * y for y in ys], "o-", color=color, label=f"{name}：FLOPs 占比")
        ax.axhline(100 * param_shares[name], color=color, ls="--", lw=1, label=f"{name}：参数占比")
    ax.set_xscale("log", base=2)
    ax.set_ylim(0, 100)
    ax.set_xlabel("上下文长度 T（token）")
    ax.set_ylabel("FFN 所占百分比（%）")
    ax.set_title("一个 Block 里 FFN 占多少：参数（虚线）与每个 token 的前向 FLOPs（实线）")
    ax.legend(fontsize=8, loc="lower left")
    ax.grid(alpha=0.3, which="both")
    fig.tight_layout()
    return fig


@demo_figure
def plot_eps_effect(scales: torch.Tensor, curves: Mapping[str, torch.Tensor], eps: float):
    fig, ax = plt.subplots(figsize=(6.8, 4.2))
    for name, y in curves.items():
        ax.plot(_t(scales).numpy(), _t(y).numpy(), lw=2, label=name)
    ax.axvline(eps ** 0.5, color="grey", ls=":", lw=1)
    ax.text(eps ** 0.5, 0.05, " √eps", color="grey")
    ax.set_xscale("log")
    ax.set_xlabel("输入的均方根 RMS(x)")
    ax.set_ylabel("输出的均方根 RMS(y)")
    ax.set_title(f"输入很小时，eps 的位置决定了输出（eps = {eps:g}，weight = 1）")
    ax.legend(fontsize=9)
    ax.grid(alpha=0.3, which="both")
    fig.tight_layout()
    return fig


def plot_grad_norms(norms: Mapping[str, Sequence[float]], title: str, ax=None):
    """Gradient norm of each layer's parameters (log y) vs layer index, one line per style."""
    fig = None
    if ax is None:
        fig, ax = plt.subplots(figsize=(7.4, 4.4))
    for name, ys in norms.items():
        ax.plot(range(len(ys)), ys, "o-", ms=3, lw=1.6, color=STYLE_COLORS.get(name), label=name)
    ax.set_yscale("log")
    ax.set_xlabel("层号（0 = 最靠近输入）")
    ax.set_ylabel("该层参数梯度的范数")
    ax.set_title(title)
    ax.legend(fontsize=9)
    ax.grid(alpha=0.3, which="both")
    if fig is not None:
        fig.tight_layout()
    return fig or ax.figure


@demo_figure
def plot_training(curves: Mapping[str, Sequence[float]], title: str):
    fig, ax = plt.subplots(figsize=(7.0, 4.0))
    for name, ys in curves.items():
        ax.plot(range(1, len(ys) + 1), ys, lw=1.6, color=STYLE_COLORS.get(name), label=name)
    ax.set_xlabel("训练步数")
    ax.set_ylabel("损失")
    ax.set_title(title)
    ax.legend(fontsize=9)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


@demo_figure
def plot_spread(depths: Sequence[int], spreads: Mapping[str, Sequence[float]], title: str):
    """Max/min ratio of the per-layer gradient norms vs the number of layers (log–log)."""
    fig, ax = plt.subplots(figsize=(6.8, 4.2))
    for name, ys in spreads.items():
        ax.plot(depths, ys, "o-", color=STYLE_COLORS.get(name), label=name)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(list(depths), [str(d) for d in depths])
    ax.set_xlabel("层数")
    ax.set_ylabel("各层梯度范数的最大/最小之比")
    ax.set_title(title)
    ax.legend(fontsize=9)
    ax.grid(alpha=0.3, which="both")
    fig.tight_layout()
    return fig
