"""Run a notebook headless in a fresh kernel, as a learner's "Run All" would (tests, benchmark)."""
from __future__ import annotations

import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient


def execute(path: Path, allow_errors: bool = False, timeout: int = 120) -> tuple[nbformat.NotebookNode, float]:
    """The executed notebook and its wall time; the kernel's cwd is the notebook's folder."""
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3", allow_errors=allow_errors,
                            resources={"metadata": {"path": str(path.parent)}})
    start = time.perf_counter()
    client.execute()
    return nb, time.perf_counter() - start


def errors(nb) -> list[tuple[int, dict]]:
    return [(i, out) for i, cell in enumerate(nb.cells) if cell.cell_type == "code"
            for out in cell.get("outputs", []) if out.get("output_type") == "error"]


def stream_text(cell, name: str = "stdout") -> str:
    return "".join(o.get("text", "") for o in cell.get("outputs", [])
                   if o.get("output_type") == "stream" and o.get("name") == name)
