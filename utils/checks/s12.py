"""Checks of section 12_what_heads_learn.

The two scores are judged on check-made attention patterns (random causal rows, and a few designed ones:
an ideal previous-token head, an ideal induction head) against float64 oracles and the outputs of the
known misconceptions. head_ablation_losses runs on the section's given AttentionOnlyLM, built in the
kernel from check-chosen sizes and weights (:func:`given_model`, a dumb factory: it builds and loads, it
judges nothing); the losses are compared with a float64 oracle of the same model (section 10's DecoderLM
without its FFNs).
"""
from __future__ import annotations

import functools
import math

import torch
import torch.nn.functional as F

from . import math64
from .common import fixed_weights, quiz_number
from .compare import close, expect, quiz_answers, randn, require_tensor
from .core import CheckError, check
from .keys import recipe
from .oracle import answer_key, instructor_only, matches, oracle, reusable
from .protocol import CANDIDATE, Call, Get, New

EPS = 1e-6   # RMSNorm's default eps (section 08), the given model's norms
HERE = "utils.checks.s12"
GENERIC = ("wrong", "wrong-shape", "nan-output")   # findings whose hint 3 the check computes on its own input


# --- patterns ------------------------------------------------------------------------------------

@recipe
def causal_pattern(lead: tuple[int, ...], T: int, seed: int, sharpness: float = 2.0) -> torch.Tensor:
    """Random attention weights (*lead, T, T): rows sum to 1, zero above the diagonal."""
    scores = randn(*lead, T, T, seed=seed, scale=sharpness)
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    return F.softmax(scores.masked_fill(~causal, float("-inf")), dim=-1)


def ideal_pattern(T: int, offset_of) -> torch.Tensor:
    """(T, T): row t puts all its weight on key offset_of(t) (clamped to the visible keys 0 … t)."""
    keys = torch.tensor([min(max(offset_of(t), 0), t) for t in range(T)])
    return F.one_hot(keys, T).float()


def _wrong_axes(d: torch.Tensor) -> list[torch.Tensor]:
    """d (..., Q) holds one weight per query: its mean over every other axis, whichever side the queries
    sit on (a list stacked along dim 0, then reduced along the wrong one)."""
    front = d.movedim(-1, 0)                                                      # (Q, ...)
    return [d.mean(dim=k) for k in range(d.dim() - 1)] + [front.mean(dim=k) for k in range(1, front.dim())]


@oracle
def previous_token_truth(pattern) -> dict:
    """The previous-token score of pattern (..., T, T) ("want"), and what each misconception gives."""
    p = pattern.double()
    T = p.size(-1)
    d = p.diagonal(-1, -2, -1)                                                     # (..., T-1): weight on t-1
    diag = p.diagonal(0, -2, -1)                                                   # (..., T): weight on t itself
    wrong = [("prev-score-self", diag.mean(-1)), ("prev-score-self", diag[..., 1:].mean(-1)),
             ("score-counts-first-row", d.sum(-1) / T),
             ("score-rows-columns-swapped", p.diagonal(1, -2, -1).mean(-1))]
    wrong += [("score-mean-wrong-axis", m) for m in _wrong_axes(d)]
    return {"want": d.mean(-1), "wrong": wrong}


@oracle
def induction_truth(pattern, period: int) -> dict:
    """The induction score of pattern (..., T, T) for `period` ("want"), and what each misconception gives."""
    p = pattern.double()
    T, P = p.size(-1), period
    t = torch.arange(P, T)                                                         # the repeated part's queries
    picked = p[..., t, t - P + 1]                                                  # (..., T-P)
    wrong = [("induction-off-by-one", p[..., t, t - P].mean(-1)),                  # the earlier occurrence itself
             ("induction-off-by-one", p[..., t, t - P + 2].mean(-1)),              # one past the token after it
             ("induction-wrong-range", p.diagonal(-(P - 1), -2, -1).mean(-1)),     # from t = P - 1
             ("induction-wrong-range", p[..., t, t - P + 1].sum(-1) / (T - P + 1)),
             ("induction-wrong-range", picked[..., :P].mean(-1)),                   # rows P … 2P-1 only
             ("score-rows-columns-swapped", p.diagonal(P - 1, -2, -1).mean(-1))]
    wrong += [("score-mean-wrong-axis", m) for m in _wrong_axes(picked)]
    return {"want": picked.mean(-1), "wrong": wrong}


