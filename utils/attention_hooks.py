"""What an attention layer attends to, read from outside it: section 10's attention returns its output, not its
weights. Forward hooks (``watching_attention``) record what each layer's attention is given; ``attention_weights``
recomputes the weights from it with the layer's own ``q_proj`` / ``k_proj``.

Any model with the contract's names works (section 10's ``DecoderLM``, section 12's ``AttentionOnlyLM``):
``blocks[i].attn`` with ``q_proj`` / ``k_proj``, called as ``attn(x, angles, cache=None)``. Section 12's
``attention_patterns`` (a teaching reference) and the attention microscope (utils/widgets.py) use them; this
module imports no UI and no reference: the RoPE to rotate with is passed in.
"""
from __future__ import annotations

import contextlib
import math
from collections.abc import Callable

import torch
import torch.nn.functional as F


@contextlib.contextmanager
def watching_attention(model):
    """Forward hooks on every blocks[i].attn, for the with-block: the dict it yields maps i to (x, angles, cache
    or None) of that layer's last call (what its attention was given: the normed input, the RoPE angles)."""
    seen: dict = {}

    def hook(i):
        def record(_module, args, kwargs, _output):
            cache = kwargs.get("cache", args[2] if len(args) > 2 else None)
            seen[i] = (args[0] if args else kwargs["x"], args[1] if len(args) > 1 else kwargs["angles"],
                       cache if hasattr(cache, "update") else None)
        return record

    handles = [block.attn.register_forward_hook(hook(i), with_kwargs=True) for i, block in enumerate(model.blocks)]
    try:
        yield seen
    finally:
        for handle in handles:
            handle.remove()


def attention_weights(attn, x, angles, rope: Callable, keys=None) -> torch.Tensor:
    """(B, H, T, S): the attention weights of an attention layer with the contract's q_proj / k_proj, recomputed
    from its input x (B, T, C) and the angles (T, Dh/2) of these T positions; ``rope`` rotates as the layer does
    (section 09's apply_rope: (..., T, Dh), (T, Dh/2) -> (..., T, Dh)). The keys are x's own (S = T), or
    ``keys`` (B, Hkv, S, Dh), already rotated, as a KV cache holds them (the T queries are then its last T
    positions). Causal."""
    head_dim = 2 * angles.size(-1)
    n_head, n_kv = attn.q_proj.out_features // head_dim, attn.k_proj.out_features // head_dim
    B, T, _ = x.shape
    q = rope(attn.q_proj(x).view(B, T, n_head, head_dim).transpose(1, 2), angles)           # (B, H, T, Dh)
    if keys is None:
        keys = rope(attn.k_proj(x).view(B, T, n_kv, head_dim).transpose(1, 2), angles)      # (B, Hkv, T, Dh)
    k = keys.repeat_interleave(n_head // n_kv, dim=1)                    # (B, H, S, Dh)
    S = k.size(2)
    scores = q @ k.transpose(-2, -1) / math.sqrt(head_dim)                # (B, H, T, S)
    causal = torch.ones(T, S, dtype=torch.bool, device=x.device).tril(diagonal=S - T)
    return F.softmax(scores.masked_fill(~causal, float("-inf")), dim=-1)
