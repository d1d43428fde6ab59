"""Checks of section 12_what_heads_learn.

The two scores are judged on check-made attention patterns (a small hand-written one shown in the hints, a
few designed ones — an ideal previous-token head, ideal induction heads —, random causal rows) against
float64 oracles and the outputs of the known misconceptions. head_ablation_losses runs on the section's
given AttentionOnlyLM, built in the kernel from check-chosen sizes and weights (:func:`given_model`, a dumb
factory: it builds and loads, it judges nothing); the losses are compared with a float64 oracle of the same
model (section 10's DecoderLM without its FFNs).

Every case is run before anything is judged, and a misconception is named only when the candidate's output
agrees with it on every case and is its output on two cases that tell it from the right one (compare.Cases):
a mistake that happens to give a known one's numbers on one designed input is not taken for it.
"""
from __future__ import annotations

import functools
import math

import torch
import torch.nn.functional as F

from . import math64
from .common import fixed_weights, quiz_number
from .compare import Cases, Seen, close, quiz_answers, randn
from .core import CheckError, check
from .oracle import answer_key, instructor_only, matches, oracle, reusable
from .protocol import CANDIDATE, Call, Get, New

EPS = 1e-6   # RMSNorm's default eps (section 08), the given model's norms
HERE = "utils.checks.s12"


def first_value(t: torch.Tensor) -> str:
    return f"{t.flatten()[0].item():.4f}" if t.numel() else "（空）"


def stub_hints(where: str, step: str):
    """A decorator for a check's definition: an untouched stub gets this exercise's hints 2 and 3."""
    def decorate(definition):
        @functools.wraps(definition)
        def checking(extended: bool = False, seed: int = 0):
            try:
                return (yield from definition(extended=extended, seed=seed))
            except CheckError as err:
                if err.code != "not-implemented":
                    raise
                raise CheckError("not-implemented", err.finding, step=step, where=where) from None
        return checking
    return decorate


# --- patterns ------------------------------------------------------------------------------------

def causal_pattern(lead: tuple[int, ...], T: int, seed: int, sharpness: float = 2.0) -> torch.Tensor:
    """Random attention weights (*lead, T, T): rows sum to 1, zero above the diagonal."""
    scores = randn(*lead, T, T, seed=seed, scale=sharpness)
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    return F.softmax(scores.masked_fill(~causal, float("-inf")), dim=-1)


def ideal_pattern(T: int, offset_of) -> torch.Tensor:
    """(T, T): row t puts all its weight on key offset_of(t) (clamped to the visible keys 0 … t)."""
    keys = torch.tensor([min(max(offset_of(t), 0), t) for t in range(T)])
    return F.one_hot(keys, T).float()


# Small patterns written out in the hints (rows = queries, each sums to 1): previous-token score 0.6 and,
# with period 2, induction score 0.6.
SHOWN = {"previous_token_score": ((1, 0, 0, 0), (0.6, 0.4, 0, 0), (0.1, 0.7, 0.2, 0), (0.1, 0.2, 0.5, 0.2)),
         "induction_score": ((1, 0, 0, 0, 0), (0.5, 0.5, 0, 0, 0), (0.2, 0.6, 0.2, 0, 0), (0.1, 0.1, 0.7, 0.1, 0),
                             (0.1, 0.1, 0.1, 0.5, 0.2))}
SHOWN_PERIOD = 2


def pattern_of(spec: tuple) -> torch.Tensor:
    """The pattern a case names: ("shown", exercise) (T, T), ("ideal", T, backs, start) (1, len(backs), T, T) —
    head i looks back[i] positions back from row `start` on, at itself before — or ("random", lead, T, seed)."""
    kind, *args = spec
    if kind == "shown":
        return torch.tensor(SHOWN[args[0]], dtype=torch.float32)
    if kind == "ideal":
        T, backs, start = args
        return torch.stack([ideal_pattern(T, lambda t, b=b: t - b if t >= start else t) for b in backs])[None]
    lead, T, seed = args
    return causal_pattern(lead, T, seed)


def shown_text(exercise: str) -> str:
    rows = ", ".join("[" + ", ".join(f"{v:g}" for v in row) + "]" for row in SHOWN[exercise])
    return f"pattern = torch.tensor([{rows}])"


