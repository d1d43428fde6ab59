"""Measurements and figures of section 06_complexity_and_memory: peak memory measured with
torch.profiler, CPU times, log–log plots with their fitted slopes, the share of a
block's FLOPs spent in attention for real model widths, the tiling picture of the widget, and
the activation-checkpointing bars.

The notebook computes every tensor and number it shows; these helpers measure and draw.
"""
from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.patches import Rectangle
from torch.profiler import ProfilerActivity, profile

from utils.plotting import (ORANGE, PURPLE, SKY, bar_style, demo_figure, describe, heading, line_style, log2_axes,
                            one_line)

METHODS = {"朴素注意力": 1, "分块注意力": 0, "SDPA": 2}   # each method's line and bar style (utils/plotting.py)


# --- measuring --------------------------------------------------------------------------------

@contextlib.contextmanager
def _quiet_stderr():
    """The profiler's C++ side prints start/stop lines on file descriptor 2: send them to /dev/null."""
    try:
        saved, null = os.dup(2), os.open(os.devnull, os.O_WRONLY)
    except OSError:
        yield
        return
    os.dup2(null, 2)
    try:
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(null)


def peak_memory(fn: Callable[[], object]) -> int:
    """Peak bytes allocated by PyTorch's CPU allocator while ``fn()`` runs (above what was live before).

    Measured, not computed: torch.profiler(profile_memory=True) records every allocation (+bytes)
    and every free (−bytes) with its time stamp; the peak is the largest running total.
    """
    with _quiet_stderr(), profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        result = fn()
        del result
    events = sorted((e.start_ns(), e.nbytes()) for e in prof.profiler.kineto_results.events()
                    if e.name() == "[memory]")
    live = peak = 0
    for _, nbytes in events:
        live += nbytes
        peak = max(peak, live)
    return peak


def count_flops(fn: Callable[[], object]) -> dict[str, int]:
    """FLOPs per operator of ``fn()``, as torch.profiler(with_flops=True) counts them from the shapes.

    The profiler counts matrix multiplications (2 FLOPs per multiply-add) and the element-wise
    aten::mul and aten::add (1 FLOP per element); division, exp, comparisons and softmax are not counted.
    """
    with _quiet_stderr(), profile(activities=[ProfilerActivity.CPU], with_flops=True) as prof:
        fn()
    counts: dict[str, int] = {}
    for event in prof.events():
        if event.flops:
            counts[event.name] = counts.get(event.name, 0) + int(event.flops)
    return counts


def best_time(fn: Callable[[], object], repeat: int = 3) -> float:
    """Smallest CPU time (seconds) of ``fn()`` over ``repeat`` runs, after one warm-up call.

    time.process_time() counts only the CPU time of this process: with torch on one thread it is
    what the code itself costs, and other programs competing for the CPU are not counted in it.
    """
    fn()
    samples = []
    for _ in range(repeat):
        start = time.process_time()
        fn()
        samples.append(time.process_time() - start)
    return min(samples)


# --- log–log plots ----------------------------------------------------------------------------

def plot_loglog(Ts: Sequence[int], series: Mapping[str, Sequence[float]], slopes: Mapping[str, float],
                ylabel: str, title: str, ax=None, reference_slope: float | None = 2.0):
    """values vs T on log–log axes, one line per series, the fitted slope in the legend: into ``ax`` (returned),
    or a figure of their own (returned)."""
    if ax is None:
        return _loglog_figure(Ts, series, slopes, ylabel, title, reference_slope)
    describe(ax.figure, _draw_loglog(Ts, series, slopes, ylabel, title, ax, reference_slope))
    return ax


@demo_figure
def _loglog_figure(Ts: Sequence[int], series: Mapping[str, Sequence[float]], slopes: Mapping[str, float],
                   ylabel: str, title: str, reference_slope: float | None):
    fig, ax = plt.subplots(figsize=(6.2, 4.3))
    describe(fig, _draw_loglog(Ts, series, slopes, ylabel, title, ax, reference_slope))
    return fig


