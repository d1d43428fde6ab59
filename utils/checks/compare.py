"""Comparisons every check uses: the candidate's output against the reference, and against the
output each known misconception gives on the same input. A check collects every case (:class:`Cases`) and
decides at the end: a misconception is named only when it explains every output and shows on two cases.
They run where the verdict is made: in the learner's process in the notebook, in the judge in grading.
"""
from __future__ import annotations

import math
import unicodedata
from collections.abc import Sequence

import torch

from .errors import CheckError
from .keys import recipe
from .protocol import CANDIDATE, Call, Handle


def joined(subject: str, rest: str) -> str:
    """``subject`` then ``rest``: Chinese runs on without a space, ASCII keeps one ("q 数值不对").

    A wide (CJK) last character of ``subject`` takes no space: "时的输出数值不对", "（B, T）的形状".
    """
    wide = bool(subject) and unicodedata.east_asian_width(subject[-1]) in "WF"
    return f"{subject}{rest}" if wide else f"{subject} {rest}"


def type_name(value) -> str:
    """The type of a value that came back: a handle's type in the kernel, or the data's own."""
    return value.type if isinstance(value, Handle) else type(value).__name__


def close(got, want, atol: float = 1e-5, rtol: float = 1e-4) -> bool:
    """Same shape and values equal within tolerance (NaN matches NaN: a misconception's
    output may well contain NaN where the candidate's does too)."""
    if not isinstance(got, torch.Tensor) or not isinstance(want, torch.Tensor) or got.shape != want.shape:
        return False
    return bool(torch.allclose(got.detach().double(), want.detach().double(), atol=atol, rtol=rtol,
                               equal_nan=True))


def require_tensor(got, what: str) -> torch.Tensor:
    if not isinstance(got, torch.Tensor):
        raise CheckError("wrong-type", joined(what, f"应该是 torch.Tensor，实际得到 {type_name(got)}。"))
    return got


SMALL, SLICE = 24, 64   # hint 3 shows an input of at most SMALL numbers whole; a larger one, a slice of at most SLICE


def _numbers(t: torch.Tensor) -> str:
    """A tensor's values, four significant digits, nested like the tensor."""
    values = t.detach().double().tolist() if t.is_floating_point() else t.detach().tolist()

    def show(v):
        return "[" + ", ".join(show(x) for x in v) + "]" if isinstance(v, list) else (
            f"{v:.4g}" if isinstance(v, float) else str(v))
    return show(values)


def shown_input(name: str, t: torch.Tensor, worst: tuple[int, ...], out_shape: tuple[int, ...]) -> str:
    """An input of the check as hint 3 shows it: whole when small; else its shape and the slice that the wrong
    output position reads: the leading indices it shares with the output, then rows, until the slice is small."""
    if not isinstance(t, torch.Tensor):
        return f"{name} = {t!r}"
    if t.numel() <= SMALL:
        return f"{name} = {_numbers(t)}"
    index: list[int] = []
    part = t
    for k, i in enumerate(worst):
        if part.numel() <= SMALL or part.dim() <= 1 or k >= len(out_shape) or part.size(0) != out_shape[k]:
            break
        index.append(i)
        part = part[i]
    if part.numel() > SLICE:
        return f"{name} 形状 {tuple(t.shape)}（太大，不全部列出）"
    where = "".join(f"[{i}]" for i in index)
    return f"{name} 形状 {tuple(t.shape)}，其中 {name}{where} = {_numbers(part)}"


def _where(got: torch.Tensor, want: torch.Tensor) -> tuple[int, ...]:
    """The index where ``got`` is furthest from ``want`` (same shapes; () for a 0-dim tensor)."""
    diff = (got.detach().double() - want.double()).abs()
    return tuple(int(i) for i in torch.unravel_index(diff.nan_to_num(math.inf).argmax(), diff.shape))


