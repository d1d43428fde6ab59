"""Checks of section 07_gqa_and_kv_cache."""
from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from .core import CheckError, call, call_pure, check, crash_hint, expect, randn, quiz_answers
from .s05 import _check_linear

# repeat_kv: (B, Hkv, T, Dh, n_rep)
REPEAT_CASES = [(2, 2, 3, 4, 3), (1, 3, 5, 2, 2), (2, 4, 1, 3, 1)]
REPEAT_EXTENDED = [(1, 1, 4, 5, 4), (3, 2, 2, 6, 4)]
# KVCache: (B, Hkv, Dh, chunk lengths)
CACHE_CASES = [(2, 2, 4, (3, 2, 1, 1)), (1, 1, 3, (1, 1, 1))]
CACHE_EXTENDED = [(3, 4, 2, (2, 5, 1, 3)), (1, 2, 8, (4,))]
# GroupedQueryAttention: (B, T, n_embed, n_head, n_kv_head, context_length, chunks); T < context.
GQA_CASES = [(2, 7, 16, 4, 2, 10, (3, 2, 1, 1)), (1, 5, 12, 3, 1, 8, (2, 1, 2)), (1, 4, 8, 2, 2, 6, (1, 3))]
GQA_EXTENDED = [(2, 9, 24, 6, 3, 12, (4, 1, 3, 1)), (1, 6, 32, 8, 4, 6, (5, 1)), (3, 5, 16, 4, 1, 7, (1, 2, 2))]
# kv_cache_bytes: distinct primes, so that each misconception gives a different number.
BYTES_CASES = [(3, 5, 7, 11, 13, 4), (2, 1, 64, 100, 1, 2)]
BYTES_EXTENDED = [(32, 8, 128, 4096, 32, 2), (80, 8, 128, 4096, 1, 2), (5, 3, 11, 17, 7, 1)]
_MASK_CRASH = {"cache-mask-offset": r"tril|mask|is_causal|triu"}


# --- repeat_kv ------------------------------------------------------------------------------

def _interleave(x, n_rep):
    return x.repeat_interleave(n_rep, dim=1)                                 # (B, Hkv·n_rep, T, Dh)


@check("repeat_kv")
def check_repeat_kv(candidate, extended: bool = False, seed: int = 0) -> None:
    for B, Hkv, T, Dh, n_rep in REPEAT_CASES + (REPEAT_EXTENDED if extended else []):
        # every value names its place: head j of x holds values j·1000 + ..., so head order is visible
        x = torch.arange(B * Hkv * T * Dh, dtype=torch.float32).reshape(B, T, Hkv, Dh).transpose(1, 2) + seed
        got = call_pure(candidate, x, n_rep)
        expect(got, _interleave(x, n_rep), f"x 形状 {tuple(x.shape)}、n_rep={n_rep} 时", [
            ("repeat-kv-tiled", x.repeat(1, n_rep, 1, 1)),
            ("repeat-kv-wrong-dim", x.repeat_interleave(n_rep, dim=2)),
            ("repeat-kv-wrong-dim", x.repeat_interleave(n_rep, dim=-1))])


# --- KVCache --------------------------------------------------------------------------------

def _length(cache, what: str) -> int:
    n = call(len, cache)
    if not isinstance(n, int):
        raise CheckError("wrong-type", f"{what}：len(cache) 应返回 int，实际是 {type(n).__name__}。")
    return n


def _fresh(candidate, what: str):
    cache = call(candidate)
    if not callable(getattr(cache, "update", None)):
        raise CheckError("wrong-type", "KVCache() 应有一个 update(k, v) 方法。")
    n = _length(cache, what)
    if n != 0:
        raise CheckError("cache-not-reset", f"{what}：一个新建的 KVCache() 的 len 应为 0，实际是 {n}"
                                            "（上一个缓存的内容留了下来）。")
    return cache


def _update(cache, k, v, what: str):
    out = call_pure(cache.update, k, v)
    if not (isinstance(out, tuple) and len(out) == 2):
        raise CheckError("wrong-type", f"{what}：update(k, v) 应返回二元组 (k_all, v_all)，"
                                       f"实际是 {type(out).__name__}。")
    return out


def _safe_cat(prev, new, dim):
    """What concatenating along the wrong dim gives, or None where that cannot even be built."""
    try:
        return torch.cat([prev, new], dim=dim)
    except RuntimeError:
        return None


_CAT_CRASH = {"cache-wrong-dim": r"cat\([^\n]*dim\s*=\s*(0|1|3|-1)\b"}


