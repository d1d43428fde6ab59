from __future__ import annotations

import os
from pathlib import Path

import pytest

from autograder.notebook_format import read

ROOT = Path(__file__).resolve().parents[1]
SECTIONS = sorted(p.name for p in (ROOT / "solutions").iterdir() if (p / f"{p.name}.ipynb").exists())


def notebook_path(kind: str, section: str) -> Path:
    return ROOT / kind / section / f"{section}.ipynb"


def load_notebook(kind: str, section: str) -> dict:
    return read(notebook_path(kind, section))


@pytest.fixture(scope="session")
def root() -> Path:
    return ROOT


# pytest-xdist's worksteal scheduler gives each worker one contiguous share of the collected
# tests to start with, then lets an idle worker steal from a busy one. So each share begins with
# its part of the long tests (dealt round-robin, longest first) and ends with quick ones: every
# worker starts on long work and the quick tests fill the gaps at the end.
LONGEST_FIRST = ("test_grading.py", "test_browser.py", "test_sandbox.py", "test_exchange_flow.py",
                 "test_bad_submissions.py", "test_notebooks_run.py")


def _cost_rank(item) -> int:
    if item.path.name in LONGEST_FIRST:
        return LONGEST_FIRST.index(item.path.name)
    return len(LONGEST_FIRST) + (0 if item.get_closest_marker("slow") else 1)


def pytest_collection_modifyitems(items):
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    ranked = sorted(items, key=_cost_rank)  # stable: the order inside a file is kept
    long_ = [i for i in ranked if _cost_rank(i) <= len(LONGEST_FIRST)]
    quick = ranked[len(long_):]
    shares, start = [], 0
    for w in range(workers):
        share = long_[w::workers]
        end = (w + 1) * len(items) // workers
        take = max(0, end - start - len(share))
        shares += share + quick[:take]
        quick, start = quick[take:], end
    items[:] = shares + quick
