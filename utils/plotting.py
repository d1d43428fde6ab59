"""Figures with Chinese text: one CJK font chosen once, the palette and line styles every figure
uses (told apart without colour), the text alternative of every demo figure, and the few plot helpers
every section uses (heatmaps of attention weights, bars of a distribution).
"""
from __future__ import annotations

import functools
import weakref
from collections.abc import Callable, Sequence
from pathlib import Path

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
from cycler import cycler
from matplotlib import font_manager
from matplotlib.colors import to_rgb
from matplotlib.figure import Figure

from utils import GRADING_BACKEND

# --- colours and line styles ------------------------------------------------------------------

# Okabe & Ito's palette ("Color Universal Design", 2008): its colours stay apart for the common colour-vision
# deficiencies (protanopia, deuteranopia, tritanopia). Series of one figure also differ in marker, dash or
# hatch, so that a figure reads without colour at all (in greyscale, on a monochrome printer).
BLUE, VERMILLION, GREEN, ORANGE = "#0072B2", "#D55E00", "#009E73", "#E69F00"
PURPLE, SKY, YELLOW, BLACK = "#CC79A7", "#56B4E9", "#F0E442", "#000000"
GREY = "#999999"                           # what is switched off, masked, or only a reference
PALETTE = (BLUE, VERMILLION, GREEN, ORANGE, PURPLE, SKY, BLACK, YELLOW)   # the i-th series of a figure
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
DASHES = ("-", "--", "-.", ":", (0, (5, 1)), (0, (3, 1, 1, 1, 1, 1)), (0, (1, 1)))
HATCHES = ("", "//", "..", "xx", "\\\\", "oo", "++", "--")             # bars: the i-th series' fill pattern

# Every figure of the course, the notebooks' own too (they import this module): lines take the palette's
# colours (yellow, faint on white, left out) and each its own dash.
matplotlib.rcParams["axes.prop_cycle"] = cycler(color=PALETTE[:len(DASHES)]) + cycler(linestyle=DASHES)


def line_style(i: int, marker: bool = True) -> dict:
    """The i-th line of a figure: colour, dash and (unless ``marker`` is False: dense curves) marker."""
    style = {"color": PALETTE[i % len(PALETTE)], "linestyle": DASHES[i % len(DASHES)]}
    return style | ({"marker": MARKERS[i % len(MARKERS)]} if marker else {})


def bar_style(i: int) -> dict:
    """The i-th series of bars: colour and hatch (white edges keep the hatch light)."""
    return {"color": PALETTE[i % len(PALETTE)], "hatch": HATCHES[i % len(HATCHES)], "edgecolor": "white"}


def luminance(color) -> float:
    """Relative luminance (WCAG 2) of a matplotlib colour: 0 black … 1 white."""
    linear = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in to_rgb(color)]
    return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]


def text_color_on(color) -> str:
    """Black or white, whichever reads better on ``color``."""
    return "black" if luminance(color) > 0.18 else "white"

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


# --- demo figures and their text alternatives ---------------------------------------------------

TEXT_ALTERNATIVE = "图的文字说明："   # the start of the line printed with every demo figure
_text_alternatives: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()   # figure -> its text
_drawing = [0]   # demo figures being drawn (one may draw with another: only the outermost one's text is printed)


def describe(fig: Figure, text: str) -> None:
    """Give the figure ``fig`` its text alternative: one or two lines of Chinese that say what it shows, with
    its numbers, for a reader who cannot see the figure or tell its colours apart. Printed at once, or, while
    a :func:`demo_figure` draws, when the outermost one returns."""
    if _drawing[0]:
        _text_alternatives[fig] = text
    else:
        print(TEXT_ALTERNATIVE + text)


def demo_figure(draw: Callable[..., Figure]) -> Callable[..., Figure]:
    """For a course function that only draws a figure from data it is given and returns it.

    ``draw`` gives the figure its text alternative (:func:`describe`), printed as the figure is returned:
    in the cell's output it stands right above the figure (shown by ``plt.show()`` or, for a control's
    figure, by utils/widgets.py, which shows what the drawing printed above what it drew).

    At grading time (the grading backend) nobody looks at the figure: an empty one is returned at
    once, without drawing. Building the course's figures is the largest part of what a graded
    submission costs in its kernel, and they say nothing about the student: the cell computed their
    data (with the student's code, where it uses it) before calling the function.
    """
    @functools.wraps(draw)
    def draw_unless_grading(*args, **kwargs) -> Figure:
        if matplotlib.get_backend() == GRADING_BACKEND:
            return plt.figure()
        _drawing[0] += 1
        try:
            fig = draw(*args, **kwargs)
        finally:
            _drawing[0] -= 1
        if _drawing[0] == 0:
            if fig not in _text_alternatives:
                raise RuntimeError(f"{draw.__qualname__} drew a demo figure without a text alternative (describe)")
            print(TEXT_ALTERNATIVE + _text_alternatives.pop(fig))
        return fig
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
    panels = "；".join(f"{one_line(title)}：{matrix_summary(m)}" for m, title in zip(matrices, titles))
    describe(fig, f"{heading(suptitle)}{n} 张热力图（行 = "
                  f"{kwargs.get('ylabel', '查询位置 t')}，列 = {kwargs.get('xlabel', '键位置 s')}）。{panels}。")
    return fig


def one_line(text: str) -> str:
    """A title as one line of a text alternative."""
    return " ".join(text.split())


def size_text(n_bytes: float) -> str:
    """A number of bytes in the unit that reads best: "512 B", "3.0 MiB", "1.5 GiB"."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n_bytes) < 1024 or unit == "GiB":
            return f"{n_bytes:.0f} {unit}" if unit == "B" else f"{n_bytes:.1f} {unit}"
        n_bytes /= 1024


def heading(title: str) -> str:
    """A figure's title as the start of its text alternative ("title：", or nothing)."""
    return f"{one_line(title)}：" if title else ""


def matrix_summary(matrix) -> str:
    """A matrix in a few words: its shape, its largest entry and where it is, its -inf / NaN entries."""
    m = matrix.detach().float().cpu().numpy() if hasattr(matrix, "detach") else np.asarray(matrix, dtype=float)
    finite = np.where(np.isfinite(m), m, -np.inf)
    t, s = np.unravel_index(np.argmax(finite), m.shape)
    text = f"{m.shape[0]}×{m.shape[1]}，最大 {m[t, s]:.2f}（第 {t} 行第 {s} 列）"
    hidden = int((~np.isfinite(m)).sum())
    return text + (f"，{hidden} 格是 -inf 或 NaN" if hidden else "")


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
    ax.bar(positions, v, color=BLUE)
    ax.set_xticks(list(positions))
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if ylim is not None:
        ax.set_ylim(*ylim)
    for x, value in zip(positions, v):
        ax.text(x, float(value), f"{float(value):.2f}", ha="center",
                va="bottom" if value >= 0 else "top", fontsize=8)

