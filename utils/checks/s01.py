"""Checks of section 01_qkv_and_scores: project_qkv and attention_scores."""
from __future__ import annotations

import math

import torch

from .compare import expect, randn, type_name
from .core import CheckError, check
from .oracle import instructor_only, oracle
from .protocol import CANDIDATE, Call

# (batch dims, T, C, D): D != C so that a transposed weight cannot pass, and batch dims vary.
PROJECTION_CASES = [((1,), 4, 6, 6), ((2,), 5, 8, 4), ((3, 2), 3, 5, 7)]
# transpose(1, 2), transpose(0, 1), permute(0, 2, 1): right for one number of dims only
FIXED_TRANSPOSE = r"transpose\(\s*[0-9]\s*,\s*[0-9]\s*\)|permute\(\s*0\s*,\s*2\s*,\s*1\s*\)"
# (batch dims, Tq, Tk, D): Tq != Tk so that K Qᵀ has a visibly different shape.
SCORE_CASES = [((), 4, 6, 8), ((2,), 5, 5, 3), ((2, 3), 3, 7, 4)]


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
    for i, (batch, T, C, D) in enumerate(cases):
        x = randn(*batch, T, C, seed=seed + 10 * i)
        w_q, w_k, w_v = (randn(C, D, seed=seed + 10 * i + j) for j in (1, 2, 3))
        result = yield Call(CANDIDATE, (x, w_q, w_k, w_v), pure=True,
                            hints={"weights-transposed": r"\.T\b|\.mT\b|\.t\(\)|F\.linear|transpose"})
        q, k, v = _as_triple(result, "project_qkv")
        outs = projections(x, w_q, w_k, w_v)
        for name, got in zip("qkv", (q, k, v)):
            wrong = [("weights-transposed", w) for w in outs["transposed"]]
            wrong += [("qkv-mixed-up", other) for other_name, other in outs["want"].items() if other_name != name]
            expect(got, outs["want"][name], f"x 形状 {tuple(x.shape)}、W 形状 {(C, D)} 时返回的 {name}", wrong,
                   inputs={"x": x, "W_q": w_q, "W_k": w_k, "W_v": w_v})


@oracle
def scores(q, k) -> dict:
    """q kᵀ, and what each misconception computes instead (None where it cannot even be built)."""
    q, k = q.double(), k.double()
    want = q @ k.transpose(-2, -1)                                                  # (..., Tq, Tk)
    return {"want": want, "qk-swapped": k @ q.transpose(-2, -1), "unexpected-scale": want / math.sqrt(q.size(-1)),
            "transpose-all-dims": _matmul_full_transpose(q, k), "transpose-fixed-dims": _matmul_fixed_transpose(q, k)}


@check("attention_scores")
def check_attention_scores(extended: bool = False, seed: int = 0):
    cases = SCORE_CASES + (hidden_score_cases() if extended else [])
    for i, (batch, Tq, Tk, D) in enumerate(cases):
        q = randn(*batch, Tq, D, seed=seed + 10 * i)
        k = randn(*batch, Tk, D, seed=seed + 10 * i + 1)
        got = yield Call(CANDIDATE, (q, k), pure=True,
                         hints={"transpose-all-dims": r"\.T\b|\.t\(\)", "transpose-fixed-dims": FIXED_TRANSPOSE})
        outs = scores(q, k)
        want = outs.pop("want")
        expect(got, want, f"q 形状 {tuple(q.shape)}、k 形状 {tuple(k.shape)} 时的分数", list(outs.items()),
               inputs={"q": q, "k": k})


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
