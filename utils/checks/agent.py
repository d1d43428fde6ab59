"""The kernel's side of a check: run the calls a check asks for (utils/checks/protocol.py) and give
back what came out, as data.

It judges nothing. In the learner's notebook the check's own process uses a :class:`Session` directly;
in grading, the judge (autograder/judge.py) sends each call as a protocol message on a comm (:func:`listen`)
to :func:`serve`, in the student's kernel, and gets the answer back on it. Whatever the student's code does
to this module can only change the answers, never the verdict, which the judge computes from them.

An answer is the call's result as data (:func:`export`), a :class:`~protocol.Handle` for an object
that is not data (the session keeps it for later calls), or a :class:`~protocol.Failure`.
"""
from __future__ import annotations

import contextlib
import dataclasses
import importlib
import inspect
import sys
import textwrap
import traceback
import warnings
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn
from torch.overrides import TorchFunctionMode

from . import protocol
from .protocol import (Attr, Builtin, Call, Candidate, Describe, Failure, Get, Handle, Layout, Load, New, Observed,
                       Passed, Record, Source, State)

_PACKAGE_DIR = Path(__file__).resolve().parents[1]
BUILTINS = {"len": len, "callable": callable, "bool": bool}
# What a handle says its object is (the isinstance a check needs), in this order.
KINDS = {"module": nn.Module, "linear": nn.Linear, "embedding": nn.Embedding, "module-list": nn.ModuleList,
         "parameter": nn.Parameter, "list": list, "tuple": tuple, "dict": dict}
# name -> the candidate that last passed its check, in this process: the demos use it (core.mine_or_reference)
PASSED: dict[str, object] = {}
# Attributes of a module that describe() reports (nn.Linear, nn.Embedding, the norms).
FIELDS = ("in_features", "out_features", "num_embeddings", "embedding_dim", "eps", "normalized_shape")


def is_data(value) -> bool:
    """Whether ``value`` crosses the protocol as itself (not as a handle)."""
    if value is None or isinstance(value, (bool, int, float, str, torch.Tensor, torch.dtype, np.generic, np.ndarray)):
        return True
    if type(value) in (list, tuple, dict, torch.Size):
        return all(map(is_data, value.values() if type(value) is dict else value)) and (
            type(value) is not dict or all(isinstance(k, (str, int)) for k in value))
    return dataclasses.is_dataclass(value) and not isinstance(value, type)


class Undefined(Exception):
    """The graded name is not bound in the kernel (its cell was not run, or it raised)."""


