"""Figures of section 02_scaling_and_softmax (why divide by √D; softmax saturation).

The notebook computes the numbers and states the idea; these functions only draw them.
Every function takes the softmax / Jacobian it should use as an argument, so the learner's
own implementation (once it passed its check) is the one being drawn.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import matplotlib.pyplot as plt
import torch

from utils.plotting import BLUE, GREEN, ORANGE, VERMILLION, bars, demo_figure, describe, heatmap

SCALE_LABELS = {"none": "不缩放", "sqrt": "除以 √D", "D": "除以 D"}
SCALE_COLORS = {"none": VERMILLION, "sqrt": BLUE, "D": GREEN}


def scale_factor(D: int, scale: str) -> float:
    """The number the raw scores q·k are multiplied by: 1, 1/√D or 1/D."""
    return {"none": 1.0, "sqrt": 1 / math.sqrt(D), "D": 1 / D}[scale]


def entropy(p: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Shannon entropy in nats, with 0·log 0 = 0 (a one-hot row has entropy 0)."""
    return -torch.special.xlogy(p, p).sum(dim)


# --- 1. std of q·k vs D ---------------------------------------------------------------------

@demo_figure
def plot_std_vs_dim(dims: Sequence[int], std_raw: Sequence[float], std_sqrt: Sequence[float],
                    std_by_d: Sequence[float]):
    """Measured std of the scores vs D on log–log axes, with the √D reference line."""
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    dims = list(dims)
    ax.plot(dims, std_raw, "o-", color=SCALE_COLORS["none"], label="不缩放：std(q·k)")
    ax.plot(dims, std_sqrt, "s-", color=SCALE_COLORS["sqrt"], label="除以 √D：std(q·k/√D)")
    ax.plot(dims, std_by_d, "^-", color=SCALE_COLORS["D"], label="除以 D：std(q·k/D)")
    ax.plot(dims, [math.sqrt(d) for d in dims], "k--", lw=1.2, zorder=3, label="参考线 √D（推导）")
    ax.axhline(1.0, color="gray", lw=0.8, alpha=0.6)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    ax.set_xlabel("头宽 D（对数轴）")
    ax.set_ylabel("注意力分数的标准差（对数轴）")
    ax.set_title("点积分数的标准差随 D 的变化（实测）")
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(loc="upper left", fontsize=9)
    fig.tight_layout()
    describe(fig, f"头宽 D 从 {dims[0]} 到 {dims[-1]}（对数轴）：不缩放的分数标准差从 {std_raw[0]:.2f} 长到 "
                  f"{std_raw[-1]:.2f}，贴着 √D 参考线；除以 √D 后始终在 {min(std_sqrt):.2f}–{max(std_sqrt):.2f}；"
                  f"除以 D 后降到 {std_by_d[-1]:.3f}。")
    return fig


# --- 4. saturated vs healthy softmax ----------------------------------------------------------

@demo_figure
def plot_three_ways(weights: dict[str, torch.Tensor], row: int = 0, D: int | None = None):
    """Top: one query row's weights as bars; bottom: the whole [T, T] weight table.

    ``weights`` maps a scale key ("none", "sqrt", "D") to a [T, T] weight matrix.
    """
    keys = list(weights)
    fig, axes = plt.subplots(2, len(keys), figsize=(3.6 * len(keys), 6.8),
                             gridspec_kw={"height_ratios": [1, 1.25]})
    for col, key in enumerate(keys):
        w = weights[key].detach()
        T = w.shape[-1]
        title = SCALE_LABELS.get(key, key) + (f"（D={D}）" if D else "")
        bars(axes[0, col], w[row], title=f"{title}\n查询 t={row} 的注意力权重", xlabel="键位置 s",
             ylabel="注意力权重")
        axes[0, col].axhline(1 / T, color="gray", ls=":", lw=1)
        heatmap(axes[1, col], w, title=f"{title}：整张权重表", vmin=0.0, vmax=1.0)
    fig.tight_layout()
    rows = "；".join(f"{SCALE_LABELS.get(key, key)}：第 {row} 行最大权重 {weights[key][row].max().item():.2f}，"
                    f"整张表每行最大权重平均 {weights[key].amax(-1).mean().item():.2f}" for key in keys)
    describe(fig, f"上排是查询 t={row} 的权重柱状图（虚线 = 均匀分布的 1/T），下排是整张权重表。{rows}。"
                  "越接近 1，softmax 越接近只看一个键（饱和）。")
    return fig


