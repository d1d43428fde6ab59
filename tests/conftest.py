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