def _wrong_axes(d: torch.Tensor) -> list[torch.Tensor]:
    """d (..., Q) holds one weight per query: its mean over every other axis, whichever side the queries
    sit on (a list stacked along dim 0, then reduced along the wrong one)."""
    front = d.movedim(-1, 0)                                                      # (Q, ...)
    return [d.mean(dim=k) for k in range(d.dim() - 1)] + [front.mean(dim=k) for k in range(1, front.dim())]


def _common_wrong(p: torch.Tensor, picked: torch.Tensor, want: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor,
                  default_dims: torch.Tensor) -> list:
    """The misconceptions both scores share: picked (..., Q) the right cells of p (..., T, T), rows and cols their
    indices; default_dims the right diagonal taken with torch.diagonal's default dims (0, 1)."""
    hard = (p.argmax(dim=-1)[..., rows] == cols).double()                          # (..., Q): argmax on the cell?
    squeezed = [want.squeeze()] + [want.squeeze(k) for k in range(want.dim()) if want.size(k) == 1]
    return ([("score-summed", picked.sum(-1)), ("score-hard-attention", hard.mean(-1)),
             ("score-diagonal-default-dims", default_dims.mean(-1))]
            + [("score-squeezed", s) for s in squeezed]
            + [("score-mean-wrong-axis", m) for m in _wrong_axes(picked)])


@oracle
def previous_token_truth(spec: tuple) -> dict:
    """The previous-token score of the case's pattern (..., T, T) ("want"), and what each misconception gives."""
    p = pattern_of(spec).double()
    T = p.size(-1)
    d = p.diagonal(-1, -2, -1)                                                     # (..., T-1): weight on t-1
    diag = p.diagonal(0, -2, -1)                                                   # (..., T): weight on t itself
    want = d.mean(-1)
    wrong = [("prev-score-self", diag.mean(-1)), ("prev-score-self", diag[..., 1:].mean(-1)),
             ("score-counts-first-row", d.sum(-1) / T),
             ("prev-score-wrong-rows", d[..., :-1].mean(-1)), ("prev-score-wrong-rows", d[..., 1:].mean(-1)),
             ("score-rows-columns-swapped", p.diagonal(1, -2, -1).mean(-1))]
    rows = torch.arange(1, T)
    wrong += _common_wrong(p, d, want, rows, rows - 1, p.diagonal(-1))
    return {"want": want, "wrong": wrong}


@oracle
def induction_truth(spec: tuple, period: int) -> dict:
    """The induction score of the case's pattern (..., T, T) for `period` ("want"), and what each misconception
    gives."""
    p = pattern_of(spec).double()
    T, P = p.size(-1), period
    t = torch.arange(P, T)                                                         # the repeated part's queries
    picked = p[..., t, t - P + 1]                                                  # (..., T-P)
    want = picked.mean(-1)
    wrong = [("induction-off-by-one", p[..., t, t - P].mean(-1)),                  # the earlier occurrence itself
             ("induction-off-by-one", p[..., t, t - P + 2].mean(-1)),              # one past the token after it
             ("induction-wrong-range", p.diagonal(-(P - 1), -2, -1).mean(-1)),     # from t = P - 1
             ("induction-wrong-range", picked[..., :P].mean(-1)),                   # rows P … 2P-1 only
             ("induction-wrong-range", picked[..., :-1].mean(-1)),                  # stops one row short
             ("induction-wrong-range", picked[..., 1:].mean(-1)),                   # from t = P + 1
             ("score-rows-columns-swapped", p.diagonal(P - 1, -2, -1).mean(-1))]
    wrong += [("induction-wrong-count", picked.sum(-1) / n) for n in (T - P + 1, T - P - 1, P, T, T - 1) if n > 0]
    wrong += _common_wrong(p, picked, want, t, t - P + 1, p.diagonal(-(P - 1))[..., 1:])
    return {"want": want, "wrong": wrong}


def _score_step(exercise: str, seen: list[Seen], args_text: str, code: str) -> str:
    """Hint 3 of a score's finding: the small shown pattern (the first case), what it should give and what the
    candidate gave; when that one came out right, a named misconception's own hint 3, else the first case that
    went wrong."""
    shown = seen[0]
    if not shown.right():
        got = (f"你的函数给出形状 {tuple(shown.got.shape)}" if shown.got.shape != shown.want.shape
               else f"你的函数给出 {first_value(shown.got)}")
        return (f"先在这个小例子上手算（行是查询、列是键）：{shown_text(exercise)}{args_text}。应得 0 维张量 "
                f"{first_value(shown.want)}，{got}。写下你取的是哪几格、除以几，再对照公式。")
    if code not in ("wrong", "wrong-shape"):
        return ""
    case = next(case for case in seen if not case.right())
    return (f"小例子 {shown_text(exercise)}{args_text} 你的函数算对了（{first_value(shown.got)}）；错在{case.what}上。"
            "那里和小例子不同的是前导维和 T：把你的每一步在这个形状上打印 .shape，看哪一维被平均或取错了。")