def _score(pattern, args: tuple, what: str, truth: dict):
    """(yields) The candidate's score of pattern, compared with truth; the first element's expected value
    is hint 3."""
    got = yield Call(CANDIDATE, (pattern, *args), pure=True)
    got = require_tensor(got, what)
    want = truth["want"]
    try:
        expect(got, want, what, truth["wrong"], atol=1e-5, rtol=1e-4)
    except CheckError as err:
        if err.code not in GENERIC:
            raise
        shape = f"形状应为 {tuple(want.shape)}（去掉最后两维 [T, T]）" if want.dim() else "应是 0 维张量（没有前导维）"
        raise CheckError(err.code, err.finding,
                         step=f"输出{shape}；第一个元素应为 {want.flatten()[0].item():.4f}。") from None


# (leading dims, T): leading dims of every kind, T > the number of leading entries
PREV_CASES = [((3,), 7), ((), 6), ((2, 2, 3), 9)]
# (leading dims, T, period): T = 2P, T not a multiple of P, T > 2P
INDUCTION_CASES = [((3,), 12, 5), ((), 8, 4), ((2, 2), 10, 3)]


@instructor_only
def hidden_prev_cases():
    return [((4, 5), 11), ((), 2), ((1, 3, 2), 16)]


@instructor_only
def hidden_induction_cases():
    return [((4,), 14, 7), ((), 6, 5), ((2, 3), 20, 6), ((5,), 9, 2)]


@recipe
def _designed_previous_heads() -> torch.Tensor:
    """Head 0 attends to the previous position only, head 1 to itself: (2, 6, 6)."""
    return torch.stack([ideal_pattern(6, lambda t: t - 1), ideal_pattern(6, lambda t: t)])


@recipe
def _designed_induction_heads() -> torch.Tensor:
    """From t = 4 on, head h attends to t − (3, 1, 4, 2)[h] only (period 4: head 0 is the induction head)."""
    return torch.stack([ideal_pattern(10, lambda t, back=back: t - back if t >= 4 else t) for back in (3, 1, 4, 2)])


@check("previous_token_score")
def check_previous_token_score(extended: bool = False, seed: int = 0):
    ideal = _designed_previous_heads()                                                       # (2, 6, 6)
    yield from _score(ideal, (), "两个设计好的头（0：每一行只看前一个位置；1：每一行只看自己），T = 6",
                      previous_token_truth(ideal))
    cases = PREV_CASES + (hidden_prev_cases() if extended else [])
    for i, (lead, T) in enumerate(cases):
        pattern = causal_pattern(lead, T, seed * 101 + i)
        what = f"形状 {tuple(pattern.shape)} 的随机因果注意力权重"
        yield from _score(pattern, (), what, previous_token_truth(pattern))


@check("induction_score")
def check_induction_score(extended: bool = False, seed: int = 0):
    ideal = _designed_induction_heads()                                                      # (4, 10, 10)
    yield from _score(ideal, (4,), "四个设计好的头（从 t = 4 起每一行只看一个位置：0 看 t − 3，1 看 t − 1，2 看 t − 4，"
                                   "3 看 t − 2），T = 10，period = 4", induction_truth(ideal, 4))
    cases = INDUCTION_CASES + (hidden_induction_cases() if extended else [])
    for i, (lead, T, period) in enumerate(cases):
        pattern = causal_pattern(lead, T, seed * 103 + i)
        what = f"形状 {tuple(pattern.shape)} 的随机因果注意力权重，period = {period}"
        yield from _score(pattern, (period,), what, induction_truth(pattern, period))


# --- head_ablation_losses -------------------------------------------------------------------------

def model_sizes(V: int, C: int, H: int, L: int, context: int, base: float = 10000.0) -> dict:
    """The fields of section 10's ModelConfig for an AttentionOnlyLM: every head its own K/V, no FFN, untied."""
    return dict(vocab_size=V, context_length=context, n_embed=C, n_head=H, n_kv_head=H, n_layer=L, ffn_hidden=0,
                rope_base=base, tie_embeddings=False)


def given_model(sizes: dict, weights: dict):
    """The section's given AttentionOnlyLM with these sizes and weights, in eval mode (built in the kernel:
    the class edition ships the given code too)."""
    from utils.reference.s10_decoder_only_model import ModelConfig
    from utils.reference.s12_what_heads_learn import AttentionOnlyLM

    from .common import load_weights
    model = AttentionOnlyLM(ModelConfig(**sizes))
    load_weights(model, weights, code="wrong")
    return model.eval()


