"""Check messages read right: marks every machine can draw, no stray space inside Chinese."""
from __future__ import annotations

from pathlib import Path

import matplotlib
import pytest
import torch
from matplotlib.ft2font import FT2Font

from utils.checks.compare import Cases, expect, joined
from utils.checks.core import FAIL_MARK, PASS_MARK, CheckError, check
from utils.checks.protocol import CANDIDATE, Call
from utils.progress import MARKS

# DejaVu Sans Mono: shipped with matplotlib and with every common Linux desktop, and a fallback
# of JupyterLab's code font stack; it has no colour emoji.
DEJAVU_MONO = Path(matplotlib.get_data_path()) / "fonts" / "ttf" / "DejaVuSansMono.ttf"


def drawable(text: str) -> bool:
    charmap = FT2Font(str(DEJAVU_MONO)).get_charmap()
    return all(ord(ch) in charmap for ch in text)


def test_marks_are_in_a_font_every_machine_has():
    assert drawable(PASS_MARK + FAIL_MARK + "".join(MARKS.values()))
    assert not drawable("✅❌💡"), "negative control: the emoji marks need a colour-emoji font"


@pytest.mark.parametrize(("subject", "rest", "message"), [
    ("T=4 时的输出", "数值不对", "T=4 时的输出数值不对"),
    ("scores (2, 3)（第 0 行全被屏蔽）", "的形状应为 (2,)", "scores (2, 3)（第 0 行全被屏蔽）的形状应为 (2,)"),
    ("q", "数值不对", "q 数值不对"),
    ("merge(split(x))", "含有 NaN/inf", "merge(split(x)) 含有 NaN/inf"),
])
def test_chinese_runs_on_without_a_space_ascii_keeps_one(subject, rest, message):
    assert joined(subject, rest) == message


def test_a_wrong_value_is_reported_without_a_stray_space():
    with pytest.raises(CheckError) as caught:
        expect(torch.ones(3), torch.zeros(3), "B=2, T=3 时的输出")
    assert caught.value.finding.startswith("B=2, T=3 时的输出数值不对：在下标 (0,) 处应为 0")
    assert caught.value._render_traceback_()[0].startswith(f"\x1b[31m{FAIL_MARK} [wrong] ")


def test_pass_line_uses_the_pass_mark(capsys):
    @check("always_right")
    def check_always_right(extended=False, seed=0):   # the definition's signature; this one ignores both
        del extended, seed
        yield Call(CANDIDATE)

    check_always_right(lambda: None)
    assert capsys.readouterr().out.startswith(f"{PASS_MARK} always_right 通过全部检查")


@pytest.mark.parametrize("quiz", ["quiz_head_width", "quiz_attention_memory", "quiz_complexity", "quiz_kv_cache",
                                  "quiz_rope", "quiz_read_config", "quiz_misconceptions",
                                  "quiz_induction_heads"])
def test_a_quiz_pass_line_names_what_only_the_hidden_test_judges(quiz, capsys):
    """A visible quiz check that leaves keys to the hidden test does not say 通过全部检查; the hidden one does."""
    import utils.checks as checks
    from utils import reference
    check, answer = getattr(checks, f"check_{quiz}"), getattr(reference, quiz)
    check(answer)
    visible = capsys.readouterr().out
    check(answer, extended=True, seed=2024)
    hidden = capsys.readouterr().out
    assert "只由隐藏测试评分" in visible and "通过全部检查" not in visible, visible
    assert "通过全部检查" in hidden, hidden


def test_the_hints_come_one_at_a_time_and_the_last_step_shows_the_answer(capsys):
    """hint=1, 2, 3 show that many hints (the third computed on the check's own input), each telling how to
    ask for the next; hint=4 shows the reference answer in the self-study edition."""
    import utils.checks as checks

    def off_by_half(q, k):
        return q @ k.transpose(-2, -1) + 0.5

    for level in (1, 2, 3):
        with pytest.raises(CheckError) as caught:
            checks.check_attention_scores(off_by_half, hint=level)
        text = str(caught.value)
        assert caught.value.code == "wrong"
        assert [f"提示 {n}" in text for n in (1, 2, 3)] == [n <= level for n in (1, 2, 3)], text
        assert f"hint={level + 1}" in text
    assert "应为" in caught.value.hints()[2], "hint 3 is the check's own number"
    checks.check_attention_scores(off_by_half, hint=4)
    shown = capsys.readouterr().out
    assert "def attention_scores" in shown and "参考答案" in shown