# (leading dims, T): leading dims of every kind — one sequence [1, H] among them —, T > the leading entries
PREV_CASES = [((3,), 7), ((1, 2), 8), ((2, 2, 3), 9)]
# (leading dims, T, period): T = 2P, T not a multiple of P, T > 2P, one sequence [1, H]
INDUCTION_CASES = [((3,), 12, 5), ((), 8, 4), ((1, 3), 11, 4), ((2, 2), 10, 3)]


@instructor_only
def hidden_prev_cases():
    return [((4, 5), 11), ((), 2), ((1, 3, 2), 16)]


@instructor_only
def hidden_induction_cases():
    return [((4,), 14, 7), ((), 6, 5), ((2, 3), 20, 6), ((5,), 9, 2), ((1, 1), 13, 4)]


def _score_cases(exercise: str, designed: tuple, designed_what: str, random_cases: list, seed: int, salt: int):
    """(spec, what, period) of every case: the shown pattern, the designed heads, the random ones."""
    cases = [(("shown", exercise), "提示 3 里那个 4×4 的小例子" if exercise == "previous_token_score"
              else f"提示 3 里那个 5×5 的小例子（period = {SHOWN_PERIOD}）", SHOWN_PERIOD),
             (designed[0], designed_what, designed[1])]
    for i, (lead, T, *period) in enumerate(random_cases):
        what = f"形状 {(*lead, T, T)} 的随机因果注意力权重" + (f"（period = {period[0]}）" if period else "")
        cases.append((("random", lead, T, seed * salt + i), what, period[0] if period else None))
    return cases


def _judge_scores(exercise: str, cases, truth_of):
    """(yields) Every case through the candidate, then the diagnosis."""
    judged = Cases()
    for spec, what, period in cases:
        args = () if exercise == "previous_token_score" else (period,)
        got = yield from judged.call(Call(CANDIDATE, (pattern_of(spec), *args), pure=True))
        truth = truth_of(spec, *args)
        judged.add(what, got, truth["want"], truth["wrong"])
    args_text = "" if exercise == "previous_token_score" else f"，period = {SHOWN_PERIOD}"
    judged.decide(functools.partial(_score_step, exercise, judged.seen, args_text))


@check("previous_token_score")
@stub_hints("12 节 §4「给注意力图打分」：公式 S_prev、逐符号解释、“画成格子”一段和形状追踪。",
            f"先手算一个小例子：{shown_text('previous_token_score')} 的前一位置分数是哪几格的平均？（应得 0.6）"
            "再写下：输入 [..., T, T]，取出这些格子之后是什么形状，对哪一维求平均。")
def check_previous_token_score(extended: bool = False, seed: int = 0):
    designed = (("ideal", 6, (1, 0), 0), None)
    what = "两个设计好的头，形状 (1, 2, 6, 6)（头 0：每一行只看前一个位置，分数应为 1；头 1：每一行只看自己，应为 0）"
    cases = _score_cases("previous_token_score", designed, what,
                         PREV_CASES + (hidden_prev_cases() if extended else []), seed, 101)
    yield from _judge_scores("previous_token_score", cases, previous_token_truth)


@check("induction_score")
@stub_hints("12 节 §4「给注意力图打分」：归纳分数的公式、逐符号解释（t ≥ P 那一条）和“画成格子”一段。",
            f"先手算一个小例子：{shown_text('induction_score')}，period = {SHOWN_PERIOD}，归纳分数是哪几格的平均？"
            "（应得 0.6）再写下这些格子的行号和列号怎样由 T 和 period 得出。")
def check_induction_score(extended: bool = False, seed: int = 0):
    designed = (("ideal", 10, (3, 1, 4, 2), 4), 4)
    what = ("四个设计好的头，形状 (1, 4, 10, 10)，period = 4（从 t = 4 起每一行只看一个位置：头 0 看 t − 3，"
            "应得 1；头 1 看 t − 1，头 2 看 t − 4，头 3 看 t − 2，都应得 0）")
    cases = _score_cases("induction_score", designed, what,
                         INDUCTION_CASES + (hidden_induction_cases() if extended else []), seed, 103)
    yield from _judge_scores("induction_score", cases, induction_truth)


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