class Seen:
    """One case as a check saw it: what it was (``what``, Chinese: the input, so that a message can say where),
    the candidate's output ``got``, the right output ``want``, and ``wrong``: (code, output) for each known
    misconception on the same input — an output may be a zero-argument callable (computed only when a case went
    wrong) or None (the misconception has no output here). ``inputs`` (name -> what the check passed) are shown in
    hint 3 of a plain [wrong], so that the learner can rerun the very case."""

    def __init__(self, what: str, got, want: torch.Tensor, wrong=(), atol: float = 1e-5, rtol: float = 1e-4,
                 inputs: dict | None = None):
        self.what, self.got, self.want, self.atol, self.rtol = what, got, want, atol, rtol
        self.inputs = inputs or {}
        self._wrong, self._outputs = list(wrong), None

    @property
    def wrong(self) -> list[tuple[str, torch.Tensor]]:
        """(code, output) of every misconception that has an output on this case."""
        if self._outputs is None:
            pairs = ((code, out() if callable(out) else out) for code, out in self._wrong)
            self._outputs = [(code, out) for code, out in pairs if out is not None]
        return self._outputs

    def close(self, a, b) -> bool:
        return close(a, b, self.atol, self.rtol)

    def right(self) -> bool:
        return self.close(self.got, self.want)

    def shows(self, code: str) -> bool:
        """The candidate's output is one of ``code``'s outputs on this case."""
        return any(c == code and self.close(self.got, out) for c, out in self.wrong)

    def fits(self, code: str) -> bool:
        """The candidate's output agrees with ``code`` here: it is one of that misconception's outputs, or it is
        right where the misconception has none (no mask: nothing to reverse)."""
        return self.shows(code) or (self.right() and all(c != code for c, _ in self.wrong))

    def tells(self, code: str) -> bool:
        """This case tells ``code`` from the right answer: the candidate's output is one of that misconception's
        outputs here, and not the right one (a misconception of several forms may have one that is right here)."""
        return self.shows(code) and not self.right()

    def line(self) -> str:
        """What the candidate gave on this case where it is furthest from the right output, and what it should be."""
        got, want = self.got, self.want
        if got.shape != want.shape:
            return joined(self.what, f"的输出形状应为 {tuple(want.shape)}，实际是 {tuple(got.shape)}")
        at = _where(got, want)
        place = f"下标 {at} 处" if at else ""
        return f"{self.what}：{place}应为 {want[at].item():.4g}，实际是 {got[at].item():.4g}"


def confirmed(seen: Sequence[Seen]) -> str | None:
    """The misconception the candidate's output agrees with on every case and shows on two cases that tell it from
    the right answer; None when no known misconception explains every output. A mistake that happens to give a
    known one's numbers on one designed input is not taken for it."""
    codes = dict.fromkeys(code for case in seen for code, _ in case.wrong)
    for code in codes:
        if all(case.fits(code) for case in seen) and sum(case.tells(code) for case in seen) >= 2:
            return code
    return None


def rerun_step(case: Seen, at: tuple[int, ...]) -> str:
    """Hint 3 of a plain [wrong]: the one wrong position, and the case's input to rerun it on."""
    given = "；".join(shown_input(name, value, at, tuple(case.want.shape)) for name, value in case.inputs.items())
    rerun = (f"检查给的输入：{given}。用这组输入调用你的函数" if given
             else "按上面那句说的情形（形状、参数）造一个输入，调用你的函数")
    place = f"下标 {at} 处" if at else ""
    return (f"先只看这一个位置：{place}应为 {case.want[at].item():.5g}，你的是 {case.got[at].item():.5g}。"
            f"{rerun}，逐行打印中间结果，对照练习前面的公式，找出第一处与公式不同的那一步。")


def plain_finding(case: Seen) -> CheckError:
    """The finding on a wrong case that no known misconception explains: its shape, a NaN, or its worst position
    (hint 3: that position and the case's input, :func:`rerun_step`)."""
    got, want = require_tensor(case.got, case.what), case.want
    if got.shape != want.shape:
        return CheckError("wrong-shape",
                          joined(case.what, f"的形状应为 {tuple(want.shape)}，实际是 {tuple(got.shape)}。"))
    if not torch.isfinite(got).all() and torch.isfinite(want).all():
        return CheckError("nan-output", joined(case.what, "含有 NaN/inf（参考结果全是有限值）。"))
    at = _where(got, want)
    worst = (got.detach().double() - want.double()).abs().max().item()
    place = f"在下标 {at} 处" if at else ""
    return CheckError("wrong", joined(case.what, f"数值不对：{place}应为 {want[at].item():.5g}，"
                                                f"实际是 {got[at].item():.5g}（最大误差 {worst:.3g}）。"),
                      step=rerun_step(case, at))


