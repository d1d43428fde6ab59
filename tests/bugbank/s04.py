"""Bug bank of 04_masks."""
from . import fits_visible, right, wrong

_IS_CAUSAL = '''
def is_causal(fn, T=8, C=16):
    x = torch.randn(2, T, C)
    out = fn(x)
    {body}
'''


def is_causal(body: str) -> str:
    return _IS_CAUSAL.format(body=body)


VARIANTS = [
    # --- causal_mask ---
    right("causal_mask", "tril", """
        def causal_mask(T, device=None):
            return torch.tril(torch.ones(T, T, dtype=torch.bool, device=device))
    """),
    right("causal_mask", "not-triu", """
        def causal_mask(T, device=None):
            return ~torch.ones(T, T, dtype=torch.bool, device=device).triu(1)
    """),
    right("causal_mask", "arange", """
        def causal_mask(T, device=None):
            i = torch.arange(T, device=device)
            return i[:, None] >= i[None, :]
    """),
    right("causal_mask", "float-then-to", """
        def causal_mask(T, device=None):
            return torch.tril(torch.ones(T, T)).bool().to(device)
    """),
    wrong("causal_mask", "triu", "mask-reversed", """
        def causal_mask(T, device=None):
            return torch.triu(torch.ones(T, T, dtype=torch.bool, device=device), diagonal=1)
    """),
    wrong("causal_mask", "triu-diagonal-kept", "mask-transposed", """
        def causal_mask(T, device=None):
            return torch.triu(torch.ones(T, T, dtype=torch.bool, device=device))
    """),
    wrong("causal_mask", "transposed", "mask-transposed", """
        def causal_mask(T, device=None):
            return torch.tril(torch.ones(T, T, dtype=torch.bool, device=device)).T
    """),
    wrong("causal_mask", "tril-minus-1", "mask-diagonal-excluded", """
        def causal_mask(T, device=None):
            return torch.tril(torch.ones(T, T, dtype=torch.bool, device=device), diagonal=-1)
    """),
    wrong("causal_mask", "not-triu-0", "mask-diagonal-excluded", """
        def causal_mask(T, device=None):
            return ~torch.ones(T, T, dtype=torch.bool, device=device).triu(0)
    """),
    fits_visible("causal_mask", "fixed-size-table", "wrong-shape", """
        def causal_mask(T, device=None):
            table = torch.ones(8, 8, dtype=torch.bool, device=device).tril()  # "8 is enough"
            return table[:T, :T]
    """),
    wrong("causal_mask", "float", "mask-not-bool", """
        def causal_mask(T, device=None):
            return torch.tril(torch.ones(T, T, device=device))
    """),
    wrong("causal_mask", "int", "mask-not-bool", """
        def causal_mask(T, device=None):
            return torch.tril(torch.ones(T, T, dtype=torch.long, device=device))
    """),
    wrong("causal_mask", "no-device", "ignores-device", """
        def causal_mask(T, device=None):
            return torch.tril(torch.ones(T, T, dtype=torch.bool))
    """),
    # --- padding_mask ---
    right("padding_mask", "arange", """
        def padding_mask(lengths, T):
            return torch.arange(T)[None, :] < lengths[:, None]
    """),
    right("padding_mask", "loop", """
        def padding_mask(lengths, T):
            mask = torch.zeros(len(lengths), T, dtype=torch.bool)
            for b, n in enumerate(lengths.tolist()):
                mask[b, :n] = True
            return mask
    """),
    wrong("padding_mask", "reversed", "mask-reversed", """
        def padding_mask(lengths, T):
            return torch.arange(T)[None, :] >= lengths[:, None]
    """),
    wrong("padding_mask", "off-by-one", "padding-off-by-one", """
        def padding_mask(lengths, T):
            return torch.arange(T)[None, :] <= lengths[:, None]
    """),
    wrong("padding_mask", "left", "padding-left", """
        def padding_mask(lengths, T):
            return torch.arange(T)[None, :] >= (T - lengths)[:, None]
    """),
    wrong("padding_mask", "float", "mask-not-bool", """
        def padding_mask(lengths, T):
            return (torch.arange(T)[None, :] < lengths[:, None]).float()
    """),
    # --- combine_masks ---
    right("combine_masks", "and-broadcast", """
        def combine_masks(causal, key_padding):
            return causal[None, None] & key_padding[:, None, None, :]
    """),
    right("combine_masks", "logical-and-unsqueeze", """
        def combine_masks(causal, key_padding):
            return torch.logical_and(causal.unsqueeze(0), key_padding.unsqueeze(1)).unsqueeze(1)
    """),
    wrong("combine_masks", "query-axis", "padding-on-query-axis", """
        def combine_masks(causal, key_padding):
            return (causal[None] & key_padding[:, :, None])[:, None]
    """),
    wrong("combine_masks", "no-head-dim", "mask-not-broadcastable", """
        def combine_masks(causal, key_padding):
            return causal[None] & key_padding[:, None, :]
    """),
    wrong("combine_masks", "or", "mask-combined-with-or", """
        def combine_masks(causal, key_padding):
            return (causal[None] | key_padding[:, None, :])[:, None]
    """),
    wrong("combine_masks", "multiply-float", "mask-not-bool", """
        def combine_masks(causal, key_padding):
            return (causal.float()[None] * key_padding.float()[:, None, :])[:, None]
    """),
    # --- masked_softmax ---
    right("masked_softmax", "where-any", """
        def masked_softmax(scores, mask):
            x = scores.float().masked_fill(~mask, float("-inf"))
            w = torch.softmax(x, dim=-1)
            w = torch.where(mask.any(-1, keepdim=True), w, torch.zeros_like(w))
            return w.to(scores.dtype)
    """),
    right("masked_softmax", "nan-to-num", """
        def masked_softmax(scores, mask):
            w = torch.softmax(scores.float().masked_fill(~mask, float("-inf")), dim=-1)
            return torch.nan_to_num(w, nan=0.0).to(scores.dtype)
    """),
    right("masked_softmax", "manual-exp", """
        def masked_softmax(scores, mask):
            x = scores.float().masked_fill(~mask, float("-inf"))
            m = x.amax(-1, keepdim=True)
            m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
            e = torch.exp(x - m)
            return (e / e.sum(-1, keepdim=True).clamp(min=1e-30)).to(scores.dtype)
    """),
    wrong("masked_softmax", "naive-inf", "nan-on-fully-masked", """
        def masked_softmax(scores, mask):
            return torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)
    """),
    wrong("masked_softmax", "minus-1e9", "fully-masked-uniform", """
        def masked_softmax(scores, mask):
            return torch.softmax(scores.float().masked_fill(~mask, -1e9), dim=-1).to(scores.dtype)
    """),
    wrong("masked_softmax", "multiply-after", "mask-after-softmax", """
        def masked_softmax(scores, mask):
            return (torch.softmax(scores.float(), dim=-1) * mask).to(scores.dtype)
    """),
    wrong("masked_softmax", "reversed", "mask-reversed", """
        def masked_softmax(scores, mask):
            w = torch.softmax(scores.float().masked_fill(mask, float("-inf")), dim=-1)
            return w.nan_to_num(0.0).to(scores.dtype)
    """),
    wrong("masked_softmax", "dim-minus-2", "softmax-wrong-dim", """
        def masked_softmax(scores, mask):
            w = torch.softmax(scores.float().masked_fill(~mask, float("-inf")), dim=-2)
            return w.nan_to_num(0.0).to(scores.dtype)
    """),
    wrong("masked_softmax", "additive-then-nan-to-num", "nan-gradient", """
        def masked_softmax(scores, mask):
            additive = torch.zeros(mask.shape).masked_fill(~mask, float("-inf"))  # 0 / -inf
            w = torch.softmax(scores.float() + additive, dim=-1).nan_to_num(0.0)  # NaN only in the graph
            return w.to(scores.dtype)
    """),
    right("masked_softmax", "where-finite-row", """
        def masked_softmax(scores, mask):
            keep = mask.expand(scores.shape)
            any_visible = keep.any(-1, keepdim=True)
            safe = torch.where(keep | ~any_visible, scores.float(), torch.full_like(scores.float(), float("-inf")))
            w = torch.softmax(safe, dim=-1) * keep
            return w.to(scores.dtype)
    """),
    wrong("masked_softmax", "returns-float32", "dtype-not-preserved", """
        def masked_softmax(scores, mask):
            w = torch.softmax(scores.float().masked_fill(~mask, float("-inf")), dim=-1)
            return w.nan_to_num(0.0)
    """),
    # --- is_causal ---
    right("is_causal", "loop-over-t", is_causal("""for t in range(T - 1):
        x2 = x.clone()
        x2[:, t + 1:] = torch.randn_like(x2[:, t + 1:])
        if not torch.allclose(fn(x2)[:, :t + 1], out[:, :t + 1], atol=1e-6):
            return False
    return True""")),
    right("is_causal", "jacobian", """
        def is_causal(fn, T=8, C=16):
            x = torch.randn(1, T, C, dtype=torch.float64)
            J = torch.autograd.functional.jacobian(lambda z: fn(z).sum(-1), x)  # (1, T, 1, T, C)
            dep = J.abs().sum(dim=(0, 2, 4))  # (T_out, T_in)
            return bool((dep.triu(1) == 0).all())
    """),
    right("is_causal", "perturb-one-position-at-a-time", is_causal("""for s in range(1, T):
        x2 = x.clone()
        x2[:, s] += 1.0
        if (fn(x2)[:, :s] - out[:, :s]).abs().max() > 1e-6:
            return False
    return True""")),
    wrong("is_causal", "only-past", "is-causal-false-alarm", is_causal("""for t in range(1, T):
        x2 = x.clone()
        x2[:, :t] = torch.randn_like(x2[:, :t])
        if not torch.allclose(fn(x2)[:, t], out[:, t]):
            return False
    return True""")),
    wrong("is_causal", "only-position-0", "is-causal-missed-leak", is_causal("""x2 = x.clone()
    x2[:, 1:] = torch.randn_like(x2[:, 1:])
    return bool(torch.allclose(fn(x2)[:, 0], out[:, 0]))""")),
    wrong("is_causal", "only-last-position", "is-causal-missed-leak", is_causal("""x2 = x.clone()
    x2[:, -1] = torch.randn_like(x2[:, -1])
    return bool(torch.allclose(fn(x2)[:, :-1], out[:, :-1]))""")),
    wrong("is_causal", "loose-tolerance", "is-causal-missed-leak", is_causal("""for t in range(T - 1):
        x2 = x.clone()
        x2[:, t + 1:] = torch.randn_like(x2[:, t + 1:])
        if not torch.allclose(fn(x2)[:, :t + 1], out[:, :t + 1], atol=0.5):
            return False
    return True""")),
    wrong("is_causal", "compares-everything", "is-causal-false-alarm", is_causal("""for t in range(T - 1):
        x2 = x.clone()
        x2[:, t + 1:] = torch.randn_like(x2[:, t + 1:])
        if not torch.allclose(fn(x2), out):
            return False
    return True""")),
]