def _draw_loglog(Ts: Sequence[int], series: Mapping[str, Sequence[float]], slopes: Mapping[str, float],
                 ylabel: str, title: str, ax, reference_slope: float | None) -> str:
    """Draw the series into ``ax``; the figure's text alternative."""
    Ts = list(Ts)
    for i, (label, values) in enumerate(series.items()):
        ax.plot(Ts, values, label=f"{label}（拟合斜率 {slopes[label]:.2f}）", **line_style(METHODS.get(label, i)))
    if reference_slope is not None:   # a guide line of the reference slope through the first series' last point
        first = next(iter(series.values()))
        x = np.array([Ts[0], Ts[-1]], dtype=float)
        ax.plot(x, first[-1] * (x / Ts[-1]) ** reference_slope, ls=":", color="grey",
                label=f"参考：斜率 {reference_slope:g}（$\\propto T^{{{reference_slope:g}}}$）")
    log2_axes(ax, Ts, "序列长度 T（对数轴）", ylabel, title)
    ax.legend(fontsize=8)
    each = "；".join(f"{label}：拟合斜率 {slopes[label]:.2f}，T = {Ts[0]} 时 {values[0]:.3g}，T = {Ts[-1]} 时 "
                    f"{values[-1]:.3g}" for label, values in series.items())
    return f"{heading(title)}{one_line(ylabel)}随序列长度 T 的变化（对数轴）。{each}。"


# --- where the FLOPs go ------------------------------------------------------------------------

@demo_figure
def plot_attention_share(Ts: Sequence[int], shares: Mapping[str, Sequence[float]], crossovers: Mapping[str, float]):
    """Attention's share of one block's FLOPs vs T per model, with the T where it reaches 50 %."""
    fig, ax = plt.subplots(figsize=(8.2, 4.6))
    for i, (name, share) in enumerate(shares.items()):
        style = line_style(i, marker=False)
        color = style["color"]
        ax.plot(Ts, [100 * s for s in share], label=name, **style)
        T_star = crossovers[name]
        ax.plot([T_star], [50], "o", color=color)
        ax.annotate(f"T = {T_star:,.0f}", (T_star, 50), textcoords="offset points", xytext=(6, -14),
                    fontsize=8, color=color)
    ax.axhline(50, color="grey", lw=0.8, ls="--")
    ax.text(Ts[0], 52, "注意力 = 投影 + FFN", fontsize=8, color="grey")
    ax.set_xscale("log", base=2)
    ax.set_ylim(0, 100)
    ax.set_xlabel("上下文长度 T（对数轴）")
    ax.set_ylabel(r"$QK^\top$ 与 $AV$ 占一个 Block 前向 FLOPs 的百分比")
    ax.set_title("上下文多长时，注意力的 T²·C 追上投影与 FFN 的 T·C²？")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=9, loc="upper left")
    fig.tight_layout()
    each = "；".join(f"{name}：T = {Ts[0]:,.0f} 时 {100 * share[0]:.0f}%，T = {Ts[-1]:,.0f} 时 {100 * share[-1]:.0f}%，"
                    f"T ≈ {crossovers[name]:,.0f} 时过半" for name, share in shares.items())
    describe(fig, f"注意力（QKᵀ 与 AV）占一个 Block 前向 FLOPs 的百分比随上下文长度 T 的变化。{each}。")
    return fig


# --- the tiling picture (widget) -----------------------------------------------------------------

