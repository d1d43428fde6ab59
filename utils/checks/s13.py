"""Checks of section 13_long_context_attention.

What a check compares with comes from the oracles below (utils/checks/oracle.py): float64 re-computations of
check-made inputs (positions, seeded tensors, fixed weights). MultiHeadLatentAttention is driven through
:class:`~stand_ins.ScriptedLatentCache`, which hands back the latents the check computed and records what the
learner's module put in; the check judges that record.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from . import math64
from .common import decode_in_chunks, fixed_weights, load, make_module, part, quiz_number, require_linear
from .compare import Cases, close, expect, quiz_answers, randn, require_tensor, type_name
from .core import OBSERVED, CheckError, check
from .oracle import answer_key, instructor_only, matches, oracle
from .protocol import CANDIDATE, Attr, Builtin, Call, Get, Handle, New
from .s07 import judge_byte_counts
from .stand_ins import SCRIPTED_LATENT_CACHE

ROPE_BASE = 10000.0

# sliding_window_mask: (T, window, n_sink)
MASK_CASES = [(7, 3, 0), (8, 3, 2), (5, 9, 0), (6, 1, 2)]
# RollingKVCache: (B, Hkv, Dh, window, n_sink, chunk lengths)
ROLLING_CASES = [(1, 2, 3, 4, 2, (3, 1, 1, 5, 2, 1)), (2, 1, 2, 3, 0, (1, 1, 1, 1, 1, 2))]
# MultiHeadLatentAttention: (B, T, n_embed, n_head, head_dim, d_latent, d_rope, chunks); the second has
# d_latent == d_rope, so that a latent rotated by the rotary angles is computable and recognised.
MLA_CASES = [(2, 6, 16, 2, 4, 6, 4, (3, 2, 1)), (1, 5, 12, 3, 2, 4, 4, (1, 1, 3))]
# latent_queries: (B, H, T, head_dim, d_latent); the second is square per head (head_dim == d_latent), where a
# transposed block still has the right shape.
ABSORB_CASES = [(2, 3, 4, 5, 6), (1, 2, 3, 4, 4)]
# mla_cache_bytes: (n_layer, d_latent, d_rope, seq_len, batch, bytes_per_elem), distinct primes.
MLA_BYTES_CASES = [(3, 7, 5, 11, 13, 4), (2, 64, 1, 100, 1, 2)]
MLA_LAYOUT = "mla-layout"


@instructor_only
def hidden_mask_cases():
    return [(12, 4, 3), (9, 2, 0), (10, 10, 4), (4, 2, 5)]


@instructor_only
def hidden_rolling_cases():
    return [(1, 2, 2, 5, 1, (7, 2, 3, 1)), (2, 2, 3, 2, 3, (1, 4, 1, 1)), (1, 1, 4, 6, 0, (2, 2, 2, 2, 2))]


@instructor_only
def hidden_mla_cases():
    return [(1, 7, 20, 4, 3, 5, 2, (4, 3)), (2, 4, 8, 1, 8, 8, 8, (1, 1, 1, 1)), (1, 6, 16, 2, 6, 3, 6, (2, 1, 3))]


@instructor_only
def hidden_absorb_cases():
    return [(1, 1, 2, 3, 7), (2, 4, 5, 6, 6), (1, 5, 1, 2, 9)]


@instructor_only
def hidden_mla_bytes_cases():
    return [(60, 512, 64, 4096, 1, 2), (27, 512, 64, 32768, 8, 2), (5, 3, 11, 17, 7, 1)]


def _seeded_case(seed: int, low: int, high: int, n: int) -> tuple[int, ...]:
    g = torch.Generator().manual_seed(seed)
    return tuple(int(v) for v in torch.randint(low, high, (n,), generator=g))


# --- sliding_window_mask ----------------------------------------------------------------------

@oracle
def window_masks(T, window, n_sink) -> dict:
    """The mask ("want", [T, T]: s ≤ t and (s > t − window or s < n_sink)) and each misconception's."""
    t, s = torch.arange(T)[:, None], torch.arange(T)[None, :]                     # (T, 1), (1, T)
    causal, sink = s <= t, s < n_sink                                             # (T, T), (1, T)
    want = causal & ((s > t - window) | sink)
    return {"want": want, "wrong": [
        ("window-off-by-one", causal & ((s >= t - window) | sink)),               # window + 1 keys
        ("window-off-by-one", causal & ((s > t - window + 1) | sink)),            # window − 1 keys
        ("window-not-causal", ((t - s).abs() < window) | (causal & sink)),
        ("window-not-causal", ((t - s).abs() < window) | sink),
        ("sink-not-causal", (causal & (s > t - window)) | sink),
        ("sink-ignored", causal & (s > t - window) if n_sink else None),
        ("mask-reversed", ~want)]}


