"""What a check asks of the learner's code, and the data that comes back.

A check is written once, as a generator (utils/checks/core.py's ``check``): it yields the calls
below and receives what the learner's code returned, as data. Two drivers answer the calls:

* in the learner's notebook, the same process runs them (utils/checks/drive.py), and the check
  prints its Chinese verdict at once;
* in grading, the judge (autograder/judge.py) sends them to the student's kernel, where
  utils/checks/agent.py runs them, and reads the answers back through the codec below.

Both ends speak only data: ``None``, bools, numbers, strings, lists, tuples, dicts, tensors,
dtypes, NumPy values and dataclass records; an object that is none of these stays in the kernel
and is named by a :class:`Handle`. The codec is JSON with a tensor's bytes in base64: decoding
runs no code of the other side (no pickle), and what does not decode is refused.
"""
from __future__ import annotations

import base64
import dataclasses
import json
import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

MAX_BYTES = 64 * 1024 * 1024   # the largest message either side accepts
TAG = "$"                      # the key that marks an encoded object in the JSON tree


class ProtocolError(ValueError):
    """A message that is not the protocol's (malformed, too large, a type it does not carry)."""


# --- what a call names ------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Candidate:
    """The learner's implementation under test (the graded name, as the kernel binds it)."""


CANDIDATE = Candidate()


@dataclasses.dataclass(frozen=True)
class Handle:
    """An object that lives in the kernel (a module, a cache, a bound method …): its id in the
    session, its type's name and what kind of thing it is (see agent.KINDS)."""
    id: int
    type: str
    kinds: tuple[str, ...] = ()

    def is_a(self, kind: str) -> bool:
        return kind in self.kinds


@dataclasses.dataclass(frozen=True)
class Attr:
    """An attribute (a dotted path: ``"blocks.0.attn"``) of what ``base`` names."""
    base: Any
    path: str


@dataclasses.dataclass(frozen=True)
class New:
    """An object the kernel builds for a check: ``path(*args, **kwargs)``, where ``path`` names a
    stand-in the course ships for checks (``"utils.checks.stand_ins:generator"``), not an answer —
    the kernel builds only what lies in utils.checks."""
    path: str
    args: tuple = ()
    kwargs: dict = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class Builtin:
    """One of the few functions of Python a check calls on learner objects (agent.BUILTINS)."""
    name: str


@dataclasses.dataclass(frozen=True)
class Record:
    """A dataclass instance as data: its type's ``module:qualname`` and its fields."""
    type: str
    fields: dict

    def __getattr__(self, name):
        try:
            return self.__dict__["fields"][name]
        except KeyError:
            raise AttributeError(name) from None


# --- the calls --------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Watch:
    """What the kernel observes while it runs a call (reported back in :class:`Observed`). These are
    properties only the kernel can see: the learner's code could lie about them, not about outputs."""
    torch_calls: bool = False                     # the names of the torch functions called
    square: tuple[int, int, int] | None = None    # (Tq, Tk, lead): the first result holding a full [Tq, Tk]
    hooks: tuple[str, ...] = ()                   # submodules of the target: every (input, output) of theirs
    backward: torch.Tensor | None = None          # upstream gradient: the tensor arguments' gradients


@dataclasses.dataclass(frozen=True)
class Observed:
    """A watched call's result and what the kernel saw."""
    value: Any
    torch_calls: tuple[str, ...] = ()
    square: tuple[str, tuple[int, ...]] | None = None
    seen: dict = dataclasses.field(default_factory=dict)   # hook name -> [(input, output), ...]
    grads: tuple = ()                                       # per tensor argument: its grad or None


@dataclasses.dataclass(frozen=True)
class Call:
    """Call ``target(*args, **kwargs)``. ``seed``: torch.manual_seed first (a module's own init);
    ``pure``: fail with [modified-input] if a tensor argument changed; ``grad``: run with autograd
    (the default is torch.no_grad); ``watch``: see :class:`Watch`; ``hints``: code -> a pattern of
    the source of ``hints_of`` (default: the target) that turns a crash into that diagnosis; ``meta``: run
    under ``torch.device("meta")``, so that a tensor the call makes allocates no memory (a function that
    should compute from sizes alone may build a model of billions of parameters: it costs nothing)."""
    target: Any
    args: tuple = ()
    kwargs: dict = dataclasses.field(default_factory=dict)
    seed: int | None = None
    pure: bool = False
    grad: bool = False
    watch: Watch | None = None
    hints: dict | None = None
    hints_of: Any = None
    meta: bool = False


