"""Checks of section 03_single_head_attention: attention and Head."""
from __future__ import annotations

import math

import torch
import torch.nn as nn

from .core import CheckError, call, call_pure, check, close, crash_hint, expect, randn, require_tensor
from .s01 import FIXED_TRANSPOSE

# (batch dims, Tq, Tk, D, Dv): Tq != Tk and D != Dv expose swapped roles and the wrong scale.
ATTENTION_CASES = [((2,), 4, 6, 8, 3), ((), 5, 5, 4, 4), ((2, 3), 3, 7, 16, 5)]
ATTENTION_EXTENDED = [((1,), 1, 9, 2, 6), ((3,), 8, 8, 64, 8), ((2, 2), 6, 2, 3, 3)]
# (B, T, n_embed, head_size, context_length): head_size != n_embed, T < context_length.
HEAD_CASES = [(2, 5, 12, 4, 8), (1, 8, 8, 8, 8), (3, 3, 16, 2, 10)]
HEAD_EXTENDED = [(2, 1, 6, 3, 4), (1, 16, 32, 8, 16), (4, 7, 10, 5, 7)]


def softmax_attention(q, k, v, mask=None, scale=None):
    """What attention computes when the scale (default 1/√D) and the mask are applied right."""
    scale = 1 / math.sqrt(q.size(-1)) if scale is None else scale
    scores = q @ k.transpose(-2, -1) * scale                       # (..., Tq, Tk)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)                        # (..., Tq, Tk)
    return weights @ v, weights                                    # (..., Tq, Dv)


def _random_mask(Tq, Tk, seed):
    """A bool mask broadcastable to (..., Tq, Tk) where every query row sees >= 1 key."""
    g = torch.Generator().manual_seed(seed)
    mask = torch.rand(Tq, Tk, generator=g) > 0.4                   # (Tq, Tk)
    mask[torch.arange(Tq), torch.randint(Tk, (Tq,), generator=g)] = True
    return mask


def _as_pair(result, what: str):
    if not isinstance(result, (tuple, list)) or len(result) != 2:
        raise CheckError("wrong-type", f"{what} 应返回二元组 (out, weights)，实际得到 {type(result).__name__}。")
    return result


def _attention_misconceptions(q, k, v, mask, out_want):
    D, Tk = q.size(-1), k.size(-2)
    scores = q @ k.transpose(-2, -1) / math.sqrt(D)                # (..., Tq, Tk)
    items = [
        ("scale-missing", lambda: softmax_attention(q, k, v, mask, scale=1.0)),
        ("scale-by-D", lambda: softmax_attention(q, k, v, mask, scale=1 / D)),
        ("scale-by-value-dim", lambda: softmax_attention(q, k, v, mask, scale=1 / math.sqrt(v.size(-1)))),
        ("scale-by-sqrt-T", lambda: softmax_attention(q, k, v, mask, scale=1 / math.sqrt(Tk))),
        ("softmax-wrong-dim", lambda: _pair(torch.softmax(_masked(scores, mask), dim=-2), v)),
        ("returns-scores", lambda: (out_want, _masked(scores, mask))),
    ]
    if q.shape == k.shape:
        items.append(("qk-swapped", lambda: _pair(torch.softmax(_masked(scores.mT, mask), -1), v)))
    if mask is not None:
        items += [
            ("mask-ignored", lambda: softmax_attention(q, k, v)),
            ("mask-reversed", lambda: _pair(torch.softmax(scores.masked_fill(mask, float("-inf")), -1), v)),
            ("mask-after-softmax", lambda: _pair(torch.softmax(scores, -1) * mask, v)),
            ("mask-fill-zero", lambda: _pair(torch.softmax(scores.masked_fill(~mask, 0.0), -1), v)),
        ]
    return items


def _masked(scores, mask):
    return scores if mask is None else scores.masked_fill(~mask, float("-inf"))


def _pair(weights, v):
    return weights @ v, weights


def _diagnose_pair(out, weights, want_out, want_weights, items, what):
    """Compare (out, weights); on a mismatch name the misconception whose pair matches."""
    if close(out, want_out) and close(weights, want_weights):
        return
    if close(out, want_weights) and close(weights, want_out):
        raise CheckError("outputs-swapped", f"{what}：第一个返回值是注意力权重，第二个才是输出。")
    for code, pair in items:
        wrong_out, wrong_weights = pair()
        if close(weights, wrong_weights) or (close(out, wrong_out) and not close(out, want_out)):
            raise CheckError(code, f"{what}：结果与下面这个误区算出的完全一致。")
    expect(weights, want_weights, f"{what}的注意力权重")
    expect(out, want_out, f"{what}的输出")