@check("sliding_window_mask")
def check_sliding_window_mask(extended: bool = False, seed: int = 0):
    T, window, n_sink = _seeded_case(seed, 1, 9, 3)
    cases = MASK_CASES + (hidden_mask_cases() if extended else []) + [(T + 3, window, n_sink % 4)]
    judged = Cases()
    for T, window, n_sink in cases:
        what = f"sliding_window_mask({T}, window={window}, n_sink={n_sink})"
        got = yield from judged.call(Call(CANDIDATE, (T, window, n_sink)))
        masks = window_masks(T, window, n_sink)
        judged.add(what, got, masks["want"], masks["wrong"])
    judged.decide()
    for case in judged.seen:
        if case.got.dtype != torch.bool:
            raise CheckError("wrong-type", f"{case.what}：数值对了，但应返回 bool 张量（True = 可以看），"
                                           f"实际是 {case.got.dtype}。")
    got = yield Call(CANDIDATE, kwargs={"T": 5, "window": 2})           # n_sink defaults to 0
    expect(got, window_masks(5, 2, 0)["want"], "sliding_window_mask(T=5, window=2)（n_sink 用默认值）")


# --- RollingKVCache ---------------------------------------------------------------------------

def _bounds(kind: str, L: int, end: int, window: int, n_sink: int) -> tuple[bool, int, int]:
    """How a cache following ``kind`` (the contract's, or a misconception's) treats the update that takes seen
    positions from L to end: (whether it protects the sinks, the oldest recent position it returns, the oldest
    it keeps)."""
    return {
        "right": (True, L - window + 1, end - window + 1),
        # trimmed to what the next query sees (or the last window positions) before the new queries had theirs
        "evicts-early": (True, end - window + 1, end - window + 1),
        "evicts-early-window": (True, end - window, end - window),
        "one-more": (True, L - window, end - window),
        "one-fewer": (True, L - window + 2, end - window + 2),
        # a plain ring of n_sink + window − 1 entries: the "sinks" are whatever is oldest, and slide
        "slides": (False, L - window - n_sink + 1, end - window - n_sink + 1),
        "never-evicts": (False, 0, 0),
    }[kind]


def _simulate(k_all, v_all, chunks, window, n_sink, kind):
    """Per update, what a cache following ``kind`` returns, (k, v, positions), and how many it keeps."""
    kept, steps, L = torch.empty(0, dtype=torch.long), [], 0
    for n in chunks:
        end = L + n
        sinks, oldest_returned, oldest_kept = _bounds(kind, L, end, window, n_sink)
        pos = torch.cat([kept, torch.arange(L, end)])                              # (kept + n,)
        pos = pos[(pos >= oldest_returned) | (sinks & (pos < n_sink))]
        kept, L = pos[(pos >= oldest_kept) | (sinks & (pos < n_sink))], end
        steps.append((k_all[:, :, pos], v_all[:, :, pos], pos, len(kept)))         # (B, Hkv, S, Dh) ×2, (S,), int
    return steps


@oracle
def rolling_steps(k_all, v_all, chunks, window, n_sink) -> list[dict]:
    """Per update: what the cache returns ("k", "v", "positions"), how many positions it keeps afterwards ("kept")
    and what each misconception returns."""
    right = _simulate(k_all, v_all, chunks, window, n_sink, "right")
    wrongs = {kind: _simulate(k_all, v_all, chunks, window, n_sink, kind) for kind in
              ("evicts-early", "evicts-early-window", "one-more", "one-fewer", "slides", "never-evicts")}
    codes = {"evicts-early": "rolling-evicts-early", "evicts-early-window": "rolling-evicts-early",
             "one-more": "window-off-by-one", "one-fewer": "window-off-by-one", "slides": "sink-slides",
             "never-evicts": "rolling-never-evicts"}
    return [{"k": k, "v": v, "positions": pos, "kept": kept,
             "wrong": [(codes[kind], steps[i][0]) for kind, steps in wrongs.items() if n_sink or kind != "slides"]}
            for i, (k, v, pos, kept) in enumerate(right)]