class Session:
    """The objects of one check's run (handles), and how to reach the candidate."""

    def __init__(self, candidate):
        self.candidate = candidate       # a zero-argument function: the learner's object, or raises Undefined
        self.objects: dict[int, object] = {}

    # -- naming objects ----------------------------------------------------------------------------

    def handle(self, obj) -> Handle:
        for key, known in self.objects.items():
            if known is obj:
                return Handle(key, type(obj).__name__, kinds_of(obj))
        key = len(self.objects) + 1
        self.objects[key] = obj
        return Handle(key, type(obj).__name__, kinds_of(obj))

    def export(self, value):
        """``value`` as the protocol carries it: data as itself (tensors detached, dataclasses as
        records), anything else as a handle; containers element by element."""
        if isinstance(value, torch.Tensor):
            return value.detach().as_subclass(torch.Tensor).clone()
        if value is None or isinstance(value, (bool, str, torch.dtype, np.generic, np.ndarray)):
            return value
        if type(value) in (int, float):
            return value
        if type(value) in (list, tuple):
            return type(value)(self.export(v) for v in value)
        if type(value) is torch.Size:
            return value
        if type(value) is dict and all(isinstance(k, (str, int)) for k in value):
            return {k: self.export(v) for k, v in value.items()}
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            return Record(protocol.type_path(type(value)),
                          {f.name: self.export(getattr(value, f.name)) for f in dataclasses.fields(value)})
        return self.handle(value)

    def resolve(self, target):
        """The object a call names."""
        if isinstance(target, Candidate):
            return self.candidate()
        if isinstance(target, Handle):
            if target.id not in self.objects:
                raise LookupError(f"no object {target.id} in this session")
            return self.objects[target.id]
        if isinstance(target, Attr):
            obj = self.resolve(target.base)
            for part in target.path.split("."):
                obj = getattr(obj, part)
            return obj
        if isinstance(target, New):
            return factory(target.path)(*self.argument(target.args), **self.argument(target.kwargs))
        if isinstance(target, Builtin):
            return BUILTINS[target.name]
        raise protocol.ProtocolError(f"{type(target).__name__} names no object")

    def argument(self, value):
        """An argument of a call: handles and targets become their objects, records their dataclasses, tensors
        copies (the learner's code gets its own, as through the judge: what it changes in place is not the check's)."""
        if isinstance(value, torch.Tensor):
            return value.clone()
        if isinstance(value, protocol.TARGETS):
            return self.resolve(value)
        if isinstance(value, Record):
            return rebuild(value, self.argument)
        if type(value) in (list, tuple):
            return type(value)(self.argument(v) for v in value)
        if type(value) is dict:
            return {k: self.argument(v) for k, v in value.items()}
        return value

    # -- running a call ----------------------------------------------------------------------------

    def run(self, op):
        """Perform ``op``; its answer (data, a handle, an Observed) or a Failure."""
        try:
            with quiet():
                return self._perform(op)
        except NotImplementedError as err:
            return Failure("not-implemented", str(err))
        except Undefined as err:
            return Failure("not-implemented", str(err), error="NameError")
        except Exception as err:   # the learner's code, or a course stand-in raising a CheckError
            code = getattr(err, "code", "")
            if code and hasattr(err, "finding"):
                return Failure("check", err.finding, code=code)
            return Failure("crashed", str(err), error=type(err).__name__, line=learner_line(err))

    def _perform(self, op):
        if isinstance(op, Call):
            return self._call(op)
        if isinstance(op, (Get, Describe, Layout)):
            try:
                obj = self.resolve(op.target)
            except AttributeError:   # as getattr(obj, name, None) would
                obj = None
            return self.export(obj) if isinstance(op, Get) else describe(obj) if isinstance(op, Describe) \
                else layout(obj)
        if isinstance(op, Load):
            from .common import load_weights
            load_weights(self.resolve(op.target), op.weights, code=op.code)
            return None
        if isinstance(op, State):
            return {k: v.detach().clone() for k, v in self.resolve(op.target).state_dict().items()}
        if isinstance(op, Source):
            return source_of(self.resolve(op.target))
        if isinstance(op, Passed):
            PASSED[op.name] = self.candidate()
            return None
        raise protocol.ProtocolError(f"{type(op).__name__} is not a call of the protocol")

    def _call(self, op: Call):
        fn = self.resolve(op.target)
        args, kwargs = self.argument(op.args), self.argument(op.kwargs)
        watch = op.watch or protocol.Watch()
        if watch.backward is not None:   # the float tensor arguments become leaves whose gradients are reported
            args = tuple(a.detach().clone().requires_grad_(True) if _differentiable(a) else a for a in args)
        tensors = [a for a in args if isinstance(a, torch.Tensor)]
        before = [t.detach().clone() for t in tensors] if op.pure else []
        if op.seed is not None:
            torch.manual_seed(op.seed)
        recorder = Recorder(watch.square) if (watch.torch_calls or watch.square) else contextlib.nullcontext()
        seen: dict[str, list] = {}
        grad = torch.enable_grad() if (op.grad or watch.backward is not None) else torch.no_grad()
        device = torch.device("meta") if op.meta else contextlib.nullcontext()
        with grad, device, hooked(fn, watch.hooks, seen), recorder:
            value = fn(*args, **kwargs)
        if op.pure and any(not torch.equal(b, a.detach()) for b, a in zip(before, tensors)):
            return Failure("check", "调用之后，输入张量的值被改变了。", code="modified-input")
        if op.watch is None:
            return self.export(value)
        grads = ()
        if watch.backward is not None:
            (value * watch.backward).sum().backward()
            grads = tuple(t.grad.detach().clone() if t.grad is not None else None for t in tensors)
        return Observed(self.export(value), tuple(recorder.names) if watch.torch_calls else (),
                        recorder.square if watch.square else None,
                        {k: [(self.export(i), self.export(o)) for i, o in v] for k, v in seen.items()}, grads)


