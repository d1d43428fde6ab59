"""Measure grading throughput on this machine: stock sequential ``nbgrader autograde`` against
``python -m autograder.grade`` on the same submissions, and the floor of one submission
(start a kernel and ``import torch``).

    python -m autograder.benchmark --sections 01_qkv_and_scores 03_single_head_attention --students 20

Submissions are the learner notebooks with every exercise solved (demos included), so each
one costs what a real, finished submission costs. Everything happens in a temporary course.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from jupyter_client.manager import start_new_kernel

from .build import ROOT
from .config import SOURCE_DIR
from .grade import child_env, nbgrader_cmd
from .notebook_format import read


def solved_notebook(released: dict, source: dict) -> dict:
    """The learner notebook with each solution cell replaced by the reference solution."""
    solutions = {c["metadata"]["nbgrader"]["grade_id"]: c["source"] for c in source["cells"]
                 if c["metadata"].get("nbgrader", {}).get("solution") and c["cell_type"] == "code"}
    for cell in released["cells"]:
        grade_id = cell["metadata"].get("nbgrader", {}).get("grade_id")
        if grade_id in solutions:
            cell["source"] = solutions[grade_id]
    return released


def make_course(root: Path, sections: list[str], students: int) -> None:
    (root / SOURCE_DIR).mkdir(parents=True)
    shutil.copy(ROOT / "nbgrader_config.py", root / "nbgrader_config.py")
    for section in sections:
        shutil.copytree(ROOT / SOURCE_DIR / section, root / SOURCE_DIR / section)
        subprocess.run(nbgrader_cmd("generate_assignment", section, "--force"), cwd=root, env=child_env(1),
                       check=True, capture_output=True)
        solved = solved_notebook(read(root / "notebooks" / section / f"{section}.ipynb"),
                                 read(root / SOURCE_DIR / section / f"{section}.ipynb"))
        for k in range(students):
            folder = root / "submitted" / f"student{k:02d}" / section
            folder.mkdir(parents=True)
            (folder / f"{section}.ipynb").write_text(json.dumps(solved, ensure_ascii=False), encoding="utf-8")


def timed(cmd: list[str], root: Path, jobs: int) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, cwd=root, env=child_env(jobs), check=True, capture_output=True)
    return time.perf_counter() - start


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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sections", nargs="+", default=["01_qkv_and_scores", "03_single_head_attention"])
    parser.add_argument("--students", type=int, default=20)
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        sequential, parallel = Path(tmp) / "sequential", Path(tmp) / "parallel"
        make_course(sequential, args.sections, args.students)
        shutil.copytree(sequential, parallel)
        n = len(args.sections) * args.students
        t_seq = sum(timed(nbgrader_cmd("autograde", s, "--force"), sequential, 1) for s in args.sections)
        t_par = sum(timed([sys.executable, "-m", "autograder.grade", s, "--jobs", str(args.jobs)], parallel, args.jobs)
                    for s in args.sections)
    floor = floor_seconds()
    print(f"{n} 份提交（{', '.join(args.sections)}，每节 {args.students} 份），{os.cpu_count()} 个 CPU 核：")
    print(f"  nbgrader autograde（顺序）      {t_seq:7.1f} 秒  {60 * n / t_seq:6.1f} 份/分钟  每份 {t_seq / n:.2f} 秒")
    print(f"  autograder.grade --jobs {args.jobs}     {t_par:7.1f} 秒  {60 * n / t_par:6.1f} 份/分钟  "
          f"加速 {t_seq / t_par:.2f}×")
    print(f"  下限：启动内核 + import torch  {floor:.2f} 秒/份（顺序评分时每份是它的 {t_seq / n / floor:.1f} 倍）")
    return 0


if __name__ == "__main__":
    sys.exit(main())
