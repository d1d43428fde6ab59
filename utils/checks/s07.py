"""Checks of section 07_gqa_and_kv_cache.

What a check compares with comes from the oracles below (utils/checks/oracle.py): float64
re-computations of check-made inputs and fixed weights. GroupedQueryAttention is driven through
:class:`~stand_ins.ScriptedCache`, a stand-in the kernel builds: it hands back the K/V the check computed
and records what the learner's module put in; the check judges that record, so no working cache
lives here.
"""
from __future__ import annotations

import math

import torch

from .common import decode_in_chunks, fixed_weights, load, make_module, part, quiz_number, require_linear
from .compare import Cases, close, places, quiz_answers, randn, type_name
from .core import CheckError, check
from .counts import Counts
from .keys import recipe
from .oracle import answer_key, instructor_only, matches, oracle
from .protocol import CANDIDATE, Attr, Builtin, Call, Describe, Get, Handle, New
from .stand_ins import SCRIPTED_CACHE, positions

# repeat_kv: (B, Hkv, T, Dh, n_rep)
REPEAT_CASES = [(2, 2, 3, 4, 3), (1, 3, 5, 2, 2), (2, 4, 1, 3, 1)]
# KVCache: (B, Hkv, Dh, chunk lengths)
CACHE_CASES = [(2, 2, 4, (3, 2, 1, 1)), (1, 1, 3, (1, 1, 1))]
# GroupedQueryAttention: (B, T, n_embed, n_head, n_kv_head, context_length, chunks); T < context. GQA, MQA, MHA,
# and a second GQA (1 < n_kv_head < n_head), so that the order of the groups is told on two cases.
GQA_CASES = [(2, 7, 16, 4, 2, 10, (3, 2, 1, 1)), (1, 5, 12, 3, 1, 8, (2, 1, 2)), (1, 4, 8, 2, 2, 6, (1, 3)),
             (2, 6, 24, 6, 3, 8, (4, 2))]
# kv_cache_bytes: distinct primes, so that each misconception gives a different number.
BYTES_CASES = [(3, 5, 7, 11, 13, 4), (2, 1, 64, 100, 1, 2)]
_MASK_CRASH = {"cache-mask-offset": r"tril|mask|is_causal|triu"}
LAYOUT = "gqa-linear-layout"  # the q_proj/k_proj/v_proj/o_proj layout (05's "linear-layout" names Head's layers)


@instructor_only
def hidden_repeat_cases():
    return [(1, 1, 4, 5, 4), (3, 2, 2, 6, 4)]


@instructor_only
def hidden_cache_cases():
    return [(3, 4, 2, (2, 5, 1, 3)), (1, 2, 8, (4,))]


@instructor_only
def hidden_gqa_cases():
    return [(2, 9, 24, 6, 3, 12, (4, 1, 3, 1)), (1, 6, 32, 8, 4, 6, (5, 1)), (3, 5, 16, 4, 1, 7, (1, 2, 2))]


@instructor_only
def hidden_bytes_cases():
    return [(32, 8, 128, 4096, 32, 2), (80, 8, 128, 4096, 1, 2), (5, 3, 11, 17, 7, 1)]


# --- repeat_kv ------------------------------------------------------------------------------

@oracle
def repeat_outputs(x, n_rep) -> dict:
    """KV head j repeated n_rep times in place ("want"), and what each misconception gives."""
    return {"want": x.repeat_interleave(n_rep, dim=1),                         # (B, Hkv·n_rep, T, Dh)
            "wrong": [("repeat-kv-tiled", x.repeat(1, n_rep, 1, 1)),
                      ("repeat-kv-wrong-dim", x.repeat_interleave(n_rep, dim=2)),
                      ("repeat-kv-wrong-dim", x.repeat_interleave(n_rep, dim=-1))]}


@recipe
def _head_major_places(B: int, Hkv: int, T: int, Dh: int, offset: int) -> torch.Tensor:
    """compare.places laid out as a projection's heads are: [B, Hkv, T, Dh], not contiguous."""
    return places(B, T, Hkv, Dh, offset=offset).transpose(1, 2)


