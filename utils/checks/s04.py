"""Checks of section 04_masks: causal_mask, padding_mask, combine_masks, masked_softmax, is_causal.

The masks and weights a learner's output is compared with come from the oracles here, the hidden
cases from instructor-only functions (utils/checks/oracle.py). is_causal is judged on functions
whose causality is known by construction: they answer no exercise."""
from __future__ import annotations

import torch

from .core import CheckError, TorchCalls, call, call_pure, check, close, expect, randn, require_tensor
from .oracle import instructor_only, oracle

NEG_INF = float("-inf")


# --- causal_mask ------------------------------------------------------------------------------

def _lengths(seed: int, low: int, high: int, count: int) -> list[int]:
    """``count`` random integers in [low, high], drawn from ``seed``: hidden tests see new sizes."""
    g = torch.Generator().manual_seed(seed)
    return torch.randint(low, high + 1, (count,), generator=g).tolist()


@instructor_only
def hidden_mask_sizes(seed: int) -> tuple[int, ...]:
    return (2, 16, 33, *_lengths(seed + 1, 9, 40, 1))


@oracle
def causal_masks(T: int) -> dict:
    """The causal mask of T positions ("want", True = the query may see the key) and each misconception's."""
    full = torch.ones(T, T, dtype=torch.bool)                               # (T, T)
    want = full.tril()                                                       # (T, T)
    return {"want": want, "misconceptions": [
        ("mask-reversed", ~want),                                            # == full.triu(1): only the future
        ("mask-transposed", want.T),                                         # == full.triu(): itself and the future
        ("mask-diagonal-excluded", want.tril(-1)),                           # == ~full.triu(): only the past
        ("mask-diagonal-excluded", full.triu(1).T)]}


@check("causal_mask")
def check_causal_mask(candidate, extended: bool = False, seed: int = 0) -> None:
    for T in (4, 1, 7, *_lengths(seed, 2, 8, 1)) + (hidden_mask_sizes(seed) if extended else ()):
        got = call(candidate, T)
        masks = causal_masks(T)
        if isinstance(got, torch.Tensor) and got.dtype != torch.bool and got.shape == masks["want"].shape:
            raise CheckError("mask-not-bool",
                             f"T={T} 时掩码的 dtype 是 {got.dtype}，应为 torch.bool（True = 可以看）。")
        expect(got, masks["want"], f"T={T} 时的因果掩码", masks["misconceptions"])
    _check_device_is_used(candidate)


def _check_device_is_used(candidate) -> None:
    """Without a GPU we cannot build on another device, so we check the device reaches torch."""
    device = torch.device("cpu")
    with TorchCalls() as calls:
        got = call(candidate, 5, device=device)
    if not calls.received(device) or not isinstance(got, torch.Tensor) or got.device != device:
        raise CheckError("ignores-device", "causal_mask(5, device=...) 没有把 device 传给创建张量的函数。")


# --- padding_mask -----------------------------------------------------------------------------

@instructor_only
def hidden_padding_cases() -> list[tuple[list[int], int]]:
    return [([7, 1, 4, 6], 7), ([1], 1)]


@oracle
def padding_masks(lengths: list[int], T: int) -> dict:
    """The key-padding mask ("want", True = a real token) of sequences of these lengths, and each misconception's."""
    n = torch.tensor(lengths)[:, None]                                       # (B, 1)
    positions = torch.arange(T)[None, :]                                     # (1, T)
    want = positions < n                                                     # (B, T)
    return {"want": want, "misconceptions": [
        ("mask-reversed", ~want), ("padding-off-by-one", positions <= n),
        ("padding-off-by-one", positions < n - 1), ("padding-left", positions >= T - n)]}


@check("padding_mask")
def check_padding_mask(candidate, extended: bool = False, seed: int = 0) -> None:
    cases = [([3, 5, 1], 5), ([4], 6), ([2, 2], 2)] + (hidden_padding_cases() if extended else [])
    T = 3 + seed % 6
    cases.append((_lengths(seed, 1, T, 3 + seed % 3), T))                    # new lengths for every seed
    for lengths_list, T in cases:
        got = call_pure(candidate, torch.tensor(lengths_list), T)
        masks = padding_masks(lengths_list, T)
        if isinstance(got, torch.Tensor) and got.dtype != torch.bool and got.shape == masks["want"].shape:
            raise CheckError("mask-not-bool", f"padding 掩码的 dtype 是 {got.dtype}，应为 torch.bool。")
        expect(got, masks["want"], f"lengths={lengths_list}, T={T} 时的 padding 掩码", masks["misconceptions"])


# --- combine_masks ----------------------------------------------------------------------------

@instructor_only
def hidden_combine_cases() -> list[tuple[list[int], int]]:
    return [([6, 1, 3], 6), ([1], 1)]


