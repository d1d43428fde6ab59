"""A matplotlib backend for autograding: figures are built as usual but never rendered.

Grading re-runs a student's whole notebook. Its demo figures are drawn by the course's own code
(with the reference implementation, or with the student's code once it passed its check), so they
say nothing about the student that the check cells do not; rendering them is a large part of
grading a figure-heavy section. The grading kernels' specs (autograder/provisioner.py's
``GradingKernelSpecs``) set ``MPLBACKEND=module://utils.grading_backend`` unless the instructor sets
``c.GradingKernelSpecs.draw_figures = True``. Every cell still runs; ``plt.show()`` and the end of
each cell close the open figures, and ``display(fig)`` shows a one-line note instead of an image.
The course's demo functions (``@demo_figure``, utils/plotting.py) do not even build their figures
under this backend: they return an empty one.
"""
from __future__ import annotations

import matplotlib.pyplot as plt
from matplotlib.backends.backend_template import FigureCanvasTemplate, RendererTemplate
from matplotlib.figure import Figure

NOTE = "[评分时不绘制演示图：图在你自己的 notebook 里]"


class FigureCanvas(FigureCanvasTemplate):
    """The backend's canvas: drawing (``fig.canvas.draw()``) goes through every artist with a renderer
    that draws and measures nothing. ``savefig`` to a file still renders for real (matplotlib picks
    the canvas of the file's format)."""

    def get_renderer(self) -> RendererTemplate:
        return RendererTemplate(self.figure.dpi)


def _skip_layout(figure: Figure, *args, **kwargs) -> None:  # noqa: ARG001 (Figure.tight_layout's signature)
    """``tight_layout`` measures every text and tick of a figure: about a third of the cost of building
    a course figure, for a layout nobody sees at grading time."""


def show(*args, **kwargs) -> None:  # noqa: ARG001 (pyplot's show signature)
    plt.close("all")


def _in_ipython() -> None:
    """Close figures after every cell; show the note where a figure is displayed."""
    try:
        from IPython import get_ipython
    except ImportError:
        return
    shell = get_ipython()
    if shell is None:
        return
    shell.display_formatter.formatters["text/plain"].for_type(Figure, lambda _fig, p, _cycle: p.text(NOTE))
    shell.events.register("post_execute", show)


Figure.tight_layout = _skip_layout
_in_ipython()
