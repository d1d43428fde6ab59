"""Checks of section 11_real_models_and_training: the two quizzes.

Answers are compared through salted digests (utils/checks/oracle.py), never with plain constants; the
parameter counts come from section 10's float64 formula.

Each quiz has keys the visible check judges at once (with a diagnosis) and keys only the hidden test
judges: the visible check only asks that those are present and of the right type, and says in one line
that they are graded later. The digests of the hidden keys are made only by the hidden test's call, so
the class edition's stored results (recorded from the visible calls) never hold them.
"""
from __future__ import annotations

from types import SimpleNamespace

from .common import quiz_number
from .compare import quiz_answers
from .core import CheckError, check
from .oracle import answer_key, instructor_only, matches, oracle
from .s10 import model_sizes, param_count


# --- quiz_read_config --------------------------------------------------------------------------

# Llama-3.1-70B and Mixtral-8x22B, from their config.json (the notebook computes neither before the quiz).
LLAMA31_70B = SimpleNamespace(**model_sizes(128256, 131072, 8192, 64, 8, 80, 28672, base=500000.0, tie=False))
MIXTRAL_8X22B = SimpleNamespace(**model_sizes(32768, 65536, 6144, 48, 8, 56, 16384, base=1e6, tie=False))
N_EXPERT, TOP_K = 8, 2
VISIBLE_READ_KEYS = ("llama31_70b_params", "llama31_70b_kv_bytes_per_token", "mixtral_8x22b_total_params")
HIDDEN_READ_KEYS = ("mixtral_8x22b_active_params", "mixtral_8x22b_flops_per_token")
READ_KEYS = VISIBLE_READ_KEYS + HIDDEN_READ_KEYS
READ_TOLERANCE = 2e-3          # counts and bytes: within 0.2 % (the notebook says so); FLOPs: 3 %
FLOPS_TOLERANCE = 0.03
WRONG_TOLERANCE = 2e-3         # a known wrong number, as closely
UNITS = (1e9, 2 ** 10, 2 ** 20, 1e6)                                               # an answer in billions, KiB, …


def _read_tolerance(key: str) -> float:
    return FLOPS_TOLERANCE if key.endswith("flops_per_token") else READ_TOLERANCE


@oracle
def moe_param_count(cfg, experts: int) -> int:
    """Parameters of a Mixtral-style model counting `experts` expert FFNs per block (and the router)."""
    return param_count(cfg) + cfg.n_layer * ((experts - 1) * 3 * cfg.n_embed * cfg.ffn_hidden + cfg.n_embed * N_EXPERT)


