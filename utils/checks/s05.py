"""Checks of section 05_multi_head_attention."""
from __future__ import annotations

import ast
import inspect
import math
import re
import textwrap

import torch
import torch.nn as nn
import torch.nn.functional as F

from .core import CheckError, call, call_pure, check, crash_hint, expect, randn, quiz_answers
from .s03 import _call_head, _head_reference

# (B, T, n_embed, n_head, context_length): n_head > 1 so that √C and √Dh differ; T < context.
MODULE_CASES = [(2, 5, 12, 3, 8), (1, 7, 16, 4, 7), (3, 1, 8, 2, 4)]
MODULE_EXTENDED = [(2, 6, 32, 8, 10), (1, 9, 6, 6, 9), (4, 3, 20, 5, 3)]
SPLIT_CASES = [(2, 3, 12, 4), (1, 5, 8, 2), (2, 1, 6, 1)]  # (B, T, C, H) with T != H
SPLIT_EXTENDED = [(3, 4, 32, 8), (1, 2, 10, 5)]
_VIEW_CRASH = {"head-size-float": r"(?<!/)/(?!/)\s*(?:self\.)?(?:n_head|H)\b", "view-needs-contiguous": r"\.view\("}
_MODULE_CRASH = {"head-size-float": _VIEW_CRASH["head-size-float"],
                 "concat-wrong-dim": r"cat\(.*dim\s*=\s*(?:0|1|-2|-3)\s*\)"}


def _check_linear(layer, name: str, n_in: int, n_out: int, bias: bool) -> None:
    if not isinstance(layer, nn.Linear):
        raise CheckError("linear-layout", f"应有属性 {name} = nn.Linear(...)，实际是 {type(layer).__name__}。")
    if (layer.in_features, layer.out_features, layer.bias is not None) != (n_in, n_out, bias):
        want = f"nn.Linear({n_in}, {n_out}{'' if bias else ', bias=False'})"
        raise CheckError("linear-layout", f"{name} 应为 {want}，实际是 {layer}。")


def _make(candidate, n_embed, n_head, context_length, seed):
    """The candidate module, its weights initialised from ``seed`` (hidden tests: new weights)."""
    torch.manual_seed(seed * 1009 + n_embed * 31 + n_head)
    with crash_hint(getattr(candidate, "__init__", candidate), _MODULE_CRASH):
        module = call(candidate, n_embed=n_embed, n_head=n_head, context_length=context_length)
    if not isinstance(module, nn.Module):
        raise CheckError("wrong-type", f"应创建一个 nn.Module，实际是 {type(module).__name__}。")
    return module


# --- split_heads / merge_heads ------------------------------------------------------------

