"""Checks of section 09_rope: rope_angles, apply_rope (rotate-half), apply_rope_interleaved
(RoFormer's layout) and the numeric self-test quiz_rope.

Every misconception is diagnosed by what it would output on the same input, as the float64 oracles
here and in math64.py compute it: the other layout, the opposite rotation, a cos/sin table expanded
the other layout's way, the right pairs written back in the wrong order, exponent −i/d, positions
from 1, … The quiz compares through digests of its answers (utils/checks/oracle.py); its question 6
(the angle after a KV cache) only the hidden test grades, from instructor-only digests.
"""
from __future__ import annotations

import math

import torch

from . import math64
from .common import quiz_number
from .compare import Cases, quiz_answers, randn, require_tensor
from .core import CheckError, check
from .keys import recipe
from .oracle import answer_key, instructor_only, matches, oracle
from .protocol import CANDIDATE, Call

# --- rope_angles ----------------------------------------------------------------------------

# (T, head_dim, base): two bases other than the default, so that a base left out is told on two cases
ANGLE_CASES = [(6, 8, 10000.0), (5, 6, 100.0), (1, 4, 10000.0), (9, 16, 10000.0), (4, 10, 500.0)]


@instructor_only
def hidden_angle_cases(seed: int) -> list[tuple[int, int, float]]:
    g = torch.Generator().manual_seed(seed)
    T, half = (int(v) for v in torch.randint(2, 40, (2,), generator=g))
    base = [500000.0, 10.0, 1000.0][int(torch.randint(0, 3, (1,), generator=g))]
    return [(33, 64, 500000.0), (4, 2, 10000.0), (T, 2 * half, base)]


