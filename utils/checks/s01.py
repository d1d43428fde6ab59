"""Checks of section 01_qkv_and_scores: project_qkv and attention_scores."""
from __future__ import annotations

import math

import torch

from .compare import Cases, randn, type_name
from .core import CheckError, check
from .oracle import instructor_only, oracle
from .protocol import CANDIDATE, Call

# (batch dims, T, C, D): batch dims vary; the first two are square (C == D), where a transposed weight still
# runs and its outputs show it on two inputs, before the third (D != C) crashes it.
PROJECTION_CASES = [((1,), 4, 6, 6), ((3, 2), 3, 5, 5), ((2,), 5, 8, 4)]
# transpose(1, 2), transpose(0, 1), permute(0, 2, 1): right for one number of dims only
FIXED_TRANSPOSE = r"transpose\(\s*[0-9]\s*,\s*[0-9]\s*\)|permute\(\s*0\s*,\s*2\s*,\s*1\s*\)"
# (batch dims, Tq, Tk, D): Tq != Tk so that K Qᵀ has a visibly different shape; the last is a single sequence
# (leading dim 1), the most common real input.
SCORE_CASES = [((), 4, 6, 8), ((2,), 5, 5, 3), ((2, 3), 3, 7, 4), ((1, 2), 6, 4, 5)]


@instructor_only
def hidden_projection_cases():
    return [((), 7, 12, 3), ((4,), 1, 16, 16), ((2, 3), 6, 9, 2)]


@instructor_only
def hidden_score_cases():
    return [((), 9, 2, 16), ((5,), 1, 1, 1), ((2, 1), 6, 6, 64)]


def _as_triple(result, what: str):
    if not isinstance(result, (tuple, list)) or len(result) != 3:
        raise CheckError("wrong-type", f"{what} 应返回三元组 (q, k, v)，实际得到 {type_name(result)}。")
    return result


@oracle
def projections(x, w_q, w_k, w_v) -> dict:
    """q, k, v as the seed's math defines them, and what a transposed weight gives (only where C == D)."""
    x, ws = x.double(), [w.double() for w in (w_q, w_k, w_v)]
    return {"want": {name: x @ w for name, w in zip("qkv", ws)},                   # (..., T, D) each
            "transposed": [x @ w.mT for w in ws] if x.size(-1) == ws[0].size(-1) else []}


@check("project_qkv")
def check_project_qkv(extended: bool = False, seed: int = 0):
    cases = PROJECTION_CASES + (hidden_projection_cases() if extended else [])
    by_output = {name: Cases() for name in "qkv"}      # q, k, v each judged over the inputs (one call: one case each)
    for i, (batch, T, C, D) in enumerate(cases):
        x = randn(*batch, T, C, seed=seed + 10 * i)
        w_q, w_k, w_v = (randn(C, D, seed=seed + 10 * i + j) for j in (1, 2, 3))
        result = yield from _after_earlier_cases(Call(CANDIDATE, (x, w_q, w_k, w_v), pure=True, hints={
            "weights-transposed": r"\.T\b|\.mT\b|\.t\(\)|F\.linear|transpose"}), by_output)
        q, k, v = _as_triple(result, "project_qkv")
        outs = projections(x, w_q, w_k, w_v)
        for name, got in zip("qkv", (q, k, v)):
            wrong = [("weights-transposed", w) for w in outs["transposed"]]
            wrong += [("qkv-mixed-up", other) for other_name, other in outs["want"].items() if other_name != name]
            by_output[name].add(f"x 形状 {tuple(x.shape)}、W 形状 {(C, D)} 时返回的 {name}", got, outs["want"][name],
                                wrong, inputs={"x": x, "W_q": w_q, "W_k": w_k, "W_v": w_v})
    for judged in by_output.values():
        judged.decide()


def _after_earlier_cases(call: Call, by_output: dict):
    """(yields) ``call``, as Cases.call for the three outputs: if it fails after an earlier input came back
    wrong, the verdict on q, k or v of the inputs so far is shown instead (the first mistake is the one to show)."""
    try:
        return (yield call)
    except CheckError:
        for judged in by_output.values():
            judged.decide()
        raise


@oracle
def scores(q, k) -> dict:
    """q kᵀ, and what each misconception computes instead (None where it cannot even be built)."""
    q, k = q.double(), k.double()
    want = q @ k.transpose(-2, -1)                                                  # (..., Tq, Tk)
    return {"want": want, "qk-swapped": k @ q.transpose(-2, -1), "unexpected-scale": want / math.sqrt(q.size(-1)),
            "transpose-all-dims": _matmul_full_transpose(q, k), "transpose-fixed-dims": _matmul_fixed_transpose(q, k)}


@check("attention_scores")
def check_attention_scores(extended: bool = False, seed: int = 0):
    judged = Cases()
    for i, (batch, Tq, Tk, D) in enumerate(SCORE_CASES + (hidden_score_cases() if extended else [])):
        q = randn(*batch, Tq, D, seed=seed + 10 * i)
        k = randn(*batch, Tk, D, seed=seed + 10 * i + 1)
        got = yield from judged.call(Call(CANDIDATE, (q, k), pure=True, hints={
            "transpose-all-dims": r"\.T\b|\.t\(\)", "transpose-fixed-dims": FIXED_TRANSPOSE}))
        outs = scores(q, k)
        want = outs.pop("want")
        judged.add(f"q 形状 {tuple(q.shape)}、k 形状 {tuple(k.shape)} 时的分数", got, want, list(outs.items()),
                   inputs={"q": q, "k": k})
    judged.decide()


@oracle
def _matmul_full_transpose(q: torch.Tensor, k: torch.Tensor):
    """What ``q @ k.T`` computes when k has batch dims (k.T reverses every dim)."""
    try:
        return q @ k.permute(*reversed(range(k.dim())))
    except RuntimeError:
        return None


@oracle
def _matmul_fixed_transpose(q: torch.Tensor, k: torch.Tensor):
    """What ``q @ k.transpose(1, 2)`` computes when that is not the last two dims (4-dim k)."""
    try:
        return None if k.dim() == 3 else q @ k.transpose(1, 2)
    except (RuntimeError, IndexError):
        return None
