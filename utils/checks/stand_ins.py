"""Objects a check has the kernel build to hand to the learner's code (protocol.New): they carry no
answer, only what the check chose (a seed, a table, scripted keys), so the class edition ships them."""
from __future__ import annotations

import torch


def generator(seed: int) -> torch.Generator:
    """A torch.Generator seeded with ``seed``: what a check passes where the contract takes ``generator``."""
    return torch.Generator().manual_seed(seed)


def positions(t) -> int:
    """How many positions a tensor handed to a cache adds: its dim 2, if it is [B, Hkv, n, Dh]-like."""
    return t.size(2) if isinstance(t, torch.Tensor) and t.dim() == 4 else 0


class ScriptedCache:
    """A stand-in for a KVCache (07's GroupedQueryAttention, each block of 10's DecoderLM), built from the keys
    and values the check sends (B, Hkv, T, Dh each): update(k, v) records what it was given and hands back the
    check's K/V of every position put in so far; len() counts those positions. It judges nothing: the check
    reads ``received`` back."""

    def __init__(self, keys: torch.Tensor, values: torch.Tensor):
        self.keys, self.values = keys, values
        self.received: list[tuple] = []

    def __len__(self) -> int:
        return sum(positions(k) for k, _ in self.received)

    def update(self, k, v):
        self.received.append(tuple(t.detach().clone() if isinstance(t, torch.Tensor) else t for t in (k, v)))
        end = len(self)
        dtype = k.dtype if isinstance(k, torch.Tensor) else self.keys.dtype
        return self.keys[:, :, :end].to(dtype), self.values[:, :, :end].to(dtype)    # (B, Hkv, S, Dh)


SCRIPTED_CACHE = f"{__name__}:ScriptedCache"


class ScriptedLatentCache:
    """A stand-in for the cache of 13's MultiHeadLatentAttention, built from the latents and rotated shared keys
    the check sends ([B, T, d_latent] and [B, T, d_rope]): update(c, k_rope) records what it was given and hands
    back the check's latents and keys of every position put in so far; len() counts those positions. It judges
    nothing: the check reads ``received`` back."""

    def __init__(self, latents: torch.Tensor, rope_keys: torch.Tensor):
        self.latents, self.rope_keys = latents, rope_keys
        self.received: list[tuple] = []

    def __len__(self) -> int:
        return sum(c.size(1) for c, _ in self.received if isinstance(c, torch.Tensor) and c.dim() == 3)

    def update(self, c, k_rope):
        self.received.append(tuple(t.detach().clone() if isinstance(t, torch.Tensor) else t for t in (c, k_rope)))
        end = len(self)
        dtype = c.dtype if isinstance(c, torch.Tensor) else self.latents.dtype
        return self.latents[:, :end].to(dtype), self.rope_keys[:, :end].to(dtype)   # (B, S, d_latent), (B, S, d_rope)


SCRIPTED_LATENT_CACHE = f"{__name__}:ScriptedLatentCache"