@dataclasses.dataclass(frozen=True)
class Get:
    """The value of ``target`` (an :class:`Attr`, a handle, the candidate): data or a handle."""
    target: Any


@dataclasses.dataclass(frozen=True)
class Describe:
    """What ``target`` is: {"type", "kinds", "fields"} (agent.describe)."""
    target: Any


@dataclasses.dataclass(frozen=True)
class Layout:
    """A module's structure: its submodules described, its parameters and buffers (agent.layout)."""
    target: Any


@dataclasses.dataclass(frozen=True)
class Load:
    """Copy ``weights`` (name -> tensor) into the module's parameters of those names; a missing name or
    shape fails with ``code``."""
    target: Any
    weights: dict
    code: str = "linear-layout"


@dataclasses.dataclass(frozen=True)
class State:
    """The module's ``state_dict()`` as data."""
    target: Any


@dataclasses.dataclass(frozen=True)
class Source:
    """The source text of a function, method or class (``None`` where it cannot be found)."""
    target: Any


@dataclasses.dataclass(frozen=True)
class Passed:
    """The judge tells the kernel that ``name`` passed its test (for the demos after it)."""
    name: str


@dataclasses.dataclass(frozen=True)
class Failure:
    """A call that did not return: ``kind`` is "not-implemented", "crashed" (the learner's code raised)
    or "check" (a course stand-in or helper found the problem: ``code``)."""
    kind: str
    message: str = ""
    code: str = ""
    error: str = ""          # the exception's type name
    line: str = ""           # the learner's line that raised, if found


OPS = (Call, Get, Describe, Layout, Load, State, Source, Passed)
TARGETS = (Candidate, Handle, Attr, New, Builtin)
_CLASSES = {cls.__name__: cls for cls in (*OPS, *TARGETS, Watch, Observed, Failure)}
_DTYPES = {str(d).removeprefix("torch."): d for d in (
    torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.int8, torch.int16, torch.int32,
    torch.int64, torch.uint8, torch.bool, torch.complex64, torch.complex128)}


# --- the codec ------------------------------------------------------------------------------

def encode(value) -> str:
    """``value`` as the protocol's JSON text."""
    return json.dumps(_to_tree(value), ensure_ascii=False, allow_nan=True)


def decode(text: str):
    """The value a protocol message encodes; :class:`ProtocolError` for anything else."""
    if not isinstance(text, str) or len(text) > MAX_BYTES:
        raise ProtocolError("not a message of the protocol (or too large)")
    try:
        tree = json.loads(text)
    except (ValueError, RecursionError) as err:
        raise ProtocolError(f"not JSON: {err}") from None
    return _from_tree(tree)


def _to_tree(value):
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int) and type(value) is int:
        return value
    if isinstance(value, float) and type(value) is float:
        return value if math.isfinite(value) else {TAG: "float", "repr": repr(value)}
    if isinstance(value, torch.Tensor):
        return _tensor_tree(value)
    if isinstance(value, torch.dtype):
        return {TAG: "dtype", "name": str(value).removeprefix("torch.")}
    if isinstance(value, torch.Size):
        return {TAG: "size", "items": list(value)}
    if isinstance(value, (np.ndarray, np.generic)):
        array = np.asarray(value)
        if array.dtype.hasobject or array.dtype.fields is not None:
            raise ProtocolError("a numpy array of objects is not data of the protocol")
        return {TAG: "numpy", "dtype": array.dtype.str, "shape": list(array.shape), "scalar": np.isscalar(value),
                "data": base64.b64encode(np.ascontiguousarray(array).tobytes()).decode()}
    if type(value) in (list, tuple):
        return {TAG: type(value).__name__, "items": [_to_tree(v) for v in value]}
    if type(value) is dict:
        return {TAG: "dict", "items": [[_to_tree(k), _to_tree(v)] for k, v in value.items()]}
    if isinstance(value, Record):
        return {TAG: "record", "type": value.type, "fields": _to_tree(value.fields)}
    if type(value).__name__ in _CLASSES and type(value) is _CLASSES[type(value).__name__]:
        fields = {f.name: _to_tree(getattr(value, f.name)) for f in dataclasses.fields(value)}
        return {TAG: type(value).__name__, "fields": fields}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {TAG: "record", "type": type_path(type(value)),
                "fields": _to_tree({f.name: getattr(value, f.name) for f in dataclasses.fields(value)})}
    raise ProtocolError(f"{type(value).__name__} is not data of the protocol")