@check("attention")
def check_attention(candidate, extended: bool = False, seed: int = 0) -> None:
    cases = ATTENTION_CASES + (ATTENTION_EXTENDED if extended else [])
    for i, (batch, Tq, Tk, D, Dv) in enumerate(cases):
        q = randn(*batch, Tq, D, seed=seed + 10 * i)
        k = randn(*batch, Tk, D, seed=seed + 10 * i + 1)
        v = randn(*batch, Tk, Dv, seed=seed + 10 * i + 2)
        for mask in (None, _random_mask(Tq, Tk, seed + 10 * i + 3)):
            what = (f"q {tuple(q.shape)}、k {tuple(k.shape)}、v {tuple(v.shape)}"
                    + ("、带 mask" if mask is not None else ""))
            args = (q, k, v) if mask is None else (q, k, v, mask)
            with crash_hint(candidate, {"qk-swapped": r"\bk\s*@\s*q\b|matmul\(\s*k\s*,\s*q\b",
                                        "transpose-fixed-dims": FIXED_TRANSPOSE}):
                out, weights = _as_pair(call_pure(candidate, *args), "attention")
            want_out, want_weights = softmax_attention(q, k, v, mask)
            items = _attention_misconceptions(q, k, v, mask, want_out)
            _diagnose_pair(out, weights, want_out, want_weights, items, what)
            sums = require_tensor(weights, "weights").sum(-1)
            if not torch.allclose(sums, torch.ones_like(sums), atol=1e-5):
                raise CheckError("weights-not-normalized", f"{what}：权重每行之和应为 1。")


# --- Head -------------------------------------------------------------------------------------

def _check_head_layout(head, n_embed: int, head_size: int, context_length: int) -> None:
    for name in ("key", "query", "value"):
        layer = getattr(head, name, None)
        if not isinstance(layer, nn.Linear):
            raise CheckError("linear-layout", f"Head 应有属性 {name} = nn.Linear(...)，实际是 {type(layer).__name__}。")
        if (layer.in_features, layer.out_features) != (n_embed, head_size) or layer.bias is not None:
            raise CheckError("linear-layout",
                             f"{name} 应为 nn.Linear({n_embed}, {head_size}, bias=False)，实际是 {layer}。")
    params = dict(head.named_parameters())
    buffers = dict(head.named_buffers())
    if "tril" in params or "tril" not in buffers:
        raise CheckError("tril-not-buffer", "没有找到名为 tril 的缓冲区（head.named_buffers() 里应该有它）。")
    tril = buffers["tril"]
    if tuple(tril.shape) != (context_length, context_length):
        raise CheckError("tril-not-buffer",
                         f"tril 的形状应为 {(context_length, context_length)}，实际是 {tuple(tril.shape)}。")


def _head_reference(head, x: torch.Tensor) -> torch.Tensor:
    """Head's forward computed from its own weights: causal, scaled by 1/√head_size."""
    q, k, v = head.query(x), head.key(x), head.value(x)            # (B, T, head_size)
    T = x.size(-2)
    causal = torch.ones(T, T, dtype=torch.bool).tril()             # (T, T)
    return softmax_attention(q, k, v, causal)[0]


def _head_misconceptions(head, x: torch.Tensor):
    q, k, v = head.query(x), head.key(x), head.value(x)            # (B, T, head_size)
    T, C, hs = x.size(-2), x.size(-1), q.size(-1)
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    scores = q @ k.transpose(-2, -1) / math.sqrt(hs)
    return [
        ("not-causal", lambda: softmax_attention(q, k, v)[0]),
        ("mask-reversed", lambda: torch.softmax(scores.masked_fill(causal, float("-inf")), -1) @ v),
        ("mask-transposed", lambda: torch.softmax(scores.masked_fill(~causal.T, float("-inf")), -1) @ v),
        ("softmax-wrong-dim", lambda: torch.softmax(scores.masked_fill(~causal, float("-inf")), -2) @ v),
        ("mask-after-softmax", lambda: (torch.softmax(scores, -1) * causal) @ v),
        ("mask-fill-zero", lambda: torch.softmax(scores.masked_fill(~causal, 0.0), -1) @ v),
        ("scale-missing", lambda: softmax_attention(q, k, v, causal, scale=1.0)[0]),
        ("scale-by-D", lambda: softmax_attention(q, k, v, causal, scale=1 / hs)[0]),
        ("scale-by-sqrt-C", lambda: softmax_attention(q, k, v, causal, scale=1 / math.sqrt(C))[0]),
        ("qk-swapped", lambda: torch.softmax(_masked(scores.mT, causal), -1) @ v),
    ]


def _call_head(head, x: torch.Tensor, context_length: int):
    """head(x); a crash only when T < context_length means tril was not cut to [:T, :T]."""
    T = x.size(-2)
    try:
        return call_pure(head, x)
    except CheckError as err:
        if err.code != "crashed" or T == context_length:
            raise
        try:
            call(head, randn(1, context_length, x.size(-1), seed=0))
        except CheckError:
            raise err from None
        raise CheckError("tril-not-sliced", f"T={T} < context_length={context_length} 时出错，"
                                            f"T = context_length 时却正常：{err.finding}") from err


@check("Head")
def check_Head(candidate, extended: bool = False, seed: int = 0) -> None:
    cases = HEAD_CASES + (HEAD_EXTENDED if extended else [])
    for i, (B, T, n_embed, head_size, context_length) in enumerate(cases):
        torch.manual_seed(seed + i)
        head = call(candidate, head_size=head_size, n_embed=n_embed, context_length=context_length)
        if not isinstance(head, nn.Module):
            raise CheckError("wrong-type", f"Head(...) 应创建一个 nn.Module，实际是 {type(head).__name__}。")
        _check_head_layout(head, n_embed, head_size, context_length)
        x = randn(B, T, n_embed, seed=seed + 100 + i)
        out = _call_head(head, x, context_length)
        with torch.no_grad():
            want = _head_reference(head, x)
            expect(out, want, f"B={B}, T={T}, n_embed={n_embed}, head_size={head_size} 时 Head 的输出",
                   _head_misconceptions(head, x))
