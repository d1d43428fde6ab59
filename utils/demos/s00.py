"""Figures of section 00: the font check, and the shapes of one attention head (measured, tabled, drawn)."""
from __future__ import annotations


import matplotlib.pyplot as plt
import torch
from matplotlib.patches import FancyArrowPatch, Rectangle

from utils.env import display_width
from utils.plotting import GREEN, ORANGE, PURPLE, SKY, YELLOW, bars, demo_figure, describe

# (name, symbolic shape, colour) of every tensor of one head, in the order they are computed.
HEAD_TENSORS = (
    ("X", "[B, T, C]", SKY),
    ("Q、K、V", "[B, T, D]", GREEN),
    ("scores", "[B, T, T]", ORANGE),
    ("weights", "[B, T, T]", PURPLE),
    ("out", "[B, T, D]", YELLOW),
)
# The operation on each arrow between two consecutive tensors.
HEAD_STEPS = ("@ W_Q, W_K, W_V\n[C, D]", r"Q @ $K^{\top}$", "softmax\n(dim=-1)", "@ V")


def head_shapes(B: int, T: int, C: int, D: int) -> dict[str, tuple[int, ...]]:
    """Shapes of one attention head, measured by running the computation on zeros (not typed in).

    For the learner to explore after the warm-up quiz; the quiz's check never uses it."""
    x = torch.zeros(B, T, C)                   # (B, T, C)
    w_q = w_k = w_v = torch.zeros(C, D)        # (C, D)
    q, k, v = x @ w_q, x @ w_k, x @ w_v        # (B, T, D) each
    scores = q @ k.transpose(-2, -1)           # (B, T, D) @ (B, D, T) -> (B, T, T)
    weights = torch.softmax(scores, dim=-1)    # (B, T, T)
    out = weights @ v                          # (B, T, T) @ (B, T, D) -> (B, T, D)
    return {"X": tuple(x.shape), "Q": tuple(q.shape), "K": tuple(k.shape), "V": tuple(v.shape),
            "scores": tuple(scores.shape), "weights": tuple(weights.shape), "out": tuple(out.shape)}


def _pad(text: str, width: int) -> str:
    """Left-align to a display width (a CJK character takes two columns)."""
    return text + " " * max(width - display_width(text), 1)


def print_shape_table(B: int, T: int, C: int, D: int) -> None:
    """The shape table: symbolic shape next to the shape torch actually produced."""
    shapes = head_shapes(B, T, C, D)
    symbolic = {"X": "[B, T, C]", "Q": "[B, T, D]", "K": "[B, T, D]", "V": "[B, T, D]",
                "scores": "[B, T, T]", "weights": "[B, T, T]", "out": "[B, T, D]"}
    print(f"B={B}, T={T}, C={C}, D={D}")
    print(_pad("张量", 10) + _pad("符号形状", 12) + _pad("torch 实测形状", 16) + "元素个数")
    for name, shape in shapes.items():
        print(_pad(name, 10) + _pad(symbolic[name], 12) + _pad(str(shape), 16) + str(torch.Size(shape).numel()))


_SHIFT = 0.35  # offset between the stacked layers of the batch dimension
_MAX_LAYERS = 4  # at most this many layers are drawn for B


def _draw_tensor(ax, rows: int, cols: int, depth: int, colour: str) -> None:
    """A [depth, rows, cols] tensor as `depth` stacked grids (one cell per element)."""
    for layer in reversed(range(min(depth, _MAX_LAYERS))):
        d = layer * _SHIFT
        ax.add_patch(Rectangle((d, -rows + d), cols, rows, facecolor=colour, edgecolor="black",
                               linewidth=0.8, alpha=1.0 if layer == 0 else 0.45, zorder=10 - layer))
    for c in range(1, cols):  # grid of the front layer
        ax.plot([c, c], [-rows, 0], color="black", linewidth=0.3, zorder=11)
    for r in range(1, rows):
        ax.plot([0, cols], [-r, -r], color="black", linewidth=0.3, zorder=11)


