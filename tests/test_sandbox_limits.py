"""The sandbox's limits and its missing network hold under stock ``nbgrader autograde`` (no grading
worker of autograder/grade.py sets a limit there), for kernels forked from a zygote and for kernels
started by bwrap: a fork bomb is refused, memory beyond ``c.ResilientExecute.memory_mb`` is refused,
a connection to the grading machine reaches nothing, and every test cell is graded as it deserves.
"""
from __future__ import annotations

import logging
from pathlib import Path

import pytest

from autograder import sandbox

from .busy_machine import cell_timeouts
from .nbgrader_course import Course
from .test_bad_submissions import (FULL, GOOD_PROJECT, PROJECT_ZERO, SECTION, Listener, assert_sealed, change, good,
                                   hostile, listener)
from .test_sandbox import needs_bwrap, scores

__all__ = ["listener"]  # the fixture

MEMORY_MB = 3000
# 4 GB of address space, never touched: refused under the limit, harmless without it.
MEMORY_HOG = "import torch\nhog = torch.empty(10**9)\n" + GOOD_PROJECT


def test_bwrap_runs_the_command_without_network_and_under_the_limits():
    argv = sandbox.bwrap_argv(["true"], ("/tmp", "/tmp"), limits=sandbox.Limits(memory_mb=100, processes=7))
    sealed = argv[argv.index(sandbox.shutil.which("bwrap")):]
    assert "--unshare-net" in sealed
    assert sealed[-3:] == [str(100 * 1024 * 1024), "7", "true"], "the launcher's limits, then the command"


def test_the_own_pids_cgroup_is_found_in_cgroup_v1_and_v2_mounts():
    groups = {"pids": "/docker/abc", "": "/user.slice/grader"}
    v1 = "40 30 0:35 /docker /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids"
    v2 = "41 30 0:36 / /sys/fs/cgroup rw,relatime - cgroup2 cgroup2 rw"
    other = "42 30 0:37 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu"
    assert sandbox.own_cgroup(v1, groups) == Path("/sys/fs/cgroup/pids/abc")
    assert sandbox.own_cgroup(v2, groups) == Path("/sys/fs/cgroup/user.slice/grader")
    assert sandbox.own_cgroup(other, groups) is None


def test_root_grading_without_a_pids_cgroup_warns(monkeypatch, caplog):
    monkeypatch.setattr(sandbox, "unavailable_reason", lambda: None)
    monkeypatch.setattr(sandbox, "pids_cgroup_parent", lambda: None)
    monkeypatch.setattr(sandbox.os, "getuid", lambda: 0)
    with caplog.at_level(logging.WARNING):
        sandbox.kernel_manager_class(logging.getLogger("grading"))
    assert "进程数没有上限" in caplog.text and "§6.3" in caplog.text


@pytest.mark.slow
@needs_bwrap
@pytest.mark.parametrize("fork_kernels", [True, False], ids=["forked", "bwrap"])
def test_limits_and_no_network_under_nbgrader_autograde(tmp_path, listener: Listener, fork_kernels):
    config = (cell_timeouts(6) + f"c.ResilientExecute.fork_kernels = {fork_kernels}\n"
              f"c.ResilientExecute.memory_mb = {MEMORY_MB}\n")
    course = Course.create(tmp_path, [SECTION], extra_config=config)
    release = course.release_notebook(SECTION)
    plan = {student: nb for student, (nb, _, _) in hostile(release, listener.targets).items()}
    plan["memory-hog"] = change(good(release), project_qkv=MEMORY_HOG)
    plan["zz-good"] = good(release)
    for student, nb in plan.items():
        course.submit(student, SECTION, nb)
    course.nbgrader("autograde", SECTION)
    assert scores(course) == {"fork-bomb": FULL, "reaches-out": FULL, "memory-hog": PROJECT_ZERO, "zz-good": FULL}
    assert_sealed(course, listener)
