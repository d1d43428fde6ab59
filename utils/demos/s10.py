"""Section 10_decoder_only_model: Llama-style initialisation and the figures (where the parameters are,
next-token distributions under temperature and top-k).

The notebook computes every number it shows; these helpers only initialise and draw.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt
import torch
import torch.nn as nn

from utils.plotting import demo_figure

PART_COLORS = {"嵌入": "#4C72B0", "注意力": "#DD8452", "FFN": "#55A868", "FFN（没被选中的专家）": "#B7DDB0",
               "归一化": "#8172B2", "LM head": "#C44E52"}


def init_like_llama(model: nn.Module, std: float = 0.02) -> nn.Module:
    """Every Linear and Embedding weight ~ N(0, std²) (transformers' initializer_range); norms stay 1."""
    for module in model.modules():
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, std=std)
    return model


def parameter_groups(model: nn.Module) -> dict[str, int]:
    """model's parameters by the part they belong to; named_parameters() lists a tied weight once."""
    groups = dict.fromkeys(("嵌入", "注意力", "FFN", "归一化", "LM head"), 0)
    for name, p in model.named_parameters():
        part = ("嵌入" if name.startswith("tok_emb") else "LM head" if name.startswith("lm_head")
                else "注意力" if ".attn." in name else "FFN" if ".ffn." in name else "归一化")
        groups[part] += p.numel()
    return groups


@demo_figure
def plot_parameter_breakdown(breakdowns: Mapping[str, Mapping[str, float]], title: str):
    """One stacked bar per model: the share of each part of the parameters, the total at the right."""
    names = list(breakdowns)
    fig, ax = plt.subplots(figsize=(9.5, 0.62 * len(names) + 1.4))
    for row, name in enumerate(names):
        parts = breakdowns[name]
        total, left = sum(parts.values()), 0.0
        for part, value in parts.items():
            share = value / total
            ax.barh(row, share, left=left, color=PART_COLORS[part], edgecolor="white",
                    label=part if row == 0 or part not in {p for n in names[:row] for p in breakdowns[n]} else None)
            if share > 0.07:
                ax.text(left + share / 2, row, f"{share:.0%}", ha="center", va="center", fontsize=8, color="white")
            left += share
        ax.text(1.01, row, f"{total / 1e9:.2f}B" if total >= 1e8 else f"{total / 1e3:.0f}K", va="center", fontsize=9)
    ax.set_yticks(range(len(names)), names)
    ax.invert_yaxis()
    ax.set_xlim(0, 1.1)
    ax.set_xticks([0, 0.25, 0.5, 0.75, 1.0], ["0", "25%", "50%", "75%", "100%"])
    ax.set_xlabel("占全部参数的比例（右边是参数总数）")
    ax.set_title(title, fontsize=10)
    handles, labels = ax.get_legend_handles_labels()
    ax.legend(handles, labels, fontsize=8, ncol=len(labels), loc="upper center", bbox_to_anchor=(0.5, -0.22),
              frameon=False)
    fig.tight_layout()
    return fig


@demo_figure
def plot_sampling(distributions: Mapping[str, torch.Tensor], labels: Sequence[str]):
    """One bar chart per setting: the probability of every token."""
    fig, axes = plt.subplots(1, len(distributions), figsize=(3.1 * len(distributions), 3.0), sharey=True,
                             squeeze=False)
    for ax, (title, p) in zip(axes[0], distributions.items()):
        p = p.detach().float()
        ax.bar(range(len(p)), p.numpy(), color=["#4C72B0" if v > 0 else "#d9d9d9" for v in p.tolist()])
        ax.set_xticks(range(len(p)), labels)
        ax.set_title(title, fontsize=9)
        ax.set_ylim(0, 1)
        ax.grid(axis="y", alpha=0.3)
    axes[0, 0].set_ylabel("下一个 token 的概率")
    fig.tight_layout()
    return fig
