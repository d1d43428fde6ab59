"""Sections 06–09: every misconception a check names is confirmed on two of its cases (compare.Cases, counts.Counts).

For each code an oracle knows, a planted candidate computes exactly that misconception (the oracle's own output): on
every call it gets the code, in the notebook's run, the judge's and the hidden one; computing it only on the first call
where it differs from the right answer (an accidental match on one case), it gets a plain finding. The same rule as
tests/test_confirmed_codes.py for 03–05. A planted candidate runs unobserved by the
check's watch (its oracles build what a learner's code may not). Not planted here: a transposed angle table (told by
its shape), the half FLOP count (its code depends on the source), GroupedQueryAttention and KVCache (a cache to play
along with) and Block: their bug banks hold the variants."""
from __future__ import annotations

import pytest
import torch
import torch.nn as nn

from utils.checks import math64, s06, s07, s08, s09
from .planted import Planted, assert_confirmed, first

# what one wrong case shows of itself, beyond a plain finding: a rotation that changes a pair's length
OF_ITSELF = dict.fromkeys(("apply_rope", "apply_rope_interleaved"), frozenset({"rope-not-a-rotation"}))


def _in(t: torch.Tensor | None, like: torch.Tensor):
    return None if t is None else t.to(like.dtype)


# The norms' right answers by the formula (the oracles' "want" is PyTorch's own norm, which the check forbids).
def layer_norm(code, once):
    def right(x, w, b, eps=1e-5):
        return s08._ln(x, w, b, eps).to(x.dtype)

    def wrong(x, w, b, eps=None):
        return _in(first(s08.ln_outputs(x, w, b, 1e-5 if eps is None else eps, eps is not None)["wrong"], code), x)
    return Planted(right, wrong, once)


def rms_class(code, once):
    def right(x, w, eps, _eps_given):
        if x.dtype != torch.float32:                      # a module cast to float16 / bfloat16
            return s08.rms_low_precision_output(x, w, eps)
        return math64.rms_norm(x, w, eps).to(x.dtype)

    def wrong(x, w, eps, eps_given):
        low = x.dtype != torch.float32
        return None if low else _in(first(s08.rms_outputs(x, w, eps, eps_given)["wrong"], code), x)
    plant = Planted(right, wrong, once)

    class RMSNorm(nn.Module):
        def __init__(self, dim, eps=None):
            super().__init__()
            self.eps, self.eps_given = 1e-6 if eps is None else eps, eps is not None
            self.weight = nn.Parameter(torch.ones(dim))

        def forward(self, x):
            return plant(x, self.weight.detach(), self.eps, self.eps_given)
    return RMSNorm


def ffn_class(code, once):
    plant = Planted(lambda x, w: s08.ffn_outputs(x, w)["want"].to(x.dtype),
                    lambda x, w: _in(first(s08.ffn_outputs(x, w)["wrong"], code), x), once)

    class FeedForward(nn.Module):
        def __init__(self, n_embed, hidden=None):
            super().__init__()
            hidden = hidden or 4 * n_embed
            self.fc1, self.fc2 = nn.Linear(n_embed, hidden), nn.Linear(hidden, n_embed)

        def forward(self, x):
            return plant(x, self.state_dict())
    return FeedForward


def swiglu_class(code, once):
    plant = Planted(lambda x, w: s08.swiglu_outputs(x, w)["want"].to(x.dtype),
                    lambda x, w: _in(first(s08.swiglu_outputs(x, w)["wrong"], code), x), once)

    class SwiGLU(nn.Module):
        def __init__(self, dim, hidden):
            super().__init__()
            self.w_gate, self.w_up = nn.Linear(dim, hidden, bias=False), nn.Linear(dim, hidden, bias=False)
            self.w_down = nn.Linear(hidden, dim, bias=False)

        def forward(self, x):
            return plant(x, self.state_dict())
    return SwiGLU


def rope(layout):
    def plant(code, once):
        return Planted(lambda x, a: s09.rope_outputs(x, a, layout)["want"].to(x.dtype),
                       lambda x, a: _in(s09.rope_outputs(x, a, layout).get(code), x), once)
    return plant


def counted(outs, wrong_of):
    """A count's plant: ``outs(*args)`` the oracle's dict, ``wrong_of(outs, code)`` the misconception's count."""
    def plant(code, once):
        return Planted(lambda *a, **k: outs(*a, **k)["want"], lambda *a, **k: wrong_of(outs(*a, **k), code), once)
    return plant