@oracle
def angle_outputs(T: int, d: int, base: float) -> dict:
    """rope_angles(T, d, base) ("want") and what each misconception returns instead, as (code, angles) pairs."""
    want = math64.rope_angles(T, d, base)                                   # (T, d/2)
    theta = math64.rope_angles(2, d, base)[1]                               # (d/2,)
    i = torch.arange(d // 2, dtype=torch.float64)                           # (d/2,) the pair index
    return {"want": want, "wrong": [
        ("rope-exponent-i-over-d", math64.rope_angles(T, d, base, "-i/d")),
        ("rope-exponent-sign", math64.rope_angles(T, d, base, "+2i/d")),
        ("rope-exponent-linspace", math64.rope_angles(T, d, base, "linspace")),
        ("rope-positions-from-one", math64.rope_angles(T, d, base, start=1)),
        ("rope-base-ignored", math64.rope_angles(T, d, 10000.0) if base != 10000.0 else None),
        ("rope-angles-transposed", want.T),
        ("rope-angles-no-position", theta.expand(T, -1)),
        ("rope-angles-no-position", theta),
        ("rope-exponent-doubled", torch.arange(T, dtype=torch.float64)[:, None] * base ** (-4 * i / d))]}


@check("rope_angles")
def check_rope_angles(extended: bool = False, seed: int = 0):
    cases = Cases()
    for T, d, base in ANGLE_CASES + (hidden_angle_cases(seed) if extended else []):
        got = yield from cases.call(Call(CANDIDATE, (T, d), {} if base == 10000.0 and T != 1 else {"base": base}))
        got = require_tensor(got, f"rope_angles({T}, {d}, base={base:g})")
        outs = angle_outputs(T, d, base)
        want = outs["want"]
        what = f"rope_angles(T={T}, head_dim={d}, base={base:g})"
        if d > 2 and got.shape == (d // 2, T) and (d // 2 != T):
            raise CheckError("rope-angles-transposed", f"{what} 的形状是 {tuple(got.shape)}，应为 {(T, d // 2)}。")
        if got.shape == (T, d) and T > 1:
            first = got[..., : d // 2]
            if torch.allclose(first.double(), want, atol=1e-4, rtol=1e-4) or \
                    torch.allclose(got[..., 0::2].double(), want, atol=1e-4, rtol=1e-4):
                raise CheckError("rope-angles-full-width", f"{what} 的形状是 {tuple(got.shape)}，应为 {(T, d // 2)}。")
        cases.add(what, got, want, outs["wrong"])
    cases.decide()


# --- apply_rope / apply_rope_interleaved ----------------------------------------------------

# (leading dims, T, head_dim): several batch layouts, odd T, d/2 odd (d = 6), a single position.
ROPE_CASES = [((2, 3), 5, 8), ((2,), 7, 6), ((1, 2), 1, 4)]


@instructor_only
def hidden_rope_cases():
    return [((), 9, 10), ((2, 1, 3), 4, 12), ((3,), 16, 2)]


@recipe
def _float_angles(T: int, d: int, base: float, start: int = 0) -> torch.Tensor:
    """Real RoPE angles in float32, the dtype the learner's code gets."""
    return math64.rope_angles(T, d, base, start=start).float()                          # (T, d/2)


def _rope_inputs(extended: bool, seed: int):
    """(x, angles, description): real RoPE angles, positions offset as with a KV cache, random angles."""
    cases = ROPE_CASES + (hidden_rope_cases() if extended else [])
    for k, (lead, T, d) in enumerate(cases):
        x = randn(*lead, T, d, seed=seed + k)                                # (..., T, d)
        if k % 3 == 0:
            angles, how = _float_angles(T, d, 10000.0), "rope_angles 的角度"
        elif k % 3 == 1:
            P = 3 + k
            angles = _float_angles(T, d, 100.0, start=P)                    # (T, d/2)
            how = f"位置从 {P} 开始的角度（像接在 KV Cache 后面）"
        else:
            angles, how = randn(T, d // 2, seed=seed + 100 + k, scale=2.0), "随机角度"
        yield x, angles, f"x 形状 {tuple(x.shape)}、{how}"
    if extended:
        x = randn(2, 5, 8, seed=seed + 50, dtype=torch.float64)
        yield x, math64.rope_angles(5, 8, 10.0), "float64 的 x 和角度"


@oracle
def rope_outputs(x, angles, layout: str) -> dict:
    """RoPE of x in ``layout`` ("half" or "interleaved"; "want") and, in the order they are tried, what
    each misconception gives: the other layout, the opposite rotation, cos/sin expanded the other
    layout's way, the right pairs written back in the wrong order."""
    x, angles = x.double(), angles.double()
    half, inter = math64.rotate_half(x, angles), math64.rotate_interleaved(x, angles)      # (..., T, d) each
    h = x.size(-1) // 2
    if layout == "half":
        full = angles.repeat_interleave(2, dim=-1)                                         # (T, d)
        partner = torch.cat([-x[..., h:], x[..., :h]], dim=-1)                             # (..., T, d)
        return {"want": half, "rope-interleaved-layout": inter, "rope-sign-flipped": math64.rotate_half(x, -angles),
                "rope-cache-layout-mixed": x * full.cos() + partner * full.sin(),
                "rope-output-order": torch.cat([half[..., h:], half[..., :h]], dim=-1)}
    full = torch.cat([angles, angles], dim=-1)                                             # (T, d)
    partner = torch.stack([-x[..., 1::2], x[..., 0::2]], dim=-1).flatten(-2)               # (..., T, d)
    return {"want": inter, "rope-half-layout": half, "rope-sign-flipped": math64.rotate_interleaved(x, -angles),
            "rope-cache-layout-mixed": x * full.cos() + partner * full.sin(),
            "rope-output-order": torch.cat([inter[..., 0::2], inter[..., 1::2]], dim=-1)}


def _pair_norms(x, layout: str):
    if layout == "half":
        h = x.size(-1) // 2
        return (x[..., :h] ** 2 + x[..., h:] ** 2).sqrt()
    return (x[..., 0::2] ** 2 + x[..., 1::2] ** 2).sqrt()


def _check_rope(extended: bool, seed: int, layout: str):
    """(yields) The candidate, a RoPE in ``layout``, on every input of _rope_inputs (judged together: a
    misconception confirmed on two, else a rotation that changes a pair's length, else the first wrong output),
    then _check_relative."""
    cases = Cases()
    for x, angles, what in _rope_inputs(extended, seed):
        got = yield from cases.call(Call(CANDIDATE, (x, angles), pure=True))
        outs = rope_outputs(x, angles, layout)
        want = outs.pop("want")
        cases.add(f"{what} 时", got, want, list(outs.items()), inputs={"x": x, "angles": angles})
    try:
        cases.decide()
    except CheckError as err:
        if err.code == "wrong":
            _require_rotation(next(case for case in cases.seen if not case.right()), layout)
        raise
    yield from _check_relative(seed)


def _require_rotation(case, layout: str) -> None:
    """A wrong output that changes the length of a rotated pair is no rotation at all."""
    got, x = case.got.detach().double(), case.inputs["x"].double()
    if not torch.allclose(_pair_norms(got, layout), _pair_norms(x, layout), atol=1e-4, rtol=1e-4):
        raise CheckError("rope-not-a-rotation", f"{case.what}：旋转之后，某些二维对的长度变了。")


def _check_relative(seed: int):
    """The property RoPE exists for: q_m · k_n after rotation depends only on Δ = m − n."""
    T, d = 12, 8
    angles = math64.rope_angles(T, d, 10000.0).float()                      # (T, d/2)
    q = randn(1, d, seed=seed + 70).repeat(T, 1)                            # (T, d): the same q at every position
    k = randn(1, d, seed=seed + 71).repeat(T, 1)                            # (T, d): the same k at every position
    q_rot = require_tensor((yield Call(CANDIDATE, (q, angles))), "旋转后的 q")      # (T, d)
    k_rot = require_tensor((yield Call(CANDIDATE, (k, angles))), "旋转后的 k")
    scores = (q_rot @ k_rot.T).double()                                     # (T, T): scores[m, n]
    for gap in range(-T + 1, T):
        diagonal = scores.diagonal(-gap)                                    # every (m, n) with m − n = gap
        if (diagonal - diagonal[0]).abs().max() > 1e-4 * (1 + diagonal.abs().max()):
            raise CheckError("rope-not-a-rotation", f"同一对 q、k 放在相对距离 Δ = m − n = {gap} 的不同位置上，"
                                                    "旋转后的分数 q_m·k_n 不相同：分数应只取决于 Δ。")


@check("apply_rope")
def check_apply_rope(extended: bool = False, seed: int = 0):
    yield from _check_rope(extended, seed, "half")


@check("apply_rope_interleaved")
def check_apply_rope_interleaved(extended: bool = False, seed: int = 0):
    yield from _check_rope(extended, seed, "interleaved")


# --- quiz_rope ------------------------------------------------------------------------------

# The setting of the quiz: head_dim = 64, base = 10000; training length 4096, extended to 16384;
# 200 positions cached, 4 new tokens (question 6, graded by the hidden test only).
QUIZ = {"head_dim": 64, "base": 10000.0, "m": 5, "i_angle": 8, "i_period": 16,
        "L_train": 4096, "L_new": 16384, "m_new": 10000, "P_cached": 200, "n_new": 4}
VISIBLE_KEYS = ("n_pairs", "angle", "period", "pi_position", "rotate_v")
HIDDEN_KEYS = ("cached_angle",)
QUIZ_KEYS = VISIBLE_KEYS + HIDDEN_KEYS
QUIZ_TOLERANCE = 2e-3


def _theta(i: int) -> float:
    return QUIZ["base"] ** (-2 * i / QUIZ["head_dim"])


@instructor_only
def quiz_truth() -> dict[str, object]:
    last_new = QUIZ["P_cached"] + QUIZ["n_new"] - 1                         # the new tokens sit at P … P + n − 1
    return {"n_pairs": QUIZ["head_dim"] // 2,
            "angle": QUIZ["m"] * _theta(QUIZ["i_angle"]),
            "period": 2 * math.pi / _theta(QUIZ["i_period"]),
            "pi_position": QUIZ["m_new"] * QUIZ["L_train"] / QUIZ["L_new"],
            "rotate_v": False,
            "cached_angle": last_new * _theta(QUIZ["i_angle"])}


def _number_keys(truth: dict, wrong: dict) -> dict:
    """Salted digests of each key's truth ("want") and of its known wrong numbers, as (code, key) pairs."""
    return {key: {"want": answer_key(truth[key], QUIZ_TOLERANCE),
                  "wrong": [(code, answer_key(value, QUIZ_TOLERANCE)) for code, value in values]}
            for key, values in wrong.items()}


@instructor_only
def hidden_quiz_keys() -> dict:
    """The digests of question 6, which only the hidden test grades (never stored in the class edition)."""
    d, base, theta = QUIZ["head_dim"], QUIZ["base"], _theta(QUIZ["i_angle"])
    last_new = QUIZ["P_cached"] + QUIZ["n_new"] - 1
    return _number_keys(quiz_truth(), {"cached_angle": [
        ("quiz-rope-cache-offset", (QUIZ["n_new"] - 1) * theta),
        ("rope-positions-from-one", (last_new + 1) * theta),
        ("rope-exponent-i-over-d", last_new * base ** (-QUIZ["i_angle"] / d))]})


@oracle
def quiz_keys() -> dict:
    """The digests of the visibly checked questions: truths and known wrong numbers (_number_keys), rotate_v."""
    truth, d, base = quiz_truth(), QUIZ["head_dim"], QUIZ["base"]
    wrong = {
        "n_pairs": [("quiz-rope-pairs", d)],
        "angle": [("rope-exponent-i-over-d", QUIZ["m"] * base ** (-QUIZ["i_angle"] / d)),
                  ("rope-positions-from-one", (QUIZ["m"] + 1) * base ** (-2 * QUIZ["i_angle"] / d)),
                  ("rope-exponent-sign", QUIZ["m"] * base ** (2 * QUIZ["i_angle"] / d))],
        "period": [("quiz-rope-period-no-2pi", truth["period"] / (2 * math.pi)),
                   ("quiz-rope-period-as-frequency", 2 * math.pi / truth["period"]),
                   ("rope-exponent-i-over-d", 2 * math.pi * base ** (QUIZ["i_period"] / d))],
        "pi_position": [("quiz-rope-interpolation-inverted", QUIZ["m_new"] * QUIZ["L_new"] / QUIZ["L_train"])],
    }
    return _number_keys(truth, wrong) | {"rotate_v": answer_key(truth["rotate_v"])}


def _judge_numbers(answers: dict, keys: dict) -> None:
    for key, key_of in keys.items():
        value = quiz_number(answers, key)
        if matches(value, key_of["want"], QUIZ_TOLERANCE):
            continue
        for code, wrong in key_of["wrong"]:
            if matches(value, wrong, QUIZ_TOLERANCE):
                raise CheckError(code, f"{key} 的答案不是 {answers[key]!r}。")
        raise CheckError("wrong", f"{key} 的答案不是 {answers[key]!r}：回到对应的那一小节再算一遍。")


@check("quiz_rope")
def check_quiz_rope(extended: bool = False, seed: int = 0):
    """One set of answers, nothing random (``seed`` changes nothing). The visible check grades questions
    1–5 and only requires question 6 (cached_angle) to be a number; ``extended`` grades it too."""
    del seed
    answers = yield from quiz_answers("quiz_rope", QUIZ_KEYS)
    keys = quiz_keys()
    if not isinstance(answers["rotate_v"], bool):
        raise CheckError("wrong-type", f"rotate_v 的答案应是 True 或 False，实际是 {answers['rotate_v']!r}。")
    if not matches(answers["rotate_v"], keys.pop("rotate_v")):
        raise CheckError("rope-on-values", f"rotate_v 的答案不是 {answers['rotate_v']}。")
    _judge_numbers(answers, keys)
    for key in HIDDEN_KEYS:
        quiz_number(answers, key)                                           # visible: a number, not judged
    if not extended:
        return HIDDEN_KEYS
    _judge_numbers(answers, hidden_quiz_keys())
    return ()
