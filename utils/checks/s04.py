"""Checks of section 04_masks: causal_mask, padding_mask, combine_masks, masked_softmax, is_causal.

The masks and weights a learner's output is compared with come from the oracles here, the hidden
cases from instructor-only functions (utils/checks/oracle.py). is_causal is judged on probe functions
the kernel builds from specs the check chooses (:func:`probe`); whether each is causal is known from
its spec, by an oracle, and never enters the kernel."""
from __future__ import annotations

import contextlib

import numpy as np
import torch

from .compare import Cases, close, expect, randn, require_tensor, type_name
from .core import OBSERVED, CheckError, check
from .oracle import instructor_only, oracle
from .protocol import CANDIDATE, Call, New, Watch

NEG_INF = float("-inf")
HERE = "utils.checks.s04"


def _lengths(seed: int, low: int, high: int, count: int) -> list[int]:
    """``count`` random integers in [low, high], drawn from ``seed``: hidden tests see new sizes."""
    g = torch.Generator().manual_seed(seed)
    return torch.randint(low, high + 1, (count,), generator=g).tolist()


def _require_bool(got, want: torch.Tensor, what: str) -> None:
    """[mask-not-bool] for a tensor of the right size whose dtype is not bool."""
    if isinstance(got, torch.Tensor) and got.dtype != torch.bool and got.numel() == want.numel():
        raise CheckError("mask-not-bool", f"{what}的 dtype 是 {got.dtype}，应为 torch.bool（True = 可以看）。")


# --- causal_mask ------------------------------------------------------------------------------

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


class DeviceProbe:
    """Stand-in for causal_mask's device test: where ``fn(T, device=...)`` puts its mask. It asks for the CPU
    while the default device is meta: a mask made where it is asked lands on the CPU, one that ignores
    ``device`` on meta. Only when that gives no CPU tensor (``.to(device)`` at the end cannot copy out of
    meta) does it ask for meta itself; ops on meta tensors import sympy on first use, a second per kernel.
    Returns [the device asked for, the device of the result (None for no tensor)]. It judges nothing."""

    def __call__(self, fn, T: int) -> list:
        with contextlib.suppress(Exception), torch.device("meta"):
            if _device_of(fn(T, device=torch.device("cpu"))) == "cpu":
                return ["cpu", "cpu"]
        return ["meta", _device_of(fn(T, device=torch.device("meta")))]


def _device_of(out) -> str | None:
    return str(out.device) if isinstance(out, torch.Tensor) else None


@check("causal_mask")
def check_causal_mask(extended: bool = False, seed: int = 0):
    judged = Cases()
    for T in (4, 1, 7, *_lengths(seed, 2, 8, 1)) + (hidden_mask_sizes(seed) if extended else ()):
        got = yield from judged.call(Call(CANDIDATE, (T,)))
        masks = causal_masks(T)
        _require_bool(got, masks["want"], f"T={T} 时掩码")
        judged.add(f"T={T} 时的因果掩码", got, masks["want"], masks["misconceptions"], inputs={"T": T})
    judged.decide()
    # No GPU here: the meta device (shapes only, no data) shows whether device reaches the tensor made.
    asked, device = yield Call(New(f"{HERE}:DeviceProbe"), (CANDIDATE, 5))
    if device != asked:
        raise CheckError("ignores-device", f"causal_mask(5, device=torch.device('{asked}')) 返回的掩码在 "
                                           f"{device} 上，而不在传进来的 device 上{OBSERVED}。")


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
def check_padding_mask(extended: bool = False, seed: int = 0):
    cases = [([3, 5, 1], 5), ([4], 6), ([2, 2], 2)] + (hidden_padding_cases() if extended else [])
    T = 3 + seed % 6
    cases.append((_lengths(seed, 1, T, 3 + seed % 3), T))                    # new lengths for every seed
    judged = Cases()
    for lengths, T in cases:
        got = yield from judged.call(Call(CANDIDATE, (torch.tensor(lengths), T), pure=True))
        masks = padding_masks(lengths, T)
        _require_bool(got, masks["want"], "padding 掩码")
        judged.add(f"lengths={lengths}, T={T} 时的 padding 掩码", got, masks["want"], masks["misconceptions"],
                   inputs={"lengths": torch.tensor(lengths), "T": T})
    judged.decide()


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
def check_combine_masks(extended: bool = False, seed: int = 0):
    cases = [([3, 5, 1], 5), ([2, 4], 4), ([3], 5)] + (hidden_combine_cases() if extended else [])   # [3]: one sequence
    T = 3 + seed % 5
    cases.append((_lengths(seed, 1, T, 2 + seed % 3), T))                    # new lengths for every seed
    judged = Cases()
    for lengths, T in cases:
        masks = combined_masks(lengths, T)
        got = yield from judged.call(Call(CANDIDATE, (masks["causal"], masks["key_padding"]), pure=True))
        what = f"lengths={lengths}, T={T} 时的组合掩码"
        _require_bool(got, masks["want"], what)
        judged.add(what, got, masks["want"], masks["misconceptions"],
                   inputs={"causal": masks["causal"], "key_padding": masks["key_padding"]})
    judged.decide()


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


