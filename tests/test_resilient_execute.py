"""ResilientExecute goes on after a cell that loses the kernel: a fresh kernel replays the cells before it,
and what those cells recorded the first time is what the notebook keeps (the replay records nothing)."""
from __future__ import annotations

import nbformat
from traitlets.config import Config

from autograder.config import configure
from autograder.preprocessors import ResilientExecute

COUNTED = "import pathlib\n_runs = pathlib.Path('runs')\n_runs.write_text(_runs.read_text() + 'x' if _runs.exists() " \
          "else 'x')\nprint('run', len(_runs.read_text()))"


def test_a_replayed_cell_keeps_the_outputs_of_its_first_run(tmp_path):
    config = Config()
    configure(config)
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(COUNTED),
                                         nbformat.v4.new_code_cell("import os\nos._exit(1)"),
                                         nbformat.v4.new_code_cell("print('after')")])
    ResilientExecute(config=config).preprocess(nb, {"metadata": {"path": str(tmp_path)}})
    assert (tmp_path / "runs").read_text() == "xx", "the first cell was replayed in the fresh kernel"
    assert [o.get("text") for o in nb.cells[0].outputs] == ["run 1\n"], nb.cells[0].outputs
    assert "[kernel-died]" in nb.cells[1].outputs[-1].evalue and nb.cells[2].outputs[0].text == "after\n"
