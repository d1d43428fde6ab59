#!/usr/bin/env python3
"""One entry point for learners, instructors and CI.

    python3 course.py lab      set up .venv (first time only), copy new sections of notebooks/ into your
                               working copy my_work/ (never over your work) and open JupyterLab there
    python3 course.py test     set up .venv with test tools and run the whole test suite
    python3 course.py test --quick   the quick tier: checks, bug bank and units in-process, one notebook
    python3 course.py build    regenerate utils/reference/ and notebooks/ from solutions/
    python3 course.py progress where am I: every exercise of my_work/ passed, failed or not started
    python3 course.py edition student OUT [--answers-through SECTION]
                               build the class edition students install (no answer to an open assignment)
    python3 course.py hub demo|setup|start [class.toml]
                               as root: a class on JupyterHub (docs/jupyterhub.md); demo is a throw-away one
    python3 course.py setup    only create / update .venv

Only the standard library is used here, so it runs on a bare Python >= 3.10.
"""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import venv
from pathlib import Path

from utils import working_copy   # the learner's my_work/: standard library only, like this file

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
# The course is tested with exactly this torch; on this kind of machine it is a CPU wheel on disk.
TORCH_PIN = "torch==2.13.0"
FIRST_NOTEBOOK = "00_start_here/00_start_here.ipynb"   # in the learner's working copy


def venv_python() -> Path:
    sub = "Scripts/python.exe" if os.name == "nt" else "bin/python"
    return VENV / sub


def run(*cmd: str | Path, **kw) -> None:
    print("+", " ".join(str(c) for c in cmd), flush=True)
    subprocess.run([str(c) for c in cmd], check=True, cwd=kw.pop("cwd", ROOT), **kw)


def setup(extras: str = "dev") -> Path:
    """Create .venv and install the pinned torch, then the course package (editable)."""
    stamp_text = hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest() + extras
    stamp = VENV / ".course-installed"
    python = venv_python()
    if stamp.exists() and stamp.read_text() == stamp_text and python.exists():
        return python
    if not python.exists():
        print(f"创建虚拟环境 {VENV} …", flush=True)
        venv.EnvBuilder(with_pip=True).create(VENV)
    pip = [python, "-m", "pip", "install", "--disable-pip-version-check", "-q"]
    run(*pip, TORCH_PIN)  # first, so the range in pyproject admits it and pulls nothing newer
    run(*pip, "-e", f".[{extras}]" if extras else ".")
    # jsonschema's optional IRI-format checker, pulled in by jupyter-events: importing it compiles a
    # grammar (1.2 s here) in every process that imports nbformat — each nbgrader command, grading
    # worker and Jupyter server. Nothing in the course validates IRIs, and `pip check` stays clean.
    run(python, "-m", "pip", "uninstall", "--disable-pip-version-check", "-y", "-q", "rfc3987-syntax")
    stamp.write_text(stamp_text)
    return python


# JupyterLab defaults for the course: a zh-CN page, so browsers draw the Chinese text with the
# Simplified Chinese glyphs of a CJK font (Noto Sans CJK, for one, otherwise shows its Japanese ones).
LAB_DEFAULTS = {"@jupyterlab/translation-extension:plugin": {"locale": "zh_CN"}}


def write_lab_defaults(config_dir: Path) -> None:
    """Write LAB_DEFAULTS where JupyterLab reads default settings in ``config_dir``."""
    target = config_dir / "labconfig" / "default_setting_overrides.json"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(LAB_DEFAULTS, indent=2) + "\n", encoding="utf-8")


def lab_command(python: Path, work: Path) -> list[str | Path]:
    """JupyterLab on the course folder (solutions/ and all) opening the first notebook of the working
    copy ``work``; on ``work`` itself where it is elsewhere ($COURSE_WORK)."""
    top = ROOT if work.is_relative_to(ROOT) else work
    cmd = [python, "-m", "jupyter", "lab", f"--ServerApp.root_dir={top}", work / FIRST_NOTEBOOK]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        cmd.append("--allow-root")
    return cmd


def lab(args: list[str]) -> None:
    python = setup()
    write_lab_defaults(VENV / "etc" / "jupyter")  # the environment's own config directory
    for line in working_copy.sync(ROOT):   # new sections in, updates beside the learner's notebooks
        print(line, flush=True)
    run(*lab_command(python, working_copy.work_folder(ROOT)), *args)


def test(args: list[str]) -> None:
    python = setup()
    # worksteal: a worker that runs out of tests takes some from a busy one (notebook and grading
    # tests take minutes; most take milliseconds); the ten slowest are listed at the end.
    # --quick (tests/conftest.py) leaves out the slow tier: nbgrader, the sandbox, the browser, all but one notebook.
    # Two workers more than cores: with one per core the CPU idled a third of the run (user+sys 18.5 min in
    # 16.2 min on 2 cores), with one more still 30 %: the hub, browser, pip and nbgrader tests wait on
    # their subprocesses.
    workers = str((os.cpu_count() or 1) + 2)
    # More processes than cores: one torch thread each (as autograder.grade gives parallel kernels), so
    # that no process's idle threads spin on a core another one needs (10 % less CPU for the notebooks).
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    run(python, "-m", "pytest", "-n", workers, "--dist", "worksteal", "--durations=10", *args, env=env)


def build(args: list[str]) -> None:
    python = setup()
    run(python, "-m", "autograder.build", *args)


def edition(args: list[str]) -> None:
    python = setup()
    run(python, "-m", "autograder.edition", *args)


def hub(args: list[str]) -> None:
    python = setup()
    run(python, ROOT / "deploy" / "jupyterhub" / "classroom.py", *args)


def progress() -> None:
    python = setup()
    run(python, "-m", "utils.progress")


COMMANDS = {"setup": lambda _args: setup(), "lab": lab, "test": test, "build": build,
            "progress": lambda _args: progress(), "edition": edition, "hub": hub}

if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] not in COMMANDS:
        print(__doc__)
        sys.exit(2)
    try:
        COMMANDS[sys.argv[1]](sys.argv[2:])
    except subprocess.CalledProcessError as err:
        sys.exit(err.returncode)