@oracle
def combined_masks(lengths: list[int], T: int) -> dict:
    """The two masks the learner combines ("causal" (T, T), "key_padding" (B, T)), their combination
    ("want") and each misconception's."""
    causal, key_padding = causal_masks(T)["want"], padding_masks(lengths, T)["want"]
    want = (causal[None, :, :] & key_padding[:, None, :])[:, None]          # (B, 1, T, T)
    query_axis = (causal[None] & key_padding[:, :, None])[:, None]           # (B, 1, T, T)
    either = causal[None] | key_padding[:, None, :]                          # (B, T, T)
    return {"causal": causal, "key_padding": key_padding, "want": want, "misconceptions": [
        ("mask-not-broadcastable", want[:, 0]), ("padding-on-query-axis", query_axis),
        ("padding-on-query-axis", query_axis[:, 0]),
        ("mask-combined-with-or", either[:, None]), ("mask-combined-with-or", either)]}


@check("combine_masks")
def check_combine_masks(candidate, extended: bool = False, seed: int = 0) -> None:
    cases = [([3, 5, 1], 5), ([2, 4], 4)] + (hidden_combine_cases() if extended else [])
    T = 3 + seed % 5
    cases.append((_lengths(seed, 1, T, 2 + seed % 3), T))                    # new lengths for every seed
    for lengths_list, T in cases:
        masks = combined_masks(lengths_list, T)
        got = call_pure(candidate, masks["causal"], masks["key_padding"])
        what = f"lengths={lengths_list}, T={T} 时的组合掩码"
        if isinstance(got, torch.Tensor) and got.dtype != torch.bool and got.numel() == masks["want"].numel():
            raise CheckError("mask-not-bool", f"{what}的 dtype 是 {got.dtype}，应为 torch.bool。")
        expect(got, masks["want"], what, masks["misconceptions"])


# --- masked_softmax ---------------------------------------------------------------------------

def _mask_with_empty_row(batch, T, S, seed) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    mask = torch.rand(*batch, T, S, generator=g) > 0.5                      # (..., T, S)
    mask[..., 0, :] = False                                                  # a fully masked row
    mask[..., 1, :] = True                                                   # a fully visible row
    return mask


@instructor_only
def hidden_masked_shapes() -> list[tuple[tuple[int, ...], int, int]]:
    return [((1,), 6, 2), ((), 5, 7)]


@oracle
def masked_softmax_outputs(scores, mask) -> dict:
    """softmax over the visible keys, 0 on a fully masked row ("want"), and each misconception's, in float64."""
    scores = scores.double()                                                 # (..., T, S)
    plain = torch.softmax(scores.masked_fill(~mask, NEG_INF), -1)            # NaN on a fully masked row
    return {"want": plain.nan_to_num(0.0), "misconceptions": [
        ("nan-on-fully-masked", plain),
        ("fully-masked-uniform", torch.softmax(scores.masked_fill(~mask, -1e9), -1)),
        ("mask-after-softmax", torch.softmax(scores, -1) * mask),
        ("mask-reversed", torch.softmax(scores.masked_fill(mask, NEG_INF), -1).nan_to_num(0.0)),
        ("mask-fill-zero", torch.softmax(scores.masked_fill(~mask, 0.0), -1)),
        ("softmax-wrong-dim", torch.softmax(scores.masked_fill(~mask, NEG_INF), -2).nan_to_num(0.0))]}


@check("masked_softmax")
def check_masked_softmax(candidate, extended: bool = False, seed: int = 0) -> None:
    shapes = [((2,), 4, 5), ((2, 3), 3, 3)] + (hidden_masked_shapes() if extended else [])
    for i, (batch, T, S) in enumerate(shapes):
        scores = randn(*batch, T, S, seed=seed + i, scale=2.0)
        mask = _mask_with_empty_row(batch, T, S, seed + i)
        got = call_pure(candidate, scores, mask)
        outs = masked_softmax_outputs(scores, mask)
        what = f"scores {tuple(scores.shape)}（第 0 行全被屏蔽）"
        expect(got, outs["want"], what, outs["misconceptions"])
        if not bool((got[~mask] == 0).all()):
            raise CheckError("wrong", f"{what}：被屏蔽的位置应当恰好是 0。")
    _check_broadcast_and_gradient(candidate, seed)
    _check_low_precision(candidate, seed)


