"""The judge: a graded test cell's verdict, computed outside the student's process.

In grading, a test cell's code is not run in the student's kernel. Its calls (``check_attention(attention)``,
``check_attention(attention, extended=True, seed=2024)``) are read from the cell, whose source nbgrader
restores from the gradebook; each check's definition (utils/checks/core.py) runs here, in the grading
process, with a fresh seed; the calls it makes on the student's code go to the kernel as protocol
messages (utils/checks/protocol.py), where utils/checks/agent.py runs them and answers with data. The
references, the misconceptions' outputs and the hidden cases never enter the kernel; nothing the kernel
does can change a comparison made here. The only way to a mark is to return what a correct
implementation returns, on inputs the kernel has never seen.

The judge writes the cell's outcome as nbgrader reads it: no error output (the points), or one error
output with the ``[code]``, the finding and the first hint. A test cell of another form (an instructor's
own) is left to the kernel, as nbgrader would run it, with a warning in the log.
"""
from __future__ import annotations

import ast
import contextlib
import dataclasses
import secrets
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from queue import Empty
from time import monotonic
from uuid import uuid4

from jupyter_client.session import msg_header
from jupyter_core.utils import ensure_async, run_sync
from nbclient.exceptions import CellTimeoutError, DeadKernelError
from nbformat import NotebookNode
from traitlets import Integer
from traitlets.config import LoggingConfigurable

from utils.checks import agent, core, protocol
from utils.checks.core import CheckError, Driver, pass_line
from utils.checks.protocol import Failure, Observed

from .kernel_channel import KernelLied
from .source_calls import called_by

Ask = Callable[[str], str]   # one protocol message to the kernel -> its answer (protocol text)
AGENT = "__import__('utils.checks.agent', fromlist=['listen'])"
# A check's fresh seed is drawn below this: a million, more than a kernel can tell apart in advance, and
# small enough that a check adding its seed to float32 data (values that name their place) stays exact.
SEEDS = 1_000_000
# The longest source of the learner's code a check reads: a method is a few hundred characters, and a crash
# hint's regex can take time quadratic in a line's length (a line of 1.2 MB took minutes).
MAX_SOURCE = 20_000


@dataclass(frozen=True)
class CheckCall:
    """One ``check_<exercise>(<exercise>[, extended=…][, seed=…])`` line of a test cell."""
    exercise: str
    extended: bool


