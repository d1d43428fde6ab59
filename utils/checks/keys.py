"""How an oracle call is keyed, so that the class edition finds its stored result on any CPU.

The class edition looks each oracle's result up by its arguments (utils/checks/oracle.py). Float bits
differ between machines (PyTorch picks other CPU kernels: ``ATEN_CPU_CAPABILITY=default``, AVX2,
AVX-512, NEON), so a key is made only of what the check *decided*: ints, strings, bools, dtypes, exact
(integer or boolean) tensors, and float tensors by the **recipe** that made them — the function marked
``@recipe`` and the check-made arguments it was called with — never by their bytes.

A float tensor an oracle receives without a recipe was computed on the way (a softmax, a model's
output, a slice of an input): :func:`fingerprint` refuses it, so ``course.py build`` and the tests that
replay the stored results fail at once on such a call. Pass what the tensor was made from instead, and
let the oracle (or a ``@recipe`` function) compute it.
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
from collections.abc import Callable
from types import SimpleNamespace

import torch

_RECIPE = "_check_recipe"          # tensor attribute: (recipe key, the tensor's version when it was made)


def fingerprint(value) -> str:
    """A digest of check-made data that is the same on every machine (the module docstring)."""
    digest = hashlib.sha256()
    _feed(digest, value)
    return digest.hexdigest()[:32]


def _feed(digest, value) -> None:
    if isinstance(value, torch.Tensor):
        _feed_tensor(digest, value)
    elif value is None or isinstance(value, (bool, int, float, str, torch.dtype)):
        digest.update(f"{type(value).__name__}:{value!r};".encode())
    elif isinstance(value, (tuple, list)):
        digest.update(f"{type(value).__name__}[{len(value)}];".encode())
        for item in value:
            _feed(digest, item)
    elif isinstance(value, dict):
        digest.update(f"dict[{len(value)}];".encode())
        for key in sorted(value, key=repr):
            _feed(digest, key)
            _feed(digest, value[key])
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        _feed(digest, (type(value).__name__, {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}))
    elif isinstance(value, SimpleNamespace):
        _feed(digest, ("namespace", vars(value)))
    else:
        raise TypeError(f"an oracle argument must be check-made data, not {type(value).__name__}")


def _feed_tensor(digest, t: torch.Tensor) -> None:
    made = recipe_of(t)
    if made is not None:
        digest.update(f"R{made};".encode())
        return
    if t.is_floating_point() or t.is_complex():
        raise TypeError(f"an oracle argument is a {t.dtype} tensor of shape {tuple(t.shape)} that no @recipe "
                        "made (computed on the way, sliced or changed in place): its bits differ between CPUs, "
                        "so it cannot key a stored result — pass what it is made from")
    flat = t.detach().cpu().contiguous().reshape(-1)
    digest.update(f"T{t.dtype}{tuple(t.shape)};".encode())
    digest.update((flat.to(torch.uint8) if t.dtype == torch.bool else flat).view(torch.uint8).numpy().tobytes())


def recipe_of(t: torch.Tensor) -> str | None:
    """The recipe key of a tensor a ``@recipe`` function made, if it is still as it was made."""
    made = getattr(t, _RECIPE, None)
    if made is None or made[1] != t._version:
        return None
    return made[0]


def recipe(fn: Callable) -> Callable:
    """Mark ``fn`` as making a check's input tensors from check-made data (seeds, sizes, names).

    Every tensor it returns (alone, or inside tuples, lists and dicts) is keyed by this call —
    ``fn``'s name and its arguments' fingerprint — wherever it is passed to an oracle, instead of by
    its float bits. A tensor changed in place afterwards loses its key."""
    name = f"{fn.__module__.rsplit('.', 1)[-1]}.{fn.__qualname__}"

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        result = fn(*args, **kwargs)
        _tag(result, f"{name}:{fingerprint((args, kwargs))}")
        return result
    return wrapper


def _tag(value, key: str) -> None:
    if isinstance(value, torch.Tensor):
        setattr(value, _RECIPE, (key, value._version))
    elif isinstance(value, (tuple, list)):
        for i, item in enumerate(value):
            _tag(item, f"{key}[{i}]")
    elif isinstance(value, dict):
        for name, item in value.items():
            _tag(item, f"{key}[{name!r}]")
