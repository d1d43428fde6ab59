"""The benchmark's cheap parts run and print the Markdown table the README carries."""
from __future__ import annotations

import re
import sys

from autograder import benchmark


def test_check_timings_table(capsys):
    assert benchmark.main(["--parts", "checks"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("测量于 ") and "个 CPU 核" in out and "| 项目 | 结果 |" in out
    timed = [float(s) for s in re.findall(r"\| check_\w+（(?:可见|隐藏)） \| ([\d.]+) 秒 CPU \|", out)]
    assert len(timed) == 3 and timed == sorted(timed, reverse=True), "the slowest three, slowest first"
    assert re.search(r"\| 全部 \d+ 次检查 \| [\d.]+ 秒 CPU \|", out)


def test_solved_notebook_puts_the_reference_into_every_solution_cell():
    def cell(grade_id, source, solution=True):
        return {"cell_type": "code", "source": source,
                "metadata": {"nbgrader": {"grade_id": grade_id, "solution": solution, "grade": not solution}}}
    released = {"cells": [cell("f", "raise NotImplementedError"), cell("test_f", "check_f(f)", solution=False)]}
    source = {"cells": [cell("f", "def f(): return 1"), cell("test_f", "check_f(f)  # hidden too", solution=False)]}
    solved = benchmark.solved_notebook(released, source)
    assert [c["source"] for c in solved["cells"]] == ["def f(): return 1", "check_f(f)"]


def test_the_plain_nbgrader_row_configures_nothing_but_the_folder_names(tmp_path):
    """What an instructor gets from nbgrader alone: its default preprocessors, kernel and limits."""
    from traitlets.config.loader import PyFileConfigLoader

    (tmp_path / "nbgrader_config.py").write_text("from autograder.config import configure\n"
                                                 "configure(get_config())\n", encoding="utf-8")
    benchmark.plain_course(tmp_path)
    config = PyFileConfigLoader("nbgrader_config.py", path=str(tmp_path)).load_config()
    assert config == {"CourseDirectory": {"source_directory": "solutions", "release_directory": "notebooks"}}


def test_a_ratio_is_the_median_of_the_rounds_ratios_each_shown():
    assert benchmark.ratios([10.0, 30.0, 20.0], [5.0, 5.0, 4.0]) == "5.00×（各轮 2.00×、6.00×、5.00×）"
    assert benchmark.ratios([9.0], [3.0]) == "3.00×"


def test_a_timed_run_grades_a_fresh_copy_and_leaves_the_course_as_it_was(tmp_path):
    course = tmp_path / "course"
    course.mkdir()
    (course / "gradebook.db").write_text("before", encoding="utf-8")
    graded = "open('gradebook.db', 'w').write('graded'); open('autograded', 'w').close()"
    assert benchmark.timed([sys.executable, "-c", graded], course, 1) > 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["course"]
    assert [p.name for p in course.iterdir()] == ["gradebook.db"]
    assert (course / "gradebook.db").read_text(encoding="utf-8") == "before"
