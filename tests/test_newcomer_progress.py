"""Long work shows its progress as it goes: the benchmark (about 25 minutes) reports each row on stderr as
soon as it is measured, and the progress view (half a minute of kernels) reports each section as its check
ends, before the report."""
from __future__ import annotations

import re
import shutil

import pytest

from autograder import benchmark
from utils import progress

from .conftest import ROOT


def test_the_benchmark_reports_each_row_as_soon_as_it_is_measured(monkeypatch, capsys):
    seen_before_the_second = []

    def rows():
        yield benchmark.Row("第一项", "1.0 秒")
        seen_before_the_second.append(capsys.readouterr().err)   # what was reported while measuring went on
        yield benchmark.Row("第二项", "2.0 秒")

    monkeypatch.setattr(benchmark, "check_rows", rows)
    assert benchmark.main(["--parts", "checks"]) == 0
    captured = capsys.readouterr()
    assert re.search(r"\[ *\d+:\d\d\] 检查函数……\n\[ *\d+:\d\d\]   第一项：1\.0 秒\n$", seen_before_the_second[0])
    assert "第二项：2.0 秒" in captured.err and "第一项" not in captured.err
    assert "| 第一项 | 1.0 秒 |\n| 第二项 | 2.0 秒 |" in captured.out and "……" not in captured.out, \
        "the table on stdout is as before"


@pytest.mark.slow
def test_the_progress_view_reports_each_section_as_its_check_ends(tmp_path, capsys):
    sections = ["00_start_here", "01_qkv_and_scores"]
    for section in sections:
        for kind in ("solutions", "notebooks"):
            shutil.copytree(ROOT / kind / section, tmp_path / kind / section)
    progress.show_progress(tmp_path)
    out = capsys.readouterr().out
    reported = re.findall(r"已检查 (\d)/(\d) 节：(.+)（\d+ 秒）", out)
    assert [(done, total) for done, total, _ in reported] == [("1", "2"), ("2", "2")], out
    assert out.index("已检查 2/2 节") < out.index("合计："), "each section as it ends, then the report"
