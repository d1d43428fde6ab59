"""Interactive figures that still make sense when a notebook runs headless.

``explore(draw, slider=..., ...)`` first shows what ``draw`` prints and draws for the controls'
starting values as ordinary outputs — kept in saved, executed and graded notebooks — and then
the controls. Moving one redraws that same text and figure in place (IPython display handles),
so JupyterLab always shows one, current figure above the controls.

``attention_microscope(model, prompt, ...)`` steps through a model's generation token by token: per
layer and head, the attention row of the newest token, how many positions the KV cache holds, and the
distribution the next token is drawn from. It works on any model with the contract's names (section
10's ``DecoderLM``, section 12's ``AttentionOnlyLM``), whose weights utils/attention_hooks.py reads.
Headless, the starting step is a static figure like every other.
"""
from __future__ import annotations

import contextlib
import inspect
import io
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import ipywidgets as widgets
import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F
from IPython.display import DisplayHandle, display
from matplotlib.figure import Figure

from utils.attention_hooks import attention_weights, watching_attention
from utils.plotting import BLUE, GREY, VERMILLION, demo_figure, describe, heading, heatmap


def _run_draw(draw: Callable[..., object], values: dict) -> tuple[str, Figure | None]:
    """Call ``draw(**values)``; return what it printed and the figure it drew (now closed)."""
    before = set(plt.get_fignums())
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        returned = draw(**values)
    new = [plt.figure(n) for n in plt.get_fignums() if n not in before]
    figure = returned if isinstance(returned, Figure) else (new[-1] if new else None)
    for fig in new:
        plt.close(fig)
    return printed.getvalue(), figure


class _Drawing:
    """What ``draw`` printed and drew, shown once and then updated in place."""

    def __init__(self, draw: Callable[..., object], values: dict):
        self.draw = draw
        text, figure = _run_draw(draw, values)
        self.text: DisplayHandle | None = display(_plain(text), raw=True, display_id=True) if text else None
        self.figure: DisplayHandle | None = display(figure, display_id=True) if figure is not None else None

    def redraw(self, values: dict) -> None:
        text, figure = _run_draw(self.draw, values)
        if self.text is not None:
            self.text.update(_plain(text), raw=True)
        if self.figure is not None and figure is not None:
            self.figure.update(figure)


def _plain(text: str) -> dict:
    return {"text/plain": text.rstrip("\n")}


def explore(draw: Callable[..., object], **controls: widgets.ValueWidget) -> widgets.VBox:
    """Show ``draw(**values)`` once, then controls that redraw it in place; returns the widget box."""
    def values() -> dict:
        return {name: control.value for name, control in controls.items()}

    drawing = _Drawing(draw, values())
    for control in controls.values():
        control.observe(lambda _change: drawing.redraw(values()), names="value")
    box = widgets.VBox([widgets.HTML("<b>拖动或切换下面的控件，上面的图会随之重画：</b>"),
                        widgets.HBox(list(controls.values()))])
    display(box)
    return box


# --- the attention microscope ---------------------------------------------------------------------

@dataclass
class MicroscopeStep:
    """One step of a generation: the newest token (the last of ``tokens``) is the query."""
    tokens: list[int]            # the sequence so far
    rows: list[torch.Tensor]     # per layer (H, S): each head's attention from the newest token to the S keys
    cached: list[int]            # per layer: the positions whose K/V the model holds
    probs: torch.Tensor          # (V,) the distribution the next token is drawn from
    chosen: int                  # the next token
    from_cache: bool             # K/V held in a KV cache (else recomputed for the whole sequence at this step)


class _Watched:
    """Section 07's KVCache, as the model uses it, remembering the keys its last update handed back (every
    cached position's, rotated) so that the microscope can read them."""

    def __init__(self, cache):
        self.cache, self.keys = cache, None

    def update(self, k, v):
        self.keys, values = self.cache.update(k, v)                       # (B, Hkv, S, Dh) each
        return self.keys, values

    def __len__(self):
        return len(self.cache)


def _newest_row(rope, attn, x, angles, cache) -> torch.Tensor:
    """(H, S): the weights of the newest query (x's last position) over every key the layer holds: its
    cache's (rotated when they were cached), or x's own."""
    if cache is None:
        return attention_weights(attn, x, angles, rope)[0, :, -1]
    return attention_weights(attn, x[:, -1:], angles[-1:], rope, cache.keys)[0, :, -1]