def _run_cache(candidate, B, Hkv, Dh, chunks, seed, label):
    """Feed chunks of K/V into a fresh cache; compare what update returns and len after each."""
    cache = _fresh(candidate, label)
    total = sum(chunks)
    k_all = randn(B, Hkv, total, Dh, seed=seed)                              # (B, Hkv, S, Dh)
    v_all = randn(B, Hkv, total, Dh, seed=seed + 1)
    start = 0
    for i, n in enumerate(chunks):
        k, v = k_all[:, :, start:start + n], v_all[:, :, start:start + n]    # (B, Hkv, n, Dh)
        with crash_hint(type(cache).update, _CAT_CRASH):
            got_k, got_v = _update(cache, k, v, label)
        end = start + n
        what = f"{label}，第 {i + 1} 次 update（之前已缓存 {start} 个位置，这次新增 {n} 个）返回的 k"
        prev_k = k_all[:, :, :start]
        expect(got_k, k_all[:, :, :end], what, [
            ("cache-overwrites", k),
            ("cache-reappends", torch.cat([prev_k, k_all[:, :, :end]], dim=2)),
            ("cache-reappends", torch.cat([prev_k, prev_k, k], dim=2)),
            ("cache-wrong-dim", lambda: _safe_cat(prev_k, k, 1) if start else None),
            ("cache-wrong-dim", lambda: _safe_cat(prev_k, k, -1) if start else None),
            ("cache-kv-swapped", v_all[:, :, :end])])
        expect(got_v, v_all[:, :, :end], what.replace("返回的 k", "返回的 v"), [
            ("cache-kv-swapped", k_all[:, :, :end]), ("cache-overwrites", v)])
        n_cached = _length(cache, label)
        if n_cached > end and n_cached not in (end * B, end * Hkv, end * Dh, end * B * Hkv * Dh):
            raise CheckError("cache-reappends", f"{label}：已经缓存了 {end} 个位置，len(cache) 却是 {n_cached}。")
        if n_cached != end:
            raise CheckError("cache-len-wrong", f"{label}：已经缓存了 {end} 个位置，len(cache) 却是 {n_cached}。")
        start = end


@check("KVCache")
def check_KVCache(candidate, extended: bool = False, seed: int = 0) -> None:
    for i, (B, Hkv, Dh, chunks) in enumerate(CACHE_CASES + (CACHE_EXTENDED if extended else [])):
        label = f"B={B}, Hkv={Hkv}, Dh={Dh}，分块 {list(chunks)}"
        _run_cache(candidate, B, Hkv, Dh, chunks, seed + 10 * i, label)
        # a second sequence in a second, fresh cache must start from nothing
        _run_cache(candidate, B, Hkv, Dh, chunks[::-1], seed + 10 * i + 5, label + "（第二个序列、新建的缓存）")


# --- GroupedQueryAttention ------------------------------------------------------------------

class _Cache:
    """A plain concatenating KV cache, so that the module's check does not depend on the learner's."""

    def __init__(self):
        self.k = self.v = None

    def update(self, k, v):
        self.k = k if self.k is None else torch.cat([self.k, k], dim=2)      # (B, Hkv, S, Dh)
        self.v = v if self.v is None else torch.cat([self.v, v], dim=2)
        return self.k, self.v

    def __len__(self):
        return 0 if self.k is None else self.k.size(2)


def _gqa_reference(m, x, H, Hkv, past=None, grouping="interleave", mask="offset", scale=None, o_proj=True,
                   use_past=True):
    """GQA from the module's own weights. past: the (k, v) of earlier positions, or None.
    The options give the misconceptions' outputs."""
    B, T, C = x.shape
    Dh = C // H
    q = m.q_proj(x).view(B, T, H, Dh).transpose(1, 2)                        # (B, H, T, Dh)
    k = m.k_proj(x).view(B, T, Hkv, Dh).transpose(1, 2)                      # (B, Hkv, T, Dh)
    v = m.v_proj(x).view(B, T, Hkv, Dh).transpose(1, 2)
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
    y = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, scale=scale)      # (B, H, T, Dh)
    y = y.transpose(1, 2).reshape(B, T, C)                                    # (B, T, C)
    return m.o_proj(y) if o_proj else y


def _kv(m, x, Hkv):
    B, T, C = x.shape
    k = m.k_proj(x).view(B, T, Hkv, -1).transpose(1, 2)                      # (B, Hkv, T, Dh)
    v = m.v_proj(x).view(B, T, Hkv, -1).transpose(1, 2)
    return k, v


def _make_gqa(candidate, C, H, Hkv, L):
    torch.manual_seed(C * 31 + H * 7 + Hkv)
    module = call(candidate, n_embed=C, n_head=H, n_kv_head=Hkv, context_length=L)
    if not isinstance(module, nn.Module):
        raise CheckError("wrong-type", f"应创建一个 nn.Module，实际是 {type(module).__name__}。")
    Dh = C // H
    _check_linear(getattr(module, "q_proj", None), "q_proj", C, C, bias=False)
    for name in ("k_proj", "v_proj"):
        _check_linear(getattr(module, name, None), name, C, Hkv * Dh, bias=False)
    _check_linear(getattr(module, "o_proj", None), "o_proj", C, C, bias=False)
    return module