def _kv_bytes(n_layer, n_kv_head, head_dim, seq_len, batch_size=1, bytes_per_elem=2):
    return s07.kv_bytes(n_layer, n_kv_head, head_dim, seq_len, batch_size, bytes_per_elem)


def tiled(code, once):
    def outs(q, k, v, block_size=64, causal=True):
        return s06.tiled_outputs(q, k, v, block_size, causal)
    return Planted(lambda q, *a, **k: outs(q, *a, **k)["want"].to(q.dtype),
                   lambda q, *a, **k: _in(first(outs(q, *a, **k)["wrong"], code), q), once)


NORM_CODES = ["norm-eps-outside-sqrt", "norm-eps-missing", "norm-missing-sqrt", "norm-weight-ignored",
              "norm-wrong-dim", "norm-eps-ignored", "norm-eps-default"]
ROPE_CODES = ["rope-sign-flipped", "rope-cache-layout-mixed", "rope-output-order"]
COUNT_CODES = ["count-missing-batch", "count-missing-heads", "count-T-not-squared"]
# exercise -> (its codes, candidate(code, once))
PLANTS = {
    "tiled_attention": (["scale-missing", "tiled-no-rescale", "tiled-normalized-too-early", "tiled-drops-last-block",
                         "not-causal", "tiled-diagonal-off-by-one", "tiled-block-offset", "causal-flag-ignored"],
                        tiled),
    "repeat_kv": (["repeat-kv-tiled", "repeat-kv-wrong-dim"],
                  lambda code, once: Planted(lambda x, n: s07.repeat_outputs(x, n)["want"],
                                             lambda x, n: first(s07.repeat_outputs(x, n)["wrong"], code), once)),
    "kv_cache_bytes": (["kv-bytes-no-kv-factor", "kv-bytes-no-batch", "kv-bytes-no-dtype", "kv-bytes-no-layers",
                        "kv-bytes-bits"], counted(_kv_bytes, lambda outs, code: first(outs["wrong"], code))),
    "attention_flops": (["flops-mac-as-one", *COUNT_CODES],
                        counted(s06.flops_counts,
                                lambda outs, code: outs["quarter" if code == "flops-mac-as-one" else code])),
    "attention_weights_bytes": (["bytes-missing-dtype-size", "bytes-ignores-dtype", "bytes-as-bits", *COUNT_CODES],
                                counted(lambda B, H, T, dtype=torch.float32: s06.bytes_counts(B, H, T, dtype),
                                        lambda outs, code: first(outs["wrong"], code))),
    "layer_norm": (["layernorm-unbiased-var", "layernorm-no-mean", "layernorm-var-uncentered", "norm-bias-ignored",
                    *NORM_CODES], layer_norm),
    "RMSNorm": (["rmsnorm-subtracts-mean", "rmsnorm-bessel", "rmsnorm-sum-not-mean", *NORM_CODES], rms_class),
    "FeedForward": (["ffn-no-activation", "ffn-wrong-activation", "ffn-activation-after-fc2"], ffn_class),
    "SwiGLU": (["swiglu-silu-on-up", "swiglu-silu-on-product", "swiglu-gate-up-swapped", "swiglu-gelu",
                "swiglu-sigmoid", "swiglu-no-gate", "swiglu-down-per-branch"], swiglu_class),
    "rope_angles": (["rope-exponent-i-over-d", "rope-exponent-sign", "rope-exponent-linspace",
                     "rope-positions-from-one", "rope-base-ignored", "rope-angles-no-position",
                     "rope-exponent-doubled"],
                    lambda code, once: Planted(
                        lambda T, d, base=10000.0: s09.angle_outputs(T, d, base)["want"].float(),
                        lambda T, d, base=10000.0: _in(first(s09.angle_outputs(T, d, base)["wrong"], code),
                                                       torch.empty(0)), once)),
    "apply_rope": (["rope-interleaved-layout", *ROPE_CODES], rope("half")),
    "apply_rope_interleaved": (["rope-half-layout", *ROPE_CODES], rope("interleaved")),
}
CASES = [(exercise, code) for exercise, (codes, _) in PLANTS.items() for code in codes]


@pytest.mark.parametrize(("exercise", "code"), CASES, ids=[f"{e}-{c}" for e, c in CASES])
def test_a_code_is_named_on_two_cases_and_not_on_one(exercise, code):
    assert_confirmed(exercise, PLANTS[exercise][1], code, OF_ITSELF.get(exercise, frozenset()))
