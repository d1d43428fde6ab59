"""Checks of section 02_scaling_and_softmax.

What a learner's output is compared with comes from the float64 oracles here, the hidden cases
from instructor-only functions (utils/checks/oracle.py)."""
from __future__ import annotations

import math
import numbers

import torch

from .compare import Cases, close, expect, randn, require_tensor, type_name
from .core import OBSERVED, CheckError, check
from .keys import recipe
from .oracle import instructor_only, oracle
from .protocol import CANDIDATE, Call, New, Watch
from .s01 import FIXED_TRANSPOSE

N_SAMPLES = 20_000          # enough for a 6% tolerance (std of a sample variance ≈ D·√(2/n))
VARIANCE_DIMS = (4, 16, 64)
# (batch dims, Tq, Tk, D); the last is a single sequence (leading dim 1), the most common real input
SCALED_CASES = [((2,), 4, 6, 8), ((), 5, 5, 16), ((2, 3), 3, 7, 4), ((1, 2), 6, 4, 9)]
JACOBIAN_SIZES = (4, 1, 7)


@instructor_only
def hidden_variance_dims():
    return (2, 32, 128)


@instructor_only
def hidden_scaled_cases():
    return [((1,), 9, 2, 64), ((3,), 1, 1, 1), ((2, 2), 6, 6, 32)]


@instructor_only
def hidden_softmax_probes(seed: int):
    return [("形状 (2, 1, 6) 沿 dim=-1", randn(2, 1, 6, seed=seed + 3, scale=3.0), -1),
            ("形状 (5,) 沿 dim=0", randn(5, seed=seed + 4), 0),
            ("形状 (2, 3, 4, 5) 沿 dim=2", randn(2, 3, 4, 5, seed=seed + 5), 2)]


@instructor_only
def hidden_jacobian_sizes():
    return (2, 12)


# --- dot_product_variance -------------------------------------------------------------------

def _as_float(value, what: str) -> float:
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        return float(value)
    if isinstance(value, numbers.Real):
        return float(value)
    raise CheckError("wrong-type", f"{what} 应返回一个数（float），实际得到 {type_name(value)}。")


@oracle
def variance_targets(d: int) -> dict:
    """Var(q·k) for q, k ~ N(0, I_d) ("want"), and what each misconception estimates instead."""
    return {"want": float(d), "variance-as-std": math.sqrt(d), "variance-of-one-term": 1.0,
            "variance-wrong-distribution": (d / 144, 7 * d / 144)}   # q, k ~ U(0, 1): centred, then not


def _near(got: float, target: float, rel: float, extra: float = 0.0) -> bool:
    return abs(got - target) <= rel * target + extra


@check("dot_product_variance")
def check_dot_product_variance(extended: bool = False, seed: int = 0):
    for d in VARIANCE_DIMS + (hidden_variance_dims() if extended else ()):
        got = _as_float((yield _variance_call(d, N_SAMPLES, seed + d)), "dot_product_variance")
        if not math.isfinite(got):
            raise CheckError("nan-output", f"d={d} 时返回了 {got}。")
        targets = variance_targets(d)
        tol = 6 * d * math.sqrt(2 / N_SAMPLES) + 0.05 * d
        if abs(got - targets["want"]) <= tol:
            continue
        std = targets["variance-as-std"]
        if _near(got, std, 0.1):
            raise CheckError("variance-as-std", f"d={d} 时返回 {got:.3f} ≈ √d = {std:.3f}，而方差应 ≈ {d}。")
        if _near(got, targets["variance-of-one-term"], 0.0, 0.1):
            raise CheckError("variance-of-one-term", f"d={d} 时返回 {got:.3f} ≈ 1，而 q·k 的方差应 ≈ {d}。")
        centred, uniform = targets["variance-wrong-distribution"]
        if _near(got, centred, 0.1, 0.02) or _near(got, uniform, 0.1):
            raise CheckError("variance-wrong-distribution", f"d={d} 时返回 {got:.3f}，与均匀分布采样的结果一致。")
        raise CheckError("wrong", f"d={d} 时返回 {got:.3f}，而 q·k 的方差应 ≈ {d}（允许误差 ±{tol:.2f}）。")
    d = 8
    first = _as_float((yield _variance_call(d, 1000, seed)), "")
    again = _as_float((yield _variance_call(d, 1000, seed)), "")
    if first != again:
        raise CheckError("ignores-generator", f"用同一个种子的 generator 调用两次，得到 {first:.4f} 和 {again:.4f}。")