def _decode(module, x, chunks, label, mask_hint=False):
    """Feed x chunk by chunk through a fresh cache; return the outputs, concatenated, and the cache."""
    cache, outs, start = _Cache(), [], 0
    for n in chunks:
        with crash_hint(type(module).forward, _MASK_CRASH if mask_hint else {}):
            out = call_pure(module, x[:, start:start + n], cache=cache)
        if not isinstance(out, torch.Tensor) or out.shape != (x.size(0), n, x.size(2)):
            shape = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
            raise CheckError("wrong-shape", f"{label}：新增 {n} 个位置时输出形状应为 {(x.size(0), n, x.size(2))}，"
                                            f"实际是 {shape}。")
        outs.append(out)
        start += n
    return torch.cat(outs, dim=1), cache                                      # (B, T, C)


def _chunked_reference(m, x, H, Hkv, chunks, **options):
    """What a module with the given misconception outputs when fed chunk by chunk."""
    outs, start, past = [], 0, None
    for n in chunks:
        xc = x[:, start:start + n]
        outs.append(_gqa_reference(m, xc, H, Hkv, past=past, **options))
        k, v = _kv(m, xc, Hkv)
        past = (k, v) if past is None else (torch.cat([past[0], k], 2), torch.cat([past[1], v], 2))
        start += n
    return torch.cat(outs, dim=1)


@check("GroupedQueryAttention")
def check_GroupedQueryAttention(candidate, extended: bool = False, seed: int = 0) -> None:
    for i, (B, T, C, H, Hkv, L, chunks) in enumerate(GQA_CASES + (GQA_EXTENDED if extended else [])):
        m = _make_gqa(candidate, C, H, Hkv, L)
        x, x2 = randn(B, T, C, seed=seed + i), randn(B, T, C, seed=seed + 100 + i)   # (B, T, C) each
        label = f"B={B}, T={T}, n_embed={C}, n_head={H}, n_kv_head={Hkv}"
        with torch.no_grad():
            # 1. the full causal forward, no cache
            got = call_pure(m, x)
            want, want2 = _gqa_reference(m, x, H, Hkv), _gqa_reference(m, x2, H, Hkv)

            def ref(**options):
                return _gqa_reference(m, x, H, Hkv, **options)
            expect(got, want, f"{label} 时的输出（不带缓存）", [
                ("kv-groups-order", lambda: ref(grouping="tile") if Hkv not in (1, H) else None),
                ("not-causal", lambda: ref(mask="none")),
                ("scale-by-sqrt-C", lambda: ref(scale=1 / math.sqrt(C))),
                ("scale-missing", lambda: ref(scale=1.0)),
                ("proj-missing", lambda: ref(o_proj=False))])
            # 2. uneven chunks through a fresh cache == the full forward; the new positions' mask
            #    is offset by the cached length
            what = f"{label}，按分块 {list(chunks)} 带缓存解码的输出（应等于一次算完的输出）"
            got_chunks, cache = _decode(m, x, chunks, what, mask_hint=True)
            if len(cache) == 0:
                raise CheckError("cache-unused", f"{label}：解码之后，传进去的 cache 仍是空的"
                                                 "（forward 没有调用 cache.update）。")
            expect(got_chunks, want, what, [
                ("cache-mask-offset", lambda: _chunked_reference(m, x, H, Hkv, chunks, mask="top-left")),
                ("cache-mask-offset", lambda: _chunked_reference(m, x, H, Hkv, chunks, mask="none")),
                ("cache-unused", lambda: _chunked_reference(m, x, H, Hkv, chunks, use_past=False))])
            if len(cache) != T:
                raise CheckError("cache-reappends", f"{label}：解码 {T} 个位置后，缓存里应有 {T} 个位置，"
                                                    f"实际是 {len(cache)}。")
            # 3. a second sequence through a second fresh cache: the same procedure must work again
            try:
                got_second, _ = _decode(m, x2, chunks, what)
                leaked = not torch.allclose(got_second, want2, atol=1e-5, rtol=1e-4)
            except CheckError as err:  # the same procedure worked on the first sequence
                if err.code == "not-implemented":
                    raise
                leaked = True
            if leaked:
                raise CheckError("cache-not-reset", f"{label}：第一个序列用缓存解码时正确；"
                                                    "第二个序列换了一个新建的 cache、"
                                                    "同样分块解码，输出却不等于它一次算完的输出——上一个序列的状态留在了模块里。")
            # 4. token by token through a fresh cache == the full forward
            ones = (1,) * T
            got_steps, _ = _decode(m, x2, ones, f"{label}，逐个位置解码")
            expect(got_steps, want2, f"{label}，带缓存逐个位置解码的输出（应等于一次算完的输出）", [
                ("cache-unused", lambda: _chunked_reference(m, x2, H, Hkv, ones, use_past=False))])