@recipe
def model_weights(sizes: dict, seed: int) -> dict[str, torch.Tensor]:
    """Check-made weights of AttentionOnlyLM by the given code's names. The embeddings are N(0, 1) and every
    head's output projection is large enough that switching one head off moves the loss visibly."""
    C, V = sizes["n_embed"], sizes["vocab_size"]
    shapes = {"tok_emb.weight": (V, C), "norm.weight": (C,), "lm_head.weight": (V, C)}
    for i in range(sizes["n_layer"]):
        shapes[f"blocks.{i}.norm1.weight"] = (C,)
        shapes |= {f"blocks.{i}.attn.{name}_proj.weight": (C, C) for name in "qkvo"}
    weights = fixed_weights(shapes, seed)
    weights["tok_emb.weight"] = weights["tok_emb.weight"] * math.sqrt(C)
    for name in weights:
        if name.endswith(("q_proj.weight", "k_proj.weight")):
            weights[name] = weights[name] * 2.0                                    # sharper patterns
        if name.endswith("o_proj.weight"):
            weights[name] = weights[name] * 3.0
    return weights


def repeating(B: int, T: int, period: int, V: int, seed: int) -> torch.Tensor:
    """(B, T) random tokens that repeat with `period` (token t = token t - period), by the given code's
    repeated_tokens."""
    from utils.reference.s12_what_heads_learn import repeated_tokens
    return repeated_tokens(B, period, V, torch.Generator().manual_seed(seed), length=T)


@oracle
def model64(w, sizes, tokens, mask=None, zero=None):
    """AttentionOnlyLM in float64: the logits (B, T, V). mask (L, H) multiplies each head's output before
    o_proj. zero = (where, layer, head) is a misconception's ablation instead: "after-proj" zeroes the
    channels head·Dh … (head+1)·Dh of the layer's attention output after o_proj, "residual" the same
    channels of the residual stream after the block, "residual-all" the whole residual stream there."""
    B, T = tokens.shape
    C, H, L = sizes["n_embed"], sizes["n_head"], sizes["n_layer"]
    Dh = C // H
    angles = math64.rope_angles(T, Dh, sizes["rope_base"])                         # (T, Dh/2)
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    x = w["tok_emb.weight"].double()[tokens]                                       # (B, T, C)
    for i in range(L):
        p = f"blocks.{i}."
        h = math64.rms_norm(x, w[p + "norm1.weight"].double(), EPS)

        def heads(name):
            return (h @ w[p + f"attn.{name}_proj.weight"].double().T).view(B, T, H, Dh).transpose(1, 2)

        q, k, v = math64.rotate_half(heads("q"), angles), math64.rotate_half(heads("k"), angles), heads("v")
        scores = (q @ k.transpose(-2, -1) / math.sqrt(Dh)).masked_fill(~causal, float("-inf"))
        y = F.softmax(scores, dim=-1) @ v                                          # (B, H, T, Dh)
        if mask is not None:
            y = y * mask[i].double().view(1, H, 1, 1)
        a = y.transpose(1, 2).reshape(B, T, C) @ w[p + "attn.o_proj.weight"].double().T
        if zero is not None and zero[0] == "after-proj" and zero[1] == i:
            a = a.clone()
            a[..., zero[2] * Dh:(zero[2] + 1) * Dh] = 0
        x = x + a
        if zero is not None and zero[0] == "residual" and zero[1] == i:
            x = x.clone()
            x[..., zero[2] * Dh:(zero[2] + 1) * Dh] = 0
        if zero is not None and zero[0] == "residual-all" and zero[1] == i:
            x = torch.zeros_like(x)
    return math64.rms_norm(x, w["norm.weight"].double(), EPS) @ w["lm_head.weight"].double().T


def _ce(logits, tokens, start: int, shift: int = 1):
    """Mean cross-entropy of the logits at positions start - shift … predicting tokens start …."""
    return F.cross_entropy(logits[:, start - shift:logits.size(1) - shift].reshape(-1, logits.size(-1)),
                           tokens[:, start:].reshape(-1))


