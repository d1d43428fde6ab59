"""The judge bounds what a kernel sends it and its own work on it; each test is a kernel that lies in
one way, for real, in a grading kernel started as grading starts it (ResilientExecute).

* a message larger than the protocol allows is refused before it is decoded (zmq's message size on the
  client's sockets), and one of too many parts is that kernel's lie;
* text the kernel sends is capped before a regex of a check runs on it;
* an answer sent before its question is not taken (request ids a kernel cannot predict);
* a badly signed message is that kernel's lie: its cell scores nothing, with the reason in Chinese, and
  the rest of the notebook is graded;
* a rule about how the answer is computed (no built-in softmax) is decided from the submitted source too,
  not only from what the kernel reports about the calls it made.
"""
from __future__ import annotations

import threading
import time

import nbformat
import psutil
from traitlets.config import Config

from autograder.config import configure
from autograder.preprocessors import ResilientExecute
from utils.checks.codes import parse_code

from .test_judge import RIGHT_SOFTMAX

MiB = 1024 * 1024


def code(source: str, grade_id: str = "") -> nbformat.NotebookNode:
    """A code cell; with ``grade_id`` a student's answer cell, as nbgrader marks it."""
    answer = {"nbgrader": {"solution": True, "grade": False, "locked": False, "grade_id": grade_id}}
    return nbformat.v4.new_code_cell(source, metadata=answer if grade_id else {})


def graded_cell(source: str, grade_id: str) -> nbformat.NotebookNode:
    return nbformat.v4.new_code_cell(source, metadata={"nbgrader": {
        "grade": True, "solution": False, "locked": True, "grade_id": grade_id, "points": 1}})


def graded(tmp_path, cells: list, timeout: int = 60) -> tuple[list, float]:
    """The notebook of ``cells`` after grading's execution, and how long it took."""
    config = Config()
    configure(config)
    config.ResilientExecute.timeout = timeout
    nb = nbformat.v4.new_notebook(cells=cells)
    start = time.monotonic()
    ResilientExecute(config=config).preprocess(nb, {"metadata": {"path": str(tmp_path)}})
    return nb.cells, time.monotonic() - start


def errors(cell) -> list[str]:
    return [parse_code(o.evalue) for o in cell.outputs if o.output_type == "error"]


def passed(cell) -> bool:
    return [o.output_type for o in cell.outputs] == ["stream"] and "✓" in cell.outputs[0].text


# --- size ---------------------------------------------------------------------------------------------------

# 4 buffers of 200 MiB attached to one IOPub message (the same bytes four times: cheap for the kernel)
BIG_BUFFERS = '''
_k = get_ipython().kernel
_big = b"\\0" * (200 * 1024 * 1024)
_k.session.send(_k.iopub_socket, "display_data", {"data": {"text/plain": "x"}, "metadata": {}},
                parent=_k.get_parent(), buffers=[_big] * 4)
del _big
'''


class PeakMemory:
    """This process's peak resident memory while the block runs, sampled every 10 ms."""

    def __enter__(self):
        self.process, self.peak, self.running = psutil.Process(), 0, True
        self.base = self.process.memory_info().rss
        self.thread = threading.Thread(target=self._sample, daemon=True)
        self.thread.start()
        return self

    def _sample(self):
        while self.running:
            self.peak = max(self.peak, self.process.memory_info().rss)
            time.sleep(0.01)

    def __exit__(self, *exc):
        self.running = False
        self.thread.join()

    @property
    def grown(self) -> int:
        return self.peak - self.base


def test_a_message_larger_than_the_protocol_allows_is_refused_before_it_is_received(tmp_path):
    with PeakMemory() as memory:
        cells, _ = graded(tmp_path, [code(RIGHT_SOFTMAX, "softmax"), code(BIG_BUFFERS),
                                     graded_cell("check_softmax(softmax)", "test_softmax")])
    assert memory.grown < 300 * MiB, f"the grading process grew by {memory.grown / MiB:.0f} MiB"
    # zmq dropped the message and reconnected: the rest of that cell's messages, its end too, were lost with it
    assert errors(cells[1]) == ["timeout"], cells[1].outputs
    assert passed(cells[2]), cells[2].outputs


