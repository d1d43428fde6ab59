"""Checks of section 00_start_here.

The quiz's truth is instructor-only data; the check compares the learner's shapes with salted
digests of it and of each known wrong answer (utils/checks/oracle.py)."""
from __future__ import annotations

import torch

from .compare import quiz_answers
from .core import CheckError, check
from .oracle import answer_key, instructor_only, matches, oracle

# The quiz's setting (stated in its docstring): X is [B, T, C], the projections are [C, D].
QUIZ_DIMS = {"B": 2, "T": 5, "C": 8, "D": 4}
QUIZ_KEYS = ("Q", "K", "V", "scores", "weights", "out")


@instructor_only
def quiz_truth() -> dict[str, tuple[int, ...]]:
    """The quiz's shapes for QUIZ_DIMS (the bug bank's right variant measured with torch agrees)."""
    return {"Q": (2, 5, 4), "K": (2, 5, 4), "V": (2, 5, 4), "scores": (2, 5, 5), "weights": (2, 5, 5),
            "out": (2, 5, 4)}


@oracle
def quiz_keys(dims: dict[str, int]) -> dict[str, dict[str, list[str]]]:
    """Per quiz key: the digests of the truth ("want") and of each known wrong answer, by its code."""
    truth = quiz_truth()
    B, T, C, D = (dims[name] for name in "BTCD")
    wrong = {key: {"quiz-projection-shape": (B, T, C)} for key in ("Q", "K", "V")}
    wrong |= {key: {"quiz-scores-shape": (B, T, D)} for key in ("scores", "weights")}
    wrong["out"] = {"quiz-out-width": (B, T, C), "quiz-out-is-weights": (B, T, T)}
    return {key: {"want": answer_key(truth[key])}
            | {code: answer_key(shape) for code, shape in wrong[key].items()}
            | {"quiz-batch-dropped": answer_key(truth[key][1:])}
            for key in QUIZ_KEYS}


def _as_shape(value) -> tuple[int, ...] | None:
    if isinstance(value, torch.Size):
        return tuple(value)
    if isinstance(value, (tuple, list)) and all(isinstance(v, int) for v in value):
        return tuple(value)
    return None


@check("tensor_shape_quiz")
def check_tensor_shape_quiz(extended: bool = False, seed: int = 0):
    """The quiz has one set of answers, so nothing is random: ``extended`` and ``seed`` change
    nothing (they are accepted so that every check is called the same way)."""
    del extended, seed
    answers = yield from quiz_answers("tensor_shape_quiz", QUIZ_KEYS)
    keys = quiz_keys(QUIZ_DIMS)
    for key in QUIZ_KEYS:
        shape = _as_shape(answers[key])
        if shape is None:
            raise CheckError("wrong-type",
                             f"{key} 的答案应是由整数组成的元组，例如 (2, 5, 4)，实际是 {answers[key]!r}。")
        digests = dict(keys[key])
        if matches(shape, digests.pop("want")):
            continue
        for code, key_of_wrong in digests.items():
            if matches(shape, key_of_wrong):
                hint = "：少了一维" if code == "quiz-batch-dropped" else ""
                raise CheckError(code, f"{key} 的形状不是 {shape}{hint}。")
        raise CheckError("wrong", f"{key} 的形状不是 {shape}：回到上面的形状追踪表再推一遍。")
