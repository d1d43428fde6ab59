"""Checks of section 10_decoder_only_model.

The expected outputs come from a float64 re-implementation of the model (``_forward``) that reads
the candidate's weights through the contract's names; generate is run on small models the check
builds itself, so each check depends on one exercise only.
"""
from __future__ import annotations

import math
from types import SimpleNamespace

import torch
import torch.nn as nn
import torch.nn.functional as F

from .core import CheckError, call, call_pure, check, expect, quiz_answers
from .s07 import _Cache
from .s08 import _check_linear, _check_swiglu_layout, _number, _rms
from .s09 import _angles, _half

EPS = 1e-6  # RMSNorm's default eps (section 08), the one the given DecoderBlock uses


def _config(**fields):
    """The notebook's ModelConfig (given to the learner, exported with the section's reference)."""
    from utils.reference.s10_decoder_only_model import ModelConfig
    return ModelConfig(**fields)


def _sizes(V, S, C, H, Hkv, L, F, base=10000.0, tie=True) -> dict:
    return dict(vocab_size=V, context_length=S, n_embed=C, n_head=H, n_kv_head=Hkv, n_layer=L, ffn_hidden=F,
                rope_base=base, tie_embeddings=tie)


# --- the model in float64 ----------------------------------------------------------------------

def _weights(model) -> dict:
    """The model's parameters by role, in float64."""
    def d(t):
        return t.detach().double()
    blocks = [{"n1": d(b.norm1.weight), "q": d(b.attn.q_proj.weight), "k": d(b.attn.k_proj.weight),
               "v": d(b.attn.v_proj.weight), "o": d(b.attn.o_proj.weight), "n2": d(b.norm2.weight),
               "g": d(b.ffn.w_gate.weight), "u": d(b.ffn.w_up.weight), "down": d(b.ffn.w_down.weight)}
              for b in model.blocks]
    return {"emb": d(model.tok_emb.weight), "blocks": blocks, "norm": d(model.norm.weight),
            "head": d(model.lm_head.weight)}


def _random_weights(cfg, g: torch.Generator) -> dict:
    """Weights of a DecoderLM(cfg) drawn from g: matrices ~ N(0, 1/fan_in), gains ~ 1 ± 0.3."""
    C, Dh = cfg.n_embed, cfg.n_embed // cfg.n_head

    def mat(n_out, n_in):
        return torch.randn(n_out, n_in, generator=g, dtype=torch.float64) / math.sqrt(n_in)

    def gain():
        return 1 + 0.3 * torch.randn(C, generator=g, dtype=torch.float64)
    blocks = [{"n1": gain(), "q": mat(cfg.n_head * Dh, C), "k": mat(cfg.n_kv_head * Dh, C),
               "v": mat(cfg.n_kv_head * Dh, C), "o": mat(C, cfg.n_head * Dh), "n2": gain(),
               "g": mat(cfg.ffn_hidden, C), "u": mat(cfg.ffn_hidden, C), "down": mat(C, cfg.ffn_hidden)}
              for _ in range(cfg.n_layer)]
    emb = torch.randn(cfg.vocab_size, C, generator=g, dtype=torch.float64)
    head = emb if cfg.tie_embeddings else 2 * mat(cfg.vocab_size, C)     # logits of std ≈ 2: draws vary
    return {"emb": emb, "blocks": blocks, "norm": gain(), "head": head}


