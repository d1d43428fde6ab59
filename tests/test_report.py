"""The class misconception report (autograder/report.py): code extraction and statistics on
hand-built data, and a simulated class with known misconceptions graded by real nbgrader."""
from __future__ import annotations

import csv
import shutil

import pytest

from autograder import report
from utils.checks.codes import describe

from .bugbank import all_variants
from .conftest import ROOT
from .nbgrader_course import Course, slim, with_solution

SECTION = "01_qkv_and_scores"


def _texts(code: str) -> tuple[str, str]:
    """The misconception and the first hint of ``code``, as the report shows them."""
    return describe(code).misconception, describe(code).idea


def error(ename: str, evalue: str) -> dict:
    return {"output_type": "error", "ename": ename, "evalue": evalue, "traceback": []}


def code_cell(grade_id: str | None, *outputs: dict, solution: bool = False) -> dict:
    meta = {"nbgrader": {"grade_id": grade_id, "grade": not solution, "solution": solution}} if grade_id else {}
    return {"cell_type": "code", "metadata": meta, "source": "", "outputs": list(outputs), "execution_count": 1}


def test_codes_are_read_from_test_cells_and_grading_errors():
    nb = {"cells": [
        code_cell(None, error("CheckError", "[crashed] 不是评分单元格，不算")),
        code_cell("project_qkv", error("GradingError", "[kernel-died] 这个单元格让 Python 内核退出了"), solution=True),
        code_cell("test_project_qkv", {"output_type": "stream", "name": "stdout", "text": "[wrong] 只是打印"},
                  error("CheckError", "[weights-transposed] 返回的 q 不对\n  可能的误区：…")),
        code_cell("test_project_qkv_hidden", error("CheckError", "[qkv-mixed-up] 隐藏测试不同意"),
                  error("CheckError", "[weights-transposed] 同一代码只算一次")),
        code_cell("attention_scores", error("SyntaxError", "invalid syntax"), solution=True),  # no [code]: not counted
        code_cell("test_attention_scores", error("NameError", "name 'attention_scores' is not defined")),
        code_cell("test_attention_scores_hidden", error("GradingError", "[timeout] 两次运行都超时")),
        code_cell("softmax", solution=True),
        code_cell("test_softmax"),
        {"cell_type": "markdown", "metadata": {"nbgrader": {"grade_id": "test_prose", "grade": True}}, "source": ""},
    ]}
    assert report.notebook_codes(nb) == {
        "project_qkv": ["kernel-died", "weights-transposed", "qkv-mixed-up"],
        "attention_scores": ["NameError", "timeout"],
        "softmax": [],
    }
    assert [report.exercise_of(g) for g in ("test_softmax_hidden", "test_softmax", "softmax", "answer_x")] == \
        ["softmax", "softmax", None, None]


def graded(student: str, visible: float, hidden: float, *codes: str) -> report.Graded:
    return report.Graded(student, {"test_e": (visible, 1), "test_e_hidden": (hidden, 2)}, {"e": list(codes)})


def test_statistics_examples_and_unregistered_codes():
    results = report.ClassResults("s", [
        graded("d", 0, 0, "scale-by-D"), graded("a", 0, 0, "scale-by-D", "made-up"), graded("c", 0, 0, "scale-by-D"),
        graded("b", 0, 0, "scale-by-D"), graded("e", 1, 0, "made-up"), graded("f", 1, 2)], {"g": "未提交"})
    (stats,) = report.exercise_stats(results)
    assert (stats.submissions, stats.passed, stats.pass_rate, stats.visible_rate, stats.hidden_rate) == \
        (6, 1, 1 / 6, 2 / 6, 1 / 6)
    assert sorted(stats.scores) == [0, 0, 0, 0, 1, 3] and stats.max_points == 3
    codes = report.code_stats(results)
    assert [(c.code, c.students, c.examples) for c in codes] == [
        ("scale-by-D", ["a", "b", "c", "d"], ["a", "b", "c"]), ("made-up", ["a", "e"], ["a", "e"])]
    assert codes[0].texts == _texts("scale-by-D") and codes[1].texts[0] == report.UNREGISTERED


def test_no_graded_submission_is_a_clear_error(tmp_path, monkeypatch, capsys):
    shutil.copy(ROOT / "nbgrader_config.py", tmp_path / "nbgrader_config.py")
    monkeypatch.chdir(tmp_path)
    assert report.main([SECTION]) == 1
    assert "nbgrader autograde" in capsys.readouterr().err
    assert not (tmp_path / "gradebook.db").exists() and not (tmp_path / "reports").exists()


def bank(exercise: str, label: str) -> str:
    return next(v.source for v in all_variants() if v.exercise == exercise and v.label == label)