def type_path(cls: type) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


def _tensor_tree(t: torch.Tensor) -> dict:
    flat = t.detach().cpu().contiguous().reshape(-1)
    raw = (flat.to(torch.uint8) if flat.dtype == torch.bool else flat).view(torch.uint8).numpy().tobytes()
    return {TAG: "tensor", "dtype": str(t.dtype).removeprefix("torch."), "shape": list(t.shape),
            "data": base64.b64encode(raw).decode()}


def _from_tree(tree):
    if tree is None or isinstance(tree, (bool, str, int, float)):
        return tree
    if isinstance(tree, list):
        raise ProtocolError("a bare JSON list is not a message of the protocol")
    if not isinstance(tree, dict) or TAG not in tree:
        raise ProtocolError("a JSON object without its type")
    kind = tree[TAG]
    decoder = _DECODERS.get(kind)
    if decoder is not None:
        return decoder(tree)
    if kind in _CLASSES:
        cls = _CLASSES[kind]
        fields = tree.get("fields")
        if not isinstance(fields, dict) or set(fields) - {f.name for f in dataclasses.fields(cls)}:
            raise ProtocolError(f"bad fields for {kind}")
        return cls(**{name: _from_tree(v) for name, v in fields.items()})
    raise ProtocolError(f"unknown type {kind!r}")


def _float(tree):
    text = tree.get("repr")
    if text not in ("nan", "inf", "-inf"):
        raise ProtocolError("bad float")
    return float(text)


def _dtype(name):
    try:
        return _DTYPES[name]
    except (KeyError, TypeError):
        raise ProtocolError("unknown dtype") from None


def _shape(tree) -> tuple[int, ...]:
    shape = tree.get("shape")
    if not isinstance(shape, list) or not all(type(n) is int and n >= 0 for n in shape):
        raise ProtocolError("bad shape")
    return tuple(shape)


def _raw(tree) -> bytes:
    try:
        return base64.b64decode(tree["data"], validate=True)
    except (KeyError, TypeError, ValueError):
        raise ProtocolError("bad data") from None


def _tensor(tree):
    dtype, shape, raw = _dtype(tree.get("dtype")), _shape(tree), _raw(tree)
    stored = torch.uint8 if dtype == torch.bool else dtype
    if len(raw) != math.prod(shape) * stored.itemsize:
        raise ProtocolError("a tensor's data does not match its shape")
    flat = torch.frombuffer(bytearray(raw), dtype=torch.uint8) if raw else torch.empty(0, dtype=torch.uint8)
    flat = flat.view(stored) if raw else torch.empty(0, dtype=stored)
    return (flat.to(torch.bool) if dtype == torch.bool else flat.clone()).reshape(shape)


def _numpy(tree):
    try:
        dtype = np.dtype(tree["dtype"])
    except (KeyError, TypeError):
        raise ProtocolError("bad numpy dtype") from None
    if dtype.hasobject or dtype.fields is not None:
        raise ProtocolError("a numpy dtype of objects is not data")
    shape, raw = _shape(tree), _raw(tree)
    if len(raw) != math.prod(shape) * dtype.itemsize:
        raise ProtocolError("numpy data does not match its shape")
    array = np.frombuffer(raw, dtype=dtype).reshape(shape).copy()
    return array[()] if tree.get("scalar") else array


def _items(tree) -> list:
    items = tree.get("items")
    if not isinstance(items, list):
        raise ProtocolError("bad items")
    return items


def _dict(tree) -> dict:
    out = {}
    for pair in _items(tree):
        if not isinstance(pair, list) or len(pair) != 2:
            raise ProtocolError("bad dict item")
        key = _from_tree(pair[0])
        if not isinstance(key, (str, int, float, bool, type(None), tuple)):
            raise ProtocolError("a dict key must be a plain value")
        out[key] = _from_tree(pair[1])
    return out


def _record(tree) -> Record:
    fields = _from_tree(tree.get("fields"))
    if not isinstance(tree.get("type"), str) or not isinstance(fields, Mapping):
        raise ProtocolError("bad record")
    return Record(tree["type"], dict(fields))


_DECODERS = {
    "float": _float, "dtype": lambda t: _dtype(t.get("name")), "tensor": _tensor, "numpy": _numpy, "record": _record,
    "dict": _dict,
    "list": lambda t: [_from_tree(v) for v in _items(t)], "tuple": lambda t: tuple(_from_tree(v) for v in _items(t)),
    "size": lambda t: torch.Size(int(n) for n in _items(t)),
}
