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


def expect(got, want: torch.Tensor, what: str, misconceptions: Sequence[tuple[str, object]] = (),
           atol: float = 1e-5, rtol: float = 1e-4, inputs: dict | None = None) -> None:
    """Pass if ``got`` equals ``want``; otherwise name the misconception whose output it equals.

    ``misconceptions`` pairs a code with the tensor that misconception would produce on the
    same input (or a zero-argument callable computing it, evaluated only when needed).
    ``inputs`` (name -> what the check passed): shown in hint 3 of a plain [wrong], so the learner can
    rerun the very case.
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
    given = "；".join(shown_input(name, value, worst, tuple(want.shape)) for name, value in (inputs or {}).items())
    rerun = (f"检查给的输入：{given}。用这组输入调用你的函数" if given
             else "按上面那句说的情形（形状、参数）造一个输入，调用你的函数")
    raise CheckError("wrong", joined(what, f"数值不对：在下标 {worst} 处应为 {want[worst].item():.5g}，"
                                           f"实际是 {got[worst].item():.5g}（最大误差 {diff.max().item():.3g}）。"),
                     step=f"先只看这一个位置：下标 {worst} 处应为 {want[worst].item():.5g}，你的是 "
                          f"{got[worst].item():.5g}。{rerun}，逐行打印中间结果，对照练习前面的公式，"
                          "找出第一处与公式不同的那一步。")


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
