"""Sections 03–05: every misconception a check names is confirmed on two of its cases (compare.Cases).

For each code an oracle knows, a planted candidate computes exactly that misconception (the oracle's own output):
on every call it gets the code, in the notebook's run, the judge's and the hidden one; computing it only on the
first call where it differs from the right answer (an accidental match on one case), it gets a plain finding
([wrong], or [wrong-shape] / [nan-output] when that is what the one case shows).
So each code is told apart from the right answer on two cases of every run, visible ones included."""
from __future__ import annotations

import pytest
import torch
import torch.nn as nn

from utils.checks import s03, s04, s05
from .planted import Planted, assert_confirmed, first


def _pair(outs, code):
    return outs["want"][::-1] if code == "outputs-swapped" else outs.get(code)


def _linear(n_in, n_out, bias=False):
    return nn.Linear(n_in, n_out, bias=bias)


def head_class(fn):
    class Head(nn.Module):
        def __init__(self, head_size, n_embed, context_length):
            super().__init__()
            self.key, self.query, self.value = (_linear(n_embed, head_size) for _ in range(3))
            self.register_buffer("tril", torch.ones(context_length, context_length).tril())

        def forward(self, x):
            return fn(x, self.query.weight, self.key.weight, self.value.weight)
    return Head


def mha_class(fn):
    class MultiHeadAttention(nn.Module):
        def __init__(self, n_embed, n_head, context_length):
            super().__init__()
            self.heads = nn.ModuleList(head_class(None)(n_embed // n_head, n_embed, context_length)
                                       for _ in range(n_head))
            self.proj, self.n_head = _linear(n_embed, n_embed, bias=True), n_head

        def forward(self, x):
            weights = {name: t for name, t in self.state_dict().items() if not name.endswith("tril")}
            return fn(x, weights, self.n_head)
    return MultiHeadAttention


def fused_class(fn):
    class CausalSelfAttention(nn.Module):
        def __init__(self, n_embed, n_head, context_length):
            del context_length                       # the contract's signature; the mask is the oracle's
            super().__init__()
            self.qkv, self.proj, self.n_head = _linear(n_embed, 3 * n_embed), _linear(n_embed, n_embed, True), n_head

        def forward(self, x):
            return fn(x, self.state_dict(), self.n_head)
    return CausalSelfAttention


def copier(fn):
    def copy_heads_into(looped, fused):
        with torch.no_grad():
            fused.qkv.weight.copy_(fn(looped.state_dict(), fused.n_head))
            fused.proj.load_state_dict(looped.proj.state_dict())
        return fused
    return copy_heads_into


def _lengths_of(key_padding):
    return key_padding.sum(-1).tolist(), key_padding.size(-1)


# exercise -> (its codes, candidate(code, once))
PLANTS = {
    "attention": (["outputs-swapped", "scale-missing", "scale-by-D", "scale-by-value-dim", "scale-by-sqrt-T",
                   "softmax-wrong-dim", "returns-scores", "qk-swapped", "mask-ignored", "mask-reversed",
                   "mask-after-softmax", "mask-fill-zero"],
                  lambda code, once: Planted(lambda q, k, v, mask=None: s03.attention_outputs(q, k, v, mask)["want"],
                                             lambda q, k, v, mask=None: _pair(s03.attention_outputs(q, k, v, mask),
                                                                              code), once)),
    "Head": (["not-causal", "mask-reversed", "mask-transposed", "softmax-wrong-dim", "mask-after-softmax",
              "mask-fill-zero", "scale-missing", "scale-by-D", "scale-by-sqrt-C", "qk-swapped"],
             lambda code, once: head_class(Planted(lambda *a: s03.head_outputs(*a)["want"],
                                                   lambda *a: s03.head_outputs(*a)[code], once))),
    "causal_mask": (["mask-reversed", "mask-transposed", "mask-diagonal-excluded"],
                    lambda code, once: Planted(lambda T: s04.causal_masks(T)["want"],
                                               lambda T: first(s04.causal_masks(T)["misconceptions"],
                                                                             code), once)),
    "padding_mask": (["mask-reversed", "padding-off-by-one", "padding-left"],
                     lambda code, once: Planted(lambda n, T: s04.padding_masks(n.tolist(), T)["want"],
                                                lambda n, T: first(s04.padding_masks(n.tolist(), T)["misconceptions"],
                                                                    code), once)),
    "combine_masks": (["mask-not-broadcastable", "padding-on-query-axis", "mask-combined-with-or"],
                      lambda code, once: Planted(
                          lambda _causal, p: s04.combined_masks(*_lengths_of(p))["want"],
                          lambda _causal, p: first(s04.combined_masks(*_lengths_of(p))["misconceptions"], code),
                          once)),
    "masked_softmax": (["nan-on-fully-masked", "fully-masked-uniform", "mask-after-softmax", "mask-reversed",
                        "mask-fill-zero", "softmax-wrong-dim"],
                       lambda code, once: Planted(
                           lambda s, m: s04.masked_softmax_outputs(s, m)["want"].to(s.dtype),
                           lambda s, m: first(s04.masked_softmax_outputs(s, m)["misconceptions"], code), once)),
    "split_heads": (["view-without-transpose", "heads-strided"],
                    lambda code, once: Planted(lambda x, H: s05.split_outputs(x, H)["want"],
                                               lambda x, H: first(s05.split_outputs(x, H)["wrong"], code), once)),
    "merge_heads": (["merge-without-transpose", "heads-strided"],
                    lambda code, once: Planted(lambda x: s05.merge_outputs(x)["want"],
                                               lambda x: s05.merge_outputs(x)[code], once)),
    "MultiHeadAttention": (["proj-missing", "heads-concat-order"],
                           lambda code, once: mha_class(Planted(lambda *a: s05.mha_outputs(*a)["want"],
                                                                lambda *a: s05.mha_outputs(*a)[code], once))),
    "CausalSelfAttention": (["scale-by-sqrt-C", "scale-missing", "not-causal", "mask-transposed", "qkv-interleaved",
                             "proj-missing", "view-without-transpose", "merge-without-transpose"],
                            lambda code, once: fused_class(Planted(lambda *a: s05.fused_outputs(*a)["want"],
                                                                   lambda *a: s05.fused_outputs(*a)[code], once))),
    "copy_heads_into": (["copy-qkv-order", "qkv-interleaved", "heads-concat-order"],
                        lambda code, once: copier(Planted(lambda w, H: s05.qkv_from_heads(w, H)["want"],
                                                          lambda w, H: first(s05.qkv_from_heads(w, H)["wrong"], code),
                                                          once))),
}
CASES = [(exercise, code) for exercise, (codes, _) in PLANTS.items() for code in codes]


@pytest.mark.parametrize(("exercise", "code"), CASES, ids=[f"{e}-{c}" for e, c in CASES])
def test_a_code_is_named_on_two_cases_and_not_on_one(exercise, code):
    assert_confirmed(exercise, PLANTS[exercise][1], code)