@check("repeat_kv")
def check_repeat_kv(extended: bool = False, seed: int = 0):
    cases = Cases()
    for B, Hkv, T, Dh, n_rep in REPEAT_CASES + (hidden_repeat_cases() if extended else []):
        # every value names its place, so head order is visible; the seed shifts them by less than 1000, which
        # keeps them exact in float32 (the judge's seeds reach 2³¹)
        x = _head_major_places(B, Hkv, T, Dh, offset=seed % 1000)                          # (B, Hkv, T, Dh)
        got = yield from cases.call(Call(CANDIDATE, (x, n_rep), pure=True))
        outs = repeat_outputs(x, n_rep)
        cases.add(f"x 形状 {tuple(x.shape)}、n_rep={n_rep} 时", got, outs["want"], outs["wrong"], inputs={"x": x})
    cases.decide()


# --- KVCache --------------------------------------------------------------------------------

def _length(cache, what: str):
    """(yields) len(cache), which must be an int."""
    n = yield Call(Builtin("len"), (cache,))
    if not isinstance(n, int):
        raise CheckError("wrong-type", f"{what}：len(cache) 应返回 int，实际是 {type_name(n)}。")
    return n


def _fresh(what: str):
    """(yields) A new KVCache() of the candidate's, with an update method and nothing in it."""
    cache = yield Call(CANDIDATE)
    if not isinstance(cache, Handle):
        raise CheckError("wrong-type", f"KVCache() 应创建一个缓存对象，实际得到 {type_name(cache)}。")
    if "callable" not in (yield Describe(Attr(cache, "update")))["kinds"]:
        raise CheckError("wrong-type", "KVCache() 应有一个 update(k, v) 方法。")
    n = yield from _length(cache, what)
    if n != 0:
        raise CheckError("cache-not-reset", f"{what}：一个新建的 KVCache() 的 len 应为 0，实际是 {n}"
                                            "（上一个缓存的内容留了下来）。")
    return cache


@oracle
def _safe_cat(prev, new, dim):
    """What concatenating along the wrong dim gives, or None where that cannot even be built."""
    try:
        return torch.cat([prev, new], dim=dim)
    except RuntimeError:
        return None


@oracle
def cache_steps(k_all, v_all, chunks) -> list[dict]:
    """Per update: the (k, v) of every position so far, and what each misconception returns instead."""
    steps, start = [], 0
    for n in chunks:
        end = start + n
        prev_k, k, v = k_all[:, :, :start], k_all[:, :, start:end], v_all[:, :, start:end]   # (B, Hkv, ·, Dh)
        steps.append({"k": k_all[:, :, :end], "v": v_all[:, :, :end], "k-wrong": [
            ("cache-overwrites", k),
            ("cache-reappends", torch.cat([prev_k, k_all[:, :, :end]], dim=2)),
            ("cache-reappends", torch.cat([prev_k, prev_k, k], dim=2)),
            ("cache-wrong-dim", _safe_cat(prev_k, k, 1) if start else None),
            ("cache-wrong-dim", _safe_cat(prev_k, k, -1) if start else None),
            ("cache-kv-swapped", v_all[:, :, :end])],
            "v-wrong": [("cache-kv-swapped", k_all[:, :, :end]), ("cache-overwrites", v)]})
        start = end
    return steps


_CAT_CRASH = {"cache-wrong-dim": r"cat\([^\n]*dim\s*=\s*(0|1|3|-1)\b"}


def _update(cache, k, v, what: str):
    """(yields) cache.update(k, v), which must return the pair (k_all, v_all)."""
    out = yield Call(Attr(cache, "update"), (k, v), pure=True, hints=_CAT_CRASH)
    if not (isinstance(out, tuple) and len(out) == 2):
        raise CheckError("wrong-type", f"{what}：update(k, v) 应返回二元组 (k_all, v_all)，实际是 {type_name(out)}。")
    return out


