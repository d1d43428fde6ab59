"""A component of an open section comes from the learner's own solutions (utils/learner_solutions.py); the
notebook that is running is never run a second time for it (in grading it is the submission itself)."""
from __future__ import annotations

import sys
import types

import nbformat
import pytest

from utils import learner_solutions

SECTION = "08_ffn_norm_residual"


def saved(folder, source: str):
    """``folder``/<SECTION>/<SECTION>.ipynb holding one solution cell of ``source``; its folder."""
    here = folder / SECTION
    here.mkdir()
    cell = nbformat.v4.new_code_cell(source, metadata={"nbgrader": {"solution": True, "grade": False,
                                                                    "grade_id": "Block", "locked": False}})
    nbformat.write(nbformat.v4.new_notebook(cells=[cell]), here / f"{SECTION}.ipynb")
    return here


def test_the_running_notebooks_own_definition_is_taken_without_running_its_cells_again(tmp_path, monkeypatch):
    marker = tmp_path / "ran-again"
    here = saved(tmp_path, f"open({str(marker)!r}, 'w').close()\nclass Block:\n    pass\n")
    main = types.ModuleType("__main__")
    main.Block = type("Block", (), {})   # what the notebook's own cell defined in this kernel
    monkeypatch.setitem(sys.modules, "__main__", main)
    monkeypatch.chdir(here)
    assert learner_solutions.learners_own("Block", SECTION) is main.Block
    assert not marker.exists(), "the running notebook's solution cells were run a second time"


def test_before_its_cell_ran_the_running_notebooks_name_is_pending(tmp_path, monkeypatch):
    here = saved(tmp_path, "class Block:\n    pass\n")
    monkeypatch.setitem(sys.modules, "__main__", types.ModuleType("__main__"))
    monkeypatch.chdir(here)
    found = learner_solutions.learners_own("Block", SECTION)
    assert isinstance(found, learner_solutions.Pending) and "Block" in found._message


def test_a_name_imported_from_the_reference_is_not_the_learners_own(tmp_path, monkeypatch):
    """``from utils.reference import Block`` in the section's own notebook binds the class edition's stand-in: it
    is pending (ExerciseNeeded when used), not taken as the definition it stands for (that was a RecursionError)."""
    here = saved(tmp_path, "class Block:\n    pass\n")
    main = types.ModuleType("__main__")
    main.Block = learner_solutions.later("Block", SECTION)
    monkeypatch.setitem(sys.modules, "__main__", main)
    monkeypatch.chdir(here)
    assert isinstance(learner_solutions.learners_own("Block", SECTION), learner_solutions.Pending)
    with pytest.raises(learner_solutions.ExerciseNeeded):
        main.Block()