def _held_positions(state) -> int:
    """The most positions any tensor the cache holds spans (its dim 2, for the [B, Hkv, S, Dh] it keeps)."""
    if isinstance(state, torch.Tensor):
        return state.size(2) if state.dim() == 4 else 0
    if isinstance(state, dict):
        state = list(state.values())
    if isinstance(state, (list, tuple)):
        return max((_held_positions(item) for item in state), default=0)
    return 0


def _run_rolling(B, Hkv, Dh, window, n_sink, chunks, seed, label, judged: tuple[Cases, Cases]):
    """(yields) Feed chunks into a fresh RollingKVCache(window, n_sink). What update returns, until the first update
    that returns a wrong k or v (the cache's state is then off: later updates would show that, not the mistake),
    goes into ``judged`` (the k cases, the v cases: one of each per sequence); the positions and len after each
    right update are checked at once, and what the cache holds at the end."""
    cache = yield Call(CANDIDATE, (window, n_sink))
    if not isinstance(cache, Handle):
        raise CheckError("wrong-type", f"RollingKVCache(...) 应创建一个缓存对象，实际得到 {type_name(cache)}。")
    total = sum(chunks)
    k_all, v_all = randn(B, Hkv, total, Dh, seed=seed), randn(B, Hkv, total, Dh, seed=seed + 1)   # (B, Hkv, N, Dh)
    k_cases, v_cases = judged
    steps, L = rolling_steps(k_all, v_all, chunks, window, n_sink), 0
    for i, (n, want) in enumerate(zip(chunks, steps)):
        k, v = k_all[:, :, L:L + n], v_all[:, :, L:L + n]                           # (B, Hkv, n, Dh)
        out = yield Call(Attr(cache, "update"), (k, v), pure=True)
        what = (f"{label}，第 {i + 1} 次 update（之前见过 {L} 个位置，这次新增 {n} 个：位置 {L}…{L + n - 1}；"
                f"这次的第一个新查询能看到的位置是 {want['positions'].tolist()}）")
        if not (isinstance(out, tuple) and len(out) == 3):
            raise CheckError("wrong-type", f"{what}：应返回三元组 (k, v, positions)，实际是 {type_name(out)}。")
        got_k, got_v, got_pos = out
        right = close(got_k, want["k"]) and close(got_v, want["v"])
        if not right or i == len(chunks) - 1:
            k_cases.add(f"{what}返回的 k", got_k, want["k"], want["wrong"])
            v_cases.add(f"{what}返回的 v", got_v, want["v"], [("cache-kv-swapped", want["k"])])
        if not right:
            return
        _check_positions(require_tensor(got_pos, f"{what}返回的 positions"), want["positions"], what)
        L += n
        seen = yield Call(Builtin("len"), (cache,))
        if seen != L:
            code = "rolling-len-kept" if seen == want["kept"] != L else "cache-len-wrong"
            raise CheckError(code, f"{label}：已经见过 {L} 个位置，len(cache) 应为 {L}，实际是 {seen!r}。")
    try:
        state = yield Get(Attr(cache, "__dict__"))
    except CheckError:   # no __dict__ (__slots__): what it holds is not looked at
        state = None
    held = _held_positions(state)
    bound = n_sink + window - 1
    if held > max(bound, 0) and L > bound:
        raise CheckError("rolling-never-evicts", f"{label}：见过 {L} 个位置之后，缓存里有一个张量还存着 {held} 个位置，"
                                                 f"最多只该留 n_sink + window − 1 = {bound} 个{OBSERVED}。")


