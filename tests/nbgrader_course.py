"""A throw-away nbgrader course in a temporary directory, driven through nbgrader's own CLI."""
from __future__ import annotations

import copy
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from nbgrader.api import Gradebook

from autograder.notebook_format import cell_kind, grade_id

from .conftest import ROOT


class Course:
    def __init__(self, root: Path):
        self.root = root

    @classmethod
    def create(cls, root: Path, sections: list[str], extra_config: str = "") -> "Course":
        """A course with these sections generated; ``extra_config`` is appended to its config."""
        (root / "solutions").mkdir(parents=True)
        for section in sections:
            shutil.copytree(ROOT / "solutions" / section, root / "solutions" / section)
        config = (ROOT / "nbgrader_config.py").read_text(encoding="utf-8")
        (root / "nbgrader_config.py").write_text(config + extra_config, encoding="utf-8")
        course = cls(root)
        course.nbgrader("generate_assignment", "*", "--force")   # every section copied above, in one run
        return course

    def nbgrader(self, *args: str) -> subprocess.CompletedProcess:
        # nbgrader runs `alembic` from PATH: put this environment's scripts first.
        env = {**os.environ, "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]])}
        return subprocess.run([sys.executable, "-m", "nbgrader", *args, "--log-level=WARN"],
                              cwd=self.root, check=True, capture_output=True, text=True, env=env)

    def release_notebook(self, section: str) -> dict:
        return json.loads((self.root / "notebooks" / section / f"{section}.ipynb").read_text(encoding="utf-8"))

    def submit(self, student: str, section: str, nb: dict) -> None:
        folder = self.root / "submitted" / student / section
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{section}.ipynb").write_text(json.dumps(nb, ensure_ascii=False), encoding="utf-8")

    def scores(self, section: str, db_url: str | None = None) -> dict[str, dict[str, float]]:
        """student -> {grade_id: score} for every graded cell of the section's notebook."""
        result: dict[str, dict[str, float]] = {}
        with Gradebook(db_url or f"sqlite:///{self.root / 'gradebook.db'}", "attention") as gb:
            notebook = gb.find_notebook(section, section)
            for submission in gb.assignment_submissions(section):
                sub_nb = gb.find_submission_notebook(section, section, submission.student_id)
                result[submission.student_id] = {g.name: g.score for g in sub_nb.grades}
            assert notebook is not None
        return result

    def feedback_html(self, student: str, section: str) -> str:
        return (self.root / "feedback" / student / section / f"{section}.html").read_text(encoding="utf-8")


def with_solution(nb: dict, exercise: str, source: str) -> dict:
    """A copy of ``nb`` whose solution cell for ``exercise`` holds ``source``."""
    nb = copy.deepcopy(nb)
    cells = [c for c in nb["cells"] if grade_id(c) == exercise]
    assert len(cells) == 1, f"no solution cell {exercise}"
    cells[0]["source"] = source
    return nb


def slim(nb: dict) -> dict:
    """Keep prose, graded cells and the first (import) code cell: the demos cost seconds per run."""
    nb = copy.deepcopy(nb)
    first_code = next(i for i, c in enumerate(nb["cells"]) if c["cell_type"] == "code")
    nb["cells"] = [c for i, c in enumerate(nb["cells"])
                   if i == first_code or c["cell_type"] == "markdown" or cell_kind(c) in ("solution", "test")]
    return nb
