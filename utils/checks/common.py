"""Helpers the section checks share: fixed weights loaded by the contract's names, modules' layouts,
quiz answers."""
from __future__ import annotations

import math
import zlib
from collections.abc import Mapping

import torch
import torch.nn as nn

from .compare import joined, type_name
from .errors import CheckError
from .keys import recipe
from .protocol import Attr, Call, Get, Handle, Layout, Load


@recipe
def fixed_weights(shapes: Mapping[str, tuple[int, ...]], seed: int) -> dict[str, torch.Tensor]:
    """Check-made parameters by name: matrices ~ N(0, 1/fan_in), vectors (gains) ~ 1 ± 0.3.

    Each is drawn from its own generator (seed and name), so a module's weights do not depend on
    the order in which the learner created its layers."""
    weights = {}
    for name, shape in shapes.items():
        g = torch.Generator().manual_seed(seed * 7919 + zlib.crc32(name.encode()))
        if len(shape) == 1:
            weights[name] = 1 + 0.3 * torch.randn(shape, generator=g)
        else:
            weights[name] = torch.randn(shape, generator=g) / math.sqrt(shape[-1])
    return weights


def load_weights(module: nn.Module, weights: Mapping[str, torch.Tensor], code: str = "linear-layout") -> None:
    """Copy ``weights`` into the module's parameters of those names (a missing name or shape: ``code``).
    Runs where the module is (the kernel, in grading): agent.Session performs protocol.Load with it."""
    params = dict(module.named_parameters(remove_duplicate=False))
    with torch.no_grad():
        for name, value in weights.items():
            param = params.get(name)
            if param is None:
                raise CheckError(code, f"没有找到参数 {name}（应按题目给的名字创建各层）。")
            if param.shape != value.shape:
                raise CheckError(code, f"参数 {name} 的形状应为 {tuple(value.shape)}，实际是 {tuple(param.shape)}。")
            param.copy_(value)


def make_module(target, what: str, *args, seed: int | None = None, hints: dict | None = None, hints_of=None,
                **kwargs):
    """(yields) ``target(*args, **kwargs)`` built under ``seed``: the module's handle and its layout (a
    :class:`~protocol.Layout` dict); a result that is no nn.Module fails with [wrong-type]. ``hints`` /
    ``hints_of``: as protocol.Call's, for a crash while building it."""
    module = yield Call(target, args, kwargs, seed=seed, hints=hints, hints_of=hints_of)
    if not (isinstance(module, Handle) and module.is_a("module")):
        kind = module.type if isinstance(module, Handle) else type(module).__name__
        raise CheckError("wrong-type", joined(what, f"应创建一个 nn.Module，实际是 {kind}。"))
    return module, (yield Layout(module))


def load(module, weights: Mapping[str, torch.Tensor], code: str = "linear-layout"):
    """(yields) The check-made ``weights`` loaded into the module by name (see load_weights)."""
    yield Load(module, dict(weights), code)


def part(layout: dict, name: str) -> dict:
    """The description of submodule ``name`` in a layout; for what is no module, its type only (an
    attribute of the root) or NoneType (missing)."""
    if name in layout["modules"]:
        return layout["modules"][name]
    kind = layout["attrs"].get(name, "NoneType") if "." not in name else "NoneType"
    return {"type": kind, "kinds": (), "fields": {}}


def require_linear(layer: dict, name: str, n_in: int, n_out: int, bias: bool, code: str = "linear-layout") -> None:
    """``layer`` (a description) is ``nn.Linear(n_in, n_out, bias=bias)``, else ``code`` naming the attribute."""
    if "linear" not in layer["kinds"]:
        raise CheckError(code, f"应有属性 {name} = nn.Linear(...)，实际是 {layer['type']}。")
    fields = layer["fields"]
    got = (fields["in_features"], fields["out_features"], fields["bias"])
    if got != (n_in, n_out, bias):
        want = f"nn.Linear({n_in}, {n_out}{'' if bias else ', bias=False'})"
        raise CheckError(code, f"{name} 应为 {want}，实际是 nn.Linear({got[0]}, {got[1]}, bias={got[2]})。")


def require_swiglu_layout(layout: dict, prefix: str, dim: int, hidden: int, code: str = "ffn-layout") -> None:
    """The SwiGLU at ``prefix`` ("" for the module itself) has w_gate, w_up = nn.Linear(dim, hidden),
    w_down = nn.Linear(hidden, dim), none with a bias; else ``code`` naming the first one that is not."""
    for name, n_in, n_out in (("w_gate", dim, hidden), ("w_up", dim, hidden), ("w_down", hidden, dim)):
        path = f"{prefix}.{name}" if prefix else name
        require_linear(part(layout, path), path, n_in, n_out, bias=False, code=code)


def decode_in_chunks(module, cache, x, chunks, judge, label: str, per_position=(), hints=None):
    """(yields) Feed ``x`` [B, T, C] to ``module`` chunk by chunk with ``cache`` (a scripted stand-in made in the
    kernel), each chunk with the same positions' slices of the ``per_position`` tensors [T, ...]; after every call,
    and before a crash is raised, ``judge(received)`` judges what the module put into the cache. The outputs
    concatenated, [B, T, C], and what it put in."""
    got, start = [], 0
    for n in chunks:
        args = (x[:, start:start + n], *(t[start:start + n] for t in per_position))
        try:
            out = yield Call(module, args, {"cache": cache}, pure=True, hints=hints, hints_of=Attr(module, "forward"))
        except CheckError:   # what went into the cache is judged first, even when the call crashed
            judge((yield Get(Attr(cache, "received"))))
            raise
        received = yield Get(Attr(cache, "received"))
        judge(received)
        if not isinstance(out, torch.Tensor) or out.shape != (x.size(0), n, x.size(2)):
            shape = tuple(out.shape) if isinstance(out, torch.Tensor) else type_name(out)
            raise CheckError("wrong-shape", f"{label}：新增 {n} 个位置时输出形状应为 {(x.size(0), n, x.size(2))}，"
                                            f"实际是 {shape}。")
        got.append(out)
        start += n
    return torch.cat(got, dim=1), received                                    # (B, T, C)


def quiz_number(answers: dict, key: str) -> float:
    """A quiz answer that must be a number: int, float, a NumPy scalar or a one-element tensor (not a bool).

    The one rule every quiz of the course uses (the notebooks state it where the quizzes are)."""
    value = answers[key]
    if hasattr(value, "numel") and hasattr(value, "item") and value.numel() == 1:
        value = value.item()                              # a torch tensor of one element, 0-d or not
    elif hasattr(value, "item") and getattr(value, "shape", None) == ():
        value = value.item()                              # a NumPy scalar (np.int64, np.float32, …)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
        raise CheckError("wrong-type", f"{key} 的答案应是一个数，实际是 {answers[key]!r}。")
    return float(value)
