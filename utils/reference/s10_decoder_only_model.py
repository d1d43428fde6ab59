# Generated from solutions/10_decoder_only_model/10_decoder_only_model.ipynb
# by `python3 course.py build`. Do not edit: edit the notebook.
"""Reference implementations of section 10_decoder_only_model (the solution cells of its notebook)."""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

__all__ = ['DecoderLM', 'count_parameters', 'generate', 'top_p_filter']


from dataclasses import dataclass

from .s07_gqa_and_kv_cache import KVCache, repeat_kv  # section 07
from .s08_ffn_norm_residual import RMSNorm, SwiGLU  # section 08
from .s09_rope import apply_rope, rope_angles  # section 09


@dataclass
class ModelConfig:
    """Every size of a decoder-only model (a Llama config.json says the same under other names)."""
    vocab_size: int                # V, vocab_size
    context_length: int            # longest sequence the model is used on, max_position_embeddings
    n_embed: int                   # C, hidden_size
    n_head: int                    # H query heads, num_attention_heads; head_dim Dh = n_embed // n_head
    n_kv_head: int                 # Hkv key/value heads, num_key_value_heads (n_head: MHA, 1: MQA)
    n_layer: int                   # L blocks, num_hidden_layers
    ffn_hidden: int                # F, the SwiGLU width, intermediate_size
    rope_base: float = 10000.0     # rope_theta
    tie_embeddings: bool = True    # lm_head.weight is tok_emb.weight, tie_word_embeddings


class _RoPEAttention(nn.Module):
    """Grouped-query attention (section 07) with RoPE on q and k (section 09), and an optional KV cache.

    forward(x, angles, cache=None): x (B, T, n_embed) and the RoPE angles (T, head_dim // 2) of these T
    positions -> (B, T, n_embed). With a cache, the T new positions follow the len(cache) cached ones.
    """

    def __init__(self, n_embed, n_head, n_kv_head):
        super().__init__()
        assert n_embed % n_head == 0 and n_head % n_kv_head == 0, "n_head 要整除 n_embed，n_kv_head 要整除 n_head"
        self.n_head, self.n_kv_head, self.head_dim = n_head, n_kv_head, n_embed // n_head
        self.q_proj = nn.Linear(n_embed, n_head * self.head_dim, bias=False)
        self.k_proj = nn.Linear(n_embed, n_kv_head * self.head_dim, bias=False)
        self.v_proj = nn.Linear(n_embed, n_kv_head * self.head_dim, bias=False)
        self.o_proj = nn.Linear(n_head * self.head_dim, n_embed, bias=False)

    def forward(self, x, angles, cache=None):
        B, T, _ = x.shape
        q = self.q_proj(x).view(B, T, self.n_head, self.head_dim).transpose(1, 2)      # (B, H, T, Dh)
        k = self.k_proj(x).view(B, T, self.n_kv_head, self.head_dim).transpose(1, 2)   # (B, Hkv, T, Dh)
        v = self.v_proj(x).view(B, T, self.n_kv_head, self.head_dim).transpose(1, 2)   # (B, Hkv, T, Dh)
        q, k = apply_rope(q, angles), apply_rope(k, angles)     # rotate by position; V is not rotated
        if cache is not None:
            k, v = cache.update(k, v)                           # (B, Hkv, S, Dh): the cache keeps rotated keys
        S = k.size(2)
        n_rep = self.n_head // self.n_kv_head
        k, v = repeat_kv(k, n_rep), repeat_kv(v, n_rep)         # (B, H, S, Dh)
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)                      # (B, H, T, S)
        mask = torch.ones(T, S, dtype=torch.bool, device=x.device).tril(diagonal=S - T)  # (T, S): offset by S - T
        y = F.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1) @ v             # (B, H, T, Dh)
        y = y.transpose(1, 2).reshape(B, T, self.n_head * self.head_dim)                 # (B, T, H·Dh)
        return self.o_proj(y)                                                           # (B, T, C)


class _DecoderBlock(nn.Module):
    """A Pre-Norm block (section 08) whose attention is _RoPEAttention.

    forward(x, angles, cache=None): x (B, T, n_embed) and the angles (T, head_dim // 2) of its T positions
    -> (B, T, n_embed); cache is this block's KV cache or None.
    """

    def __init__(self, config):
        super().__init__()
        self.norm1 = RMSNorm(config.n_embed)
        self.attn = _RoPEAttention(config.n_embed, config.n_head, config.n_kv_head)
        self.norm2 = RMSNorm(config.n_embed)
        self.ffn = SwiGLU(config.n_embed, config.ffn_hidden)

    def forward(self, x, angles, cache=None):
        x = x + self.attn(self.norm1(x), angles, cache)    # (B, T, C)  norm -> attend (positions talk) -> residual
        return x + self.ffn(self.norm2(x))                 # (B, T, C)  norm -> FFN (each position alone) -> residual