def _check_positions(got: torch.Tensor, want: torch.Tensor, what: str) -> None:
    """The positions update returned: the kept keys' places in the whole sequence, as a LongTensor."""
    if got.shape == want.shape and torch.equal(got.long(), torch.arange(len(got))) \
            and not torch.equal(want, torch.arange(len(got))):
        raise CheckError("rolling-positions-relative",
                         f"{what}：返回的 positions 是 {got.tolist()}，应是这些键在整条序列里的位置 {want.tolist()}。")
    if got.dtype != torch.long or not torch.equal(got, want):
        raise CheckError("wrong", f"{what}：返回的 positions 应是 LongTensor {want.tolist()}，"
                                  f"实际是 {got.tolist()}（{got.dtype}）。")


@check("RollingKVCache")
def check_RollingKVCache(extended: bool = False, seed: int = 0):
    window, n_sink = _seeded_case(seed, 1, 5, 2)
    cases = ROLLING_CASES + (hidden_rolling_cases() if extended else []) + [(1, 1, 2, window + 1, n_sink, (2, 3, 1, 4))]
    judged = Cases(), Cases()                                                # what update returned: k, v
    for i, (B, Hkv, Dh, window, n_sink, chunks) in enumerate(cases):
        label = f"RollingKVCache(window={window}, n_sink={n_sink})，B={B}, Hkv={Hkv}, Dh={Dh}，分块 {list(chunks)}"
        # a finding of this sequence after an earlier one's wrong update: that update is the one shown
        yield from judged[0].run(judged[1].run(_run_rolling(B, Hkv, Dh, window, n_sink, chunks, seed + 10 * i, label,
                                                            judged)))
    for cases_of in judged:
        cases_of.decide()


# --- MultiHeadLatentAttention -----------------------------------------------------------------

def mla_weights(C: int, H: int, Dh: int, dc: int, R: int, seed: int) -> dict[str, torch.Tensor]:
    """Check-made weights of a MultiHeadLatentAttention, by the contract's names ([out, in])."""
    return fixed_weights({"q_proj.weight": (H * (Dh + R), C), "kv_down.weight": (dc, C),
                          "k_up.weight": (H * Dh, dc), "v_up.weight": (H * Dh, dc), "k_rope.weight": (R, C),
                          "o_proj.weight": (C, H * Dh)}, seed)


@oracle
def _mla(x, w, H, Dh, R, rope="right", split="per-head", scale="right", mask="offset", chunks=None,
         use_past=True):
    """MLA of x from the weights w in float64, fed in ``chunks`` (None: at once); the options give the
    misconceptions' outputs."""
    x = x.double()
    w = {name: t.double() for name, t in w.items()}
    B, T, _ = x.shape
    angles = math64.rope_angles(T, R, ROPE_BASE)                                  # (T, R/2)
    q = x @ w["q_proj.weight"].T                                                  # (B, T, H·(Dh+R))
    if split == "per-head":
        q = q.view(B, T, H, Dh + R).transpose(1, 2)                               # (B, H, T, Dh+R)
        q_c, q_r = q[..., :Dh], q[..., Dh:]
    elif split == "rope-first":
        q = q.view(B, T, H, Dh + R).transpose(1, 2)
        q_r, q_c = q[..., :R], q[..., R:]
    else:  # "blocks": all heads' content parts, then all heads' rotary parts
        q_c = q[..., :H * Dh].view(B, T, H, Dh).transpose(1, 2)
        q_r = q[..., H * Dh:].view(B, T, H, R).transpose(1, 2)
    c = x @ w["kv_down.weight"].T                                                 # (B, T, dc)
    k_r = x @ w["k_rope.weight"].T                                                # (B, T, R)
    if rope != "none":
        q_r, k_r = math64.rotate_half(q_r, angles), math64.rotate_half(k_r, angles)
    if rope == "latent":
        c = math64.rotate_half(c, angles)
    k_c = (c @ w["k_up.weight"].T).view(B, T, H, Dh).transpose(1, 2)              # (B, H, T, Dh)
    v = (c @ w["v_up.weight"].T).view(B, T, H, Dh).transpose(1, 2)                # (B, H, T, Dh)
    k = torch.cat([k_c, k_r[:, None].expand(B, H, T, R)], dim=-1)                 # (B, H, T, Dh+R)
    q = torch.cat([q_c, q_r], dim=-1)                                             # (B, H, T, Dh+R)
    scale = {"right": 1 / math.sqrt(Dh + R), "head_dim": 1 / math.sqrt(Dh), "one": 1.0}[scale]
    outs, start = [], 0
    for n in chunks or (T,):
        end = start + n
        first = 0 if use_past else start
        allowed = torch.ones(end - first, end - first, dtype=torch.bool).tril()   # (S, S)
        allowed = {"offset": allowed[-n:], "top-left": allowed[:n], "none": None}[mask]
        outs.append(F.scaled_dot_product_attention(q[:, :, start:end], k[:, :, first:end], v[:, :, first:end],
                                                   attn_mask=allowed, scale=scale))   # (B, H, n, Dh)
        start = end
    y = torch.cat(outs, dim=2).transpose(1, 2).reshape(B, T, H * Dh)              # (B, T, H·Dh)
    return y @ w["o_proj.weight"].T                                               # (B, T, C)


