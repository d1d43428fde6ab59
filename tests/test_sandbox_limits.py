"""The sandbox's limits and its missing network hold: for a command the sandbox runs, and under stock
``nbgrader autograde`` (no grading worker of autograder/worker.py sets a limit there), for kernels
forked from a zygote and for kernels started by bwrap: a fork bomb is refused, memory beyond
``c.GradingLimits.memory_mb`` is refused, a connection to the grading machine reaches nothing, and
every test cell is graded as it deserves.
"""
from __future__ import annotations

import asyncio
import logging
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest
from jupyter_client.manager import AsyncKernelManager
from traitlets.config import Config

from autograder import sandbox
from autograder.provisioner import grading_kernels

from .busy_machine import cell_timeouts
from .nbgrader_course import Course
from .test_bad_submissions import (FULL, GOOD_PROJECT, PROJECT_ZERO, SECTION, Listener, assert_sealed, change, good,
                                   hostile, listener)
from .test_sandbox import needs_bwrap, scores

__all__ = ["listener"]  # the fixture

MEMORY_MB = 3000
# 4 GB of address space, never touched: refused under the limit, harmless without it.
MEMORY_HOG = "import torch\nhog = torch.empty(10**9)\n" + GOOD_PROJECT


def reach_and_report(targets: list[tuple[str, int]]) -> str:
    """A program that prints its memory and process limits, then sends to each of ``targets``."""
    return ("import resource, socket\n"
            "print('LIMITS', resource.getrlimit(resource.RLIMIT_AS)[0], resource.getrlimit(resource.RLIMIT_NPROC)[0])\n"
            f"for address in {targets!r}:\n"
            "    try:\n"
            "        socket.create_connection(tuple(address), timeout=3).sendall(b'stolen')\n"
            "        print('REACHED', address)\n"
            "    except OSError as err:\n"
            "        print('UNREACHABLE', address, type(err).__name__)\n")


@needs_bwrap
def test_the_sandbox_runs_its_command_without_network_and_under_the_limits(tmp_path, listener: Listener):
    program = [sys.executable, "-c", reach_and_report(listener.targets)]
    free = subprocess.run(program, capture_output=True, text=True, check=True).stdout
    deadline = time.monotonic() + 30   # the server's threads take what was sent
    while len(listener.received) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert free.count("REACHED") == 2 and listener.received == [b"stolen"] * 2, "outside the sandbox, it is reached"
    listener.received.clear()
    argv = sandbox.SandboxLayout.here().bwrap(program, (str(tmp_path), str(tmp_path)), os.environ, memory_mb=300,
                                       max_processes=7, sockets=str(tmp_path))
    sealed = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
    limits = (sandbox.within_hard_limit(resource.RLIMIT_AS, 300 * 1024 * 1024),
              sandbox.within_hard_limit(resource.RLIMIT_NPROC, 7))
    assert f"LIMITS {limits[0]} {limits[1]}" in sealed
    assert sealed.count("UNREACHABLE") == 2 and "REACHED" not in sealed.replace("UNREACHABLE", ""), sealed
    assert listener.received == [], "the server on the grading machine was reached from the sandbox"


def test_the_own_pids_cgroup_is_found_in_cgroup_v1_and_v2_mounts():
    groups = {"pids": "/docker/abc", "": "/user.slice/grader"}
    v1 = "40 30 0:35 /docker /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids"
    v2 = "41 30 0:36 / /sys/fs/cgroup rw,relatime - cgroup2 cgroup2 rw"
    other = "42 30 0:37 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu"
    assert sandbox.own_cgroup(v1, groups) == Path("/sys/fs/cgroup/pids/abc")
    assert sandbox.own_cgroup(v2, groups) == Path("/sys/fs/cgroup/user.slice/grader")
    assert sandbox.own_cgroup(other, groups) is None


def test_root_grading_without_a_pids_cgroup_warns(monkeypatch, caplog, tmp_path):
    """Each sandboxed kernel's launch says so (here prepared, not started)."""
    monkeypatch.setattr(sandbox, "unavailable_reason", lambda: None)
    monkeypatch.setattr(sandbox, "pids_cgroup_parent", lambda: None)
    monkeypatch.setattr(sandbox.os, "getuid", lambda: 0)
    config = Config({"SandboxProvisioner": {"fork": False}})
    km = grading_kernels(AsyncKernelManager(kernel_name="python3", config=config))
    km.log = logging.getLogger("grading")
    with caplog.at_level(logging.WARNING):
        cmd, _ = asyncio.run(km.pre_start_kernel(cwd=str(tmp_path)))
        asyncio.run(km.cleanup_resources())
    assert "--unshare-net" in cmd, "the kernel is sandboxed all the same"
    assert "进程数没有上限" in caplog.text and "§6.3" in caplog.text


@pytest.mark.slow
@needs_bwrap
@pytest.mark.parametrize("fork_kernels", [True, False], ids=["forked", "bwrap"])
def test_limits_and_no_network_under_nbgrader_autograde(tmp_path, listener: Listener, fork_kernels):
    config = (cell_timeouts(6) + f"c.SandboxProvisioner.fork = {fork_kernels}\n"
              f"c.GradingLimits.memory_mb = {MEMORY_MB}\n")
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
