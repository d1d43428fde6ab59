"""The linter configured in pyproject.toml ([tool.ruff]) finds nothing: long lines, unused
imports, names and arguments are caught by the test command, not by the next reader."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from .conftest import ROOT


def test_ruff_finds_nothing():
    ruff = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")
    assert ruff, "ruff is a dev dependency: python3 course.py setup installs it"
    result = subprocess.run([ruff, "check", "--no-cache", "--output-format", "concise", "."], cwd=ROOT,
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-1000:]