@oracle
def mla_outputs(x, w, H, Dh, R) -> dict:
    """The causal forward ("want"), each misconception's, and what a latent cache holds after x."""
    dc = w["kv_down.weight"].size(0)
    T = x.size(1)
    c = x.double() @ w["kv_down.weight"].double().T                               # (B, T, dc)
    k_r = math64.rotate_half(x.double() @ w["k_rope.weight"].double().T, math64.rope_angles(T, R, ROPE_BASE))
    return {"want": _mla(x, w, H, Dh, R), "c": c, "k_rope": k_r,
            "k_rope_unrotated": x.double() @ w["k_rope.weight"].double().T,
            "c_rotated": math64.rotate_half(c, math64.rope_angles(T, R, ROPE_BASE)) if dc == R else None,
            "wrong": [("mla-rope-on-latent", _mla(x, w, H, Dh, R, rope="latent") if dc == R else None),
                      ("mla-rope-missing", _mla(x, w, H, Dh, R, rope="none")),
                      ("mla-q-split", _mla(x, w, H, Dh, R, split="rope-first")),
                      ("mla-q-split", _mla(x, w, H, Dh, R, split="blocks") if H > 1 else None),
                      ("mla-scale", _mla(x, w, H, Dh, R, scale="head_dim")),
                      ("scale-missing", _mla(x, w, H, Dh, R, scale="one")),
                      ("not-causal", _mla(x, w, H, Dh, R, mask="none"))]}


@oracle
def mla_chunked(x, w, H, Dh, R, chunks) -> dict:
    """What the cache misconceptions output when x is fed chunk by chunk."""
    return {"top-left": _mla(x, w, H, Dh, R, mask="top-left", chunks=chunks),
            "none": _mla(x, w, H, Dh, R, mask="none", chunks=chunks),
            "no-past": _mla(x, w, H, Dh, R, chunks=chunks, use_past=False)}


def _check_mla_layout(layout: dict, C: int, H: int, Dh: int, dc: int, R: int) -> None:
    for name, n_in, n_out in (("q_proj", C, H * (Dh + R)), ("kv_down", C, dc), ("k_up", dc, H * Dh),
                              ("v_up", dc, H * Dh), ("k_rope", C, R), ("o_proj", H * Dh, C)):
        require_linear(part(layout, name), name, n_in, n_out, bias=False, code=MLA_LAYOUT)


