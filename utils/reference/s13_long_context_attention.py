# Generated from solutions/13_long_context_attention/13_long_context_attention.ipynb
# by `python3 course.py build`. Do not edit: edit the notebook.
"""Reference implementations of section 13_long_context_attention (the solution cells of its notebook)."""
import torch
import torch.nn as nn
import torch.nn.functional as F

__all__ = ['sliding_window_mask', 'RollingKVCache', 'MultiHeadLatentAttention', 'latent_queries',
    'mla_cache_bytes', 'quiz_long_context']


from .s09_rope import apply_rope  # section 09: MultiHeadLatentAttention (§9) rotates with it


def sliding_window_mask(T, window, n_sink=0):
    """Bool [T, T], True = may attend: query t sees key s iff s ≤ t and (s > t − window or s < n_sink)."""
    t = torch.arange(T)[:, None]                              # (T, 1) query positions
    s = torch.arange(T)[None, :]                              # (1, T) key positions
    recent = s > t - window                                   # (T, T) the last `window` keys, itself included
    sink = s < n_sink                                         # (1, T) the first n_sink keys
    return (s <= t) & (recent | sink)                         # (T, T)


class RollingKVCache:
    """A KV cache for sliding-window attention with attention sinks: it keeps the first n_sink positions and
    the last window − 1, at most n_sink + window − 1 positions however long the sequence.

    update(k, v): (B, Hkv, T_new, Dh) each -> (k, v, positions): every entry one of the new queries may see,
    (B, Hkv, S, Dh) each and their absolute positions, LongTensor (S,), ascending. len(cache): positions seen.
    """

    def __init__(self, window, n_sink=0):
        self.window, self.n_sink = window, n_sink
        self.k = self.v = None                                # (B, Hkv, kept, Dh) each
        self.positions = torch.empty(0, dtype=torch.long)     # (kept,) absolute positions of what is kept
        self.seen = 0

    def __len__(self):
        return self.seen

    def update(self, k, v):
        L, T_new = self.seen, k.size(2)
        new = torch.arange(L, L + T_new)                                          # (T_new,)
        if self.k is not None:
            k, v = torch.cat([self.k, k], dim=2), torch.cat([self.v, v], dim=2)  # (B, Hkv, kept + T_new, Dh)
        positions = torch.cat([self.positions, new])                              # (kept + T_new,)
        visible = (positions < self.n_sink) | (positions > L - self.window)       # seen by the query at L
        k, v, positions = k[:, :, visible], v[:, :, visible], positions[visible]
        self.seen = L + T_new
        keep = (positions < self.n_sink) | (positions > self.seen - self.window)  # seen by the next query
        self.k, self.v, self.positions = k[:, :, keep], v[:, :, keep], positions[keep]
        return k, v, positions


class LatentCache:
    """MLA's cache: per position the latent c and the shared rotary key (already rotated); nothing per head.

    update(c, k_rope): (B, T_new, d_latent) and (B, T_new, d_rope) -> everything cached so far, (B, S, ·) each.
    """

    def __init__(self):
        self.latents = self.rope_keys = None                  # (B, S, d_latent), (B, S, d_rope)

    def __len__(self):
        return 0 if self.latents is None else self.latents.size(1)

    def update(self, c, k_rope):
        if self.latents is not None:
            c = torch.cat([self.latents, c], dim=1)           # (B, S, d_latent)
            k_rope = torch.cat([self.rope_keys, k_rope], dim=1)
        self.latents, self.rope_keys = c, k_rope
        return c, k_rope


