"""Figures with Chinese text: one CJK font chosen once, and the few plot helpers every
section uses (heatmaps of attention weights, bars of a distribution).
"""
from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from pathlib import Path

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
from matplotlib import font_manager
from matplotlib.figure import Figure

from utils import GRADING_BACKEND

# Families tried in order when the bundled font is missing (Windows, macOS, Linux).
_SYSTEM_CJK = ["Noto Sans CJK SC", "Source Han Sans SC", "Microsoft YaHei", "SimHei",
               "PingFang SC", "Heiti SC", "WenQuanYi Zen Hei", "Noto Sans SC"]


def _bundled_font() -> Path | None:
    """Noto Sans CJK SC as shipped by the mplfonts package (a course dependency)."""
    try:
        import mplfonts
    except ImportError:
        return None
    path = Path(mplfonts.__file__).parent / "fonts" / "NotoSansCJKsc-Regular.otf"
    return path if path.exists() else None


def setup_chinese_font() -> str | None:
    """Make matplotlib draw Chinese; return the family used, or None if none was found."""
    family = None
    bundled = _bundled_font()
    if bundled is not None:
        font_manager.fontManager.addfont(str(bundled))
        family = font_manager.FontProperties(fname=str(bundled)).get_name()
    else:
        installed = {f.name for f in font_manager.fontManager.ttflist}
        family = next((name for name in _SYSTEM_CJK if name in installed), None)
    if family is not None:
        matplotlib.rcParams["font.sans-serif"] = [family, *matplotlib.rcParams["font.sans-serif"]]
        matplotlib.rcParams["font.family"] = "sans-serif"
    matplotlib.rcParams["axes.unicode_minus"] = False  # ASCII minus: present in every font
    return family


def demo_figure(draw: Callable[..., Figure]) -> Callable[..., Figure]:
    """For a course function that only draws a figure from data it is given and returns it.

    At grading time (the grading backend) nobody looks at the figure: an empty one is returned at
    once, without drawing. Building the course's figures is the largest part of what a graded
    submission costs in its kernel, and they say nothing about the student: the cell computed their
    data (with the student's code, where it uses it) before calling the function.
    """
    @functools.wraps(draw)
    def draw_unless_grading(*args, **kwargs) -> Figure:
        if matplotlib.get_backend() == GRADING_BACKEND:
            return plt.figure()
        return draw(*args, **kwargs)
    return draw_unless_grading


def heatmap(ax, matrix, title: str = "", xlabel: str = "键位置 s", ylabel: str = "查询位置 t",
            labels: Sequence[str] | None = None, annotate: bool | None = None,
            cmap: str = "viridis", vmin: float | None = 0.0, vmax: float | None = None,
            row_labels: Sequence[str] | None = None):
    """Draw a [Tq, Tk] matrix (e.g. attention weights) with the query on the vertical axis.

    ``labels`` name the columns (and the rows too, unless ``row_labels`` is given).
    -inf / NaN cells (masked scores) are drawn grey and annotated "-∞" / "nan".
    """
    m = matrix.detach().float().cpu().numpy() if hasattr(matrix, "detach") else np.asarray(matrix, dtype=float)
    colormap = plt.get_cmap(cmap).with_extremes(bad="#d9d9d9")
    image = ax.imshow(np.ma.masked_invalid(m), cmap=colormap, vmin=vmin, vmax=vmax)
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    rows, cols = m.shape
    ax.set_xticks(range(cols), labels[:cols] if labels is not None else range(cols))
    row_labels = row_labels if row_labels is not None else labels
    ax.set_yticks(range(rows), row_labels[:rows] if row_labels is not None else range(rows))
    if annotate is None:
        annotate = rows * cols <= 64
    if annotate:
        finite = m[np.isfinite(m)]
        top = vmax if vmax is not None else (finite.max() if finite.size else 1.0)
        bottom = vmin if vmin is not None else (finite.min() if finite.size else 0.0)
        middle = (top + bottom) / 2
        for t in range(rows):
            for s in range(cols):
                value = float(m[t, s])
                if not np.isfinite(value):
                    ax.text(s, t, "nan" if np.isnan(value) else f"{value:.0f}".replace("inf", "∞"),
                            ha="center", va="center", fontsize=8, color="black")
                    continue
                ax.text(s, t, f"{value:.2f}", ha="center", va="center", fontsize=8,
                        color="white" if value < middle else "black")
    return image


@demo_figure
def heatmaps(matrices: Sequence, titles: Sequence[str], suptitle: str = "", ncols: int | None = None,
             size: float = 3.2, **kwargs):
    """Several heatmaps side by side; returns the figure."""
    n = len(matrices)
    ncols = ncols or n
    nrows = (n + ncols - 1) // ncols
    fig, axes = plt.subplots(nrows, ncols, figsize=(size * ncols, size * nrows), squeeze=False)
    for ax, matrix, title in zip(axes.flat, matrices, titles):
        heatmap(ax, matrix, title, **kwargs)
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    if suptitle:
        fig.suptitle(suptitle)
    fig.tight_layout()
    return fig


def log2_axes(ax, xs: Sequence[int], xlabel: str, ylabel: str, title: str = "") -> None:
    """Log–log axes for a measurement against sizes that double; the sizes label the x axis."""
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(list(xs), [str(x) for x in xs])
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.grid(True, which="both", alpha=0.3)


def bars(ax, values, title: str = "", xlabel: str = "位置", ylabel: str = "概率", ylim=(0, 1)):
    """A probability vector as bars, with each value printed on its bar."""
    v = values.detach().float().cpu().numpy() if hasattr(values, "detach") else values
    positions = range(len(v))
    ax.bar(positions, v, color="#4C72B0")
    ax.set_xticks(list(positions))
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if ylim is not None:
        ax.set_ylim(*ylim)
    for x, value in zip(positions, v):
        ax.text(x, float(value), f"{float(value):.2f}", ha="center",
                va="bottom" if value >= 0 else "top", fontsize=8)

