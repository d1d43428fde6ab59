"""Checks of section 03_single_head_attention: attention and Head."""
from __future__ import annotations

import math

import torch

from .common import fixed_weights, load, make_module, part, require_linear
from .compare import Cases, joined, randn, type_name
from .core import CheckError, check
from .oracle import instructor_only, oracle
from .protocol import CANDIDATE, Attr, Call
from .s01 import FIXED_TRANSPOSE

# (batch dims, Tq, Tk, D, Dv): Tq != Tk and D != Dv expose swapped roles and the wrong scale; (1,) is a single
# sequence, the most common real input.
ATTENTION_CASES = [((2,), 4, 6, 8, 3), ((), 5, 5, 4, 4), ((2, 3), 3, 7, 16, 5), ((1,), 4, 3, 2, 5)]
# (B, T, n_embed, head_size, context_length): head_size != n_embed, T < context_length.
HEAD_CASES = [(2, 5, 12, 4, 8), (1, 8, 8, 8, 8), (3, 3, 16, 2, 10)]


@instructor_only
def hidden_attention_cases():
    return [((1,), 1, 9, 2, 6), ((3,), 8, 8, 64, 8), ((2, 2), 6, 2, 3, 3)]


@instructor_only
def hidden_head_cases():
    return [(2, 1, 6, 3, 4), (1, 16, 32, 8, 16), (4, 7, 10, 5, 7)]


@oracle
def softmax_attention(q, k, v, mask=None, scale=None):
    """What attention computes when the scale (default 1/√D) and the mask are applied right (float64)."""
    q, k, v = q.double(), k.double(), v.double()
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
        raise CheckError("wrong-type", f"{what} 应返回二元组 (out, weights)，实际得到 {type_name(result)}。")
    return result


@oracle
def attention_outputs(q, k, v, mask) -> dict:
    """(out, weights) of the right computation ("want") and of each misconception, in float64."""
    q, k, v = q.double(), k.double(), v.double()
    D, Tk = q.size(-1), k.size(-2)
    scores = q @ k.transpose(-2, -1) / math.sqrt(D)                # (..., Tq, Tk)
    want = softmax_attention(q, k, v, mask)
    outs = {
        "want": want,
        "scale-missing": softmax_attention(q, k, v, mask, scale=1.0),
        "scale-by-D": softmax_attention(q, k, v, mask, scale=1 / D),
        "scale-by-value-dim": softmax_attention(q, k, v, mask, scale=1 / math.sqrt(v.size(-1))),
        "scale-by-sqrt-T": softmax_attention(q, k, v, mask, scale=1 / math.sqrt(Tk)),
        "softmax-wrong-dim": _pair(torch.softmax(_masked(scores, mask), dim=-2), v),
        "returns-scores": (want[0], _masked(scores, mask)),
    }
    if q.shape == k.shape:
        outs["qk-swapped"] = _pair(torch.softmax(_masked(scores.mT, mask), -1), v)
    if mask is not None:
        outs["mask-ignored"] = softmax_attention(q, k, v)
        outs["mask-reversed"] = _pair(torch.softmax(scores.masked_fill(mask, float("-inf")), -1), v)
        outs["mask-after-softmax"] = _pair(torch.softmax(scores, -1) * mask, v)
        outs["mask-fill-zero"] = _pair(torch.softmax(scores.masked_fill(~mask, 0.0), -1), v)
    return outs


def _masked(scores, mask):
    return scores if mask is None else scores.masked_fill(~mask, float("-inf"))


def _pair(weights, v):
    return weights @ v, weights


@check("attention")
def check_attention(extended: bool = False, seed: int = 0):
    """Every case's (out, weights) first; then the weights judged over all cases, then the outputs (a code is named
    on two cases, compare.Cases: the weights and the output of one call are one input, so they go to separate
    judgements)."""
    cases = ATTENTION_CASES + (hidden_attention_cases() if extended else [])
    weights_cases, out_cases = Cases(), Cases()
    for i, (batch, Tq, Tk, D, Dv) in enumerate(cases):
        q = randn(*batch, Tq, D, seed=seed + 10 * i)
        k = randn(*batch, Tk, D, seed=seed + 10 * i + 1)
        v = randn(*batch, Tk, Dv, seed=seed + 10 * i + 2)
        for mask in (None, _random_mask(Tq, Tk, seed + 10 * i + 3)):
            what = (f"q {tuple(q.shape)}、k {tuple(k.shape)}、v {tuple(v.shape)}"
                    + ("、带 mask" if mask is not None else ""))
            args = (q, k, v) if mask is None else (q, k, v, mask)
            result = yield from weights_cases.call(Call(CANDIDATE, args, pure=True, hints={
                "qk-swapped": r"\bk\s*@\s*q\b|matmul\(\s*k\s*,\s*q\b", "transpose-fixed-dims": FIXED_TRANSPOSE}))
            out, weights = _as_pair(result, "attention")
            outs = attention_outputs(q, k, v, mask)
            want_out, want_weights = outs.pop("want")
            inputs = dict(zip(("q", "k", "v", "mask"), args))
            weights_cases.add(joined(what, "时的注意力权重"), weights, want_weights,
                              [("outputs-swapped", want_out)] + [(code, pair[1]) for code, pair in outs.items()],
                              inputs=inputs)
            out_cases.add(joined(what, "时的输出"), out, want_out, [(code, pair[0]) for code, pair in outs.items()],
                          inputs=inputs)
    weights_cases.decide()
    out_cases.decide()
    for case in weights_cases.seen:
        sums = case.got.sum(-1)
        if not torch.allclose(sums, torch.ones_like(sums), atol=1e-5):
            raise CheckError("weights-not-normalized", joined(case.what, "每行之和应为 1。"))


