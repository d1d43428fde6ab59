"""Checks of section 09_rope: rope_angles, apply_rope (rotate-half), apply_rope_interleaved
(RoFormer's layout) and the numeric self-test quiz_rope.

Every misconception is diagnosed by computing what it would output on the same input: the
other layout, the opposite rotation, a cos/sin table expanded the other layout's way, the
right pairs written back in the wrong order, exponent −i/d, positions from 1, …
"""
from __future__ import annotations

import math

import torch

from .core import CheckError, call, call_pure, check, expect, randn, require_tensor, quiz_answers

# --- the reference formulas (float64, so the checks' own rounding never matters) ------------


def _angles(T: int, head_dim: int, base: float, exponent=None, start: int = 0) -> torch.Tensor:
    """angle[m, i] = (m + start) · base^(exponent(i)), default exponent −2i/head_dim."""
    i = torch.arange(head_dim // 2, dtype=torch.float64)                    # (d/2,)
    power = -2 * i / head_dim if exponent is None else exponent(i)          # (d/2,)
    m = torch.arange(start, start + T, dtype=torch.float64)                 # (T,)
    return m[:, None] * base ** power[None, :]                              # (T, d/2)


def _rotate_pairs(x1, x2, angles):
    cos, sin = angles.cos(), angles.sin()                                   # (T, d/2)
    return x1 * cos - x2 * sin, x1 * sin + x2 * cos                         # (..., T, d/2) each


def _half(x, angles):
    """Rotate-half layout: pairs (i, i + d/2)."""
    h = x.size(-1) // 2
    y1, y2 = _rotate_pairs(x[..., :h], x[..., h:], angles)
    return torch.cat([y1, y2], dim=-1)                                      # (..., T, d)


def _interleaved(x, angles):
    """RoFormer layout: pairs (2i, 2i + 1)."""
    y1, y2 = _rotate_pairs(x[..., 0::2], x[..., 1::2], angles)
    return torch.stack([y1, y2], dim=-1).flatten(-2)                        # (..., T, d)


def _rotate_half(x):
    h = x.size(-1) // 2
    return torch.cat([-x[..., h:], x[..., :h]], dim=-1)


def _rotate_every_two(x):
    return torch.stack([-x[..., 1::2], x[..., 0::2]], dim=-1).flatten(-2)


def _half_with_interleaved_cache(x, angles):
    """rotate_half(x), but cos/sin expanded with repeat_interleave (the interleaved layout's way)."""
    full = angles.repeat_interleave(2, dim=-1)                              # (T, d)
    return x * full.cos() + _rotate_half(x) * full.sin()


def _interleaved_with_half_cache(x, angles):
    """rotate_every_two(x), but cos/sin expanded with cat (the rotate-half layout's way)."""
    full = torch.cat([angles, angles], dim=-1)                              # (T, d)
    return x * full.cos() + _rotate_every_two(x) * full.sin()


def _half_swapped_output(x, angles):
    h = x.size(-1) // 2
    y1, y2 = _rotate_pairs(x[..., :h], x[..., h:], angles)
    return torch.cat([y2, y1], dim=-1)


def _interleaved_as_halves(x, angles):
    y1, y2 = _rotate_pairs(x[..., 0::2], x[..., 1::2], angles)
    return torch.cat([y1, y2], dim=-1)


# --- rope_angles ----------------------------------------------------------------------------

ANGLE_CASES = [(6, 8, 10000.0), (5, 6, 100.0), (1, 4, 10000.0), (9, 16, 10000.0)]


def _angle_cases(extended: bool, seed: int) -> list[tuple[int, int, float]]:
    if not extended:
        return ANGLE_CASES
    g = torch.Generator().manual_seed(seed)
    T, half = (int(v) for v in torch.randint(2, 40, (2,), generator=g))
    base = [500000.0, 10.0, 1000.0][int(torch.randint(0, 3, (1,), generator=g))]
    return ANGLE_CASES + [(33, 64, 500000.0), (4, 2, 10000.0), (T, 2 * half, base)]


@check("rope_angles")
def check_rope_angles(candidate, extended: bool = False, seed: int = 0) -> None:
    for T, d, base in _angle_cases(extended, seed):
        got = call(candidate, T, d) if base == 10000.0 and T != 1 else call(candidate, T, d, base=base)
        got = require_tensor(got, f"rope_angles({T}, {d}, base={base:g})")
        want = _angles(T, d, base)
        what = f"rope_angles(T={T}, head_dim={d}, base={base:g})"
        if d > 2 and got.shape == (d // 2, T) and (d // 2 != T):
            raise CheckError("rope-angles-transposed", f"{what} 的形状是 {tuple(got.shape)}，应为 {(T, d // 2)}。")
        if got.shape == (T, d) and T > 1:
            first = got[..., : d // 2]
            if torch.allclose(first.double(), want, atol=1e-4, rtol=1e-4) or \
                    torch.allclose(got[..., 0::2].double(), want, atol=1e-4, rtol=1e-4):
                raise CheckError("rope-angles-full-width", f"{what} 的形状是 {tuple(got.shape)}，应为 {(T, d // 2)}。")
        theta = _angles(2, d, base)[1]                                      # (d/2,)
        expect(got, want, what, [
            ("rope-exponent-i-over-d", _angles(T, d, base, lambda i: -i / d)),
            ("rope-exponent-sign", _angles(T, d, base, lambda i: 2 * i / d)),
            ("rope-exponent-linspace", _angles(T, d, base, lambda i: -i / max(d // 2 - 1, 1))),
            ("rope-positions-from-one", _angles(T, d, base, start=1)),
            ("rope-base-ignored", _angles(T, d, 10000.0) if base != 10000.0 else None),
            ("rope-angles-transposed", want.T),
            ("rope-angles-no-position", theta.expand(T, -1)),
            ("rope-angles-no-position", theta)], atol=1e-5, rtol=1e-4)


# --- apply_rope / apply_rope_interleaved ----------------------------------------------------

# (leading dims, T, head_dim): several batch layouts, odd T, d/2 odd (d = 6), a single position.
ROPE_CASES = [((2, 3), 5, 8), ((2,), 7, 6), ((1, 2), 1, 4)]
ROPE_EXTENDED = [((), 9, 10), ((2, 1, 3), 4, 12), ((3,), 16, 2)]


def _rope_inputs(extended: bool, seed: int):
    """(x, angles, description): real RoPE angles, positions offset as with a KV cache, random angles."""
    cases = ROPE_CASES + (ROPE_EXTENDED if extended else [])
    for k, (lead, T, d) in enumerate(cases):
        x = randn(*lead, T, d, seed=seed + k)                                # (..., T, d)
        if k % 3 == 0:
            angles, how = _angles(T, d, 10000.0).float(), "rope_angles 的角度"
        elif k % 3 == 1:
            P = 3 + k
            angles, how = _angles(P + T, d, 100.0)[P:].float(), f"位置从 {P} 开始的角度（像接在 KV Cache 后面）"
        else:
            angles, how = randn(T, d // 2, seed=seed + 100 + k, scale=2.0), "随机角度"
        yield x, angles, f"x 形状 {tuple(x.shape)}、{how}"
    if extended:
        x = randn(2, 5, 8, seed=seed + 50, dtype=torch.float64)
        yield x, _angles(5, 8, 10.0), "float64 的 x 和角度"


def _pair_norms(x, layout: str):
    if layout == "half":
        h = x.size(-1) // 2
        return (x[..., :h] ** 2 + x[..., h:] ** 2).sqrt()
    return (x[..., 0::2] ** 2 + x[..., 1::2] ** 2).sqrt()


def _check_rope(candidate, extended: bool, seed: int, layout: str) -> None:
    right, other = (_half, _interleaved) if layout == "half" else (_interleaved, _half)
    for x, angles, what in _rope_inputs(extended, seed):
        got = call_pure(candidate, x, angles)
        want = right(x.double(), angles.double())
        misconceptions = [
            ("rope-interleaved-layout" if layout == "half" else "rope-half-layout",
             lambda: other(x.double(), angles.double())),
            ("rope-sign-flipped", lambda: right(x.double(), -angles.double())),
            ("rope-cache-layout-mixed", lambda: (_half_with_interleaved_cache if layout == "half"
                                                  else _interleaved_with_half_cache)(x.double(), angles.double())),
            ("rope-output-order", lambda: (_half_swapped_output if layout == "half"
                                           else _interleaved_as_halves)(x.double(), angles.double())),
        ]
        got = require_tensor(got, what)
        if got.shape == want.shape and not torch.allclose(got.detach().double(), want, atol=1e-5, rtol=1e-4):
            for code, wrong in misconceptions:
                if torch.allclose(got.detach().double(), wrong(), atol=1e-5, rtol=1e-4):
                    raise CheckError(code, f"{what}：结果与这个误区算出的完全一致。")
            if not torch.allclose(_pair_norms(got.detach().double(), layout), _pair_norms(x.double(), layout),
                                  atol=1e-4, rtol=1e-4):
                raise CheckError("rope-not-a-rotation", f"{what}：旋转之后，某些二维对的长度变了。")
        expect(got, want, what)
    _check_relative(candidate, seed)


def _check_relative(candidate, seed: int) -> None:
    """The property RoPE exists for: q_m · k_n after rotation depends only on n − m."""
    T, d = 12, 8
    angles = _angles(T, d, 10000.0).float()                                 # (T, d/2)
    q = randn(1, d, seed=seed + 70).repeat(T, 1)                            # (T, d): the same q at every position
    k = randn(1, d, seed=seed + 71).repeat(T, 1)                            # (T, d): the same k at every position
    q_rot = require_tensor(call(candidate, q, angles), "旋转后的 q")      # (T, d)
    k_rot = require_tensor(call(candidate, k, angles), "旋转后的 k")
    scores = (q_rot @ k_rot.T).double()                                     # (T, T)
    for offset in range(-T + 1, T):
        diagonal = scores.diagonal(offset)
        if (diagonal - diagonal[0]).abs().max() > 1e-4 * (1 + diagonal.abs().max()):
            raise CheckError("rope-not-a-rotation", f"同一对 q、k 放在相距 {offset} 的不同位置上，"
                                                    "旋转后的分数 q_m·k_n 不相同：分数应只取决于 n − m。")


@check("apply_rope")
def check_apply_rope(candidate, extended: bool = False, seed: int = 0) -> None:
    _check_rope(candidate, extended, seed, "half")


@check("apply_rope_interleaved")
def check_apply_rope_interleaved(candidate, extended: bool = False, seed: int = 0) -> None:
    _check_rope(candidate, extended, seed, "interleaved")


# --- quiz_rope ------------------------------------------------------------------------------

# The setting of the quiz: head_dim = 64, base = 10000; training length 4096, extended to 16384.
QUIZ = {"head_dim": 64, "base": 10000.0, "m": 5, "i_angle": 8, "i_period": 16,
        "L_train": 4096, "L_new": 16384, "m_new": 10000}
QUIZ_KEYS = ("n_pairs", "angle", "period", "pi_position", "rotate_v")


def quiz_truth() -> dict[str, object]:
    d, base = QUIZ["head_dim"], QUIZ["base"]
    theta = base ** (-2 * QUIZ["i_period"] / d)
    return {"n_pairs": d // 2,
            "angle": QUIZ["m"] * base ** (-2 * QUIZ["i_angle"] / d),
            "period": 2 * math.pi / theta,
            "pi_position": QUIZ["m_new"] * QUIZ["L_train"] / QUIZ["L_new"],
            "rotate_v": False}


def _number(value) -> float | None:
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def _near(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=2e-3, abs_tol=1e-3)


@check("quiz_rope")
def check_quiz_rope(candidate, extended: bool = False, seed: int = 0) -> None:
    """One set of answers, nothing random: ``extended`` and ``seed`` change nothing."""
    del extended, seed
    answers = quiz_answers(candidate, "quiz_rope", QUIZ_KEYS)
    truth, d, base = quiz_truth(), QUIZ["head_dim"], QUIZ["base"]
    if not isinstance(answers["rotate_v"], bool):
        raise CheckError("wrong-type", f"rotate_v 的答案应是 True 或 False，实际是 {answers['rotate_v']!r}。")
    if answers["rotate_v"]:
        raise CheckError("rope-on-values", "rotate_v 的答案不是 True。")
    wrong_answers = {
        "n_pairs": [("quiz-rope-pairs", d)],
        "angle": [("rope-exponent-i-over-d", QUIZ["m"] * base ** (-QUIZ["i_angle"] / d)),
                  ("rope-positions-from-one", (QUIZ["m"] + 1) * base ** (-2 * QUIZ["i_angle"] / d)),
                  ("rope-exponent-sign", QUIZ["m"] * base ** (2 * QUIZ["i_angle"] / d))],
        "period": [("quiz-rope-period-no-2pi", truth["period"] / (2 * math.pi)),
                   ("quiz-rope-period-as-frequency", 2 * math.pi / truth["period"]),
                   ("rope-exponent-i-over-d", 2 * math.pi * base ** (QUIZ["i_period"] / d))],
        "pi_position": [("quiz-rope-interpolation-inverted", QUIZ["m_new"] * QUIZ["L_new"] / QUIZ["L_train"])],
    }
    for key, wrongs in wrong_answers.items():
        value = _number(answers[key])
        if value is None:
            raise CheckError("wrong-type", f"{key} 的答案应是一个数，实际是 {answers[key]!r}。")
        if _near(value, truth[key]):
            continue
        for code, wrong in wrongs:
            if _near(value, wrong):
                raise CheckError(code, f"{key} 的答案不是 {answers[key]!r}。")
        raise CheckError("wrong", f"{key} 的答案不是 {answers[key]!r}：回到对应的那一小节再算一遍。")