MANY_PARTS = '''
_k = get_ipython().kernel
_k.session.send(_k.iopub_socket, "display_data", {"data": {"text/plain": "x"}, "metadata": {}},
                parent=_k.get_parent(), buffers=[b"x"] * 100_000)
'''


def test_a_message_of_too_many_parts_is_the_kernels_lie(tmp_path):
    cells, _ = graded(tmp_path, [code(RIGHT_SOFTMAX, "softmax"), code(MANY_PARTS),
                                 graded_cell("check_softmax(softmax)", "test_softmax")])
    assert errors(cells[1]) == ["kernel-lied"], cells[1].outputs
    assert passed(cells[2]), cells[2].outputs


# --- the grading side's own work ------------------------------------------------------------------------------

# A KVCache whose update crashes, with a line the crash hint's regex (07's cat(...dim=...)) is quadratic on.
LONG_LINE_CACHE = '''
class KVCache:
    def __init__(self, *args, **kwargs):
        pass

    def __len__(self):
        return 0

    def update(self, k, v):
        note = "''' + "cat(" * 75_000 + '''"
        raise RuntimeError("boom")
'''


def test_text_a_kernel_sends_is_capped_before_a_regex_runs_on_it(tmp_path):
    start = time.process_time()
    cells, _ = graded(tmp_path, [code(LONG_LINE_CACHE, "KVCache"),
                                 graded_cell("check_KVCache(KVCache)", "test_KVCache")])
    cpu = time.process_time() - start
    assert errors(cells[1]) == ["crashed"], cells[1].outputs
    assert cpu < 10, f"the grading side spent {cpu:.0f} CPU-s on one crashed cell"


# --- the reply to the call made -----------------------------------------------------------------------------

# When the judge opens its comm, the kernel sends answers (not protocol text) to the questions it expects next,
# guessing their ids from the comm_open's (jupyter_client counts its message ids up).
PRE_ANSWERED = RIGHT_SOFTMAX + '''
from utils.checks import agent as _agent
_opened = _agent._opened
def _pre_answer(comm, open_message):
    _opened(comm, open_message)
    session, pid, n = (open_message["header"]["msg_id"].rsplit("_", 2) + ["", "", ""])[:3]
    k = get_ipython().kernel
    for i in range(int(n) + 1 if n.isdigit() else 0, int(n) + 200 if n.isdigit() else 200):
        parent = {"header": {"msg_id": f"{session}_{pid}_{i}", "msg_type": "comm_msg", "session": session}}
        k.session.send(k.iopub_socket, "comm_msg", {"comm_id": comm.comm_id, "data": {"reply": "{}"}}, parent=parent)
_agent._opened = _pre_answer
'''


def test_an_answer_sent_before_its_question_is_not_taken(tmp_path):
    cells, _ = graded(tmp_path, [code(PRE_ANSWERED, "softmax"), graded_cell("check_softmax(softmax)", "test_softmax")])
    assert passed(cells[1]), cells[1].outputs


# --- a badly signed message -----------------------------------------------------------------------------------

BAD_SIGNATURE = '''
from jupyter_client.session import Session
_k = get_ipython().kernel
Session(key=b"not the key").send(_k.iopub_socket, "stream", {"name": "stdout", "text": "满分"}, parent=_k.get_parent())
'''


def test_a_badly_signed_message_costs_its_cell_and_the_rest_is_graded(tmp_path):
    cells, _ = graded(tmp_path, [code(RIGHT_SOFTMAX, "softmax"), code(BAD_SIGNATURE),
                                 graded_cell("check_softmax(softmax)", "test_softmax")])
    assert errors(cells[1]) == ["kernel-lied"], cells[1].outputs
    assert "签名" in cells[1].outputs[-1].evalue
    assert passed(cells[2]), cells[2].outputs


# --- rules decided from the submitted source ------------------------------------------------------------------

HIDDEN_SOFTMAX = '''
import torch
def softmax(x, dim=-1):
    with torch._C.DisableTorchFunction():   # the kernel's record of torch calls does not see this one
        return torch.softmax(x, dim)
'''


def test_a_built_in_softmax_the_kernel_does_not_report_is_found_in_the_source(tmp_path):
    cells, _ = graded(tmp_path, [code(HIDDEN_SOFTMAX, "softmax"),
                                 graded_cell("check_softmax(softmax)", "test_softmax")])
    assert errors(cells[1]) == ["uses-builtin-softmax"], cells[1].outputs