# --- Head -------------------------------------------------------------------------------------

def _check_head_layout(layout: dict, n_embed: int, head_size: int, context_length: int) -> None:
    for name in ("key", "query", "value"):
        require_linear(part(layout, name), name, n_embed, head_size, bias=False)
    if "tril" in layout["params"] or "tril" not in layout["buffers"]:
        raise CheckError("tril-not-buffer", "没有找到名为 tril 的缓冲区（head.named_buffers() 里应该有它）。")
    shape = layout["buffers"]["tril"]["shape"]
    if tuple(shape) != (context_length, context_length):
        raise CheckError("tril-not-buffer",
                         f"tril 的形状应为 {(context_length, context_length)}，实际是 {tuple(shape)}。")


def head_weights(n_embed: int, head_size: int, seed: int) -> dict[str, torch.Tensor]:
    """Check-made weights of a Head, by the contract's names (nn.Linear layout [out, in])."""
    return fixed_weights({f"{name}.weight": (head_size, n_embed) for name in ("query", "key", "value")}, seed)


@oracle
def head_outputs(x, w_q, w_k, w_v) -> dict:
    """A causal head's output from its weights ("want"), and what each misconception gives, in float64."""
    x = x.double()
    q, k, v = x @ w_q.double().T, x @ w_k.double().T, x @ w_v.double().T  # (B, T, head_size)
    T, C, hs = x.size(-2), x.size(-1), q.size(-1)
    causal = torch.ones(T, T, dtype=torch.bool).tril()                     # (T, T)
    scores = q @ k.transpose(-2, -1) / math.sqrt(hs)                       # (B, T, T)
    return {
        "want": softmax_attention(q, k, v, causal)[0],
        "not-causal": softmax_attention(q, k, v)[0],
        "mask-reversed": torch.softmax(scores.masked_fill(causal, float("-inf")), -1) @ v,
        "mask-transposed": torch.softmax(scores.masked_fill(~causal.T, float("-inf")), -1) @ v,
        "softmax-wrong-dim": torch.softmax(scores.masked_fill(~causal, float("-inf")), -2) @ v,
        "mask-after-softmax": (torch.softmax(scores, -1) * causal) @ v,
        "mask-fill-zero": torch.softmax(scores.masked_fill(~causal, 0.0), -1) @ v,
        "scale-missing": softmax_attention(q, k, v, causal, scale=1.0)[0],
        "scale-by-D": softmax_attention(q, k, v, causal, scale=1 / hs)[0],
        "scale-by-sqrt-C": softmax_attention(q, k, v, causal, scale=1 / math.sqrt(C))[0],
        "qk-swapped": torch.softmax(_masked(scores.mT, causal), -1) @ v,
    }


def call_module(module, x: torch.Tensor, context_length: int, hints: dict | None = None):
    """(yields) module(x); a crash only when T < context_length means tril was not cut to [:T, :T] (that
    diagnosis comes before the ``hints`` a crash's source matches)."""
    T = x.size(-2)
    try:
        return (yield Call(module, (x,), pure=True, hints=hints, hints_of=Attr(module, "forward")))
    except CheckError as err:
        if err.code not in ("crashed", *(hints or ())) or T == context_length:
            raise
        try:
            yield Call(module, (randn(1, context_length, x.size(-1), seed=0),))
        except CheckError:
            raise err from None
        raise CheckError("tril-not-sliced", f"T={T} < context_length={context_length} 时出错，"
                                            f"T = context_length 时却正常：{err.finding}") from err


@check("Head")
def check_Head(extended: bool = False, seed: int = 0):
    cases = HEAD_CASES + (hidden_head_cases() if extended else [])
    judged = Cases()
    for i, (B, T, n_embed, head_size, context_length) in enumerate(cases):
        head, layout = yield from judged.run(make_module(CANDIDATE, "Head(...)", seed=seed + i, head_size=head_size,
                                                         n_embed=n_embed, context_length=context_length))
        _check_head_layout(layout, n_embed, head_size, context_length)
        weights = head_weights(n_embed, head_size, seed + i)
        yield from judged.run(load(head, weights))
        x = randn(B, T, n_embed, seed=seed + 100 + i)
        out = yield from judged.run(call_module(head, x, context_length))
        outs = head_outputs(x, *(weights[f"{name}.weight"] for name in ("query", "key", "value")))
        judged.add(f"B={B}, T={T}, n_embed={n_embed}, head_size={head_size} 时 Head 的输出", out, outs.pop("want"),
                   list(outs.items()), inputs={"x": x})
    judged.decide()
