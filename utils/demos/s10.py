"""Section 10_decoder_only_model: Llama-style initialisation and the figure of next-token distributions
under temperature and top-k.

The notebook computes every number it shows; these helpers only initialise and draw.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt
import torch
import torch.nn as nn

from utils.plotting import BLUE, demo_figure, describe, one_line


def init_like_llama(model: nn.Module, std: float = 0.02) -> nn.Module:
    """Every Linear and Embedding weight ~ N(0, std²) (transformers' initializer_range); norms stay 1."""
    for module in model.modules():
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, std=std)
    return model


@demo_figure
def plot_sampling(distributions: Mapping[str, torch.Tensor], labels: Sequence[str]):
    """One bar chart per setting: the probability of every token."""
    fig, axes = plt.subplots(1, len(distributions), figsize=(3.1 * len(distributions), 3.0), sharey=True,
                             squeeze=False)
    for ax, (title, p) in zip(axes[0], distributions.items()):
        p = p.detach().float()
        ax.bar(range(len(p)), p.numpy(), color=[BLUE if v > 0 else "#d9d9d9" for v in p.tolist()])
        ax.set_xticks(range(len(p)), labels)
        ax.set_title(title, fontsize=9)
        ax.set_ylim(0, 1)
        ax.grid(axis="y", alpha=0.3)
    axes[0, 0].set_ylabel("下一个 token 的概率")
    fig.tight_layout()
    each = "；".join(f"{one_line(title)}：{int((p > 0).sum())} 个 token 的概率不为 0，"
                    f"最大的是 {labels[int(p.argmax())]}（{p.max().item():.2f}）" for title, p in distributions.items())
    describe(fig, f"下一个 token 的概率，每张图一种设置，共 {len(labels)} 个 token。{each}。")
    return fig
