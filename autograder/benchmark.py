"""The course's benchmark on this machine, printed as a Markdown table the README carries:

* every solution notebook top to bottom, and the course total;
* every learner notebook (stubs failing kindly), and the total;
* the check functions on the reference implementations (the slowest three);
* grading throughput on the same finished submissions of two sections: plain ``nbgrader autograde``
  with nbgrader's own defaults (only the folder names configured: a fresh kernel per submission,
  figures rendered, no sandbox, no fork; what an instructor would otherwise run), sequential
  ``nbgrader autograde`` with the course's configuration, and ``python -m autograder.grade`` (also
  with every kernel started on its own, ``c.SandboxProvisioner.fork = False``, and with the figures rendered,
  ``c.GradingKernelSpecs.draw_figures = True``), with the ratios of the latter to both; and ``autograder.grade`` on a
  whole class (``--class-size``); the three runs the ratios compare are measured in ``--repeats`` rounds (medians);
* the floor of one submission: start a kernel and ``import torch``.

    python -m autograder.benchmark                       # everything (about 25 minutes)
    python -m autograder.benchmark --parts notebooks checks
    python -m autograder.benchmark --parts grading --sections 03_single_head_attention --students 12

Submissions are the learner notebooks with every exercise solved (demos included), so each
one costs what a real, finished submission costs. Grading happens in a temporary course.
Each row is reported on stderr as soon as it is measured (the table, on stdout, comes at the end).
"""
from __future__ import annotations

import argparse
import contextlib
import datetime
import io
import itertools
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from jupyter_client.manager import start_new_kernel

import utils.checks as checks
from utils import reference
from utils.sections import section_ids

from .build import ROOT
from .config import RELEASE_DIR, SOURCE_DIR
from .run_all import run_all
from .grade import child_env, nbgrader_cmd
from .notebook_format import cell_kind, exercises, grade_id, read

PARTS = {"notebooks": "每个 notebook 从头到尾（solutions/ 与 notebooks/）", "checks": "检查函数",
         "grading": "评分吞吐量", "floor": "下限：启动内核 + import torch"}
GRADED_SECTIONS = ["01_qkv_and_scores", "03_single_head_attention"]


@dataclass
class Row:
    what: str
    value: str


# --- notebooks and checks ----------------------------------------------------------------------

def notebook_rows(kind: str) -> Iterator[Row]:
    """Wall time of every notebook of ``solutions`` or ``notebooks``, then their sum."""
    total = 0.0
    for section in section_ids(ROOT / SOURCE_DIR):
        seconds = run_all(ROOT / kind / section / f"{section}.ipynb", allow_errors=kind == RELEASE_DIR).seconds
        total += seconds
        yield Row(f"{kind}/{section}", f"{seconds:.1f} 秒")
    yield Row(f"{kind}/ 合计", f"{total:.1f} 秒")


def check_rows(slowest: int = 3) -> list[Row]:
    """The checks of every exercise on its reference, visible and hidden; the slowest few (CPU time)."""
    spent = []
    for section in section_ids(ROOT / SOURCE_DIR):
        for name in exercises(read(ROOT / SOURCE_DIR / section / f"{section}.ipynb")):
            check = getattr(checks, f"check_{name}")
            for extended in (False, True):
                start = time.process_time()
                with contextlib.redirect_stdout(io.StringIO()):
                    check(getattr(reference, name), extended=extended, seed=1)
                spent.append((time.process_time() - start, f"check_{name}（{'隐藏' if extended else '可见'}）"))
    spent.sort(reverse=True)
    return [Row(what, f"{seconds:.2f} 秒 CPU") for seconds, what in spent[:slowest]] + \
        [Row(f"全部 {len(spent)} 次检查", f"{sum(s for s, _ in spent):.1f} 秒 CPU")]


# --- grading -------------------------------------------------------------------------------------

def solved_notebook(released: dict, source: dict) -> dict:
    """The learner notebook with each solution cell replaced by the reference solution."""
    solutions = {grade_id(c): c["source"] for c in source["cells"] if cell_kind(c) == "solution"}
    for cell in released["cells"]:
        if grade_id(cell) in solutions:
            cell["source"] = solutions[grade_id(cell)]
    return released