def _differentiable(value) -> bool:
    return isinstance(value, torch.Tensor) and (value.is_floating_point() or value.is_complex())


# --- what the kernel reports about objects -------------------------------------------------------

def kinds_of(obj) -> tuple[str, ...]:
    kinds = tuple(kind for kind, cls in KINDS.items() if isinstance(obj, cls))
    return kinds + (("callable",) if callable(obj) else ())


def describe(obj) -> dict:
    """{"type": class name, "kinds": see KINDS, "fields": a module's sizes and whether it has a bias}."""
    fields = {name: _plain(getattr(obj, name)) for name in FIELDS if hasattr(obj, name)}
    if isinstance(obj, nn.Module) and "bias" in dir(obj):
        fields["bias"] = getattr(obj, "bias", None) is not None
    if isinstance(obj, (list, tuple, nn.ModuleList)):
        fields["len"] = len(obj)
    return {"type": type(obj).__name__, "kinds": kinds_of(obj), "fields": fields}


def _plain(value):
    return tuple(value) if isinstance(value, (list, tuple, torch.Size)) else value


def layout(module) -> dict:
    """A module's structure, by the names of ``named_modules`` / ``named_parameters``:
    "modules": name -> describe(); "attrs": the root's own attributes -> kind of value;
    "params": name -> {"shape", "id" (equal for the same Parameter), "ptr" (equal for shared memory),
    "parameter": is an nn.Parameter}; "buffers": name -> {"shape", "dtype"}; "count": the parameters'
    total (each counted once)."""
    if not isinstance(module, nn.Module):
        return {"type": type(module).__name__, "kinds": kinds_of(module)}
    ids: dict[int, int] = {}
    ptrs: dict[int, int] = {}

    def param(p):
        return {"shape": tuple(p.shape), "id": ids.setdefault(id(p), len(ids)),
                "ptr": ptrs.setdefault(p.data_ptr(), len(ptrs)), "parameter": isinstance(p, nn.Parameter)}

    return {"type": type(module).__name__,
            "modules": {name: describe(m) for name, m in module.named_modules(remove_duplicate=False)},
            "attrs": {name: type(value).__name__ for name, value in vars(module).items() if not name.startswith("_")}
            | {name: type(value).__name__ for name, value in module._modules.items()},
            "params": {name: param(p) for name, p in module.named_parameters(remove_duplicate=False)},
            "buffers": {name: {"shape": tuple(b.shape), "dtype": str(b.dtype).removeprefix("torch.")}
                        for name, b in module.named_buffers()},
            "count": sum(p.numel() for p in module.parameters())}


def source_of(obj) -> str | None:
    try:
        return textwrap.dedent(inspect.getsource(obj))
    except (OSError, TypeError):
        return None


def learner_line(err: BaseException) -> str:
    """The innermost line of the traceback that is not course or library code."""
    frames = [f for f in traceback.extract_tb(err.__traceback__)
              if _PACKAGE_DIR not in Path(f.filename).resolve().parents
              and "site-packages" not in f.filename and "/torch/" not in f.filename]
    return (frames[-1].line or "").strip() if frames else ""


def factory(path: str):
    """A stand-in class or function of utils.checks ("utils.checks.s07:ScriptedCache")."""
    module, _, name = path.partition(":")
    if not (module == "utils.checks" or module.startswith("utils.checks.")) or not name:
        raise protocol.ProtocolError(f"{path!r} is not a stand-in of the course")
    obj = importlib.import_module(module)
    for part in name.split("."):
        obj = getattr(obj, part)
    return obj