RIGHT = {"project_qkv": bank("project_qkv", "matmul"), "attention_scores": bank("attention_scores", "transpose")}
# Not in the bug bank (the bank's variants fail both tests): .squeeze(-1) breaks only where there is one key
# (Tk = 1), which a hidden case has and no visible one, so it passes the visible test and fails the hidden one.
SQUEEZED = "def attention_scores(q, k):\n    return (q @ k.transpose(-2, -1)).squeeze(-1)"
CLASS = {  # student -> solutions that differ from RIGHT; None: the released notebook, untouched
    "ana": {"project_qkv": bank("project_qkv", "transposed")},
    "bo": {"project_qkv": bank("project_qkv", "transposed")},
    "cai": {"project_qkv": bank("project_qkv", "transposed")},
    "dan": {"attention_scores": bank("attention_scores", "k-q")},
    "eve": {"attention_scores": bank("attention_scores", "k-q")},
    "fay": None,
    "gus": {"attention_scores": SQUEEZED},
    "hal": {},
    "ivy": {},  # graded, then its autograded notebook goes missing
}
EXPECTED_CODES = {
    ("project_qkv", "weights-transposed"): ["ana", "bo", "cai"],
    ("attention_scores", "qk-swapped"): ["dan", "eve"],
    ("project_qkv", "not-implemented"): ["fay"],
    ("attention_scores", "not-implemented"): ["fay"],
    ("attention_scores", "wrong-shape"): ["gus"],
}


def read_csv(path) -> list[dict]:
    assert path.read_bytes().startswith(b"\xef\xbb\xbf"), f"{path.name} must start with a BOM"
    with path.open(encoding="utf-8-sig", newline="") as f:
        return list(csv.DictReader(f))


@pytest.mark.slow
def test_report_of_a_simulated_class(tmp_path, monkeypatch, capsys):
    course = Course.create(tmp_path, [SECTION])
    release = slim(course.release_notebook(SECTION))
    for student, changes in CLASS.items():
        nb = release
        for exercise, source in ({**RIGHT, **changes} if changes is not None else {}).items():
            nb = with_solution(nb, exercise, source)
        course.submit(student, SECTION, nb)
    monkeypatch.chdir(tmp_path)
    assert report.main([SECTION]) == 1  # the gradebook knows the section, nothing is graded yet
    assert "没有已批改的提交" in capsys.readouterr().err
    course.nbgrader("autograde", SECTION)
    shutil.rmtree(tmp_path / "autograded" / "ivy")

    results = report.load_results(tmp_path, SECTION)
    assert [g.student for g in results.graded] == ["ana", "bo", "cai", "dan", "eve", "fay", "gus", "hal"]
    assert results.missing == {"ivy": "autograded/ 中没有批改后的 notebook"}
    codes = report.code_stats(results)
    assert {(c.exercise, c.code): c.students for c in codes} == EXPECTED_CODES
    assert [(c.code, c.examples) for c in codes[:2]] == [("weights-transposed", ["ana", "bo", "cai"]),
                                                           ("qk-swapped", ["dan", "eve"])]
    stats = {s.exercise: s for s in report.exercise_stats(results)}
    assert list(stats) == ["project_qkv", "attention_scores"]
    assert (stats["project_qkv"].pass_rate, stats["project_qkv"].visible_rate, stats["project_qkv"].hidden_rate) == \
        (4 / 8, 4 / 8, 4 / 8)
    assert (stats["attention_scores"].pass_rate, stats["attention_scores"].visible_rate,
            stats["attention_scores"].hidden_rate) == (4 / 8, 5 / 8, 4 / 8)
    gradebook = course.scores(SECTION)
    for g in results.graded:
        assert report.points(g)[0] == sum(v for k, v in gradebook[g.student].items() if k.startswith("test_"))
    assert sorted(report.points(g)[0] for g in results.graded) == [0, 3, 3, 3, 3, 3, 4, 6]

    assert report.main([SECTION]) == 0
    out, summary = tmp_path / "reports" / SECTION, capsys.readouterr().out
    assert "[weights-transposed] project_qkv：3 人（ana、bo、cai）" in summary and "ivy" in summary
    assert "50.0% /   62.5% /   50.0%" in summary
    exercises = {r["练习"]: r for r in read_csv(out / "exercises.csv")}
    assert exercises["attention_scores"]["仅可见测试通过率"] == "62.5%" and exercises["project_qkv"]["通过人数"] == "4"
    rows = {(r["练习"], r["代码"]): r for r in read_csv(out / "codes.csv")}
    assert {k: int(r["人数"]) for k, r in rows.items()} == {k: len(v) for k, v in EXPECTED_CODES.items()}
    wt = rows["project_qkv", "weights-transposed"]
    assert (wt["示例学生"], wt["可能的误区"], wt["提示"]) == ("ana、bo、cai", *_texts("weights-transposed"))
    status = {r["学生"]: r["状态"] for r in read_csv(out / "students.csv")}
    assert status["ivy"] == "autograded/ 中没有批改后的 notebook"
    page = (out / "report.html").read_text(encoding="utf-8")
    assert 'src="data:image/png;base64,iVBOR' in page
    assert all(text in page for text in (_texts("qk-swapped")[0], _texts("wrong-shape")[1], "ivy", "62.5%"))