def _judge_latents(received: list, outs: dict, label: str) -> None:
    """What the module put in the scripted cache: per update the new positions' latent [B, n, d_latent] and
    rotated shared key [B, n, d_rope], each position once."""
    c_all, kr_all = outs["c"], outs["k_rope"]
    B, T, dc = c_all.shape
    R, start = kr_all.size(-1), 0
    for i, (c, k_r) in enumerate(received):
        what = f"{label}：第 {i + 1} 次调用 cache.update(c, k_rope) 时"
        if not all(isinstance(t, torch.Tensor) for t in (c, k_r)):
            raise CheckError("mla-caches-per-head", f"{what}传入的应是两个张量 [B, n, d_latent] 和 [B, n, d_rope]。")
        if c.dim() != 3 or k_r.dim() != 3 or c.shape[0] != B or c.size(-1) != dc or k_r.size(-1) != R:
            raise CheckError("mla-caches-per-head", f"{what}传入的形状是 {tuple(c.shape)} 和 {tuple(k_r.shape)}，"
                                                    f"应是潜向量 ({B}, n, {dc}) 和共享的旋转键 ({B}, n, {R})："
                                                    "缓存里不存任何按头展开的东西。")
        end = start + c.size(1)
        if end > T or k_r.size(1) != c.size(1):
            raise CheckError("cache-reappends", f"{what}传入了 {c.size(1)} 个位置，缓存里已有 {start} 个，"
                                                f"超过了这个序列的 {T} 个位置（或 c 与 k_rope 的位置数不同）。")
        if not close(c, c_all[:, start:end]):
            rotated = outs["c_rotated"] is not None and close(c, outs["c_rotated"][:, start:end])
            raise CheckError("mla-rope-on-latent" if rotated else "wrong",
                             f"{what}传入的 c 不是位置 {start}…{end - 1} 的潜向量 kv_down(x)。")
        if not close(k_r, kr_all[:, start:end]):
            code = "mla-cache-key-unrotated" if close(k_r, outs["k_rope_unrotated"][:, start:end]) else "wrong"
            raise CheckError(code, f"{what}传入的 k_rope 不是位置 {start}…{end - 1} 旋转之后的共享键。")
        start = end


def _mla_decode(module, x, outs, chunks, R, label):
    """(yields) Feed x chunk by chunk through a fresh scripted latent cache, the angles of each chunk's
    positions alongside; the outputs, concatenated, and what the module put in."""
    cache = yield Get(New(SCRIPTED_LATENT_CACHE, (outs["c"].float(), outs["k_rope"].float())))
    angles = math64.rope_angles(x.size(1), R, ROPE_BASE).float()                  # (T, R/2)
    return (yield from decode_in_chunks(
        module, cache, x, chunks, lambda received: _judge_latents(received, outs, label), label,
        per_position=(angles,), hints={"cache-mask-offset": r"tril|mask|is_causal|triu"}))


def _mla_forward(i: int, B: int, T: int, C: int, H: int, Dh: int, dc: int, R: int, seed: int):
    """(yields) A MultiHeadLatentAttention built for case i, its layout checked, the check's weights loaded, run at
    once on a random x: (module, x, weights, the oracle's outputs, label, its output)."""
    m, layout = yield from make_module(CANDIDATE, "MultiHeadLatentAttention(...)", seed=seed + i, n_embed=C,
                                       n_head=H, head_dim=Dh, d_latent=dc, d_rope=R)
    _check_mla_layout(layout, C, H, Dh, dc, R)
    w = mla_weights(C, H, Dh, dc, R, seed + i)
    yield from load(m, w, code=MLA_LAYOUT)
    x = randn(B, T, C, seed=seed + i)                                             # (B, T, C)
    angles = math64.rope_angles(T, R, ROPE_BASE).float()                          # (T, R/2)
    label = f"B={B}, T={T}, n_embed={C}, n_head={H}, head_dim={Dh}, d_latent={dc}, d_rope={R}"
    got = yield Call(m, (x, angles), pure=True, hints={"mla-rope-on-latent": r"apply_rope\(\s*(c|latent)\b"},
                     hints_of=Attr(m, "forward"))
    return m, x, w, mla_outputs(x, w, H, Dh, R), label, got


@check("MultiHeadLatentAttention")
def check_MultiHeadLatentAttention(extended: bool = False, seed: int = 0):
    cases = MLA_CASES + (hidden_mla_cases() if extended else [])
    forwards, runs = Cases(), []                            # every case at once first, then every case chunk by chunk
    for i, (B, T, C, H, Dh, dc, R, _) in enumerate(cases):
        m, x, w, outs, label, got = yield from forwards.run(_mla_forward(i, B, T, C, H, Dh, dc, R, seed))
        forwards.add(f"{label} 时的输出（不带缓存）", got, outs["want"], outs["wrong"], inputs={"x": x})
        runs.append((m, x, w, outs, label))
    forwards.decide()
    decoded = Cases()
    for (m, x, w, outs, label), (_, _, _, H, Dh, _, R, chunks) in zip(runs, cases):
        what = f"{label}，按分块 {list(chunks)} 带缓存解码的输出（应等于一次算完的输出）"
        got_chunks, received = yield from decoded.run(_mla_decode(m, x, outs, chunks, R, what))
        if not received:
            raise CheckError("cache-unused", f"{label}：解码之后，传进去的 cache 仍是空的"
                                             "（forward 没有调用 cache.update）。")
        wrong = mla_chunked(x, w, H, Dh, R, chunks)
        decoded.add(what, got_chunks, outs["want"], [("cache-mask-offset", wrong["top-left"]),
                                                     ("cache-mask-offset", wrong["none"]),
                                                     ("cache-unused", wrong["no-past"])], inputs={"x": x})
    decoded.decide()


