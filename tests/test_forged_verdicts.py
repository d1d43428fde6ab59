"""Kernels that lie get no mark for a wrong answer: the verdict is the judge's (autograder/judge.py).

Each hostile submission of section 03 has a wrong ``Head`` (it returns zeros) or an ``attention``
that only looks answers up, and makes its kernel lie in one way: the checks' helpers patched, the
test cell's outcome forged, the judge's channel answered with made-up data, the stored results of
the visible check replayed. Graded through both entry points with real nbgrader, every one scores
0 on the exercise it fakes and full marks on the one it does honestly; an honest submission in the
same run scores full marks. The control run judges in the kernel, as plain nbgrader would
(``c.ResilientExecute.judge_tests = False``): there the same lies are paid, which is what this test
would catch if the judge were bypassed.
"""
from __future__ import annotations

import sys

import pytest

from autograder import grade

from autograder.notebook_format import points

from .bugbank import all_variants
from .bugbank.s03 import head
from .conftest import load_notebook
from .nbgrader_course import Course, slim, with_solution

SECTION = "03_single_head_attention"
ATTENTION = ("test_attention", "test_attention_hidden")
HEAD = ("test_Head", "test_Head_hidden")
FULL = points(load_notebook("solutions", SECTION))   # grade id -> its points
RIGHT = {v.exercise: v.source for v in all_variants() if v.expected is None and v.exercise in ("attention", "Head")}

ZERO_HEAD = head(body="return torch.zeros(B, T, self.key.out_features)")   # a Head whose output is all zeros
# Each lie is appended to the Head cell: (what it does, its code).
LIES = {
    # the checks' comparisons in the kernel made to agree with anything (what disarmed the old guard)
    "helpers-patched": '''
import sys
for _name, _module in list(sys.modules.items()):
    if _name.startswith("utils.checks"):
        for _attr, _fake in (("close", lambda *a, **k: True), ("expect", lambda *a, **k: None)):
            if hasattr(_module, _attr):
                setattr(_module, _attr, _fake)
torch.allclose = lambda *a, **k: True
''',
    # the test cell's outcome: the check it calls replaced by a pass line, and any error swallowed
    "outcome-forged": '''
def check_Head(*args, **kwargs):
    print("✓ Head 通过全部检查")
get_ipython().set_custom_exc((Exception,), lambda *args, **kwargs: None)
''',
    # the judge's channel answered with made-up data, not what the Head returns (zeros): every call on a tensor
    # answers the input's first columns, as many as the Head's output has
    "channel-forged": '''
import torch as _torch
from utils.checks import agent as _agent, protocol as _protocol
_real_serve = _agent.serve
def _lying_serve(message):
    request = _protocol.decode(message)
    _real_serve(message)
    op, real = request["op"], _protocol.decode(_agent.REPLY)
    if isinstance(op, _protocol.Call) and op.args and isinstance(op.args[0], _torch.Tensor) \\
            and isinstance(real, _torch.Tensor) and real.dim() == op.args[0].dim():
        _agent.REPLY = _protocol.encode(op.args[0][..., :real.size(-1)].clone())
_agent.serve = _lying_serve
''',
}
# attention answered from the stored results of the visible check (the class edition ships them): the inputs
# made again by the check's own recipes, the one equal to what was passed keys the stored answer
REPLAYED_ATTENTION = '''
import torch
from utils.checks import oracle
from utils.checks.compare import randn
from utils.checks.s03 import ATTENTION_CASES, _random_mask

def attention(q, k, v, mask=None):
    stored = torch.load(oracle.FIXTURES / "s03.pt", weights_only=True)
    for i, (batch, Tq, Tk, D, Dv) in enumerate(ATTENTION_CASES):
        made = (randn(*batch, Tq, D, seed=10 * i), randn(*batch, Tk, D, seed=10 * i + 1),
                randn(*batch, Tk, Dv, seed=10 * i + 2))
        if all(a.shape == b.shape and torch.equal(a, b) for a, b in zip(made, (q, k, v))):
            visible_mask = None if mask is None else _random_mask(Tq, Tk, 10 * i + 3)
            out, weights = stored["attention_outputs:" + oracle.fingerprint(((*made, visible_mask), {}))]["want"]
            return out.to(q.dtype), weights.to(q.dtype)
    raise KeyError("not an input of the visible check")
'''


def submissions(released: dict) -> dict[str, tuple[dict, tuple[str, ...]]]:
    """student -> (notebook, the test cells it must score 0 on when the judge decides)."""
    honest = with_solution(with_solution(released, "attention", RIGHT["attention"]), "Head", RIGHT["Head"])
    plan = {"honest": (honest, ())}
    for lie, code in LIES.items():
        plan[lie] = (with_solution(honest, "Head", ZERO_HEAD + code), HEAD)
    plan["visible-replayed"] = (with_solution(honest, "attention", REPLAYED_ATTENTION), ATTENTION)
    return {student: (slim(nb), faked) for student, (nb, faked) in plan.items()}


def graded(tmp_path, entry: str, judge: bool) -> tuple[dict, dict]:
    # the control: as grading was before the judge, test cells run in a kernel on the full course package
    config = "" if judge else "\nc.ResilientExecute.judge_tests = False\nc.ResilientExecute.kernel_edition = 'full'\n"
    course = Course.create(tmp_path, [SECTION], extra_config=config)
    plan = submissions(course.release_notebook(SECTION))
    for student, (nb, _) in plan.items():
        course.submit(student, SECTION, nb)
    if entry == "nbgrader-autograde":
        course.nbgrader("autograde", SECTION, "--force")
    else:
        with pytest.MonkeyPatch.context() as mp:
            mp.chdir(course.root)
            mp.setattr(sys, "argv", ["grade"])
            assert grade.main([SECTION, "--jobs", "2"]) == 0
    return course.scores(SECTION), plan


def full(scores: dict, cells: tuple[str, ...]) -> bool:
    """Full marks on each of ``cells``."""
    return all(scores[cell] == FULL[cell] for cell in cells)


@pytest.mark.slow
@pytest.mark.parametrize("entry", ["nbgrader-autograde", "autograder-grade"])
def test_a_lying_kernel_gets_no_mark_for_a_wrong_answer(tmp_path, entry):
    scores, plan = graded(tmp_path, entry, judge=True)
    assert full(scores["honest"], ATTENTION + HEAD), scores["honest"]
    for student, (_, faked) in plan.items():
        honest_part = tuple(cell for cell in ATTENTION + HEAD if cell not in faked)
        assert not any(scores[student][cell] for cell in faked), f"{student} was paid: {scores[student]}"
        assert full(scores[student], honest_part), f"{student} lost honest points: {scores[student]}"


@pytest.mark.slow
def test_judging_in_the_kernel_pays_the_same_lies(tmp_path):
    """The control: with test cells judged in the kernel (plain nbgrader), the lies are paid (the forged
    channel lies only to the judge, so it is not; the replayed results pay the visible test only)."""
    scores, _ = graded(tmp_path, "nbgrader-autograde", judge=False)
    assert full(scores["helpers-patched"], HEAD) and full(scores["outcome-forged"], HEAD), scores
    assert scores["visible-replayed"]["test_attention"] > 0, scores["visible-replayed"]
