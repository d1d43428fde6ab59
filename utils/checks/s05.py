"""Checks of section 05_multi_head_attention.

The modules under test get check-made weights by the contract's names; what they should compute,
and what each known misconception computes instead, comes from the oracles here (utils/checks/oracle.py).
copy_heads_into works on stand-in modules the kernel builds (looped_stand_in, fused_stand_in); the
check reads their state back and judges it here. Whether CausalSelfAttention.forward loops over heads
is read from the source the kernel reports: a property, not an output.
"""
from __future__ import annotations

import ast
import math
import re

import torch
import torch.nn as nn
import torch.nn.functional as F

from .common import fixed_weights, load, make_module, part, quiz_number, require_linear
from .compare import Cases, places, quiz_answers, randn
from .core import OBSERVED, CheckError, check
from .oracle import answer_key, instructor_only, matches, oracle
from .protocol import CANDIDATE, Attr, Call, Get, New, Source, State
from .s03 import call_module, softmax_attention

# (B, T, n_embed, n_head, context_length): n_head > 1 so that √C and √Dh differ; T < context; head widths 4 and 8
# (a √Dh written as a number fits one of them only).
MODULE_CASES = [(2, 5, 12, 3, 8), (1, 7, 16, 2, 7), (3, 1, 8, 2, 4)]
SPLIT_CASES = [(2, 3, 12, 4), (1, 5, 8, 2), (2, 1, 6, 1)]  # (B, T, C, H) with T != H
QKV = ("query", "key", "value")
HERE = "utils.checks.s05"
_VIEW_CRASH = {"head-size-float": r"(?<!/)/(?!/)\s*(?:self\.)?(?:n_head|H)\b", "view-needs-contiguous": r"\.view\("}
_MODULE_CRASH = {"head-size-float": _VIEW_CRASH["head-size-float"],
                 "concat-wrong-dim": r"cat\(.*dim\s*=\s*(?:0|1|-2|-3)\s*\)"}


@instructor_only
def hidden_module_cases():
    return [(2, 6, 32, 8, 10), (1, 9, 6, 6, 9), (4, 3, 20, 5, 3)]


@instructor_only
def hidden_split_cases():
    return [(3, 4, 32, 8), (1, 2, 10, 5)]


def _make(n_embed, n_head, context_length, seed):
    """(yields) The candidate module built under a fixed torch seed (the check then loads its own weights):
    its handle and layout."""
    return (yield from make_module(CANDIDATE, "这个类", seed=seed * 1009 + n_embed * 31 + n_head, hints=_MODULE_CRASH,
                                   hints_of=Attr(CANDIDATE, "__init__"), n_embed=n_embed, n_head=n_head,
                                   context_length=context_length))


# --- split_heads / merge_heads ------------------------------------------------------------

