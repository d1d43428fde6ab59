"""Counts (ints) judged over all of a check's cases together, as compare.Cases judges tensors: a misconception is
named only when it explains every count and gives two of them on cases that tell it from the right count
(compare.confirmed); else the first wrong count is reported as it came back. A count is one number: another
mistake can give a known one's number on one case by accident."""
from __future__ import annotations

import torch

from .compare import Seen, confirmed
from .errors import CheckError


def _exact(n) -> torch.Tensor:
    """A count as a float64 scalar: exact for every integer below 2⁵³, compared with no tolerance."""
    return torch.tensor(float(n), dtype=torch.float64)


class Counts:
    """A check's counts, collected and judged at the end (:meth:`decide`)."""

    def __init__(self):
        self.seen: list[Seen] = []
        self.lines: list[str] = []     # per case: what came back and what was due, as a finding says it
        self.steps: list[str] = []     # per case: hint 3 ("" keeps the code's own)
        self.got: list = []            # per case: the count as it came back (an int, or a float)

    def add(self, what: str, got, want: int, wrong=(), line: str = "", step: str = "") -> bool:
        """Collect one count: ``wrong`` pairs a code with what that misconception counts here; ``line`` says what
        came back and what was due (default "<what> 返回 <got>，应为 <want>"). Whether the count is right."""
        case = Seen(what, _exact(got), _exact(want), [(code, _exact(n)) for code, n in wrong], atol=0.0, rtol=0.0)
        self.seen.append(case)
        self.lines.append(line or f"{what} 返回 {got}，应为 {want}")
        self.steps.append(step)
        self.got.append(got)
        return case.right()

    def decide(self, before_plain=None) -> None:
        """Nothing when every count is right; else the confirmed misconception, named with the two cases that show
        it; else a plain [wrong] on the first wrong count (``before_plain(got, what)`` may raise a finding of its
        own first, such as a float where an int is due)."""
        wrong = [i for i, case in enumerate(self.seen) if not case.right()]
        if not wrong:
            return
        code = confirmed(self.seen)
        if code is not None:
            told = [i for i, case in enumerate(self.seen) if case.tells(code)][:2]
            raise CheckError(code, "；".join(self.lines[i] for i in told) + "。两处都正好是下面这个误区算出的结果。",
                             step=self.steps[told[0]])
        first = wrong[0]
        if before_plain is not None:
            before_plain(self.got[first], self.seen[first].what)
        raise CheckError("wrong", self.lines[first] + "。", step=self.steps[first])