class MultiHeadLatentAttention(nn.Module):
    """DeepSeek-V2's multi-head latent attention with decoupled RoPE (queries not compressed).

    forward(x, angles, cache=None): x (B, T, n_embed), angles (T, d_rope // 2) of these T positions ->
    (B, T, n_embed). The cache holds per position the latent c (d_latent) and one rotated key (d_rope).
    """

    def __init__(self, n_embed, n_head, head_dim, d_latent, d_rope):
        super().__init__()
        self.n_head, self.head_dim, self.d_rope = n_head, head_dim, d_rope
        self.q_proj = nn.Linear(n_embed, n_head * (head_dim + d_rope), bias=False)
        self.kv_down = nn.Linear(n_embed, d_latent, bias=False)
        self.k_up = nn.Linear(d_latent, n_head * head_dim, bias=False)
        self.v_up = nn.Linear(d_latent, n_head * head_dim, bias=False)
        self.k_rope = nn.Linear(n_embed, d_rope, bias=False)
        self.o_proj = nn.Linear(n_head * head_dim, n_embed, bias=False)

    def forward(self, x, angles, cache=None):
        B, T, _ = x.shape
        H, Dh, R = self.n_head, self.head_dim, self.d_rope
        q = self.q_proj(x).view(B, T, H, Dh + R).transpose(1, 2)          # (B, H, T, Dh+R)
        q_content, q_rope = q.split([Dh, R], dim=-1)                      # (B, H, T, Dh), (B, H, T, R)
        q = torch.cat([q_content, apply_rope(q_rope, angles)], dim=-1)    # (B, H, T, Dh+R)
        c = self.kv_down(x)                                               # (B, T, dc): what is cached
        k_rope = apply_rope(self.k_rope(x), angles)                       # (B, T, R): one key for all heads
        if cache is not None:
            c, k_rope = cache.update(c, k_rope)                           # (B, S, dc), (B, S, R)
        S = c.size(1)
        k = self.k_up(c).view(B, S, H, Dh).transpose(1, 2)                # (B, H, S, Dh)
        v = self.v_up(c).view(B, S, H, Dh).transpose(1, 2)                # (B, H, S, Dh)
        k = torch.cat([k, k_rope[:, None].expand(B, H, S, R)], dim=-1)    # (B, H, S, Dh+R)
        allowed = torch.ones(S, S, dtype=torch.bool, device=x.device).tril()[S - T:]   # (T, S) offset by S − T
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)    # (B, H, T, Dh), scale 1/√(Dh+R)
        return self.o_proj(y.transpose(1, 2).reshape(B, T, H * Dh))       # (B, T, C)


def latent_queries(q_content, k_up_weight):
    """Weight-absorbed queries: q̃_h = W_uk,hᵀ q_h, W_uk,h = rows h·Dh … (h+1)·Dh − 1 of k_up's weight.

    q_content (B, H, T, Dh), k_up_weight (H·Dh, d_latent) -> (B, H, T, d_latent).
    """
    H, Dh = q_content.size(1), q_content.size(-1)
    w = k_up_weight.view(H, Dh, -1)                                       # (H, Dh, dc): W_uk,h = rows of head h
    return q_content @ w                                                  # (B, H, T, Dh) @ (H, Dh, dc) -> (B, H, T, dc)


def mla_cache_bytes(n_layer, d_latent, d_rope, seq_len, batch=1, bytes_per_elem=2):
    """Bytes of an MLA cache: per layer and position, the latent (d_latent) and the shared rotary key (d_rope)."""
    return n_layer * (d_latent + d_rope) * seq_len * batch * bytes_per_elem


def quiz_long_context():
    """Numeric answers of self-test questions 1–5:

    "mla_elems":       question 1, elements per token and layer cached by DeepSeek-V2's MLA
    "mha_elems":       question 2, the same for MHA of the same shape
    "gqa_groups":      question 3, the GQA group count with the same cache
    "receptive_field": question 4, how many positions back Mistral 7B's last layer reaches
    "rolling_kept":    question 5, positions a RollingKVCache(1020, n_sink=4) keeps (graded by the hidden test)
    """
    return {"mla_elems": 512 + 64,                     # d_c + d_R: one latent, one shared rotary key
            "mha_elems": 2 * 128 * 128,                # K and V for every head
            "gqa_groups": (512 + 64) / (2 * 128),      # 2·g·Dh = 576
            "receptive_field": 32 * (4096 - 1),        # ℓ·(W − 1)
            "rolling_kept": 4 + 1020 - 1}              # n_sink + W − 1
