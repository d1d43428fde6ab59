"""At grading time figures are built but not rendered (utils/grading_backend.py), and the course's
demo figures are not even built (``utils.plotting.demo_figure``), unless the instructor asks for them
(``c.GradingKernelSpecs.draw_figures = True``); in the sandbox as out of it."""
from __future__ import annotations

import ast
from pathlib import Path

import matplotlib
import nbformat
import pytest
import torch
from traitlets.config import Config

from autograder.preprocessors import ResilientExecute
from utils import GRADING_BACKEND
from utils.demos import s03
from utils.grading_backend import NOTE
from utils.plotting import TEXT_ALTERNATIVE

ROOT = Path(__file__).resolve().parents[1]

DRAWING_CELLS = [
    "import matplotlib.pyplot as plt\nfrom IPython.display import display\nplt.plot([1, 2])\nplt.show()",
    "fig, ax = plt.subplots()\nax.plot([3, 1])\ndisplay(fig)",      # explore() displays its figure
    "fig, ax = plt.subplots()\nax.plot([3, 1])",                   # drawn at the end of the cell
    "print('open figures:', len(plt.get_fignums()))",
    "import torch\nfrom utils.demos import s03\nfrom utils.plotting import setup_chinese_font\nsetup_chinese_font()\n"
    "print('axes:', len(s03.draw_weights(torch.eye(3), 'demo').axes))",  # as a section's cell calls it
]
SANDBOXES = [False, pytest.param(True, marks=pytest.mark.needs("bwrap"))]


def graded_outputs(tmp_path, **options) -> list[list[dict]]:
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(src) for src in DRAWING_CELLS])
    config = Config({"SandboxProvisioner": {"sandbox": options.pop("sandbox")}, "GradingKernelSpecs": options})
    executed, _ = ResilientExecute(timeout=120, config=config).preprocess(nb, {"metadata": {"path": str(tmp_path)}})
    return [cell.outputs for cell in executed.cells]


def printed(cell_outputs: list[dict]) -> str:
    """What the cell printed on stdout (a machine without the CJK font adds warnings on stderr)."""
    return "".join(out["text"] for out in cell_outputs if out.get("name") == "stdout")


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
    assert printed(outputs[4]) == "axes: 0\n", "a demo figure is not built at grading time"


@pytest.mark.slow
@pytest.mark.parametrize("sealed", SANDBOXES)
def test_the_instructor_can_keep_the_figures(tmp_path, sealed):
    outputs = graded_outputs(tmp_path, sandbox=sealed, draw_figures=True)
    assert images(outputs) == 5
    text_alternative, axes = printed(outputs[4]).splitlines()
    assert axes == "axes: 2", "the demo figure (heatmap and colour bar) is built"
    assert text_alternative.startswith(TEXT_ALTERNATIVE), "and printed with its text alternative"


def test_a_demo_figure_is_drawn_except_at_grading(monkeypatch):
    drawn = s03.draw_weights(torch.eye(3), "demo")
    assert len(drawn.axes) == 2
    monkeypatch.setitem(matplotlib.rcParams, "backend", GRADING_BACKEND)
    skipped = s03.draw_weights("not even a tensor", "demo")  # the drawing code does not run at all
    assert isinstance(skipped, matplotlib.figure.Figure) and not skipped.axes


FIGURE_MAKERS = {"plt.subplots", "plt.figure", "heatmaps"}


def notebook_calls(name: str) -> list[ast.Call]:
    """Every call of ``name`` (as ``name(…)`` or ``module.name(…)``) in the solution notebooks' code."""
    calls = []
    for path in sorted((ROOT / "solutions").glob("*/*.ipynb")):
        for cell in nbformat.read(path, as_version=4).cells:
            try:
                tree = ast.parse(cell.source) if cell.cell_type == "code" else None
            except SyntaxError:   # a cell with IPython magics
                continue
            calls += [node for node in ast.walk(tree or ast.Module(body=[], type_ignores=[]))
                      if isinstance(node, ast.Call) and ast.unparse(node.func).split(".")[-1] == name]
    return calls


def builds_its_own_figure(function: ast.FunctionDef) -> bool:
    """Makes a figure (plt.subplots / plt.figure / heatmaps), unless it takes an ``ax`` that every notebook
    call gives it (then it draws into the notebook's figure)."""
    calls = {ast.unparse(node.func) for node in ast.walk(function) if isinstance(node, ast.Call)}
    if not calls & FIGURE_MAKERS:
        return False
    parameters = [a.arg for a in function.args.args + function.args.kwonlyargs]
    if "ax" not in parameters:
        return True
    at = parameters.index("ax")
    return any(len(call.args) <= at and "ax" not in {k.arg for k in call.keywords}
               for call in notebook_calls(function.name))


def test_every_demo_that_builds_a_figure_skips_it_at_grading():
    """A new demo without ``@demo_figure`` would be built for every graded submission."""
    undecorated = []
    for path in [*sorted((ROOT / "utils" / "demos").glob("*.py")), ROOT / "utils" / "plotting.py"]:
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.FunctionDef) and node.name != "demo_figure" and builds_its_own_figure(node) \
                    and "demo_figure" not in {ast.unparse(d) for d in node.decorator_list}:
                undecorated.append(f"{path.name}:{node.name}")
    assert not undecorated, f"decorate these with @demo_figure (utils/plotting.py): {undecorated}"
