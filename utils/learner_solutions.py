"""Earlier sections' components, where the package holds no answer: the learner's own solutions.

The class edition (utils/edition.py) holds the reference implementations of the sections whose
assignments are closed only. A later notebook that builds on an open one — 08's ``Block`` on 05's
``CausalSelfAttention`` — then takes the learner's own: the solution cells of their saved notebook
of that section (a sibling folder, as nbgrader fetches assignments and as the self-study working
copy ``my_work/`` holds them), if it passes its visible check. Otherwise it gets a stand-in that, once used, says in one
Chinese line what is missing.
"""
from __future__ import annotations

import contextlib
import io
import json
import math
import sys
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

from .notebook import cell_kind
from .pending import ExerciseNeeded, Pending  # noqa: F401  (ExerciseNeeded: what a Later raises, by this name)


def saved_notebook(section: str, start: Path | None = None) -> Path | None:
    """The learner's notebook of ``section`` beside the current one (…/<section>/<section>.ipynb)."""
    here = start or Path.cwd()
    for folder in (here.parent, here):
        path = folder / section / f"{section}.ipynb"
        if path.is_file():
            return path
    return None


def solution_namespace(path: Path) -> dict:
    """Run the solution and given (export) cells of a saved notebook; the names they define."""
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    namespace = {"math": math, "torch": torch, "nn": nn, "F": F}
    for cell in cells:
        if cell_kind(cell) in ("solution", "export"):
            source = cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])
            with contextlib.redirect_stdout(io.StringIO()):
                exec(compile(source, str(path), "exec"), namespace)
    return namespace


def learners_own(name: str, section: str):
    """The learner's ``name`` from their saved notebook of ``section`` if it passes its visible check,
    else a :class:`Pending` saying why. In that section's own notebook (its folder is the working one: in
    grading, the submission), the name its cells defined in this kernel: the notebook is not run again."""
    number = section[:2]
    if Path.cwd().name == section:
        return _defined_here(name, number)
    path = saved_notebook(section)
    if path is None:
        why = f"没有找到你的 {section}/{section}.ipynb"
        return Pending(name, _message(name, number, why))
    try:
        candidate = solution_namespace(path).get(name)
        from . import checks
        with contextlib.redirect_stdout(io.StringIO()):
            getattr(checks, f"check_{name}")(candidate)
    except Exception:  # noqa: BLE001 — the learner's code, any error: it is not done
        return Pending(name, _message(name, number, f"你在 {number} 节的 {name} 还没有通过检查（记得保存 notebook）"))
    return candidate


def _defined_here(name: str, number: str):
    """``name`` as the running notebook's cells defined it (IPython's namespace is ``__main__``'s)."""
    defined = vars(sys.modules["__main__"]).get(name)
    if defined is not None and not isinstance(defined, Later):   # a Later: imported from utils.reference, not written
        return defined
    return Pending(name, _message(name, number, f"这个 notebook 里定义 {name} 的单元格还没有运行"))


def _message(name: str, number: str, why: str) -> str:
    return (f"这里要用到 {number} 节的 {name}：课程包里还没有它的参考实现（那一节的作业还没截止），"
            f"而{why}。先完成 {number} 节的这个练习并保存，再运行这个单元格。")


class Later:
    """``name`` of an open section, resolved when first used: the learner's own (:func:`learners_own`)."""

    def __init__(self, name: str, section: str):
        self._name, self._section, self._resolved = name, section, None

    def _get(self):
        if self._resolved is None:
            found = learners_own(self._name, self._section)
            if isinstance(found, Pending):
                found()                      # raises ExerciseNeeded with the reason
            self._resolved = found
        return self._resolved

    def __call__(self, *args, **kwargs):
        return self._get()(*args, **kwargs)

    def __getattr__(self, attribute: str):
        if attribute.startswith("__"):
            raise AttributeError(attribute)
        return getattr(self._get(), attribute)

    def __mro_entries__(self, bases):
        return (self._get(),)               # subclassed: the learner's class

    def __repr__(self) -> str:
        return f"<{self._section[:2]} 节的 {self._name}：用你自己的实现>"


def later(name: str, section: str) -> Later:
    return Later(name, section)
