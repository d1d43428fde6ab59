"""Checks of section 08_ffn_norm_residual."""
from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from .core import CheckError, TorchCalls, call, call_pure, check, close, expect, randn, quiz_answers

_BUILTIN_NORMS = ("layer_norm", "rms_norm", "group_norm", "batch_norm", "instance_norm")


def _no_builtin_norm(calls: TorchCalls) -> None:
    for fragment in _BUILTIN_NORMS:
        name = calls.first_named(fragment)
        if name:
            raise CheckError("uses-builtin-norm", f"调用了 PyTorch 的 {name}。")


def _tokens(shape, seed: int, scale: float) -> torch.Tensor:
    """Random tokens whose per-token mean is clearly non-zero; row 0 of the first token is all zeros."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(*shape, generator=g) + 2 * torch.randn(*shape[:-1], 1, generator=g)   # (..., D)
    x = x * scale
    x.view(-1, shape[-1])[0] = 0.0                                                       # an all-zero token
    return x


def _wrong_dims(x: torch.Tensor, stat) -> list:
    """stat(x, dims) over every reduction that is not the last dim alone."""
    dims = [(d,) for d in range(x.dim() - 1) if x.size(d) > 1] + [tuple(range(x.dim()))]
    if x.dim() > 2:
        dims.append((-2, -1))
    return [lambda d=d: stat(x, d) for d in dims]


# --- RMSNorm ---------------------------------------------------------------------------------

def _rms(x, w, eps, dims=(-1,), denom=None, sqrt=True, eps_inside=True, center=False):
    """RMSNorm and its misconceptions (the reduction, D − 1, no sqrt, eps outside, centring)."""
    x = x.double()
    if center:
        x = x - x.mean(dim=dims, keepdim=True)
    n = math.prod(x.size(d) for d in dims)
    ms = x.pow(2).sum(dim=dims, keepdim=True) / (n if denom is None else denom(n))
    if not sqrt:
        return x / (ms + eps) * w
    if eps_inside:
        return x / torch.sqrt(ms + eps) * w
    return x / (torch.sqrt(ms) + eps) * w


# (shape, input scale, eps passed to the constructor or None = the default 1e-6)
RMS_CASES = [((2, 5, 8), 1.0, None), ((3, 7), 1e-3, None), ((2, 3, 4, 6), 2e-2, 1e-3)]
RMS_EXTENDED = [((4, 9, 16), 10.0, None), ((5, 12), 1e-3, 1e-5), ((2, 1, 5), 1e-3, None), ((1, 6, 33), 0.5, 1e-2)]


def _make_rmsnorm(candidate, dim: int, eps):
    module = call(candidate, dim) if eps is None else call(candidate, dim, eps=eps)
    weight = getattr(module, "weight", None)
    if not isinstance(weight, nn.Parameter):
        raise CheckError("norm-weight", "应有一个 nn.Parameter 类型的属性 weight。")
    if weight.shape != (dim,) or not torch.equal(weight.detach(), torch.ones(dim)):
        raise CheckError("norm-weight", f"weight 应为形状 ({dim},)、初始全为 1 的参数，"
                                        f"实际形状 {tuple(weight.shape)}。")
    if not any(p is weight for p in module.parameters()):
        raise CheckError("norm-weight", "weight 没有注册为模块的参数（parameters() 里没有它）。")
    return module


@check("RMSNorm")
def check_RMSNorm(candidate, extended: bool = False, seed: int = 0) -> None:
    for i, (shape, scale, eps) in enumerate(RMS_CASES + (RMS_EXTENDED if extended else [])):
        D = shape[-1]
        module = _make_rmsnorm(candidate, D, eps)
        w = 1 + 0.5 * randn(D, seed=seed + 50 + i)                                        # (D,)
        with torch.no_grad():
            module.weight.copy_(w)
        x = _tokens(shape, seed + i, scale)                                                # (..., D)
        with TorchCalls() as calls:
            got = call_pure(module, x)
        _no_builtin_norm(calls)
        e = 1e-6 if eps is None else eps
        want = F.rms_norm(x.double(), (D,), w.double(), eps=e)                           # PyTorch's own
        wrong = [("rmsnorm-subtracts-mean", lambda: _rms(x, w, e, center=True)),
                 ("rmsnorm-subtracts-mean",
                  lambda: (x - x.mean(-1, keepdim=True)) / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + e) * w),
                 ("rmsnorm-bessel", lambda: _rms(x, w, e, denom=lambda n: n - 1)),
                 ("rmsnorm-subtracts-mean", lambda: x / torch.sqrt(x.var(-1, keepdim=True) + e) * w),
                 ("norm-eps-outside-sqrt", lambda: _rms(x, w, e, eps_inside=False)),
                 ("norm-eps-missing", lambda: _rms(x, w, 0.0)),
                 ("norm-missing-sqrt", lambda: _rms(x, w, e, sqrt=False)),
                 ("norm-weight-ignored", lambda: _rms(x, 1.0, e))]
        wrong += [("norm-wrong-dim", f) for f in _wrong_dims(x, lambda t, d: _rms(t, w, e, dims=d))]
        if eps is None:
            wrong += [("norm-eps-default", lambda v=v: _rms(x, w, v))
                      for v in (1e-5, 1e-8, torch.finfo(torch.float32).eps)]
        else:
            wrong.append(("norm-eps-ignored", lambda: _rms(x, w, 1e-6)))
        what = f"输入形状 {shape}、数值量级 {scale:g}、eps={'默认' if eps is None else eps} 时的输出"
        expect(got, want, what, wrong, atol=1e-5, rtol=1e-4)
        if got.dtype != x.dtype:
            raise CheckError("wrong-type", f"float32 输入应得到 float32 输出，实际是 {got.dtype}。")


# --- layer_norm ------------------------------------------------------------------------------

def _ln(x, w, b, eps, dims=(-1,), unbiased=False, center=True, sqrt=True, eps_inside=True):
    """layer_norm and its misconceptions."""
    x = x.double()
    mean = x.mean(dim=dims, keepdim=True) if center else 0.0
    var = x.var(dim=dims, keepdim=True, unbiased=unbiased) if center else x.pow(2).mean(dim=dims, keepdim=True)
    if not sqrt:
        y = (x - mean) / (var + eps)
    elif eps_inside:
        y = (x - mean) / torch.sqrt(var + eps)
    else:
        y = (x - mean) / (torch.sqrt(var) + eps)
    return y * w + b


LN_CASES = [((2, 5, 8), 1.0, None), ((3, 7), 1e-3, None), ((2, 3, 4, 6), 2e-2, 1e-3)]
LN_EXTENDED = [((4, 9, 16), 10.0, None), ((5, 12), 3e-3, 1e-6), ((2, 1, 5), 1e-3, None), ((1, 6, 33), 0.5, 1e-2)]


@check("layer_norm")
def check_layer_norm(candidate, extended: bool = False, seed: int = 0) -> None:
    for i, (shape, scale, eps) in enumerate(LN_CASES + (LN_EXTENDED if extended else [])):
        D = shape[-1]
        x = _tokens(shape, seed + i, scale)                                                # (..., D)
        w = 1 + 0.5 * randn(D, seed=seed + 50 + i)                                        # (D,)
        b = 0.3 * randn(D, seed=seed + 80 + i)                                            # (D,)
        with TorchCalls() as calls:
            got = call_pure(candidate, x, w, b) if eps is None else call_pure(candidate, x, w, b, eps=eps)
        _no_builtin_norm(calls)
        e = 1e-5 if eps is None else eps
        want = F.layer_norm(x.double(), (D,), w.double(), b.double(), eps=e)             # PyTorch's own
        wrong = [("layernorm-unbiased-var", lambda: _ln(x, w, b, e, unbiased=True)),
                 ("layernorm-no-mean", lambda: _ln(x, w, b, e, center=False)),
                 ("layernorm-no-mean", lambda: x / torch.sqrt(x.var(-1, keepdim=True, unbiased=False) + e) * w + b),
                 ("norm-eps-outside-sqrt", lambda: _ln(x, w, b, e, eps_inside=False)),
                 ("norm-eps-missing", lambda: _ln(x, w, b, 0.0)),
                 ("norm-missing-sqrt", lambda: _ln(x, w, b, e, sqrt=False)),
                 ("norm-weight-ignored", lambda: _ln(x, 1.0, 0.0, e)),
                 ("norm-weight-ignored", lambda: _ln(x, w, 0.0, e)),
                 ("norm-weight-ignored", lambda: _ln(x, 1.0, b, e))]
        wrong += [("norm-wrong-dim", f) for f in _wrong_dims(x, lambda t, d: _ln(t, w, b, e, dims=d))]
        if eps is None:
            wrong += [("norm-eps-default", lambda v=v: _ln(x, w, b, v)) for v in (1e-6, 1e-8, 1e-12)]
        else:
            wrong.append(("norm-eps-ignored", lambda: _ln(x, w, b, 1e-5)))
        what = f"输入形状 {shape}、数值量级 {scale:g}、eps={'默认' if eps is None else eps} 时的输出"
        expect(got, want, what, wrong, atol=1e-5, rtol=1e-4)


# --- FeedForward / SwiGLU ----------------------------------------------------------------------

def _check_linear(layer, name: str, n_in: int, n_out: int, bias: bool, code: str = "ffn-layout") -> None:
    if not isinstance(layer, nn.Linear):
        raise CheckError(code, f"应有属性 {name} = nn.Linear(...)，实际是 {type(layer).__name__}。")
    if (layer.in_features, layer.out_features, layer.bias is not None) != (n_in, n_out, bias):
        want = f"nn.Linear({n_in}, {n_out}{'' if bias else ', bias=False'})"
        raise CheckError(code, f"{name} 应为 {want}，实际是 {layer}。")


def _build(candidate, seed: int, *args, **kwargs) -> nn.Module:
    torch.manual_seed(seed)
    module = call(candidate, *args, **kwargs)
    if not isinstance(module, nn.Module):
        raise CheckError("wrong-type", f"应创建一个 nn.Module，实际是 {type(module).__name__}。")
    return module


# (B, T, n_embed, hidden or None = the default 4·n_embed)
FFN_CASES = [(2, 5, 8, None), (1, 3, 6, 10)]
FFN_EXTENDED = [(3, 7, 12, None), (2, 1, 5, 7), (1, 4, 16, 24)]


@check("FeedForward")
def check_FeedForward(candidate, extended: bool = False, seed: int = 0) -> None:
    for i, (B, T, C, hidden) in enumerate(FFN_CASES + (FFN_EXTENDED if extended else [])):
        ffn = _build(candidate, seed + i, C) if hidden is None else _build(candidate, seed + i, C, hidden)
        H = 4 * C if hidden is None else hidden
        fc1 = getattr(ffn, "fc1", None)
        if hidden is None and isinstance(fc1, nn.Linear) and fc1.out_features != H:
            raise CheckError("ffn-hidden-default", f"hidden=None 时 fc1 应输出 4·n_embed = {H}，"
                                                   f"实际是 {fc1.out_features}。")
        _check_linear(fc1, "fc1", C, H, bias=True)
        _check_linear(getattr(ffn, "fc2", None), "fc2", H, C, bias=True)
        x = 2 * randn(B, T, C, seed=seed + 10 + i)                                         # (B, T, C)
        got = call_pure(ffn, x)
        with torch.no_grad():
            h = ffn.fc1(x)                                                                 # (B, T, H)
            if close(got, ffn.fc2(F.gelu(h, approximate="tanh"))):
                continue  # GPT-2's tanh approximation of GELU is fine too
            expect(got, ffn.fc2(F.gelu(h)), f"B={B}, T={T}, n_embed={C}, hidden={H} 时的输出", [
                ("ffn-no-activation", lambda: ffn.fc2(h)),
                ("ffn-wrong-activation", lambda: ffn.fc2(F.relu(h))),
                ("ffn-wrong-activation", lambda: ffn.fc2(F.silu(h))),
                ("ffn-wrong-activation", lambda: ffn.fc2(torch.sigmoid(h))),
                ("ffn-wrong-activation", lambda: ffn.fc2(torch.tanh(h)))])


SWIGLU_CASES = [(2, 5, 8, 12), (1, 3, 6, 16)]
SWIGLU_EXTENDED = [(3, 4, 10, 7), (2, 1, 4, 20), (1, 6, 16, 40)]


def _check_swiglu_layout(ffn, dim: int, hidden: int, code: str = "ffn-layout") -> None:
    _check_linear(getattr(ffn, "w_gate", None), "w_gate", dim, hidden, bias=False, code=code)
    _check_linear(getattr(ffn, "w_up", None), "w_up", dim, hidden, bias=False, code=code)
    _check_linear(getattr(ffn, "w_down", None), "w_down", hidden, dim, bias=False, code=code)


@check("SwiGLU")
def check_SwiGLU(candidate, extended: bool = False, seed: int = 0) -> None:
    for i, (B, T, D, H) in enumerate(SWIGLU_CASES + (SWIGLU_EXTENDED if extended else [])):
        ffn = _build(candidate, seed + i, D, H)
        _check_swiglu_layout(ffn, D, H)
        x = 2 * randn(B, T, D, seed=seed + 10 + i)                                         # (B, T, D)
        got = call_pure(ffn, x)
        with torch.no_grad():
            g, u, down = ffn.w_gate(x), ffn.w_up(x), ffn.w_down                           # (B, T, H) each
            expect(got, down(F.silu(g) * u), f"B={B}, T={T}, dim={D}, hidden={H} 时的输出", [
                ("swiglu-silu-on-up", lambda: down(F.silu(g) * F.silu(u))),
                ("swiglu-gate-up-swapped", lambda: down(g * F.silu(u))),
                ("swiglu-gelu", lambda: down(F.gelu(g) * u)),
                ("swiglu-gelu", lambda: down(F.gelu(g, approximate="tanh") * u)),
                ("swiglu-sigmoid", lambda: down(torch.sigmoid(g) * u)),
                ("swiglu-no-gate", lambda: down(F.silu(g))),
                ("swiglu-no-gate", lambda: down(F.silu(u))),
                ("swiglu-no-gate", lambda: down(F.silu(g) + u))])


# --- Block -------------------------------------------------------------------------------------

# (B, T, n_embed, n_head, context_length, ffn_hidden or None = the default 4·n_embed)
BLOCK_CASES = [(2, 5, 16, 4, 8, None), (1, 7, 12, 3, 7, 20)]
BLOCK_EXTENDED = [(3, 6, 24, 6, 10, None), (2, 1, 8, 2, 4, 12), (1, 9, 20, 5, 12, 36)]


def _check_block_layout(block, C: int, hidden: int, default_hidden: bool) -> None:
    for name in ("norm1", "norm2", "attn", "ffn"):
        if not isinstance(getattr(block, name, None), nn.Module):
            raise CheckError("block-layout", f"应有子模块 {name}（nn.Module），"
                                             f"实际是 {type(getattr(block, name, None)).__name__}。")
    for name in ("norm1", "norm2"):
        norm = getattr(block, name)
        weight = getattr(norm, "weight", None)
        if isinstance(norm, nn.LayerNorm) or not isinstance(weight, torch.Tensor) or weight.shape != (C,):
            raise CheckError("block-layout", f"{name} 应为 RMSNorm(n_embed)（有形状 ({C},) 的 weight），"
                                             f"实际是 {type(norm).__name__}。")
    if block.norm1 is block.norm2:
        raise CheckError("block-norms-mixed", "norm1 和 norm2 是同一个模块：两个子层前各要一个自己的 RMSNorm。")
    _check_linear(getattr(block.attn, "qkv", None), "attn.qkv", C, 3 * C, bias=False, code="block-layout")
    _check_linear(getattr(block.attn, "proj", None), "attn.proj", C, C, bias=True, code="block-layout")
    gate = getattr(block.ffn, "w_gate", None)
    if default_hidden and isinstance(gate, nn.Linear) and gate.out_features != hidden:
        raise CheckError("ffn-hidden-default", f"ffn_hidden=None 时 SwiGLU 的隐藏宽度应为 4·n_embed = {hidden}，"
                                               f"实际是 {gate.out_features}。")
    _check_swiglu_layout(block.ffn, C, hidden, code="block-layout")


@check("Block")
def check_Block(candidate, extended: bool = False, seed: int = 0) -> None:
    for i, (B, T, C, H, L, hidden) in enumerate(BLOCK_CASES + (BLOCK_EXTENDED if extended else [])):
        kwargs = {} if hidden is None else {"ffn_hidden": hidden}
        block = _build(candidate, seed + i, C, H, L, **kwargs)
        _check_block_layout(block, C, 4 * C if hidden is None else hidden, hidden is None)
        with torch.no_grad():  # distinct, non-trivial norm weights: a mixed-up norm shows
            block.norm1.weight.copy_(1 + 0.5 * randn(C, seed=seed + 60 + i))
            block.norm2.weight.copy_(1 + 0.5 * randn(C, seed=seed + 70 + i))
        x = 3 * randn(B, T, C, seed=seed + 10 + i) + 1                                      # (B, T, C), not normalised
        got = call_pure(block, x)
        n1, n2, attn, ffn = block.norm1, block.norm2, block.attn, block.ffn

        def pre(a=attn, f=ffn, na=n1, nf=n2):
            h = x + a(na(x))                                                               # (B, T, C)
            return h + f(nf(h))                                                            # (B, T, C)

        def from_normed():
            h = n1(x)
            h = h + attn(h)
            h2 = n2(h)
            return h2 + ffn(h2)

        def post():
            h = n1(x + attn(x))
            return n2(h + ffn(h))

        def no_residual(first=False, second=False):
            h = attn(n1(x)) + (x if first else 0)
            return ffn(n2(h)) + (h if second else 0)

        with torch.no_grad():
            expect(got, pre(), f"B={B}, T={T}, n_embed={C}, n_head={H} 时的输出", [
                ("block-post-norm", post),
                ("block-post-norm", lambda: n2(n1(x + attn(x)) + ffn(n1(x + attn(x))))),
                ("block-no-residual", no_residual),
                ("block-no-residual", lambda: no_residual(first=True)),
                ("block-no-residual", lambda: no_residual(second=True)),
                ("block-residual-from-normed", from_normed),
                ("block-parallel", lambda: x + attn(n1(x)) + ffn(n2(x))),
                ("block-parallel", lambda: x + attn(n1(x)) + ffn(n1(x))),
                ("block-ffn-first", lambda: (lambda h: h + attn(n2(h)))(x + ffn(n1(x)))),
                ("block-ffn-first", lambda: (lambda h: h + attn(n1(h)))(x + ffn(n2(x)))),
                ("block-norms-mixed", lambda: pre(na=n2, nf=n1)),
                ("block-norms-mixed", lambda: pre(nf=n1)),
                ("block-norms-mixed", lambda: pre(na=n2))])


# --- quiz_ffn_share ----------------------------------------------------------------------------

# The self-test's two configs (published configurations, see the notebook):
# a Llama-2-7B layer (D = 4096, SwiGLU hidden 11008, 32 heads, MHA, no biases) and
# a Mixtral-8x7B layer (D = 4096, 8 SwiGLU experts of hidden 14336, top-2 routing).
QUIZ = {"D": 4096, "hidden": 11008, "moe_hidden": 14336, "n_expert": 8, "top_k": 2}
QUIZ_KEYS = ("attn_params", "ffn_params", "ffn_share", "moe_total_ffn", "moe_active_ffn")


def quiz_truth(D: int, hidden: int, moe_hidden: int, n_expert: int, top_k: int) -> dict[str, float]:
    """The quiz's answers, computed (norm weights and the router are left out, as the quiz says)."""
    attn = 4 * D * D                                     # W_Q, W_K, W_V, W_O
    ffn = 3 * D * hidden                                 # W_g, W_u, W_d
    expert = 3 * D * moe_hidden
    return {"attn_params": attn, "ffn_params": ffn, "ffn_share": ffn / (attn + ffn),
            "moe_total_ffn": n_expert * expert, "moe_active_ffn": top_k * expert}