# --- 5. the gradient collapse -----------------------------------------------------------------

def gradient_collapse(softmax: Callable, softmax_jacobian: Callable, scales: Sequence[float],
                      n_rows: int = 64, n_keys: int = 16, seed: int = 0) -> dict[str, list[float]]:
    """Multiply fixed unit-variance score rows by c; measure saturation and gradients.

    For each c: mean max weight, mean entropy, the Frobenius norm of each row's softmax
    Jacobian (mean and median over rows) and the norm of the gradient that backprop
    delivers to the scores for a random upstream gradient g (mean and median).
    """
    gen = torch.Generator().manual_seed(seed)
    z0 = torch.randn(n_rows, n_keys, generator=gen)  # (R, n) unit-variance scores
    g = torch.randn(n_rows, n_keys, generator=gen)   # (R, n) upstream gradient dL/dp
    out = {k: [] for k in ("max_weight", "entropy", "jac_mean", "jac_median", "grad_mean", "grad_median")}
    for c in scales:
        z = (c * z0).requires_grad_()                # (R, n)
        p = softmax(z, dim=-1)                       # (R, n)
        (p * g).sum().backward()                     # z.grad = J_row @ g_row for every row
        jac_norms = torch.stack([softmax_jacobian(row).norm() for row in p.detach()])  # (R,)
        grad_norms = z.grad.norm(dim=-1)             # (R,)
        out["max_weight"].append(p.detach().amax(-1).mean().item())
        out["entropy"].append(entropy(p.detach()).mean().item())
        out["jac_mean"].append(jac_norms.mean().item())
        out["jac_median"].append(jac_norms.median().item())
        out["grad_mean"].append(grad_norms.mean().item())
        out["grad_median"].append(grad_norms.median().item())
    return out


@demo_figure
def plot_gradient_collapse(scales: Sequence[float], stats: dict[str, list[float]], n_keys: int,
                           marks: dict[str, float]):
    """Left: how peaked the softmax gets; right: how small its Jacobian / gradient gets."""
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11.5, 4.3))
    ax1.plot(scales, stats["max_weight"], "o-", ms=3, color=VERMILLION, label="平均最大权重")
    ax1.plot(scales, [h / math.log(n_keys) for h in stats["entropy"]], "s-", ms=3, color=BLUE,
             label="平均熵 / ln n（1 = 均匀，0 = one-hot）")
    ax1.axhline(1 / n_keys, color="gray", ls=":", lw=1, label="均匀分布的权重 1/n")
    ax1.set_xscale("log")
    ax1.set_ylim(0, 1.38)                 # head room for the legend above the curves
    ax1.set_yticks([0, 0.2, 0.4, 0.6, 0.8, 1.0])
    ax1.set_xlabel("分数的尺度 c（分数 = c × 方差为 1 的随机数，对数轴）")
    ax1.set_ylabel("比例")
    ax1.set_title(f"softmax 随尺度 c 变尖（每行 n={n_keys} 个键）")
    ax1.legend(fontsize=8.5, loc="upper center")

    jac, grad = r"$\Vert J \Vert_F$", r"$\Vert \partial L / \partial z \Vert$"
    ax2.plot(scales, stats["jac_median"], "o-", ms=3, color=BLUE, label=f"{jac}（各行中位数）")
    ax2.plot(scales, stats["jac_mean"], "o--", ms=3, color=BLUE, alpha=0.55, label=f"{jac}（各行平均）")
    ax2.plot(scales, stats["grad_median"], "s-", ms=3, color=ORANGE, label=f"{grad}（各行中位数）")
    ax2.plot(scales, stats["grad_mean"], "s--", ms=3, color=ORANGE, alpha=0.55, label=f"{grad}（各行平均）")
    ax2.set_xscale("log")
    ax2.set_yscale("log")
    ax2.set_ylim(bottom=1e-12)
    ax2.set_xlabel("分数的尺度 c（对数轴）")
    ax2.set_ylabel("范数（对数轴）")
    ax2.set_title("饱和之后，传回分数的梯度坍缩到 0")
    ax2.legend(fontsize=8, loc="lower left")
    for ax in (ax1, ax2):
        for c in marks.values():
            ax.axvline(c, color="gray", lw=0.8, ls="--")
        top = ax.secondary_xaxis("top")      # name the marked scales above the plot, off the curves
        top.set_xticks(list(marks.values()), list(marks.keys()), fontsize=8)
        top.tick_params(length=0)
        top.xaxis.set_minor_locator(plt.NullLocator())
        ax.grid(True, alpha=0.3)
    fig.tight_layout()
    entropy_share = [h / math.log(n_keys) for h in stats["entropy"]]
    describe(fig, f"分数的尺度 c 从 {scales[0]:g} 增到 {scales[-1]:g}（对数轴）：左图平均最大权重从 "
                  f"{stats['max_weight'][0]:.2f} 升到 {stats['max_weight'][-1]:.2f}，"
                  f"熵（÷ ln n）从 {entropy_share[0]:.2f} 降到 {entropy_share[-1]:.2f}；"
                  f"右图传回分数的梯度范数（中位数）从 {stats['grad_median'][0]:.2g} "
                  f"坍缩到 {stats['grad_median'][-1]:.2g}。")
    return fig