def _variance_call(d: int, n_samples: int, seed: int) -> Call:
    """dot_product_variance(d, n_samples=n_samples, generator=a torch.Generator seeded with seed)."""
    generator = New("utils.checks.stand_ins:generator", (seed,))
    return Call(CANDIDATE, (d,), {"n_samples": n_samples, "generator": generator})


# --- scaled_attention_scores -----------------------------------------------------------------

@oracle
def scaled_scores(q, k) -> dict:
    """q kᵀ / √D ("want"), and (code, output) of each misconception, in float64."""
    q, k = q.double(), k.double()
    D, Tq, Tk = q.size(-1), q.size(-2), k.size(-2)
    raw = q @ k.transpose(-2, -1)                                                   # (..., Tq, Tk)
    return {"want": raw / math.sqrt(D), "misconceptions": [
        ("scale-missing", raw), ("scale-by-D", raw / D), ("scale-inverted", raw * math.sqrt(D)),
        ("qk-swapped", k @ q.transpose(-2, -1) / math.sqrt(D)),                      # (..., Tk, Tq)
        ("scale-by-sqrt-T", raw / math.sqrt(Tk)), ("scale-by-sqrt-T", raw / math.sqrt(Tq))]}


@check("scaled_attention_scores")
def check_scaled_attention_scores(extended: bool = False, seed: int = 0):
    judged = Cases()
    for i, (batch, Tq, Tk, D) in enumerate(SCALED_CASES + (hidden_scaled_cases() if extended else [])):
        q = randn(*batch, Tq, D, seed=seed + 10 * i)
        k = randn(*batch, Tk, D, seed=seed + 10 * i + 1)
        got = yield from judged.call(Call(CANDIDATE, (q, k), pure=True,
                                          hints={"transpose-fixed-dims": FIXED_TRANSPOSE}))
        outs = scaled_scores(q, k)
        judged.add(f"q 形状 {tuple(q.shape)}、k 形状 {tuple(k.shape)} 时的缩放分数", got, outs["want"],
                   outs["misconceptions"], inputs={"q": q, "k": k})
    judged.decide()


# --- softmax --------------------------------------------------------------------------------

# x.max(dim) without .values / [0]; a max or sum over dim without keepdim
_SOFTMAX_CRASHES = {
    "max-returns-namedtuple": r"\.max\((?:dim\s*=\s*)?[\w-]+(?:\s*,\s*keepdim\s*=\s*True)?\)(?!\s*(?:\.values|\[0\]))",
    "keepdim-missing": r"\.(?:amax|max|sum)\((?:dim\s*=\s*)?[\w-]+\s*\)",
}


def _softmax_call(x: torch.Tensor, dim: int):
    """(yields) The candidate's softmax of x along dim; a built-in softmax seen called in the kernel fails."""
    seen = yield Call(CANDIDATE, (x,), {"dim": dim}, pure=True, hints=_SOFTMAX_CRASHES, watch=Watch(torch_calls=True))
    # softmax, log_softmax, _softmax, Softmax's F.softmax … (observed by the kernel: a property, not an output)
    builtin = next((name for name in seen.torch_calls if "softmax" in name), None)
    if builtin:
        raise CheckError("uses-builtin-softmax", f"调用了 PyTorch 的 {builtin}{OBSERVED}。")
    return require_tensor(seen.value, "softmax 的输出")


def _softmax_probes(seed: int, extended: bool):
    """(description, input, dim) triples: dims other than -1, batch dims, odd sizes."""
    probes = [("形状 (3, 5) 沿 dim=-1", randn(3, 5, seed=seed), -1),
              ("形状 (4, 3) 沿 dim=0", randn(4, 3, seed=seed + 1), 0),
              ("形状 (2, 3, 4) 沿 dim=1", randn(2, 3, 4, seed=seed + 2), 1),
              ("形状 (1, 4, 6) 沿 dim=-1（一条序列）", randn(1, 4, 6, seed=seed + 6), -1)]
    return probes + (hidden_softmax_probes(seed) if extended else [])


@oracle
def softmax_outputs(x, dim: int) -> dict:
    """softmax(x) along ``dim`` ("want"), and (code, output) of each misconception, in float64."""
    x = x.double()
    shifted = (x - x.amax(dim, keepdim=True)).exp()                  # each slice's own max subtracted
    wrong = [("softmax-whole-tensor", torch.softmax(x.flatten(), dim=0).view_as(x)),
             ("softmax-whole-tensor", shifted / shifted.sum())]       # then one sum over everything
    wrong += [("softmax-wrong-dim", torch.softmax(x, dim=d)) for d in range(x.dim()) if d != dim % x.dim()]
    wrong += [("not-normalized", x.exp()), ("not-normalized", shifted)]
    return {"want": torch.softmax(x, dim=dim), "misconceptions": wrong}


