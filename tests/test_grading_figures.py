"""At grading time figures are built but not rendered (utils/grading_backend.py), unless the
instructor asks for them (``c.ResilientExecute.draw_figures = True``); in the sandbox as out of it."""
from __future__ import annotations

import nbformat
import pytest

from autograder import sandbox
from autograder.preprocessors import ResilientExecute
from utils.grading_backend import NOTE

DRAWING_CELLS = [
    "import matplotlib.pyplot as plt\nfrom IPython.display import display\nplt.plot([1, 2])\nplt.show()",
    "fig, ax = plt.subplots()\nax.plot([3, 1])\ndisplay(fig)",      # explore() displays its figure
    "fig, ax = plt.subplots()\nax.plot([3, 1])",                   # drawn at the end of the cell
    "print('open figures:', len(plt.get_fignums()))",
]
SANDBOXES = [False, pytest.param(True, marks=pytest.mark.skipif(
    sandbox.unavailable_reason() is not None, reason=f"no sandbox here: {sandbox.unavailable_reason()}"))]


def graded_outputs(tmp_path, **options) -> list[list[dict]]:
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(src) for src in DRAWING_CELLS])
    executed, _ = ResilientExecute(timeout=120, **options).preprocess(nb, {"metadata": {"path": str(tmp_path)}})
    return [cell.outputs for cell in executed.cells]


def images(outputs: list[list[dict]]) -> int:
    return sum("image/png" in out.get("data", {}) for cell in outputs for out in cell)


@pytest.mark.slow
@pytest.mark.parametrize("sealed", SANDBOXES)
def test_grading_builds_figures_without_rendering_them(tmp_path, sealed):
    outputs = graded_outputs(tmp_path, sandbox=sealed)
    assert images(outputs) == 0
    assert [out["data"]["text/plain"] for out in outputs[1]] == [NOTE], "display(fig) shows the note"
    assert not [out for out in outputs[0] if out["output_type"] == "stream"], "plt.show() warns about nothing"
    assert outputs[3][0]["text"] == "open figures: 0\n", "every cell's figures are closed after it"


@pytest.mark.slow
@pytest.mark.parametrize("sealed", SANDBOXES)
def test_the_instructor_can_keep_the_figures(tmp_path, sealed):
    assert images(graded_outputs(tmp_path, sandbox=sealed, draw_figures=True)) == 4
