"""Run a notebook headless in a fresh kernel, as a learner's "Run All" would (tests, benchmark)."""
from __future__ import annotations

import time
from pathlib import Path
from typing import NamedTuple

import nbformat
import psutil
from nbclient import NotebookClient


class Executed(NamedTuple):
    nb: nbformat.NotebookNode
    seconds: float        # wall time, kernel start to shutdown
    cpu_seconds: float    # CPU time the kernel spent (user + system, up to its last cell)


def execute(path: Path, allow_errors: bool = False, timeout: int = 120) -> Executed:
    """The executed notebook, its wall time and its kernel's CPU time; the kernel's cwd is the notebook's folder.

    The CPU time does not grow when other processes share the cores (the wall time does), so a
    budget in CPU seconds holds on a busy machine as on an idle one."""
    nb = nbformat.read(path, as_version=4)
    kernel: list[psutil.Process] = []
    cpu = [0.0]

    def started(**_):
        kernel.append(psutil.Process(client.km.provisioner.pid))

    def cell_done(**_):
        times = kernel[0].cpu_times()
        cpu[0] = times.user + times.system + times.children_user + times.children_system

    client = NotebookClient(nb, timeout=timeout, kernel_name="python3", allow_errors=allow_errors,
                            resources={"metadata": {"path": str(path.parent)}},
                            on_notebook_start=started, on_cell_executed=cell_done)
    start = time.perf_counter()
    client.execute()
    return Executed(nb, time.perf_counter() - start, cpu[0])


def errors(nb) -> list[tuple[int, dict]]:
    return [(i, out) for i, cell in enumerate(nb.cells) if cell.cell_type == "code"
            for out in cell.get("outputs", []) if out.get("output_type") == "error"]


def stream_text(cell, name: str = "stdout") -> str:
    return "".join(o.get("text", "") for o in cell.get("outputs", [])
                   if o.get("output_type") == "stream" and o.get("name") == name)
