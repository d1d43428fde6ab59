"""Interactive figures that still make sense when a notebook runs headless.

``explore(draw, slider=..., ...)`` first shows what ``draw`` prints and draws for the controls'
starting values as ordinary outputs — kept in saved, executed and graded notebooks — and then
the controls. Moving one redraws that same text and figure in place (IPython display handles),
so JupyterLab always shows one, current figure above the controls.
"""
from __future__ import annotations

import contextlib
import io
from collections.abc import Callable

import ipywidgets as widgets
import matplotlib.pyplot as plt
from IPython.display import DisplayHandle, display
from matplotlib.figure import Figure


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
