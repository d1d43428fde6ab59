"""The stored results the class edition's checks compare with (utils/checks/fixtures/<module>.pt).

Each visible check (``extended=False``, ``seed=0``: what a check cell runs) is run with the course's
reference and with the candidates it is given while utils/checks/oracle.py records what each oracle
returns, so the class edition answers the same calls with the same results. The candidates are the
bug bank's variants, the failure paths of the known misconceptions included; the bank holds correct
variants too (answers), so it stays in tests/ and never ships: its entry point is
tests/record_fixtures.py, which `python3 course.py build` runs.
"""
from __future__ import annotations

import contextlib
import io
from collections.abc import Callable
from pathlib import Path

import torch

import utils.checks as checks
from utils import reference
from utils.checks import oracle
from utils.checks.oracle import FIXTURES

Store = dict[str, dict[str, object]]


def _quietly(check, candidate) -> None:
    with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(checks.CheckError):
        check(candidate)


def record(candidates: Callable[[str], list]) -> Store:
    """What every oracle returns when the visible checks judge the reference and ``candidates(exercise)``."""
    with oracle.recording() as store:
        for name in (n for n in checks.__all__ if n.startswith("check_")):
            exercise = name.removeprefix("check_")
            _quietly(getattr(checks, name), getattr(reference, exercise))
            for candidate in candidates(exercise):
                _quietly(getattr(checks, name), candidate)
    return store


def files(store: Store) -> dict[Path, bytes]:
    """The fixture files of ``store``, path -> bytes (keys sorted, so that a rebuild is byte-identical)."""
    out = {}
    for module, results in sorted(store.items()):
        buffer = io.BytesIO()
        torch.save(dict(sorted(results.items())), buffer)
        out[FIXTURES / f"{module}.pt"] = buffer.getvalue()
    return out


def write(store: Store) -> None:
    """Replace utils/checks/fixtures/ with the files of ``store``."""
    FIXTURES.mkdir(exist_ok=True)
    written = files(store)
    for stale in set(FIXTURES.glob("*.pt")) - set(written):
        stale.unlink()
    for path, data in written.items():
        path.write_bytes(data)
        print(f"wrote {path.relative_to(Path.cwd()) if path.is_relative_to(Path.cwd()) else path}")