# --- latent_queries ---------------------------------------------------------------------------

@oracle
def absorbed(q, w, H) -> dict:
    """q̃_h = W_uk,hᵀ q_h for every head ("want") and each misconception's (code, q̃)."""
    q, w = q.double(), w.double()
    Dh, dc = q.size(-1), w.size(-1)
    per_head = w.view(H, Dh, dc)                                                  # (H, Dh, dc): rows of head h
    want = q @ per_head                                                           # (B, H, T, dc)
    as_columns = w.reshape(H, dc, Dh).transpose(-1, -2)                           # [H·Dh, dc] read as H blocks [dc, Dh]
    return {"want": want, "wrong": [
        ("absorb-transposed", q @ as_columns),
        ("absorb-transposed", q @ per_head.transpose(-1, -2) if Dh == dc else None),
        ("absorb-heads-strided", q @ w.view(Dh, H, dc).transpose(0, 1))]}


@check("latent_queries")
def check_latent_queries(extended: bool = False, seed: int = 0):
    cases = ABSORB_CASES + (hidden_absorb_cases() if extended else []) + [(1, 2, 2, *_seeded_case(seed, 2, 7, 2))]
    judged = Cases()
    for i, (B, H, T, Dh, dc) in enumerate(cases):
        q = randn(B, H, T, Dh, seed=seed + i)                                     # (B, H, T, Dh)
        w = randn(H * Dh, dc, seed=seed + 50 + i)                                 # (H·Dh, dc): k_up.weight
        got = yield from judged.call(Call(CANDIDATE, (q, w), pure=True))
        outs = absorbed(q, w, H)
        judged.add(f"q_content {tuple(q.shape)}、k_up_weight {tuple(w.shape)} 时的 q̃", got, outs["want"], outs["wrong"],
                   inputs={"q_content": q, "k_up_weight": w})
    judged.decide()


# --- mla_cache_bytes --------------------------------------------------------------------------