def _split(x, n_head):
    B, T, C = x.shape
    return x.view(B, T, n_head, C // n_head).transpose(1, 2)               # (B, H, T, Dh)


def _merge(x):
    B, H, T, Dh = x.shape
    return x.transpose(1, 2).reshape(B, T, H * Dh)                         # (B, T, C)


@check("split_heads")
def check_split_heads(candidate, extended: bool = False, seed: int = 0) -> None:
    for B, T, C, H in SPLIT_CASES + (SPLIT_EXTENDED if extended else []):
        x = torch.arange(B * T * C, dtype=torch.float32).reshape(B, T, C) + seed  # values name their place
        Dh = C // H
        with crash_hint(candidate, _VIEW_CRASH):
            got = call_pure(candidate, x, H)
        expect(got, _split(x, H), f"x 形状 {(B, T, C)}、n_head={H} 时", [
            ("view-without-transpose", x.reshape(B, H, T, Dh)),
            ("heads-strided", x.reshape(B, T, Dh, H).permute(0, 3, 1, 2)),
            ("view-without-transpose", x.reshape(B, T, H, Dh))])


@check("merge_heads")
def check_merge_heads(candidate, extended: bool = False, seed: int = 0) -> None:
    for B, T, C, H in SPLIT_CASES + (SPLIT_EXTENDED if extended else []):
        Dh = C // H
        x = torch.arange(B * H * T * Dh, dtype=torch.float32).reshape(B, H, T, Dh) + seed
        with crash_hint(candidate, _VIEW_CRASH):
            got = call_pure(candidate, x)
        expect(got, _merge(x), f"x 形状 {(B, H, T, Dh)} 时", [
            ("merge-without-transpose", _no_transpose_merge(x)),
            ("heads-strided", x.permute(0, 2, 3, 1).reshape(B, T, H * Dh))])
        round_trip = _merge(_split(_merge(x), H))
        expect(round_trip, _merge(x), "merge(split(merge(x)))")


# --- MultiHeadAttention --------------------------------------------------------------------

def _check_mha_layout(mha, n_embed, n_head) -> None:
    heads = getattr(mha, "heads", None)
    if isinstance(heads, (list, tuple)):
        raise CheckError("heads-plain-list", f"heads 是 {type(heads).__name__}，应为 nn.ModuleList。")
    if not isinstance(heads, nn.ModuleList) or len(heads) != n_head:
        raise CheckError("linear-layout", f"heads 应为 nn.ModuleList，包含 n_head={n_head} 个 Head。")
    for h in heads:
        for name in ("key", "query", "value"):
            layer = getattr(h, name, None)
            if isinstance(layer, nn.Linear) and layer.out_features != n_embed // n_head:
                raise CheckError("head-size",
                                 f"每个头宽应为 n_embed // n_head = {n_embed // n_head}，实际是 {layer.out_features}。")
            _check_linear(layer, f"heads[i].{name}", n_embed, n_embed // n_head, bias=False)
    _check_linear(getattr(mha, "proj", None), "proj", n_embed, n_embed, bias=True)


@check("MultiHeadAttention")
def check_MultiHeadAttention(candidate, extended: bool = False, seed: int = 0) -> None:
    for i, (B, T, C, H, L) in enumerate(MODULE_CASES + (MODULE_EXTENDED if extended else [])):
        mha = _make(candidate, C, H, L, seed)
        _check_mha_layout(mha, C, H)
        x = randn(B, T, C, seed=seed + i)
        with crash_hint(type(mha).forward, _MODULE_CRASH):
            got = _call_head(mha, x, L)
        with torch.no_grad():
            heads = [_head_reference(h, x) for h in mha.heads]              # H × (B, T, Dh)
            concat = torch.cat(heads, dim=-1)                               # (B, T, C)
            want = mha.proj(concat)
            expect(got, want, f"B={B}, T={T}, n_embed={C}, n_head={H} 时的输出", [
                ("proj-missing", concat), ("heads-concat-order", mha.proj(torch.cat(heads[::-1], -1)))])


# --- CausalSelfAttention -------------------------------------------------------------------

def _no_transpose_split(x, n_head):
    B, T, C = x.shape
    return x.reshape(B, n_head, T, C // n_head)


def _no_transpose_merge(x):
    B, H, T, Dh = x.shape
    return x.reshape(B, T, H * Dh)


def _fused_reference(module, x, n_head, scale=None, layout="blocks", causal=True, proj=True,
                     split=_split, merge=_merge, transposed_mask=False):
    """Fused attention from the module's own weights; the options give the misconceptions."""
    B, T, C = x.shape
    qkv = module.qkv(x)                                                     # (B, T, 3C)
    if layout == "blocks":
        q, k, v = (split(t, n_head) for t in qkv.split(C, dim=-1))          # (B, H, T, Dh) each
    else:  # per-head interleaved [q_h | k_h | v_h] for each head
        q, k, v = qkv.view(B, T, n_head, 3, C // n_head).permute(3, 0, 2, 1, 4)
    mask = torch.ones(T, T, dtype=torch.bool).tril() if causal else None
    mask = mask.T if transposed_mask else mask
    scale = 1 / math.sqrt(C // n_head) if scale is None else scale
    y = merge(F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale))  # (B, T, C)
    return module.proj(y) if proj else y


def _loops_over_heads(forward) -> bool:
    """A for/while loop, or a comprehension, in forward whose iteration mentions heads or range()."""
    try:
        source = textwrap.dedent(inspect.getsource(forward))
        tree = ast.parse(source)
    except (OSError, TypeError, SyntaxError):
        return False
    iterations = [n.iter for n in ast.walk(tree) if isinstance(n, (ast.For, ast.comprehension))]
    iterations += [n.test for n in ast.walk(tree) if isinstance(n, ast.While)]
    return any(re.search(r"head|range", ast.get_source_segment(source, it) or "") for it in iterations)


@check("CausalSelfAttention")
def check_CausalSelfAttention(candidate, extended: bool = False, seed: int = 0) -> None:
    for i, (B, T, C, H, L) in enumerate(MODULE_CASES + (MODULE_EXTENDED if extended else [])):
        module = _make(candidate, C, H, L, seed)
        _check_linear(getattr(module, "qkv", None), "qkv", C, 3 * C, bias=False)
        _check_linear(getattr(module, "proj", None), "proj", C, C, bias=True)
        if _loops_over_heads(type(module).forward):
            raise CheckError("loop-over-heads", "forward 里有一个遍历头（或 range(...)）的 for/while 循环或推导式。")
        x = randn(B, T, C, seed=seed + i)
        with crash_hint(type(module).forward, _VIEW_CRASH):
            got = _call_head(module, x, L)
        with torch.no_grad():
            def ref(**options):
                return _fused_reference(module, x, H, **options)
            expect(got, ref(), f"B={B}, T={T}, n_embed={C}, n_head={H} 时的输出", [
                ("scale-by-sqrt-C", lambda: ref(scale=1 / math.sqrt(C))),
                ("scale-missing", lambda: ref(scale=1.0)),
                ("not-causal", lambda: ref(causal=False)),
                ("mask-transposed", lambda: ref(transposed_mask=True)),
                ("qkv-interleaved", lambda: ref(layout="interleaved")),
                ("proj-missing", lambda: ref(proj=False)),
                ("view-without-transpose", lambda: ref(split=_no_transpose_split)),
                ("merge-without-transpose", lambda: ref(merge=_no_transpose_merge)),
            ])


# --- copy_heads_into -----------------------------------------------------------------------

@check("copy_heads_into")
def check_copy_heads_into(candidate, extended: bool = False, seed: int = 0) -> None:
    from ..reference import CausalSelfAttention, MultiHeadAttention
    for i, (B, T, C, H, L) in enumerate(MODULE_CASES + (MODULE_EXTENDED if extended else [])):
        torch.manual_seed(seed + i)
        looped, fused = MultiHeadAttention(C, H, L), CausalSelfAttention(C, H, L)
        before = {k: v.clone() for k, v in looped.state_dict().items()}
        with torch.no_grad():
            result = call(candidate, looped, fused)
        if result is not fused:
            raise CheckError("wrong-type", "copy_heads_into 应返回传进来的 fused 模块本身。")
        if any(not torch.equal(before[k], v) for k, v in looped.state_dict().items()):
            raise CheckError("modified-input", "copy_heads_into 改动了 looped 的权重。")
        stacked = {name: torch.cat([getattr(h, name).weight for h in looped.heads], dim=0)  # (C, C)
                   for name in ("query", "key", "value")}
        want_qkv = torch.cat([stacked["query"], stacked["key"], stacked["value"]], dim=0)  # (3C, C)
        per_head = [torch.cat([h.query.weight, h.key.weight, h.value.weight], dim=0) for h in looped.heads]
        reversed_heads = {name: torch.cat([getattr(h, name).weight for h in looped.heads[::-1]], dim=0)
                          for name in ("query", "key", "value")}
        expect(fused.qkv.weight.detach(), want_qkv.detach(), f"n_embed={C}, n_head={H} 时 fused.qkv.weight", [
            ("copy-qkv-order", torch.cat([stacked["key"], stacked["query"], stacked["value"]], 0)),
            ("copy-qkv-order", torch.cat([stacked["query"], stacked["value"], stacked["key"]], 0)),
            ("qkv-interleaved", torch.cat(per_head, dim=0)),
            ("heads-concat-order", torch.cat([reversed_heads[n] for n in ("query", "key", "value")], 0))])
        if not (torch.equal(fused.proj.weight, looped.proj.weight) and torch.equal(fused.proj.bias, looped.proj.bias)):
            raise CheckError("copy-proj-missing", "fused.proj 的权重或偏置与 looped.proj 不同。")
        x = randn(B, T, C, seed=seed + 100 + i)
        with torch.no_grad():
            expect(fused(x), looped(x), "复制之后 fused(x) 与 looped(x)")


# --- the self-test questions of 第六章 (quiz_head_width, quiz_attention_memory) ---------------

QUIZ_C, QUIZ_H = 64, 8          # self-test 3: n_embed = 64, n_head = 8
QUIZ_FACTORS = (2, 2)           # self-test 4: B doubled, T doubled


def _quiz_answers(candidate, name: str, keys: tuple[str, ...]) -> dict:
    answers = quiz_answers(candidate, name, keys)
    for key in keys:
        value = answers[key]
        if isinstance(value, torch.Tensor) and value.numel() == 1:
            value = value.item()
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value != int(value):
            raise CheckError("wrong-type", f"{key} 的答案应是一个整数，实际是 {answers[key]!r}。")
        answers[key] = int(value)
    return answers


@check("quiz_head_width")
def check_quiz_head_width(candidate, extended: bool = False, seed: int = 0) -> None:
    """One set of answers, nothing random: ``extended`` and ``seed`` change nothing."""
    del extended, seed
    answers = _quiz_answers(candidate, "quiz_head_width", ("head_width", "concat_width"))
    C, H = QUIZ_C, QUIZ_H
    width, concat = answers["head_width"], answers["concat_width"]
    if width != C // H:
        if width == C:
            raise CheckError("quiz-head-width-from-C", f"head_width 不是 {width}。")
        if width == C * H:
            raise CheckError("quiz-head-width-times-H", f"head_width 不是 {width}。")
        raise CheckError("wrong", f"head_width 不是 {width}：n_embed = {C} 要平分给 n_head = {H} 个头。")
    if concat != C:
        if concat == C // H:
            raise CheckError("quiz-concat-width-is-head", f"concat_width 不是 {concat}。")
        if concat == C * H:
            raise CheckError("quiz-concat-width-times-H", f"concat_width 不是 {concat}。")
        raise CheckError("wrong", f"concat_width 不是 {concat}：{H} 个宽 {width} 的头并排是多宽？")


@check("quiz_attention_memory")
def check_quiz_attention_memory(candidate, extended: bool = False, seed: int = 0) -> None:
    """One set of answers, nothing random: ``extended`` and ``seed`` change nothing."""
    del extended, seed
    ratio = _quiz_answers(candidate, "quiz_attention_memory", ("ratio",))["ratio"]
    b, t = QUIZ_FACTORS
    if ratio == b * t * t:
        return
    if ratio == t * t or ratio == b * t:
        raise CheckError("quiz-memory-quadratic-missed", f"ratio 不是 {ratio}。")
    if ratio in (b, t):
        raise CheckError("quiz-memory-linear", f"ratio 不是 {ratio}。")
    if ratio == b * b * t * t:
        raise CheckError("quiz-memory-batch-squared", f"ratio 不是 {ratio}。")
    raise CheckError("wrong", f"ratio 不是 {ratio}：数一数 (B, H, T, T) 里 B 和 T 各出现几次。")
