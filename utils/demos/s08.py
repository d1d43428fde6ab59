"""Figures of section 08_ffn_norm_residual: which outputs depend on which inputs (FFN vs causal
attention), the activation functions, the FFN's share of a block's FLOPs vs T, the effect of eps
on small inputs, and gradient norms per layer in deep stacks (Pre-Norm, Post-Norm, no residual).

The notebook computes every tensor and number it shows; these helpers only draw them.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt
import torch

from utils.plotting import demo_figure, describe, heading, heatmap, line_style

# Each way of stacking blocks keeps its line (utils/plotting.py) in every figure of the section.
STACKINGS = {"Pre-Norm（有残差）": 0, "Post-Norm（有残差）": 3, "无残差（有归一化）": 1}


def _stacking(name: str, i: int, marker: bool = True) -> dict:
    return line_style(STACKINGS.get(name, i), marker=marker)


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
    each = "；".join(f"{title}：{_dependencies(_t(m))}" for title, m in maps.items())
    describe(fig, f"{heading(suptitle)}第 t 行第 s 列 = 改动输入位置 s 时输出位置 t 变了多少（格子里写着）。{each}。")
    return fig


def _dependencies(m: torch.Tensor) -> str:
    """Which outputs of a [T, T] dependency map move with which inputs, in words."""
    moved = m > 1e-6 * m.max()
    off = int(moved.sum() - moved.diagonal().sum())
    future = int(moved.triu(1).sum())
    return f"{int(moved.sum())} 格不为 0，对角线之外 {off} 格，其中看到未来的（对角线上方）{future} 格"


@demo_figure
def plot_activations(z: torch.Tensor, curves: Mapping[str, torch.Tensor]):
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    for i, (name, y) in enumerate(curves.items()):
        ax.plot(_t(z).numpy(), _t(y).numpy(), label=name, lw=2, **line_style(i, marker=False))
    ax.axhline(0, color="grey", lw=0.8)
    ax.axvline(0, color="grey", lw=0.8)
    ax.set_xlabel("输入 z")
    ax.set_ylabel("激活值")
    ax.set_title("FFN 与 SwiGLU 用到的激活函数")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    z = _t(z)
    each = "；".join(f"{name}：最小值 {_t(y).min().item():.2f}，在 z = {z[-1].item():g} 处为 {_t(y)[-1].item():.2f}"
                    for name, y in curves.items())
    describe(fig, f"{len(curves)} 条激活函数曲线，z 从 {z[0].item():g} 到 {z[-1].item():g}。{each}。")
    return fig


@demo_figure
def plot_ffn_share(Ts: Sequence[int], shares: Mapping[str, Sequence[float]], param_shares: Mapping[str, float]):
    """FFN share of a block's forward FLOPs vs context length T (log x), one line per config;
    the dashed level of each is its share of the block's parameters."""
    fig, ax = plt.subplots(figsize=(7.4, 4.4))
    for i, (name, ys) in enumerate(shares.items()):
        style = line_style(i) | {"linestyle": "-"}      # solid: FLOPs; dashed, with the same marker: parameters
        ax.plot(Ts, [100 * y for y in ys], label=f"{name}：FLOPs 占比", **style)
        ax.plot([Ts[0], Ts[-1]], [100 * param_shares[name]] * 2, lw=1, mfc="white", label=f"{name}：参数占比",
                **style | {"linestyle": "--"})
    ax.set_xscale("log", base=2)
    ax.set_ylim(0, 100)
    ax.set_xlabel("上下文长度 T（token）")
    ax.set_ylabel("FFN 所占百分比（%）")
    ax.set_title("一个 Block 里 FFN 占多少：参数（虚线）与每个 token 的前向 FLOPs（实线）")
    ax.legend(fontsize=8, loc="lower left")
    ax.grid(alpha=0.3, which="both")
    fig.tight_layout()
    each = "；".join(f"{name}：参数占 {100 * param_shares[name]:.0f}%，FLOPs 在 T = {Ts[0]} 时占 {100 * ys[0]:.0f}%、"
                    f"T = {Ts[-1]} 时占 {100 * ys[-1]:.0f}%" for name, ys in shares.items())
    describe(fig, f"一个 Block 里 FFN 的占比随上下文长度 T 的变化。{each}。")
    return fig


