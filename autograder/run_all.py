"""Run a notebook headless in a fresh kernel, as a learner's "Run All" would (tests, benchmark); not grading
(grading executes notebooks through autograder/preprocessors.py)."""
from __future__ import annotations

import os
import time
from pathlib import Path
from typing import NamedTuple

import nbformat
from nbclient import NotebookClient


class RunAll(NamedTuple):
    nb: nbformat.NotebookNode
    seconds: float              # wall time, kernel start to shutdown
    cpu_seconds: float | None   # the kernel's CPU time up to its last cell (None: no /proc to read it from)


def run_all(path: Path, allow_errors: bool = False, timeout: int = 120) -> RunAll:
    """The executed notebook, its wall time and its kernel's CPU time; the kernel's cwd is the notebook's folder.

    The CPU time hardly grows when other processes share the cores (the wall time does), so a budget
    in CPU seconds holds on a busy machine as on an idle one. It is read after each cell, while the
    kernel lives, from the kernel's own entry in /proc (Linux)."""
    nb = nbformat.read(path, as_version=4)
    cpu: list[float | None] = [None]

    def cell_done(**_):
        cpu[0] = process_cpu_seconds(client.km.provisioner.pid)

    client = NotebookClient(nb, timeout=timeout, kernel_name="python3", allow_errors=allow_errors,
                            resources={"metadata": {"path": str(path.parent)}}, on_cell_executed=cell_done)
    start = time.perf_counter()
    client.execute()
    return RunAll(nb, time.perf_counter() - start, cpu[0])


def process_cpu_seconds(pid: int) -> float | None:
    """User and system CPU seconds of process ``pid`` and of the children it waited for; None without /proc."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()   # after "pid (name)": state is field 3, utime … cstime 14-17
    return sum(map(int, fields[11:15])) / os.sysconf("SC_CLK_TCK")


def errors(nb) -> list[tuple[int, dict]]:
    return [(i, out) for i, cell in enumerate(nb.cells) if cell.cell_type == "code"
            for out in cell.get("outputs", []) if out.get("output_type") == "error"]


def stream_text(cell, name: str = "stdout") -> str:
    return "".join(o.get("text", "") for o in cell.get("outputs", [])
                   if o.get("output_type") == "stream" and o.get("name") == name)