def rebuild(record: Record, argument):
    """A record as its dataclass where the course has it (a check's ModelConfig), else the record."""
    module, _, name = record.type.partition(":")
    if module == "utils" or module.startswith("utils."):
        with contextlib.suppress(ImportError, AttributeError):
            cls = importlib.import_module(module)
            for part in name.split("."):
                cls = getattr(cls, part)
            if dataclasses.is_dataclass(cls):
                return cls(**{k: argument(v) for k, v in record.fields.items()})
    return Record(record.type, {k: argument(v) for k, v in record.fields.items()})


@contextlib.contextmanager
def one_thread():
    """torch on one thread: a check's tensors are tiny, and an idle thread's spin-wait would take the core
    that the other side of a check (the judge, or the kernel it waits for) needs."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


@contextlib.contextmanager
def quiet():
    """Warnings silenced and stderr to stdout: a warning or a debug print of a right answer must not
    cost points (nbgrader scores a cell with stderr output 0), and torch on one thread."""
    with one_thread(), warnings.catch_warnings(), contextlib.redirect_stderr(sys.stdout):
        warnings.simplefilter("ignore")
        yield


class Recorder(TorchFunctionMode):
    """The names of the torch functions called, and the first result holding a full [Tq, Tk] matrix."""

    def __init__(self, square: tuple[int, int, int] | None):
        super().__init__()
        self.names: list[str] = []
        self.limits = square
        self.square: tuple[str, tuple[int, ...]] | None = None

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", str(func))
        self.names.append(name)
        out = func(*args, **(kwargs or {}))
        if self.limits and self.square is None:
            Tq, Tk, lead = self.limits
            for t in (out if isinstance(out, (tuple, list)) else (out,)):
                if isinstance(t, torch.Tensor) and t.dim() >= 2 and (
                        tuple(t.shape[-2:]) in ((Tq, Tk), (Tk, Tq)) or t.numel() >= lead * Tq * Tk):
                    self.square = (name, tuple(t.shape))
                    break
        return out


@contextlib.contextmanager
def hooked(module, names: tuple[str, ...], seen: dict):
    """Forward hooks on the submodules ``names`` of ``module``: seen[name] collects (input, output)."""
    if not names:
        yield
        return

    def hook(name):
        def record(_module, args, kwargs, output):
            first = args[0] if args else next(iter(kwargs.values()), None)
            seen.setdefault(name, []).append((first, output))
        return record

    handles = [module.get_submodule(name).register_forward_hook(hook(name), with_kwargs=True) for name in names]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


# --- the judge's way in ---------------------------------------------------------------------------

SESSIONS: dict[str, Session] = {}
REPLY = ""   # the last answer, as protocol text
TARGET = "attention-course-judge"   # the comm target the judge opens in a grading kernel


def listen() -> None:
    """Let the judge talk to this kernel: a comm it opens to :data:`TARGET` gets each of its messages
    answered by :func:`serve`, on the same comm. (A comm is the Jupyter protocol's own way for code in a
    kernel to exchange messages with the other side; the kernel handles one without running a cell.)"""
    get_ipython().kernel.comm_manager.register_target(TARGET, _opened)   # noqa: F821  (an IPython kernel's)


def _opened(comm, _open_message) -> None:
    comm.on_msg(lambda message: _answer(comm, message))


def _answer(comm, message) -> None:
    serve(message["content"]["data"]["message"])
    comm.send({"reply": REPLY})


def serve(message: str) -> None:
    """Answer one protocol message from the judge: ``{"name": graded name, "op": call}``; a message
    with ``"begin": true`` starts a new session for that name."""
    global REPLY
    request = protocol.decode(message)
    name = request["name"]
    if request.get("begin") or name not in SESSIONS:
        SESSIONS.clear()
        SESSIONS[name] = Session(lambda: _user_namespace()[name] if name in _user_namespace() else _undefined(name))
    REPLY = protocol.encode(SESSIONS[name].run(request["op"]))


def _user_namespace() -> dict:
    try:
        return get_ipython().user_ns   # noqa: F821  (the judge talks to IPython kernels only)
    except NameError:
        return vars(sys.modules["__main__"])


def _undefined(name: str):
    raise Undefined(f"{name} 还没有定义（先运行定义它的单元格）。")
