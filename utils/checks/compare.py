"""Comparisons every check uses: the candidate's output against the reference, and against the
output each known misconception gives on the same input (the first that matches is the diagnosis).
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


def expect(got, want: torch.Tensor, what: str, misconceptions: Sequence[tuple[str, object]] = (),
           atol: float = 1e-5, rtol: float = 1e-4) -> None:
    """Pass if ``got`` equals ``want``; otherwise name the misconception whose output it equals.

    ``misconceptions`` pairs a code with the tensor that misconception would produce on the
    same input (or a zero-argument callable computing it, evaluated only when needed).
    """
    if close(got, want, atol, rtol):
        return
    for code, wrong in misconceptions:
        wrong = wrong() if callable(wrong) else wrong
        if wrong is not None and close(got, wrong, atol, rtol):
            raise CheckError(code, f"{what}，与下面这个误区算出的结果完全一致。")
    got = require_tensor(got, what)
    if got.shape != want.shape:
        raise CheckError("wrong-shape", joined(what, f"的形状应为 {tuple(want.shape)}，实际是 {tuple(got.shape)}。"))
    if not torch.isfinite(got).all() and torch.isfinite(want).all():
        raise CheckError("nan-output", joined(what, "含有 NaN/inf（参考结果全是有限值）。"))
    diff = (got.detach().double() - want.double()).abs()
    worst = tuple(int(i) for i in torch.unravel_index(diff.argmax(), diff.shape))
    raise CheckError("wrong", joined(what, f"数值不对：在下标 {worst} 处应为 {want[worst].item():.5g}，"
                                           f"实际是 {got[worst].item():.5g}（最大误差 {diff.max().item():.3g}）。"),
                     step=f"先只看这一个位置：下标 {worst} 处应为 {want[worst].item():.5g}。"
                          "用同样的输入把你的函数一步步算到这里，对照每一步的形状和数值。")


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
