"""How a check runs: its Chinese error with a stable code and a ladder of hints, the driver that
answers a check's calls, and the decorator that makes ``check_<name>(candidate)``.

A check is a generator function ``definition(extended=False, seed=0)``. It yields the calls it
makes on the learner's code (utils/checks/protocol.py), receives what came back as data, compares
that with the references and the known misconceptions' outputs (utils/checks/oracle.py) and raises
:class:`CheckError` naming what is wrong; it returns quietly when all is right. A :class:`Driver`
answers its calls: :class:`LocalDriver` in the learner's own process (the ``check_<name>`` a notebook
calls), autograder/judge.py's through the student's kernel, in grading. Either way the check is the
same code; only where the learner's code runs differs.
"""
from __future__ import annotations

import functools
import inspect
import re
import time
from collections.abc import Callable

import torch

from . import agent
from .errors import FAIL_MARK, PASS_MARK, CheckError  # noqa: F401  (FAIL_MARK: the checks' API)
from .protocol import Call, Failure, Source

LAST_HINT = 3                     # hint 1 the idea, 2 where it was taught, 3 a first concrete step
# Said of a finding about a property that only the kernel running the learner's code can observe (protocol.Watch,
# Source, a length): in grading the kernel could lie about it, while outputs are compared by the judge itself.
OBSERVED = "（这一项由运行你代码的内核观察得到）"
REVEAL = LAST_HINT + 1            # the self-study edition's last step: the reference answer


def _explain_name_error(shell, etype, value, tb, tb_offset=None):
    """IPython hook: a NameError in a notebook says, in Chinese, what usually causes it."""
    shell.showtraceback((etype, value, tb), tb_offset=tb_offset)
    name = getattr(value, "name", None) or str(value)
    print(f"提示：{name!s} 还没有定义。先运行定义它的单元格；如果那个单元格报错了，先修好它。")
    return None


def install_notebook_hooks() -> None:
    """Inside IPython/Jupyter: explain a NameError in Chinese."""
    try:
        shell = get_ipython()  # noqa: F821  (defined inside IPython only)
    except NameError:
        return
    shell.set_custom_exc((NameError,), _explain_name_error)


# --- drivers ----------------------------------------------------------------------------------

class Driver:
    """Runs a check's definition, answering each call it yields (:meth:`answer`) and throwing a
    :class:`CheckError` into it where the learner's code failed (so a check may catch one)."""

    def __init__(self, name: str):
        self.name = name

    def answer(self, op):
        """The kernel's answer to ``op``: data, a handle, an Observed or a Failure."""
        raise NotImplementedError

    def run(self, definition: Callable, extended: bool = False, seed: int = 0):
        """What the definition returns (the quiz keys it leaves to the hidden test), or a CheckError."""
        checking = definition(extended=extended, seed=seed)
        reply, error = None, None
        while True:
            try:
                op = checking.throw(error) if error is not None else checking.send(reply)
            except StopIteration as done:
                return done.value
            reply, error = None, None
            try:
                reply = self.perform(op)
            except CheckError as err:
                error = err

    def perform(self, op):
        reply = self.answer(op)
        if isinstance(reply, Failure):
            raise self.failure(op, reply)
        return reply

    def failure(self, op, failed: Failure) -> CheckError:
        if failed.kind == "not-implemented":
            return CheckError("not-implemented", failed.message if failed.error == "NameError"
                              else f"{self.name} 尚未实现。")
        if failed.kind == "check":
            return CheckError(failed.code, failed.message)
        line = f"\n   出错的行：{failed.line}" if failed.line else ""
        crashed = CheckError("crashed", f"运行时抛出 {failed.error}: {failed.message}{line}", error=failed.error)
        hints = op.hints if isinstance(op, Call) else None
        if hints:
            source = self.answer(Source(op.hints_of if op.hints_of is not None else op.target))
            for code, pattern in hints.items():
                if isinstance(source, str) and re.search(pattern, source):
                    return CheckError(code, crashed.finding)
        return crashed


class LocalDriver(Driver):
    """Answers the calls in this very process: the learner's notebook, the course's own tests."""

    def __init__(self, name: str, candidate):
        super().__init__(name)
        self.session = agent.Session(functools.partial(_present, name, candidate))

    def answer(self, op):
        return self.session.run(op)


