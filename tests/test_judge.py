"""The judge's parts: the protocol's codec takes data only, the test cell's calls are read strictly, a
kernel's answer that is not data or not the answer a call has is the student's failure, and the outcome
the judge writes is nbgrader's (one error output with the code and the first hint, or the pass line)."""
from __future__ import annotations

import base64
import json
import time

import nbformat
import numpy as np
import pytest
import torch
from traitlets.config import Config

from autograder import judge
from autograder.config import configure
from autograder.preprocessors import ResilientExecute
from utils.checks import protocol
from utils.checks.codes import parse_code
from utils.checks.core import CheckError
from utils.checks.protocol import CANDIDATE, MAX_BYTES, Call, Failure, Handle, Layout, ProtocolError, Record, Watch


@pytest.mark.parametrize("value", [
    None, True, 3, -2.5, float("inf"), "注意力", [1, (2, 3)], (torch.float16,), {"a": 1, 2: "b"},
    torch.randn(2, 3), torch.tensor([[True, False]]), torch.arange(6, dtype=torch.int64).view(3, 2),
    torch.randn(4, dtype=torch.bfloat16), torch.empty(0, 3), torch.Size([2, 5]), np.int64(7), np.ones((2, 2)),
    Record("utils.reference.s10_decoder_only_model:ModelConfig", {"vocab_size": 11}),
    Handle(3, "Head", ("module", "callable")), Failure("crashed", "boom", error="ValueError"),
    Call(CANDIDATE, (torch.ones(2),), {"dim": -1}, pure=True, watch=Watch(torch_calls=True), hints={"x": "y"}),
])
def test_data_crosses_the_codec_unchanged(value):
    back = protocol.decode(protocol.encode(value))
    assert type(back) is type(value)
    if isinstance(value, torch.Tensor):
        assert back.dtype == value.dtype and torch.equal(back, value)
    elif isinstance(value, np.ndarray):
        assert np.array_equal(back, value)
    elif isinstance(value, float) and value != value:
        assert back != back
    elif isinstance(value, Call):   # its tensors have no ==: every field, tensors by their bytes, as encoded again
        assert protocol.encode(back) == protocol.encode(value)
    else:
        assert back == value


def test_nothing_but_data_is_encoded():
    with pytest.raises(ProtocolError):
        protocol.encode(lambda: None)
    with pytest.raises(ProtocolError):
        protocol.encode(torch.nn.Linear(2, 2))
    with pytest.raises(ProtocolError):
        protocol.encode(np.array([object()], dtype=object))


def _tensor(data: bytes, shape, dtype="float32") -> str:
    return json.dumps({"$": "tensor", "dtype": dtype, "shape": shape, "data": base64.b64encode(data).decode()})


@pytest.mark.parametrize("message", [
    "not json", "[1, 2]", '{"no": "tag"}', '{"$": "pickle", "data": "gASVAAAAAAAAAAB9lC4="}',
    _tensor(b"\0" * 8, [3]), _tensor(b"\0" * 8, [2], dtype="object"), _tensor(b"\0" * 4, [-1]),
    '{"$": "tensor", "dtype": "float32", "shape": [1], "data": "%%%"}',
    json.dumps({"$": "numpy", "dtype": "|O", "shape": [1], "data": base64.b64encode(b"\0" * 8).decode()}),
    '{"$": "Call", "fields": {"target": null, "exploit": 1}}', '{"$": "float", "repr": "__import__(\'os\')"}',
    '{"$": "dict", "items": [[{"$": "list", "items": []}, 1]]}',
    "x" * (protocol.MAX_BYTES + 1),
])
def test_what_is_no_message_of_the_protocol_is_refused(message):
    with pytest.raises(ProtocolError):
        protocol.decode(message)


@pytest.mark.parametrize(("source", "calls"), [
    ("check_attention(attention)", [judge.CheckCall("attention", False)]),
    ("# 隐藏测试\n### BEGIN HIDDEN TESTS\ncheck_Head(Head, extended=True, seed=2024)\n### END HIDDEN TESTS",
     [judge.CheckCall("Head", True)]),
    ("check_a(a)\ncheck_b(b, seed=3)", [judge.CheckCall("a", False), judge.CheckCall("b", False)]),
    ("check_a(b)", None), ("check_a(a, extended=flag)", None), ("x = 1\ncheck_a(a)", None), ("check_a(a, c=1)", None),
    ("print('✓')", None), ("", None), ("check_a(a", None),
])
def test_a_test_cell_is_judged_only_in_the_form_the_course_writes(source, calls):
    assert judge.check_calls(source) == calls