# --- kv_cache_bytes -------------------------------------------------------------------------

def _bytes(n_layer, n_kv_head, head_dim, seq_len, batch_size=1, bytes_per_elem=2):
    return 2 * n_layer * n_kv_head * head_dim * seq_len * batch_size * bytes_per_elem


@check("kv_cache_bytes")
def check_kv_cache_bytes(candidate, extended: bool = False, seed: int = 0) -> None:
    cases = BYTES_CASES + (BYTES_EXTENDED if extended else [])
    g = torch.Generator().manual_seed(seed)
    cases = cases + [tuple(int(v) for v in torch.randint(1, 50, (5,), generator=g)) + (1 + seed % 4,)]
    for L, Hkv, Dh, S, B, E in cases:
        args = f"n_layer={L}, n_kv_head={Hkv}, head_dim={Dh}, seq_len={S}, batch_size={B}, bytes_per_elem={E}"
        for how, got in (("关键字参数", lambda: call(candidate, n_layer=L, n_kv_head=Hkv, head_dim=Dh, seq_len=S,
                                                     batch_size=B, bytes_per_elem=E)),
                         ("位置参数", lambda: call(candidate, L, Hkv, Dh, S, B, E))):
            _expect_bytes(got(), _bytes(L, Hkv, Dh, S, B, E), f"{args}（{how}）", L, B, E)
    # the defaults: batch_size=1, bytes_per_elem=2 (float16 / bfloat16)
    L, Hkv, Dh, S = 3, 5, 7, 11
    _expect_bytes(call(candidate, L, Hkv, Dh, S), _bytes(L, Hkv, Dh, S),
                  f"只给 n_layer={L}, n_kv_head={Hkv}, head_dim={Dh}, seq_len={S}（其余用默认值）时", L, 1, 2)


def _expect_bytes(got, want, what, L, B, E) -> None:
    if isinstance(got, bool) or not isinstance(got, int):
        if isinstance(got, float) and got == want:
            raise CheckError("wrong-type", f"{what}：数值对了，但应返回 int，实际是 float"
                                           "（用整数运算，别用 / 或 ** 0.5）。")
        raise CheckError("wrong-type", f"{what}：应返回 int（字节数），实际是 {type(got).__name__}。")
    if got == want:
        return
    misconceptions = [
        ("kv-bytes-no-kv-factor", want // 2),
        ("kv-bytes-no-batch", want // B),
        ("kv-bytes-no-dtype", want // E),
        ("kv-bytes-no-layers", want // L),
        ("kv-bytes-bits", want * 8),
        ("kv-bytes-no-kv-factor", want // (2 * B)),
    ]
    for code, value in misconceptions:
        if got == value:
            raise CheckError(code, f"{what}：应为 {want:,} 字节，实际是 {got:,}。")
    raise CheckError("wrong", f"{what}：应为 {want:,} 字节，实际是 {got:,}。")


# --- quiz_kv_cache --------------------------------------------------------------------------

QUIZ = {"llama2_7b_gib": 2.0, "batch32_gib": 64.0, "gqa_shrink": 8.0}
_QUIZ_WRONG = {"llama2_7b_gib": [("quiz-kv-no-factor-2", 1.0), ("quiz-kv-fp32", 4.0)],
               "batch32_gib": [("quiz-kv-no-batch", 2.0), ("quiz-kv-no-factor-2", 32.0), ("quiz-kv-fp32", 128.0)],
               "gqa_shrink": [("quiz-kv-shrink-inverted", 1 / 8)]}


@check("quiz_kv_cache")
def check_quiz_kv_cache(candidate, extended: bool = False, seed: int = 0) -> None:
    """One set of answers, nothing random: ``extended`` and ``seed`` change nothing."""
    del extended, seed
    answers = quiz_answers(candidate, "quiz_kv_cache", list(QUIZ))
    for key in QUIZ:
        value = answers[key]
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise CheckError("wrong-type", f"{key} 应是一个数，实际是 {type(value).__name__}。")
        if math.isclose(value, QUIZ[key], rel_tol=1e-3):
            continue
        for code, wrong in _QUIZ_WRONG[key]:
            if math.isclose(value, wrong, rel_tol=1e-3):
                raise CheckError(code, f"{key} = {value:g} 不对。")
        raise CheckError("wrong", f"{key} = {value:g} 不对。")