@oracle
def _split(x, n_head):
    B, T, C = x.shape
    return x.view(B, T, n_head, C // n_head).transpose(1, 2)               # (B, H, T, Dh)


@oracle
def _merge(x):
    B, H, T, Dh = x.shape
    return x.transpose(1, 2).reshape(B, T, H * Dh)                         # (B, T, C)


@oracle
def split_outputs(x, n_head) -> dict:
    """split_heads(x) ("want") and, in order, (code, what the misconception gives)."""
    B, T, C = x.shape
    Dh = C // n_head
    return {"want": _split(x, n_head), "wrong": [
        ("view-without-transpose", x.reshape(B, n_head, T, Dh)),
        ("heads-strided", x.reshape(B, T, Dh, n_head).permute(0, 3, 1, 2)),
        ("view-without-transpose", x.reshape(B, T, n_head, Dh))]}


@oracle
def merge_outputs(x) -> dict:
    """merge_heads(x) ("want") and what each misconception gives."""
    B, H, T, Dh = x.shape
    return {"want": _merge(x), "merge-without-transpose": x.reshape(B, T, H * Dh),
            "heads-strided": x.permute(0, 2, 3, 1).reshape(B, T, H * Dh)}


@check("split_heads")
def check_split_heads(extended: bool = False, seed: int = 0):
    judged = Cases()
    for B, T, C, H in SPLIT_CASES + (hidden_split_cases() if extended else []):
        # values name their place (a small offset: a large one would make places equal within tolerance)
        x = places(B, T, C, offset=seed % 1000)                                            # (B, T, C)
        got = yield from judged.call(Call(CANDIDATE, (x, H), pure=True, hints=_VIEW_CRASH))
        outs = split_outputs(x, H)
        judged.add(f"x 形状 {(B, T, C)}、n_head={H} 时", got, outs["want"], outs["wrong"], inputs={"x": x})
    judged.decide()


@check("merge_heads")
def check_merge_heads(extended: bool = False, seed: int = 0):
    judged = Cases()
    for B, T, C, H in SPLIT_CASES + (hidden_split_cases() if extended else []):
        Dh = C // H
        x = places(B, H, T, Dh, offset=seed % 1000)                                        # (B, H, T, Dh)
        got = yield from judged.call(Call(CANDIDATE, (x,), pure=True, hints=_VIEW_CRASH))
        outs = merge_outputs(x)
        judged.add(f"x 形状 {(B, H, T, Dh)} 时", got, outs.pop("want"), list(outs.items()), inputs={"x": x})
    judged.decide()


# --- MultiHeadAttention --------------------------------------------------------------------

def _check_mha_layout(layout: dict, n_embed: int, n_head: int) -> None:
    heads = part(layout, "heads")
    if heads["type"] in ("list", "tuple"):
        raise CheckError("heads-plain-list", f"heads 是 {heads['type']}，应为 nn.ModuleList。")
    if "module-list" not in heads["kinds"] or heads["fields"].get("len") != n_head:
        raise CheckError("linear-layout", f"heads 应为 nn.ModuleList，包含 n_head={n_head} 个 Head。")
    for h in range(n_head):
        for name in QKV:
            layer = part(layout, f"heads.{h}.{name}")
            if "linear" in layer["kinds"] and layer["fields"]["out_features"] != n_embed // n_head:
                raise CheckError("head-size", f"每个头宽应为 n_embed // n_head = {n_embed // n_head}，"
                                              f"实际是 {layer['fields']['out_features']}。")
            require_linear(layer, f"heads[{h}].{name}", n_embed, n_embed // n_head, bias=False)
    require_linear(part(layout, "proj"), "proj", n_embed, n_embed, bias=True)


def mha_weights(n_embed: int, n_head: int, seed: int) -> dict[str, torch.Tensor]:
    """Check-made weights of a MultiHeadAttention, by the contract's names (nn.Linear layout [out, in])."""
    shapes = {f"heads.{h}.{name}.weight": (n_embed // n_head, n_embed) for h in range(n_head) for name in QKV}
    return fixed_weights({**shapes, "proj.weight": (n_embed, n_embed), "proj.bias": (n_embed,)}, seed)


@oracle
def mha_outputs(x, weights, n_head) -> dict:
    """The looped multi-head output from its weights ("want"), and what each misconception gives, in float64."""
    x, w = x.double(), {name: t.double() for name, t in weights.items()}
    T = x.size(-2)
    causal = torch.ones(T, T, dtype=torch.bool).tril()                     # (T, T)
    heads = [softmax_attention(*(x @ w[f"heads.{h}.{name}.weight"].T for name in QKV), causal)[0]
             for h in range(n_head)]                                       # H × (B, T, Dh)
    concat = torch.cat(heads, dim=-1)                                      # (B, T, C)
    return {"want": concat @ w["proj.weight"].T + w["proj.bias"], "proj-missing": concat,
            "heads-concat-order": torch.cat(heads[::-1], dim=-1) @ w["proj.weight"].T + w["proj.bias"]}


@check("MultiHeadAttention")
def check_MultiHeadAttention(extended: bool = False, seed: int = 0):
    judged = Cases()
    for i, (B, T, C, H, L) in enumerate(MODULE_CASES + (hidden_module_cases() if extended else [])):
        mha, layout = yield from judged.run(_make(C, H, L, seed))
        _check_mha_layout(layout, C, H)
        weights = mha_weights(C, H, seed + i)
        yield from judged.run(load(mha, weights))
        x = randn(B, T, C, seed=seed + i)
        got = yield from judged.run(call_module(mha, x, L, hints=_MODULE_CRASH))
        outs = mha_outputs(x, weights, H)
        judged.add(f"B={B}, T={T}, n_embed={C}, n_head={H} 时的输出", got, outs.pop("want"), list(outs.items()),
                   inputs={"x": x})
    judged.decide()


# --- CausalSelfAttention -------------------------------------------------------------------

def fused_weights(n_embed: int, seed: int) -> dict[str, torch.Tensor]:
    """Check-made weights of a CausalSelfAttention, by the contract's names."""
    return fixed_weights({"qkv.weight": (3 * n_embed, n_embed), "proj.weight": (n_embed, n_embed),
                          "proj.bias": (n_embed,)}, seed)


@oracle
def fused_outputs(x, weights, n_head) -> dict:
    """The fused causal attention's output from its weights ("want"), and what each misconception gives,
    in float64."""
    x, w = x.double(), {name: t.double() for name, t in weights.items()}
    B, T, C = x.shape
    Dh = C // n_head
    qkv = x @ w["qkv.weight"].T                                            # (B, T, 3C)
    blocks = qkv.split(C, dim=-1)                                          # 3 × (B, T, C)
    heads = [_split(t, n_head) for t in blocks]                            # 3 × (B, H, T, Dh)
    causal = torch.ones(T, T, dtype=torch.bool).tril()                     # (T, T)

    def attend(q, k, v, mask=causal, scale=1 / math.sqrt(Dh), merge=_merge, proj=True):
        y = merge(F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale))  # (B, T, C)
        return y @ w["proj.weight"].T + w["proj.bias"] if proj else y

    return {
        "want": attend(*heads),
        "scale-by-sqrt-C": attend(*heads, scale=1 / math.sqrt(C)),
        "scale-missing": attend(*heads, scale=1.0),
        "not-causal": attend(*heads, mask=None),
        "mask-transposed": attend(*heads, mask=causal.T),
        "qkv-interleaved": attend(*qkv.view(B, T, n_head, 3, Dh).permute(3, 0, 2, 1, 4)),  # [q_h | k_h | v_h]
        "proj-missing": attend(*heads, proj=False),
        "view-without-transpose": attend(*(t.reshape(B, n_head, T, Dh) for t in blocks)),
        "merge-without-transpose": attend(*heads, merge=lambda y: y.reshape(B, T, C)),
    }


def _loops_over_heads(source: str | None) -> bool:
    """A for/while loop, or a comprehension, in forward's source whose iteration mentions heads or range()."""
    try:
        tree = ast.parse(source or "")
    except SyntaxError:
        return False
    iterations = [n.iter for n in ast.walk(tree) if isinstance(n, (ast.For, ast.comprehension))]
    iterations += [n.test for n in ast.walk(tree) if isinstance(n, ast.While)]
    return any(re.search(r"head|range", ast.get_source_segment(source, it) or "") for it in iterations)


@check("CausalSelfAttention")
def check_CausalSelfAttention(extended: bool = False, seed: int = 0):
    judged = Cases()
    for i, (B, T, C, H, L) in enumerate(MODULE_CASES + (hidden_module_cases() if extended else [])):
        module, layout = yield from judged.run(_make(C, H, L, seed))
        require_linear(part(layout, "qkv"), "qkv", C, 3 * C, bias=False)
        require_linear(part(layout, "proj"), "proj", C, C, bias=True)
        # forward's source as the kernel reports it: a property the kernel observes, not an output
        if _loops_over_heads((yield Source(Attr(module, "forward")))):
            raise CheckError("loop-over-heads", "forward 里有一个遍历头（或 range(...)）的 for/while 循环或推导式"
                                                f"{OBSERVED}。")
        weights = fused_weights(C, seed + i)
        yield from judged.run(load(module, weights))
        x = randn(B, T, C, seed=seed + i)
        got = yield from judged.run(call_module(module, x, L, hints=_VIEW_CRASH))
        outs = fused_outputs(x, weights, H)
        judged.add(f"B={B}, T={T}, n_embed={C}, n_head={H} 时的输出", got, outs.pop("want"), list(outs.items()),
                   inputs={"x": x})
    judged.decide()


# --- copy_heads_into -----------------------------------------------------------------------

def _stand_in(**parts) -> nn.Module:
    """A module holding only the contract's attributes (tensors as buffers); it has no forward."""
    module = nn.Module()
    for name, value in parts.items():
        if isinstance(value, torch.Tensor):
            module.register_buffer(name, value)
        else:
            setattr(module, name, value)
    return module


def looped_stand_in(C: int, H: int, L: int) -> nn.Module:
    """Built in the kernel for copy_heads_into: a MultiHeadAttention's attributes (heads of
    query/key/value and a tril buffer, proj), no forward; the check loads its weights."""
    heads = nn.ModuleList(_stand_in(**{name: nn.Linear(C, C // H, bias=False) for name in QKV},
                                    tril=torch.ones(L, L).tril()) for _ in range(H))
    return _stand_in(heads=heads, proj=nn.Linear(C, C))


def fused_stand_in(C: int, H: int, L: int) -> nn.Module:
    """Built in the kernel for copy_heads_into: a CausalSelfAttention's attributes, no forward."""
    return _stand_in(n_head=H, qkv=nn.Linear(C, 3 * C, bias=False), proj=nn.Linear(C, C),
                     tril=torch.ones(L, L, dtype=torch.bool).tril())


@oracle
def qkv_from_heads(weights, n_head) -> dict:
    """fused.qkv.weight filled from the looped weights ("want") and, in order, (code, what the misconception
    writes there)."""
    def stacked(name, heads=range(n_head)):
        return torch.cat([weights[f"heads.{h}.{name}.weight"] for h in heads])  # (C, C)

    q, k, v = (stacked(name) for name in QKV)
    per_head = [weights[f"heads.{h}.{name}.weight"] for h in range(n_head) for name in QKV]
    return {"want": torch.cat([q, k, v]), "wrong": [                        # (3C, C) each
        ("copy-qkv-order", torch.cat([k, q, v])), ("copy-qkv-order", torch.cat([q, v, k])),
        ("qkv-interleaved", torch.cat(per_head)),
        ("heads-concat-order", torch.cat([stacked(name, reversed(range(n_head))) for name in QKV]))]}


def _same(state: dict, other: dict, names) -> bool:
    """Whether two state dicts hold equal tensors under every one of ``names``."""
    return all(name in state and name in other and torch.equal(state[name], other[name]) for name in names)


def _check_only_weights_copied(before: dict, after: dict, n_head_after, n_head: int) -> None:
    """fused's mask, n_head and other state are what they were: then fused computes what looped does."""
    kept = [name for name in before if name not in ("qkv.weight", "proj.weight", "proj.bias")]
    changed = [name for name in kept if not _same(after, before, (name,))]
    if changed or n_head_after != n_head:
        raise CheckError("wrong", f"copy_heads_into 改动了 fused 的 {(changed or ['n_head'])[0]}"
                                  "（只应复制 qkv 和 proj 的权重）。")


@check("copy_heads_into")
def check_copy_heads_into(extended: bool = False, seed: int = 0):
    judged, states = Cases(), []          # states: (looped after, fused before, fused after, fused.n_head, H)
    for i, (B, T, C, H, L) in enumerate(MODULE_CASES + (hidden_module_cases() if extended else [])):
        looped = yield Get(New(f"{HERE}:looped_stand_in", (C, H, L)))
        fused = yield Get(New(f"{HERE}:fused_stand_in", (C, H, L)))
        weights = mha_weights(C, H, seed + i)
        yield from load(looped, weights)
        yield from load(fused, fused_weights(C, seed + i + 5000))
        looped_before, before = (yield State(looped)), (yield State(fused))
        result = yield from judged.call(Call(CANDIDATE, (looped, fused)))
        if result != fused:
            raise CheckError("wrong-type", "copy_heads_into 应返回传进来的 fused 模块本身。")
        looped_after = yield State(looped)
        if not _same(looped_after, looped_before, looped_before):
            raise CheckError("modified-input", "copy_heads_into 改动了 looped 的权重。")
        after = yield State(fused)
        outs = qkv_from_heads(weights, H)
        judged.add(f"n_embed={C}, n_head={H} 时 fused.qkv.weight", after.get("qkv.weight"), outs["want"],
                   outs["wrong"])
        states.append((looped_after, before, after, (yield Get(Attr(fused, "n_head"))), H))
    judged.decide()
    for looped_after, before, after, n_head_after, H in states:
        if not _same(after, looped_after, ("proj.weight", "proj.bias")):
            raise CheckError("copy-proj-missing", "fused.proj 的权重或偏置与 looped.proj 不同。")
        _check_only_weights_copied(before, after, n_head_after, H)


# --- the self-test questions of 第六章 (quiz_head_width, quiz_attention_memory) ---------------

QUIZ_C, QUIZ_H = 64, 8          # self-test 3 (the question): n_embed = 64, n_head = 8


@instructor_only
def head_width_answers() -> dict:
    """Per key: the true answer ("want") and the answer each misconception gives."""
    C, H = QUIZ_C, QUIZ_H
    return {"head_width": {"want": C // H, "quiz-head-width-from-C": C, "quiz-head-width-times-H": C * H},
            "concat_width": {"want": C, "quiz-concat-width-is-head": C // H, "quiz-concat-width-times-H": C * H},
            # H heads × 3 bias-free projections of C × C/H; every head C wide would give H times that
            "qkv_params": {"want": 3 * C * C, "quiz-head-width-from-C": 3 * C * C * H}}


@instructor_only
def memory_answers() -> dict:
    """Self-test 4 (B doubled, T doubled) and the hidden question (H doubled, T halved): the true
    ratios and what each misconception says."""
    b, t = 2, 2
    h, t_half = 2, 0.5
    return {"ratio": {"want": b * t * t, "quiz-memory-quadratic-missed": (t * t, b * t),
                      "quiz-memory-linear": (b, t), "quiz-memory-batch-squared": b * b * t * t},
            "ratio_heads": {"want": h * t_half * t_half, "quiz-memory-quadratic-missed": (h * t_half, t_half * t_half),
                            "quiz-memory-linear": (h, t_half)}}


@oracle
def _keys(answers: dict) -> dict:
    """The answers as salted digests: key -> code -> answer_key of its value(s)."""
    def digests(values):
        return sorted({d for value in (values if isinstance(values, tuple) else (values,))
                       for d in answer_key(float(value))})
    return {key: {code: digests(values) for code, values in by_code.items()} for key, by_code in answers.items()}


@oracle
def head_width_keys(keys: tuple[str, ...]) -> dict:
    """Digests of ``keys`` only: asked for the visible ones, the class edition stores nothing of the rest."""
    return _keys({key: head_width_answers()[key] for key in keys})


@oracle
def memory_keys(keys: tuple[str, ...]) -> dict:
    return _keys({key: memory_answers()[key] for key in keys})


def _shown(value: float) -> str:
    return str(int(value)) if value == int(value) else repr(value)


def _numbers(name: str, keys: tuple[str, ...]):
    """(yields) The quiz's answers, each a number."""
    answers = yield from quiz_answers(name, keys)
    return {key: quiz_number(answers, key) for key in keys}


def _judge(value: float, keys: dict, key: str, hint: str) -> None:
    """Quiet if ``value`` is the answer to ``key``; else the code of the misconception it is, or [wrong]."""
    if matches(value, keys[key]["want"]):
        return
    for code, key_of_code in keys[key].items():
        if code != "want" and matches(value, key_of_code):
            raise CheckError(code, f"{key} 不是 {_shown(value)}。")
    raise CheckError("wrong", f"{key} 不是 {_shown(value)}：{hint}")


@check("quiz_head_width")
def check_quiz_head_width(extended: bool = False, seed: int = 0):
    """Nothing random (``seed`` changes nothing): the visible check judges the two widths,
    ``extended`` (the hidden test) also the parameter count."""
    del seed
    answers = yield from _numbers("quiz_head_width", ("head_width", "concat_width", "qkv_params"))
    keys = head_width_keys(("head_width", "concat_width", "qkv_params") if extended else ("head_width", "concat_width"))
    C, H = QUIZ_C, QUIZ_H
    _judge(answers["head_width"], keys, "head_width", f"n_embed = {C} 要平分给 n_head = {H} 个头。")
    _judge(answers["concat_width"], keys, "concat_width", f"{H} 个宽 {_shown(answers['head_width'])} 的头并排是多宽？")
    if not extended:
        return ("qkv_params",)
    _judge(answers["qkv_params"], keys, "qkv_params", "每个头有三个 C × D_h 的投影（§2 的参数量）。")
    return ()


@check("quiz_attention_memory")
def check_quiz_attention_memory(extended: bool = False, seed: int = 0):
    """Nothing random (``seed`` changes nothing): the visible check judges "ratio", ``extended``
    (the hidden test) also "ratio_heads"."""
    del seed
    answers = yield from _numbers("quiz_attention_memory", ("ratio", "ratio_heads"))
    keys = memory_keys(("ratio", "ratio_heads") if extended else ("ratio",))
    _judge(answers["ratio"], keys, "ratio", "数一数 (B, H, T, T) 里 B 和 T 各出现几次。")
    if not extended:
        return ("ratio_heads",)
    _judge(answers["ratio_heads"], keys, "ratio_heads", "数一数 (B, H, T, T) 里 H 和 T 各出现几次。")
    return ()
