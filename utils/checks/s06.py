"""Checks of section 06_complexity_and_memory.

The counts, the quiz's truths and the attention outputs the checks compare with come from the
oracles and instructor-only functions here (utils/checks/oracle.py). Two properties of
tiled_attention are observed by the kernel that runs the learner's code (utils/checks/protocol.py
Watch): that no full [Tq, Tk] tensor is built and that no built-in attention is called. The
findings say so; outputs are compared in the judge.
"""
from __future__ import annotations

import ast
import math
import numbers
import random

import torch

from .common import quiz_number
from .compare import Cases, close, confirmed, expect, quiz_answers, require_tensor, type_name
from .core import OBSERVED, CheckError, check
from .counts import Counts
from .keys import recipe
from .oracle import answer_key, instructor_only, matches, oracle
from .protocol import CANDIDATE, Call, Source, Watch

# (B, H, T, Dh): no 2 anywhere, so "half", "missing B", "missing H", "T once" all give different numbers.
COUNT_CASES = [(3, 5, 7, 11), (5, 3, 13, 9), (1, 7, 3, 5)]


@instructor_only
def hidden_count_cases(seed: int) -> list[tuple[int, int, int, int]]:
    return [(8, 32, 4096, 128), (7, 12, 129, 64)] + _random_counts(seed)


@instructor_only
def _random_counts(seed: int, n: int = 3) -> list[tuple[int, int, int, int]]:
    rng = random.Random(seed)
    return [tuple(rng.choice([v for v in range(3, hi) if v % 2]) for hi in (10, 40, 600, 160)) for _ in range(n)]


def _require_number(got, what: str) -> None:
    """A count must come back as a number (an int, checked once its value is known)."""
    if isinstance(got, torch.Tensor):
        raise CheckError("wrong-type",
                         f"{what} 应返回 Python int，实际得到 torch.Tensor（用 int(...) 或直接整数运算）。")
    if isinstance(got, bool) or not isinstance(got, numbers.Real):
        raise CheckError("wrong-type", f"{what} 应返回 Python int，实际得到 {type_name(got)}。")


def _require_int(got, what: str) -> None:
    if not isinstance(got, numbers.Integral):
        kind = type_name(got)
        raise CheckError("wrong-type",
                         f"{what} 应返回 Python int，实际得到 {kind}"
                         f"{'（浮点数会丢失大数的精度：用整数运算，不要用 / 或 math.pow）' if kind == 'float' else ''}"
                         "。")


# --- attention_flops -------------------------------------------------------------------------

@oracle
def _flops(B, H, T, Dh) -> int:
    """FLOPs of q @ kᵀ and weights @ v, computed from the two matmuls' shapes (2 per multiply-add)."""
    qk = 2 * (B * H) * T * T * Dh   # (T, Dh) @ (Dh, T): T·T outputs, Dh multiply-adds each
    av = 2 * (B * H) * T * Dh * T   # (T, T) @ (T, Dh): T·Dh outputs, T multiply-adds each
    return qk + av


