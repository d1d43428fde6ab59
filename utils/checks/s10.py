"""Checks of section 10_decoder_only_model.

DecoderLM is loaded with check-made weights by the contract's names and compared with a float64
oracle of the model on those weights; its parts' inputs and outputs, seen by forward hooks in the
kernel, tell which part is wrong. Fed chunk by chunk, its blocks get scripted caches (built in the
kernel from the oracle's keys and values) that keep what each block put in; the check reads that
back and judges it here. generate runs on a table-driven stand-in model that records its calls.
"""
from __future__ import annotations

import dataclasses
from typing import NamedTuple

import torch
import torch.nn as nn
import torch.nn.functional as F

from . import math64
from .codes import CODES
from .common import fixed_weights, part, require_linear, require_swiglu_layout
from .compare import Cases, Seen, close, confirmed, decide, randn, require_tensor, type_name
from .core import OBSERVED, CheckError, check
from .keys import recipe
from .oracle import instructor_only, oracle
from .protocol import CANDIDATE, Attr, Call, Get, Layout, Load, New, Record, Watch
from .stand_ins import SCRIPTED_CACHE, positions

EPS = 1e-6  # RMSNorm's default eps (section 08)
HERE = "utils.checks.s10"


def _config(**fields):
    """The notebook's ModelConfig (its given code, which the class edition ships too): the kernel rebuilds
    it from its record (agent.rebuild), so the learner's DecoderLM receives the very dataclass the notebook
    defines."""
    from utils.reference.s10_decoder_only_model import ModelConfig
    return ModelConfig(**fields)


def model_sizes(V, S, C, H, Hkv, L, F, base=10000.0, tie=True) -> dict:
    return dict(vocab_size=V, context_length=S, n_embed=C, n_head=H, n_kv_head=Hkv, n_layer=L, ffn_hidden=F,
                rope_base=base, tie_embeddings=tie)
# --- the model in float64 ----------------------------------------------------------------------

def lm_weights(cfg, seed: int) -> dict[str, torch.Tensor]:
    """Check-made weights of DecoderLM(cfg) by the contract's names. A tied lm_head.weight IS
    tok_emb.weight, so it is loaded once, under tok_emb.weight."""
    C, H, Hkv, hidden = cfg.n_embed, cfg.n_head, cfg.n_kv_head, cfg.ffn_hidden
    Dh = C // H
    block = {"norm1.weight": (C,), "attn.q_proj.weight": (H * Dh, C), "attn.k_proj.weight": (Hkv * Dh, C),
             "attn.v_proj.weight": (Hkv * Dh, C), "attn.o_proj.weight": (C, H * Dh), "norm2.weight": (C,),
             "ffn.w_gate.weight": (hidden, C), "ffn.w_up.weight": (hidden, C), "ffn.w_down.weight": (C, hidden)}
    shapes = {"tok_emb.weight": (cfg.vocab_size, C), "norm.weight": (C,)}
    shapes |= {f"blocks.{i}.{name}": shape for i in range(cfg.n_layer) for name, shape in block.items()}
    if not cfg.tie_embeddings:
        shapes["lm_head.weight"] = (cfg.vocab_size, C)
    return fixed_weights(shapes, seed)