def _present(name: str, candidate):
    if candidate is None:
        raise agent.Undefined(f"{name} 还没有定义（先运行定义它的单元格）。")
    return candidate


def check(name: str):
    """Make ``check_<name>(candidate, extended=False, seed=0, hint=1)`` from the generator function
    ``definition(extended, seed)``: it runs the definition here, prints the pass line or raises the
    CheckError with hints up to ``hint``; ``hint=4`` shows the reference answer (self-study edition).
    The definition is kept as ``.definition``, for the judge."""

    def decorate(definition: Callable) -> Callable:
        @functools.wraps(definition)
        def in_notebook(candidate, extended: bool = False, seed: int = 0, hint: int = 1):
            agent.PASSED.pop(name, None)
            if hint >= REVEAL:
                return reveal(name)
            from . import oracle
            if oracle.stored_only() and (extended or seed != 0):
                raise with_hints(CheckError("hidden-only", "班级版只存了可见检查（默认参数）要用的结果；extended=True "
                                                        "或别的 seed 的检查只在教师评分时运行。"), name, hint)
            start = time.perf_counter()
            try:
                with torch.random.fork_rng(devices=[]), agent.quiet():
                    judged_later = LocalDriver(name, candidate).run(definition, extended, seed)
            except CheckError as err:
                raise with_hints(err, name, hint) from None
            agent.PASSED[name] = candidate
            print(pass_line(name, judged_later, time.perf_counter() - start))

        in_notebook.definition = definition
        in_notebook.exercise = name
        return in_notebook
    return decorate


def pass_line(name: str, judged_later, seconds: float | None = None) -> str:
    """``✓ name 通过全部检查``; a quiz whose hidden test judges more keys says which."""
    verdict = (f"通过可见的检查（{'、'.join(judged_later)} 只由隐藏测试评分）" if judged_later else "通过全部检查")
    return f"{PASS_MARK} {name} {verdict}" + ("" if seconds is None else f"（{seconds:.2f} 秒）")


def with_hints(err: CheckError, name: str, hint: int) -> CheckError:
    """``err`` showing hints up to ``hint``, and how to ask for the next one."""
    err.level = max(1, min(hint, LAST_HINT))
    if err.level < LAST_HINT:
        err.next_call = f"想要下一条提示：check_{name}({name}, hint={err.level + 1})"
    elif _reference_of(name) is not None:
        err.next_call = f"还是卡住：check_{name}({name}, hint={REVEAL}) 显示参考答案（自学版才有）"
    return err


def _reference_of(name: str):
    from .. import edition
    if edition.IS_STUDENT:
        return None
    try:
        from .. import reference
    except ImportError:
        return None
    return getattr(reference, name, None)


def reveal(name: str) -> None:
    """Print the reference answer of ``name`` (self-study edition only)."""
    reference = _reference_of(name)
    if reference is None:
        print(f"班级版没有 {name} 的参考答案：用 hint=1、2、3 的提示，或者问老师。")
        return
    print(f"{name} 的参考答案（来自 solutions/ 的答案单元格）：\n")
    print(inspect.getsource(reference))


# --- the demos' use of the learner's code ------------------------------------------------------

def mine_or_reference(name: str, candidate):
    """The learner's implementation if it passed its check, else the course's reference.

    Demos call this so that a notebook keeps running when an exercise is not done yet. The class
    edition holds no reference of an open assignment: there it is a stand-in that, once the demo uses
    it, says in one line that the demo needs the exercise first (utils/learner_solutions.py).
    """
    if candidate is not None and agent.PASSED.get(name) is candidate:
        return candidate
    from .. import reference
    if name in getattr(reference, "_OPEN", ()):
        from ..pending import Pending
        return Pending(name, f"这个演示要用到你的 {name}：先让它通过上面的检查，再运行这个单元格"
                             "（班级版课程包里没有还没截止的作业的参考实现）。")
    print(f"（你的 {name} 还没有通过检查，下面的演示暂用课程的参考实现。）")
    return getattr(reference, name)