def _masked_softmax_cases(shapes: list, seed: int) -> list[tuple[str, torch.Tensor, torch.Tensor]]:
    """(what, scores, mask) of every case: random rows with a fully masked and a fully visible one, a (T, T) mask
    broadcast over (B, H, T, T), every key hidden."""
    cases = []
    for i, (batch, T, S) in enumerate(shapes):
        scores = randn(*batch, T, S, seed=seed + i, scale=2.0)
        cases.append((f"scores {tuple(scores.shape)}（第 0 行全被屏蔽）", scores,
                      _mask_with_empty_row(batch, T, S, seed + i)))
    scores = randn(2, 3, 4, 4, seed=seed + 50)                               # (B, H, T, T)
    cases.append(("mask 形状 (T, T)、scores 形状 (B, H, T, T) 时", scores, causal_masks(4)["want"]))
    cases.append(("mask 全为 False（所有键都被屏蔽）时", scores, torch.zeros(4, dtype=torch.bool)))
    return cases


@check("masked_softmax")
def check_masked_softmax(extended: bool = False, seed: int = 0):
    # ((1,), 3, 4): one sequence
    shapes = [((2,), 4, 5), ((2, 3), 3, 3), ((1,), 3, 4)] + (hidden_masked_shapes() if extended else [])
    judged, cases = Cases(), _masked_softmax_cases(shapes, seed)
    for what, scores, mask in cases:
        got = yield from judged.call(Call(CANDIDATE, (scores, mask), pure=True))
        outs = masked_softmax_outputs(scores, mask)
        judged.add(what, got, outs["want"], outs["misconceptions"], inputs={"scores": scores, "mask": mask})
    judged.decide()
    for case, (_, _, mask) in zip(judged.seen, cases):
        if not bool((case.got[~mask.expand_as(case.got)] == 0).all()):
            raise CheckError("wrong", f"{case.what}：被屏蔽的位置应当恰好是 0。")
    yield from _check_gradient(seed)
    yield from _check_low_precision(seed)


def _check_gradient(seed: int):
    scores = randn(2, 3, 4, 4, seed=seed + 50)                               # (B, H, T, T)
    empty = torch.zeros(4, dtype=torch.bool)                                 # every key hidden
    # The mask goes by keyword: the kernel makes every positional tensor a leaf that requires grad.
    seen = yield Call(CANDIDATE, (scores,), {"mask": empty}, watch=Watch(backward=randn(*scores.shape, seed=seed + 51)))
    grad = seen.grads[0] if seen.grads else None
    if grad is None or not torch.isfinite(grad).all():
        raise CheckError("nan-gradient", "所有键都被屏蔽时，对 scores 的梯度含 NaN（或没有梯度）。")


def _check_low_precision(seed: int):
    for dtype in (torch.float16, torch.bfloat16):
        scores = randn(2, 3, 6, seed=seed + 60, scale=4.0, cast=dtype)
        mask = _mask_with_empty_row((2,), 3, 6, seed + 60)
        got = require_tensor((yield Call(CANDIDATE, (scores, mask), pure=True)), "masked_softmax 的输出")
        if got.dtype != dtype:
            raise CheckError("dtype-not-preserved", f"输入是 {dtype} 时输出是 {got.dtype}。")
        want = masked_softmax_outputs(scores, mask)["want"]
        if not close(got.float(), want.float(), atol=1e-2, rtol=1e-2):
            expect(got.float(), want.float(), f"{dtype} 输入时的结果", atol=1e-2, rtol=1e-2)


# --- is_causal --------------------------------------------------------------------------------

