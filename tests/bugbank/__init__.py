"""The bug bank: known-wrong and known-right implementations of every graded exercise.

Each :class:`Variant` is the full source of one solution cell, written the way a learner
might write it. A wrong variant names the code its check must report; a right one (code
``None``) must pass. tests/test_bugbank.py runs every one through the check functions (the notebook's
run and the judge's); tests/test_grading.py grades a fixed sample of each exercise through a real nbgrader
autograde.
"""
from __future__ import annotations

import importlib
import linecache
import pkgutil
import re
import textwrap
from dataclasses import dataclass


@dataclass(frozen=True)
class Variant:
    exercise: str          # the graded name the source defines
    label: str             # what this variant does, for test ids
    expected: str | None   # the check code it must fail with; None = must pass
    source: str
    fits_visible: bool = False  # wrong, but passes the visible cases: only the hidden tests catch it

    @property
    def id(self) -> str:
        return f"{self.exercise}-{self.label}"


def wrong(exercise: str, label: str, expected: str, source: str) -> Variant:
    return Variant(exercise, label, expected, textwrap.dedent(source).strip("\n"))


def fits_visible(exercise: str, label: str, expected: str, source: str) -> Variant:
    """Wrong in a way the visible check's cases do not reach; the hidden tests must catch it."""
    return Variant(exercise, label, expected, textwrap.dedent(source).strip("\n"), fits_visible=True)


def right(exercise: str, label: str, source: str) -> Variant:
    return Variant(exercise, label, None, textwrap.dedent(source).strip("\n"))


PRELUDE = "import math\nimport torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n"


def load(variant: Variant):
    """Execute the variant's source and return the object it defines."""
    namespace: dict = {}
    source = PRELUDE + variant.source
    filename = f"<bugbank {variant.id}>"
    # Register the source the way IPython does for a cell, so inspect.getsource works.
    linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)
    exec(compile(source, filename, "exec"), namespace)
    return namespace[variant.exercise]


def _section_modules():
    """tests/bugbank/sNN.py, in section order."""
    names = sorted(m.name for m in pkgutil.iter_modules(__path__) if re.fullmatch(r"s\d\d", m.name))
    return [importlib.import_module(f".{name}", __name__) for name in names]


def all_variants() -> list[Variant]:
    return [v for module in _section_modules() for v in module.VARIANTS]


def dependencies() -> dict[str, tuple[str, ...]]:
    """exercise -> the exercises of the same notebook its solution calls (a module's DEPENDS).

    In a learner's notebook such an exercise calls the learner's own version of what it
    depends on, so grading tests pair it with right variants of those."""
    return {e: d for module in _section_modules() for e, d in getattr(module, "DEPENDS", {}).items()}
