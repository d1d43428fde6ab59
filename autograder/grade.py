"""Grade every collected submission of a section, using every core, with limits.

    python -m autograder.grade 01_qkv_and_scores              # all students in submitted/
    python -m autograder.grade 01_qkv_and_scores --jobs 2 --students alice,bob
    python -m autograder.grade 01_qkv_and_scores --sequential  # plain `nbgrader autograde`, one process

Each submission is graded by its own stock ``nbgrader autograde SECTION --student ID`` process
(so results are exactly nbgrader's), ``--jobs`` of them at a time, each with a memory limit
(RLIMIT_AS, inherited by its kernel) and a wall-clock limit. A submission nbgrader cannot
read (invalid JSON, a truncated file, a missing notebook) is kept as ``*.broken`` and replaced
by the released notebook with a Chinese note on top, so the student still gets a grade of 0
and feedback that says why. SQLite is opened with a busy timeout so that concurrent writers
wait for each other instead of failing. Run from the course root (where nbgrader_config.py is).
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path

import nbformat

from .config import RELEASE_DIR

BROKEN_NOTE = ("> ⚠️ **评分说明**：你提交的 `{name}` 无法被自动评分（{why}）。"
               "评分时用空白的作业 notebook 代替了它，所以本次自动评分为 0 分。"
               "原文件已保留为 `{name}.broken`，请联系老师。")


@dataclass(frozen=True)
class Limits:
    jobs: int = os.cpu_count() or 1
    memory_mb: int = 6144        # per submission, its kernel included (RLIMIT_AS)
    wall_seconds: int = 900      # per submission
    cell_seconds: int | None = None  # per cell; None keeps autograder/config.py's value

    def nbgrader_args(self) -> list[str]:
        return [f"--Execute.timeout={self.cell_seconds}"] if self.cell_seconds else []


@dataclass
class Outcome:
    student: str
    ok: bool
    seconds: float
    note: str = ""


def nbgrader_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "nbgrader", *args, "--log-level=WARN"]


def child_env(jobs: int) -> dict[str, str]:
    """nbgrader needs its own scripts (alembic) on PATH; parallel kernels get one thread each."""
    env = {**os.environ, "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])}
    if jobs > 1:
        env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    return env


def limit_memory(megabytes: int):
    def apply() -> None:
        os.setsid()  # own process group: a timeout kills nbgrader and its kernel together
        limit = megabytes * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    return apply


def repair_unreadable(root: Path, section: str, student: str) -> str:
    """Make the submission gradable; return what was wrong with it ("" when nothing was).

    Duplicate or missing cell ids (a pasted cell) are repaired in place; a file that is no
    notebook at all (invalid JSON, truncated, missing) is replaced by the released notebook.
    """
    notebook = root / "submitted" / student / section / f"{section}.ipynb"
    why = "文件不存在" if not notebook.exists() else _normalize_in_place(notebook)
    return replace_with_released(root, section, student, why) if why else ""


def replace_with_released(root: Path, section: str, student: str, why: str) -> str:
    """Keep the submission as ``*.broken``; grade the released notebook with a note on top."""
    notebook = root / "submitted" / student / section / f"{section}.ipynb"
    if notebook.exists():
        shutil.move(notebook, notebook.with_suffix(".ipynb.broken"))
    released = json.loads((root / RELEASE_DIR / section / f"{section}.ipynb").read_text(encoding="utf-8"))
    note = dict(nbformat.v4.new_markdown_cell(BROKEN_NOTE.format(name=notebook.name, why=why)))
    note["id"] = "grading-note"
    released["cells"].insert(0, note)
    notebook.write_text(json.dumps(released, ensure_ascii=False), encoding="utf-8")
    return why


def _normalize_in_place(notebook: Path) -> str:
    """Repair cell ids in place; return why the file is not a valid notebook ("" if it is)."""
    try:
        nb = json.loads(notebook.read_text(encoding="utf-8"))
        changes, repaired = nbformat.validator.normalize(nb)
        nbformat.validate(repaired)
    except Exception as err:  # invalid JSON, truncated file, not a notebook …
        return f"不是有效的 notebook：{type(err).__name__}"
    if changes:
        notebook.write_text(json.dumps(repaired, ensure_ascii=False), encoding="utf-8")
    return ""


def grade_one(root: Path, section: str, student: str, limits: "Limits") -> Outcome:
    """Autograde one submission; if nbgrader fails on it, grade the blank notebook with a note."""
    start = time.perf_counter()
    note = repair_unreadable(root, section, student)
    ok, detail = run_autograde(root, section, student, limits)
    if not ok:
        note = replace_with_released(root, section, student, f"评分程序无法处理它：{detail}")
        ok, detail = run_autograde(root, section, student, limits)
    return Outcome(student, ok, time.perf_counter() - start, note if ok else detail)


def run_autograde(root: Path, section: str, student: str, limits: "Limits") -> tuple[bool, str]:
    cmd = nbgrader_cmd("autograde", section, f"--student={student}", "--force", *limits.nbgrader_args())
    proc = subprocess.Popen(cmd, cwd=root, env=child_env(limits.jobs), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, preexec_fn=limit_memory(limits.memory_mb))
    try:
        output, _ = proc.communicate(timeout=limits.wall_seconds)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        return False, f"超过 {limits.wall_seconds} 秒，已终止"
    errors = [line for line in output.splitlines() if "Error" in line or "ERROR" in line]
    return proc.returncode == 0, (errors[0] if errors else output.strip()[-200:])


def progress(done: int, total: int, outcome: Outcome) -> None:
    width = 30
    filled = width * done // total
    mark = "✓" if outcome.ok else "✗"
    extra = f"  {outcome.note}" if outcome.note else ""
    print(f"[{'#' * filled}{'.' * (width - filled)}] {done}/{total} {mark} {outcome.student} "
          f"({outcome.seconds:.1f} s){extra}", file=sys.stderr, flush=True)


def students_of(root: Path, section: str) -> list[str]:
    return sorted(p.name for p in (root / "submitted").glob("*") if (p / section).is_dir())


def grade_section(root: Path, section: str, students: list[str], limits: Limits) -> list[Outcome]:
    outcomes = []
    with ThreadPoolExecutor(max_workers=limits.jobs) as pool:
        futures = [pool.submit(grade_one, root, section, s, limits) for s in students]
        for done, future in enumerate(as_completed(futures), start=1):
            outcomes.append(future.result())
            progress(done, len(students), outcomes[-1])
    return sorted(outcomes, key=lambda o: o.student)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="并行批改一节作业的全部提交（nbgrader autograde）。")
    parser.add_argument("section")
    parser.add_argument("--students", help="逗号分隔的学生 id；默认 submitted/ 下的全部学生")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="同时批改的份数（默认：CPU 核数）")
    parser.add_argument("--memory-mb", type=int, default=6144, help="每份提交（含其内核）的内存上限")
    parser.add_argument("--timeout", type=int, default=900, help="每份提交的总时间上限（秒）")
    parser.add_argument("--cell-timeout", type=int, help="每个单元格的时间上限（秒，默认见 autograder/config.py）")
    parser.add_argument("--sequential", action="store_true", help="用一个 nbgrader 进程依次批改（对照用）")
    args = parser.parse_args(argv)
    root = Path.cwd()
    students = args.students.split(",") if args.students else students_of(root, args.section)
    if not students:
        print(f"submitted/ 里没有 {args.section} 的提交。", file=sys.stderr)
        return 1
    start = time.perf_counter()
    if args.sequential:
        subprocess.run(nbgrader_cmd("autograde", args.section, "--force"), cwd=root, env=child_env(1), check=False)
    else:
        limits = Limits(args.jobs, args.memory_mb, args.timeout, args.cell_timeout)
        outcomes = grade_section(root, args.section, students, limits)
        failed = [o for o in outcomes if not o.ok]
        for o in failed:
            print(f"未能批改 {o.student}：{o.note}", file=sys.stderr)
    elapsed = time.perf_counter() - start
    print(f"{len(students)} 份提交，用时 {elapsed:.1f} 秒（{60 * len(students) / elapsed:.1f} 份/分钟）", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