@oracle
def ablation_truth(w, sizes, tokens, period: int) -> dict:
    """The losses (L, H) of head_ablation_losses ("want"), each misconception's, as (code, tensor) pairs,
    the unablated logits ("logits") and loss ("base")."""
    L, H, P = sizes["n_layer"], sizes["n_head"], period
    heads = [(i, j) for i in range(L) for j in range(H)]

    def mask_of(kind, i, j):
        order = torch.arange(L * H).view(L, H)
        return {"without": (order != i * H + j), "only": (order == i * H + j), "layer-off": order // H != i,
                "so-far": order > i * H + j}[kind].float()            # so-far: the ablations never undone

    def logits_of(kind, i, j):
        if kind in ("residual", "residual-all", "after-proj"):
            return model64(w, sizes, tokens, zero=(kind, i, j))
        return model64(w, sizes, tokens, mask=mask_of(kind, i, j))

    def table(kind, loss=lambda z: _ce(z, tokens, P)):
        source = logits if kind == "without" else {h: logits_of(kind, *h) for h in heads}
        return torch.tensor([loss(source[h]) for h in heads], dtype=torch.float64).view(L, H)

    logits = {h: logits_of("without", *h) for h in heads}
    want = table("without")
    plain = model64(w, sizes, tokens)
    base = _ce(plain, tokens, P)
    wrong = [("ablation-wrong-positions", table("without", lambda z: _ce(z, tokens, 1))),
             ("ablation-wrong-positions", table("without", lambda z: _ce(z, tokens, P + 1))),
             ("ablation-wrong-positions", table("without", lambda z: _ce(z, tokens, P - 1))),
             ("ablation-not-shifted", table("without", lambda z: _ce(z, tokens, P, shift=0))),
             ("ablation-whole-layer", table("layer-off")),
             ("ablation-mask-inverted", table("only")),
             ("ablation-zeroes-residual", table("residual")),
             ("ablation-zeroes-residual", table("residual-all")),
             ("ablation-after-projection", table("after-proj")),
             ("ablation-not-restored", table("so-far")),
             ("ablation-transposed", want.T.contiguous()),
             ("ablation-returns-increase", want - base)]
    return {"want": want, "wrong": wrong, "logits": plain, "base": base}


def _separated(truth: dict) -> bool:
    """Every misconception's table differs from the right one, and the heads' losses differ from each other:
    a check-made model on which each diagnosis can be told apart."""
    want = truth["want"]
    spread = want.max() - want.min() > 0.05 and (want - truth["base"]).abs().min() > 0.02
    return bool(spread) and all(not close(other, want, atol=1e-3, rtol=1e-3) for _, other in truth["wrong"])


def ablation_case(sizes: dict, B: int, T: int, period: int, seed: int):
    """Weights, tokens and the truth of one case: drawn again (a fixed sequence of seeds) until separated.
    The weights and tokens are copies (a candidate run in this process may write into what it is given); the
    truth is only read. Kept for reuse only while the oracles compute (not while they are recorded or replayed)."""
    find = _ablation_case if reusable() else _ablation_case.__wrapped__
    w, tokens, truth = find(tuple(sizes.items()), B, T, period, seed)
    return {name: value.clone() for name, value in w.items()}, tokens.clone(), truth


@functools.lru_cache(maxsize=8)   # a case costs 30 ms (every head ablated, every misconception's table)
def _ablation_case(sizes: tuple, B: int, T: int, period: int, seed: int):
    sizes = dict(sizes)
    for attempt in range(20):
        w = model_weights(sizes, seed * 31 + attempt)
        tokens = repeating(B, T, period, sizes["vocab_size"], seed * 37 + attempt)
        truth = ablation_truth(w, sizes, tokens, period)
        if _separated(truth):
            return w, tokens, truth
    raise AssertionError("no separated case")  # pragma: no cover (the cases are small and random)


# (sizes, B, T, period): n_layer = n_head (a transposed table keeps its shape), n_layer ≠ n_head, T not 2P
ABLATION_CASES = [(model_sizes(11, 16, 2, 2, 16), 2, 10, 5), (model_sizes(13, 24, 3, 2, 16), 3, 11, 4)]


@instructor_only
def hidden_ablation_cases():
    return [(model_sizes(9, 16, 2, 3, 16, base=100.0), 2, 12, 6), (model_sizes(17, 32, 4, 1, 20), 2, 15, 7)]


@check("head_ablation_losses")
def check_head_ablation_losses(extended: bool = False, seed: int = 0):
    cases = ABLATION_CASES + (hidden_ablation_cases() if extended else [])
    for i, (sizes, B, T, period) in enumerate(cases):
        w, tokens, truth = ablation_case(sizes, B, T, period, seed * 1009 + 17 * i)
        L, H = sizes["n_layer"], sizes["n_head"]
        what = f"n_layer={L}, n_head={H}, tokens 形状 {tuple(tokens.shape)}, period={period}"
        model = yield Get(New(f"{HERE}:given_model", (sizes, w)))
        got = require_tensor((yield Call(CANDIDATE, (model, tokens, period), pure=True)), f"{what} 时的返回值")
        if got.shape == (H, L) and L != H and close(got, truth["want"].T, atol=1e-4):
            raise CheckError("ablation-transposed", f"{what}：返回的形状是 {tuple(got.shape)}，"
                                                    f"应为 [n_layer, n_head] = {(L, H)}；数值正是转置后的结果。")
        try:
            expect(got, truth["want"], f"{what} 时的损失表", truth["wrong"], atol=1e-4, rtol=1e-4)
        except CheckError as err:
            if err.code not in GENERIC:
                raise
            raise CheckError(err.code, err.finding, step=(
                f"先不消融：这个模型在重复部分（目标位置 ≥ {period}）的平均交叉熵是 {truth['base'].item():.4f}；"
                f"去掉第 0 层第 0 个头之后应为 {truth['want'][0, 0].item():.4f}。")) from None
        logits, _ = yield Call(model, (tokens,))
        if not close(logits, truth["logits"], atol=1e-4):
            raise CheckError("ablation-model-changed", f"{what}：损失表对了，但调用之后模型本身变了："
                                                       "不带 head_mask 再算一次，logits 与调用之前不同"
                                                       "（留下了钩子，或改了权重没有改回来）。")


