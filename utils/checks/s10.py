"""Checks of section 10_decoder_only_model.

DecoderLM is loaded with check-made weights by the contract's names and compared with a float64
oracle of the model on those weights; fed chunk by chunk, its blocks get scripted caches that hand
back the oracle's keys and values and keep what each block put in. generate runs on a table-driven
stand-in model. The quizzes compare through digests of their answers (utils/checks/oracle.py).
"""
from __future__ import annotations

from types import SimpleNamespace

import torch
import torch.nn as nn
import torch.nn.functional as F

from . import math64
from .common import fixed_weights, load_weights, quiz_number, require_linear, require_swiglu_layout
from .core import CheckError, call, call_pure, check, close, expect, quiz_answers, randn
from .oracle import answer_key, instructor_only, matches, oracle

EPS = 1e-6  # RMSNorm's default eps (section 08), the one the given DecoderBlock uses


def _config(**fields):
    """The notebook's ModelConfig (given to the learner, exported with the section's reference)."""
    from utils.reference.s10_decoder_only_model import ModelConfig
    return ModelConfig(**fields)


def _sizes(V, S, C, H, Hkv, L, F, base=10000.0, tie=True) -> dict:
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
def lm_forward(w, cfg, idx, final_norm=True, base=None) -> dict:
    """DecoderLM's logits (B, T, V) in float64 from the weights w (by name) on the tokens idx (B, T), no
    cache; and each block's rotated keys and its values (B, Hkv, T, Dh). final_norm / base: misconceptions."""
    B, T = idx.shape
    C, H, Hkv = cfg.n_embed, cfg.n_head, cfg.n_kv_head
    Dh = C // H

    def weight(name):
        return w[name].double()

    def heads(h, name, n):                                                          # (B, n, T, Dh)
        return (h @ weight(name).T).view(B, T, n, Dh).transpose(1, 2)

    angles = math64.rope_angles(T, Dh, cfg.rope_base if base is None else base)      # (T, Dh/2)
    x, keys, values = weight("tok_emb.weight")[idx], [], []                         # (B, T, C)
    mask = torch.ones(T, T, dtype=torch.bool).tril()                                # (T, T)
    for i in range(cfg.n_layer):
        p = f"blocks.{i}."
        h = math64.rms_norm(x, weight(p + "norm1.weight"), EPS)                     # (B, T, C)
        q = math64.rotate_half(heads(h, p + "attn.q_proj.weight", H), angles)       # (B, H, T, Dh)
        k = math64.rotate_half(heads(h, p + "attn.k_proj.weight", Hkv), angles)     # (B, Hkv, T, Dh)
        v = heads(h, p + "attn.v_proj.weight", Hkv)                                 # (B, Hkv, T, Dh)
        keys.append(k)
        values.append(v)
        k, v = k.repeat_interleave(H // Hkv, dim=1), v.repeat_interleave(H // Hkv, dim=1)   # (B, H, T, Dh)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)                 # (B, H, T, Dh)
        x = x + y.transpose(1, 2).reshape(B, T, H * Dh) @ weight(p + "attn.o_proj.weight").T   # (B, T, C)
        h = math64.rms_norm(x, weight(p + "norm2.weight"), EPS)
        gate, up = h @ weight(p + "ffn.w_gate.weight").T, h @ weight(p + "ffn.w_up.weight").T  # (B, T, F)
        x = x + (F.silu(gate) * up) @ weight(p + "ffn.w_down.weight").T             # (B, T, C)
    if final_norm:
        x = math64.rms_norm(x, weight("norm.weight"), EPS)
    head = weight("tok_emb.weight" if cfg.tie_embeddings else "lm_head.weight")    # (V, C)
    return {"logits": x @ head.T, "keys": keys, "values": values}                  # (B, T, V)


@oracle
def lm_outputs(w, cfg, idx, targets) -> dict:
    """The logits ("want") and the loss of the full forward, and the misconceptions' logits and losses."""
    B, T = idx.shape
    logits = lm_forward(w, cfg, idx)["logits"]                                      # (B, T, V)
    loss = F.cross_entropy(logits.reshape(B * T, -1), targets.reshape(B * T))
    base_ignored = lm_forward(w, cfg, idx, base=10000.0)["logits"] if cfg.rope_base != 10000 else None
    return {"want": logits, "wrong": [("model-no-final-norm", lm_forward(w, cfg, idx, final_norm=False)["logits"]),
                                      ("rope-base-ignored", base_ignored)],
            "loss": loss, "wrong_loss": [
                ("loss-not-mean", loss * B * T),
                ("loss-shifted-twice", F.cross_entropy(logits[:, :-1].reshape(-1, cfg.vocab_size),
                                                       targets[:, 1:].reshape(-1)))]}


@oracle
def lm_cache_script(w, cfg, idx, chunks) -> dict:
    """idx fed chunk by chunk: the full forward's logits ("want"), each block's rotated keys and values of
    every position, and the first block's keys of each chunk rotated as if it started at position 0."""
    out = lm_forward(w, cfg, idx)
    starts = [sum(chunks[:j]) for j in range(len(chunks))]
    not_offset = [lm_forward(w, cfg, idx[:, s:s + n])["keys"][0] for s, n in zip(starts, chunks)]
    return {"want": out["logits"], "keys": out["keys"], "values": out["values"],
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

# (config, B, T, chunks); T stays within the context length, the chunks cover T.
LM_CASES = [(_sizes(11, 16, 16, 4, 2, 2, 24, base=100.0, tie=True), 2, 7, (3, 2, 1, 1)),
            (_sizes(13, 12, 12, 3, 1, 1, 20, base=10000.0, tie=False), 1, 5, (2, 1, 2))]


@instructor_only
def hidden_lm_cases():
    return [(_sizes(9, 10, 8, 2, 2, 3, 16, base=500.0, tie=True), 3, 6, (1, 1, 1, 1, 1, 1)),
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
            require_linear(getattr(attn, name, None), f"blocks[{i}].attn.{name}", n_in, n_out, False, "model-layout")
        require_swiglu_layout(getattr(block, "ffn", None), C, cfg.ffn_hidden, code="model-layout")
    norm_weight = getattr(getattr(model, "norm", None), "weight", None)
    if not isinstance(norm_weight, torch.Tensor) or norm_weight.shape != (C,):
        raise CheckError("model-no-final-norm", f"应有最后的归一化 norm = RMSNorm({C})，实际是 "
                                                f"{type(getattr(model, 'norm', None)).__name__}。")
    require_linear(getattr(model, "lm_head", None), "lm_head", C, V, False, "model-layout")


def _check_tying(model, cfg) -> None:
    head, emb = model.lm_head.weight, model.tok_emb.weight
    shared_memory = head.data_ptr() == emb.data_ptr()
    if cfg.tie_embeddings and head is not emb:
        detail = "它们共用一块内存，却是两个 Parameter（只赋值了 .data）" if shared_memory else "它们是两个独立的矩阵"
        raise CheckError("tie-missing", f"tie_embeddings=True，但 lm_head.weight 不是 tok_emb.weight：{detail}。")
    if not cfg.tie_embeddings and (head is emb or shared_memory):
        raise CheckError("tie-unwanted", "tie_embeddings=False，但 lm_head.weight 与 tok_emb.weight 是同一个矩阵。")
    own, want = sum(p.numel() for p in model.parameters()), param_counts(cfg)["want"]
    if own != want:
        raise CheckError("model-layout", f"模型的参数总数应为 {want:,}，实际是 {own:,}（多了或少了某些层、偏置）。")


def _make_lm(candidate, cfg, weights: dict, seed: int):
    """The candidate model, checked for its layout and tying, with the check-made ``weights`` loaded."""
    torch.manual_seed(seed)
    model = call(candidate, cfg)
    if not isinstance(model, nn.Module):
        raise CheckError("wrong-type", f"DecoderLM(config) 应创建一个 nn.Module，实际是 {type(model).__name__}。")
    _check_lm_layout(model, cfg)
    _check_tying(model, cfg)
    load_weights(model, weights, code="model-layout")
    model.eval()
    return model


def _split(out, what: str):
    if not (isinstance(out, tuple) and len(out) == 2):
        raise CheckError("wrong-type", f"{what}：forward 应返回二元组 (logits, loss)，实际是 {type(out).__name__}。")
    return out


class _ScriptedCache:
    """One block's stand-in KV cache: update(k, v) keeps what the block put in and hands back the keys and
    values of every position so far as the oracle computed them; len() counts the positions received."""

    def __init__(self, keys: torch.Tensor, values: torch.Tensor):
        self.keys, self.values = keys, values                                       # (B, Hkv, T, Dh) each
        self.received: list[tuple] = []

    def __len__(self) -> int:
        return sum(k.size(2) for k, _ in self.received)

    def update(self, k, v):
        end = len(self) + k.size(2)
        self.received.append((k, v))
        return self.keys[:, :, :end].to(k.dtype), self.values[:, :, :end].to(v.dtype)   # (B, Hkv, S, Dh)

    def put(self, index: int):
        """Everything the block put in (0: keys, 1: values) along the positions, or None if it cannot be joined."""
        try:
            return torch.cat([pair[index] for pair in self.received], dim=2)        # (B, Hkv, T, Dh)
        except (RuntimeError, TypeError, IndexError):
            return None


def _decode(model, idx, chunks, script: dict, what: str):
    """idx chunk by chunk through fresh scripted caches: the logits, concatenated."""
    caches, outs, start = [_ScriptedCache(k, v) for k, v in zip(script["keys"], script["values"])], [], 0
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
    _check_cache_contents(caches, script, what)
    return torch.cat(outs, dim=1)                                                   # (B, T, V)


def _check_cache_use(caches, what: str) -> None:
    lengths = [len(c) for c in caches]
    if len(caches) > 1 and lengths[0] > 0 and not any(lengths[1:]):
        raise CheckError("cache-one-for-all-layers", f"{what}：只有第一层的缓存里有东西，各层的缓存长度是 {lengths}。")
    if not any(lengths):
        raise CheckError("cache-unused", f"{what}：传进去的缓存仍是空的"
                                         "（forward 没有把 caches[i] 交给第 i 个 Block）。")


def _check_cache_contents(caches, script: dict, what: str) -> None:
    """Each block put in its cache the keys rotated at their own positions, and the values."""
    for i, cache in enumerate(caches):
        if close(cache.put(0), cache.keys, atol=1e-4) and close(cache.put(1), cache.values, atol=1e-4):
            continue
        if i == 0 and close(cache.put(0), script["keys-not-offset"], atol=1e-4):
            raise CheckError("decode-positions-not-offset", f"{what}：第 1 个 Block 放进缓存的 k 是从位置 0 起旋转的，"
                                                            "与下面这个误区算出的结果完全一致。")
        raise CheckError("wrong", f"{what}：第 {i + 1} 个 Block 放进缓存的 K/V 不对（应是这些位置旋转后的 k 和 v）。")


@check("DecoderLM")
def check_DecoderLM(candidate, extended: bool = False, seed: int = 0) -> None:
    for i, (sizes, B, T, chunks) in enumerate(LM_CASES + (hidden_lm_cases() if extended else [])):
        cfg = _config(**sizes)
        w = lm_weights(cfg, seed * 1009 + 17 * i)
        model = _make_lm(candidate, cfg, w, seed * 1009 + 17 * i)
        g = torch.Generator().manual_seed(seed + 31 * i)
        idx = torch.randint(cfg.vocab_size, (B, T), generator=g)                    # (B, T)
        targets = torch.randint(cfg.vocab_size, (B, T), generator=g)
        label = (f"vocab={cfg.vocab_size}, n_embed={cfg.n_embed}, n_head={cfg.n_head}, n_kv_head={cfg.n_kv_head}, "
                 f"n_layer={cfg.n_layer}, rope_base={cfg.rope_base:g}, tie={cfg.tie_embeddings}, B={B}, T={T}")
        with torch.no_grad():
            outs = lm_outputs(w, cfg, idx, targets)
            logits, loss = _split(call_pure(model, idx), label)
            expect(logits, outs["want"], f"{label} 时的 logits", outs["wrong"], atol=1e-4)
            if loss is not None:
                raise CheckError("wrong-type", f"{label}：没给 targets 时 loss 应为 None，实际是 {loss!r}。")
            _, loss = _split(call_pure(model, idx, targets=targets), label)
            expect(loss, outs["loss"], f"{label}，给了 targets 时的 loss", outs["wrong_loss"], atol=1e-4)
            # chunks through fresh caches == the full forward: RoPE positions start at the cached length
            what = f"{label}，按分块 {list(chunks)} 带缓存解码的 logits（应等于一次算完的 logits）"
            script = lm_cache_script(w, cfg, idx, chunks)
            expect(_decode(model, idx, chunks, script, what), script["want"], what, atol=1e-4)
            ones = (1,) * T
            idx2 = torch.randint(cfg.vocab_size, (B, T), generator=g)
            what = f"{label}，另一条序列、新建的缓存，逐个 token 解码的 logits（应等于一次算完的 logits）"
            script = lm_cache_script(w, cfg, idx2, ones)
            expect(_decode(model, idx2, ones, script, what), script["want"], what, atol=1e-4)


# --- count_parameters --------------------------------------------------------------------------

COUNT_CASES = [_sizes(50, 32, 32, 4, 2, 2, 64, tie=True), _sizes(97, 64, 48, 6, 6, 3, 130, tie=False),
               _sizes(32000, 4096, 4096, 32, 32, 32, 11008, tie=False)]           # the last: Llama-2-7B


@instructor_only
def hidden_count_cases():
    return [_sizes(128256, 131072, 2048, 32, 8, 16, 8192, base=500000.0, tie=True),   # Llama-3.2-1B
            _sizes(32000, 32768, 4096, 32, 8, 32, 14336, tie=False),                   # Mistral-7B
            _sizes(7, 8, 8, 2, 1, 1, 12, tie=True)]


@check("count_parameters")
def check_count_parameters(candidate, extended: bool = False, seed: int = 0) -> None:
    g = torch.Generator().manual_seed(seed)
    H, rep, Dh = (int(v) for v in torch.randint(1, 5, (3,), generator=g))
    drawn = _sizes(int(torch.randint(5, 300, (1,), generator=g)), 64, H * 2 * Dh, H, max(1, H // rep), 1 + seed % 4,
                   int(torch.randint(3, 200, (1,), generator=g)), tie=bool(seed % 2))
    for sizes in COUNT_CASES + (hidden_count_cases() if extended else []) + [drawn]:
        cfg = _config(**sizes)
        counts = param_counts(cfg)
        got, want = call(candidate, cfg), counts["want"]
        what = (f"vocab={cfg.vocab_size}, n_embed={cfg.n_embed}, n_head={cfg.n_head}, n_kv_head={cfg.n_kv_head}, "
                f"n_layer={cfg.n_layer}, ffn_hidden={cfg.ffn_hidden}, tie_embeddings={cfg.tie_embeddings}")
        if isinstance(got, bool) or not isinstance(got, int):
            if isinstance(got, float) and got == want:
                raise CheckError("wrong-type", f"{what}：数值对了，但应返回 int（参数个数），实际是 float。")
            raise CheckError("wrong-type", f"{what}：应返回 int（参数个数），实际是 {type(got).__name__}。")
        if got == want:
            continue
        for code, value in counts["wrong"]:
            if value != want and got == value:
                raise CheckError(code, f"{what}：应为 {want:,} 个参数，实际是 {got:,}。")
        raise CheckError("wrong", f"{what}：应为 {want:,} 个参数，实际是 {got:,}（相差 {got - want:+,}）。")


# --- generate ----------------------------------------------------------------------------------

class _TableLM(nn.Module):
    """A stand-in for DecoderLM with the interface generate relies on (config, blocks,
    forward(idx, targets=None, caches=None) -> (logits, None)): the logits after token s at position p
    are table[p % S, s], positions counted on from len(caches[0]). Caches receive dummy K/V, so that
    len(cache) counts the positions as a real model's would; it records its calls."""

    def __init__(self, table: torch.Tensor, n_layer: int = 2):
        super().__init__()
        S, V, _ = table.shape
        self.config = _config(**_sizes(V, S, 4, 2, 1, n_layer, 4))
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
    """prompt (B, T0) continued greedily by n tokens under _TableLM(table): (B, T0 + n)."""
    idx = prompt
    for _ in range(n):
        logits = table[(idx.size(1) - 1) % table.size(0)][idx[:, -1]]                # (B, V)
        idx = torch.cat([idx, logits.argmax(-1, keepdim=True)], dim=1)             # (B, T + 1)
    return idx


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


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


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


def _fixed_table() -> torch.Tensor:
    """The sampling part's table: the logits after token s are BASE rolled by s, at every position."""
    V = BASE.numel()
    return torch.stack([BASE.roll(s) for s in range(V)]).expand(GEN_POSITIONS, V, V)   # (S, V, V)


def _check_greedy(candidate, extended: bool, seed: int) -> None:
    for B, T0, n, model_seed in GEN_CASES + (hidden_gen_cases() if extended else []):
        table = randn(GEN_POSITIONS, GEN_VOCAB, GEN_VOCAB, seed=seed * 101 + model_seed, scale=2.0)   # (S, V, V)
        model = _TableLM(table)
        prompt = torch.randint(GEN_VOCAB, (B, T0), generator=_gen(seed + model_seed))   # (B, T0)
        what = f"贪心（temperature=0），提示词形状 {(B, T0)}，max_new_tokens={n}"
        try:
            out = _run(candidate, model, prompt, n, what, temperature=0, generator=_gen(1))
        except CheckError as err:
            if err.code == "crashed":
                raise CheckError("generate-greedy-samples",
                                 f"{what}：运行出错（{err.finding}）——多半是除以了 0。") from err
            raise
        _check_protocol(model.calls, T0, n, len(model.blocks), what)
        want = greedy_tokens(table, prompt, n)
        if torch.equal(out, want):
            continue
        others = [_run(candidate, model, prompt, n, what, temperature=0, generator=_gen(s)) for s in (2, 3, 4)]
        if any(not torch.equal(other, out) for other in others):
            raise CheckError("generate-greedy-samples", f"{what}：换一个 generator 种子，结果就变了。")
        raise CheckError("wrong", f"{what}：应为 {want.tolist()}（每步取 logits 最大的 token），"
                                  f"实际是 {out.tolist()}。")


def _check_sampling(candidate, extended: bool, seed: int) -> None:
    model = _TableLM(_fixed_table())
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
    want = greedy_tokens(_fixed_table(), prompt[:1], 2)[0, 2:]                    # (2,)
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
WRONG_TOLERANCE = 1e-2
UNITS = (1e9, 2 ** 10, 2 ** 20, 1e6)                                               # an answer in billions, KiB, …


def _read_tolerance(key: str) -> float:
    return 0.03 if key.endswith("flops_per_token") else 2e-3


@oracle
def moe_param_count(cfg, experts: int) -> int:
    """Parameters of a Mixtral-style model counting `experts` expert FFNs per block (and the router)."""
    return param_count(cfg) + cfg.n_layer * ((experts - 1) * 3 * cfg.n_embed * cfg.ffn_hidden + cfg.n_embed * N_EXPERT)


@instructor_only
def read_config_truth() -> dict[str, float]:
    active = moe_param_count(MIXTRAL, TOP_K)
    return {"llama3_8b_params": param_count(LLAMA3_8B), "llama3_8b_kv_bytes_per_token": 2 * 32 * 8 * 128 * 2,
            "mixtral_total_params": moe_param_count(MIXTRAL, N_EXPERT), "mixtral_active_params": active,
            "mixtral_flops_per_token": 2 * active}


@oracle
def read_config_keys() -> dict:
    """Digests of the truths ("want" per key, within the key's tolerance) and of the known wrong numbers,
    as (code, key) pairs within WRONG_TOLERANCE."""
    truth = read_config_truth()
    active, total = truth["mixtral_active_params"], truth["mixtral_total_params"]
    one_expert = moe_param_count(MIXTRAL, 1)
    kv = truth["llama3_8b_kv_bytes_per_token"]
    wrong = {
        "llama3_8b_params": [("quiz-config-tied-assumed", param_count(LLAMA3_8B, untied_once=True)),
                             ("quiz-config-kv-as-q", param_count(LLAMA3_8B, kv_as_q=True)),
                             ("quiz-swiglu-two-matrices", param_count(LLAMA3_8B, ffn_mats=2))],
        "llama3_8b_kv_bytes_per_token": [("quiz-kv-no-factor-2", kv / 2), ("quiz-kv-fp32", kv * 2),
                                         ("quiz-config-kv-as-q", kv * 4), ("kv-bytes-no-layers", kv / 32),
                                         ("kv-bytes-bits", kv * 8)],
        "mixtral_total_params": [("quiz-moe-name-is-size", 56e9), ("quiz-moe-name-is-size", 8 * 7.24e9),
                                 ("quiz-moe-experts-missing", one_expert), ("quiz-moe-total-is-active", active)],
        "mixtral_active_params": [("quiz-moe-active-all", total), ("quiz-moe-top1", one_expert)],
        "mixtral_flops_per_token": [("quiz-flops-total-params", 2 * total), ("quiz-flops-no-factor-2", active),
                                    ("quiz-flops-training", 6 * active)],
    }
    return {key: {"want": answer_key(truth[key], _read_tolerance(key)),
                  "wrong": [(code, answer_key(value, WRONG_TOLERANCE)) for code, value in wrong[key]]}
            for key in READ_KEYS}


@check("quiz_read_config")
def check_quiz_read_config(candidate, extended: bool = False, seed: int = 0) -> None:
    """One set of answers, nothing random: ``extended`` and ``seed`` change nothing."""
    del extended, seed
    answers = quiz_answers(candidate, "quiz_read_config", READ_KEYS)
    keys = read_config_keys()
    for key in READ_KEYS:
        value, want, tolerance = quiz_number(answers, key), keys[key]["want"], _read_tolerance(key)
        if matches(value, want, tolerance):
            continue
        for code, wrong in keys[key]["wrong"]:
            if matches(value, wrong, WRONG_TOLERANCE):
                raise CheckError(code, f"{key} = {value:,.6g} 不对。")
        if any(matches(value * unit, want, tolerance) for unit in UNITS):
            raise CheckError("quiz-config-units", f"{key} = {value:,.6g}：单位不对。")
        raise CheckError("wrong", f"{key} = {value:,.6g} 不对：回到 §8 的清单和公式再算一遍。")


# --- quiz_misconceptions -----------------------------------------------------------------------

MYTH_KEYS = ("weights_explain", "heads_learned", "flash_is_sparse", "rope_window_enough", "training_parallel")


@instructor_only
def myths_truth() -> dict[str, tuple[bool, str]]:
    """Each statement's truth, and the code of the misconception the other answer shows."""
    return {"weights_explain": (False, "quiz-myth-weights-explain"),
            "heads_learned": (True, "quiz-myth-heads-designed"),
            "flash_is_sparse": (False, "quiz-myth-flash-sparse"),
            "rope_window_enough": (False, "quiz-myth-rope-window"),
            "training_parallel": (True, "quiz-myth-training-sequential")}


@oracle
def myths_keys() -> dict[str, tuple[list[str], str]]:
    """Per statement: the digest of its truth and the code of a wrong answer."""
    return {key: (answer_key(truth), code) for key, (truth, code) in myths_truth().items()}


@check("quiz_misconceptions")
def check_quiz_misconceptions(candidate, extended: bool = False, seed: int = 0) -> None:
    """One set of answers, nothing random: ``extended`` and ``seed`` change nothing."""
    del extended, seed
    answers = quiz_answers(candidate, "quiz_misconceptions", MYTH_KEYS)
    keys = myths_keys()
    for key in MYTH_KEYS:
        if not isinstance(answers[key], bool):
            raise CheckError("wrong-type", f"{key} 的答案应是 True 或 False，实际是 {answers[key]!r}。")
        truth, code = keys[key]
        if not matches(answers[key], truth):
            raise CheckError(code, f"{key} 的答案不是 {answers[key]}。")