def case_data(sizes: dict, B: int, T: int, period: int, seed: int, attempt: int):
    """The weights and tokens (B, T) of one draw of a case."""
    return (model_weights(sizes, seed * 31 + attempt),
            repeating(B, T, period, sizes["vocab_size"], seed * 37 + attempt))


def model64(w, sizes, tokens, keep=None, off=None):
    """AttentionOnlyLM in float64: the logits (B, T, V). keep (L, H) multiplies each head's output before
    o_proj (the right ablation). off = (where, layer, head) is a misconception's ablation instead: "first-sequence"
    zeroes the head's output in sequence 0 only, "query" its query (its attention turns uniform), "attn-input"
    the channels head·Dh … (head+1)·Dh of the layer's attention input, "after-proj" those channels of its output
    after o_proj, "residual" those of the residual stream after the block, "residual-all" all of it."""
    B, T = tokens.shape
    C, H, L = sizes["n_embed"], sizes["n_head"], sizes["n_layer"]
    Dh = C // H
    where, layer, head = off if off is not None else (None, -1, -1)
    channels = slice(head * Dh, (head + 1) * Dh)
    angles = math64.rope_angles(T, Dh, sizes["rope_base"])                         # (T, Dh/2)
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    x = w["tok_emb.weight"].double()[tokens]                                       # (B, T, C)
    for i in range(L):
        p = f"blocks.{i}."
        h = math64.rms_norm(x, w[p + "norm1.weight"].double(), EPS)
        if where == "attn-input" and layer == i:
            h = h.clone()
            h[..., channels] = 0

        def heads(name):
            return (h @ w[p + f"attn.{name}_proj.weight"].double().T).view(B, T, H, Dh).transpose(1, 2)

        q, k, v = math64.rotate_half(heads("q"), angles), math64.rotate_half(heads("k"), angles), heads("v")
        if where == "query" and layer == i:
            q = q.clone()
            q[:, head] = 0
        scores = (q @ k.transpose(-2, -1) / math.sqrt(Dh)).masked_fill(~causal, float("-inf"))
        y = F.softmax(scores, dim=-1) @ v                                          # (B, H, T, Dh)
        if keep is not None:
            y = y * keep[i].double().view(1, H, 1, 1)
        if where == "first-sequence" and layer == i:
            y = y.clone()
            y[0, head] = 0
        a = y.transpose(1, 2).reshape(B, T, C) @ w[p + "attn.o_proj.weight"].double().T
        if where == "after-proj" and layer == i:
            a = a.clone()
            a[..., channels] = 0
        x = x + a
        if where == "residual" and layer == i:
            x = x.clone()
            x[..., channels] = 0
        if where == "residual-all" and layer == i:
            x = torch.zeros_like(x)
    return math64.rms_norm(x, w["norm.weight"].double(), EPS) @ w["lm_head.weight"].double().T


def _ce(logits, tokens, start: int, shift: int = 1, end: int | None = None):
    """Mean cross-entropy of the logits at positions start - shift … predicting tokens start … end - 1."""
    end = tokens.size(1) if end is None else end
    return F.cross_entropy(logits[:, start - shift:end - shift].reshape(-1, logits.size(-1)),
                           tokens[:, start:end].reshape(-1))