def test_a_kernel_answer_that_is_no_data_or_not_the_calls_answer_is_a_failure():
    call = Call(CANDIDATE, (torch.ones(1),))
    assert judge.KernelDriver("x", lambda _m: "garbage").answer(call).kind == "crashed"
    observed = protocol.encode(protocol.Observed(torch.ones(1)))
    assert judge.KernelDriver("x", lambda _m: observed).answer(call).kind == "crashed", "a watch was not asked for"
    assert judge.KernelDriver("x", lambda _m: protocol.encode(torch.ones(1))).answer(Layout(CANDIDATE)).kind == \
        "crashed"
    answer = judge.KernelDriver("x", lambda _m: protocol.encode(torch.ones(1))).answer(call)
    assert torch.equal(answer, torch.ones(1))


def test_the_first_message_of_a_check_begins_a_session():
    sent = []
    driver = judge.KernelDriver("attention", lambda m: sent.append(protocol.decode(m)) or protocol.encode(None))
    driver.answer(Layout(CANDIDATE))
    driver.answer(Layout(CANDIDATE))
    assert [m["begin"] for m in sent] == [True, False] and {m["name"] for m in sent} == {"attention"}


@pytest.mark.parametrize("data", [None, "x", {}, {"reply": 42}, {"reply": ["x"]}, {"error": "x"},
                                  {"reply": "x" * (2 * MAX_BYTES + 1)}])
def test_a_comm_message_without_the_agents_text_is_refused(data):
    with pytest.raises(ProtocolError):
        judge._answer_text(data)


def test_the_agents_text_is_read_from_its_comm_message():
    assert judge._answer_text({"reply": '{"a"'}) == '{"a"'


def test_the_written_outcome_is_the_code_the_finding_and_the_first_hint_only():
    err = CheckError("wrong", "输出不对。")
    output = judge._error(err, "attention")
    assert output.output_type == "error" and parse_code(output.evalue) == "wrong"
    text = "\n".join(output.traceback)
    entry = err.entry
    assert entry.idea in text and entry.where not in text and "hint=2" in text


# --- the channel to a real kernel ------------------------------------------------------------------------

RIGHT_SOFTMAX = "import torch\ndef softmax(x, dim=-1):\n    e = torch.exp(x - x.max(dim=dim, keepdim=True).values)\n" \
                "    return e / e.sum(dim=dim, keepdim=True)\n"
# A right softmax in a kernel whose end of the judge's channel is broken: each gets no mark, and at once.
BROKEN_CHANNELS = {
    "silent": "from utils.checks import agent\nagent._answer = lambda comm, message: None\n",
    "deaf": "from utils.checks import agent\nagent.listen = lambda: 1 / 0\n",
    "no-text": "from utils.checks import agent\nagent._answer = lambda comm, message: comm.send({'reply': 42})\n",
}
CELL_SECONDS = 60


def judged_softmax(tmp_path, code: str) -> tuple[list, float]:
    """The outputs the judge writes for ``check_softmax(softmax)`` after ``code`` ran in a real grading kernel,
    and how long the notebook took."""
    config = Config()
    configure(config)
    config.ResilientExecute.timeout = CELL_SECONDS
    test = nbformat.v4.new_code_cell("check_softmax(softmax)", metadata={"nbgrader": {
        "grade": True, "solution": False, "locked": True, "grade_id": "test_softmax", "points": 1}})
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(code), test])
    start = time.monotonic()
    ResilientExecute(config=config).preprocess(nb, {"metadata": {"path": str(tmp_path)}})
    return nb.cells[1].outputs, time.monotonic() - start


@pytest.mark.parametrize("broken", BROKEN_CHANNELS)
def test_a_kernel_that_breaks_the_channel_gets_no_mark_without_waiting_out_the_cell(tmp_path, broken):
    outputs, seconds = judged_softmax(tmp_path, RIGHT_SOFTMAX + BROKEN_CHANNELS[broken])
    errors = [o for o in outputs if o.output_type == "error"]
    assert errors and parse_code(errors[0].evalue) == "crashed" and "读不懂内核的回答" in errors[0].evalue, outputs
    assert seconds < CELL_SECONDS / 2, f"the judge waited {seconds:.0f} s for an answer that could not come"


def test_the_same_kernel_with_the_channel_intact_passes(tmp_path):
    outputs, _ = judged_softmax(tmp_path, RIGHT_SOFTMAX)
    assert [o.output_type for o in outputs] == ["stream"] and "✓" in outputs[0].text, outputs
