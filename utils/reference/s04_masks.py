# Generated from solutions/04_masks/04_masks.ipynb
# by `python3 course.py build`. Do not edit: edit the notebook.
"""Reference implementations of section 04_masks (the solution cells of its notebook)."""
import torch

__all__ = ['causal_mask', 'padding_mask', 'combine_masks', 'masked_softmax', 'is_causal']


def causal_mask(T, device=None):
    """Bool causal mask [T, T]: True where query t may attend key s, i.e. s <= t (diagonal included)."""
    return torch.ones(T, T, dtype=torch.bool, device=device).tril()  # (T, T), lower triangle incl. diagonal


def padding_mask(lengths, T):
    """Bool key-padding mask [B, T] for right-padded sequences: True at real tokens (position < length)."""
    positions = torch.arange(T, device=lengths.device)  # (T,)
    return positions[None, :] < lengths[:, None]        # (1, T) < (B, 1) -> (B, T)


def combine_masks(causal, key_padding):
    """Combine causal [T, T] and key padding [B, T] into [B, 1, T, T]: t sees s iff causal[t, s] and key_padding[b, s]."""
    return causal[None, None, :, :] & key_padding[:, None, None, :]  # (1, 1, T, T) & (B, 1, 1, T) -> (B, 1, T, T)


def masked_softmax(scores, mask):
    """Softmax over the last dim where mask is True (mask broadcastable to scores).

    Masked entries are exactly 0; a fully masked row gives all zeros (never NaN) and a finite
    gradient; float16/bfloat16 scores are reduced in float32 and returned in their own dtype.
    """
    visible_row = mask.any(dim=-1, keepdim=True)                     # (..., T, 1): at least one key?
    x = scores.float().masked_fill(~mask, float("-inf"))             # reduce in float32
    x = x.masked_fill(~visible_row, 0.0)                             # fully masked rows: finite, no NaN
    weights = torch.softmax(x, dim=-1).masked_fill(~mask, 0.0)       # hidden keys exactly 0
    return weights.to(scores.dtype)


def is_causal(fn, T=8, C=16):
    """True if fn ([B, T, C] -> [B, T, C'], deterministic) never lets position t depend on inputs after t.

    Decided by perturbing the future: for every t, change the inputs after t and check that
    the outputs at positions 0..t stay the same.
    """
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, T, C, generator=g)                            # (B, T, C)
    out = fn(x)                                                      # (B, T, C')
    for t in range(T - 1):
        changed = x.clone()
        changed[:, t + 1:] = torch.randn(2, T - t - 1, C, generator=g)  # new future of t
        if not torch.allclose(fn(changed)[:, : t + 1], out[:, : t + 1], rtol=1e-5, atol=1e-6):
            return False
    return True
