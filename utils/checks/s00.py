"""Checks of section 00_start_here."""
from __future__ import annotations

import torch

from .core import CheckError, check, quiz_answers

# The quiz of the warm-up: X is [B, T, C] = [2, 5, 8], the projections are [C, D] = [8, 4].
QUIZ_DIMS = {"B": 2, "T": 5, "C": 8, "D": 4}
QUIZ_KEYS = ("Q", "K", "V", "scores", "weights", "out")


def head_shapes(B: int, T: int, C: int, D: int) -> dict[str, tuple[int, ...]]:
    """Shapes of one attention head, measured by running the computation on zeros (not typed in)."""
    x = torch.zeros(B, T, C)                   # (B, T, C)
    w_q = w_k = w_v = torch.zeros(C, D)        # (C, D)
    q, k, v = x @ w_q, x @ w_k, x @ w_v        # (B, T, D) each
    scores = q @ k.transpose(-2, -1)           # (B, T, D) @ (B, D, T) -> (B, T, T)
    weights = torch.softmax(scores, dim=-1)    # (B, T, T)
    out = weights @ v                          # (B, T, T) @ (B, T, D) -> (B, T, D)
    return {"X": tuple(x.shape), "Q": tuple(q.shape), "K": tuple(k.shape), "V": tuple(v.shape),
            "scores": tuple(scores.shape), "weights": tuple(weights.shape), "out": tuple(out.shape)}


def _as_shape(value) -> tuple[int, ...] | None:
    if isinstance(value, torch.Size):
        return tuple(value)
    if isinstance(value, (tuple, list)) and all(isinstance(v, int) for v in value):
        return tuple(value)
    return None


@check("tensor_shape_quiz")
def check_tensor_shape_quiz(candidate, extended: bool = False, seed: int = 0) -> None:
    """The quiz has one set of answers, so nothing is random: ``extended`` and ``seed`` change
    nothing (they are accepted so that every check is called the same way)."""
    del extended, seed
    answers = quiz_answers(candidate, "tensor_shape_quiz", QUIZ_KEYS)
    truth = head_shapes(**QUIZ_DIMS)
    B, T, C, D = (QUIZ_DIMS[k] for k in "BTCD")
    for key in QUIZ_KEYS:
        shape = _as_shape(answers[key])
        if shape is None:
            raise CheckError("wrong-type",
                             f"{key} 的答案应是由整数组成的元组，例如 (2, 5, 4)，实际是 {answers[key]!r}。")
        if shape == truth[key]:
            continue
        if key in ("Q", "K", "V") and shape == (B, T, C):
            raise CheckError("quiz-projection-shape", f"{key} 的形状不是 {shape}。")
        if key in ("scores", "weights") and shape == (B, T, D):
            raise CheckError("quiz-scores-shape", f"{key} 的形状不是 {shape}。")
        if key == "out" and shape == (B, T, C):
            raise CheckError("quiz-out-width", f"out 的形状不是 {shape}。")
        if key == "out" and shape == (B, T, T):
            raise CheckError("quiz-out-is-weights", f"out 的形状不是 {shape}。")
        if shape == truth[key][1:]:
            raise CheckError("quiz-batch-dropped", f"{key} 的形状不是 {shape}：少了一维。")
        raise CheckError("wrong", f"{key} 的形状不是 {shape}：回到上面的形状追踪表再推一遍。")