@demo_figure
def draw_tiling(T: int, block_size: int, causal: bool, step: int):
    """The [T, T] score table split into key blocks of width ``block_size``.

    Key blocks before ``step`` are done, block ``step`` is being processed; only that block's
    [T, block] scores exist at this moment. With ``causal``, cells above the diagonal are masked.
    """
    n_blocks = -(-T // block_size)
    step = min(step, n_blocks - 1)
    fig, (ax, bar) = plt.subplots(1, 2, figsize=(10.5, 4.8), gridspec_kw={"width_ratios": [1.25, 1]})
    grid = np.zeros((T, T))
    for j in range(n_blocks):
        lo, hi = j * block_size, min((j + 1) * block_size, T)
        grid[:, lo:hi] = 1 if j < step else (2 if j == step else 0)
    if causal:
        grid[np.triu_indices(T, 1)] = -1
    cmap = plt.matplotlib.colors.ListedColormap(["#eeeeee", "#ffffff", SKY, ORANGE])
    ax.imshow(grid, cmap=cmap, vmin=-1.5, vmax=2.5, interpolation="nearest")
    current = step * block_size
    ax.add_patch(Rectangle((current - 0.5, -0.5), min(block_size, T - current), T, fill=False, hatch="//",
                           ec="white", lw=0))
    for j in range(1, n_blocks):
        ax.axvline(j * block_size - 0.5, color="black", lw=0.8)
    if T % block_size:
        lo = (n_blocks - 1) * block_size
        ax.add_patch(Rectangle((lo - 0.5, -0.5), T - lo, T, fill=False, ec=PURPLE, lw=2, ls="--"))
    ax.set_xlabel("键位置 s（按 block_size 分块）")
    ax.set_ylabel("查询位置 t")
    ax.set_title(f"T = {T}，block_size = {block_size}：{n_blocks} 个键块"
                 f"{'（最后一块只有 ' + str(T % block_size) + ' 列，虚线框）' if T % block_size else ''}\n"
                 f"橙色斜线 = 正在处理的块 {step}，蓝色 = 已处理；{'灰色 = 因果掩码屏蔽' if causal else '无掩码'}",
                 fontsize=9)
    naive = T * T
    tiled = T * min(block_size, T) + 2 * T
    for name, value, method in (("朴素：完整的 T×T 表", naive, "朴素注意力"),
                                ("分块：一个 T×block 块\n+ m、ℓ 各 T 个", tiled, "分块注意力")):
        bar.bar(name, value, **bar_style(METHODS[method]))
    for x, value in enumerate([naive, tiled]):
        bar.text(x, value, f"{value:,} 个数", ha="center", va="bottom", fontsize=9)
    bar.set_ylabel("同一时刻存在的分数个数（每个序列、每个头）")
    bar.set_title(f"分块只需朴素的 {tiled / naive:.1%}", fontsize=10)
    fig.tight_layout()
    done = f"前 {step} 块已处理，" if step else ""
    masked = "，对角线上方被因果掩码屏蔽" if causal else ""
    describe(fig, f"T = {T}，block_size = {block_size}：分数表分成 {n_blocks} 个键块，{done}"
                  f"正在处理第 {step} 块（斜线）{masked}。同一时刻，分块只需存 {tiled:,} 个数，"
                  f"朴素做法要 {naive:,} 个（{tiled / naive:.1%}）。")
    return fig


# --- activation checkpointing ----------------------------------------------------------------------

@demo_figure
def plot_checkpointing(results: Mapping[str, tuple[int, float]]):
    """Two bar charts: measured peak memory (MiB) and time (ms) of forward + backward."""
    fig, axes = plt.subplots(1, 2, figsize=(9.5, 3.6))
    names = list(results)
    for ax, index, unit, scale, title in [(axes[0], 0, "MiB", 2 ** -20, "峰值内存（实测）"),
                                          (axes[1], 1, "ms", 1e3, "前向 + 反向的 CPU 时间（实测）")]:
        values = [results[n][index] * scale for n in names]
        for i, (name, value) in enumerate(zip(names, values)):
            ax.bar(name, value, **bar_style(i))
        for x, value in enumerate(values):
            ax.text(x, value, f"{value:.1f} {unit}", ha="center", va="bottom", fontsize=9)
        ax.set_title(title, fontsize=10)
        ax.set_ylabel(unit)
    fig.suptitle("activation checkpointing：用时间换内存", fontsize=11)
    fig.tight_layout()
    describe(fig, "activation checkpointing 的前向 + 反向（实测）：" + "；".join(
        f"{name}：峰值内存 {memory * 2 ** -20:.1f} MiB，CPU 时间 {seconds * 1e3:.1f} ms"
        for name, (memory, seconds) in results.items()) + "。")
    return fig