@oracle
def flops_counts(B, H, T, Dh) -> dict[str, int]:
    """The true count ("want"), its half and quarter, and what each counting misconception gives."""
    want = _flops(B, H, T, Dh)
    return {"want": want, "half": want // 2, "quarter": want // 4, "count-missing-batch": _flops(1, H, T, Dh),
            "count-missing-heads": _flops(B, 1, T, Dh), "count-T-not-squared": want // T}


def _adds_two_terms(source: str | None) -> bool:
    """Whether a function's source adds two terms (one per matmul) — then a half means 1 FLOP per multiply-add."""
    try:
        tree = ast.parse(source or "")
    except SyntaxError:
        return False
    return any(isinstance(n, ast.BinOp) and isinstance(n.op, ast.Add) or
               isinstance(n, ast.AugAssign) and isinstance(n.op, ast.Add) or
               isinstance(n, ast.Call) and getattr(n.func, "id", "") == "sum" for n in ast.walk(tree))


def _matmul_step(B, H, T, Dh) -> str:
    """Hint 3 on one case: the two matmuls' shapes, for the learner to count."""
    return (f"在 B={B}, H={H}, T={T}, Dh={Dh} 上：每个序列、每个头有两次矩阵乘法，QKᵀ 是 [{T}, {Dh}] @ [{Dh}, {T}]，"
            f"AV 是 [{T}, {T}] @ [{T}, {Dh}]；先数出一次乘法的输出个数和每个输出的乘加次数，再乘上 B·H = {B * H}。")


@check("attention_flops")
def check_attention_flops(extended: bool = False, seed: int = 0):
    """Every case's count, judged together (counts.Counts); a count of half the right one is 1 FLOP per multiply-add
    when the function adds two terms (one per matmul), else one matmul left out."""
    cases = COUNT_CASES + (hidden_count_cases(seed) if extended else [])
    half = "flops-mac-as-one" if _adds_two_terms((yield Source(CANDIDATE))) else "flops-one-matmul"
    judged = Counts()
    for B, H, T, Dh in cases:
        what = f"attention_flops(B={B}, H={H}, T={T}, Dh={Dh})"
        got = yield Call(CANDIDATE, (B, H, T, Dh))
        _require_number(got, what)
        counts = flops_counts(B, H, T, Dh)
        if got == counts["want"]:
            _require_int(got, what)
        wrong = [(half, counts["half"]), ("flops-mac-as-one", counts["quarter"])]
        wrong += [(code, counts[code]) for code in ("count-missing-batch", "count-missing-heads",
                                                    "count-T-not-squared")]
        judged.add(what, got, counts["want"], wrong, step=_matmul_step(B, H, T, Dh))
    judged.decide(before_plain=_require_int)


# --- attention_weights_bytes -------------------------------------------------------------------

DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64]


@oracle
def _bytes(B, H, T, dtype) -> int:
    """Bytes of a [B, H, T, T] tensor of ``dtype``."""
    t = torch.empty(B, H, T, T, dtype=dtype, device="meta")
    return t.numel() * t.element_size()