# --- 6. the widget --------------------------------------------------------------------------

class ScoreExplorer:
    """Fixed random q, k of width ``d_max``; a head of width D uses their first D components,
    so moving the D slider widens the same tokens' vectors instead of drawing new ones."""

    def __init__(self, softmax: Callable, T: int = 16, n_queries: int = 64, d_max: int = 1024, seed: int = 0):
        gen = torch.Generator().manual_seed(seed)
        self.softmax = softmax
        self.T = T
        self.q = torch.randn(n_queries, d_max, generator=gen)  # (Nq, d_max) queries
        self.k = torch.randn(n_queries, d_max, generator=gen)  # (Nq, d_max) keys

    def scores(self, D: int, scale: str) -> torch.Tensor:
        q, k = self.q[:, :D], self.k[:, :D]                    # (Nq, D) each
        return q @ k.T * scale_factor(D, scale)                # (Nq, Nq)

    def draw(self, D: int, scale: str):
        s = self.scores(D, scale)                              # (Nq, Nq) pool for the histogram
        row = s[0, : self.T]                                   # (T,) query 0 against T keys
        w = self.softmax(row, dim=-1)                          # (T,)
        fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 3.8))
        flat = s.flatten()
        reach = max(4.0, 1.1 * flat.abs().max().item())
        ax1.hist(flat.numpy(), bins=60, range=(-reach, reach), density=True,
                 color=SCALE_COLORS[scale], alpha=0.75, label="实测分数")
        xs = torch.linspace(-reach, reach, 400)
        ax1.plot(xs, torch.exp(-xs**2 / 2) / math.sqrt(2 * math.pi), "k--", lw=1, label="方差 1 的正态（参考）")
        ax1.set_xlim(-reach, reach)
        ax1.set_xlabel("注意力分数")
        ax1.set_ylabel("密度")
        ax1.set_title(f"D={D}，{SCALE_LABELS[scale]}：{flat.numel()} 个分数，std = {flat.std().item():.3g}")
        ax1.legend(fontsize=8, loc="upper right")
        H = entropy(w).item()
        bars(ax2, w, title=f"查询 0 对 {self.T} 个键的权重：最大 {w.max().item():.2f}，"
                           f"熵 {H:.2f}（均匀时 {math.log(self.T):.2f}）",
             xlabel="键位置 s", ylabel="注意力权重")
        for text in ax2.texts:        # 16 labels on 16 bars: keep them small
            text.set_fontsize(6)
        ax2.axhline(1 / self.T, color="gray", ls=":", lw=1)
        fig.tight_layout()
        describe(fig, f"D={D}，{SCALE_LABELS[scale]}：左图是 {flat.numel()} 个分数的分布，"
                      f"标准差 {flat.std().item():.3g}（虚线是方差 1 的正态分布）；"
                      f"右图是查询 0 对 {self.T} 个键的权重，最大 {w.max().item():.2f}，"
                      f"熵 {H:.2f}（均匀时 {math.log(self.T):.2f}）。")
        return fig