@demo_figure
def draw_head_shapes(B: int = 2, T: int = 5, C: int = 8, D: int = 4):
    """Each tensor of one head as a grid of T rows × (last dim) columns, B layers deep.

    All panels share one scale, so the [T, T] score table visibly grows with T. The shapes
    are measured with torch (``head_shapes``), not typed in.
    """
    shapes = head_shapes(B, T, C, D)
    keys = ["X", "Q", "scores", "weights", "out"]
    col_letter = {"X": "C", "Q": "D", "scores": "T", "weights": "T", "out": "D"}
    depth_room = (min(B, _MAX_LAYERS) - 1) * _SHIFT
    spans = [shapes[k][2] + depth_room + 1.2 for k in keys]  # x range of each panel
    fig, axes = plt.subplots(1, len(keys), figsize=(11, 3.1), gridspec_kw={"width_ratios": spans})
    for ax, key, span, (name, symbolic, colour) in zip(axes, keys, spans, HEAD_TENSORS):
        depth, rows, cols = shapes[key]
        _draw_tensor(ax, rows, cols, depth, colour)
        ax.set_xlim(-0.6, span - 0.6)
        ax.set_ylim(-T - 0.4, depth_room + 0.4)
        ax.set_aspect("equal")
        ax.set_xticks([])
        ax.set_yticks([])
        for spine in ax.spines.values():
            spine.set_visible(False)
        ax.set_title(f"{name}\n{symbolic}\n= {list(shapes[key])}", fontsize=10, linespacing=1.35)
        ax.set_xlabel(col_letter[key], color="#1f3d7a", fontsize=11)
        ax.set_ylabel("T", color="#1f3d7a", fontsize=11, rotation=0, labelpad=8, va="center")
    fig.suptitle(f"一个注意力头里的形状追踪（B={B}, T={T}, C={C}, D={D}；每格一个数，叠几层就是 B）",
                 fontsize=11)
    fig.subplots_adjust(left=0.03, right=0.99, top=0.72, bottom=0.08, wspace=0.9)
    for ax in axes:
        ax.apply_aspect()  # final positions, so the arrows land between the panels
    for left, right, step in zip(axes[:-1], axes[1:], HEAD_STEPS):
        a, b = left.get_position(), right.get_position()
        y = (a.y0 + a.y1) / 2
        fig.patches.append(FancyArrowPatch((a.x1 + 0.008, y), (b.x0 - 0.02, y), transform=fig.transFigure,
                                           arrowstyle="-|>", mutation_scale=12, color="#444444"))
        fig.text((a.x1 + b.x0) / 2 - 0.006, y - 0.04, step, ha="center", va="top", fontsize=8.5,
                 color="#444444")
    describe(fig, f"一个注意力头里的张量（B={B}, T={T}, C={C}, D={D}）：X {list(shapes['X'])} → Q、K、V 各 "
                  f"{list(shapes['Q'])} → scores 与 weights 各 {list(shapes['scores'])} → out {list(shapes['out'])}；"
                  f"只有 scores 和 weights 是 T×T 的表，T 变大时它们按 T² 变大。")
    return fig


def draw_softmax_font_check(tokens, scores) -> torch.Tensor:
    """Scores of one query over a few tokens and their softmax, with Chinese labels; returns the weights."""
    scores = torch.as_tensor(scores, dtype=torch.float32)  # (T,)
    weights = torch.softmax(scores, dim=-1)                 # (T,)
    _font_check_figure(tokens, scores, weights)
    return weights


@demo_figure
def _font_check_figure(tokens, scores: torch.Tensor, weights: torch.Tensor):
    """The scores (T,) and the weights (T,) side by side."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.2))
    low, high = float(scores.min()), float(scores.max())
    bars(left, scores, title="注意力分数（softmax 之前，可正可负）", xlabel="被看的 token",
         ylabel="分数", ylim=(min(low, 0.0) - 0.5, high + 0.6))
    left.axhline(0.0, color="black", linewidth=0.6)
    bars(right, weights, title="注意力权重（softmax 之后，和为 1）", xlabel="被看的 token",
         ylabel="权重", ylim=(0, 1))
    for ax in (left, right):
        ax.set_xticks(range(len(tokens)), tokens)
    fig.suptitle("读到“它”时，它该从前面哪个 token 取信息？（示意数字）")
    fig.tight_layout()
    best = int(weights.argmax())
    describe(fig, f"左图是“它”对 {len(tokens)} 个 token 的分数（{_listed(tokens, scores)}），右图是 softmax 之后的权重"
                  f"（{_listed(tokens, weights)}）：分数最高的“{tokens[best]}”拿到最大的权重，权重之和为 1。")
    return fig


def _listed(tokens, values) -> str:
    return "，".join(f"{token} {float(v):.2f}" for token, v in zip(tokens, values))
