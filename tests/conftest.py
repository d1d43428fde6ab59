from __future__ import annotations

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


# The longest tests first, so that both workers are busy to the end instead of one of them
# waiting on a last long test (pytest-xdist hands tests out in collection order).
LONGEST_FIRST = ("test_grading.py", "test_browser.py", "test_sandbox.py", "test_exchange_flow.py",
                 "test_bad_submissions.py", "test_notebooks_run.py")


def pytest_collection_modifyitems(items):
    def cost_rank(item) -> int:
        if item.path.name in LONGEST_FIRST:
            return LONGEST_FIRST.index(item.path.name)
        return len(LONGEST_FIRST) + (0 if item.get_closest_marker("slow") else 1)
    items.sort(key=cost_rank)  # stable: the order inside a file is kept
