"""Run a notebook headless in a fresh kernel, as a learner's "Run All" would (tests, benchmark)."""
from __future__ import annotations

import resource
import time
from pathlib import Path
from typing import NamedTuple

import nbformat
from nbclient import NotebookClient


class Executed(NamedTuple):
    nb: nbformat.NotebookNode
    seconds: float        # wall time, kernel start to shutdown
    cpu_seconds: float    # CPU time of the kernel (user + system), and of any process it waited for


def execute(path: Path, allow_errors: bool = False, timeout: int = 120) -> Executed:
    """The executed notebook, its wall time and its kernel's CPU time; the kernel's cwd is the notebook's folder.

    The CPU time hardly grows when other processes share the cores (the wall time does), so a budget
    in CPU seconds holds on a busy machine as on an idle one. The kernel is this process's child,
    waited for when it shuts down: its time is what the children's usage gained meanwhile (only one
    notebook runs at a time in a process)."""
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3", allow_errors=allow_errors,
                            resources={"metadata": {"path": str(path.parent)}})
    cpu, start = children_cpu_seconds(), time.perf_counter()
    client.execute()
    return Executed(nb, time.perf_counter() - start, children_cpu_seconds() - cpu)


def children_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def errors(nb) -> list[tuple[int, dict]]:
    return [(i, out) for i, cell in enumerate(nb.cells) if cell.cell_type == "code"
            for out in cell.get("outputs", []) if out.get("output_type") == "error"]


def stream_text(cell, name: str = "stdout") -> str:
    return "".join(o.get("text", "") for o in cell.get("outputs", [])
                   if o.get("output_type") == "stream" and o.get("name") == name)