def _kv_bytes_per_token(cfg, kv_heads: int) -> int:
    return 2 * cfg.n_layer * kv_heads * (cfg.n_embed // cfg.n_head) * 2                   # K and V, bfloat16


@instructor_only
def read_config_truth() -> dict[str, tuple[float, list[tuple[str, float]]]]:
    """Each key's answer and the known wrong answers, with the code of the misconception each shows."""
    llama, moe = LLAMA31_70B, MIXTRAL_8X22B
    kv = _kv_bytes_per_token(llama, llama.n_kv_head)
    total, active, one_expert = (moe_param_count(moe, n) for n in (N_EXPERT, TOP_K, 1))
    return {
        "llama31_70b_params": (param_count(llama), [
            ("quiz-config-tied-assumed", param_count(llama, untied_once=True)),
            ("quiz-config-kv-as-q", param_count(llama, kv_as_q=True)),
            ("quiz-swiglu-two-matrices", param_count(llama, ffn_mats=2))]),
        "llama31_70b_kv_bytes_per_token": (kv, [
            ("quiz-kv-no-factor-2", kv / 2), ("quiz-kv-fp32", kv * 2),
            ("quiz-config-kv-as-q", _kv_bytes_per_token(llama, llama.n_head)),
            ("kv-bytes-no-layers", kv / llama.n_layer)]),
        "mixtral_8x22b_total_params": (total, [
            ("quiz-moe-name-is-size", 8 * 22e9), ("quiz-moe-name-is-size", 8 * one_expert),
            ("quiz-moe-experts-missing", one_expert), ("quiz-moe-total-is-active", active)]),
        "mixtral_8x22b_active_params": (active, [("quiz-moe-active-all", total), ("quiz-moe-top1", one_expert)]),
        "mixtral_8x22b_flops_per_token": (2 * active, [
            ("quiz-flops-total-params", 2 * total), ("quiz-flops-no-factor-2", active),
            ("quiz-flops-training", 6 * active)]),
    }


@oracle
def read_config_keys(keys: tuple[str, ...]) -> dict:
    """Digests of the truths of ``keys`` ("want", within the key's tolerance) and of the known wrong
    numbers, as (code, digest) pairs within WRONG_TOLERANCE."""
    truth = read_config_truth()
    return {key: {"want": answer_key(truth[key][0], _read_tolerance(key)),
                  "wrong": [(code, answer_key(value, WRONG_TOLERANCE)) for code, value in truth[key][1]]}
            for key in keys}


def _judge_number(key: str, value: float, keys: dict) -> None:
    want, tolerance = keys[key]["want"], _read_tolerance(key)
    if matches(value, want, tolerance):
        return
    for code, wrong in keys[key]["wrong"]:
        if matches(value, wrong, WRONG_TOLERANCE):
            raise CheckError(code, f"{key} = {value:,.6g} 不对。")
    if any(matches(value * unit, want, tolerance) for unit in UNITS):
        raise CheckError("quiz-config-units", f"{key} = {value:,.6g}：单位不对。")
    raise CheckError("wrong", f"{key} = {value:,.6g} 不对：回到 §2 的清单和公式再算一遍。")


@check("quiz_read_config")
def check_quiz_read_config(extended: bool = False, seed: int = 0):
    """Nothing random (``seed`` changes nothing); the visible check judges VISIBLE_READ_KEYS, ``extended``
    (the hidden test) all keys. Returns the keys left to the hidden test."""
    del seed
    answers = yield from quiz_answers("quiz_read_config", READ_KEYS)
    values = {key: quiz_number(answers, key) for key in READ_KEYS}          # every key: present, a number
    judged = READ_KEYS if extended else VISIBLE_READ_KEYS
    keys = read_config_keys(judged)
    for key in judged:
        _judge_number(key, values[key], keys)
    return () if extended else HIDDEN_READ_KEYS


# --- quiz_misconceptions -----------------------------------------------------------------------

# The five of 主干篇's list (judged at once), then five of sections 10–11 (judged by the hidden test).
VISIBLE_MYTH_KEYS = ("weights_explain", "heads_learned", "flash_is_sparse", "rope_window_enough", "training_parallel")
HIDDEN_MYTH_KEYS = ("same_depth_same_size", "moe_compute_active", "tied_head_multiplies", "cache_rope_from_zero",
                    "temperature_zero_greedy")
MYTH_KEYS = VISIBLE_MYTH_KEYS + HIDDEN_MYTH_KEYS


@instructor_only
def myths_truth() -> dict[str, tuple[bool, str]]:
    """Each statement's truth, and the code of the misconception the other answer shows."""
    return {"weights_explain": (False, "quiz-myth-weights-explain"),
            "heads_learned": (True, "quiz-myth-heads-designed"),
            "flash_is_sparse": (False, "quiz-myth-flash-sparse"),
            "rope_window_enough": (False, "quiz-myth-rope-window"),
            "training_parallel": (True, "quiz-myth-training-sequential"),
            "same_depth_same_size": (False, "quiz-myth-params-by-depth"),
            "moe_compute_active": (True, "quiz-myth-moe-all-experts"),
            "tied_head_multiplies": (True, "quiz-myth-tied-head-free"),
            "cache_rope_from_zero": (False, "quiz-myth-cache-rope"),
            "temperature_zero_greedy": (True, "quiz-myth-temperature-zero")}


@oracle
def myths_keys(keys: tuple[str, ...]) -> dict[str, tuple[list[str], str]]:
    """Per statement of ``keys``: the digest of its truth and the code of a wrong answer."""
    truth = myths_truth()
    return {key: (answer_key(truth[key][0]), truth[key][1]) for key in keys}


@check("quiz_misconceptions")
def check_quiz_misconceptions(extended: bool = False, seed: int = 0):
    """Nothing random (``seed`` changes nothing); the visible check judges VISIBLE_MYTH_KEYS, ``extended``
    (the hidden test) all ten. Returns the keys left to the hidden test."""
    del seed
    answers = yield from quiz_answers("quiz_misconceptions", MYTH_KEYS)
    for key in MYTH_KEYS:
        if not isinstance(answers[key], bool):
            raise CheckError("wrong-type", f"{key} 的答案应是 True 或 False，实际是 {answers[key]!r}。")
    judged = MYTH_KEYS if extended else VISIBLE_MYTH_KEYS
    keys = myths_keys(judged)
    for key in judged:
        truth, code = keys[key]
        if not matches(answers[key], truth):
            raise CheckError(code, f"对 {key} 那句话的判断不对。")
    return () if extended else HIDDEN_MYTH_KEYS
