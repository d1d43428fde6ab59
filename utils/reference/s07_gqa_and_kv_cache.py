# Generated from solutions/07_gqa_and_kv_cache/07_gqa_and_kv_cache.ipynb
# by `python3 course.py build`. Do not edit: edit the notebook.
"""Reference implementations of section 07_gqa_and_kv_cache (the solution cells of its notebook)."""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

__all__ = ['repeat_kv', 'KVCache', 'GroupedQueryAttention', 'kv_cache_bytes', 'quiz_kv_cache']


def repeat_kv(x, n_rep):
    """[B, Hkv, T, Dh] -> [B, Hkv·n_rep, T, Dh]; KV head j serves query heads j·n_rep … (j+1)·n_rep − 1."""
    if n_rep == 1:
        return x
    B, Hkv, T, Dh = x.shape
    x = x[:, :, None].expand(B, Hkv, n_rep, T, Dh)       # (B, Hkv, n_rep, T, Dh), a view: no copy yet
    return x.reshape(B, Hkv * n_rep, T, Dh)              # (B, H, T, Dh), heads j·n_rep … (j+1)·n_rep − 1 = KV head j


class KVCache:
    """The keys and values of the positions seen so far, for one attention layer.

    update(k, v): k, v (B, Hkv, T_new, Dh), the new positions, are kept after those already cached;
    returns every position cached so far, (k, v). len(cache): how many positions are cached.
    """

    def __init__(self):
        self.k = None  # (B, Hkv, S, Dh), None while empty
        self.v = None

    def update(self, k, v):
        if self.k is None:
            self.k, self.v = k, v                        # (B, Hkv, T_new, Dh)
        else:
            self.k = torch.cat([self.k, k], dim=2)       # (B, Hkv, S + T_new, Dh)
            self.v = torch.cat([self.v, v], dim=2)
        return self.k, self.v

    def __len__(self):
        return 0 if self.k is None else self.k.size(2)


class GroupedQueryAttention(nn.Module):
    """Causal attention with n_head query heads sharing n_kv_head groups of keys/values.

    n_kv_head = n_head is MHA, n_kv_head = 1 is MQA. forward(x, cache=None): x (B, T, n_embed) ->
    (B, T, n_embed); with a KVCache, the T new positions come after len(cache) cached ones.
    """

    def __init__(self, n_embed, n_head, n_kv_head, context_length):
        super().__init__()
        assert n_embed % n_head == 0 and n_head % n_kv_head == 0, "n_kv_head must divide n_head"
        self.n_head = n_head
        self.n_kv_head = n_kv_head
        self.head_dim = n_embed // n_head
        self.q_proj = nn.Linear(n_embed, n_embed, bias=False)
        self.k_proj = nn.Linear(n_embed, n_kv_head * self.head_dim, bias=False)
        self.v_proj = nn.Linear(n_embed, n_kv_head * self.head_dim, bias=False)
        self.o_proj = nn.Linear(n_embed, n_embed, bias=False)
        self.register_buffer("tril", torch.ones(context_length, context_length, dtype=torch.bool).tril())

    def forward(self, x, cache=None):
        B, T, C = x.shape
        q = self.q_proj(x).view(B, T, self.n_head, self.head_dim).transpose(1, 2)      # (B, H, T, Dh)
        k = self.k_proj(x).view(B, T, self.n_kv_head, self.head_dim).transpose(1, 2)   # (B, Hkv, T, Dh)
        v = self.v_proj(x).view(B, T, self.n_kv_head, self.head_dim).transpose(1, 2)   # (B, Hkv, T, Dh)
        if cache is not None:
            k, v = cache.update(k, v)                                   # (B, Hkv, S, Dh), S = cached + T
        S = k.size(2)
        n_rep = self.n_head // self.n_kv_head
        k, v = repeat_kv(k, n_rep), repeat_kv(v, n_rep)                 # (B, H, S, Dh)
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)    # (B, H, T, S)
        mask = self.tril[S - T:S, :S]                                   # (T, S): new position i sits at S - T + i
        scores = scores.masked_fill(~mask, float("-inf"))
        y = F.softmax(scores, dim=-1) @ v                               # (B, H, T, Dh)
        y = y.transpose(1, 2).reshape(B, T, C)                          # (B, T, C)
        return self.o_proj(y)                                           # (B, T, C)


def kv_cache_bytes(n_layer, n_kv_head, head_dim, seq_len, batch_size=1, bytes_per_elem=2):
    """Bytes of the KV cache: K and V, (batch_size, n_kv_head, seq_len, head_dim) each, in every layer."""
    return 2 * n_layer * n_kv_head * head_dim * seq_len * batch_size * bytes_per_elem


def quiz_kv_cache():
    """Numeric answers of self-test questions 1–4 (GiB = 2**30 bytes): a dict of four numbers,

    "gemma_7b_gib":    question 1 (Gemma-7B, 8192 tokens, batch 1, bfloat16), in GiB
    "batch16_gib":     question 2 (the same with batch 16), in GiB
    "qwen2_shrink":    question 3 (Qwen2-1.5B), how many times larger MHA's cache is
    "mistral_32k_gib": question 4 (Mistral-7B v0.1, 32768 tokens, batch 8, bfloat16), in GiB
    """
    gib = 2 ** 30
    kept = min(32768, 4096)                                         # the sliding window caps what is cached
    return {
        "gemma_7b_gib": 2 * 28 * 16 * 256 * 8192 * 1 * 2 / gib,     # K and V × layers × KV heads × head_dim × S × B × 2 bytes
        "batch16_gib": 2 * 28 * 16 * 256 * 8192 * 16 * 2 / gib,
        "qwen2_shrink": 12 / 2,                                     # MHA cache ÷ GQA cache = H / Hkv
        "mistral_32k_gib": 2 * 32 * 8 * 128 * kept * 8 * 2 / gib,
    }