def _attention(x: torch.Tensor, allowed: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
    """x attending to itself over the ``allowed`` keys (a query that sees none gets 0)."""
    scores = (x @ x.transpose(-2, -1) * scale).masked_fill(~allowed, NEG_INF)  # (B, T, T)
    return torch.softmax(scores, -1).nan_to_num(0.0) @ x                     # (B, T, C)


def probe(kind: str, *numbers: int):
    """Stand-in for is_causal: the function [B, T, C] -> [B, T, C'] of the kind the check chose, built in
    the kernel from its spec ``(kind, *numbers)``. It carries no verdict (the oracle causal_truth has it),
    and keeps its spec in a closure, not in attributes a candidate could read by name.

    kinds: ("attention", diagonal, scaled): attention over the keys of ``tril(diagonal)``;
    ("attention-upper",): over those of ``triu()``; ("cumsum",); ("reverse-cumsum",); ("positionwise",):
    a per-position map; ("conv",): itself plus the previous position; ("leak", src, dst): cumsum, plus a
    small part of position src added at position dst."""
    def run(x: torch.Tensor) -> torch.Tensor:
        T = x.size(-2)
        full = torch.ones(T, T, dtype=torch.bool, device=x.device)      # (T, T)
        if kind == "attention":
            diagonal, scaled = numbers
            return _attention(x, full.tril(diagonal), x.size(-1) ** -0.5 if scaled else 1.0)
        if kind == "attention-upper":
            return _attention(x, full.triu())
        if kind == "cumsum":
            return x.cumsum(-2)
        if kind == "reverse-cumsum":
            return x.flip(-2).cumsum(-2).flip(-2)
        if kind == "positionwise":
            return x[..., : max(1, x.size(-1) // 2)] * 2.0
        if kind == "conv":
            return x + torch.roll(x, 1, dims=-2) * (torch.arange(T, device=x.device) > 0)[:, None]
        src, dst = numbers
        out = x.cumsum(-2)
        if max(src, dst) < T:
            out[..., dst, :] = out[..., dst, :] + 0.01 * x[..., src, :]
        return out
    return run


def probes(T: int, seed: int) -> list[tuple[str, tuple]]:
    """(description, spec) of the functions is_causal must judge at length T: causal ones written
    differently, and leaks of every size — one of them at places drawn from the seed."""
    g = torch.Generator().manual_seed(seed)
    dst = int(torch.randint(0, T - 1, (1,), generator=g))
    src = int(torch.randint(dst + 1, T, (1,), generator=g))
    mid = T // 2
    return [
        ("因果注意力", ("attention", 0, 1)),
        ("前缀和 cumsum", ("cumsum",)),
        ("逐位置的线性层", ("positionwise",)),
        ("只看过去和自己的一维卷积", ("conv",)),
        ("严格只看过去（对角线也屏蔽）", ("attention", -1, 0)),
        ("掩码方向反了的注意力", ("attention-upper",)),
        ("对角线偏了一格、能看到下一个 token 的注意力", ("attention", 1, 0)),
        ("反向前缀和（从后往前累加）", ("reverse-cumsum",)),
        (f"只有位置 {mid} 偷看了最后一个位置", ("leak", T - 1, mid)),
        ("只有位置 1 偷看了位置 2", ("leak", 2, 1)),
        (f"只有位置 {dst} 偷看了位置 {src}", ("leak", src, dst)),
    ]


@oracle
def causal_truth(spec: tuple) -> bool:
    """Whether the probe of ``spec`` is causal: no output position reads a later input."""
    kind, *numbers = spec
    if kind == "attention":
        return numbers[0] <= 0
    if kind == "leak":
        return numbers[0] <= numbers[1]
    return kind in ("cumsum", "positionwise", "conv")


@instructor_only
def hidden_causal_settings() -> list[tuple[int, int]]:
    return [(12, 4), (3, 8)]


def _as_verdict(value) -> bool:
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        return bool(value)
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    raise CheckError("wrong-type", f"is_causal 应返回 True/False，实际得到 {type_name(value)}。")


@check("is_causal")
def check_is_causal(extended: bool = False, seed: int = 0):
    settings = [(8, 16), (5, 3)] + (hidden_causal_settings() if extended else [])
    settings.append(tuple(_lengths(seed, 3, 10, 2)))                         # a (T, C) drawn from the seed
    for i, (T, C) in enumerate(settings):
        for description, spec in probes(T, seed + i):
            verdict = _as_verdict((yield Call(CANDIDATE, (New(f"{HERE}:probe", spec),), {"T": T, "C": C},
                                              grad=True)))
            causal = causal_truth(spec)
            if verdict != causal:
                code = "is-causal-false-alarm" if causal else "is-causal-missed-leak"
                raise CheckError(code, f"T={T}, C={C}：对“{description}”判断为 {verdict}，应为 {causal}。")