def _run_cache(B, Hkv, Dh, chunks, seed, label, judged: tuple[Cases, Cases]):
    """(yields) Feed chunks of K/V into a fresh cache; what update returns, until the first update that returns
    something wrong (the cache's state is then off: later updates would show that, not the mistake), goes into
    ``judged`` (the k cases, the v cases: one of each per sequence); len after each right update is checked."""
    cache = yield from _fresh(label)
    total = sum(chunks)
    k_all = randn(B, Hkv, total, Dh, seed=seed)                              # (B, Hkv, S, Dh)
    v_all = randn(B, Hkv, total, Dh, seed=seed + 1)
    k_cases, v_cases = judged
    start = 0
    for i, (n, want) in enumerate(zip(chunks, cache_steps(k_all, v_all, chunks))):
        k, v = k_all[:, :, start:start + n], v_all[:, :, start:start + n]    # (B, Hkv, n, Dh)
        got_k, got_v = yield from k_cases.run(v_cases.run(_update(cache, k, v, label)))
        end = start + n
        what = f"{label}，第 {i + 1} 次 update（之前已缓存 {start} 个位置，这次新增 {n} 个）返回 k 时"
        right_k = close(got_k, want["k"])
        right_v = close(got_v, want["v"])
        if not (right_k and right_v) or i == len(chunks) - 1:
            given = {"k": k, "v": v}
            k_cases.add(what, got_k, want["k"], want["k-wrong"], inputs=given)
            v_cases.add(what.replace("返回 k 时", "返回 v 时"), got_v, want["v"], want["v-wrong"], inputs=given)
        if not (right_k and right_v):
            return
        n_cached = yield from _length(cache, label)
        if n_cached > end and n_cached not in (end * B, end * Hkv, end * Dh, end * B * Hkv * Dh):
            raise CheckError("cache-reappends", f"{label}：已经缓存了 {end} 个位置，len(cache) 却是 {n_cached}。")
        if n_cached != end:
            raise CheckError("cache-len-wrong", f"{label}：已经缓存了 {end} 个位置，len(cache) 却是 {n_cached}。")
        start = end


@check("KVCache")
def check_KVCache(extended: bool = False, seed: int = 0):
    judged = Cases(), Cases()                                                # what update returned: k, v
    for i, (B, Hkv, Dh, chunks) in enumerate(CACHE_CASES + (hidden_cache_cases() if extended else [])):
        shape = f"B={B}, Hkv={Hkv}, Dh={Dh}"
        yield from _run_cache(B, Hkv, Dh, chunks, seed + 10 * i, f"{shape}，分块 {list(chunks)}", judged)
        # a second sequence in a second, fresh cache must start from nothing
        yield from _run_cache(B, Hkv, Dh, chunks[::-1], seed + 10 * i + 5,
                              f"{shape}，第二个序列、新建的缓存，分块 {list(chunks[::-1])}", judged)
    for cases in judged:
        cases.decide()


# --- GroupedQueryAttention ------------------------------------------------------------------

