"""Helpers the section checks share: fixed weights loaded by the contract's names."""
from __future__ import annotations

import math
import zlib
from collections.abc import Mapping

import torch
import torch.nn as nn

from .core import CheckError


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
    """Copy ``weights`` into the module's parameters of those names (a missing name or shape: ``code``)."""
    params = dict(module.named_parameters(remove_duplicate=False))
    with torch.no_grad():
        for name, value in weights.items():
            param = params.get(name)
            if param is None:
                raise CheckError(code, f"没有找到参数 {name}（应按题目给的名字创建各层）。")
            if param.shape != value.shape:
                raise CheckError(code, f"参数 {name} 的形状应为 {tuple(value.shape)}，实际是 {tuple(param.shape)}。")
            param.copy_(value)


def require_linear(layer, name: str, n_in: int, n_out: int, bias: bool, code: str = "linear-layout") -> None:
    """``layer`` is ``nn.Linear(n_in, n_out, bias=bias)``, else ``code`` naming the attribute."""
    if not isinstance(layer, nn.Linear):
        raise CheckError(code, f"应有属性 {name} = nn.Linear(...)，实际是 {type(layer).__name__}。")
    if (layer.in_features, layer.out_features, layer.bias is not None) != (n_in, n_out, bias):
        want = f"nn.Linear({n_in}, {n_out}{'' if bias else ', bias=False'})"
        raise CheckError(code, f"{name} 应为 {want}，实际是 {layer}。")


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


def require_swiglu_layout(ffn, dim: int, hidden: int, code: str = "ffn-layout") -> None:
    """``ffn`` has SwiGLU's layers: w_gate, w_up = nn.Linear(dim, hidden), w_down = nn.Linear(hidden, dim),
    none with a bias; else ``code`` naming the first one that is not."""
    for name, n_in, n_out in (("w_gate", dim, hidden), ("w_up", dim, hidden), ("w_down", hidden, dim)):
        require_linear(getattr(ffn, name, None), name, n_in, n_out, bias=False, code=code)