def decide(seen: Sequence[Seen], step_of=None) -> None:
    """The verdict on every case a check collected (nothing when every output is right): a confirmed misconception,
    named with the two cases that show it; else the plain finding on the first case that went wrong.
    ``step_of(code)``, if given, is hint 3 ("" keeps the code's own hint 3, or for a plain finding the input)."""
    wrong = [case for case in seen if not case.right()]
    if not wrong:
        return
    code = confirmed(seen)
    if code is not None:
        told = [case for case in seen if case.tells(code)][:2]
        raise CheckError(code, "；".join(case.line() for case in told) + "。两处都正好是下面这个误区算出的结果。",
                         step=step_of(code) if step_of else "")
    err = plain_finding(wrong[0])
    if step_of:
        err.step = step_of(err.code) or err.step
    raise err


def _asked(call):
    return (yield call)


class Cases:
    """A check's cases, collected as they come back and judged together at the end (:func:`decide`)::

        cases = Cases()
        for x in inputs:
            got = yield from cases.call(Call(CANDIDATE, (x,), pure=True))
            cases.add(f"x 形状 {tuple(x.shape)}", got, oracle(x), [("scale-by-D", lambda: by_d(x))], inputs={"x": x})
        cases.decide()
    """

    def __init__(self):
        self.seen: list[Seen] = []

    def call(self, call):
        """(yields) ``call``'s answer. A call that fails (crash, modified input, not implemented) after an earlier
        case came back wrong gives that earlier case's verdict instead: the first mistake is the one to show."""
        return (yield from self.run(_asked(call)))

    def run(self, steps):
        """(yields) ``yield from steps`` (several calls: build a module, load it, call it), a failure judged as in
        :meth:`call`."""
        try:
            return (yield from steps)
        except CheckError:
            if any(not case.right() for case in self.seen):
                self.decide()
            raise

    def add(self, what: str, got, want: torch.Tensor, wrong=(), atol: float = 1e-5, rtol: float = 1e-4,
            inputs: dict | None = None) -> Seen:
        """Collect one case (see :class:`Seen`); a candidate's output that is not a tensor fails at once."""
        case = Seen(what, require_tensor(got, joined(what, "的返回值")), want, wrong, atol, rtol, inputs)
        self.seen.append(case)
        return case

    def decide(self, step_of=None) -> None:
        decide(self.seen, step_of)


def expect(got, want: torch.Tensor, what: str, misconceptions: Sequence[tuple[str, object]] = (),
           atol: float = 1e-5, rtol: float = 1e-4, inputs: dict | None = None) -> None:
    """One value judged alone: pass if ``got`` equals ``want``, else name the misconception whose output it equals
    (on this one case: only where a check has a single value to judge — with several cases, collect them in
    :class:`Cases` so that a code is confirmed on two), else the plain finding (:func:`plain_finding`)."""
    case = Seen(what, got, want, misconceptions, atol, rtol, inputs)
    if case.right():
        return
    for code, _ in case.wrong:
        if case.shows(code):
            raise CheckError(code, f"{what}，与下面这个误区算出的结果完全一致。")
    raise plain_finding(case)


@recipe
def randn(*shape: int, seed: int, scale: float = 1.0, shift: float = 0.0, dtype=torch.float32,
          cast: torch.dtype | None = None) -> torch.Tensor:
    """A seeded N(shift, scale²) input of a check (drawn in ``dtype``, then cast to ``cast`` if given), keyed by
    this call in the stored results (keys.recipe)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(*shape, generator=g, dtype=dtype) * scale + shift
    return x if cast is None else x.to(cast)


@recipe
def places(*shape: int, offset: int = 0) -> torch.Tensor:
    """0, 1, 2, … in row-major order plus ``offset``, in float32: every value names its place (exact below 2²⁴)."""
    return torch.arange(math.prod(shape), dtype=torch.float32).reshape(shape) + offset


def quiz_answers(name: str, keys: Sequence[str]):
    """(yields the call) The dict a ``quiz_*()`` returns, with every key of ``keys`` present."""
    answers = yield Call(CANDIDATE)
    if not isinstance(answers, dict):
        raise CheckError("wrong-type", f"{name}() 应返回 dict，实际得到 {type_name(answers)}。")
    missing = [key for key in keys if key not in answers]
    if missing:
        raise CheckError("quiz-missing-key", f"答案里没有键 {missing[0]!r}（需要 {', '.join(keys)}）。")
    return answers