def gqa_weights(C: int, H: int, Hkv: int, seed: int) -> dict[str, torch.Tensor]:
    """Check-made weights of a GroupedQueryAttention, by the contract's names (nn.Linear layout [out, in])."""
    kv = Hkv * (C // H)
    return fixed_weights({"q_proj.weight": (C, C), "k_proj.weight": (kv, C), "v_proj.weight": (kv, C),
                          "o_proj.weight": (C, C)}, seed)


@oracle
def _heads(y, n: int, split: str = "transpose"):
    """A projection y (B, T, n·Dh) as n heads (B, n, T, Dh); split "view": read straight as (B, n, T, Dh),
    without the transpose (a misconception: each "head" is then a run of positions' channels)."""
    B, T, _ = y.shape
    return y.view(B, n, T, -1) if split == "view" else y.view(B, T, n, -1).transpose(1, 2)


@oracle
def _kv(x, w, Hkv, split="transpose"):
    """k and v of x, (B, Hkv, T, Dh) each, in float64."""
    k = _heads(x.double() @ w["k_proj.weight"].double().T, Hkv, split)                   # (B, Hkv, T, Dh)
    v = _heads(x.double() @ w["v_proj.weight"].double().T, Hkv, split)
    return k, v


@oracle
def _attend(x, w, H, Hkv, past=None, grouping="interleave", mask="offset", scale=None, o_proj=True,
            use_past=True, split="transpose", merge="transpose", softmax_dim=-1):
    """GQA of x from the weights w, in float64. past: the (k, v) of earlier positions, or None.
    The options give the misconceptions' outputs."""
    B, T, C = x.shape
    Dh = C // H
    q = _heads(x.double() @ w["q_proj.weight"].double().T, H, split)          # (B, H, T, Dh)
    k, v = _kv(x, w, Hkv, split)                                                # (B, Hkv, T, Dh)
    if past is not None and use_past:
        k, v = torch.cat([past[0], k], dim=2), torch.cat([past[1], v], dim=2)  # (B, Hkv, S, Dh)
    S = k.size(2)
    if grouping == "interleave":
        k, v = k.repeat_interleave(H // Hkv, dim=1), v.repeat_interleave(H // Hkv, dim=1)   # (B, H, S, Dh)
    else:  # query head h paired with KV head h % Hkv
        k, v = k.repeat(1, H // Hkv, 1, 1), v.repeat(1, H // Hkv, 1, 1)
    full = torch.ones(S, S, dtype=torch.bool).tril()                          # (S, S)
    allowed = {"offset": full[S - T:], "top-left": full[:T], "none": None}[mask]   # (T, S)
    scale = 1 / math.sqrt(Dh) if scale is None else scale
    scores = q @ k.transpose(-2, -1) * scale                                  # (B, H, T, S)
    if allowed is not None:
        scores = scores.masked_fill(~allowed, float("-inf"))
    y = torch.softmax(scores, dim=softmax_dim).nan_to_num() @ v               # (B, H, T, Dh)
    y = y.transpose(1, 2).reshape(B, T, C) if merge == "transpose" else y.reshape(B, T, C)   # (B, T, C)
    return y @ w["o_proj.weight"].double().T if o_proj else y


@oracle
def gqa_outputs(x, w, H, Hkv) -> dict:
    """The full causal forward ("want"), each misconception's, and the K/V a cache holds after x."""
    C = x.size(-1)
    k, v = _kv(x, w, Hkv)                                                       # (B, Hkv, T, Dh)
    return {"want": _attend(x, w, H, Hkv), "k": k, "v": v, "wrong": [
        ("kv-groups-order", _attend(x, w, H, Hkv, grouping="tile") if Hkv not in (1, H) else None),
        ("not-causal", _attend(x, w, H, Hkv, mask="none")),
        ("scale-by-sqrt-C", _attend(x, w, H, Hkv, scale=1 / math.sqrt(C))),
        ("scale-missing", _attend(x, w, H, Hkv, scale=1.0)),
        ("o-proj-missing", _attend(x, w, H, Hkv, o_proj=False)),
        ("view-without-transpose", _attend(x, w, H, Hkv, split="view")),
        ("view-without-transpose", _attend(x, w, H, Hkv, split="view", merge="view")),
        ("softmax-wrong-dim", _attend(x, w, H, Hkv, softmax_dim=-2))]}


@oracle
def _chunked(x, w, H, Hkv, chunks, **options):
    """What a module with the given misconception outputs when fed chunk by chunk."""
    outs, start, past = [], 0, None
    for n in chunks:
        xc = x[:, start:start + n]                                             # (B, n, C)
        outs.append(_attend(xc, w, H, Hkv, past=past, **options))
        k, v = _kv(xc, w, Hkv)
        past = (k, v) if past is None else (torch.cat([past[0], k], 2), torch.cat([past[1], v], 2))
        start += n
    return torch.cat(outs, dim=1)                                              # (B, T, C)


@oracle
def gqa_chunked(x, w, H, Hkv, chunks) -> dict:
    """What each cache misconception outputs when x is fed chunk by chunk (mask not offset, no mask,
    the cached positions left out)."""
    return {"top-left": _chunked(x, w, H, Hkv, chunks, mask="top-left"),
            "none": _chunked(x, w, H, Hkv, chunks, mask="none"),
            "no-past": _chunked(x, w, H, Hkv, chunks, use_past=False)}


def _check_gqa_layout(layout: dict, C: int, H: int, Hkv: int) -> None:
    """q_proj, o_proj: C → C; k_proj, v_proj: C → Hkv·Dh; none with a bias."""
    kv_width = Hkv * (C // H)
    for name in ("q_proj", "o_proj"):
        require_linear(part(layout, name), name, C, C, bias=False, code=LAYOUT)
    for name in ("k_proj", "v_proj"):
        fields = part(layout, name)["fields"]
        if "linear" in part(layout, name)["kinds"] and fields["in_features"] == C and not fields["bias"] \
                and fields["out_features"] != kv_width:
            raise CheckError("gqa-kv-width", f"n_embed={C}, n_head={H}, n_kv_head={Hkv} 时 {name} 输出 "
                                             f"{fields['out_features']} 维，应为 {kv_width} 维。",
                             step=f"这个用例里每个头宽 {C // H}：查询有 {H} 个头，K/V 只有 {Hkv} 个头。")
        require_linear(part(layout, name), name, C, kv_width, bias=False, code=LAYOUT)


def _judge_received(received: list, k_all, v_all, H: int, label: str) -> None:
    """What the module put in the scripted cache, update by update: the K/V of the next new positions,
    [B, Hkv, n, Dh] each (split into KV heads, before repeat_kv), each position once."""
    B, Hkv, T, Dh = k_all.shape
    start = 0
    for i, (k, v) in enumerate(received):
        what = f"{label}：第 {i + 1} 次调用 cache.update(k, v) 时"
        layout = (B, Hkv, "n", Dh)
        if not all(isinstance(t, torch.Tensor) and t.dim() == 4 for t in (k, v)) or k.shape != v.shape:
            raise CheckError("cache-receives-wrong-layout", f"{what}传入的 k、v 应是形状相同的四维张量 {layout}。")
        if k.shape[0] == B and k.size(1) == H != Hkv and k.size(3) == Dh:
            raise CheckError("cache-receives-repeated", f"{what}传入的 k 有 {H} 个头（repeat_kv 之后），"
                                                        f"缓存应只存 {Hkv} 个 KV 头：形状 {layout}。")
        if k.shape[:2] != (B, Hkv) or k.size(3) != Dh:
            raise CheckError("cache-receives-wrong-layout", f"{what}传入的 k 形状是 {tuple(k.shape)}，"
                                                            f"应是新增位置的 {layout}。")
        end = start + k.size(2)
        if end > T:
            raise CheckError("cache-reappends", f"{what}，缓存里已有 {start} 个位置，再加 {end - start} 个就超过了"
                                                f"这个序列的 {T} 个位置。")
        if not (close(k, k_all[:, :, start:end]) and close(v, v_all[:, :, start:end])):
            if i and close(k, received[i - 1][0]):
                raise CheckError("cache-reappends",
                                 f"{what}传入的又是上一次已经存进去的位置（同一批 k、v 追加了两次）。")
            raise CheckError("wrong", f"{what}传入的 k、v 不是位置 {start}…{end - 1} 的 k、v"
                                      "（应传 k_proj、v_proj 投影并分头之后的新位置）。")
        start = end


def _decode(module, x, outs, chunks, H, label, mask_hint=False):
    """(yields) Feed x chunk by chunk through a fresh scripted cache of x's K/V (outs: gqa_outputs of x),
    judging what the module put in after every call; the outputs, concatenated, and what it put in."""
    cache = yield Get(New(SCRIPTED_CACHE, (outs["k"], outs["v"])))
    return (yield from decode_in_chunks(
        module, cache, x, chunks, lambda received: _judge_received(received, outs["k"], outs["v"], H, label), label,
        hints=_MASK_CRASH if mask_hint else None))


def _second_sequence_leaks(m, x2, outs2, chunks, H, what):
    """(yields) Whether the same chunked decoding, on a second sequence through a fresh cache, goes wrong."""
    try:
        got_second, _ = yield from _decode(m, x2, outs2, chunks, H, what)
    except CheckError as err:  # the same procedure worked on the first sequence
        if err.code == "not-implemented":
            raise
        return True
    return not close(got_second, outs2["want"])


def _gqa_module(C: int, H: int, Hkv: int, L: int, seed: int):
    """(yields) A GroupedQueryAttention, its layout checked, loaded with check-made weights: (module, weights)."""
    m, layout = yield from make_module(CANDIDATE, "GroupedQueryAttention(...)", seed=seed,
                                       n_embed=C, n_head=H, n_kv_head=Hkv, context_length=L)
    _check_gqa_layout(layout, C, H, Hkv)
    w = gqa_weights(C, H, Hkv, seed)
    yield from load(m, w, code=LAYOUT)
    return m, w


@check("GroupedQueryAttention")
def check_GroupedQueryAttention(extended: bool = False, seed: int = 0):
    """1. the full causal forward of every case, no cache; 2. per case, uneven chunks through a fresh cache (the new
    positions' mask offset by the cached length), then a second sequence through a second fresh cache (the same
    procedure must work again), then token by token. A misconception is named when the cases of 1 (or of 2)
    confirm it (compare.Cases)."""
    cases = GQA_CASES + (hidden_gqa_cases() if extended else [])
    built, full = [], Cases()
    for i, (B, T, C, H, Hkv, L, chunks) in enumerate(cases):
        m, w = yield from full.run(_gqa_module(C, H, Hkv, L, seed + i))
        x, x2 = randn(B, T, C, seed=seed + i), randn(B, T, C, seed=seed + 100 + i)   # (B, T, C) each
        outs, outs2 = gqa_outputs(x, w, H, Hkv), gqa_outputs(x2, w, H, Hkv)
        label = f"B={B}, T={T}, n_embed={C}, n_head={H}, n_kv_head={Hkv}"
        got = yield from full.call(Call(m, (x,), pure=True))
        full.add(f"{label} 时（不带缓存）", got, outs["want"], outs["wrong"], inputs={"x": x})
        built.append((m, w, x, x2, outs, outs2, label))
    full.decide()
    decoded = Cases()
    for (B, T, C, H, Hkv, L, chunks), (m, w, x, x2, outs, outs2, label) in zip(cases, built):
        what = f"{label}，按分块 {list(chunks)} 带缓存解码时（应等于一次算完的输出）"
        got_chunks, received = yield from decoded.run(_decode(m, x, outs, chunks, H, what, mask_hint=True))
        if not received:
            raise CheckError("cache-unused", f"{label}：解码之后，传进去的 cache 仍是空的"
                                             "（forward 没有调用 cache.update）。")
        wrong = gqa_chunked(x, w, H, Hkv, chunks)
        if not decoded.add(what, got_chunks, outs["want"], [
                ("cache-mask-offset", wrong["top-left"]), ("cache-mask-offset", wrong["none"]),
                ("cache-unused", wrong["no-past"])], inputs={"x": x}).right():
            continue
        cached = sum(positions(k) for k, _ in received)
        if cached != T:
            raise CheckError("cache-reappends" if cached > T else "cache-unused",
                             f"{label}：解码 {T} 个位置后，缓存里应有 {T} 个位置，实际是 {cached}。")
        if (yield from _second_sequence_leaks(m, x2, outs2, chunks, H, what)):
            raise CheckError("cache-not-reset", f"{label}：第一个序列用缓存解码时正确；"
                                                "第二个序列换了一个新建的 cache、"
                                                "同样分块解码，输出却不等于它一次算完的输出——上一个序列的状态留在了模块里。")
        ones = (1,) * T
        got_steps, _ = yield from decoded.run(_decode(m, x2, outs2, ones, H, f"{label}，逐个位置解码"))
        decoded.add(f"{label}，带缓存逐个位置解码时（应等于一次算完的输出）", got_steps, outs2["want"],
                    [("cache-unused", gqa_chunked(x2, w, H, Hkv, ones)["no-past"])], inputs={"x": x2})
    decoded.decide()


# --- kv_cache_bytes -------------------------------------------------------------------------

@oracle
def kv_bytes(n_layer, n_kv_head, head_dim, seq_len, batch_size, bytes_per_elem) -> dict:
    """The cache's size in bytes ("want"), and what each misconception counts instead."""
    want = 2 * n_layer * n_kv_head * head_dim * seq_len * batch_size * bytes_per_elem
    return {"want": want, "wrong": [
        ("kv-bytes-no-kv-factor", want // 2),
        ("kv-bytes-no-batch", want // batch_size),
        ("kv-bytes-no-dtype", want // bytes_per_elem),
        ("kv-bytes-no-layers", want // n_layer),
        ("kv-bytes-bits", want * 8),
        ("kv-bytes-no-kv-factor", want // (2 * batch_size))]}


@check("kv_cache_bytes")
def check_kv_cache_bytes(extended: bool = False, seed: int = 0):
    """Every configuration by keyword (the counts judged together, counts.Counts), then by position (the same
    count is due); then the defaults."""
    cases = BYTES_CASES + (hidden_bytes_cases() if extended else [])
    g = torch.Generator().manual_seed(seed)
    cases = cases + [tuple(int(v) for v in torch.randint(1, 50, (5,), generator=g)) + (1 + seed % 4,)]
    configurations = []
    for L, Hkv, Dh, S, B, E in cases:
        args = f"n_layer={L}, n_kv_head={Hkv}, head_dim={Dh}, seq_len={S}, batch_size={B}, bytes_per_elem={E}"
        keywords = {"n_layer": L, "n_kv_head": Hkv, "head_dim": Dh, "seq_len": S, "batch_size": B,
                    "bytes_per_elem": E}
        configurations.append((args, keywords, kv_bytes(L, Hkv, Dh, S, B, E)))
    # the defaults: batch_size=1, bytes_per_elem=2 (float16 / bfloat16)
    L, Hkv, Dh, S = 3, 5, 7, 11
    yield from judge_byte_counts(configurations, (
        f"只给 n_layer={L}, n_kv_head={Hkv}, head_dim={Dh}, seq_len={S}（其余用默认值）时", (L, Hkv, Dh, S),
        kv_bytes(L, Hkv, Dh, S, 1, 2)))


def judge_byte_counts(configurations: list, defaults: tuple):
    """(yields) A byte-count function judged: each configuration (args as a finding says them, the keyword
    arguments in the signature's order, the counts {"want", "wrong"}) called by keyword — the counts judged together
    (counts.Counts) — and by position (the same count is due); the defaults (what, the positional arguments given,
    the counts) with the keyword counts."""
    counts, by_position = Counts(), []
    for args, keywords, outs in configurations:
        _add_bytes(counts, (yield Call(CANDIDATE, kwargs=keywords)), outs, f"{args}（关键字参数）")
        by_position.append((args, (yield Call(CANDIDATE, tuple(keywords.values()))), outs))
    what, given, outs = defaults
    _add_bytes(counts, (yield Call(CANDIDATE, given)), outs, what)
    counts.decide()
    for args, got, outs in by_position:
        if got != outs["want"]:
            raise CheckError("wrong", f"{args}（位置参数）：应为 {outs['want']:,} 字节，实际是 {got!r}；"
                                      "同样的数用关键字参数传入时是对的——参数的顺序应与题目的签名一致。")


def _require_int_bytes(got, want: int, what: str) -> None:
    """A byte count must be an int (a float with the right value is told so)."""
    if isinstance(got, bool) or not isinstance(got, int):
        if isinstance(got, float) and got == want:
            raise CheckError("wrong-type", f"{what}：数值对了，但应返回 int，实际是 float"
                                           "（用整数运算，别用 / 或 ** 0.5）。")
        raise CheckError("wrong-type", f"{what}：应返回 int（字节数），实际是 {type(got).__name__}。")


def _add_bytes(counts: Counts, got, outs: dict, what: str) -> None:
    """One byte count of the check's, collected in ``counts``."""
    want = outs["want"]
    _require_int_bytes(got, want, what)
    counts.add(what, got, want, outs["wrong"], line=f"{what}：应为 {want:,} 字节，实际是 {got:,}")


# --- quiz_kv_cache --------------------------------------------------------------------------

# The visible check judges the first three answers in full; of the fourth (the sliding window) it judges
# everything but the window: either length is accepted there, and only the hidden test tells them apart.
QUIZ_KEYS = ("gemma_7b_gib", "batch16_gib", "qwen2_shrink", "mistral_32k_gib")
WINDOW_KEY = "mistral_32k_gib"
QUIZ_REL_TOL = 1e-3
QUIZ_FALLBACK = {"qwen2_shrink": "quiz-kv-shrink-ratio"}   # any other key: a cache size in GiB
GIB = 2 ** 30
# (label, how many of that unit a GiB is): a size answered in another unit than GiB
UNITS = (("GB（10⁹ 字节）", GIB / 1e9), ("MiB", 2 ** 10), ("字节", GIB))


@instructor_only
def quiz_truth() -> dict:
    """Per key: the answer ("want"), the known wrong answers as (code, label, value), and for the sliding
    window the answer that ignores it ("no-window").

    Published configs (config.json on Hugging Face): Gemma-7B 28 layers, 16 KV heads, head_dim 256
    (hidden_size 3072 / 16 heads would give 192); Qwen2-1.5B 12 query heads, 2 KV heads; Mistral-7B
    v0.1 32 layers, 8 KV heads, head_dim 128, sliding_window 4096."""
    def gib(n_layer, n_kv_head, head_dim, seq_len, batch_size, bytes_per_elem=2) -> float:
        return 2 * n_layer * n_kv_head * head_dim * seq_len * batch_size * bytes_per_elem / GIB

    def slips(**config) -> list:
        """The wrong answers any cache size can get: no factor 2, float32, another unit than GiB."""
        size = gib(**config)
        return [("quiz-kv-no-factor-2", "", size / 2), ("quiz-kv-fp32", "", gib(**config, bytes_per_elem=4)),
                *(("quiz-kv-unit", f"按 {unit} 算的", size * per_gib) for unit, per_gib in UNITS)]

    gemma = dict(n_layer=28, n_kv_head=16, seq_len=8192, head_dim=256)

    def gemma_wrongs(batch):
        return [("quiz-kv-head-dim-from-hidden", "", gib(**{**gemma, "head_dim": 192}, batch_size=batch)),
                *slips(**gemma, batch_size=batch)]

    mistral = dict(n_layer=32, n_kv_head=8, head_dim=128, batch_size=8)
    window, whole = dict(mistral, seq_len=4096), dict(mistral, seq_len=32768)
    return {"gemma_7b_gib": {"want": gib(**gemma, batch_size=1), "wrong": gemma_wrongs(1)},
            "batch16_gib": {"want": gib(**gemma, batch_size=16),
                            "wrong": [("quiz-kv-no-batch", "", gib(**gemma, batch_size=1)), *gemma_wrongs(16)]},
            "qwen2_shrink": {"want": 12 / 2, "wrong": [("quiz-kv-shrink-inverted", "", 2 / 12)]},
            WINDOW_KEY: {"want": gib(**window), "no-window": gib(**whole), "wrong": [
                ("quiz-kv-sliding-window-ignored", "", gib(**whole)),
                *((code, label, value) for config in (window, whole) for code, label, value in
                  [("quiz-kv-no-batch", "", gib(**{**config, "batch_size": 1})), *slips(**config)])]}}


@oracle
def quiz_keys(keys: tuple[str, ...], extended: bool) -> dict:
    """Per key of ``keys``: the salted digests (oracle.answer_key) of the accepted answers, and of each known
    wrong one as (code, label, digests). The visible check (``extended`` False) accepts the sliding-window
    answer with or without the window, one list of digests for both, so the class edition's stored results
    do not tell which is right; it stores nothing of the hidden check's."""
    truth = quiz_truth()
    keyed = {}
    for key in keys:
        accepted = [truth[key]["want"]] + ([truth[key]["no-window"]] if key == WINDOW_KEY and not extended else [])
        wrong = [(code, label, value) for code, label, value in truth[key]["wrong"]
                 if not any(math.isclose(value, a, rel_tol=QUIZ_REL_TOL) for a in accepted)]
        keyed[key] = (sorted(d for a in accepted for d in answer_key(a, QUIZ_REL_TOL)),
                      [(code, label, answer_key(value, QUIZ_REL_TOL)) for code, label, value in wrong])
    return keyed


@check("quiz_kv_cache")
def check_quiz_kv_cache(extended: bool = False, seed: int = 0):
    """Nothing random (``seed`` changes nothing); the visible check leaves the sliding window of the fourth
    answer to the hidden test (``extended``), and says so."""
    del seed
    answers = yield from quiz_answers("quiz_kv_cache", QUIZ_KEYS)
    keys = quiz_keys(QUIZ_KEYS, extended)
    for key in QUIZ_KEYS:
        value = quiz_number(answers, key)
        accepted, wrongs = keys[key]
        if matches(value, accepted, QUIZ_REL_TOL):
            continue
        for code, label, wrong in wrongs:
            if matches(value, wrong, QUIZ_REL_TOL):
                raise CheckError(code, f"{key} = {value:g} 不对" + (f"：它正是{label}结果，题目要的是 GiB（2³⁰ 字节）。"
                                                                     if label else "。"))
        raise CheckError(QUIZ_FALLBACK.get(key, "quiz-kv-cache-size"), f"{key} = {value:g} 不对。")
    return () if extended else (WINDOW_KEY,)