def make_course(root: Path, sections: list[str], students: int) -> None:
    (root / SOURCE_DIR).mkdir(parents=True)
    shutil.copy(ROOT / "nbgrader_config.py", root / "nbgrader_config.py")
    for section in sections:
        shutil.copytree(ROOT / SOURCE_DIR / section, root / SOURCE_DIR / section)
        subprocess.run(nbgrader_cmd("generate_assignment", section, "--force"), cwd=root, env=child_env(1),
                       check=True, capture_output=True)
        solved = solved_notebook(read(root / RELEASE_DIR / section / f"{section}.ipynb"),
                                 read(root / SOURCE_DIR / section / f"{section}.ipynb"))
        for k in range(students):
            folder = root / "submitted" / f"student{k:02d}" / section
            folder.mkdir(parents=True)
            (folder / f"{section}.ipynb").write_text(json.dumps(solved, ensure_ascii=False), encoding="utf-8")


def timed(cmd: list[str], course: Path, jobs: int) -> float:
    """The wall time of ``cmd`` run in a fresh copy of ``course`` (copied before the clock starts; ``course``
    itself stays ungraded)."""
    copy = course.with_name(f"{course.name}-run")
    shutil.copytree(course, copy)
    start = time.perf_counter()
    subprocess.run(cmd, cwd=copy, env=child_env(jobs), check=True, capture_output=True)
    seconds = time.perf_counter() - start
    shutil.rmtree(copy)
    return seconds


def plain_course(course: Path) -> None:
    """Configure ``course`` with nbgrader's own defaults: only the course's folder names."""
    (course / "nbgrader_config.py").write_text(
        "c = get_config()  # noqa: F821  (provided by nbgrader)\n"
        f"c.CourseDirectory.source_directory = {SOURCE_DIR!r}\n"
        f"c.CourseDirectory.release_directory = {RELEASE_DIR!r}\n", encoding="utf-8")


def per_minute(students: int, seconds: float) -> str:
    return f"{60 * students / seconds:.1f} 份/分钟（每份 {seconds / students:.2f} 秒）"


# autograder.grade runs timed besides the course's configuration: name -> lines added to it
GRADING_VARIANTS = {"": "",
                    "，内核不 fork": "c.SandboxProvisioner.fork = False\n",
                    "，渲染演示图": "c.GradingKernelSpecs.draw_figures = True\n"}


def grading_rows(sections: list[str], students: int, jobs: int, class_size: int, repeats: int) -> Iterator[Row]:
    """Submissions per minute for each section: plain nbgrader (its own defaults), sequential nbgrader
    with the course's configuration and autograder.grade, the latter also with kernels started one by
    one (``c.SandboxProvisioner.fork = False``), with the figures rendered
    (``c.GradingKernelSpecs.draw_figures = True``), and for a whole class (start-up shared by more
    students); and how many times faster autograder.grade is. The three runs the ratios compare are
    measured in ``repeats`` rounds (the same run on this machine varies by up to 20 %): each time is the
    median over the rounds, each ratio the median of the rounds' ratios."""
    median = f"，{repeats} 轮的中位数" if repeats > 1 else ""
    parallel_cmd = [sys.executable, "-m", "autograder.grade", "--jobs", str(jobs)]
    with tempfile.TemporaryDirectory() as tmp:
        for section in sections:
            sequential = Path(tmp) / section / "sequential"
            make_course(sequential, [section], students)
            plain = Path(tmp) / section / "plain"
            shutil.copytree(sequential, plain)
            plain_course(plain)
            variants = [Path(tmp) / section / f"parallel{k}" for k in range(len(GRADING_VARIANTS))]
            for course, config in zip(variants, GRADING_VARIANTS.values()):
                shutil.copytree(sequential, course)  # before grading: the same gradebook, no grades yet
                with (course / "nbgrader_config.py").open("a", encoding="utf-8") as f:
                    f.write(config)
            # The three runs the ratios compare, in rounds: a slow minute of the machine slows a round's three alike.
            plain_s, sequential_s, parallel_s = [], [], []
            for _ in range(repeats):
                plain_s.append(timed(nbgrader_cmd("autograde", section, "--force"), plain, 1))
                sequential_s.append(timed(nbgrader_cmd("autograde", section, "--force"), sequential, 1))
                parallel_s.append(timed([*parallel_cmd, section], variants[0], jobs))
            yield Row(f"{section}：nbgrader autograde，nbgrader 自己的默认配置（顺序，{students} 份{median}）",
                      per_minute(students, statistics.median(plain_s)))
            yield Row(f"{section}：nbgrader autograde，课程配置（顺序，{students} 份{median}）",
                      per_minute(students, statistics.median(sequential_s)))
            yield Row(f"{section}：autograder.grade --jobs {jobs}{median}",
                      f"{60 * students / statistics.median(parallel_s):.1f} 份/分钟")
            for course, name in list(zip(variants, GRADING_VARIANTS))[1:]:
                yield Row(f"{section}：autograder.grade --jobs {jobs}{name}",
                          f"{60 * students / timed([*parallel_cmd, section], course, jobs):.1f} 份/分钟")
            for slower, against in ((plain_s, "nbgrader 默认配置"), (sequential_s, "课程配置顺序评分")):
                yield Row(f"{section}：autograder.grade ÷ {against}{median}", f"快 {ratios(slower, parallel_s)}")
            whole_class = Path(tmp) / section / "class"
            make_course(whole_class, [section], class_size)
            t_class = timed([*parallel_cmd, section], whole_class, jobs)
            yield Row(f"{section}：autograder.grade --jobs {jobs}，{class_size} 份",
                      f"{60 * class_size / t_class:.1f} 份/分钟")


