"""The class edition built (autograder/edition.py) and installed into a fresh virtual environment.

The environment sees this course's dependencies (a .pth file naming the course environment's
site-packages: torch, nbgrader, … are not installed twice) but not the course itself: ``import
utils`` there is the class edition that pip installed, nothing else.
"""
from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
import venv
from dataclasses import dataclass
from pathlib import Path

from autograder import edition
from autograder.notebook_format import exercises

from .conftest import ROOT, SECTIONS, load_notebook

# What tests/test_class_edition.py builds: sections after ANSWERS_THROUGH are the open assignments.
ANSWERS_THROUGH = "04_masks"
OPEN = [s for s in SECTIONS if s > ANSWERS_THROUGH]
OPEN_EXERCISES = [e for s in OPEN for e in exercises(load_notebook("solutions", s))]


@dataclass(frozen=True)
class Installed:
    out: Path        # what `course.py edition student OUT` wrote
    python: Path     # the fresh environment's interpreter
    package: Path    # the installed utils/ in its site-packages


def install(tmp: Path, answers_through: str | None) -> Installed:
    tmp.mkdir(parents=True, exist_ok=True)
    out, env = tmp / "class-edition", tmp / "student-env"
    subprocess.run([sys.executable, str(ROOT / "course.py"), "edition", "student", str(out),
                    *(["--answers-through", answers_through] if answers_through else [])],
                   check=True, capture_output=True, text=True, cwd=tmp)
    venv.EnvBuilder(with_pip=False).create(env)
    python = env / "bin" / "python"
    site = Path(subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               check=True, capture_output=True, text=True).stdout.strip())
    (site / "course-dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n", encoding="utf-8")
    subprocess.run([python, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--no-index",
                    "--disable-pip-version-check", str(out)], check=True, capture_output=True, text=True, cwd=tmp)
    package = site / "utils"
    assert (package / "edition.py").read_text(encoding="utf-8") == edition.edition_module(
        edition.released_sections(answers_through)), "pip installed the class edition's package"
    return Installed(out, python, package)


def renamed_copy(package: Path, into: Path, name: str) -> Path:
    """The installed package copied as top-level package ``name`` (its ``utils.`` imports renamed),
    so that one process can hold it beside the full course's ``utils``."""
    target = into / name
    shutil.copytree(package, target, ignore=shutil.ignore_patterns("__pycache__"))
    for path in target.rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        text = text.replace("from utils.", f"from {name}.").replace("import utils.", f"import {name}.")
        text = text.replace("from utils import", f"from {name} import")
        path.write_text(text, encoding="utf-8")
    return target