def _tables(w, sizes, tokens, period: int) -> dict:
    """The losses (L, H) of head_ablation_losses ("want"), each misconception's, as (code, tensor) pairs,
    the unablated logits ("logits") and loss ("base")."""
    L, H, P = sizes["n_layer"], sizes["n_head"], period
    heads = [(i, j) for i in range(L) for j in range(H)]

    def keep_of(kind, i, j):
        order = torch.arange(L * H).view(L, H)
        return {"without": (order != i * H + j), "only": (order == i * H + j), "layer-off": order // H != i,
                "so-far": order > i * H + j}[kind].float()            # so-far: the ablations never undone

    def logits_of(kind, i, j, fed=tokens):
        if kind in ("first-sequence", "query", "attn-input", "after-proj", "residual", "residual-all"):
            return model64(w, sizes, fed, off=(kind, i, j))
        return model64(w, sizes, fed, keep=keep_of(kind, i, j))

    def table(kind, loss=lambda z: _ce(z, tokens, P), fed=tokens):
        source = logits if kind == "without" and fed is tokens else {h: logits_of(kind, *h, fed=fed) for h in heads}
        return torch.tensor([loss(source[h]) for h in heads], dtype=torch.float64).view(L, H)

    logits = {h: logits_of("without", *h) for h in heads}
    want = table("without")
    plain = model64(w, sizes, tokens)
    base = _ce(plain, tokens, P)
    late, repeat = tokens[:, P - 1:], tokens[:, P:]                    # what a model fed part of the sequence sees
    wrong = [("ablation-wrong-positions", table("without", lambda z: _ce(z, tokens, 1))),
             ("ablation-wrong-positions", table("without", lambda z: _ce(z, tokens, P + 1))),
             ("ablation-wrong-positions", table("without", lambda z: _ce(z, tokens, P - 1))),
             ("ablation-wrong-positions", table("without", lambda z: _ce(z, tokens, 1, end=P))),   # the first half
             ("ablation-not-shifted", table("without", lambda z: _ce(z, tokens, P, shift=0))),
             ("ablation-softmax-before-ce", table("without", lambda z: _ce(F.softmax(z, dim=-1), tokens, P))),
             ("ablation-partial-input", table("without", lambda z: _ce(z, late, 1), fed=late)),
             ("ablation-partial-input", table("without", lambda z: _ce(z, repeat, 1), fed=repeat)),
             ("ablation-whole-layer", table("layer-off")),
             ("ablation-mask-inverted", table("only")),
             ("ablation-zeroes-query", table("query")),
             ("ablation-zeroes-input", table("attn-input")),
             ("ablation-zeroes-residual", table("residual")),
             ("ablation-zeroes-residual", table("residual-all")),
             ("ablation-after-projection", table("after-proj")),
             ("ablation-not-restored", table("so-far")),
             ("ablation-transposed", want.T.contiguous()),
             ("ablation-returns-increase", want - base)]
    if tokens.size(0) > 1:                                             # with one sequence it is the right ablation
        wrong.append(("ablation-one-sequence", table("first-sequence")))
    return {"want": want, "wrong": wrong, "logits": plain, "base": base}


def _separated(truth: dict) -> bool:
    """Every misconception's table differs from the right one, and the heads' losses differ from each other:
    a check-made model on which each diagnosis can be told apart."""
    want = truth["want"]
    spread = want.max() - want.min() > 0.05 and (want - truth["base"]).abs().min() > 0.02
    return bool(spread) and all(not close(other, want, atol=1e-3, rtol=1e-3) for _, other in truth["wrong"])


@oracle
def ablation_truth(sizes: tuple, B: int, T: int, period: int, seed: int) -> dict:
    """The truth of one case (:func:`_tables`) on the first draw (a fixed sequence of seeds) on which every
    diagnosis can be told apart, with that draw's number ("attempt"). ``sizes``: model_sizes(...)'s items."""
    for attempt in range(20):
        w, tokens = case_data(dict(sizes), B, T, period, seed, attempt)
        truth = _tables(w, dict(sizes), tokens, period)
        if _separated(truth):
            return truth | {"attempt": attempt}
    raise AssertionError("no separated case")  # pragma: no cover (the cases are small and random)


_kept_truth = functools.lru_cache(maxsize=8)(ablation_truth)   # a case costs ~50 ms (every head, every table)


def ablation_case(sizes: dict, B: int, T: int, period: int, seed: int):
    """Weights, tokens (B, T) and truth of one case. The truth is kept for reuse only while the oracles compute
    (not while they are recorded or replayed); it is only read. The weights and tokens are made afresh (a
    candidate run in this process may write into what it is given)."""
    truth = (_kept_truth if reusable() else ablation_truth)(tuple(sizes.items()), B, T, period, seed)
    w, tokens = case_data(sizes, B, T, period, seed, truth["attempt"])
    return w, tokens, truth


# (sizes, B, T, period): n_layer = n_head (a transposed table keeps its shape), n_layer ≠ n_head, T not 2P,
# one sequence (B = 1)
ABLATION_CASES = [(model_sizes(11, 16, 2, 2, 16), 2, 10, 5), (model_sizes(13, 24, 3, 2, 16), 3, 11, 4),
                  (model_sizes(11, 16, 2, 2, 16), 1, 12, 5)]