def check_calls(source: str) -> list[CheckCall] | None:
    """The check calls a test cell makes, or None when it holds anything else."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    calls = []
    for statement in tree.body:
        call = statement.value if isinstance(statement, ast.Expr) else None
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id.startswith("check_")):
            return None
        exercise = call.func.id.removeprefix("check_")
        keywords = {k.arg: k.value for k in call.keywords}
        literal = all(isinstance(v, ast.Constant) for v in keywords.values())
        if (len(call.args) != 1 or not isinstance(call.args[0], ast.Name) or call.args[0].id != exercise
                or set(keywords) - {"extended", "seed"} or not literal):
            return None
        calls.append(CheckCall(exercise, bool(keywords["extended"].value) if "extended" in keywords else False))
    return calls or None


class KernelDriver(Driver):
    """Answers a check's calls through the student's kernel (``ask``), reading each answer as
    untrusted data: what does not decode, or is not the kind of answer the call has, is a failure of
    the student's code. A source longer than MAX_SOURCE is not read (a check's regexes run on it). The
    torch functions a watched call is reported to have called include ``called``: what the submitted
    source of the graded name calls (autograder/source_calls.py), whatever the kernel says."""

    def __init__(self, name: str, ask: Ask, called: tuple[str, ...] = ()):
        super().__init__(name)
        self.ask, self.begun, self.called = ask, False, called

    def answer(self, op):
        message = protocol.encode({"name": self.name, "op": op, "begin": not self.begun})
        self.begun = True
        try:
            reply = protocol.decode(self.ask(message))
        except protocol.ProtocolError as err:
            return Failure("crashed", f"评分端读不懂内核的回答（{err}）", error="ProtocolError")
        if not _fits(op, reply):
            return Failure("crashed", f"内核对 {type(op).__name__} 的回答不是它该有的样子", error="ProtocolError")
        if isinstance(op, protocol.Source) and isinstance(reply, str) and len(reply) > MAX_SOURCE:
            return None   # as a source that cannot be found
        if isinstance(reply, Observed) and op.watch.torch_calls:
            return dataclasses.replace(reply, torch_calls=(*reply.torch_calls, *self.called))
        return reply


def _fits(op, reply) -> bool:
    """Whether ``reply`` has the shape of an answer to ``op`` (its contents are the check's business)."""
    if isinstance(reply, Failure):
        return True
    if isinstance(op, protocol.Call):
        return isinstance(reply, Observed) == (op.watch is not None)
    if isinstance(op, (protocol.Describe, protocol.Layout, protocol.State)):
        return isinstance(reply, dict)
    if isinstance(op, protocol.Source):
        return reply is None or isinstance(reply, str)
    if isinstance(op, (protocol.Load, protocol.Passed)):
        return reply is None
    return True


class _Counted:
    """An Ask that counts its calls (for the log)."""

    def __init__(self, ask: Ask):
        self.ask, self.calls = ask, 0

    def __call__(self, message: str) -> str:
        self.calls += 1
        return self.ask(message)


class Judge(LoggingConfigurable):
    """Judges the graded test cells of a notebook through its kernel (see the module docstring)."""

    seed = Integer(0, help="The seed of every check (0: a fresh random one for each test cell, from 1 to "
                           "SEEDS - 1, logged). Set it to re-grade exactly as before.").tag(config=True)

    def decides(self, cell) -> bool:
        """Whether this test cell is one the judge decides (else the kernel runs it)."""
        return check_calls(cell.source) is not None

    def warn_left_to_kernel(self, cell) -> None:
        """Log that a test cell the judge does not decide is run, and its verdict given, by the kernel."""
        self.log.warning("test cell %s is not of the form check_<name>(<name>, …): the kernel runs it and its "
                         "verdict is the kernel's", cell.metadata.get("nbgrader", {}).get("grade_id"))

    def outputs(self, cell, ask: Ask, sources: list[str]) -> list[NotebookNode]:
        """The test cell's outputs as the judge decides them (``sources``: the submission's code cells)."""
        lines = []
        for call in check_calls(cell.source):
            seed = self.seed or secrets.randbelow(SEEDS - 1) + 1
            counted = _Counted(ask)
            start = monotonic()
            try:
                judged_later = self._run(call, seed, counted, called_by(sources, call.exercise))
            except CheckError as err:
                self._log(call, seed, counted, start, f"[{err.code}]")
                return [_stdout(lines), _error(err, call.exercise)] if lines else [_error(err, call.exercise)]
            self._log(call, seed, counted, start, "passed")
            lines.append(pass_line(call.exercise, judged_later))
            if not call.extended:   # the demos after it may use the student's own (core.mine_or_reference)
                with contextlib.suppress(protocol.ProtocolError):
                    ask(protocol.encode({"name": call.exercise, "op": protocol.Passed(call.exercise)}))
        return [_stdout(lines)]

    def _log(self, call: CheckCall, seed: int, counted: _Counted, start: float, verdict: str) -> None:
        self.log.info("check_%s (extended=%s, seed %d): %s; %d calls to the kernel, %.2f s", call.exercise,
                      call.extended, seed, verdict, counted.calls, monotonic() - start)

    def _run(self, call: CheckCall, seed: int, ask: Ask, called: tuple[str, ...]):
        definition = getattr(__import__("utils.checks", fromlist=["x"]), f"check_{call.exercise}").definition
        try:
            with agent.one_thread():
                return KernelDriver(call.exercise, ask, called).run(definition, call.extended, seed)
        except (CheckError, CellTimeoutError, DeadKernelError, KernelLied):   # a verdict; the executor's to handle
            raise
        except Exception as err:   # a check that could not read what the kernel answered
            self.log.warning("check_%s failed on the kernel's answers: %s", call.exercise, traceback.format_exc())
            raise CheckError("crashed", f"检查读不懂内核的回答（{type(err).__name__}）：提交的代码改动了检查与内核"
                                        "之间的通信，或返回了检查无法理解的对象。") from None


def _stdout(lines: list[str]) -> NotebookNode:
    return NotebookNode(output_type="stream", name="stdout", text="".join(f"{line}\n" for line in lines))


def _error(err: CheckError, exercise: str) -> NotebookNode:
    err = core.with_hints(err, exercise, 1)
    err.next_call = f"在自己的 notebook 里运行 check_{exercise}({exercise}, hint=2) 可以看下一条提示。"
    return NotebookNode(output_type="error", ename="CheckError", evalue=f"[{err.code}] {err.finding}",
                        traceback=err._render_traceback_())


# --- the way to the kernel: a comm on the executing client ------------------------------------------

def kernel_ask(client, cell, timeout: float) -> Ask:
    """Ask through ``client`` (nbclient's NotebookClient running the notebook) for one test cell: the first
    message tells the agent to listen and opens a comm to it (utils/checks/agent.py's ``listen``), each
    message goes as one comm message. The whole cell has ``timeout`` seconds, the grading side's own work on
    the answers included (the deadline is checked before each question too); past it the kernel is
    interrupted and CellTimeoutError raised (the executor then tries the cell once more in a fresh kernel,
    as for any cell)."""
    deadline, comm_id, opened = monotonic() + timeout, uuid4().hex, False

    def ask(message: str) -> str:
        nonlocal opened
        run_sync(_in_time)(client, cell, deadline, timeout)
        if not opened:
            run_sync(_open)(client, cell, comm_id, deadline, timeout)
            opened = True
        return run_sync(_ask)(client, cell, comm_id, message, deadline, timeout)
    return ask


def _request(client, msg_type: str, content: dict) -> dict:
    """A message to the kernel whose id the kernel cannot predict (jupyter_client's count up from the
    session's), so that only an answer sent after it can name it as its parent."""
    session = client.kc.session
    return session.msg(msg_type, content, header=msg_header(secrets.token_hex(16), msg_type, session.username,
                                                           session.session))


async def _open(client, cell, comm_id: str, deadline: float, timeout: float) -> None:
    """Have the agent listen (one short execute request), then open the comm to it."""
    content = {"code": f"{AGENT}.listen()", "silent": True, "store_history": False, "allow_stdin": False,
               "stop_on_error": False}
    request = _request(client, "execute_request", content)
    client.kc.shell_channel.send(request)
    while True:
        reply = await _next(client.kc.shell_channel, client, cell, deadline, timeout)
        if reply["parent_header"].get("msg_id") == request["header"]["msg_id"]:
            break
    if reply["content"].get("status") != "ok":
        raise protocol.ProtocolError("the kernel's agent does not listen")
    client.kc.shell_channel.send(_request(client, "comm_open", {"comm_id": comm_id, "target_name": agent.TARGET,
                                                                "data": {}}))


async def _ask(client, cell, comm_id: str, message: str, deadline: float, timeout: float) -> str:
    """One comm message to the agent, and its answer: the first comm message the kernel sends back while it
    handles ours (the kernel going idle first means there is none: ProtocolError)."""
    request = _request(client, "comm_msg", {"comm_id": comm_id, "data": {"message": message}})
    client.kc.shell_channel.send(request)
    while True:
        reply = await _next(client.kc.iopub_channel, client, cell, deadline, timeout)
        if reply["parent_header"].get("msg_id") != request["header"]["msg_id"]:
            continue
        if reply["msg_type"] == "comm_msg" and reply["content"].get("comm_id") == comm_id:
            return _answer_text(reply["content"].get("data"))
        if reply["msg_type"] == "status" and reply["content"].get("execution_state") == "idle":
            raise protocol.ProtocolError("the kernel did not answer the call")


async def _in_time(client, cell, deadline: float, timeout: float) -> None:
    """CellTimeoutError, the kernel interrupted, once the deadline has passed."""
    if monotonic() >= deadline:
        await ensure_async(client.km.interrupt_kernel())
        raise CellTimeoutError.error_from_timeout_and_cell("the judge's calls timed out", timeout, cell)


async def _next(channel, client, cell, deadline: float, timeout: float) -> dict:
    """The next message on ``channel`` before the deadline (then the kernel is interrupted, and
    CellTimeoutError); DeadKernelError if the kernel has died meanwhile."""
    while True:
        await _in_time(client, cell, deadline, timeout)
        try:
            return await ensure_async(channel.get_msg(timeout=min(deadline - monotonic(), 1.0)))
        except Empty:
            if not await ensure_async(client.kc.is_alive()):
                raise DeadKernelError("Kernel died") from None


def _answer_text(data) -> str:
    """The agent's answer (protocol text) out of its comm message's data; ProtocolError for anything else."""
    answer = data.get("reply") if isinstance(data, dict) else None
    if not isinstance(answer, str) or len(answer) > 2 * protocol.MAX_BYTES:
        raise protocol.ProtocolError("the kernel's answer is not protocol text")
    return answer
