"""Visible checks: ``check_<name>(candidate)`` for every graded exercise.

Each returns quietly (printing a short Chinese pass line) when the candidate is right and
raises :class:`CheckError` — message in Chinese, starting with ``[code]`` — otherwise;
``hint=2`` and ``hint=3`` show further hints. Hidden tests call the same checks with
``extended=True`` and another ``seed``; in grading, the judge (autograder/judge.py) runs each
check's ``.definition`` itself, with the learner's code answering through the kernel.

The checks of section NN live in ``sNN.py``; every ``check_*`` they define is exported
here, so adding a section needs no edit of this file.
"""
import importlib
import pkgutil
import re

from .core import CheckError, install_notebook_hooks, mine_or_reference

__all__ = ["CheckError", "mine_or_reference"]

for _module in sorted(m.name for m in pkgutil.iter_modules(__path__) if re.fullmatch(r"s\d\d", m.name)):
    _checks = {name: value for name, value in vars(importlib.import_module(f".{_module}", __name__)).items()
               if name.startswith("check_") and callable(value)}
    globals().update(_checks)
    __all__ += sorted(_checks)

install_notebook_hooks()