def _number(answers: dict, key: str) -> float:
    value = answers[key]
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise CheckError("wrong-type", f"{key} 的答案应是一个数，实际是 {value!r}。")
    return float(value)


@check("quiz_ffn_share")
def check_quiz_ffn_share(candidate, extended: bool = False, seed: int = 0) -> None:
    """One set of answers, nothing random: ``seed`` changes nothing; ``extended`` also requires
    the counts to be exact integers."""
    del seed
    answers = quiz_answers(candidate, "quiz_ffn_share", QUIZ_KEYS)
    truth = quiz_truth(**QUIZ)
    D, hidden, moe_hidden, n_expert, top_k = (QUIZ[k] for k in ("D", "hidden", "moe_hidden", "n_expert", "top_k"))
    got = {key: _number(answers, key) for key in QUIZ_KEYS}
    counts = {"attn_params": [("quiz-attn-no-out-proj", 3 * D * D)],
              "ffn_params": [("quiz-swiglu-two-matrices", 2 * D * hidden), ("quiz-ffn-classic-width", 8 * D * D)],
              "moe_total_ffn": [("quiz-swiglu-two-matrices", 2 * D * moe_hidden * n_expert)],
              "moe_active_ffn": [("quiz-moe-active-all", n_expert * 3 * D * moe_hidden),
                                 ("quiz-moe-top1", 3 * D * moe_hidden),
                                 ("quiz-swiglu-two-matrices", top_k * 2 * D * moe_hidden)]}
    for key, wrongs in counts.items():
        if got[key] == truth[key]:
            if extended and not isinstance(answers[key], int):
                raise CheckError("wrong-type", f"{key} 是参数个数，应写成整数（int），实际是 {answers[key]!r}。")
            continue
        for code, value in wrongs:
            if got[key] == value:
                raise CheckError(code, f"{key} 不是 {answers[key]!r}。")
        raise CheckError("wrong", f"{key} 不是 {answers[key]!r}：回到上面的参数公式再数一遍。")
    share, want = got["ffn_share"], truth["ffn_share"]
    if abs(share - want) <= 1e-3:
        return
    if abs(share - 100 * want) <= 0.1:
        raise CheckError("quiz-share-percent", f"ffn_share 写成了 {share!r}。")
    attn, ffn = truth["attn_params"], truth["ffn_params"]
    if any(abs(share - v) <= 1e-3 for v in (ffn / attn, attn / (attn + ffn), attn / ffn)):
        raise CheckError("quiz-ffn-share-ratio", f"ffn_share 不是 {share!r}。")
    raise CheckError("wrong", f"ffn_share 不是 {share!r}：占比 = FFN 参数 / (注意力参数 + FFN 参数)。")