def ratios(slower: list[float], faster: list[float]) -> str:
    """The median of the rounds' ratios, then each round's: "6.36×（各轮 6.10×、6.36×、6.52×）"."""
    each = [s / f for s, f in zip(slower, faster)]
    rounds = f"（各轮 {'、'.join(f'{r:.2f}×' for r in each)}）" if len(each) > 1 else ""
    return f"{statistics.median(each):.2f}×{rounds}"


def floor_seconds(repeats: int = 3) -> float:
    """Start a kernel, import torch, shut it down: the least a submission can cost."""
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        km, kc = start_new_kernel(kernel_name="python3")
        kc.execute_interactive("import torch", timeout=120)
        best = min(best, time.perf_counter() - start)
        kc.stop_channels()
        km.shutdown_kernel(now=True)
    return best


# --- the table -------------------------------------------------------------------------------------

def table(rows: list[Row]) -> str:
    header = (f"测量于 {datetime.date.today().isoformat()}，{os.cpu_count()} 个 CPU 核，"
              f"{platform.system()} {platform.machine()}，Python {platform.python_version()}\n\n")
    return header + "| 项目 | 结果 |\n|---|---|\n" + "".join(f"| {r.what} | {r.value} |\n" for r in rows)


def reported(part: str, measure: Callable[[], Iterable[Row]], started: float) -> Iterator[Row]:
    """The rows of ``measure()`` as they are measured, each also printed on stderr with the time spent so far."""
    def say(text: str) -> None:
        minutes, seconds = divmod(int(time.monotonic() - started), 60)
        print(f"[{minutes:2d}:{seconds:02d}] {text}", file=sys.stderr, flush=True)

    say(f"{PARTS[part]}……")
    for row in measure():
        say(f"  {row.what}：{row.value}")
        yield row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", nargs="+", choices=PARTS, default=list(PARTS))
    parser.add_argument("--sections", nargs="+", default=GRADED_SECTIONS, help="sections whose grading is timed")
    parser.add_argument("--students", type=int, default=12)
    parser.add_argument("--class-size", type=int, default=40, help="students of the whole-class grading run")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--repeats", type=int, default=3, help="rounds of the three runs the ratios compare (medians)")
    args = parser.parse_args(argv)
    measure = {"notebooks": lambda: itertools.chain(notebook_rows(SOURCE_DIR), notebook_rows(RELEASE_DIR)),
               "checks": check_rows,
               "grading": lambda: grading_rows(args.sections, args.students, args.jobs, args.class_size, args.repeats),
               "floor": lambda: [Row("下限：启动内核 + import torch", f"{floor_seconds():.2f} 秒/份")]}
    started, rows = time.monotonic(), []
    for part in (p for p in PARTS if p in args.parts):
        rows += reported(part, measure[part], started)
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