def _forward(w, cfg, idx, caches=None, offset=True, final_norm=True, base=None):
    """DecoderLM's logits (B, T, V) in float64 from the weights w; caches: one cache per block or None.
    offset / final_norm / base give the misconceptions' outputs."""
    B, T = idx.shape
    C, H, Hkv = cfg.n_embed, cfg.n_head, cfg.n_kv_head
    Dh = C // H
    start = len(caches[0]) if caches is not None and offset else 0
    angles = _angles(T, Dh, cfg.rope_base if base is None else base, start=start)    # (T, Dh/2)
    x = w["emb"][idx]                                                               # (B, T, C)
    for i, p in enumerate(w["blocks"]):
        h = _rms(x, p["n1"], EPS)                                                   # (B, T, C)
        q = _half((h @ p["q"].T).view(B, T, H, Dh).transpose(1, 2), angles)         # (B, H, T, Dh)
        k = _half((h @ p["k"].T).view(B, T, Hkv, Dh).transpose(1, 2), angles)       # (B, Hkv, T, Dh)
        v = (h @ p["v"].T).view(B, T, Hkv, Dh).transpose(1, 2)                      # (B, Hkv, T, Dh)
        if caches is not None:
            k, v = caches[i].update(k, v)                                           # (B, Hkv, S, Dh)
        S = k.size(2)
        k, v = k.repeat_interleave(H // Hkv, dim=1), v.repeat_interleave(H // Hkv, dim=1)   # (B, H, S, Dh)
        mask = torch.ones(T, S, dtype=torch.bool).tril(diagonal=S - T)              # (T, S)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)                 # (B, H, T, Dh)
        x = x + y.transpose(1, 2).reshape(B, T, H * Dh) @ p["o"].T                  # (B, T, C)
        h = _rms(x, p["n2"], EPS)
        x = x + (F.silu(h @ p["g"].T) * (h @ p["u"].T)) @ p["down"].T               # (B, T, C)
    if final_norm:
        x = _rms(x, w["norm"], EPS)
    return x @ w["head"].T                                                          # (B, T, V)


def _chunked(w, cfg, idx, chunks, **options):
    """What the model gives fed chunk by chunk through fresh caches (with a misconception's options)."""
    caches, outs, start = [_Cache() for _ in w["blocks"]], [], 0
    for n in chunks:
        outs.append(_forward(w, cfg, idx[:, start:start + n], caches, **options))
        start += n
    return torch.cat(outs, dim=1)                                                   # (B, T, V)


def _count(cfg, tied_twice=False, untied_once=False, norms=True, final_norm=True, kv_as_q=False, ffn_mats=3):
    """count_parameters and its misconceptions."""
    C, V, Dh = cfg.n_embed, cfg.vocab_size, cfg.n_embed // cfg.n_head
    kv_heads = cfg.n_head if kv_as_q else cfg.n_kv_head
    attention = 2 * C * cfg.n_head * Dh + 2 * C * kv_heads * Dh
    per_block = attention + ffn_mats * C * cfg.ffn_hidden + (2 * C if norms else 0)
    head = V * C if (cfg.tie_embeddings and tied_twice) or (not cfg.tie_embeddings and not untied_once) else 0
    return V * C + cfg.n_layer * per_block + (C if norms and final_norm else 0) + head


# --- DecoderLM ---------------------------------------------------------------------------------

# (config, B, T, chunks); T stays within the context length, the chunks cover T.
LM_CASES = [(_sizes(11, 16, 16, 4, 2, 2, 24, base=100.0, tie=True), 2, 7, (3, 2, 1, 1)),
            (_sizes(13, 12, 12, 3, 1, 1, 20, base=10000.0, tie=False), 1, 5, (2, 1, 2))]
LM_EXTENDED = [(_sizes(9, 10, 8, 2, 2, 3, 16, base=500.0, tie=True), 3, 6, (1, 1, 1, 1, 1, 1)),
               (_sizes(17, 20, 24, 6, 3, 2, 40, base=50.0, tie=False), 2, 9, (4, 1, 3, 1))]


def _check_lm_layout(model, cfg) -> None:
    C, V, L, Dh = cfg.n_embed, cfg.vocab_size, cfg.n_layer, cfg.n_embed // cfg.n_head
    if getattr(model, "config", None) != cfg:
        raise CheckError("model-layout", "应保存传进来的配置：self.config = config。")
    emb = getattr(model, "tok_emb", None)
    if not isinstance(emb, nn.Embedding) or tuple(emb.weight.shape) != (V, C):
        raise CheckError("model-layout", f"tok_emb 应为 nn.Embedding({V}, {C})，实际是 {emb}。")
    blocks = getattr(model, "blocks", None)
    if not isinstance(blocks, nn.ModuleList) or len(blocks) != L:
        found = type(blocks).__name__ + (f"（{len(blocks)} 个）" if isinstance(blocks, nn.ModuleList) else "")
        raise CheckError("model-layout", f"blocks 应为含 {L} 个 DecoderBlock 的 nn.ModuleList，实际是 {found}。")
    if len({id(b) for b in blocks}) < L:
        raise CheckError("blocks-shared", f"blocks 里的 {L} 个元素并不都是不同的模块对象。")
    for i, block in enumerate(blocks):
        for name in ("norm1", "norm2"):
            weight = getattr(getattr(block, name, None), "weight", None)
            if not isinstance(weight, torch.Tensor) or weight.shape != (C,):
                raise CheckError("model-layout", f"blocks[{i}].{name} 应为 RMSNorm({C})。")
        attn = getattr(block, "attn", None)
        widths = {"q_proj": (C, cfg.n_head * Dh), "k_proj": (C, cfg.n_kv_head * Dh),
                  "v_proj": (C, cfg.n_kv_head * Dh), "o_proj": (cfg.n_head * Dh, C)}
        for name, (n_in, n_out) in widths.items():
            _check_linear(getattr(attn, name, None), f"blocks[{i}].attn.{name}", n_in, n_out, False, "model-layout")
        _check_swiglu_layout(getattr(block, "ffn", None), C, cfg.ffn_hidden, code="model-layout")
    norm_weight = getattr(getattr(model, "norm", None), "weight", None)
    if not isinstance(norm_weight, torch.Tensor) or norm_weight.shape != (C,):
        raise CheckError("model-no-final-norm", f"应有最后的归一化 norm = RMSNorm({C})，实际是 "
                                                f"{type(getattr(model, 'norm', None)).__name__}。")
    _check_linear(getattr(model, "lm_head", None), "lm_head", C, V, False, "model-layout")


def _check_tying(model, cfg) -> None:
    head, emb = model.lm_head.weight, model.tok_emb.weight
    shared_memory = head.data_ptr() == emb.data_ptr()
    if cfg.tie_embeddings and head is not emb:
        detail = "它们共用一块内存，却是两个 Parameter（只赋值了 .data）" if shared_memory else "它们是两个独立的矩阵"
        raise CheckError("tie-missing", f"tie_embeddings=True，但 lm_head.weight 不是 tok_emb.weight：{detail}。")
    if not cfg.tie_embeddings and (head is emb or shared_memory):
        raise CheckError("tie-unwanted", "tie_embeddings=False，但 lm_head.weight 与 tok_emb.weight 是同一个矩阵。")
    own, want = sum(p.numel() for p in model.parameters()), _count(cfg)
    if own != want:
        raise CheckError("model-layout", f"模型的参数总数应为 {want:,}，实际是 {own:,}（多了或少了某些层、偏置）。")


def _make_lm(candidate, cfg, seed: int):
    """The candidate model with random weights drawn from seed (so that every part matters)."""
    torch.manual_seed(seed)
    model = call(candidate, cfg)
    if not isinstance(model, nn.Module):
        raise CheckError("wrong-type", f"DecoderLM(config) 应创建一个 nn.Module，实际是 {type(model).__name__}。")
    _check_lm_layout(model, cfg)
    _check_tying(model, cfg)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for _, p in model.named_parameters():                          # a tied weight once
            fresh = 1 + 0.3 * torch.randn(p.shape, generator=g) if p.dim() == 1 else \
                torch.randn(p.shape, generator=g) / math.sqrt(p.size(-1))
            p.copy_(fresh)
    model.eval()
    return model


def _split(out, what: str):
    if not (isinstance(out, tuple) and len(out) == 2):
        raise CheckError("wrong-type", f"{what}：forward 应返回二元组 (logits, loss)，实际是 {type(out).__name__}。")
    return out


def _decode(model, idx, chunks, what: str):
    """idx chunk by chunk through fresh caches: the logits, concatenated, and the caches."""
    caches, outs, start = [_Cache() for _ in model.blocks], [], 0
    try:
        for n in chunks:
            logits, _ = _split(call(model, idx[:, start:start + n], caches=caches), what)
            outs.append(logits)
            start += n
    except CheckError:
        _check_cache_use(caches, what)
        raise
    _check_cache_use(caches, what)
    got = [len(c) for c in caches]
    if got != [start] * len(caches):
        raise CheckError("wrong", f"{what}：喂了 {start} 个位置之后，每层的缓存应各有 {start} 个位置，实际是 {got}。")
    if not all(isinstance(o, torch.Tensor) and o.dim() == 3 for o in outs):
        raise CheckError("wrong-type", f"{what}：logits 应是 [B, T, V] 的张量。")
    return torch.cat(outs, dim=1)                                                   # (B, T, V)


def _check_cache_use(caches, what: str) -> None:
    lengths = [len(c) for c in caches]
    if len(caches) > 1 and lengths[0] > 0 and not any(lengths[1:]):
        raise CheckError("cache-one-for-all-layers", f"{what}：只有第一层的缓存里有东西，各层的缓存长度是 {lengths}。")
    if not any(lengths):
        raise CheckError("cache-unused", f"{what}：传进去的缓存仍是空的"
                                         "（forward 没有把 caches[i] 交给第 i 个 Block）。")


@check("DecoderLM")
def check_DecoderLM(candidate, extended: bool = False, seed: int = 0) -> None:
    for i, (sizes, B, T, chunks) in enumerate(LM_CASES + (LM_EXTENDED if extended else [])):
        cfg = _config(**sizes)
        model = _make_lm(candidate, cfg, seed * 1009 + 17 * i)
        w = _weights(model)
        g = torch.Generator().manual_seed(seed + 31 * i)
        idx = torch.randint(cfg.vocab_size, (B, T), generator=g)                    # (B, T)
        targets = torch.randint(cfg.vocab_size, (B, T), generator=g)
        label = (f"vocab={cfg.vocab_size}, n_embed={cfg.n_embed}, n_head={cfg.n_head}, n_kv_head={cfg.n_kv_head}, "
                 f"n_layer={cfg.n_layer}, rope_base={cfg.rope_base:g}, tie={cfg.tie_embeddings}, B={B}, T={T}")
        with torch.no_grad():
            want = _forward(w, cfg, idx)                                            # (B, T, V)
            logits, loss = _split(call_pure(model, idx), label)
            expect(logits, want, f"{label} 时的 logits", [
                ("model-no-final-norm", lambda: _forward(w, cfg, idx, final_norm=False)),
                ("rope-base-ignored", lambda: _forward(w, cfg, idx, base=10000.0) if cfg.rope_base != 10000 else None)],
                atol=1e-4)
            if loss is not None:
                raise CheckError("wrong-type", f"{label}：没给 targets 时 loss 应为 None，实际是 {loss!r}。")
            _, loss = _split(call_pure(model, idx, targets=targets), label)
            flat = want.reshape(B * T, -1)
            want_loss = F.cross_entropy(flat, targets.reshape(B * T))
            expect(loss, want_loss, f"{label}，给了 targets 时的 loss", [
                ("loss-not-mean", want_loss * B * T),
                ("loss-shifted-twice", lambda: F.cross_entropy(want[:, :-1].reshape(-1, cfg.vocab_size),
                                                                targets[:, 1:].reshape(-1)))], atol=1e-4)
            # chunks through fresh caches == the full forward: RoPE positions start at the cached length
            what = f"{label}，按分块 {list(chunks)} 带缓存解码的 logits（应等于一次算完的 logits）"
            expect(_decode(model, idx, chunks, what), want, what, [
                ("decode-positions-not-offset", lambda: _chunked(w, cfg, idx, chunks, offset=False))], atol=1e-4)
            ones = (1,) * T
            idx2 = torch.randint(cfg.vocab_size, (B, T), generator=g)
            what = f"{label}，另一条序列、新建的缓存，逐个 token 解码的 logits（应等于一次算完的 logits）"
            expect(_decode(model, idx2, ones, what), _forward(w, cfg, idx2), what, [
                ("decode-positions-not-offset", lambda: _chunked(w, cfg, idx2, ones, offset=False))], atol=1e-4)


# --- count_parameters --------------------------------------------------------------------------

COUNT_CASES = [_sizes(50, 32, 32, 4, 2, 2, 64, tie=True), _sizes(97, 64, 48, 6, 6, 3, 130, tie=False),
               _sizes(32000, 4096, 4096, 32, 32, 32, 11008, tie=False)]           # the last: Llama-2-7B
COUNT_EXTENDED = [_sizes(128256, 131072, 2048, 32, 8, 16, 8192, base=500000.0, tie=True),   # Llama-3.2-1B
                  _sizes(32000, 32768, 4096, 32, 8, 32, 14336, tie=False),                   # Mistral-7B
                  _sizes(7, 8, 8, 2, 1, 1, 12, tie=True)]


@check("count_parameters")
def check_count_parameters(candidate, extended: bool = False, seed: int = 0) -> None:
    g = torch.Generator().manual_seed(seed)
    H, rep, Dh = (int(v) for v in torch.randint(1, 5, (3,), generator=g))
    drawn = _sizes(int(torch.randint(5, 300, (1,), generator=g)), 64, H * 2 * Dh, H, max(1, H // rep), 1 + seed % 4,
                   int(torch.randint(3, 200, (1,), generator=g)), tie=bool(seed % 2))
    for sizes in COUNT_CASES + (COUNT_EXTENDED if extended else []) + [drawn]:
        cfg = _config(**sizes)
        got, want = call(candidate, cfg), _count(cfg)
        what = (f"vocab={cfg.vocab_size}, n_embed={cfg.n_embed}, n_head={cfg.n_head}, n_kv_head={cfg.n_kv_head}, "
                f"n_layer={cfg.n_layer}, ffn_hidden={cfg.ffn_hidden}, tie_embeddings={cfg.tie_embeddings}")
        if isinstance(got, bool) or not isinstance(got, int):
            if isinstance(got, float) and got == want:
                raise CheckError("wrong-type", f"{what}：数值对了，但应返回 int（参数个数），实际是 float。")
            raise CheckError("wrong-type", f"{what}：应返回 int（参数个数），实际是 {type(got).__name__}。")
        if got == want:
            continue
        misconceptions = [("param-count-tied-twice", _count(cfg, tied_twice=True)),
                          ("param-count-untied-once", _count(cfg, untied_once=True)),
                          ("param-count-no-norms", _count(cfg, norms=False)),
                          ("param-count-no-final-norm", _count(cfg, final_norm=False)),
                          ("param-count-kv-as-q", _count(cfg, kv_as_q=True)),
                          ("param-count-ffn-two-matrices", _count(cfg, ffn_mats=2))]
        for code, value in misconceptions:
            if value != want and got == value:
                raise CheckError(code, f"{what}：应为 {want:,} 个参数，实际是 {got:,}。")
        raise CheckError("wrong", f"{what}：应为 {want:,} 个参数，实际是 {got:,}（相差 {got - want:+,}）。")


# --- generate ----------------------------------------------------------------------------------

class _ToyLM(nn.Module):
    """A small float64 DecoderLM of the check's own, with the interface generate relies on
    (config, blocks, forward(idx, targets=None, caches=None) -> (logits, None)); it records its calls."""

    def __init__(self, cfg, seed: int):
        super().__init__()
        self.config = cfg
        self.blocks = nn.ModuleList(nn.Module() for _ in range(cfg.n_layer))
        self.w = _random_weights(cfg, torch.Generator().manual_seed(seed))
        self.tok_emb = nn.Embedding.from_pretrained(self.w["emb"].float())        # so that parameters() is not empty
        self.calls: list[tuple[int, list[int] | None]] = []

    def forward(self, idx, targets=None, caches=None):  # noqa: ARG002 (DecoderLM's interface; no loss here)
        self.calls.append((idx.size(1), None if caches is None else [len(c) for c in caches]))
        return _forward(self.w, self.config, idx, caches).float(), None            # (B, T, V)


class _FixedLM(nn.Module):
    """Next-token logits = base rolled by the current token: a known distribution at every step.
    Caches receive dummy K/V, so that len(cache) counts the positions as a real model's would."""

    def __init__(self, base: torch.Tensor, n_layer: int = 2):
        super().__init__()
        V = base.numel()
        self.config = _config(**_sizes(V, 64, 4, 2, 1, n_layer, 4))
        self.blocks = nn.ModuleList(nn.Module() for _ in range(n_layer))
        self.tok_emb = nn.Embedding(V, 4)
        self.table = torch.stack([base.roll(s) for s in range(V)])                 # (V, V): row s = logits after s
        self.calls: list[tuple[int, list[int] | None]] = []

    def forward(self, idx, targets=None, caches=None):  # noqa: ARG002 (DecoderLM's interface; no loss here)
        B, T = idx.shape
        self.calls.append((T, None if caches is None else [len(c) for c in caches]))
        for cache in caches or []:
            cache.update(torch.zeros(B, 1, T, 2), torch.zeros(B, 1, T, 2))        # (B, Hkv=1, T, Dh=2)
        return self.table[idx], None                                               # (B, T, V)


def _run(candidate, model, prompt, n, what, **kwargs):
    """generate's output, checked for shape, dtype and the prompt it starts with."""
    model.calls.clear()
    out = call_pure(candidate, model, prompt, n, **kwargs)
    B, T = prompt.shape
    if not isinstance(out, torch.Tensor) or out.shape != (B, T + n):
        shape = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        raise CheckError("wrong-shape", f"{what}：应返回 [B, T + max_new_tokens] = {(B, T + n)} 的张量，"
                                        f"实际是 {shape}。")
    if out.dtype.is_floating_point or not torch.equal(out[:, :T], prompt):
        raise CheckError("wrong", f"{what}：返回的序列应以原来的提示词开头，后面接新生成的 token id（整数）。")
    return out


def _check_protocol(calls, T0: int, n: int, n_layer: int, what: str) -> None:
    """Prompt once through empty caches, then one token per step through the same caches."""
    if not calls:
        raise CheckError("wrong", f"{what}：generate 没有调用模型。")
    if all(c is None for _, c in calls):
        raise CheckError("generate-no-cache", f"{what}：调用模型 {len(calls)} 次，一次也没有传 caches。")
    first_len, first_caches = calls[0]
    if first_caches is None or first_len != T0 or any(first_caches):
        raise CheckError("wrong", f"{what}：第一次调用模型应把 {T0} 个 token 的提示词和新建的（空的）缓存一起喂进去，"
                                  f"实际喂了 {first_len} 个 token，缓存长度 {first_caches}。")
    for step, (length, cached) in enumerate(calls[1:], start=1):
        if cached is None or not any(cached):
            raise CheckError("generate-no-cache", f"{what}：第 {step + 1} 次调用模型时没有带着之前的缓存"
                                                  f"（喂了 {length} 个 token，缓存长度 {cached}）。")
        if length != 1:
            raise CheckError("generate-refeeds-cache", f"{what}：第 {step + 1} 次调用模型时"
                                                       f"缓存里已有 {cached[0]} 个位置，"
                                                       f"却又喂了 {length} 个 token（应只喂新生成的 1 个）。")
        if cached != [T0 + step - 1] * n_layer:
            raise CheckError("wrong", f"{what}：第 {step + 1} 次调用模型时各层缓存应有 {T0 + step - 1} 个位置，"
                                      f"实际是 {cached}。")
    if len(calls) not in (n, n + 1):
        raise CheckError("wrong", f"{what}：生成 {n} 个 token 应调用模型 {n} 次（提示词 1 次 + 每个新 token 1 次，"
                                  f"最后一个可以不喂），实际调用了 {len(calls)} 次。")


@torch.no_grad()
def _greedy(model, prompt, n):
    """Greedy decoding without a cache: the whole sequence at every step."""
    idx = prompt
    for _ in range(n):
        idx = torch.cat([idx, model(idx)[0][:, -1].argmax(-1, keepdim=True)], dim=1)   # (B, T + 1)
    return idx


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# (prompt B, prompt T, new tokens, model seed) for the greedy / protocol part
GEN_CASES = [(2, 3, 5, 0), (1, 1, 4, 1)]
GEN_EXTENDED = [(3, 4, 7, 2), (2, 6, 3, 3)]
BASE = torch.tensor([2.0, 1.2, 0.5, 0.0, -0.7, -1.5])                             # (V,) the fixed model's logits
N_DRAWS, TOLERANCE = 4000, 0.04                                                    # total-variation distance


def _tv(tokens: torch.Tensor, p: torch.Tensor) -> float:
    freq = torch.bincount(tokens, minlength=p.numel()).double() / tokens.numel()
    return 0.5 * (freq - p.double()).abs().sum().item()


def _check_greedy(candidate, extended: bool, seed: int) -> None:
    for B, T0, n, model_seed in GEN_CASES + (GEN_EXTENDED if extended else []):
        cfg = _config(**_sizes(13, 24, 16, 4, 2, 2, 24, base=100.0, tie=False))
        model = _ToyLM(cfg, seed * 101 + model_seed)
        prompt = torch.randint(cfg.vocab_size, (B, T0), generator=_gen(seed + model_seed))   # (B, T0)
        what = f"贪心（temperature=0），提示词形状 {(B, T0)}，max_new_tokens={n}"
        try:
            out = _run(candidate, model, prompt, n, what, temperature=0, generator=_gen(1))
        except CheckError as err:
            if err.code == "crashed":
                raise CheckError("generate-greedy-samples",
                                 f"{what}：运行出错（{err.finding}）——多半是除以了 0。") from err
            raise
        _check_protocol(model.calls, T0, n, cfg.n_layer, what)
        want = _greedy(model, prompt, n)
        if torch.equal(out, want):
            continue
        others = [_run(candidate, model, prompt, n, what, temperature=0, generator=_gen(s)) for s in (2, 3, 4)]
        if any(not torch.equal(other, out) for other in others):
            raise CheckError("generate-greedy-samples", f"{what}：换一个 generator 种子，结果就变了。")
        raise CheckError("wrong", f"{what}：应为 {want.tolist()}（每步取 logits 最大的 token），"
                                  f"实际是 {out.tolist()}。")


def _check_sampling(candidate, extended: bool, seed: int) -> None:
    model = _FixedLM(BASE)
    prompt = torch.tensor([[4, 3]]).expand(N_DRAWS, 2)                             # (N, 2): the last token is 3
    logits = BASE.roll(3)                                                          # (V,) the first new token's logits
    what = f"{N_DRAWS} 条相同的提示词各采样 2 个 token"
    # the same generator seed -> the same tokens, whatever the global random state
    torch.manual_seed(1)
    first = _run(candidate, model, prompt, 2, f"{what}（temperature=1）", temperature=1.0, generator=_gen(seed))
    _check_protocol(model.calls, 2, 2, 2, f"{what}（temperature=1）")
    torch.manual_seed(2)
    second = _run(candidate, model, prompt, 2, what, temperature=1.0, generator=_gen(seed))
    if not torch.equal(first, second):
        raise CheckError("ignores-generator", f"{what}：两次用同一个种子的 generator，抽到的 token 却不同。")
    temperatures = [1.0, 0.5] + ([2.0, 0.8] if extended else [])
    for tau in temperatures:
        out = first if tau == 1.0 else _run(candidate, model, prompt, 2, f"{what}（temperature={tau}）",
                                              temperature=tau, generator=_gen(seed + 1))
        tokens, want = out[:, 2], F.softmax(logits / tau, dim=-1)
        if _tv(tokens, want) <= TOLERANCE:
            continue
        freq = (torch.bincount(tokens, minlength=BASE.numel()).double() / N_DRAWS).tolist()
        detail = (f"temperature={tau} 时第一个新 token 的频率 {[round(f, 3) for f in freq]}，"
                  f"应接近 softmax(logits / temperature) = {[round(p, 3) for p in want.tolist()]}")
        if tau != 1.0 and _tv(tokens, F.softmax(logits * tau, dim=-1)) <= TOLERANCE:
            raise CheckError("generate-temperature-multiplied", f"{what}：{detail}。")
        raise CheckError("wrong", f"{what}：{detail}。")
    for k in [2] + ([4, 1] if extended else []):
        out = _run(candidate, model, prompt, 2, f"{what}（top_k={k}）", temperature=1.0, top_k=k,
                   generator=_gen(seed + 2))
        allowed = torch.topk(logits, k).indices                                    # (k,)
        tokens = out[:, 2]
        inside = torch.isin(tokens, allowed).all().item()
        kept = logits.masked_fill(~torch.isin(torch.arange(BASE.numel()), allowed), float("-inf"))
        if inside and _tv(tokens, F.softmax(kept, dim=-1)) <= TOLERANCE:
            second_ok = torch.stack([torch.isin(out[r, 3], torch.topk(BASE.roll(int(out[r, 2])), k).indices)
                                     for r in range(0, N_DRAWS, 97)]).all().item()
            if second_ok:
                continue
            raise CheckError("generate-top-k-wrong",
                             f"{what}（top_k={k}）：第二个新 token 抽到了前 {k} 名之外的 token。")
        detail = f"top_k={k}：抽到了 {sorted(set(tokens.tolist()))}，前 {k} 名是 {sorted(allowed.tolist())}"
        if _tv(tokens, F.softmax(logits, dim=-1)) <= TOLERANCE:
            raise CheckError("generate-top-k-ignored", f"{what}，{detail}。")
        raise CheckError("generate-top-k-wrong", f"{what}，{detail}（或频率不对）。")
    greedy = _run(candidate, model, prompt, 2, f"{what}（temperature=0）", temperature=0, generator=_gen(seed + 3))
    best = int(logits.argmax())
    want = torch.tensor([best, int(BASE.roll(best).argmax())])
    if not (greedy[:, 2:] == want).all():
        raise CheckError("generate-greedy-samples", f"{what}（temperature=0）：应当每条都是贪心的 {want.tolist()}，"
                                                    f"实际抽到了 {sorted(set(greedy[:, 2].tolist()))} 等不同的 token。")


@check("generate")
def check_generate(candidate, extended: bool = False, seed: int = 0) -> None:
    with torch.no_grad():
        _check_greedy(candidate, extended, seed)
        _check_sampling(candidate, extended, seed)


# --- quiz_read_config --------------------------------------------------------------------------

LLAMA3_8B = SimpleNamespace(**_sizes(128256, 8192, 4096, 32, 8, 32, 14336, tie=False))
MIXTRAL = SimpleNamespace(**_sizes(32000, 32768, 4096, 32, 8, 32, 14336, tie=False))
N_EXPERT, TOP_K = 8, 2
READ_KEYS = ("llama3_8b_params", "llama3_8b_kv_bytes_per_token", "mixtral_total_params", "mixtral_active_params",
             "mixtral_flops_per_token")


def _moe(cfg, experts: int) -> int:
    """Parameters of a Mixtral-style model counting `experts` expert FFNs per block (and the router)."""
    return _count(cfg) + cfg.n_layer * ((experts - 1) * 3 * cfg.n_embed * cfg.ffn_hidden + cfg.n_embed * N_EXPERT)


def read_config_truth() -> dict[str, float]:
    active = _moe(MIXTRAL, TOP_K)
    return {"llama3_8b_params": _count(LLAMA3_8B), "llama3_8b_kv_bytes_per_token": 2 * 32 * 8 * 128 * 2,
            "mixtral_total_params": _moe(MIXTRAL, N_EXPERT), "mixtral_active_params": active,
            "mixtral_flops_per_token": 2 * active}


def _read_config_wrong(truth: dict) -> dict[str, list[tuple[str, float]]]:
    active, total = truth["mixtral_active_params"], truth["mixtral_total_params"]
    one_expert = _moe(MIXTRAL, 1)
    kv = truth["llama3_8b_kv_bytes_per_token"]
    return {
        "llama3_8b_params": [("quiz-config-tied-assumed", _count(LLAMA3_8B, untied_once=True)),
                             ("quiz-config-kv-as-q", _count(LLAMA3_8B, kv_as_q=True)),
                             ("quiz-swiglu-two-matrices", _count(LLAMA3_8B, ffn_mats=2))],
        "llama3_8b_kv_bytes_per_token": [("quiz-kv-no-factor-2", kv / 2), ("quiz-kv-fp32", kv * 2),
                                         ("quiz-config-kv-as-q", kv * 4), ("kv-bytes-no-layers", kv / 32),
                                         ("kv-bytes-bits", kv * 8)],
        "mixtral_total_params": [("quiz-moe-name-is-size", 56e9), ("quiz-moe-name-is-size", 8 * 7.24e9),
                                 ("quiz-moe-experts-missing", one_expert), ("quiz-moe-total-is-active", active)],
        "mixtral_active_params": [("quiz-moe-active-all", total), ("quiz-moe-top1", one_expert)],
        "mixtral_flops_per_token": [("quiz-flops-total-params", 2 * total), ("quiz-flops-no-factor-2", active),
                                    ("quiz-flops-training", 6 * active)],
    }


@check("quiz_read_config")
def check_quiz_read_config(candidate, extended: bool = False, seed: int = 0) -> None:
    """One set of answers, nothing random: ``extended`` and ``seed`` change nothing."""
    del extended, seed
    answers = quiz_answers(candidate, "quiz_read_config", READ_KEYS)
    truth, wrongs = read_config_truth(), _read_config_wrong(read_config_truth())
    for key in READ_KEYS:
        value, want = _number(answers, key), truth[key]
        tolerance = 0.03 if key.endswith("flops_per_token") else 2e-3
        if math.isclose(value, want, rel_tol=tolerance):
            continue
        for code, wrong in wrongs[key]:
            if math.isclose(value, wrong, rel_tol=1e-2):
                raise CheckError(code, f"{key} = {value:,.6g} 不对。")
        if any(math.isclose(value * unit, want, rel_tol=tolerance) for unit in (1e9, 2 ** 10, 2 ** 20, 1e6)):
            raise CheckError("quiz-config-units", f"{key} = {value:,.6g}：单位不对。")
        raise CheckError("wrong", f"{key} = {value:,.6g} 不对：回到 §8 的清单和公式再算一遍。")


# --- quiz_misconceptions -----------------------------------------------------------------------

MYTHS = {"weights_explain": (False, "quiz-myth-weights-explain"), "heads_learned": (True, "quiz-myth-heads-designed"),
         "flash_is_sparse": (False, "quiz-myth-flash-sparse"), "rope_window_enough": (False, "quiz-myth-rope-window"),
         "training_parallel": (True, "quiz-myth-training-sequential")}


@check("quiz_misconceptions")
def check_quiz_misconceptions(candidate, extended: bool = False, seed: int = 0) -> None:
    """One set of answers, nothing random: ``extended`` and ``seed`` change nothing."""
    del extended, seed
    answers = quiz_answers(candidate, "quiz_misconceptions", list(MYTHS))
    for key, (truth, code) in MYTHS.items():
        if not isinstance(answers[key], bool):
            raise CheckError("wrong-type", f"{key} 的答案应是 True 或 False，实际是 {answers[key]!r}。")
        if answers[key] != truth:
            raise CheckError(code, f"{key} 的答案不是 {answers[key]}。")