def _check_broadcast_and_gradient(candidate, seed: int) -> None:
    scores = randn(2, 3, 4, 4, seed=seed + 50).requires_grad_()              # (B, H, T, T)
    mask = causal_masks(4)["want"]                                           # (T, T) broadcasts
    got = require_tensor(call(candidate, scores, mask), "masked_softmax 的输出")
    expect(got.detach(), masked_softmax_outputs(scores.detach(), mask)["want"],
           "mask 形状 (T, T)、scores 形状 (B, H, T, T) 时")
    empty = torch.zeros(4, dtype=torch.bool)                                 # every key hidden
    got = require_tensor(call(candidate, scores, empty), "masked_softmax 的输出")
    upstream = randn(*got.shape, seed=seed + 51)
    (got * upstream).sum().backward()
    if scores.grad is None or not torch.isfinite(scores.grad).all():
        raise CheckError("nan-gradient", "所有键都被屏蔽时，对 scores 的梯度含 NaN（或没有梯度）。")


def _check_low_precision(candidate, seed: int) -> None:
    for dtype in (torch.float16, torch.bfloat16):
        scores = randn(2, 3, 6, seed=seed + 60, scale=4.0).to(dtype)
        mask = _mask_with_empty_row((2,), 3, 6, seed + 60)
        got = require_tensor(call_pure(candidate, scores, mask), "masked_softmax 的输出")
        if got.dtype != dtype:
            raise CheckError("dtype-not-preserved", f"输入是 {dtype} 时输出是 {got.dtype}。")
        want = masked_softmax_outputs(scores, mask)["want"]
        if not close(got.float(), want.float(), atol=1e-2, rtol=1e-2):
            expect(got.float(), want.float(), f"{dtype} 输入时的结果", atol=1e-2, rtol=1e-2)


# --- is_causal --------------------------------------------------------------------------------

def _all_pairs(x: torch.Tensor) -> torch.Tensor:
    """(T, T) of True for the T positions of x: each example cuts the keys it lets a query see from it."""
    T = x.size(-2)
    return torch.ones(T, T, dtype=torch.bool)                               # (T, T)


def _attention_with_mask(x: torch.Tensor, allowed: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
    """x attending to itself over the ``allowed`` keys (a query that sees none gets 0)."""
    scores = (x @ x.transpose(-2, -1) * scale).masked_fill(~allowed, NEG_INF)  # (B, T, T)
    return torch.softmax(scores, -1).nan_to_num(0.0) @ x                     # (B, T, C)


def _leak(x: torch.Tensor, src: int, dst: int) -> torch.Tensor:
    out = x.cumsum(-2)                                                       # causal part
    out[:, dst] = out[:, dst] + 0.01 * x[:, src]                             # one small leak
    return out


def causal_examples(T: int):
    """(description, fn, is it causal?) — the functions the learner's is_causal must judge."""
    mid, early = T // 2, 1
    return [
        ("因果注意力", lambda x: _attention_with_mask(x, _all_pairs(x).tril(), x.size(-1) ** -0.5), True),
        ("前缀和 cumsum", lambda x: x.cumsum(-2), True),
        ("逐位置的线性层", lambda x: x[..., : max(1, x.size(-1) // 2)] * 2.0, True),
        ("只看过去和自己的一维卷积",
         lambda x: x + torch.roll(x, 1, dims=-2) * (torch.arange(x.size(-2)) > 0)[:, None], True),
        ("严格只看过去（对角线也屏蔽）", lambda x: _attention_with_mask(x, _all_pairs(x).tril(-1)), True),
        ("掩码方向反了的注意力", lambda x: _attention_with_mask(x, ~_all_pairs(x).tril(-1)), False),
        ("对角线偏了一格、能看到下一个 token 的注意力",
         lambda x: _attention_with_mask(x, _all_pairs(x).tril(1)), False),
        ("反向前缀和（从后往前累加）", lambda x: x.flip(-2).cumsum(-2).flip(-2), False),
        (f"只有位置 {mid} 偷看了最后一个位置", lambda x: _leak(x, x.size(-2) - 1, mid), False),
        (f"只有位置 {early} 偷看了位置 {early + 1}", lambda x: _leak(x, early + 1, early), False),
    ]


@instructor_only
def hidden_causal_settings() -> list[tuple[int, int]]:
    return [(12, 4), (3, 8)]


@check("is_causal")
def check_is_causal(candidate, extended: bool = False, seed: int = 0) -> None:
    settings = [(8, 16), (5, 3)] + (hidden_causal_settings() if extended else [])
    settings.append(tuple(_lengths(seed, 3, 10, 2)))                         # a (T, C) drawn from the seed
    for T, C in settings:
        for description, fn, causal in causal_examples(T):
            verdict = call(candidate, fn, T=T, C=C)
            if isinstance(verdict, torch.Tensor) and verdict.numel() == 1:
                verdict = bool(verdict)
            if not isinstance(verdict, bool):
                raise CheckError("wrong-type", f"is_causal 应返回 True/False，实际得到 {type(verdict).__name__}。")
            if verdict != causal:
                code = "is-causal-false-alarm" if causal else "is-causal-missed-leak"
                raise CheckError(code, f"T={T}, C={C}：对“{description}”判断为 {verdict}，应为 {causal}。")