@check("softmax")
def check_softmax(extended: bool = False, seed: int = 0):
    judged = Cases()
    for what, x, dim in _softmax_probes(seed, extended):
        got = yield from judged.run(_softmax_call(x, dim))
        outs = softmax_outputs(x, dim)
        wrong = outs["misconceptions"]
        if close(got, outs["want"]):       # a dim fixed in the code that happens to be the one asked: no evidence
            wrong = [(code, out) for code, out in wrong if code != "softmax-wrong-dim"]
        judged.add(f"输入{what}时的 softmax", got, outs["want"], wrong, inputs={"x": x, "dim": dim})
    judged.decide()
    yield from _check_softmax_stability(seed)


@recipe
def _stability_probes(seed: int):
    """Row 0 near 1e4 (exp overflows without a max subtraction); row 1 small (it underflows to
    0/0 when the max of the whole tensor is subtracted instead of each row's own); a tensor with
    -inf entries, each row keeping a finite one. The seed moves the values and the -inf places."""
    g = torch.Generator().manual_seed(seed)
    n = 3 + seed % 3
    big = torch.stack([1e4 - torch.rand(n, generator=g) * 3, torch.randn(n, generator=g)])  # (2, n)
    big[0, int(torch.randint(n, (1,), generator=g))] = 1e4
    masked = torch.randn(2, n + 1, generator=g)                                              # (2, n+1)
    hidden = torch.rand(2, n + 1, generator=g) > 0.5
    hidden[torch.arange(2), torch.randint(n + 1, (2,), generator=g)] = False                 # one finite per row
    return big, masked.masked_fill(hidden, float("-inf"))


def _check_softmax_stability(seed: int):
    big, masked = _stability_probes(seed)
    shown = "[" + ", ".join(f"{v:.1f}" for v in big[0].tolist()) + "]"
    got = yield from _softmax_call(big, -1)
    if got.shape == big.shape and not torch.isfinite(got[0]).all():
        raise CheckError("no-max-subtraction", f"输入第一行是 {shown}（1e4 量级）时输出含 NaN/inf。")
    if got.shape == big.shape and not torch.isfinite(got[1]).all():
        raise CheckError("global-max-subtraction",
                         f"第一行是 {shown}、第二行是几个绝对值不大的数时，第二行变成了 NaN。")
    # float32 cannot do better than ~1e-3 near 1e4 for some correct formulas (e.g. logsumexp)
    expect(got, softmax_outputs(big, -1)["want"], "输入含 1e4 量级的数时的 softmax", atol=1e-3, rtol=1e-3)
    got = yield from _softmax_call(masked, -1)
    if got.shape == masked.shape and not torch.isfinite(got).all():
        raise CheckError("nan-output", "含 -inf（但每行至少一个有限值）的输入得到了 NaN；-inf 的位置应得到 0。")
    expect(got, softmax_outputs(masked, -1)["want"], "含 -inf 的输入的 softmax")


# --- softmax_jacobian -------------------------------------------------------------------------

@oracle
def jacobians(logits) -> dict:
    """The Jacobian of softmax at ``logits`` by autograd ("want"), and each misconception's matrix, in float64."""
    logits = logits.double()
    p = torch.softmax(logits, dim=0)                                                 # (n,)
    outer = torch.outer(p, p)                                                        # (n, n)
    return {"want": torch.autograd.functional.jacobian(lambda z: torch.softmax(z, dim=0), logits),
            "misconceptions": [("jacobian-sign", outer - torch.diag(p)), ("jacobian-diag-only", torch.diag(p)),
                               ("jacobian-inner-product", torch.diag(p) - p @ p),
                               ("jacobian-diag-only", torch.diag(p * (1 - p))), ("jacobian-outer-only", -outer)]}


@check("softmax_jacobian")
def check_softmax_jacobian(extended: bool = False, seed: int = 0):
    judged = Cases()
    for i, n in enumerate(JACOBIAN_SIZES + (hidden_jacobian_sizes() if extended else ())):
        logits = randn(n, seed=seed + i, scale=2.0)
        got = yield from judged.call(Call(CANDIDATE, (torch.softmax(logits, dim=0),), pure=True))   # p: (n,)
        outs = jacobians(logits)
        judged.add(f"p 形状 ({n},) 时的雅可比矩阵", got, outs["want"], outs["misconceptions"],
                   inputs={"p": torch.softmax(logits, dim=0)})
    judged.decide()
