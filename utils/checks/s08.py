"""Checks of section 08_ffn_norm_residual.

What a check compares with comes from the oracles below and math64.rms_norm (utils/checks/oracle.py):
float64 re-computations of check-made inputs and of fixed weights loaded into the learner's modules.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from . import math64
from .common import fixed_weights, load, make_module, part, quiz_number, require_linear, require_swiglu_layout
from .compare import Cases, close, expect, quiz_answers, randn
from .core import OBSERVED, CheckError, check
from .keys import recipe
from .oracle import answer_key, instructor_only, matches, oracle
from .protocol import CANDIDATE, Attr, Call, Get, Handle, Watch

_BUILTIN_NORMS = ("layer_norm", "rms_norm", "group_norm", "batch_norm", "instance_norm")


def _normalised(target, args: tuple, kwargs: dict | None = None):
    """(yields) ``target(*args, **kwargs)``, which must not change its inputs nor call a built-in norm.

    Which torch functions ran is observed by the kernel that runs the learner's code: a property, not an
    output (the finding says so)."""
    seen = yield Call(target, args, kwargs or {}, pure=True, watch=Watch(torch_calls=True))
    for fragment in _BUILTIN_NORMS:
        name = next((called for called in seen.torch_calls if fragment in called), None)
        if name:
            raise CheckError("uses-builtin-norm", f"调用了 PyTorch 的 {name}{OBSERVED}。")
    return seen.value


@recipe
def _tokens(shape, seed: int, scale: float, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Random tokens in ``dtype`` whose per-token mean is clearly non-zero; row 0 of the first token is all zeros."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(*shape, generator=g) + 2 * torch.randn(*shape[:-1], 1, generator=g)   # (..., D)
    x = x * scale
    x.view(-1, shape[-1])[0] = 0.0                                                       # an all-zero token
    return x.to(dtype)


@oracle
def _wrong_dims(shape) -> list:
    """Every reduction of a tensor of ``shape`` that is not the last dim alone (over a dim of size 1 too: each
    value is then normalised on its own)."""
    dims = [(d,) for d in range(len(shape) - 1)] + [tuple(range(len(shape)))]
    if len(shape) > 2:
        dims.append((-2, -1))
    return dims


# --- RMSNorm ---------------------------------------------------------------------------------

# (shape, input scale, eps passed to the constructor or None = the default 1e-6). Small inputs make eps matter:
# two cases with the default and two with a given eps tell each eps slip on two cases (compare.confirmed).
NORM_CASES = [((2, 5, 8), 1.0, None), ((3, 7), 1e-3, None), ((2, 3, 4, 6), 2e-2, 1e-3), ((1, 4, 6), 1e-3, None),
              ((5, 6), 2e-2, 1e-4)]
# A module cast to a low-precision dtype: (shape, input scale, eps or None, dtype). At scale 300 most
# tokens have an entry above 256, whose square overflows float16 (largest finite value 65504).
LOW_CASES = [((2, 4, 16), 300.0, None, torch.float16)]
LOW_TOL = {torch.float16: 4e-3, torch.bfloat16: 3e-2}           # a few units in the last place of each dtype


@instructor_only
def hidden_rms_cases():
    return [((4, 9, 16), 10.0, None), ((5, 12), 1e-3, 1e-5), ((2, 1, 5), 1e-3, None), ((1, 6, 33), 0.5, 1e-2)]


@instructor_only
def hidden_low_cases():
    return [((3, 5, 32), 2000.0, 1e-5, torch.float16), ((2, 3, 24), 50.0, None, torch.bfloat16)]


@oracle
def rms_outputs(x, w, eps, eps_given: bool) -> dict:
    """RMSNorm of x ("want": PyTorch's own, in float64) and what each misconception gives."""
    rms, xd, wd = math64.rms_norm, x.double(), w.double()
    wrong = [("rmsnorm-subtracts-mean", rms(x, w, eps, center=True)),
             ("rmsnorm-subtracts-mean",
              (xd - xd.mean(-1, keepdim=True)) / torch.sqrt(xd.pow(2).mean(-1, keepdim=True) + eps) * wd),
             ("rmsnorm-bessel", rms(x, w, eps, denom="D-1")),
             ("rmsnorm-sum-not-mean", rms(x, w, eps, denom="1")),
             ("rmsnorm-sum-not-mean", rms(x, w, eps, denom="1", eps_inside=False)),   # x / (‖x‖ + eps)
             ("rmsnorm-subtracts-mean", xd / torch.sqrt(xd.var(-1, keepdim=True) + eps) * wd),
             ("norm-eps-outside-sqrt", rms(x, w, eps, eps_inside=False)),
             ("norm-eps-missing", rms(x, w, 0.0)),
             ("norm-missing-sqrt", rms(x, w, eps, sqrt=False)),
             ("norm-weight-ignored", rms(x, 1.0, eps))]
    wrong += [("norm-wrong-dim", rms(x, w, eps, dims=d)) for d in _wrong_dims(tuple(x.shape))]
    if eps_given:
        wrong.append(("norm-eps-ignored", rms(x, w, 1e-6)))
    else:
        wrong += [("norm-eps-default", rms(x, w, v)) for v in (1e-5, 1e-8, torch.finfo(torch.float32).eps)]
    return {"want": F.rms_norm(xd, (x.size(-1),), wd, eps=eps), "wrong": wrong}                # (..., D)


@oracle
def rms_low_precision_output(x, w, eps) -> torch.Tensor:
    """What LlamaRMSNorm gives for a low-precision x and weight w (cast to x's dtype, as module.to(dtype)
    does): normalised in float64 (exact enough), rounded to x's dtype, times w, rounded again (one
    correctly rounded low-precision product)."""
    normed = math64.rms_norm(x, 1.0, eps).to(x.dtype)                                      # (..., D)
    return (normed.double() * w.to(x.dtype).double()).to(x.dtype)                         # (..., D)


def _require_weight(layout: dict, weight, dim: int) -> None:
    """The RMSNorm's ``weight`` (its value, as data) is an nn.Parameter of ones, shape (dim,), that the
    module registers (its layout's parameters list it)."""
    registered = layout["params"].get("weight")
    if registered is None or not registered["parameter"]:
        kind = layout["attrs"].get("weight", "NoneType")
        unregistered = "：普通张量不会注册为模块的参数（parameters() 里没有它）" if kind == "Tensor" else ""
        raise CheckError("norm-weight", f"应有一个 nn.Parameter 类型的属性 weight，实际是 {kind}{unregistered}。")
    if tuple(registered["shape"]) != (dim,) or not torch.equal(weight, torch.ones(dim)):
        raise CheckError("norm-weight", f"weight 应为形状 ({dim},)、初始全为 1 的参数，"
                                        f"实际形状 {tuple(registered['shape'])}。")


def _loaded_rmsnorm(dim: int, eps, seed: int):
    """(yields) RMSNorm(dim[, eps=eps]) with its weight checked, then loaded with check-made gains:
    the module's handle and those gains, (dim,)."""
    module, layout = yield from make_module(CANDIDATE, "RMSNorm(...)", dim, **({} if eps is None else {"eps": eps}))
    _require_weight(layout, (yield Get(Attr(module, "weight"))), dim)
    weights = fixed_weights({"weight": (dim,)}, seed)                                      # (D,) gains
    yield from load(module, weights, code="norm-weight")
    return module, weights["weight"]


def _name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _require_dtype(got, x: torch.Tensor, what: str) -> None:
    if isinstance(got, torch.Tensor) and got.dtype != x.dtype:
        want, wrong = _name(x.dtype), _name(got.dtype)
        raise CheckError("rmsnorm-dtype", f"{what}：{want} 的输入应得到 {want} 的输出，实际是 {wrong}。")


def _overflowed_tokens(got, want: torch.Tensor) -> int:
    """How many tokens come out all zero or non-finite where the right output is neither."""
    if not isinstance(got, torch.Tensor) or got.shape != want.shape:
        return 0
    g, w = got.detach().double(), want.double()
    lost = ~torch.isfinite(g).all(-1) | (g == 0).all(-1)                                  # (...,) per token
    return int((lost & torch.isfinite(w).all(-1) & (w != 0).any(-1)).sum())


def _check_low_precision(shape, scale, eps, dtype, seed: int):
    """(yields) The module cast to ``dtype`` as model.half() does, fed large activations of that dtype."""
    module, weight = yield from _loaded_rmsnorm(shape[-1], eps, seed + 50)
    cast = yield Call(Attr(module, "to"), (dtype,))                                        # nn.Module.to: itself
    x = _tokens(shape, seed, scale, dtype)                                                 # (..., D)
    got = yield from _normalised(cast if isinstance(cast, Handle) else module, (x,))
    want = rms_low_precision_output(x, weight, 1e-6 if eps is None else eps)              # (..., D)
    what = f"模块转成 {_name(dtype)}、输入形状 {shape}、数值量级 {scale:g} 时的输出"
    lost = _overflowed_tokens(got, want)
    if lost:
        top = torch.finfo(dtype).max
        raise CheckError("rmsnorm-low-precision",
                         f"{what}里有 {lost} 个 token 全是 0 或 NaN/inf：{_name(dtype)} 最大只能表示 {top:g}，"
                         f"大于 {math.sqrt(top):.0f} 的分量平方后就溢出了。")
    _expect_rms(got, want, {"x": x, "weight": weight}, what, LOW_TOL[dtype], LOW_TOL[dtype])


def _expect_rms(got, want: torch.Tensor, given: dict, what: str, atol: float, rtol: float) -> None:
    """``expect`` on one output, then its dtype (a value off only because it was rounded to another dtype is
    that), then the plain [wrong]. ``given``: the input x and the loaded weight."""
    try:
        expect(got, want, what, atol=atol, rtol=rtol, inputs=given)
    except CheckError as err:
        if err.code == "wrong":
            _require_dtype(got, given["x"], what)
        raise
    _require_dtype(got, given["x"], what)


def _decide_rms(cases: Cases) -> None:
    """``cases.decide``; a plain [wrong] where an output came back in another dtype than its input is that."""
    try:
        cases.decide()
    except CheckError as err:
        if err.code == "wrong":
            for case in cases.seen:
                _require_dtype(case.got, case.inputs["x"], case.what)
        raise


@check("RMSNorm")
def check_RMSNorm(extended: bool = False, seed: int = 0):
    cases = Cases()
    for i, (shape, scale, eps) in enumerate(NORM_CASES + (hidden_rms_cases() if extended else [])):
        module, weight = yield from cases.run(_loaded_rmsnorm(shape[-1], eps, seed + 50 + i))
        x = _tokens(shape, seed + i, scale)                                                # (..., D)
        got = yield from cases.run(_normalised(module, (x,)))
        outs = rms_outputs(x, weight, 1e-6 if eps is None else eps, eps is not None)
        what = f"输入形状 {shape}、数值量级 {scale:g}、eps={'默认' if eps is None else eps} 时"
        if cases.add(what, got, outs["want"], outs["wrong"], inputs={"x": x, "weight": weight}).right():
            _require_dtype(got, x, what)
    _decide_rms(cases)
    for i, case in enumerate(LOW_CASES + (hidden_low_cases() if extended else [])):
        yield from _check_low_precision(*case, seed=seed + 100 + i)


# --- layer_norm ------------------------------------------------------------------------------

@oracle
def _ln(x, w, b, eps, dims=(-1,), unbiased=False, center=True, sqrt=True, eps_inside=True):
    """layer_norm and its misconceptions, in float64."""
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


@instructor_only
def hidden_ln_cases():
    return [((4, 9, 16), 10.0, None), ((5, 12), 3e-3, 1e-6), ((2, 1, 5), 1e-3, None), ((1, 6, 33), 0.5, 1e-2)]


@oracle
def ln_outputs(x, w, b, eps, eps_given: bool) -> dict:
    """layer_norm of x ("want": PyTorch's own, in float64) and what each misconception gives."""
    xd = x.double()
    wrong = [("layernorm-unbiased-var", _ln(x, w, b, eps, unbiased=True)),
             ("layernorm-no-mean", _ln(x, w, b, eps, center=False)),
             ("layernorm-no-mean", xd / torch.sqrt(xd.var(-1, keepdim=True, unbiased=False) + eps) * w + b),
             ("layernorm-var-uncentered",
              (xd - xd.mean(-1, keepdim=True)) / torch.sqrt(xd.pow(2).mean(-1, keepdim=True) + eps) * w + b),
             ("norm-eps-outside-sqrt", _ln(x, w, b, eps, eps_inside=False)),
             ("norm-eps-missing", _ln(x, w, b, 0.0)),
             ("norm-missing-sqrt", _ln(x, w, b, eps, sqrt=False)),
             ("norm-weight-ignored", _ln(x, 1.0, 0.0, eps)),
             ("norm-bias-ignored", _ln(x, w, 0.0, eps)),
             ("norm-weight-ignored", _ln(x, 1.0, b, eps))]
    wrong += [("norm-wrong-dim", _ln(x, w, b, eps, dims=d)) for d in _wrong_dims(tuple(x.shape))]
    if eps_given:
        wrong.append(("norm-eps-ignored", _ln(x, w, b, 1e-5)))
    else:
        wrong += [("norm-eps-default", _ln(x, w, b, v)) for v in (1e-6, 1e-8, 1e-12)]
    return {"want": F.layer_norm(xd, (x.size(-1),), w.double(), b.double(), eps=eps), "wrong": wrong}   # (..., D)


@check("layer_norm")
def check_layer_norm(extended: bool = False, seed: int = 0):
    cases = Cases()
    for i, (shape, scale, eps) in enumerate(NORM_CASES + (hidden_ln_cases() if extended else [])):
        D = shape[-1]
        x = _tokens(shape, seed + i, scale)                                                # (..., D)
        w = randn(D, seed=seed + 50 + i, scale=0.5, shift=1.0)                            # (D,)
        b = randn(D, seed=seed + 80 + i, scale=0.3)                                       # (D,)
        got = yield from cases.run(_normalised(CANDIDATE, (x, w, b), {} if eps is None else {"eps": eps}))
        outs = ln_outputs(x, w, b, 1e-5 if eps is None else eps, eps is not None)
        what = f"输入形状 {shape}、数值量级 {scale:g}、eps={'默认' if eps is None else eps} 时"
        cases.add(what, got, outs["want"], outs["wrong"], inputs={"x": x, "weight": w, "bias": b})
    cases.decide()


# --- FeedForward / SwiGLU ----------------------------------------------------------------------

@oracle
def _linear(x, w, b=None):
    """x Wᵀ (+ b) in float64: nn.Linear's layout."""
    y = x.double() @ w.double().T
    return y if b is None else y + b.double()


# (B, T, n_embed, hidden or None = the default 4·n_embed)
FFN_CASES = [(2, 5, 8, None), (1, 3, 6, 10)]


@instructor_only
def hidden_ffn_cases():
    return [(3, 7, 12, None), (2, 1, 5, 7), (1, 4, 16, 24)]


@oracle
def ffn_outputs(x, w) -> dict:
    """fc2(GELU(fc1(x))) ("want"; "tanh": with GPT-2's tanh GELU, also right) and each misconception's."""
    h = _linear(x, w["fc1.weight"], w["fc1.bias"])                                         # (B, T, H)

    def fc2(t):
        return _linear(t, w["fc2.weight"], w["fc2.bias"])                                  # (B, T, C)
    return {"want": fc2(F.gelu(h)), "tanh": fc2(F.gelu(h, approximate="tanh")), "wrong": [
        ("ffn-no-activation", fc2(h)), ("ffn-wrong-activation", fc2(F.relu(h))),
        ("ffn-wrong-activation", fc2(F.silu(h))), ("ffn-wrong-activation", fc2(torch.sigmoid(h))),
        ("ffn-wrong-activation", fc2(torch.tanh(h))),
        ("ffn-activation-after-fc2", F.gelu(fc2(h))), ("ffn-activation-after-fc2", F.gelu(fc2(h), approximate="tanh"))]}


@check("FeedForward")
def check_FeedForward(extended: bool = False, seed: int = 0):
    cases = Cases()
    for i, (B, T, C, hidden) in enumerate(FFN_CASES + (hidden_ffn_cases() if extended else [])):
        ffn, layout = yield from cases.run(make_module(CANDIDATE, "FeedForward(...)",
                                                       *((C,) if hidden is None else (C, hidden)), seed=seed + i))
        H = 4 * C if hidden is None else hidden
        fc1 = part(layout, "fc1")
        if hidden is None and "linear" in fc1["kinds"] and fc1["fields"]["out_features"] != H:
            raise CheckError("ffn-hidden-default", f"hidden=None 时 fc1 应输出 4·n_embed = {H}，"
                                                   f"实际是 {fc1['fields']['out_features']}。")
        require_linear(fc1, "fc1", C, H, bias=True, code="ffn-layout")
        require_linear(part(layout, "fc2"), "fc2", H, C, bias=True, code="ffn-layout")
        weights = fixed_weights({"fc1.weight": (H, C), "fc1.bias": (H,), "fc2.weight": (C, H), "fc2.bias": (C,)},
                                seed + i)
        yield from cases.run(load(ffn, weights, code="ffn-layout"))
        x = randn(B, T, C, seed=seed + 10 + i, scale=2.0)                                  # (B, T, C)
        got = yield from cases.call(Call(ffn, (x,), pure=True))
        outs = ffn_outputs(x, weights)
        want = outs["tanh"] if close(got, outs["tanh"]) else outs["want"]   # GPT-2's tanh GELU is fine too
        cases.add(f"B={B}, T={T}, n_embed={C}, hidden={H} 时", got, want, outs["wrong"], inputs={"x": x})
    cases.decide()


SWIGLU_CASES = [(2, 5, 8, 12), (1, 3, 6, 16)]


@instructor_only
def hidden_swiglu_cases():
    return [(3, 4, 10, 7), (2, 1, 4, 20), (1, 6, 16, 40)]


def swiglu_weights(dim: int, hidden: int, seed: int, prefix: str = "") -> dict[str, torch.Tensor]:
    """Check-made weights of a SwiGLU, by the contract's names (nn.Linear layout [out, in])."""
    return fixed_weights({f"{prefix}w_gate.weight": (hidden, dim), f"{prefix}w_up.weight": (hidden, dim),
                          f"{prefix}w_down.weight": (dim, hidden)}, seed)


@oracle
def swiglu_outputs(x, w) -> dict:
    """w_down(SiLU(w_gate x) ⊙ w_up x) ("want") and what each misconception gives, in float64."""
    g, u = _linear(x, w["w_gate.weight"]), _linear(x, w["w_up.weight"])                   # (B, T, H) each

    def down(t):
        return _linear(t, w["w_down.weight"])                                              # (B, T, D)
    return {"want": down(F.silu(g) * u), "wrong": [
        ("swiglu-silu-on-up", down(F.silu(g) * F.silu(u))),
        ("swiglu-silu-on-product", down(F.silu(g * u))),
        ("swiglu-gate-up-swapped", down(g * F.silu(u))),
        ("swiglu-gelu", down(F.gelu(g) * u)),
        ("swiglu-gelu", down(F.gelu(g, approximate="tanh") * u)),
        ("swiglu-sigmoid", down(torch.sigmoid(g) * u)),
        ("swiglu-no-gate", down(F.silu(g))),
        ("swiglu-no-gate", down(F.silu(u))),
        ("swiglu-no-gate", down(F.silu(g) + u)),
        ("swiglu-down-per-branch", down(F.silu(g)) * down(u))]}


@check("SwiGLU")
def check_SwiGLU(extended: bool = False, seed: int = 0):
    cases = Cases()
    for i, (B, T, D, H) in enumerate(SWIGLU_CASES + (hidden_swiglu_cases() if extended else [])):
        ffn, layout = yield from cases.run(make_module(CANDIDATE, "SwiGLU(...)", D, H, seed=seed + i))
        require_swiglu_layout(layout, "", D, H)
        weights = swiglu_weights(D, H, seed + i)
        yield from cases.run(load(ffn, weights, code="ffn-layout"))
        x = randn(B, T, D, seed=seed + 10 + i, scale=2.0)                                  # (B, T, D)
        got = yield from cases.call(Call(ffn, (x,), pure=True))
        outs = swiglu_outputs(x, weights)
        cases.add(f"B={B}, T={T}, dim={D}, hidden={H} 时", got, outs["want"], outs["wrong"], inputs={"x": x})
    cases.decide()


# --- Block -------------------------------------------------------------------------------------

# (B, T, n_embed, n_head, context_length, ffn_hidden or None = the default 4·n_embed)
BLOCK_CASES = [(2, 5, 16, 4, 8, None), (1, 7, 12, 3, 7, 20)]
BLOCK_EPS = 1e-6                                                     # RMSNorm's default eps


@instructor_only
def hidden_block_cases():
    return [(3, 6, 24, 6, 10, None), (2, 1, 8, 2, 4, 12), (1, 9, 20, 5, 12, 36)]


def _check_block_layout(layout: dict, C: int, hidden: int, default_hidden: bool) -> None:
    for name in ("norm1", "norm2", "attn", "ffn"):
        if "module" not in part(layout, name)["kinds"]:
            raise CheckError("block-layout", f"应有子模块 {name}（nn.Module），实际是 {part(layout, name)['type']}。")
    for name in ("norm1", "norm2"):
        weight = layout["params"].get(f"{name}.weight")
        kind = part(layout, name)["type"]
        if kind == "LayerNorm" or weight is None or tuple(weight["shape"]) != (C,):
            raise CheckError("block-layout", f"{name} 应为 RMSNorm(n_embed)（有形状 ({C},) 的 weight），"
                                             f"实际是 {kind}。")
    if layout["params"]["norm1.weight"]["id"] == layout["params"]["norm2.weight"]["id"]:
        raise CheckError("block-norms-mixed", "norm1 和 norm2 是同一个模块：两个子层前各要一个自己的 RMSNorm。")
    require_linear(part(layout, "attn.qkv"), "attn.qkv", C, 3 * C, bias=False, code="block-layout")
    require_linear(part(layout, "attn.proj"), "attn.proj", C, C, bias=True, code="block-layout")
    gate = part(layout, "ffn.w_gate")
    if default_hidden and "linear" in gate["kinds"] and gate["fields"]["out_features"] != hidden:
        raise CheckError("ffn-hidden-default", f"ffn_hidden=None 时 SwiGLU 的隐藏宽度应为 4·n_embed = {hidden}，"
                                               f"实际是 {gate['fields']['out_features']}。")
    require_swiglu_layout(layout, "ffn", C, hidden, code="block-layout")


def block_weights(C: int, hidden: int, seed: int) -> dict[str, torch.Tensor]:
    """Check-made weights of a Block, by the contract's names: distinct norm gains, so a mixed-up norm shows."""
    return {**fixed_weights({"norm1.weight": (C,), "attn.qkv.weight": (3 * C, C), "attn.proj.weight": (C, C),
                             "attn.proj.bias": (C,), "norm2.weight": (C,)}, seed),
            **swiglu_weights(C, hidden, seed, prefix="ffn.")}


@oracle
def block_outputs(x, w, n_head: int, eps: float) -> dict:
    """The pre-norm block's output ("want") and each misconception's, in float64, from the weights w."""
    def n1(t):
        return math64.rms_norm(t, w["norm1.weight"], eps)

    def n2(t):
        return math64.rms_norm(t, w["norm2.weight"], eps)

    def attn(t):                                                     # causal self-attention, qkv = [q | k | v]
        B, T, C = t.shape
        q, k, v = (z.view(B, T, n_head, C // n_head).transpose(1, 2)                   # (B, H, T, Dh) each
                   for z in _linear(t, w["attn.qkv.weight"]).split(C, dim=-1))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)                    # (B, H, T, Dh)
        return _linear(y.transpose(1, 2).reshape(B, T, C), w["attn.proj.weight"], w["attn.proj.bias"])

    def ffn(t):
        g, u = _linear(t, w["ffn.w_gate.weight"]), _linear(t, w["ffn.w_up.weight"])   # (B, T, H) each
        return _linear(F.silu(g) * u, w["ffn.w_down.weight"])                           # (B, T, C)

    def pre(na=n1, nf=n2):
        h = x + attn(na(x))                                                              # (B, T, C)
        return h + ffn(nf(h))

    def same(t):
        return t

    def no_residual(first=False, second=False):
        h = attn(n1(x)) + (x if first else 0)
        return ffn(n2(h)) + (h if second else 0)

    h_post = n1(x + attn(x))                                                             # post-norm's first half
    h_pre = x + attn(n1(x))                                                              # pre-norm's first half
    h_normed = n1(x) + attn(n1(x))                                                       # residual from n1(x)
    return {"want": pre(), "wrong": [
        ("block-post-norm", n2(h_post + ffn(h_post))),
        ("block-post-norm", n2(h_pre + ffn(h_pre))),
        ("block-post-norm", h_post + ffn(n2(h_post))),
        ("block-norm-missing", pre(na=same)),
        ("block-norm-missing", pre(nf=same)),
        ("block-no-residual", no_residual()),
        ("block-no-residual", no_residual(first=True)),
        ("block-no-residual", no_residual(second=True)),
        ("block-residual-from-normed", n2(h_normed) + ffn(n2(h_normed))),
        ("block-parallel", x + attn(n1(x)) + ffn(n2(x))),
        ("block-parallel", x + attn(n1(x)) + ffn(n1(x))),
        ("block-ffn-first", (lambda h: h + attn(n2(h)))(x + ffn(n1(x)))),
        ("block-ffn-first", (lambda h: h + attn(n1(h)))(x + ffn(n2(x)))),
        ("block-norms-mixed", pre(na=n2, nf=n1)),
        ("block-norms-mixed", pre(nf=n1)),
        ("block-norms-mixed", pre(na=n2))]}


@check("Block")
def check_Block(extended: bool = False, seed: int = 0):
    cases = Cases()
    for i, (B, T, C, H, L, hidden) in enumerate(BLOCK_CASES + (hidden_block_cases() if extended else [])):
        kwargs = {} if hidden is None else {"ffn_hidden": hidden}
        block, layout = yield from cases.run(make_module(CANDIDATE, "Block(...)", C, H, L, seed=seed + i, **kwargs))
        width = 4 * C if hidden is None else hidden
        _check_block_layout(layout, C, width, hidden is None)
        weights = block_weights(C, width, seed + i)
        yield from cases.run(load(block, weights, code="block-layout"))
        x = randn(B, T, C, seed=seed + 10 + i, scale=3.0, shift=1.0)                       # (B, T, C), not normalised
        got = yield from cases.call(Call(block, (x,), pure=True))
        outs = block_outputs(x, weights, H, BLOCK_EPS)
        cases.add(f"B={B}, T={T}, n_embed={C}, n_head={H} 时", got, outs["want"], outs["wrong"], inputs={"x": x})
    cases.decide()


# --- quiz_ffn_share ----------------------------------------------------------------------------

COUNT_KEYS = ("attn_params", "ffn_params", "moe_total_ffn", "moe_active_ffn")
SHARE_KEYS = ("ffn_share", "ffn_flops_share")
SHARE_REL_TOL = 1e-3


@instructor_only
def quiz_truth() -> dict[str, tuple]:
    """Each key's answer and the known wrong answers, with the misconception each shows.

    The quiz's two configs (published configurations, see the notebook): a Llama-2-13B layer
    (D = 5120, SwiGLU hidden 13824, 40 heads, MHA, no biases, context 4096) and a Mixtral-8x22B layer
    (D = 6144, 8 SwiGLU experts of hidden 16384, top-2 routing); norm weights and the router are left out."""
    D, hidden, T, moe_D, moe_hidden, n_expert, top_k = 5120, 13824, 4096, 6144, 16384, 8, 2
    attn, ffn, expert = 4 * D * D, 3 * D * hidden, 3 * moe_D * moe_hidden    # W_Q,K,V,O; W_g,u,d; one expert
    share = ffn / (attn + ffn)
    flops_attn, flops_ffn = 2 * attn + 4 * T * D, 2 * ffn                     # per token, forward
    flops_share = flops_ffn / (flops_attn + flops_ffn)
    return {"attn_params": (attn, [("quiz-attn-no-out-proj", 3 * D * D)]),
            "ffn_params": (ffn, [("quiz-swiglu-two-matrices", 2 * D * hidden), ("quiz-ffn-classic-width", 8 * D * D)]),
            "moe_total_ffn": (n_expert * expert, [("quiz-swiglu-two-matrices", 2 * moe_D * moe_hidden * n_expert)]),
            "moe_active_ffn": (top_k * expert, [("quiz-moe-active-all", n_expert * expert), ("quiz-moe-top1", expert),
                                                ("quiz-swiglu-two-matrices", top_k * 2 * moe_D * moe_hidden)]),
            "ffn_share": (share, [("quiz-share-percent", 100 * share), ("quiz-ffn-share-ratio", ffn / attn),
                                  ("quiz-ffn-share-ratio", attn / (attn + ffn)),
                                  ("quiz-ffn-share-ratio", attn / ffn)]),
            "ffn_flops_share": (flops_share, [("quiz-ffn-flops-no-scores", share),
                                              ("quiz-share-percent", 100 * flops_share),
                                              ("quiz-ffn-share-ratio", flops_ffn / flops_attn),
                                              ("quiz-ffn-share-ratio", flops_attn / (flops_attn + flops_ffn))])}


def _digests(keys) -> dict:
    """quiz_truth of ``keys`` as salted digests (oracle.answer_key) of the numbers as floats: counts exact,
    shares within SHARE_REL_TOL; (answer, [(code, wrong answer), ...]) per key."""
    def key_of(key, value):
        return answer_key(float(value), 0.0 if key in COUNT_KEYS else SHARE_REL_TOL)
    truth = quiz_truth()
    return {key: (key_of(key, truth[key][0]), [(code, key_of(key, wrong)) for code, wrong in truth[key][1]])
            for key in keys}


@oracle
def quiz_keys() -> dict:
    """The digests of the keys the check asks."""
    return _digests(COUNT_KEYS + SHARE_KEYS)


def _check_share(key: str, value, want, wrongs) -> None:
    if matches(value, want, SHARE_REL_TOL):
        return
    for code, wrong in wrongs:
        if matches(value, wrong, SHARE_REL_TOL):
            verb = "写成了" if code == "quiz-share-percent" else "不是"
            raise CheckError(code, f"{key} {verb} {value!r}。")
    raise CheckError("wrong", f"{key} 不是 {value!r}：回到 §6 的公式再算一遍。",
                     step="把 §6 公式里的每一项（注意力和 FFN 各自的参数个数，或每个 token 的 FLOPs）分别算出来打印，"
                          "再按题目的定义相除；比例应在 0 和 1 之间。")


@check("quiz_ffn_share")
def check_quiz_ffn_share(extended: bool = False, seed: int = 0):
    """One set of answers, nothing random: ``seed`` and ``extended`` change nothing (the graded check asks
    the same keys again)."""
    del seed, extended
    answers = yield from quiz_answers("quiz_ffn_share", COUNT_KEYS + SHARE_KEYS)
    keys = quiz_keys()
    for key in COUNT_KEYS:
        value = quiz_number(answers, key)
        want, wrongs = keys[key]
        if matches(value, want):
            continue
        for code, wrong in wrongs:
            if matches(value, wrong):
                raise CheckError(code, f"{key} 不是 {answers[key]!r}。")
        raise CheckError("wrong", f"{key} 不是 {answers[key]!r}：回到 §6、§7 的参数公式再数一遍。",
                         step="列出这一层里每一个权重矩阵的形状（题目给出了各个宽度），把它们的元素个数分别打印出来，再相加。")
    for key in SHARE_KEYS:
        _check_share(key, quiz_number(answers, key), *keys[key])