def test_the_class_edition_has_no_answer_step(monkeypatch, capsys):
    import utils.checks as checks
    from utils import edition
    monkeypatch.setattr(edition, "IS_STUDENT", True)
    checks.check_attention_scores(lambda q, _k: q, hint=4)
    shown = capsys.readouterr().out
    assert "班级版没有" in shown and "def " not in shown


def test_hint_3_of_a_plain_wrong_shows_the_input():
    """A generic [wrong]'s first step shows the check's input: a small one whole, a large one by its shape and the
    slice the wrong position reads (its leading indices), so the learner can rerun the very case."""
    small, large = torch.tensor([[1.0, 2.0], [3.0, 4.0]]), torch.arange(2 * 5 * 8, dtype=torch.float32).view(2, 5, 8)
    want = large.clone()
    got = want.clone()
    got[1, 3, 2] += 1
    with pytest.raises(CheckError) as caught:
        expect(got, want, "B=2, T=5 时的输出", inputs={"w": small, "x": large})
    step = caught.value.step
    assert "下标 (1, 3, 2)" in step and "w = [[1, 2], [3, 4]]" in step, step
    assert "x 形状 (2, 5, 8)，其中 x[1][3] = [64, 65, 66, 67, 68, 69, 70, 71]" in step, step
    with pytest.raises(CheckError) as caught:
        expect(got, want, "B=2, T=5 时的输出")
    assert "检查给的输入" not in caught.value.step and "按上面那句说的情形" in caught.value.step


def _judged(outputs, truths) -> CheckError | None:
    """The finding of Cases on these candidate outputs, each against its (want, [(code, output)])."""
    cases = Cases()
    for i, (got, (want, wrong)) in enumerate(zip(outputs, truths)):
        cases.add(f"第 {i} 个输入", got, want, wrong, inputs={"x": want})
    try:
        cases.decide()
    except CheckError as err:
        return err
    return None


def test_a_misconception_is_named_only_when_two_cases_that_tell_it_apart_show_it():
    """A code needs the candidate's output to agree with it on every case and to show it on two cases where it
    differs from the right answer; one matching case (an accidental match) is a plain [wrong] with its input."""
    want = [torch.full((2,), 1.0), torch.full((2,), 2.0), torch.full((2,), 3.0)]
    halved = [w / 2 for w in want]
    truths = [(w, [("scale-by-D", h)]) for w, h in zip(want, halved)]
    assert _judged(want, truths) is None
    both = _judged(halved, truths)
    assert both.code == "scale-by-D" and "第 0 个输入" in both.finding and "第 1 个输入" in both.finding, both.finding
    accidental = _judged([halved[0], want[1] + 5, want[2]], truths)
    assert accidental.code == "wrong" and accidental.finding.startswith("第 0 个输入"), accidental.finding
    assert "x = [1, 1]" in accidental.step, accidental.step
    third_off = _judged([halved[0], halved[1], want[2] + 5], truths)   # explains two cases, not the third
    assert third_off.code == "wrong" and third_off.finding.startswith("第 0 个输入"), third_off.finding
    once = _judged([halved[0], want[1], want[2]], truths)      # right where the misconception differs: not it
    assert once.code == "wrong" and "第 0 个输入" in once.finding
    untold = [(want[0], [("scale-by-D", halved[0])]), (want[1], [("scale-by-D", want[1])])]
    assert _judged([halved[0], want[1]], untold).code == "wrong", "a case where the code gives the right answer"
    no_output = [(want[0], [("scale-by-D", halved[0])]), (want[1], []), (want[2], [("scale-by-D", halved[2])])]
    assert _judged([halved[0], want[1], halved[2]], no_output).code == "scale-by-D", "right where it has no output"


def test_a_crash_after_a_wrong_case_reports_the_wrong_case():
    """Cases.call: the first mistake is the one shown, not a later case's crash."""
    @check("late_crash")
    def check_late_crash(extended=False, seed=0):   # the definition's signature; this one ignores both
        del extended, seed
        cases = Cases()
        for x in (torch.ones(2), torch.zeros(3)):
            got = yield from cases.call(Call(CANDIDATE, (x,)))
            cases.add(f"x 形状 {tuple(x.shape)}", got, x)
        cases.decide()

    def off_then_crash(x):
        if x.numel() == 3:
            raise ValueError("late")
        return x + 1

    with pytest.raises(CheckError) as caught:
        check_late_crash(off_then_crash)
    assert caught.value.code == "wrong" and caught.value.finding.startswith("x 形状 (2,)"), caught.value.finding
    with pytest.raises(CheckError) as caught:
        check_late_crash(lambda x: x if x.numel() == 2 else 1 / 0)
    assert caught.value.code == "crashed"