@demo_figure
def plot_eps_effect(scales: torch.Tensor, curves: Mapping[str, torch.Tensor], eps: float):
    fig, ax = plt.subplots(figsize=(6.8, 4.2))
    for i, (name, y) in enumerate(curves.items()):
        ax.plot(_t(scales).numpy(), _t(y).numpy(), lw=2, label=name, **line_style(i, marker=False))
    ax.axvline(eps ** 0.5, color="grey", ls=":", lw=1)
    ax.text(eps ** 0.5, 0.05, " √eps", color="grey")
    ax.set_xscale("log")
    ax.set_xlabel("输入的均方根 RMS(x)")
    ax.set_ylabel("输出的均方根 RMS(y)")
    ax.set_title(f"输入很小时，eps 的位置决定了输出（eps = {eps:g}，weight = 1）")
    ax.legend(fontsize=9)
    ax.grid(alpha=0.3, which="both")
    fig.tight_layout()
    smallest = _t(scales)[0].item()
    each = "；".join(f"{name}：{_t(y)[0].item():.3g}" for name, y in curves.items())
    describe(fig, f"输出的均方根随输入的均方根变化（横轴对数，eps = {eps:g}，虚线在 √eps）。输入的均方根是 "
                  f"{smallest:.1g} 时，输出的均方根：{each}。")
    return fig


def plot_grad_norms(norms: Mapping[str, Sequence[float]], title: str, ax=None):
    """Gradient norm of each layer's parameters (log y) vs layer index, one line per style, into ``ax`` or a
    figure of their own."""
    if ax is None:
        return _grad_norms_figure(norms, title)
    describe(ax.figure, _draw_grad_norms(norms, title, ax))
    return ax.figure


@demo_figure
def _grad_norms_figure(norms: Mapping[str, Sequence[float]], title: str):
    fig, ax = plt.subplots(figsize=(7.4, 4.4))
    describe(fig, _draw_grad_norms(norms, title, ax))
    fig.tight_layout()
    return fig


def _draw_grad_norms(norms: Mapping[str, Sequence[float]], title: str, ax) -> str:
    """Draw the norms into ``ax``; the figure's text alternative."""
    for i, (name, ys) in enumerate(norms.items()):
        ax.plot(range(len(ys)), ys, ms=3, lw=1.6, label=name, **_stacking(name, i))
    ax.set_yscale("log")
    ax.set_xlabel("层号（0 = 最靠近输入）")
    ax.set_ylabel("该层参数梯度的范数")
    ax.set_title(title)
    ax.legend(fontsize=9)
    ax.grid(alpha=0.3, which="both")
    each = "；".join(f"{name}：第 0 层 {ys[0]:.2g}，第 {len(ys) - 1} 层 {ys[-1]:.2g}，最大是最小的 "
                    f"{max(ys) / min(ys) if min(ys) > 0 else float('inf'):.3g} 倍" for name, ys in norms.items())
    return f"{heading(title)}每层参数梯度的范数（纵轴对数）。{each}。"


@demo_figure
def plot_training(curves: Mapping[str, Sequence[float]], title: str):
    fig, ax = plt.subplots(figsize=(7.0, 4.0))
    for i, (name, ys) in enumerate(curves.items()):
        ax.plot(range(1, len(ys) + 1), ys, lw=1.6, label=name, **_stacking(name, i, marker=False))
    ax.set_xlabel("训练步数")
    ax.set_ylabel("损失")
    ax.set_title(title)
    ax.legend(fontsize=9)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    each = "；".join(f"{name}：第 1 步 {ys[0]:.3f}，第 {len(ys)} 步 {ys[-1]:.3f}，最低 {min(ys):.3f}"
                    for name, ys in curves.items())
    describe(fig, f"{heading(title)}训练损失随步数的变化。{each}。")
    return fig


@demo_figure
def plot_spread(depths: Sequence[int], spreads: Mapping[str, Sequence[float]], title: str):
    """Max/min ratio of the per-layer gradient norms vs the number of layers (log–log)."""
    fig, ax = plt.subplots(figsize=(6.8, 4.2))
    for i, (name, ys) in enumerate(spreads.items()):
        ax.plot(depths, ys, label=name, **_stacking(name, i))
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(list(depths), [str(d) for d in depths])
    ax.set_xlabel("层数")
    ax.set_ylabel("各层梯度范数的最大/最小之比")
    ax.set_title(title)
    ax.legend(fontsize=9)
    ax.grid(alpha=0.3, which="both")
    fig.tight_layout()
    each = "；".join(f"{name}：{depths[0]} 层时 {ys[0]:.3g}，{depths[-1]} 层时 {ys[-1]:.3g}"
                    for name, ys in spreads.items())
    describe(fig, f"{heading(title)}横轴层数、纵轴最大/最小之比，都是对数轴。{each}。")
    return fig