@oracle
def bytes_counts(B, H, T, dtype) -> dict:
    """The true size ("want"), the element size, and in order (code, what the misconception gives)."""
    want = _bytes(B, H, T, dtype)
    size = want // (B * H * T * T)
    return {"want": want, "size": size, "wrong": [
        ("bytes-missing-dtype-size", want // size), ("bytes-ignores-dtype", want // size * 4),
        ("bytes-as-bits", want * 8), ("count-missing-batch", want // B), ("count-missing-heads", want // H),
        ("count-T-not-squared", want // T)]}


@instructor_only
def hidden_bytes_cases(seed: int) -> list[tuple]:
    cases = [(8, 32, 4096, torch.float16), (7, 12, 129, torch.float32)]
    return cases + [(B, H, T, DTYPES[(seed + i) % len(DTYPES)]) for i, (B, H, T, _) in enumerate(_random_counts(seed))]


@check("attention_weights_bytes")
def check_attention_weights_bytes(extended: bool = False, seed: int = 0):
    cases = [(B, H, T, DTYPES[i % len(DTYPES)]) for i, (B, H, T, _) in enumerate(COUNT_CASES)]
    cases += [(3, 5, 7, torch.float16)]
    cases += hidden_bytes_cases(seed) if extended else []
    judged = Counts()
    for i, (B, H, T, dtype) in enumerate(cases):
        what = f"attention_weights_bytes(B={B}, H={H}, T={T}, dtype={dtype})"
        got = yield (Call(CANDIDATE, (B, H, T, dtype)) if i % 2 else Call(CANDIDATE, (B, H, T), {"dtype": dtype}))
        _require_number(got, what)
        counts = bytes_counts(B, H, T, dtype)
        want, size = counts["want"], counts["size"]
        if got == want:
            _require_int(got, what)
        step = f"这个用例的张量 [{B}, {H}, {T}, {T}] 有 {want // size:,} 个元素，{dtype} 的每个元素占 {size} 字节。"
        judged.add(what, got, want, counts["wrong"], step=step)
    judged.decide(before_plain=_require_int)
    got, want = (yield Call(CANDIDATE, (3, 5, 7))), bytes_counts(3, 5, 7, torch.float32)["want"]
    if got != want:
        raise CheckError("wrong", f"不传 dtype 时应按默认的 torch.float32 计算：attention_weights_bytes(3, 5, 7) 应为 "
                                  f"{want}，实际是 {got}。")


# --- quiz_complexity ---------------------------------------------------------------------------

QUIZ_KEYS = ("flops_ratio", "bf16_bytes", "slope_flops", "slope_naive_memory", "slope_tiled_memory")
VISIBLE_KEYS = QUIZ_KEYS[:3]    # the hidden test also asks the two memory slopes
QUIZ_CODES = {"flops_ratio": "quiz-flops-ratio", "bf16_bytes": "quiz-bf16-bytes", "slope_flops": "quiz-slope-flops",
              "slope_naive_memory": "quiz-slope-naive-memory", "slope_tiled_memory": "quiz-slope-tiled-memory"}
# relative tolerances of the answers: a slope within 2.5 % (at least; up to 5 %, see oracle.answer_key), else ~exact
QUIZ_TOLERANCE = {key: 0.025 if key.startswith("slope") else 1e-9 for key in QUIZ_KEYS}
QUIZ_BYTES_CASE = (2, 12, 3072, torch.bfloat16)   # the bf16_bytes question: B, H, T, dtype


@instructor_only
def _loglog_slope(Ts, values) -> float:
    """Least-squares slope of log(value) against log(T)."""
    x = torch.tensor([math.log(t) for t in Ts], dtype=torch.float64)
    y = torch.tensor([math.log(v) for v in values], dtype=torch.float64)
    x, y = x - x.mean(), y - y.mean()
    return float((x * y).sum() / (x * x).sum())


@instructor_only
def quiz_truth(seed: int) -> dict[str, float]:
    """Every answer computed from the formulas, on a base case and a T grid drawn from the seed."""
    rng = random.Random(seed)
    B, H, T, Dh = rng.randint(1, 8), rng.randint(1, 16), rng.randint(16, 512), rng.choice([32, 64, 128])
    Ts = sorted(rng.sample(range(256, 65536), 6))
    block = 64                                  # the tiled question's fixed block size
    return {
        "flops_ratio": _flops(B, H, 3 * T, Dh // 2) / _flops(B, H, T, Dh),  # T ×3 and Dh halved
        "bf16_bytes": _bytes(*QUIZ_BYTES_CASE),
        "slope_flops": _loglog_slope(Ts, [_flops(B, H, t, Dh) for t in Ts]),
        "slope_naive_memory": _loglog_slope(Ts, [_bytes(B, H, t, torch.float32) for t in Ts]),
        # tiled: the live extra memory is one [B, H, T, block] score block plus m and ℓ ([B, H, T, 1] each)
        "slope_tiled_memory": _loglog_slope(Ts, [B * H * t * (block + 2) * 4 for t in Ts]),
    }


@oracle
def quiz_keys(seed: int, keys: tuple[str, ...]) -> dict[str, list[str]]:
    """The truths of ``keys`` as salted digests (oracle.answer_key), each within its QUIZ_TOLERANCE; asked
    for the visible keys only, the class edition stores nothing of the others."""
    truth = quiz_truth(seed)
    return {key: answer_key(truth[key], QUIZ_TOLERANCE[key]) for key in keys}


@check("quiz_complexity")
def check_quiz_complexity(extended: bool = False, seed: int = 0):
    """``seed`` draws the setting the true ratios and slopes are computed in; the visible check
    judges the first three answers (the others must be numbers), ``extended`` (the hidden test) all five."""
    answers = yield from quiz_answers("quiz_complexity", QUIZ_KEYS)
    graded = QUIZ_KEYS if extended else VISIBLE_KEYS
    later = tuple(key for key in QUIZ_KEYS if key not in graded)
    for key in later:
        quiz_number(answers, key)
    keys = quiz_keys(seed, graded)
    for key in graded:
        value = quiz_number(answers, key)
        if not matches(value, keys[key], QUIZ_TOLERANCE[key]):
            unit = "（按字节数回答：一个整数，不是 MiB 或 GiB）" if key == "bf16_bytes" else ""
            shown = answers[key].item() if isinstance(answers[key], torch.Tensor) else answers[key]
            raise CheckError(QUIZ_CODES[key], f"{key} 的答案 {shown!r} 不对{unit}。")
    return later


# --- tiled_attention ---------------------------------------------------------------------------

@oracle
def _attend(q, k, v, causal, scale=None, diagonal=0):
    """Full softmax attention in float64 (the definition the tiled version must reproduce)."""
    q, k, v = q.double(), k.double(), v.double()
    scale = 1 / math.sqrt(q.size(-1)) if scale is None else scale
    s = q @ k.transpose(-2, -1) * scale                                         # (..., Tq, Tk)
    if causal:
        Tq, Tk = q.size(-2), k.size(-2)
        future = torch.arange(Tk)[None, :] > torch.arange(Tq)[:, None] + diagonal   # (Tq, Tk)
        s = s.masked_fill(future, float("-inf"))
    return torch.softmax(s, dim=-1) @ v                                          # (..., Tq, Dv)


@oracle
def _tiled(q, k, v, bs, causal, rescale=True, rescale_sum=True, drop_last=False, diagonal=0,
           local_keys=False, early=None):
    """The FlashAttention forward pass in float64; the options reproduce the misconceptions."""
    q, k, v = q.double(), k.double(), v.double()
    Tq, Tk = q.size(-2), k.size(-2)
    scale = 1 / math.sqrt(q.size(-1))
    m = torch.full((*q.shape[:-1], 1), float("-inf"), dtype=torch.float64)     # (..., Tq, 1)
    l = torch.zeros(*q.shape[:-1], 1, dtype=torch.float64)                     # (..., Tq, 1)
    acc = torch.zeros(*q.shape[:-1], v.size(-1), dtype=torch.float64)          # (..., Tq, Dv)
    rows = torch.arange(Tq)[:, None]                                            # (Tq, 1)
    stop = Tk // bs * bs if drop_last else Tk
    for start in range(0, stop, bs):
        kb, vb = k[..., start:start + bs, :], v[..., start:start + bs, :]       # (..., b, D)
        s = q @ kb.transpose(-2, -1) * scale                                     # (..., Tq, b)
        if causal:
            cols = torch.arange(kb.size(-2)) + (0 if local_keys else start)      # (b,)
            s = s.masked_fill(cols[None, :] > rows + diagonal, float("-inf"))
        m_new = torch.maximum(m, s.amax(-1, keepdim=True))                       # (..., Tq, 1)
        p = torch.exp(s - m_new)                                                 # (..., Tq, b)
        alpha = torch.exp(m - m_new)                                             # (..., Tq, 1)
        l = (alpha if rescale_sum else 1) * l + p.sum(-1, keepdim=True)
        if early == "new-part":        # acc += p @ v / ℓ: each block divided by the sum known so far
            acc = alpha * acc + (p @ vb) / l
        elif early == "every-step":    # acc = (α·acc + p @ v) / ℓ at every block, ℓ itself un-normalised
            acc = (alpha * acc + p @ vb) / l
        else:
            acc = (alpha if rescale else 1) * acc + p @ vb                       # (..., Tq, Dv)
        m = m_new
    return acc if early else acc / l


@oracle
def tiled_outputs(q, k, v, bs, causal) -> dict:
    """Full attention ("want"); in order, (code, what the misconception gives) ("wrong"); the causal output
    that leaves the diagonal out ("no-diagonal", None where not causal or a single row); the output without
    a mask ("unmasked")."""
    Tq, Tk = q.size(-2), k.size(-2)
    n_full = Tk // bs * bs
    unmasked = _attend(q, k, v, False)
    wrong = [("scale-missing", _attend(q, k, v, causal, scale=1.0)),
             ("tiled-no-rescale", _tiled(q, k, v, bs, causal, rescale=False)),
             ("tiled-no-rescale", _tiled(q, k, v, bs, causal, rescale=False, rescale_sum=False)),
             ("tiled-normalized-too-early", _tiled(q, k, v, bs, causal, early="new-part")),
             ("tiled-normalized-too-early", _tiled(q, k, v, bs, causal, early="every-step"))]
    if n_full < Tk:
        dropped = _tiled(q, k, v, bs, causal, drop_last=True)                   # (..., Tq, Dv)
        wrong.append(("tiled-drops-last-block", dropped))
        if Tq == Tk:
            rows_dropped = dropped.clone()
            rows_dropped[..., n_full:, :] = 0                                    # the last query block left out too
            wrong.append(("tiled-drops-last-block", rows_dropped))
    if causal:
        wrong += [("not-causal", unmasked), ("tiled-diagonal-off-by-one", _attend(q, k, v, True, diagonal=1)),
                  ("tiled-block-offset", _tiled(q, k, v, bs, True, local_keys=True))]
    else:   # masked anyway: query i sees keys 0…i (with Tq ≠ Tk too, as a mask that ignores the flag does)
        wrong.append(("causal-flag-ignored", _attend(q, k, v, True)))
    no_diagonal = _attend(q, k, v, True, diagonal=-1) if causal and Tq > 1 else None
    return {"want": _attend(q, k, v, causal), "wrong": wrong, "no-diagonal": no_diagonal, "unmasked": unmasked}


@recipe
def _increasing(shape_q, Tk, Dv, seed):
    """q, k, v whose scores grow along the key axis: the running max changes at (almost) every block."""
    g = torch.Generator().manual_seed(seed)
    *lead, Tq, D = shape_q
    u = torch.nn.functional.normalize(torch.randn(D, generator=g), dim=0)           # (D,)
    q = torch.randn(*lead, Tq, D, generator=g) + 2.0 * u                             # (..., Tq, D)
    ramp = torch.linspace(0, 3.0 * math.sqrt(D), Tk)[:, None]                        # (Tk, 1)
    k = torch.randn(*lead, Tk, D, generator=g) + ramp * u                            # (..., Tk, D)
    v = torch.randn(*lead, Tk, Dv, generator=g)                                      # (..., Tk, Dv)
    return q, k, v


# (q shape, Tk, Dv, block_size, causal); None = the default block_size; T is never a multiple of the block
TILED_CASES = [((2, 3, 37, 8), 37, 6, 8, True), ((2, 3, 37, 8), 37, 6, 16, False),
               ((19, 4), 19, 4, 5, True), ((2, 11, 8), 23, 5, 6, False), ((1, 2, 150, 8), 150, 8, None, True),
               ((1, 1, 9, 4), 9, 4, 64, True)]


@instructor_only
def hidden_tiled_cases(seed: int, n: int = 4):
    rng = random.Random(seed)
    cases = []
    for i in range(n):
        causal = i % 2 == 0
        T, bs = rng.randint(20, 70), rng.randint(3, 17)
        while T % bs == 0:
            T += 1
        Tk = T if causal else rng.randint(20, 60)   # longer than D and Dv: see _square_observable
        cases.append(((rng.randint(1, 2), rng.randint(1, 3), T, rng.choice([4, 8, 16])), Tk, rng.choice([3, 8]),
                      bs, causal))
    return cases + [((1, 1, 1, 4), 1, 4, 4, True), ((2, 13, 8), 13, 8, 1, True)]


@recipe
def _low_precision(shape_q, Tk, Dv, dtype, seed):
    """q, k, v in ``dtype`` over many key blocks: small scores, values around 3, so that the running sum
    ℓ grows to ~Tk and the output is O(1) — rounding ℓ and acc to 16 bits at every block shows."""
    g = torch.Generator().manual_seed(seed)
    *lead, Tq, D = shape_q
    q = 0.5 * torch.randn(*lead, Tq, D, generator=g)                                # (..., Tq, D)
    k = 0.5 * torch.randn(*lead, Tk, D, generator=g)                                # (..., Tk, D)
    v = torch.randn(*lead, Tk, Dv, generator=g) + 3.0                               # (..., Tk, Dv)
    return q.to(dtype), k.to(dtype), v.to(dtype)


# (q shape, Tk, Dv, block_size, causal, dtype): hundreds of key blocks. Accumulating in float32 leaves the
# output's own rounding (half a unit in the last place: ~8e-3 in bfloat16, ~1e-3 in float16 at values
# near 3); keeping m, ℓ, acc in the 16-bit dtype errs 20–80 times more (tests/bugbank/s06.py proves it).
LOW_PRECISION_CASES = [((2, 24, 8), 1500, 4, 8, False, torch.bfloat16),
                       ((1, 1, 700, 8), 700, 4, 8, True, torch.float16)]
LOW_PRECISION_ATOL = {torch.bfloat16: 2e-2, torch.float16: 4e-3}


@instructor_only
def hidden_low_precision_cases():
    return [((1, 2, 600, 8), 600, 4, 8, True, torch.bfloat16), ((1, 2, 24, 8), 4096, 4, 8, False, torch.float16)]


def _square_observable(q, k, v, block: int) -> bool:
    """Whether a full [Tq, Tk] tensor stands out from every tensor a right answer makes: q [.., Tq, D],
    k [.., Tk, D], v [.., Tk, Dv], a score block [.., Tq, b], the accumulator [.., Tq, Dv]."""
    Tq, Tk = q.size(-2), k.size(-2)
    return min(Tq, Tk) > max(q.size(-1), v.size(-1)) and block < Tk


def _observed_run(q, k, v, bs, causal, square: bool):
    """(yields) The candidate's output on one case, the case's description and the first full [Tq, Tk] tensor
    the kernel saw (None, or when ``square`` is False); a built-in attention call or a tuple fails."""
    Tq, Tk = q.size(-2), k.size(-2)
    what = f"q {tuple(q.shape)}、k {tuple(k.shape)}、v {tuple(v.shape)}、block_size={bs}、causal={causal}" + \
           ("" if q.dtype == torch.float32 else f"、dtype={q.dtype}") + " 时"
    kwargs = {"causal": causal} if bs is None else {"block_size": bs, "causal": causal}
    watch = Watch(torch_calls=True, square=(Tq, Tk, math.prod(q.shape[:-2])) if square else None)
    seen = yield Call(CANDIDATE, (q, k, v), kwargs, pure=True, watch=watch)
    builtin = next((name for name in seen.torch_calls
                    if "scaled_dot_product_attention" in name or "multi_head_attention" in name), None)
    if builtin:
        raise CheckError("tiled-uses-sdpa", f"{what}调用了 {builtin}{OBSERVED}。")
    if isinstance(seen.value, tuple):
        raise CheckError("wrong-type", "tiled_attention 只返回输出张量 out"
                                       "（不返回权重：它从不建出完整的权重矩阵）。")
    return seen.value, what, seen.square


def _tiled_finding(got, outs, q, k, v, bs, causal, what):
    """(yields) What a wrong output shows beyond the misconceptions' outputs (None when nothing): rows left out, the
    diagonal left out, or — by running the same input as one block — a merge of blocks or a block's mask that is
    wrong. (code, what was seen)."""
    Tq, Tk = q.size(-2), k.size(-2)
    n_full = Tk // bs * bs
    if got.shape[:-2] == q.shape[:-2] and got.size(-2) == n_full < Tq:
        return "tiled-drops-last-block", f"{what}：输出只有 {n_full} 行（应为 {Tq}）"
    full_shape = got.shape == (*q.shape[:-1], v.size(-1))
    if outs["no-diagonal"] is not None and full_shape and close(got[..., 1:, :], outs["no-diagonal"][..., 1:, :]):
        return "tiled-diagonal-off-by-one", f"{what}：位置 t 的输出只用了 0…t−1 的键，没有看自己"
    if bs < Tk and full_shape:
        one_block = yield Call(CANDIDATE, (q, k, v), {"block_size": Tk, "causal": causal})
        if close(one_block, outs["want"]):
            if causal and close((yield Call(CANDIDATE, (q, k, v), {"block_size": bs, "causal": False})),
                                outs["unmasked"]):
                return "tiled-block-offset", f"{what}：一个块或不加掩码时都对，多个块加因果掩码时不对"
            return "tiled-merge-wrong", f"{what}：block_size ≥ T（只有一个块）时正确，分成多个块时不对"
    return None


def _diagnose_tiled(cases: Cases, runs: list):
    """(yields) The verdict on the cases that came back wrong: a misconception confirmed on two cases (compare);
    else a finding of :func:`_tiled_finding` that the first two wrong cases both show; else the plain finding on
    the first. ``runs``: per case of ``cases``, the arguments of _tiled_finding but the output."""
    wrong = [(case, run) for case, run in zip(cases.seen, runs) if not case.right()]
    if wrong and confirmed(cases.seen) is None and len(wrong) >= 2:
        found = []
        for case, run in wrong[:2]:
            found.append((yield from _tiled_finding(case.got, *run)))
        if found[0] and found[1] and found[0][0] == found[1][0]:
            raise CheckError(found[0][0], f"{found[0][1]}；{found[1][1]}。")
    cases.decide()


def _require_dtype(got, q, what) -> None:
    if got.dtype != q.dtype:
        raise CheckError("wrong-type", f"{what}输出的 dtype 是 {got.dtype}，应与输入相同（{q.dtype}）。")


_SHAPE_ERRORS = ("ValueError", "AssertionError")   # what a clear refusal of Tq ≠ Tk with causal=True raises


def _check_causal_shapes():
    """(yields) causal=True is self-attention: a call with Tq ≠ Tk must raise (ValueError or an assertion)."""
    q, k, v = _increasing((1, 2, 5, 4), 9, 3, seed=7)
    try:
        out = yield Call(CANDIDATE, (q, k, v), {"block_size": 4, "causal": True})
    except CheckError as err:
        if err.code == "crashed" and err.error in _SHAPE_ERRORS:
            return
        if err.code != "crashed":
            raise
        raise CheckError("tiled-causal-shape-unchecked",
                         f"Tq = 5、Tk = 9、causal=True 时{err.finding.removeprefix('运行时')}，"
                         "而不是一个说明原因的 ValueError。") from None
    shape = tuple(out.shape) if isinstance(out, torch.Tensor) else type_name(out)
    raise CheckError("tiled-causal-shape-unchecked",
                     f"Tq = 5、Tk = 9、causal=True 时没有报错，而是返回了 {shape}。")


@check("tiled_attention")
def check_tiled_attention(extended: bool = False, seed: int = 0):
    cases = TILED_CASES + (hidden_tiled_cases(seed) if extended else [])
    judged, runs = Cases(), []
    for i, (shape_q, Tk, Dv, bs, causal) in enumerate(cases):
        q, k, v = _increasing(shape_q, Tk, Dv, seed=seed + i)
        block = 64 if bs is None else bs                                        # the default block_size
        got, what, full = yield from judged.run(_observed_run(q, k, v, bs, causal,
                                                              square=_square_observable(q, k, v, block)))
        outs = tiled_outputs(q, k, v, block, causal)
        if judged.add(what, got, outs["want"], outs["wrong"], inputs={"q": q, "k": k, "v": v}).right():
            _require_dtype(got, q, what)
        runs.append((outs, q, k, v, block, causal, what))
        if full:
            op, shape = full
            raise CheckError("tiled-materializes-scores", f"{what}，{op} 产生了一个形状为 {list(shape)} 的张量"
                                                          f"（包含完整的 [Tq, Tk] = [{q.size(-2)}, {Tk}]）{OBSERVED}。")
    yield from _diagnose_tiled(judged, runs)
    low = LOW_PRECISION_CASES + (hidden_low_precision_cases() if extended else [])
    for i, (shape_q, Tk, Dv, bs, causal, dtype) in enumerate(low):
        q, k, v = _low_precision(shape_q, Tk, Dv, dtype, seed=seed + 100 + i)
        got, what, _ = yield from _observed_run(q, k, v, bs, causal, square=False)
        require_tensor(got, f"{what}的输出")
        _require_dtype(got, q, what)
        want = _attend(q, k, v, causal)
        if not close(got, want, atol=LOW_PRECISION_ATOL[dtype], rtol=0.0):
            if got.shape != want.shape or not torch.isfinite(got).all():
                expect(got, want, f"{what}的输出")
            err = (got.double() - want).abs().max().item()
            raise CheckError("tiled-low-precision-accumulator",
                             f"{what}，输出的最大误差是 {err:.3g}；按 float32 累加、最后转回 {dtype} 时，"
                             f"误差只有输出自身的舍入（不超过 {LOW_PRECISION_ATOL[dtype]:g}）。")
    yield from _check_causal_shapes()