@instructor_only
def hidden_ablation_cases():
    return [(model_sizes(9, 16, 2, 3, 16, base=100.0), 2, 12, 6), (model_sizes(17, 32, 4, 1, 20), 2, 15, 7)]


def ablation_input(i: int = 0, seed: int = 0):
    """The model, tokens and period of the visible check's case i (seed 0): a learner reproduces the input that a
    hint speaks of."""
    sizes, B, T, period = ABLATION_CASES[i]
    w, tokens, _ = ablation_case(sizes, B, T, period, seed * 1009 + 17 * i)
    return given_model(sizes, w), tokens, period


def _ablation_step(seen: list[Seen], bases: list[torch.Tensor], seed: int, _code: str) -> str:
    """Hint 3: the first case that came out wrong, how to rebuild it, its unablated loss (``bases``, per case) and
    one entry."""
    i, case = next((i, case) for i, case in enumerate(seen) if not case.right())
    want, got = case.want, case.got
    rebuild = ("（在你的 notebook 里重建它：from utils.checks.s12 import ablation_input; "
               f"model, tokens, period = ablation_input({i})）" if seed == 0 and i < len(ABLATION_CASES) else "")
    entry = (f"你的函数给出 {got[0, 0].item():.4f}" if got.dim() == 2 and got.numel()
             else f"你的函数给出形状 {tuple(got.shape)}")
    return (f"用{case.what}一步步对照{rebuild}：不关任何头时，重复部分（目标位置 ≥ period）的平均交叉熵是 "
            f"{bases[i].item():.4f}——先让你的代码不关头时算出这个数；关掉第 0 层头 0 之后应为 "
            f"{want[0, 0].item():.4f}，{entry}。")


@check("head_ablation_losses")
@stub_hints("12 节 §5「消融」：公式 L_rep 与逐符号解释；§2 的 head_mask（1 保留、0 关掉）。",
            "先不关任何头，只算一个数：重复部分（目标位置 j ≥ period）的平均交叉熵，位置 j−1 的 logits 预测 j。"
            "在 §3 的 model 和 eval_tokens 上，它应等于 §3 输出的“重复部分的平均交叉熵”。")
def check_head_ablation_losses(extended: bool = False, seed: int = 0):
    cases = ABLATION_CASES + (hidden_ablation_cases() if extended else [])
    judged, bases = Cases(), []
    for i, (sizes, B, T, period) in enumerate(cases):
        w, tokens, truth = ablation_case(sizes, B, T, period, seed * 1009 + 17 * i)
        L, H = sizes["n_layer"], sizes["n_head"]
        what = f"第 {i} 个输入（n_layer={L}, n_head={H}, tokens 形状 {tuple(tokens.shape)}, period={period}）"
        model = yield Get(New(f"{HERE}:given_model", (sizes, w)))
        got = yield from judged.call(Call(CANDIDATE, (model, tokens, period), pure=True))
        case = judged.add(what, got, truth["want"], truth["wrong"], atol=1e-4, rtol=1e-4)
        bases.append(truth["base"])
        logits, _ = yield Call(model, (tokens,))
        if case.right() and not close(logits, truth["logits"], atol=1e-4):
            raise CheckError("ablation-model-changed", f"{what}：损失表对了，但调用之后模型本身变了："
                                                       "不带 head_mask 再算一次，logits 与调用之前不同"
                                                       "（留下了钩子，或改了权重没有改回来）。")
    judged.decide(functools.partial(_ablation_step, judged.seen, bases, seed))


# --- quiz_induction_heads -------------------------------------------------------------------------

# The questions, with their numbers (the notebook computes none of the answers before the quiz).
QUIZ_P, QUIZ_T = 10, 23              # induction_key: period and query position
QUIZ_UNIFORM_T = 6                   # uniform_prev_score: a causal head that spreads evenly, T = 6
QUIZ_V, QUIZ_REPEAT = 50, 12         # first_half_loss, repeated_part_floor: V tokens, period 12 (T = 24)
LAYER_KEYS = ("previous_token_layer", "induction_layer")
VISIBLE_KEYS = ("induction_key", "uniform_prev_score") + LAYER_KEYS
HIDDEN_KEYS = ("first_half_loss", "repeated_part_floor")
QUIZ_KEYS = VISIBLE_KEYS + HIDDEN_KEYS
QUIZ_TOLERANCE = 5e-3                # a number within 0.5 % (the notebook says so)


