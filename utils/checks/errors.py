"""A failed check: its Chinese error with a stable ``[code]``, the likely misconception and a ladder of
hints (utils/checks/codes.py holds their texts). Its own module, imported by every part of the checks
that raises one, so that none of them imports the machinery that runs checks (core.py)."""
from __future__ import annotations

from .codes import describe, failure_lines

# Marks that every machine draws: DejaVu Sans / Sans Mono have them (✅ / ❌ need a colour-emoji font).
PASS_MARK, FAIL_MARK = "✓", "✗"


class CheckError(AssertionError):
    """A failed check: ``[code] finding``, the likely misconception and hints up to ``level``.

    In Jupyter it renders as a few short lines (no traceback wall) via IPython's
    ``_render_traceback_`` hook; anywhere else ``str(err)`` starts with ``[code]``. ``step``, when a
    check gives it, is hint 3 computed on the check's own input (a shape, a number); ``where``, hint 2 for
    this exercise in place of the code's own (an untouched stub: where this exercise was taught)."""

    def __init__(self, code: str, finding: str, step: str = "", error: str = "", where: str = ""):
        self.code, self.finding, self.step, self.where = code, finding, step, where
        self.error = error       # for [crashed]: the type of the exception the learner's code raised
        self.entry = describe(code)
        self.misconception = self.entry.misconception
        self.level = 1
        self.next_call = ""      # how to ask for the next hint, set by the check's wrapper
        super().__init__(f"[{code}] {finding}")

    def hints(self) -> list[str]:
        """The hints up to this error's level: the idea, where it was taught, a first step."""
        ladder = [self.entry.idea, self.where or self.entry.where, self.step or self.entry.step]
        return [hint for hint in ladder[:self.level] if hint]

    def lines(self) -> list[str]:
        return failure_lines(self.code, self.finding, self.misconception, self.hints(), self.next_call)

    def __str__(self) -> str:
        return "\n".join(self.lines())

    def _render_traceback_(self) -> list[str]:
        first, *rest = self.lines()
        return [f"\x1b[31m{FAIL_MARK} {first}\x1b[0m", *(f"   {line}" for line in rest)]