@torch.no_grad()
def trace_generation(model, prompt: torch.Tensor, max_new_tokens: int, temperature: float = 0.0,
                     generator: torch.Generator | None = None) -> list[MicroscopeStep]:
    """Generate from prompt (1, T0), one token per step, recording each step (MicroscopeStep). A model whose
    forward takes ``caches`` (DecoderLM) is fed the prompt once and then one token per step through a KV
    cache per block; any other is fed the whole sequence every step (its K/V recomputed). temperature 0 is
    greedy (the distribution shown is then softmax of the logits); otherwise softmax(logits / temperature)
    is sampled with ``generator``."""
    from utils.reference import KVCache, apply_rope   # sections 07, 09

    cached_model = "caches" in inspect.signature(model.forward).parameters
    caches = [_Watched(KVCache()) for _ in model.blocks] if cached_model else None
    limit = getattr(getattr(model, "config", None), "context_length", None)
    ids, feed, steps = prompt, prompt, []
    for _ in range(max_new_tokens):
        if limit is not None and ids.size(1) > limit:
            break
        with watching_attention(model) as seen:
            logits = model(feed, caches=caches)[0] if cached_model else model(ids)[0]      # (1, T, V)
        rows = [_newest_row(apply_rope, block.attn, *seen[i]) for i, block in enumerate(model.blocks)]
        last = logits[0, -1].float()                                      # (V,)
        probs = F.softmax(last / temperature if temperature > 0 else last, dim=-1)
        chosen = int(torch.multinomial(probs, 1, generator=generator)) if temperature > 0 else int(last.argmax())
        cached = [len(c) for c in caches] if caches else [ids.size(1)] * len(model.blocks)
        steps.append(MicroscopeStep(ids[0].tolist(), rows, cached, probs, chosen, caches is not None))
        ids = torch.cat([ids, torch.tensor([[chosen]], dtype=ids.dtype)], dim=1)
        feed = ids[:, -1:]
    return steps


@demo_figure
def draw_microscope_step(step: MicroscopeStep, labels: Sequence[str], context_length: int | None = None,
                         title: str = "", top: int = 10):
    """One step: a heatmap per layer (a row per head: its attention from the newest token to every key),
    then the next token's distribution (its `top` most probable tokens, the chosen one marked)."""
    L, S = len(step.rows), len(step.tokens)
    shown = [labels[i] for i in step.tokens]
    heights = [0.32 * r.size(0) + 1.0 for r in step.rows] + [2.4]          # inches: a row per head, then the bars
    fig, axes = plt.subplots(L + 1, 1, figsize=(max(6.0, 0.38 * S + 2.2), sum(heights) + 0.8), squeeze=False,
                             gridspec_kw={"height_ratios": heights})
    held = "KV Cache 里有" if step.from_cache else "K/V（每步重算）有"
    for layer, (ax, row) in enumerate(zip(axes[:L, 0], step.rows)):
        heatmap(ax, row, f"第 {layer} 层：{held} {step.cached[layer]} 个位置"
                         + (f"（上限 {context_length}）" if context_length else ""),
                xlabel="键：位置上的 token", ylabel="头", labels=shown, annotate=False, vmax=1.0,
                row_labels=[f"头 {h}" for h in range(row.size(0))])
        ax.set_aspect("auto")
    ax = axes[L, 0]
    probs, order = step.probs.sort(descending=True)
    order, probs = order[:top].tolist(), probs[:top].tolist()
    colours = [VERMILLION if token == step.chosen else BLUE for token in order]
    bars = ax.bar(range(len(order)), probs, color=colours)
    for bar, token in zip(bars, order):
        bar.set_hatch("//" if token == step.chosen else "")    # told apart without colour too
    ax.set_xticks(range(len(order)), [labels[token] for token in order])
    ax.set_ylim(0, 1)
    ax.set_ylabel("概率")
    marked = "（带斜线的那一根）" if step.chosen in order else f"（不在前 {len(order)} 名里）"
    ax.set_title(f"下一个 token 的分布（前 {len(order)} 名），抽中的是“{labels[step.chosen]}”{marked}", fontsize=10)
    ax.grid(axis="y", color=GREY, alpha=0.3)
    newest = f"查询是最新的 token “{shown[-1]}”（位置 {S - 1}）"
    fig.suptitle(f"{title}\n{newest}" if title else newest, fontsize=11)
    fig.tight_layout()
    heads = "；".join(f"第 {layer} 层头 {h} 最看位置 {int(r.argmax())}（“{shown[int(r.argmax())]}”，"
                     f"权重 {r.max().item():.2f}）" for layer, rows in enumerate(step.rows) for h, r in enumerate(rows))
    best = "，".join(f"“{labels[t]}” {p:.2f}" for t, p in zip(order[:3], probs[:3]))
    describe(fig, f"{heading(title)}{newest}，每层{held} {step.cached} 个位置。{heads}。"
                  f"下一个 token 最可能的是 {best}，抽中“{labels[step.chosen]}”。")
    return fig


def attention_microscope(model, prompt: torch.Tensor, max_new_tokens: int, labels: Sequence[str],
                         temperature: float = 0.0, generator: torch.Generator | None = None, title: str = "",
                         start: int = 0) -> list[MicroscopeStep]:
    """Generate with trace_generation, show step ``start`` (text and figure, kept headless) and a slider with a
    play button that redraws it in place, step by step; returns the steps."""
    steps = trace_generation(model, prompt, max_new_tokens, temperature, generator)
    context = getattr(getattr(model, "config", None), "context_length", None)

    def draw(step):
        return draw_microscope_step(steps[step], labels, context, title)

    drawing = _Drawing(draw, {"step": start})
    slider = widgets.IntSlider(value=start, min=0, max=len(steps) - 1, description="第几步")
    play = widgets.Play(value=start, min=0, max=len(steps) - 1, interval=900, description="播放")
    widgets.jslink((play, "value"), (slider, "value"))
    slider.observe(lambda change: drawing.redraw({"step": change["new"]}), names="value")
    display(widgets.VBox([widgets.HTML("<b>拖动滑块或按播放键，一步一步看生成（上面的图会随之重画）：</b>"),
                          widgets.HBox([play, slider])]))
    return steps