class DecoderLM(nn.Module):
    """Token embedding -> n_layer Pre-Norm blocks (GQA with RoPE, SwiGLU) -> final RMSNorm -> lm_head.

    forward(idx, targets=None, caches=None): idx (B, T) token ids -> (logits (B, T, vocab), loss or None).
    With caches (one KVCache per block) the T tokens sit at positions len(cache) … len(cache) + T - 1.
    """

    def __init__(self, config):
        super().__init__()
        self.config = config
        self.tok_emb = nn.Embedding(config.vocab_size, config.n_embed)
        self.blocks = nn.ModuleList([_DecoderBlock(config) for _ in range(config.n_layer)])
        self.norm = RMSNorm(config.n_embed)
        self.lm_head = nn.Linear(config.n_embed, config.vocab_size, bias=False)
        if config.tie_embeddings:
            self.lm_head.weight = self.tok_emb.weight          # one Parameter, (vocab, C) in both layouts
        table = rope_angles(config.context_length, config.n_embed // config.n_head, config.rope_base)
        self.register_buffer("angles", table, persistent=False)   # (S_max, Dh/2): moves with .to(), not saved

    def forward(self, idx, targets=None, caches=None):
        B, T = idx.shape
        start = 0 if caches is None else len(caches[0])         # positions continue after the cache
        assert start + T <= self.config.context_length, f"{start + T} 个位置超出了上下文长度 {self.config.context_length}"
        angles = self.angles[start:start + T]                   # (T, Dh/2): positions start … start + T - 1
        x = self.tok_emb(idx)                                   # (B, T, C)
        for i, block in enumerate(self.blocks):
            x = block(x, angles, None if caches is None else caches[i])   # (B, T, C)
        logits = self.lm_head(self.norm(x))                     # (B, T, vocab)
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.reshape(B * T, -1), targets.reshape(B * T))   # mean over the B·T positions
        return logits, loss


def count_parameters(config):
    """The number of parameters of DecoderLM(config), by formula; a tied weight is counted once."""
    C, V, hidden = config.n_embed, config.vocab_size, config.ffn_hidden
    head_dim = C // config.n_head
    attention = 2 * C * config.n_head * head_dim + 2 * C * config.n_kv_head * head_dim   # q, o; k, v
    ffn = 3 * C * hidden                                      # w_gate, w_up: C x F; w_down: F x C
    per_block = attention + ffn + 2 * C                       # + norm1, norm2
    lm_head = 0 if config.tie_embeddings else V * C
    return V * C + config.n_layer * per_block + C + lm_head   # embedding, blocks, final norm, LM head


@torch.no_grad()
def generate(model, idx, max_new_tokens, temperature=1.0, top_k=None, generator=None):
    """Continue idx (B, T) by max_new_tokens tokens -> (B, T + max_new_tokens).

    The prompt goes through the model once, then one token per step through one KVCache per block.
    temperature == 0 is greedy; otherwise sample from softmax(logits / temperature), only among the
    top_k largest logits when top_k is given, drawing with `generator`.
    """
    caches = [KVCache() for _ in model.blocks]
    logits, _ = model(idx, caches=caches)                          # (B, T, vocab): the prompt, once
    for step in range(max_new_tokens):
        last = logits[:, -1, :]                                    # (B, vocab): scores of the next token
        if temperature == 0:
            next_id = last.argmax(dim=-1, keepdim=True)            # (B, 1) greedy
        else:
            last = last / temperature
            if top_k is not None:
                kth = torch.topk(last, min(top_k, last.size(-1)), dim=-1).values[:, -1:]   # (B, 1) k-th largest
                last = last.masked_fill(last < kth, float("-inf"))
            probs = F.softmax(last, dim=-1)                        # (B, vocab)
            next_id = torch.multinomial(probs, 1, generator=generator)   # (B, 1)
        idx = torch.cat([idx, next_id], dim=1)                     # (B, T + step + 1)
        if step + 1 < max_new_tokens:
            logits, _ = model(next_id, caches=caches)              # (B, 1, vocab): only the new token
    return idx


def top_p_filter(logits, top_p):
    """logits (..., V) -> the same logits with every token outside each row's nucleus set to -inf.

    The nucleus is the smallest set of most probable tokens whose softmax probabilities sum to at
    least top_p (the token that crosses top_p is kept); top_p = 1.0 keeps every token.
    """
    if top_p >= 1.0:
        return logits.clone()                                     # float sums may reach 1 early: keep all
    probs, order = F.softmax(logits, dim=-1).sort(dim=-1, descending=True)   # (..., V) most probable first
    before = probs.cumsum(dim=-1) - probs                         # (..., V) mass of the better-ranked tokens
    keep_sorted = before < top_p                                  # the crossing token has before < top_p too
    keep = torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)     # back to each token's own index
    return logits.masked_fill(~keep, float("-inf"))
