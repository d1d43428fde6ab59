"""Interactive figures that still make sense when a notebook runs headless.

``explore(draw, slider=..., ...)`` first draws the figure for the controls' starting values
as an ordinary (static) output — kept in saved, executed and graded notebooks — and then
shows the controls; moving one redraws the figure below them in JupyterLab.
"""
from __future__ import annotations

from collections.abc import Callable

import ipywidgets as widgets
import matplotlib.pyplot as plt
from IPython.display import display


def explore(draw: Callable[..., object], **controls: widgets.ValueWidget) -> widgets.VBox:
    """Show ``draw(**values)`` once, then controls that redraw it; returns the widget box."""
    values = {name: control.value for name, control in controls.items()}
    draw(**values)
    plt.show()
    output = widgets.Output()

    def redraw(_change=None) -> None:
        with output:
            output.clear_output(wait=True)
            draw(**{name: control.value for name, control in controls.items()})
            plt.show()

    for control in controls.values():
        control.observe(redraw, names="value")
    box = widgets.VBox([widgets.HTML("<b>拖动或切换下面的控件，图会在下方重画：</b>"),
                        widgets.HBox(list(controls.values())), output])
    display(box)
    return box
