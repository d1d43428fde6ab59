"""The multi-grader set-up of docs/instructor_guide.md: a PostgreSQL gradebook
(``CourseDirectory.db_url``) written by the parallel grader's concurrent workers.

Starts a throw-away PostgreSQL server (Debian's postgresql package) on a Unix socket in a
temporary directory; skipped where PostgreSQL or psycopg is not installed.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from autograder import grade
from autograder.notebook_format import points, visible_and_hidden

from .nbgrader_course import Course
from .conftest import load_notebook, postgres_programs
from .test_grading import submit_bug_bank

SECTION = "01_qkv_and_scores"


def _as_postgres(*cmd: str) -> list[str]:
    """PostgreSQL refuses to run as root: run as the postgres user when we are root."""
    return ["runuser", "-u", "postgres", "--", *cmd] if os.geteuid() == 0 else list(cmd)


@pytest.fixture
def postgres_url():
    bin_dir = postgres_programs()   # needs("postgres"): there, and psycopg (SQLAlchemy 2.1's driver) installed
    # Not under pytest's tmp_path: the postgres user must be able to reach it.
    base = Path(tempfile.mkdtemp(prefix="attention-pg-"))
    data, socket = base / "data", base / "socket"
    socket.mkdir()
    if os.geteuid() == 0:
        for path in (base, socket):
            shutil.chown(path, "postgres")
    run = lambda *cmd: subprocess.run(_as_postgres(*cmd), check=True, capture_output=True, cwd=base)  # noqa: E731
    run(str(bin_dir / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres")
    run(str(bin_dir / "pg_ctl"), "-D", str(data), "-w", "-l", str(base / "server.log"), "start",
        "-o", f"-k {socket} -c listen_addresses='' -p 5439")
    try:
        run(str(bin_dir / "createdb"), "-h", str(socket), "-p", "5439", "-U", "postgres", "gradebook")
        yield f"postgresql://postgres@/gradebook?host={socket}&port=5439"
    finally:
        run(str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop")
        shutil.rmtree(base, ignore_errors=True)


@pytest.mark.slow
@pytest.mark.needs("postgres")
def test_parallel_grading_into_a_postgresql_gradebook(postgres_url, tmp_path, monkeypatch):
    course_root = tmp_path / "course"
    config = course_root / "nbgrader_config.py"
    course = Course.create(course_root, [SECTION], extra_config=f"c.CourseDirectory.db_url = {postgres_url!r}\n")
    assert "postgresql://" in config.read_text(encoding="utf-8")
    assert not (course_root / "gradebook.db").exists()
    plan = submit_bug_bank(course, SECTION)
    monkeypatch.chdir(course_root)
    assert grade.main([SECTION, "--jobs", "2"]) == 0

    scores, full = course.scores(SECTION, db_url=postgres_url), points(load_notebook("solutions", SECTION))
    assert not (course_root / "gradebook.db").exists(), "nothing may fall back to SQLite"
    assert set(scores) == set(plan) | {"untouched"}
    for student, variants in plan.items():
        for exercise, variant in variants.items():
            for cell in visible_and_hidden(exercise):
                hidden_or_wrong = cell.endswith("_hidden") or not variant.fits_visible
                want = 0 if variant.expected and hidden_or_wrong else full[cell]
                assert scores[student][cell] == want, f"{student} {cell}"