# --- quiz_induction_heads -------------------------------------------------------------------------

# The questions, with their numbers (the notebook computes none of the answers before the quiz).
QUIZ_P, QUIZ_T = 10, 23              # induction_key: period and query position
QUIZ_UNIFORM_T = 6                   # uniform_prev_score: a causal head that spreads evenly, T = 6
QUIZ_V, QUIZ_REPEAT = 50, 12         # first_half_loss, repeated_part_floor: V tokens, period 12 (T = 24)
VISIBLE_KEYS = ("induction_key", "uniform_prev_score", "previous_token_layer", "induction_layer")
HIDDEN_KEYS = ("first_half_loss", "repeated_part_floor")
QUIZ_KEYS = VISIBLE_KEYS + HIDDEN_KEYS
QUIZ_TOLERANCE = 5e-3                # a number within 0.5 % (the notebook says so)


@instructor_only
def quiz_truth() -> dict[str, tuple[float, list[tuple[str, float]]]]:
    """Each key's answer and the known wrong answers, with the code of the misconception each shows."""
    t, P, n = QUIZ_T, QUIZ_P, QUIZ_UNIFORM_T
    uniform = sum(1 / (q + 1) for q in range(1, n))                                # weight 1/(t+1) on t - 1
    ln_v = math.log(QUIZ_V)
    return {
        "induction_key": (t - P + 1, [("quiz-induction-off-by-one", t - P),
                                      ("quiz-induction-is-previous-token", t - 1)]),
        "uniform_prev_score": (uniform / (n - 1), [("quiz-score-first-row", uniform / n),
                                                   ("quiz-uniform-not-causal", 1 / n)]),
        "previous_token_layer": (0, [("quiz-heads-wrong-layer", 1)]),
        "induction_layer": (1, [("quiz-induction-one-layer", 0)]),
        "first_half_loss": (ln_v, [("quiz-loss-bits", math.log2(QUIZ_V)), ("quiz-loss-is-probability", 1 / QUIZ_V)]),
        "repeated_part_floor": (ln_v / QUIZ_REPEAT, [
            ("quiz-floor-first-repeat", 0.0),
            ("quiz-floor-whole-sequence", ln_v * QUIZ_REPEAT / (2 * QUIZ_REPEAT - 1))]),
    }


@oracle
def quiz_keys(keys: tuple[str, ...]) -> dict:
    """Digests of the truths of ``keys`` and of the known wrong numbers, as (code, digest) pairs."""
    truth = quiz_truth()
    return {key: {"want": answer_key(truth[key][0], QUIZ_TOLERANCE),
                  "wrong": [(code, answer_key(value, QUIZ_TOLERANCE)) for code, value in truth[key][1]]}
            for key in keys}


def _judge_quiz(key: str, value: float, keys: dict) -> None:
    if matches(value, keys[key]["want"], QUIZ_TOLERANCE):
        return
    for code, wrong in keys[key]["wrong"]:
        if matches(value, wrong, QUIZ_TOLERANCE):
            raise CheckError(code, f"{key} = {value:g} 不对。")
    raise CheckError("wrong", f"{key} = {value:g} 不对：回到题目对应的那一节再算一遍。")


@check("quiz_induction_heads")
def check_quiz_induction_heads(extended: bool = False, seed: int = 0):
    """Nothing random (``seed`` changes nothing); the visible check judges VISIBLE_KEYS, ``extended`` (the
    hidden test) all. Returns the keys left to the hidden test."""
    del seed
    answers = yield from quiz_answers("quiz_induction_heads", QUIZ_KEYS)
    values = {key: quiz_number(answers, key) for key in QUIZ_KEYS}
    judged = QUIZ_KEYS if extended else VISIBLE_KEYS
    keys = quiz_keys(judged)
    for key in judged:
        _judge_quiz(key, values[key], keys)
    return () if extended else HIDDEN_KEYS