@oracle
def mla_bytes(n_layer, d_latent, d_rope, seq_len, batch, bytes_per_elem) -> dict:
    """The cache's size in bytes ("want"), and what each misconception counts instead."""
    per = seq_len * batch * bytes_per_elem
    want = n_layer * (d_latent + d_rope) * per
    return {"want": want, "wrong": [
        ("mla-bytes-kv-twice", 2 * want), ("mla-bytes-kv-twice", n_layer * (2 * d_latent + d_rope) * per),
        ("mla-bytes-no-rope", n_layer * d_latent * per),
        ("kv-bytes-no-batch", want // batch), ("kv-bytes-no-dtype", want // bytes_per_elem),
        ("kv-bytes-no-layers", want // n_layer), ("kv-bytes-bits", want * 8)]}


@check("mla_cache_bytes")
def check_mla_cache_bytes(extended: bool = False, seed: int = 0):
    cases = MLA_BYTES_CASES + (hidden_mla_bytes_cases() if extended else [])
    cases = cases + [_seeded_case(seed, 1, 50, 5) + (1 + seed % 4,)]
    configurations = []
    for L, dc, R, S, B, E in cases:
        args = f"n_layer={L}, d_latent={dc}, d_rope={R}, seq_len={S}, batch={B}, bytes_per_elem={E}"
        keywords = {"n_layer": L, "d_latent": dc, "d_rope": R, "seq_len": S, "batch": B, "bytes_per_elem": E}
        configurations.append((args, keywords, mla_bytes(L, dc, R, S, B, E)))
    L, dc, R, S = 3, 7, 5, 11
    yield from judge_byte_counts(configurations, (
        f"只给 n_layer={L}, d_latent={dc}, d_rope={R}, seq_len={S}（其余用默认值）时", (L, dc, R, S),
        mla_bytes(L, dc, R, S, 1, 2)))


# --- quiz_long_context ------------------------------------------------------------------------

# DeepSeek-V2 (config.json of deepseek-ai/DeepSeek-V2; the paper, §2.1): 60 layers, 128 heads, head_dim 128,
# kv_lora_rank 512, qk_rope_head_dim 64. Mistral-7B v0.1: 32 layers, sliding_window 4096.
# StreamingLLM's setting of the question: 4 sinks, window 1020.
VISIBLE_KEYS = ("mla_elems", "mha_elems", "gqa_groups", "receptive_field")
HIDDEN_KEYS = ("rolling_kept",)
QUIZ_KEYS = VISIBLE_KEYS + HIDDEN_KEYS
QUIZ_TOLERANCE = 1e-5                 # integers and 2.25: off by one position must not pass


@instructor_only
def quiz_truth() -> dict[str, tuple[float, list[tuple[str, float]]]]:
    """Each key's answer and the known wrong answers, with the code of the misconception each shows."""
    H, Dh, dc, R = 128, 128, 512, 64
    L_mistral, W = 32, 4096
    n_sink, window, seen = 4, 1020, 100_000
    return {
        "mla_elems": (dc + R, [("quiz-mla-kv-twice", 2 * dc + R), ("quiz-mla-kv-twice", 2 * (dc + R)),
                               ("quiz-mla-no-rope", dc), ("quiz-mla-rope-per-head", dc + H * R)]),
        "mha_elems": (2 * H * Dh, [("quiz-mha-no-factor-2", H * Dh), ("quiz-mha-with-rope", 2 * H * (Dh + R))]),
        "gqa_groups": ((dc + R) / (2 * Dh), [("quiz-gqa-groups-no-factor-2", (dc + R) / Dh),
                                             ("quiz-gqa-groups-ratio", 2 * H * Dh / (dc + R))]),
        "receptive_field": (L_mistral * (W - 1), [("quiz-receptive-off-by-one", L_mistral * W),
                                                  ("quiz-receptive-one-layer", W - 1),
                                                  ("quiz-receptive-one-layer", W)]),
        "rolling_kept": (n_sink + window - 1, [("quiz-rolling-off-by-one", n_sink + window),
                                               ("quiz-rolling-no-sinks", window - 1),
                                               ("quiz-rolling-no-sinks", window),
                                               ("rolling-never-evicts", seen)]),
    }


@oracle
def quiz_keys(keys: tuple[str, ...]) -> dict:
    """Digests of the truths of ``keys`` and of the known wrong numbers, as (code, digest) pairs."""
    truth = quiz_truth()
    return {key: {"want": answer_key(truth[key][0], QUIZ_TOLERANCE),
                  "wrong": [(code, answer_key(value, QUIZ_TOLERANCE)) for code, value in truth[key][1]]}
            for key in keys}


@check("quiz_long_context")
def check_quiz_long_context(extended: bool = False, seed: int = 0):
    """Nothing random (``seed`` changes nothing); the visible check judges VISIBLE_KEYS, ``extended`` (the
    hidden test) all. Returns the keys left to the hidden test."""
    del seed
    answers = yield from quiz_answers("quiz_long_context", QUIZ_KEYS)
    values = {key: quiz_number(answers, key) for key in QUIZ_KEYS}
    judged = QUIZ_KEYS if extended else VISIBLE_KEYS
    keys = quiz_keys(judged)
    for key in judged:
        value = values[key]
        if matches(value, keys[key]["want"], QUIZ_TOLERANCE):
            continue
        for code, wrong in keys[key]["wrong"]:
            if matches(value, wrong, QUIZ_TOLERANCE):
                raise CheckError(code, f"{key} = {value:g} 不对。")
        raise CheckError("wrong", f"{key} = {value:g} 不对：回到题目对应的那一节再算一遍。")
    return () if extended else HIDDEN_KEYS
