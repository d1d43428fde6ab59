"""The picture on the README's first screen, computed by the course's own code.

    python -m utils.demos.overview            # writes docs/images/overview.png
"""
from __future__ import annotations

import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402

from utils.plotting import bar_style, demo_figure, describe, heatmap, line_style, setup_chinese_font  # noqa: E402
from utils.reference import attention, causal_mask, dot_product_variance  # noqa: E402

OUT = Path(__file__).resolve().parents[2] / "docs" / "images" / "overview.png"


@demo_figure
def draw() -> plt.Figure:
    setup_chinese_font()
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    dims = [2 ** i for i in range(1, 11)]
    gen = torch.Generator().manual_seed(0)
    stds = [math.sqrt(dot_product_variance(d, n_samples=4000, generator=gen)) for d in dims]
    scaled = [s / math.sqrt(d) for s, d in zip(stds, dims)]
    axes[0].loglog(dims, stds, label="不缩放：q·k", **line_style(1))
    axes[0].loglog(dims, scaled, label="除以 √D 之后", **line_style(0))
    axes[0].set(title="分数的标准差随头宽 D 增长", xlabel="头宽 D", ylabel="标准差")
    axes[0].legend()

    torch.manual_seed(0)
    q, k, v = torch.randn(3, 1, 4, 2).unbind(0)                     # (1, 4, 2) each, the seed's 4-token example
    _, weights = attention(q, k, v, causal_mask(4))                 # (1, 4, 4)
    heatmap(axes[1], weights[0], "因果注意力权重：下三角、每行和为 1")

    scores = torch.randn(8, generator=gen)                          # one query row
    healthy = torch.softmax(scores, -1)
    saturated = torch.softmax(scores * 10, -1)
    width = 0.4
    positions = torch.arange(8)
    axes[2].bar(positions - width / 2, healthy, width, label="健康的 softmax", **bar_style(0))
    axes[2].bar(positions + width / 2, saturated, width, label="分数 ×10：饱和", **bar_style(1))
    axes[2].set(title="softmax 饱和：几乎只剩一个位置", xlabel="键位置 s", ylabel="注意力权重")
    axes[2].legend()
    fig.tight_layout()
    describe(fig, f"左：头宽 D 从 {dims[0]} 到 {dims[-1]}，分数的标准差从 {stds[0]:.1f} 长到 {stds[-1]:.1f}，"
                  f"除以 √D 后一直约为 {min(scaled):.2f}–{max(scaled):.2f}。"
                  "中：4 个 token 的因果注意力权重，只有下三角不为 0，每行和为 1。"
                  f"右：同一行分数的 softmax 最大权重 {healthy.max().item():.2f}，"
                  f"分数乘 10 后 {saturated.max().item():.2f}。")
    return fig


if __name__ == "__main__":
    OUT.parent.mkdir(parents=True, exist_ok=True)
    draw().savefig(OUT, dpi=110)
    print(f"wrote {OUT}")