@oracle
def attention64(w, cfg, p: str, h, angles, keys_at=None, rope=math64.rotate_half, rope_v=False, causal=True,
                scale=None):
    """Block p's attention in float64 on its normed input h (B, T, C) at the positions of angles (T, Dh/2):
    its output (B, T, C), rotated keys and values (B, Hkv, T, Dh). keys_at(k, v) -> (keys, values, mask)
    lets a chunk attend to other positions; rope / rope_v / causal / scale (default 1/√Dh): misconceptions."""
    B, T, _ = h.shape
    H, Hkv, Dh = cfg.n_head, cfg.n_kv_head, cfg.n_embed // cfg.n_head

    def heads(name, n):                                                             # (B, n, T, Dh)
        return (h @ w[p + name].double().T).view(B, T, n, Dh).transpose(1, 2)

    q, k, v = heads("attn.q_proj.weight", H), heads("attn.k_proj.weight", Hkv), heads("attn.v_proj.weight", Hkv)
    if rope is not None:
        q, k = rope(q, angles), rope(k, angles)
    if rope_v:
        v = rope(v, angles)
    ks, vs, mask = keys_at(k, v) if keys_at else (k, v, torch.ones(T, T, dtype=torch.bool).tril())
    ks, vs = ks.repeat_interleave(H // Hkv, dim=1), vs.repeat_interleave(H // Hkv, dim=1)   # (B, H, S, Dh)
    y = F.scaled_dot_product_attention(q, ks, vs, attn_mask=mask if causal else None, scale=scale)   # (B, H, T, Dh)
    return y.transpose(1, 2).reshape(B, T, H * Dh) @ w[p + "attn.o_proj.weight"].double().T, k, v


@oracle
def swiglu64(w, p: str, h, swapped=False, act=F.silu):
    """Block p's SwiGLU on h (B, T, C); swapped / act: misconceptions."""
    gate, up = h @ w[p + "ffn.w_gate.weight"].double().T, h @ w[p + "ffn.w_up.weight"].double().T   # (B, T, F)
    if swapped:
        gate, up = up, gate
    return (act(gate) * up) @ w[p + "ffn.w_down.weight"].double().T


@oracle
def norm_misconceptions(x, weight) -> list:
    """What a wrong RMSNorm gives on x: (what it does, its output)."""
    return [("减去了均值（那是 LayerNorm 的做法）", math64.rms_norm(x, weight, EPS, center=True)),
            ("除以的是均方而不是均方根", math64.rms_norm(x, weight, EPS, sqrt=False)),
            ("没有乘 weight", math64.rms_norm(x, torch.ones_like(weight), EPS))]


@oracle
def lm_forward(w, cfg, idx, final_norm=True, base=None, post_norm=False) -> dict:
    """DecoderLM in float64 from the weights w (by name) on the tokens idx (B, T), no cache: the logits
    (B, T, V); each block's rotated keys and its values (B, Hkv, T, Dh); "trace": each part's input and
    output by the contract's module names, with what its misconceptions would output on that input.
    final_norm / base / post_norm (each block x = norm(x + sublayer(x))): misconceptions."""
    T = idx.shape[1]
    Dh = cfg.n_embed // cfg.n_head
    angles = math64.rope_angles(T, Dh, cfg.rope_base if base is None else base)     # (T, Dh/2)
    x, keys, values, trace = w["tok_emb.weight"].double()[idx], [], [], []          # (B, T, C)
    for i in range(cfg.n_layer):
        p = f"blocks.{i}."
        if post_norm:
            x = _post_norm_block(w, cfg, p, x, angles)
            continue
        h = math64.rms_norm(x, w[p + "norm1.weight"].double(), EPS)                   # (B, T, C)
        a, k, v = attention64(w, cfg, p, h, angles)
        keys.append(k)
        values.append(v)
        u = x + a
        h2 = math64.rms_norm(u, w[p + "norm2.weight"].double(), EPS)
        f = swiglu64(w, p, h2)
        trace += [(p + "norm1", x, h, norm_misconceptions(x, w[p + "norm1.weight"].double())),
                  (p + "attn", h, a, [
                      ("rope-on-values", attention64(w, cfg, p, h, angles, rope_v=True)[0]),
                      ("lm-rope-missing", attention64(w, cfg, p, h, angles, rope=None)[0]),
                      ("rope-interleaved-layout", attention64(w, cfg, p, h, angles, rope=math64.rotate_interleaved)[0]),
                      ("not-causal", attention64(w, cfg, p, h, angles, causal=False)[0]),
                      ("scale-by-sqrt-C", attention64(w, cfg, p, h, angles, scale=cfg.n_embed ** -0.5)[0])]),
                  (p + "norm2", u, h2, norm_misconceptions(u, w[p + "norm2.weight"].double())),
                  (p + "ffn", h2, f, [("门控分支和上投影分支用反了", swiglu64(w, p, h2, swapped=True)),
                                      ("门控用了 GELU 而不是 SiLU", swiglu64(w, p, h2, act=F.gelu)),
                                      ("门控用了 sigmoid 而不是 SiLU", swiglu64(w, p, h2, act=torch.sigmoid))])]
        x = u + f                                                                   # (B, T, C)
    normed = math64.rms_norm(x, w["norm.weight"].double(), EPS)
    trace.append(("norm", x, normed, norm_misconceptions(x, w["norm.weight"].double())))
    head = w["tok_emb.weight" if cfg.tie_embeddings else "lm_head.weight"].double()  # (V, C)
    logits = (normed if final_norm else x) @ head.T                                # (B, T, V)
    return {"logits": logits, "keys": keys, "values": values, "trace": trace}


def _post_norm_block(w, cfg, p: str, x, angles):
    """Block p as Post-Norm (the original Transformer's): each sublayer reads the stream, its sum is normed."""
    def norm(t, name):
        return math64.rms_norm(t, w[p + name].double(), EPS)
    u = norm(x + attention64(w, cfg, p, x, angles)[0], "norm1.weight")               # (B, T, C)
    return norm(u + swiglu64(w, p, u), "norm2.weight")


@oracle
def lm_outputs(w, cfg, idx, targets) -> dict:
    """The logits ("want") and the loss of the full forward, the misconceptions' logits and losses, and
    the forward's trace (lm_forward)."""
    B, T = idx.shape
    out = lm_forward(w, cfg, idx)
    logits = out["logits"]                                                          # (B, T, V)
    loss = F.cross_entropy(logits.reshape(B * T, -1), targets.reshape(B * T))
    base_ignored = lm_forward(w, cfg, idx, base=10000.0)["logits"] if cfg.rope_base != 10000 else None
    return {"want": logits, "wrong": [("model-no-final-norm", lm_forward(w, cfg, idx, final_norm=False)["logits"]),
                                      ("rope-base-ignored", base_ignored),
                                      ("block-post-norm", lm_forward(w, cfg, idx, post_norm=True)["logits"]),
                                      ("block-post-norm", lm_forward(w, cfg, idx, post_norm=True,
                                                                    final_norm=False)["logits"])],
            "trace": out["trace"], "loss": loss, "wrong_loss": [
                ("loss-not-mean", loss * B * T),
                ("loss-shifted-twice", F.cross_entropy(logits[:, :-1].reshape(-1, cfg.vocab_size),
                                                       targets[:, 1:].reshape(-1)))]}


@oracle
def block_outputs(w, cfg, x, angles) -> dict:
    """The first block on x (B, T, C) given the angles (T, Dh/2) ("want"), and given none, i.e. rotating by
    the angles of positions 0 … T-1 ("own": a block that ignores the angles it is handed), in float64."""
    p, x64 = "blocks.0.", x.double()

    def block(a):
        h = math64.rms_norm(x64, w[p + "norm1.weight"].double(), EPS)                 # (B, T, C)
        u = x64 + attention64(w, cfg, p, h, a)[0]
        return u + swiglu64(w, p, math64.rms_norm(u, w[p + "norm2.weight"].double(), EPS))

    own = math64.rope_angles(x.shape[1], cfg.n_embed // cfg.n_head, cfg.rope_base)  # (T, Dh/2)
    return {"want": block(angles.double()), "own": block(own)}


@oracle
def lm_cache_script(w, cfg, idx, chunks) -> dict:
    """idx fed chunk by chunk: the full forward's logits ("want") and trace, each block's rotated keys and
    values of every position, the first block's keys of each chunk rotated as if it started at position 0,
    and the trace with each attention's cache misconceptions (chunk by chunk, on the right inputs)."""
    out = lm_forward(w, cfg, idx)
    Dh = cfg.n_embed // cfg.n_head
    starts = [sum(chunks[:j]) for j in range(len(chunks))]
    not_offset = [lm_forward(w, cfg, idx[:, s:s + n])["keys"][0] for s, n in zip(starts, chunks)]
    angles = math64.rope_angles(idx.shape[1], Dh, cfg.rope_base)                   # (T, Dh/2)

    def chunked(p, h, k, v, mask_of):
        """Block p's attention output (B, T, C), chunk by chunk over the keys k, v of every position."""
        def at(s, n):
            return lambda _k, _v: (k[:, :, :s + n], v[:, :, :s + n], mask_of(s, n))
        return torch.cat([attention64(w, cfg, p, h[:, s:s + n], angles[s:s + n], keys_at=at(s, n))[0]
                          for s, n in zip(starts, chunks)], dim=1)

    def not_offset_mask(s, n):                                                      # top-left aligned
        return torch.ones(n, s + n, dtype=torch.bool).tril()

    def no_mask(s, n):                                                              # the new positions see the future
        return torch.ones(n, s + n, dtype=torch.bool)

    def chunk_only_mask(s, n):                                                      # the cached positions unseen
        return torch.cat([torch.zeros(n, s, dtype=torch.bool), torch.ones(n, n, dtype=torch.bool).tril()], dim=1)

    trace = []
    for name, x_in, x_out, wrong in out["trace"]:
        if name.endswith(".attn"):
            i = int(name.split(".")[1])
            k, v = out["keys"][i], out["values"][i]
            wrong = [("cache-mask-offset", chunked(name[:-4], x_in, k, v, not_offset_mask)),
                     ("cache-mask-offset", chunked(name[:-4], x_in, k, v, no_mask)),
                     ("cache-unused", chunked(name[:-4], x_in, k, v, chunk_only_mask))]
        trace.append((name, x_in, x_out, wrong))
    return {"want": out["logits"], "keys": out["keys"], "values": out["values"], "trace": trace,
            "keys-not-offset": torch.cat(not_offset, dim=2)}                        # (B, Hkv, T, Dh)


@oracle
def param_count(cfg, tied_twice=False, untied_once=False, norms=True, final_norm=True, kv_as_q=False, ffn_mats=3):
    """count_parameters and its misconceptions."""
    C, V, Dh = cfg.n_embed, cfg.vocab_size, cfg.n_embed // cfg.n_head
    kv_heads = cfg.n_head if kv_as_q else cfg.n_kv_head
    attention = 2 * C * cfg.n_head * Dh + 2 * C * kv_heads * Dh
    per_block = attention + ffn_mats * C * cfg.ffn_hidden + (2 * C if norms else 0)
    head = V * C if (cfg.tie_embeddings and tied_twice) or (not cfg.tie_embeddings and not untied_once) else 0
    return V * C + cfg.n_layer * per_block + (C if norms and final_norm else 0) + head


@oracle
def param_counts(cfg) -> dict:
    """count_parameters(cfg) ("want") and what each misconception counts, as (code, count) pairs."""
    return {"want": param_count(cfg), "wrong": [
        ("param-count-tied-twice", param_count(cfg, tied_twice=True)),
        ("param-count-untied-once", param_count(cfg, untied_once=True)),
        ("param-count-no-norms", param_count(cfg, norms=False)),
        ("param-count-no-final-norm", param_count(cfg, final_norm=False)),
        ("param-count-kv-as-q", param_count(cfg, kv_as_q=True)),
        ("param-count-ffn-two-matrices", param_count(cfg, ffn_mats=2))]}


# --- DecoderLM ---------------------------------------------------------------------------------

# (config, B, T, chunks); T stays within the context length, the chunks cover T. Both RoPE bases differ from
# 10000, so that a base ignored shows on two; the second is a single sequence (B = 1).
LM_CASES = [(model_sizes(11, 16, 16, 4, 2, 2, 24, base=100.0, tie=True), 2, 7, (3, 2, 1, 1)),
            (model_sizes(13, 12, 12, 3, 1, 1, 20, base=1000.0, tie=False), 1, 5, (2, 1, 2))]
PARTS = ("norm1", "attn", "norm2", "ffn")


@instructor_only
def hidden_lm_cases():
    return [(model_sizes(9, 10, 8, 2, 2, 3, 16, base=500.0, tie=True), 3, 6, (1, 1, 1, 1, 1, 1)),
            (model_sizes(17, 20, 24, 6, 3, 2, 40, base=50.0, tie=False), 2, 9, (4, 1, 3, 1))]


def _hooked(n_layer: int) -> tuple[str, ...]:
    """The parts whose inputs and outputs the kernel reports, in the order the forward runs them."""
    return tuple(f"blocks.{i}.{name}" for i in range(n_layer) for name in PARTS) + ("norm",)


def _check_lm_layout(layout: dict, config, cfg) -> None:
    C, V, L, Dh = cfg.n_embed, cfg.vocab_size, cfg.n_layer, cfg.n_embed // cfg.n_head
    if not (isinstance(config, Record) and config.fields == dataclasses.asdict(cfg)):
        raise CheckError("model-layout", f"应把传进来的配置原样存为属性 config，实际 config 是 {type_name(config)}。")
    emb = part(layout, "tok_emb")
    if "embedding" not in emb["kinds"] or (emb["fields"]["num_embeddings"], emb["fields"]["embedding_dim"]) != (V, C):
        raise CheckError("model-layout", f"tok_emb 应为 nn.Embedding({V}, {C})，实际是 {emb['type']}"
                         + (f"({emb['fields']['num_embeddings']}, {emb['fields']['embedding_dim']})"
                            if "embedding" in emb["kinds"] else "") + "。")
    blocks = part(layout, "blocks")
    if "module-list" not in blocks["kinds"] or blocks["fields"]["len"] != L:
        found = blocks["type"] + (f"（{blocks['fields']['len']} 个）" if "module-list" in blocks["kinds"] else "")
        raise CheckError("model-layout", f"blocks 应为含 {L} 个 Block 的 nn.ModuleList，实际是 {found}。")
    owned = [frozenset(p["id"] for name, p in layout["params"].items() if name.startswith(f"blocks.{i}."))
             for i in range(L)]
    if all(owned) and len(set(owned)) < L:
        raise CheckError("blocks-shared", f"blocks 里的 {L} 个元素并不都是不同的模块对象（有几层的参数是同一批）。")
    for i in range(L):
        _check_block_layout(layout, f"blocks.{i}", cfg, Dh)
    final = layout["params"].get("norm.weight")
    if final is None or tuple(final["shape"]) != (C,):
        found = part(layout, "norm")["type"]
        raise CheckError("model-no-final-norm", f"应有最后的归一化 norm = RMSNorm({C})，实际是 {found}。")
    require_linear(part(layout, "lm_head"), "lm_head", C, V, False, "model-layout")


def _check_block_layout(layout: dict, block: str, cfg, Dh: int) -> None:
    C = cfg.n_embed
    for name in ("norm1", "norm2"):
        weight = layout["params"].get(f"{block}.{name}.weight")
        if weight is None or tuple(weight["shape"]) != (C,):
            found = part(layout, f"{block}.{name}")["type"]
            raise CheckError("model-layout", f"{block}.{name} 应为 RMSNorm({C})，实际是 {found}。")
    widths = {"q_proj": (C, cfg.n_head * Dh), "k_proj": (C, cfg.n_kv_head * Dh), "v_proj": (C, cfg.n_kv_head * Dh),
              "o_proj": (cfg.n_head * Dh, C)}
    for name, (n_in, n_out) in widths.items():
        require_linear(part(layout, f"{block}.attn.{name}"), f"{block}.attn.{name}", n_in, n_out, False, "model-layout")
    require_swiglu_layout(layout, f"{block}.ffn", C, cfg.ffn_hidden, code="model-layout")


def _check_tying(layout: dict, cfg) -> None:
    head, emb = layout["params"]["lm_head.weight"], layout["params"]["tok_emb.weight"]
    shared_memory = head["ptr"] == emb["ptr"]
    if cfg.tie_embeddings and head["id"] != emb["id"]:
        detail = "它们共用一块内存，却是两个 Parameter（只赋值了 .data）" if shared_memory else "它们是两个独立的矩阵"
        raise CheckError("tie-missing", f"tie_embeddings=True，但 lm_head.weight 不是 tok_emb.weight：{detail}。")
    if not cfg.tie_embeddings and (head["id"] == emb["id"] or shared_memory):
        raise CheckError("tie-unwanted", "tie_embeddings=False，但 lm_head.weight 与 tok_emb.weight 是同一个矩阵。")
    own, want = layout["count"], param_counts(cfg)["want"]
    if own != want:
        raise CheckError("model-layout", f"模型的参数总数应为 {want:,}，实际是 {own:,}（多了或少了某些层、偏置）。")


def _make_lm(cfg, weights: dict, seed: int):
    """(yields) DecoderLM(cfg) built under ``seed``, checked for its layout and tying, with the check-made
    ``weights`` loaded: its handle."""
    model = yield Call(CANDIDATE, (cfg,), seed=seed)
    if not getattr(model, "is_a", lambda _kind: False)("module"):
        raise CheckError("wrong-type", f"DecoderLM(config) 应创建一个 nn.Module，实际是 {type_name(model)}。")
    layout = yield Layout(model)
    _check_lm_layout(layout, (yield Get(Attr(model, "config"))), cfg)
    _check_tying(layout, cfg)
    yield Load(model, weights, "model-layout")
    yield Call(Attr(model, "eval"))
    return model


def _split(out, what: str):
    if not (isinstance(out, tuple) and len(out) == 2):
        raise CheckError("wrong-type", f"{what}：forward 应返回二元组 (logits, loss)，实际是 {type_name(out)}。")
    return out


@recipe
def _block_inputs(w, cfg, idx) -> tuple[torch.Tensor, torch.Tensor]:
    """The embeddings of idx (B, T, C) and the angles of positions 0 … T-1 halved (T, Dh/2), in float32."""
    angles = math64.rope_angles(idx.shape[1], cfg.n_embed // cfg.n_head, cfg.rope_base) / 2
    return w["tok_emb.weight"][idx], angles.float()


def _check_block_interface(model, w, cfg, idx, label: str):
    """(yields) blocks[0](x, angles) rotates by the angles it is handed (section 11 calls a block with
    interpolated angles): here the angles of positions 0 … T-1 halved."""
    x, angles = _block_inputs(w, cfg, idx)                                      # (B, T, C), (T, Dh/2)
    what = f"{label}：直接调用 blocks[0](x, angles)，angles 是位置 0…T-1 的角度减半（位置插值）"
    try:
        got = yield Call(Attr(model, "blocks.0"), (x, angles), pure=True)
    except CheckError as err:
        if err.code != "crashed":
            raise
        raise CheckError("block-angles-interface", f"{what}：运行出错（{err.finding}）。") from None
    outs = block_outputs(w, cfg, x, angles)
    if close(got, outs["want"], atol=1e-4):
        return
    found = ("输出与不管传进来的角度、按位置 0…T-1 自己取角度时一样" if close(got, outs["own"], atol=1e-4)
             else f"输出不对（{type_name(got)} {tuple(getattr(got, 'shape', ()))}）")
    raise CheckError("block-angles-interface", f"{what}：{found}。整个模型一次算完时是对的，"
                                               "所以问题在于 Block 怎样使用传进来的 angles。")


def _decode(model, idx, chunks, script: dict, n_layer: int, what: str):
    """(yields) idx chunk by chunk through fresh scripted caches: the logits, concatenated, every part's inputs and
    outputs (seen), and what each cache received (judged by :func:`_check_cache_contents`, after the logits)."""
    caches = []
    for keys, values in zip(script["keys"], script["values"]):
        caches.append((yield Get(New(SCRIPTED_CACHE, (keys, values)))))
    outs, seen, start = [], {}, 0
    try:
        for n in chunks:
            observed = yield Call(model, (idx[:, start:start + n],), {"caches": caches},
                                  watch=Watch(hooks=_hooked(n_layer)), hints=_ROPE_AFTER_CACHE,
                                  hints_of=Attr(model, "blocks.0.attn.forward"))
            outs.append(_split(observed.value, what)[0])
            for name, pairs in observed.seen.items():
                seen.setdefault(name, []).extend(pairs)
            start += n
    except CheckError:
        _check_cache_use((yield from _received(caches)), what)
        raise
    received = yield from _received(caches)
    _check_cache_use(received, what)
    got = [_positions(r) for r in received]
    if got != [start] * len(caches):
        raise CheckError("wrong", f"{what}：喂了 {start} 个位置之后，每层的缓存应各有 {start} 个位置，"
                                  f"实际是 {got}。{OBSERVED}")
    if not all(isinstance(o, torch.Tensor) and o.dim() == 3 for o in outs):
        raise CheckError("wrong-type", f"{what}：logits 应是 [B, T, V] 的张量。")
    _check_first_cache_offset(received, script, what)
    return torch.cat(outs, dim=1), seen, received                                # (B, T, V)


# A crash under a cache whose attention rotates after cache.update: it rotates the cached keys again, by the
# new positions' angles (a table of T rows against S keys)
_ROPE_AFTER_CACHE = {"rope-after-cache": r"\.update\([\s\S]*rope\w*\("}


def _received(caches) -> list:
    """(yields) What each scripted cache was given: per cache, its (k, v) pairs as data."""
    received = []
    for cache in caches:
        received.append((yield Get(Attr(cache, "received"))))
    return received


def _positions(pairs) -> int:
    return sum(positions(k) for k, _ in pairs)


def _put(pairs, index: int):
    """Everything a block put in its cache (0: keys, 1: values) along the positions, or None."""
    try:
        return torch.cat([pair[index] for pair in pairs], dim=2)                  # (B, Hkv, T, Dh)
    except (RuntimeError, TypeError, IndexError):
        return None


def _check_cache_use(received: list, what: str) -> None:
    lengths = [_positions(r) for r in received]
    if len(lengths) > 1 and lengths[0] > 0 and not any(lengths[1:]):
        raise CheckError("cache-one-for-all-layers", f"{what}：只有第一层的缓存里有东西，"
                                                     f"各层的缓存长度是 {lengths}。{OBSERVED}")
    if not any(lengths):
        raise CheckError("cache-unused", f"{what}：传进去的缓存仍是空的"
                                         "（forward 没有把 caches[i] 交给第 i 个 Block）。" + OBSERVED)


def _check_first_cache_offset(received: list, script: dict, what: str) -> None:
    """The first block's cached keys rotated from position 0 in every chunk (seen in the cache itself)."""
    keys = _put(received[0], 0)
    if not close(keys, script["keys"][0], atol=1e-4) and close(keys, script["keys-not-offset"], atol=1e-4):
        raise CheckError("decode-positions-not-offset", f"{what}：第 1 个 Block 放进缓存的 k 是从位置 0 起旋转的，"
                                                        "与下面这个误区算出的结果完全一致。" + OBSERVED)


def _check_cache_contents(received: list, script: dict, what: str) -> None:
    """Each block put in its cache the keys rotated at their own positions, and the values (judged after the logits:
    a later block's wrong K/V that comes from an earlier part has that part named first)."""
    for i, pairs in enumerate(received):
        keys, values = _put(pairs, 0), _put(pairs, 1)
        if not (close(keys, script["keys"][i], atol=1e-4) and close(values, script["values"][i], atol=1e-4)):
            raise CheckError("wrong", f"{what}：第 {i + 1} 个 Block 放进缓存的 K/V 不对"
                                      f"（应是这些位置旋转后的 k 和 v）。{OBSERVED}")


_PART_CODES = {"norm1": "lm-rmsnorm-wrong", "norm2": "lm-rmsnorm-wrong", "norm": "lm-rmsnorm-wrong",
               "attn": "lm-attention-wrong", "ffn": "lm-swiglu-wrong"}
_PART_NAMES = {"norm1": "norm1（RMSNorm）", "norm2": "norm2（RMSNorm）", "attn": "attn（带 RoPE 的注意力）",
               "ffn": "ffn（SwiGLU）", "norm": "最后的 norm（RMSNorm）"}


def _part_label(name: str) -> str:
    """blocks.1.attn -> 第 2 个 Block 的 attn（带 RoPE 的注意力）; norm -> 最后的 norm（RMSNorm）."""
    *block, part_name = name.split(".")
    return (f"第 {int(block[1]) + 1} 个 Block 的 " if block else "") + _PART_NAMES[part_name]


def _joined(calls, index: int):
    """The inputs (0) or outputs (1) of a part's calls, joined along the positions; None if not tensors."""
    try:
        return torch.cat([call_[index] for call_ in calls], dim=1)
    except (RuntimeError, TypeError, IndexError):
        return None


def _residual_missing(name: str, got, trace: dict) -> str | None:
    """The branch whose output alone reached `name` instead of being added to the residual stream."""
    *block, part_name = name.split(".")
    i = int(block[1]) if block else len([n for n in trace if n.endswith(".ffn")])
    branch = f"blocks.{i}.attn" if part_name == "norm2" else f"blocks.{i - 1}.ffn" if i > 0 else None
    if branch and close(got, trace[branch][1], atol=1e-4):
        return branch
    return None


def _located(seen: dict, trace, what: str, forwards: int = 1) -> tuple[CheckError, str | None, CheckError] | None:
    """Walk the parts in the order the forward runs them: the first one whose input matches the oracle's and whose
    output does not (or the residual connection feeding a wrong input, or a part called other than once per
    forward: ``forwards`` model calls made ``seen``). The inputs and outputs were observed in the kernel, by forward
    hooks: only the diagnosis rests on them, never a pass. Returns (the finding, the misconception its output
    matched or None, the finding that only locates the part), or None when the first part's input is not the
    embedding's."""
    by_name = {name: (x_in, x_out) for name, x_in, x_out, _ in trace}
    for name, x_in, x_out, wrong in trace:
        calls, label = seen.get(name), _part_label(name)
        if not calls or len(calls) != forwards:
            err = CheckError("lm-block-wiring", f"{what}：在它之前的部件输出都对，{label}却在每次前向里被调用了 "
                                                f"{len(calls or ()) / forwards:g} 次（应为 1 次）。")
            return err, None, err
        got_in, got_out = _joined(calls, 0), _joined(calls, 1)
        if not close(got_in, x_in, atol=1e-4):
            if name == "blocks.0.norm1":
                return None
            branch = _residual_missing(name, got_in, by_name)
            err = (CheckError("lm-residual-missing", f"{what}：{label}收到的输入正好是{_part_label(branch)}"
                                                     "的输出本身，没有加上残差。") if branch else
                   CheckError("lm-block-wiring", f"{what}：在它之前的部件输出都对，{label}收到的输入却不对"
                                                 "（应是残差流：上一步的 x 加上子层的输出）。"))
            return err, None, err
        if close(got_out, x_out, atol=1e-4):
            continue
        part_code = _PART_CODES[name.split(".")[-1]]
        located = CheckError(part_code, f"{what}：{label}是第一个输入对、输出却不对的部件。")
        for mistake, output in wrong:
            if close(got_out, output, atol=1e-4):
                if mistake in CODES:
                    named = CheckError(mistake, f"{what}：{label}的输入对，输出却与下面这个误区算出的一致。")
                    return named, mistake, located
                return (CheckError(part_code, f"{what}：{label}的输入对，输出却不对：与“{mistake}”算出的一致。"),
                        mistake, located)
        return located, None, located
    return None


def _localise(first: _Judged, others=()) -> None:
    """Raise the finding of :func:`_located` on ``first``. A misconception its part's output matched is named only
    when every other run (``others``: _Judged) agrees with it (:func:`_agrees`) and one of them shows it too; else the
    part is only located (an unrelated mistake can give a known one's numbers on one case)."""
    found = _located(first.seen, first.trace, first.case.what, first.forwards)
    if found is None:
        return
    err, mistake, located = found
    if mistake is None:
        raise err
    shown = [other for other in others if _shows(other, mistake)]
    if not shown or not all(other in shown or _unchanged_by(other, mistake) for other in others):
        raise located
    also = "；".join(other.case.what for other in shown)
    raise CheckError(err.code, f"{err.finding}另一次运行（{also}）里，第一个输入对、输出却不对的部件也与这个误区一致。")


def _shows(run: _Judged, mistake: str) -> bool:
    """``run`` went wrong, and its first wrong part's output is ``mistake``'s."""
    return not run.case.right() and (_located(run.seen, run.trace, run.case.what, run.forwards) or (None, None))[1] \
        == mistake


def _unchanged_by(run: _Judged, mistake: str) -> bool:
    """``run`` is right, and ``mistake`` (in one of its forms) would change none of its parts' outputs (one token at
    a time, no mask under a cache is no mistake): that run cannot tell the mistake from the right answer."""
    def unchanged(x_out, wrong) -> bool:
        outputs = [output for code, output in wrong if code == mistake]
        return not outputs or any(close(output, x_out, atol=1e-4) for output in outputs)
    return run.case.right() and all(unchanged(x_out, wrong) for _, _, x_out, wrong in run.trace)


class _Forward(NamedTuple):
    """One configuration of check_DecoderLM, built and run once without a cache."""
    cfg: object
    w: dict
    model: object
    idx: torch.Tensor                                                               # (B, T)
    targets: torch.Tensor                                                           # (B, T)
    idx2: torch.Tensor                                                              # (B, T) decoded token by token
    label: str
    outs: dict
    judged: _Judged                                                                 # its logits, as the hooks saw them


def _forward(i: int, sizes: dict, B: int, T: int, seed: int):
    """(yields) DecoderLM built for configuration i, its layout checked, run on random tokens: a _Forward."""
    cfg = _config(**sizes)
    w = lm_weights(cfg, seed * 1009 + 17 * i)
    model = yield from _make_lm(cfg, w, seed * 1009 + 17 * i)
    g = torch.Generator().manual_seed(seed + 31 * i)
    idx = torch.randint(cfg.vocab_size, (B, T), generator=g)                        # (B, T)
    targets = torch.randint(cfg.vocab_size, (B, T), generator=g)
    idx2 = torch.randint(cfg.vocab_size, (B, T), generator=g)
    label = (f"vocab={cfg.vocab_size}, n_embed={cfg.n_embed}, n_head={cfg.n_head}, n_kv_head={cfg.n_kv_head}, "
             f"n_layer={cfg.n_layer}, rope_base={cfg.rope_base:g}, tie={cfg.tie_embeddings}, B={B}, T={T}")
    outs = lm_outputs(w, cfg, idx, targets)
    observed = yield Call(model, (idx,), pure=True, watch=Watch(hooks=_hooked(cfg.n_layer)))
    logits, loss = _split(observed.value, label)
    if loss is not None:
        raise CheckError("wrong-type", f"{label}：没给 targets 时 loss 应为 None，实际是 {type_name(loss)}。")
    case = Seen(f"{label} 时的 logits", require_tensor(logits, f"{label} 时的 logits"), outs["want"], outs["wrong"],
                atol=1e-4, inputs={"idx": idx})
    return _Forward(cfg, w, model, idx, targets, idx2, label, outs, _Judged(case, observed.seen, outs["trace"]))


class _Judged(NamedTuple):
    """One model run judged with the others of its kind: its logits as a case, each part's (input, output) as the
    kernel's hooks saw them, the oracle's trace, and how many model calls made them."""
    case: Seen
    seen: dict
    trace: list
    forwards: int = 1
    cached: tuple = ()                                                              # (what the caches received, script)


def _judge_together(judged: list) -> None:
    """The logits of every run judged together: a model-level misconception confirmed on two (decide), else the
    first wrong run's first wrong part, its misconception named only if the other runs' located parts show it too."""
    try:
        decide([one.case for one in judged])
    except CheckError as err:
        if err.code == "wrong":
            first = next(one for one in judged if not one.case.right())
            _localise(first, [one for one in judged if one is not first])
        raise


def _collected(judge, items, run_one):
    """(yields) run_one(item) for every item, collected; a failure after an earlier run went wrong gives that
    earlier run's verdict (``judge`` on what was collected): the first mistake is the one to show."""
    done = []
    for item in items:
        try:
            done.append((yield from run_one(item)))
        except CheckError:
            if done:
                judge(done)
            raise
    return done


def _decoded(run, idx, chunks, what: str):
    """(yields) ``run``'s model fed ``idx`` chunk by chunk through fresh scripted caches, as a _Judged."""
    script = lm_cache_script(run.w, run.cfg, idx, chunks)
    got, seen, received = yield from _decode(run.model, idx, chunks, script, run.cfg.n_layer, what)
    case = Seen(what, require_tensor(got, what), script["want"], atol=1e-4, inputs={"idx": idx})
    return _Judged(case, seen, script["trace"], len(chunks), (received, script))


@check("DecoderLM")
def check_DecoderLM(extended: bool = False, seed: int = 0):
    cases = LM_CASES + (hidden_lm_cases() if extended else [])

    def forward(i):
        sizes, B, T, _ = cases[i]
        return (yield from _forward(i, sizes, B, T, seed))

    runs = yield from _collected(lambda done: _judge_together([run.judged for run in done]), range(len(cases)), forward)
    _judge_together([run.judged for run in runs])
    for run in runs:
        yield from _check_block_interface(run.model, run.w, run.cfg, run.idx, run.label)
    losses = Cases()
    for run in runs:
        _, loss = _split((yield from losses.call(Call(run.model, (run.idx,), {"targets": run.targets}, pure=True))),
                         run.label)
        losses.add(f"{run.label}，给了 targets 时的 loss", loss, run.outs["loss"], run.outs["wrong_loss"], atol=1e-4,
                   inputs={"idx": run.idx, "targets": run.targets})
    losses.decide()
    # chunks through fresh caches == the full forward: RoPE positions start at the cached length; then another
    # sequence token by token. Each kind judged over every configuration (a cache's misconception named on two).
    chunked = [(run, run.idx, chunks,
                f"{run.label}，按分块 {list(chunks)} 带缓存解码的 logits（应等于一次算完的 logits）")
               for run, (_, _, _, chunks) in zip(runs, cases)]
    one_by_one = [(run, run.idx2, (1,) * run.idx2.shape[1],
                   f"{run.label}，另一条序列、新建的缓存，逐个 token 解码的 logits（应等于一次算完的 logits）")
                  for run in runs]
    for decodes in (chunked, one_by_one):
        judged = yield from _collected(_judge_together, decodes, lambda d: _decoded(*d))
        _judge_together(judged)
        for one in judged:
            _check_cache_contents(*one.cached, one.case.what)


# --- count_parameters --------------------------------------------------------------------------

# Each misconception changes the count of two of them at least (tied and untied, GQA and MHA), so that it is
# confirmed on two; the last is Llama-2-7B.
COUNT_CASES = [model_sizes(50, 32, 32, 4, 2, 2, 64, tie=True), model_sizes(97, 64, 48, 6, 3, 3, 130, tie=False),
               model_sizes(61, 16, 24, 4, 4, 1, 40, tie=True),
               model_sizes(32000, 4096, 4096, 32, 32, 32, 11008, tie=False)]


@instructor_only
def hidden_count_cases():
    return [model_sizes(128256, 131072, 2048, 32, 8, 16, 8192, base=500000.0, tie=True),   # Llama-3.2-1B
            model_sizes(32000, 32768, 4096, 32, 8, 32, 14336, tie=False),                   # Mistral-7B
            model_sizes(7, 8, 8, 2, 1, 1, 12, tie=True)]


def _drawn_count_case(seed: int) -> dict:
    g = torch.Generator().manual_seed(seed)
    H, rep, Dh = (int(v) for v in torch.randint(1, 5, (3,), generator=g))
    V, ffn = (int(torch.randint(low, high, (1,), generator=g)) for low, high in ((5, 300), (3, 200)))
    return model_sizes(V, 64, H * 2 * Dh, H, max(1, H // rep), 1 + seed % 4, ffn, tie=bool(seed % 2))


# torch functions that make a tensor: a formula makes none, building a model makes its parameters with them
_FACTORIES = frozenset({"empty", "zeros", "ones", "full", "rand", "randn", "randint", "normal_", "uniform_",
                        "empty_like", "zeros_like", "ones_like"})
_BUILDS_MODEL = r"DecoderLM\s*\(|\bLM\s*\(|\.parameters\s*\(|nn\.(Linear|Embedding)\s*\("


def _counted(cfg, what: str):
    """(yields) count_parameters(cfg), run on the meta device: a model built inside it (the exercise says not to)
    allocates nothing there (a 7B one would take 27 GB), and is named [builds-model] with what made it."""
    try:
        seen = yield Call(CANDIDATE, (cfg,), meta=True, watch=Watch(torch_calls=True),
                          hints={"builds-model": _BUILDS_MODEL})
    except CheckError as err:
        if err.code == "builds-model":
            raise CheckError("builds-model", f"{what}：函数里造了模型（或它的层），运行出错：{err.finding}") from None
        raise
    made = sorted(set(seen.torch_calls) & _FACTORIES)
    if made:
        raise CheckError("builds-model", f"{what}：函数运行时创建了张量（调用了 torch 的 {'、'.join(made)}），"
                                         f"也就是造了模型或它的层来数参数{OBSERVED}。检查是在 meta 设备上调用它的，"
                                         "所以没有真的分配内存；平常调用时（11 节会用它数真实模型的参数），Llama-2-7B "
                                         "这么大的配置要 27 GB 以上的内存，内核会被系统杀掉。")
    return seen.value


@check("count_parameters")
def check_count_parameters(extended: bool = False, seed: int = 0):
    answers = []                                                     # (what, got, counts) per configuration
    for sizes in COUNT_CASES + (hidden_count_cases() if extended else []) + [_drawn_count_case(seed)]:
        cfg = _config(**sizes)
        what = (f"vocab={cfg.vocab_size}, n_embed={cfg.n_embed}, n_head={cfg.n_head}, n_kv_head={cfg.n_kv_head}, "
                f"n_layer={cfg.n_layer}, ffn_hidden={cfg.ffn_hidden}, tie_embeddings={cfg.tie_embeddings}")
        answers.append((what, (yield from _counted(cfg, what)), param_counts(cfg)))
    for what, got, counts in answers:
        want = counts["want"]
        if isinstance(got, bool) or not isinstance(got, int):
            if isinstance(got, float) and got == want:
                raise CheckError("wrong-type", f"{what}：数值对了，但应返回 int（参数个数），实际是 float。")
            raise CheckError("wrong-type", f"{what}：应返回 int（参数个数），实际是 {type_name(got)}。")
    code = confirmed([_count_case(*answer) for answer in answers])
    for what, got, counts in answers:
        if got != counts["want"]:
            want = counts["want"]
            if code is not None:
                raise CheckError(code, f"{what}：应为 {want:,} 个参数，实际是 {got:,}；其余配置上数出的个数"
                                       "也都与下面这个误区算出的一致。")
            raise CheckError("wrong", f"{what}：应为 {want:,} 个参数，实际是 {got:,}（相差 {got - want:+,}）。")


def _count_case(what: str, got: int, counts: dict) -> Seen:
    """One configuration's count as a case of compare.confirmed, exactly (a count is one number: another mistake
    can give a misconception's count on one configuration by accident; it is named only when confirmed)."""
    def count(n: int) -> torch.Tensor:
        return torch.tensor(n, dtype=torch.float64)
    return Seen(what, count(got), count(counts["want"]), [(c, count(n)) for c, n in counts["wrong"]], atol=0, rtol=0)


# --- generate ----------------------------------------------------------------------------------

class TableLM(nn.Module):
    """A stand-in for DecoderLM, built in the kernel from a table the check sends, with the interface
    generate relies on (config, blocks, forward(idx, targets=None, caches=None) -> (logits, None)): the
    logits after token s at position p are table[p % S, s], positions counted on from len(caches[0]).
    Caches receive dummy K/V, so that len(cache) counts the positions as a real model's would. It records
    its calls — (tokens fed, each cache's length) — and judges nothing."""

    def __init__(self, table: torch.Tensor, n_layer: int = 2):
        super().__init__()
        S, V, _ = table.shape
        self.config = _config(**model_sizes(V, S, 4, 2, 1, n_layer, 4))
        self.blocks = nn.ModuleList(nn.Module() for _ in range(n_layer))
        self.tok_emb = nn.Embedding(V, 4)                                          # so that parameters() is not empty
        self.table = table                                                         # (S, V, V)
        self.calls: list[tuple[int, list[int] | None]] = []

    def forward(self, idx, targets=None, caches=None):  # noqa: ARG002 (DecoderLM's interface; no loss here)
        B, T = idx.shape
        self.calls.append((T, None if caches is None else [len(c) for c in caches]))
        start = len(caches[0]) if caches else 0
        for cache in caches or []:
            cache.update(torch.zeros(B, 1, T, 2), torch.zeros(B, 1, T, 2))        # (B, Hkv=1, T, Dh=2)
        positions = torch.arange(start, start + T) % self.table.size(0)            # (T,)
        return self.table[positions[None, :], idx], None                           # (B, T, V)


@oracle
def greedy_tokens(table, prompt, n: int) -> torch.Tensor:
    """prompt (B, T0) continued greedily by n tokens under TableLM(table): (B, T0 + n)."""
    idx = prompt
    for _ in range(n):
        logits = table[(idx.size(1) - 1) % table.size(0)][idx[:, -1]]                # (B, V)
        idx = torch.cat([idx, logits.argmax(-1, keepdim=True)], dim=1)             # (B, T + 1)
    return idx


def _generator(seed: int) -> New:
    return New("utils.checks.stand_ins:generator", (seed,))


def _run(table, prompt, n, what, global_seed=None, **kwargs):
    """(yields) generate on a fresh table model (torch's global seed set to ``global_seed`` first): its
    output, checked for shape, dtype and the prompt it starts with, and the calls the model recorded."""
    model = yield Get(New(f"{HERE}:TableLM", (table,)))
    out = yield Call(CANDIDATE, (model, prompt, n), kwargs, seed=global_seed, pure=True)
    B, T = prompt.shape
    if not isinstance(out, torch.Tensor) or out.shape != (B, T + n):
        shape = tuple(out.shape) if isinstance(out, torch.Tensor) else type_name(out)
        raise CheckError("wrong-shape", f"{what}：应返回 [B, T + max_new_tokens] = {(B, T + n)} 的张量，"
                                        f"实际是 {shape}。")
    if out.dtype.is_floating_point or not torch.equal(out[:, :T], prompt):
        raise CheckError("wrong", f"{what}：返回的序列应以原来的提示词开头，后面接新生成的 token id（整数）。")
    return out, (yield Get(Attr(model, "calls")))
def _check_protocol(calls, T0: int, n: int, n_layer: int, what: str) -> None:
    """Prompt once through empty caches, then one token per step through the same caches."""
    if not calls:
        raise CheckError("wrong", f"{what}：generate 没有调用模型。{OBSERVED}")
    if all(c is None for _, c in calls):
        raise CheckError("generate-no-cache", f"{what}：调用模型 {len(calls)} 次，一次也没有传 caches。"
                                              f"{OBSERVED}")
    first_len, first_caches = calls[0]
    if first_caches is None or first_len != T0 or any(first_caches):
        raise CheckError("wrong", f"{what}：第一次调用模型应把 {T0} 个 token 的提示词和新建的（空的）缓存一起喂进去，"
                                  f"实际喂了 {first_len} 个 token，缓存长度 {first_caches}。{OBSERVED}")
    for step, (length, cached) in enumerate(calls[1:], start=1):
        if cached is None or not any(cached):
            raise CheckError("generate-no-cache", f"{what}：第 {step + 1} 次调用模型时没有带着之前的缓存"
                                                  f"（喂了 {length} 个 token，缓存长度 {cached}）。{OBSERVED}")
        if length != 1:
            raise CheckError("generate-refeeds-cache", f"{what}：第 {step + 1} 次调用模型时"
                                                       f"缓存里已有 {cached[0]} 个位置，"
                                                       f"却又喂了 {length} 个 token（应只喂新生成的 1 个）。"
                                                       f"{OBSERVED}")
        if cached != [T0 + step - 1] * n_layer:
            raise CheckError("wrong", f"{what}：第 {step + 1} 次调用模型时各层缓存应有 {T0 + step - 1} 个位置，"
                                      f"实际是 {cached}。{OBSERVED}")
    if len(calls) not in (n, n + 1):
        raise CheckError("wrong", f"{what}：生成 {n} 个 token 应调用模型 {n} 次（提示词 1 次 + 每个新 token 1 次，"
                                  f"最后一个可以不喂），实际调用了 {len(calls)} 次。{OBSERVED}")


# (prompt B, prompt T, new tokens, model seed) for the greedy / protocol part
GEN_CASES = [(2, 3, 5, 0), (1, 1, 4, 1)]
GEN_VOCAB, GEN_POSITIONS = 13, 24                                                  # the greedy part's table model
BASE = torch.tensor([2.0, 1.2, 0.5, 0.0, -0.7, -1.5])                             # (V,) the fixed model's logits
N_DRAWS, TOLERANCE = 4000, 0.04                                                    # total-variation distance


def _tv(tokens: torch.Tensor, p: torch.Tensor) -> float:
    freq = torch.bincount(tokens, minlength=p.numel()).double() / tokens.numel()
    return 0.5 * (freq - p.double()).abs().sum().item()


@instructor_only
def hidden_gen_cases():
    return [(3, 4, 7, 2), (2, 6, 3, 3)]


@recipe
def _fixed_table() -> torch.Tensor:
    """The sampling part's table: the logits after token s are BASE rolled by s, at every position."""
    V = BASE.numel()
    return torch.stack([BASE.roll(s) for s in range(V)]).expand(GEN_POSITIONS, V, V)   # (S, V, V)




def _check_greedy(extended: bool, seed: int):
    for B, T0, n, model_seed in GEN_CASES + (hidden_gen_cases() if extended else []):
        table = randn(GEN_POSITIONS, GEN_VOCAB, GEN_VOCAB, seed=seed * 101 + model_seed, scale=2.0)   # (S, V, V)
        g = torch.Generator().manual_seed(seed + model_seed)
        prompt = torch.randint(GEN_VOCAB, (B, T0), generator=g)                       # (B, T0)
        what = f"贪心（temperature=0），提示词形状 {(B, T0)}，max_new_tokens={n}"
        try:
            out, calls = yield from _run(table, prompt, n, what, temperature=0, generator=_generator(1))
        except CheckError as err:
            if err.code == "crashed":
                raise CheckError("generate-greedy-samples",
                                 f"{what}：运行出错（{err.finding}）——多半是除以了 0。") from None
            raise
        _check_protocol(calls, T0, n, 2, what)
        want = greedy_tokens(table, prompt, n)
        if torch.equal(out, want):
            continue
        for other_seed in (2, 3, 4):
            other, _ = yield from _run(table, prompt, n, what, temperature=0, generator=_generator(other_seed))
            if not torch.equal(other, out):
                raise CheckError("generate-greedy-samples", f"{what}：换一个 generator 种子，结果就变了。")
        raise CheckError("wrong", f"{what}：应为 {want.tolist()}（每步取 logits 最大的 token），"
                                  f"实际是 {out.tolist()}。")


def _check_sampling(extended: bool, seed: int):
    table = _fixed_table()
    prompt = torch.tensor([[4, 3]]).expand(N_DRAWS, 2).contiguous()               # (N, 2): the last token is 3
    logits = BASE.roll(3)                                                          # (V,) the first new token's logits
    what = f"{N_DRAWS} 条相同的提示词各采样 2 个 token"
    # the same generator seed -> the same tokens, whatever the global random state
    first, calls = yield from _run(table, prompt, 2, f"{what}（temperature=1）", global_seed=1, temperature=1.0,
                                   generator=_generator(seed))
    _check_protocol(calls, 2, 2, 2, f"{what}（temperature=1）")
    second, _ = yield from _run(table, prompt, 2, what, global_seed=2, temperature=1.0, generator=_generator(seed))
    if not torch.equal(first, second):
        raise CheckError("ignores-generator", f"{what}：两次用同一个种子的 generator，抽到的 token 却不同。")
    drawn = []                                                                     # (tau, first new tokens (N,))
    for tau in [1.0, 0.5, 2.0] + ([0.8] if extended else []):
        out = first if tau == 1.0 else (yield from _run(table, prompt, 2, f"{what}（temperature={tau}）",
                                                          temperature=tau, generator=_generator(seed + 1)))[0]
        drawn.append((tau, out[:, 2]))
    _judge_temperatures(drawn, logits, what)
    by_k = []                                                                      # (k, output (N, 4))
    for k in [2, 3] + ([4, 1] if extended else []):
        out, _ = yield from _run(table, prompt, 2, f"{what}（top_k={k}）", temperature=1.0, top_k=k,
                                 generator=_generator(seed + 2))
        by_k.append((k, out))
    ignored = all(_tv(out[:, 2], F.softmax(logits, dim=-1)) <= TOLERANCE for _, out in by_k)
    for k, out in by_k:
        _judge_top_k(out, logits, k, what, ignored)
    greedy, _ = yield from _run(table, prompt, 2, f"{what}（temperature=0）", temperature=0,
                                generator=_generator(seed + 3))
    want = greedy_tokens(table, prompt[:1], 2)[0, 2:]                              # (2,)
    if not (greedy[:, 2:] == want).all():
        raise CheckError("generate-greedy-samples", f"{what}（temperature=0）：应当每条都是贪心的 {want.tolist()}，"
                                                    f"实际抽到了 {sorted(set(greedy[:, 2].tolist()))} 等不同的 token。")


# what a temperature does to the logits: as the formula says, and as each misconception applies it
_TEMPERATURE = {"right": lambda z, tau: z / tau, "generate-temperature-multiplied": lambda z, tau: z * tau,
                "generate-temperature-after-softmax": lambda z, _tau: z}


def _temperature_fits(tokens, logits, tau: float) -> set[str]:
    """The ways of applying ``tau`` whose distribution the first new tokens' frequencies follow."""
    return {way for way, apply in _TEMPERATURE.items()
            if _tv(tokens, F.softmax(apply(logits, tau), dim=-1)) <= TOLERANCE}


def _judge_temperatures(drawn: list, logits, what: str) -> None:
    """The first new tokens' frequencies follow softmax(logits / tau) at every tau, else the diagnosis on the first
    wrong tau: a misconception named only when the frequencies follow it at every tau and two taus other than 1
    tell it from the formula (frequencies are a sample: one tau can match a wrong distribution by accident)."""
    fits = [(tau, tokens, _temperature_fits(tokens, logits, tau)) for tau, tokens in drawn]
    wrong = [(tau, tokens) for tau, tokens, ways in fits if "right" not in ways]
    if not wrong:
        return
    tau, tokens = wrong[0]
    want = F.softmax(logits / tau, dim=-1)
    freq = (torch.bincount(tokens, minlength=BASE.numel()).double() / N_DRAWS).tolist()
    detail = (f"temperature={tau} 时第一个新 token 的频率 {[round(f, 3) for f in freq]}，"
              f"应接近 softmax(logits / temperature) = {[round(p, 3) for p in want.tolist()]}")
    for code in ("generate-temperature-multiplied", "generate-temperature-after-softmax"):
        if all(code in ways for _, _, ways in fits) and sum(t != 1.0 for t, _, _ in fits) >= 2:
            seen_at = "、".join(f"{t:g}" for t, _, _ in fits)
            raise CheckError(code, f"{what}：{detail}；temperature = {seen_at} 时的频率都与下面这个误区相符。")
    raise CheckError("wrong", f"{what}：{detail}。")


def _judge_top_k(out, logits, k: int, what: str, ignored_everywhere: bool) -> None:
    """Every first new token is among the top k, at the renormalised frequencies, and so is every second.
    top_k ignored is named only when the frequencies follow the full softmax at every k (``ignored_everywhere``):
    one k can match it by accident."""
    allowed = torch.topk(logits, k).indices                                        # (k,)
    tokens = out[:, 2]
    kept = logits.masked_fill(~torch.isin(torch.arange(BASE.numel()), allowed), float("-inf"))
    if torch.isin(tokens, allowed).all() and _tv(tokens, F.softmax(kept, dim=-1)) <= TOLERANCE:
        if all(torch.isin(out[r, 3], torch.topk(BASE.roll(int(out[r, 2])), k).indices) for r in range(0, N_DRAWS, 97)):
            return
        raise CheckError("generate-top-k-wrong", f"{what}（top_k={k}）：第二个新 token 抽到了前 {k} 名之外的 token。")
    detail = f"top_k={k}：抽到了 {sorted(set(tokens.tolist()))}，前 {k} 名是 {sorted(allowed.tolist())}"
    if ignored_everywhere:
        raise CheckError("generate-top-k-ignored",
                         f"{what}，{detail}；每个 top_k 下的频率都接近不截断的 softmax(logits)。")
    raise CheckError("generate-top-k-wrong", f"{what}，{detail}（或频率不对）。")


@check("generate")
def check_generate(extended: bool = False, seed: int = 0):
    yield from _check_greedy(extended, seed)
    yield from _check_sampling(extended, seed)


# --- top_p_filter ------------------------------------------------------------------------------

# Designed rows (probabilities before a per-row shift of the logits): peaked, flat, in between. With
# top_p = 0.75 they keep 1, 5 and 3 tokens; every misconception keeps a different set.
DESIGNED_PROBS = [[0.82, 0.06, 0.05, 0.04, 0.02, 0.01], [0.20, 0.19, 0.18, 0.16, 0.14, 0.13],
                  [0.40, 0.25, 0.15, 0.10, 0.06, 0.04]]
DESIGNED_SHIFTS = [1.5, -0.5, 3.0]
# (leading shape, vocab, top_p, scale of the random logits); each cumulative sum stays clear of top_p
TOP_P_CASES = [((5,), 11, 0.9, 2.0), ((4,), 9, 0.5, 1.0)]
TOP_P_DIMS_CASES = [((), 10, 0.8, 2.0), ((2, 3), 7, 0.6, 1.5), ((1,), 9, 0.7, 1.5)]   # any leading dims, one row
BOUNDARY_GAP = 2e-3                                                            # no cumulative sum this near top_p


@instructor_only
def hidden_top_p_cases():
    return [((6,), 16, 0.95, 3.0), ((3,), 5, 0.3, 0.5), ((2, 2, 2), 13, 0.7, 2.0)]


def _keep(scores, top_p: float, descending: bool = True, crossing: bool = True, back: str = "scatter"):
    """Per row of scores (N, V): keep the tokens in the order of `descending` until their running sum
    reaches top_p (with the crossing token when `crossing`); the mask put back in the tokens' own order
    (`back` "scatter"), or, as misconceptions, the sorted positions' mask laid over the original order
    ("none") or read through the sort's indices instead of written to them ("gather")."""
    ranked, order = scores.sort(dim=-1, descending=descending)                 # (N, V)
    running = ranked.cumsum(dim=-1)
    kept = running - ranked < top_p if crossing else running < top_p           # (N, V) in sorted order
    return {"scatter": lambda: torch.zeros_like(kept).scatter(-1, order, kept), "none": lambda: kept,
            "gather": lambda: kept.gather(-1, order)}[back]()


@oracle
def nucleus(logits, top_p: float) -> dict:
    """The nucleus of every row of logits (..., V), leniently: "must" (strictly more probable than the
    crossing token), "may" (tied with it), "need" (how many of the ties a nucleus holds) and "n_keep"
    (its size), both (...); the smallest gap between a running sum and top_p; each misconception's mask."""
    shape, V = logits.shape, logits.size(-1)
    z = logits.double().reshape(-1, V)                                         # (N, V)
    p = F.softmax(z, dim=-1)
    ranked = p.sort(dim=-1, descending=True).values
    n_keep = (ranked.cumsum(-1) - ranked < top_p).sum(-1) if top_p < 1 else torch.full((z.size(0),), V)
    boundary = ranked.gather(-1, (n_keep - 1)[:, None])                         # (N, 1) the crossing token's p
    tied = torch.isclose(p, boundary, rtol=1e-6, atol=0.0)                    # within float32 logits' last bits
    must = (p > boundary) & ~tied
    flat = F.softmax(z.reshape(1, -1), dim=-1)
    wrong = [("top-p-drops-crossing", _keep(p, top_p, crossing=False)),
             ("top-p-ascending", _keep(p, top_p, descending=False)),
             ("top-p-not-probabilities", _keep(z, top_p)),
             ("top-p-not-probabilities", _keep(z.exp(), top_p)),
             ("top-p-whole-batch", _keep(flat, top_p).reshape(z.shape)),
             ("top-p-mask-order", _keep(p, top_p, back="none")),
             ("top-p-gather-not-scatter", _keep(p, top_p, back="gather"))]
    gap = (ranked.cumsum(-1) - top_p).abs().min().item() if top_p < 1 else 1.0
    lead = shape[:-1]
    return {"must": must.reshape(shape), "may": tied.reshape(shape), "need": (n_keep - must.sum(-1)).reshape(lead),
            "n_keep": n_keep.reshape(lead), "gap": gap, "wrong": [(c, m.reshape(shape)) for c, m in wrong]}


@recipe
def _designed_logits(seed: int) -> torch.Tensor:
    """DESIGNED_PROBS as logits, shifted per row, each row's tokens in a drawn order: (3, 6)."""
    g = torch.Generator().manual_seed(seed)
    rows = [(torch.tensor(p).log() + s)[torch.randperm(len(p), generator=g)]
            for p, s in zip(DESIGNED_PROBS, DESIGNED_SHIFTS)]
    return torch.stack(rows)


def _random_logits(lead, V: int, scale: float, top_p: float, seed: int) -> torch.Tensor:
    """Logits (*lead, V) whose running sums all stay BOUNDARY_GAP away from top_p (drawn again until so)."""
    for attempt in range(100):
        logits = randn(*lead, V, seed=seed * 7919 + attempt, scale=scale)
        if nucleus(logits, top_p)["gap"] > BOUNDARY_GAP:
            return logits
    raise AssertionError("no logits clear of the boundary")  # pragma: no cover (the seeds are fixed)


def _filtered(logits, top_p: float, what: str):
    """(yields) The candidate's output, checked to be logits of the input's shape and dtype, each kept or
    -inf: the mask of the kept tokens."""
    out = require_tensor((yield Call(CANDIDATE, (logits, top_p), pure=True)), what)
    if out.shape != logits.shape:
        raise CheckError("wrong-shape", f"{what}：输出形状应与输入相同 {tuple(logits.shape)}，"
                                        f"实际是 {tuple(out.shape)}。")
    if out.dtype != logits.dtype:
        raise CheckError("wrong-type", f"{what}：输出的 dtype 应与输入相同（{logits.dtype}），实际是 {out.dtype}。")
    kept = out != float("-inf")
    if torch.equal(out[kept], logits[kept]):
        return kept
    if ((out == logits) | (out == 0)).all():
        raise CheckError("top-p-fill-not-neg-inf", f"{what}：核之外的位置应为 -inf，实际填的是 0。")
    if ((out[kept] >= 0) & (out[kept] <= 1)).all():
        raise CheckError("top-p-returns-probs", f"{what}：留下的位置上应是原来的 logits，实际是 0 到 1 之间的概率。")
    raise CheckError("wrong", f"{what}：留下的位置上应是原来的 logits（原样不动），其余为 -inf。")


def _which(kept: torch.Tensor, truth: dict) -> str:
    """What was kept against the nucleus: per row the counts when they differ; otherwise the first row whose
    tokens differ, by token index (the same counts with other tokens is a finding of its own)."""
    rows, want = kept.reshape(-1, kept.size(-1)), truth["n_keep"].reshape(-1)
    counts = rows.sum(-1)
    if not torch.equal(counts, want):
        return f"每行留下 {counts.tolist()} 个 token，应为 {want.tolist()} 个"
    must, may = truth["must"].reshape(rows.shape), truth["may"].reshape(rows.shape)
    r = int(((rows & ~(must | may)) | (must & ~rows)).any(-1).nonzero()[0])
    nucleus_tokens = (must[r] | may[r]).nonzero().flatten().tolist()
    return (f"每行留下的个数都对，但第 {r} 行留下的是 token {rows[r].nonzero().flatten().tolist()}，"
            f"核是 token {nucleus_tokens}")


def _is_nucleus(kept: torch.Tensor, truth: dict) -> bool:
    """kept (..., V) is a nucleus of every row (ties at the boundary either way)."""
    must, may, need = truth["must"], truth["may"], truth["need"]
    return bool((kept >= must).all() and (kept <= must | may).all() and ((kept & may).sum(-1) >= need).all())


def _judge(kept: torch.Tensor, logits, top_p: float, what: str, others=()) -> None:
    """kept (..., V) is a nucleus of every row, else the diagnosis. A mask is a few bits, which another mistake
    can give by accident: a misconception is named only if it also gives what was kept in ``others``, the
    other cases' (kept, logits, top_p), wherever it keeps a set that is not a nucleus."""
    truth = nucleus(logits, top_p)
    if _is_nucleus(kept, truth):
        return
    found = _which(kept, truth)
    if top_p >= 1:
        raise CheckError("top-p-one-drops", f"{what}：{found}（top_p = 1.0 全部保留）。")
    for code, mask in truth["wrong"]:
        if torch.equal(kept, mask) and all(_agrees(code, *other) for other in others):
            raise CheckError(code, f"{what}：{found}，留下的正是下面这个误区选出的那些。")
    raise CheckError("wrong", f"{what}：{found}（核：从最可能的开始累加概率，第一次达到 top_p 为止）。")


def _agrees(code: str, kept: torch.Tensor, logits, top_p: float) -> bool:
    """On another case, what was kept is what misconception ``code`` keeps (or that misconception keeps a nucleus
    there, which tells nothing)."""
    truth = nucleus(logits, top_p)
    return any(_is_nucleus(mask, truth) or torch.equal(kept, mask) for c, mask in truth["wrong"] if c == code)


def _top_p_case(logits, top_p: float, what: str, others=()):
    _judge((yield from _filtered(logits, top_p, what)), logits, top_p, what, others)


@recipe
def _tied_logits() -> torch.Tensor:
    """Rows whose crossing token is tied with others: (2, 6)."""
    return torch.tensor([[1.0, 1.0, 1.0, 1.0, -1.0, 0.0], [2.0, 1.0, -1.0, 1.0, -2.0, 1.0]])


@recipe
def _wide_logits(seed: int) -> torch.Tensor:
    """Random logits with two tokens at -60 per row; in row 0 one token holds all of float32's probability."""
    wide = randn(3, 8, seed=seed + 5, scale=2.0).index_fill(-1, torch.tensor([1, 6]), -60.0)    # (3, 8)
    wide[0, 3] = 25.0
    return wide


@check("top_p_filter")
def check_top_p_filter(extended: bool = False, seed: int = 0):
    cases = [(_designed_logits(seed), 0.75, "尖、平、居中三行 logits，top_p=0.75")]
    for i, (lead, V, top_p, scale) in enumerate(TOP_P_CASES):
        logits = _random_logits(lead, V, scale, top_p, seed * 101 + i)
        cases.append((logits, top_p, f"形状 {tuple(logits.shape)} 的随机 logits，top_p={top_p}"))
    kept = []
    for logits, top_p, what in cases:                  # every answer first: a diagnosis is confirmed on the others
        kept.append((yield from _filtered(logits, top_p, what)))
    judged = [(kept[j], logits, top_p) for j, (logits, top_p, _) in enumerate(cases)]
    for j, (logits, top_p, what) in enumerate(cases):
        _judge(kept[j], logits, top_p, what, judged[:j] + judged[j + 1:])
    # the cases below: a misconception is named only if the cases above confirm it (they all passed)
    yield from _top_p_case(_tied_logits(), 0.6, "边界上有并列的 logits，top_p=0.6（并列的那几个留下谁都可以）", judged)
    yield from _top_p_case(_wide_logits(seed), 1.0, "含极小概率的 logits，top_p=1.0")
    for i, (lead, V, top_p, scale) in enumerate(TOP_P_DIMS_CASES):
        logits = _random_logits(lead, V, scale, top_p, seed * 103 + i)
        what = f"形状 {tuple(logits.shape)}（前导维不是 [B]）的 logits，top_p={top_p}"
        try:
            yield from _top_p_case(logits, top_p, what, judged)
        except CheckError as err:
            if err.code in ("crashed", "wrong-shape", "wrong"):
                raise CheckError("top-p-leading-dims", err.finding) from None
            raise
    for i, (lead, V, top_p, scale) in enumerate(hidden_top_p_cases() if extended else []):
        logits = _random_logits(lead, V, scale, top_p, seed * 107 + i)
        yield from _top_p_case(logits, top_p, f"形状 {tuple(logits.shape)} 的随机 logits，top_p={top_p}", judged)
