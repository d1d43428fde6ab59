"""Run under another set of PyTorch's CPU kernels (``ATEN_CPU_CAPABILITY``, set before torch is imported):
what a learner's machine computes differently from the one that built the course.

    python -m tests.kernel_sets record STORE.pt          the stored results, recorded here
    python -m tests.kernel_sets replay STORE OUT.json     every bug-bank variant's visible check: its code in the
                                                          full course and answered from STORE (the class edition):
                                                          a file ``record`` wrote, or a folder of fixture files

tests/test_kernel_sets.py runs these in subprocesses and compares.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

from utils import reference
from utils.checks import oracle

from . import record_fixtures
from .bugbank import all_variants, load
from .test_bugbank import run_check


def replay(store: dict) -> dict[str, dict]:
    """{variant id or "<exercise>/reference": {"full": code, "class": code, "expected": code}}."""
    cases = [(v.id, v.exercise, lambda v=v: load(v), None if v.fits_visible else v.expected) for v in all_variants()]
    cases += [(f"{e}/reference", e, lambda e=e: getattr(reference, e), None) for e in sorted({c[1] for c in cases})]
    out = {}
    for name, exercise, candidate, expected in cases:
        full = run_check(exercise, candidate())
        with oracle.replaying(store):
            stored = run_check(exercise, candidate())
        out[name] = {"full": full, "class": stored, "expected": expected}
    return out


def load_store(path: Path) -> dict:
    """A store ``record`` wrote, or the fixture files of a folder (utils/checks/fixtures/) by module."""
    if path.is_dir():
        return {file.stem: torch.load(file, weights_only=True) for file in sorted(path.glob("*.pt"))}
    return torch.load(path, weights_only=True)


def main(argv: list[str]) -> None:
    command, store_path, *rest = argv
    capability = torch.backends.cpu.get_cpu_capability()
    if command == "record":
        torch.save(record_fixtures.record(), store_path)
    elif command == "replay":
        result = replay(load_store(Path(store_path)))
        with open(rest[0], "w", encoding="utf-8") as out:
            json.dump({"capability": capability, "codes": result}, out)
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
