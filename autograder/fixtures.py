"""The stored results the class edition's checks compare with (utils/checks/fixtures/<module>.pt).

Each visible check (``extended=False``, ``seed=0``: what a check cell runs) is run with the course's
reference and with every variant of the bug bank while utils/checks/oracle.py records what each
oracle returns, so the class edition answers the same calls with the same results, the failure
paths of the known misconceptions included.

    python -m autograder.fixtures        (part of `python3 course.py build`)
"""
from __future__ import annotations

import contextlib
import io
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


def record() -> Store:
    """What every oracle returns when the visible checks judge the reference and the bug bank."""
    from tests.bugbank import all_variants, load
    variants = all_variants()
    with oracle.recording() as store:
        for name in (n for n in checks.__all__ if n.startswith("check_")):
            exercise = name.removeprefix("check_")
            _quietly(getattr(checks, name), getattr(reference, exercise))
            for variant in (v for v in variants if v.exercise == exercise):
                _quietly(getattr(checks, name), load(variant))
    return store


def files(store: Store) -> dict[Path, bytes]:
    """The fixture files of ``store``, path -> bytes (keys sorted, so that a rebuild is byte-identical)."""
    out = {}
    for module, results in sorted(store.items()):
        buffer = io.BytesIO()
        torch.save(dict(sorted(results.items())), buffer)
        out[FIXTURES / f"{module}.pt"] = buffer.getvalue()
    return out


def main() -> None:
    FIXTURES.mkdir(exist_ok=True)
    written = files(record())
    for stale in set(FIXTURES.glob("*.pt")) - set(written):
        stale.unlink()
    for path, data in written.items():
        path.write_bytes(data)
        print(f"wrote {path.relative_to(Path.cwd()) if path.is_relative_to(Path.cwd()) else path}")


if __name__ == "__main__":
    main()