@instructor_only
def quiz_truth() -> dict[str, tuple[float, list[tuple[str, float]]]]:
    """Each key's answer and the known wrong answers, with the code of the misconception each shows. The two
    layers are judged together (:func:`_judge_layers`): their entries here are the pair's."""
    t, P, n = QUIZ_T, QUIZ_P, QUIZ_UNIFORM_T
    uniform = sum(1 / (q + 1) for q in range(1, n))                                # weight 1/(t+1) on t - 1
    ln_v = math.log(QUIZ_V)
    return {
        "induction_key": (t - P + 1, [("quiz-induction-off-by-one", t - P),
                                      ("quiz-induction-is-previous-token", t - 1)]),
        "uniform_prev_score": (uniform / (n - 1), [("quiz-score-first-row", uniform / n),
                                                   ("quiz-uniform-not-causal", 1 / n)]),
        "layers": ((0, 1), [("quiz-layers-from-one", (1, 2)), ("quiz-heads-wrong-layer", (1, 0)),
                            ("quiz-induction-one-layer", (0, 0)), ("quiz-induction-one-layer", (1, 1))]),
        "first_half_loss": (ln_v, [("quiz-loss-bits", math.log2(QUIZ_V)), ("quiz-loss-is-probability", 1 / QUIZ_V)]),
        "repeated_part_floor": (ln_v / QUIZ_REPEAT, [
            ("quiz-floor-first-repeat", 0.0),
            ("quiz-floor-whole-sequence", ln_v * QUIZ_REPEAT / (2 * QUIZ_REPEAT - 1))]),
    }


def _digest(value, tolerance: float):
    return tuple(answer_key(v, tolerance) for v in value) if isinstance(value, tuple) else answer_key(value, tolerance)


def _matches(value, key, tolerance: float) -> bool:
    if isinstance(key, tuple):
        return all(matches(v, k, tolerance) for v, k in zip(value, key))
    return matches(value, key, tolerance)


@oracle
def quiz_keys(keys: tuple[str, ...]) -> dict:
    """Digests of the truths of ``keys`` and of the known wrong numbers, as (code, digest) pairs."""
    truth = quiz_truth()
    return {key: {"want": _digest(truth[key][0], QUIZ_TOLERANCE),
                  "wrong": [(code, _digest(value, QUIZ_TOLERANCE)) for code, value in truth[key][1]]}
            for key in keys}


def _judge_quiz(key: str, value, keys: dict, said: str) -> None:
    """``value`` (a number, or the two layers) against its key; ``said`` is how the finding quotes it."""
    if _matches(value, keys[key]["want"], QUIZ_TOLERANCE):
        return
    for code, wrong in keys[key]["wrong"]:
        if _matches(value, wrong, QUIZ_TOLERANCE):
            raise CheckError(code, f"{said} 不对。")
    raise CheckError("wrong", f"{said} 不对：回到题目对应的那一节再算一遍。")


@check("quiz_induction_heads")
@stub_hints("12 节章末的自测练习：六道小题分别对应 §1 与 §4（归纳看哪里、前一位置分数）、"
            "§6（两种头在哪一层）、§3（损失）。",
            "先只填 \"induction_key\"：写出位置 23 的 token 上一次出现在哪里，再想要抄的是它前面还是后面那一格。")
def check_quiz_induction_heads(extended: bool = False, seed: int = 0):
    """Nothing random (``seed`` changes nothing); the visible check judges VISIBLE_KEYS, ``extended`` (the
    hidden test) all. Returns the keys left to the hidden test."""
    del seed
    answers = yield from quiz_answers("quiz_induction_heads", QUIZ_KEYS)
    values = {key: quiz_number(answers, key) for key in QUIZ_KEYS}
    singles = ("induction_key", "uniform_prev_score") + (HIDDEN_KEYS if extended else ())
    keys = quiz_keys(singles + ("layers",))
    for key in singles[:2]:
        _judge_quiz(key, values[key], keys, f"{key} = {values[key]:g}")
    layers = tuple(values[key] for key in LAYER_KEYS)
    _judge_quiz("layers", layers, keys, "、".join(f"{key} = {value:g}" for key, value in zip(LAYER_KEYS, layers)))
    for key in singles[2:]:
        _judge_quiz(key, values[key], keys, f"{key} = {values[key]:g}")
    return () if extended else HIDDEN_KEYS
