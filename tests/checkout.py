"""This checkout as another account runs it: itself, or a copy of hard links to it where the checkout sits in a
folder that account cannot enter (root's home in a container, a folder ``mktemp -d`` made: 0700).

A copy of hard links costs nothing, the environment of 2 GB included; it needs the same file system.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import ROOT


def runs_as(user: int, python: str, folder: Path) -> bool:
    """Whether ``user`` can start ``python`` in ``folder`` and import the course's tests there."""
    try:
        return subprocess.run([python, "-c", "import pytest, tests"], cwd=folder, user=user, group=user,
                              extra_groups=[], capture_output=True, timeout=120).returncode == 0
    except OSError:          # the folder or the program: permission denied
        return False


def checkout_for(user: int, into: Path) -> tuple[Path, str]:
    """(checkout, its Python) that ``user`` can run: this one, or a copy of hard links to it made in ``into``
    (a folder the user can enter) where this one sits in a folder the user cannot enter."""
    if runs_as(user, sys.executable, ROOT):
        return ROOT, sys.executable
    python = Path(sys.executable)
    if not python.is_relative_to(ROOT):
        pytest.skip(f"the checkout is in a folder account {user} cannot enter, and so is this Python ({python})")
    copy = into / "course"
    linked = subprocess.run(["cp", "-al", str(ROOT), str(copy)], capture_output=True, text=True)
    if linked.returncode != 0:   # another file system than the checkout's: no hard links
        pytest.skip(f"the checkout is in a folder account {user} cannot enter, and cannot be linked into {into}: "
                    f"{linked.stderr.strip()}")
    copy.chmod(0o755)
    _repoint_scripts(python.parent, copy / python.parent.relative_to(ROOT))
    python = copy / python.relative_to(ROOT)
    assert runs_as(user, str(python), copy), f"account {user} cannot run {python} in the linked copy {copy}"
    return copy, str(python)


def _repoint_scripts(scripts: Path, copied: Path) -> None:
    """The environment's scripts (nbgrader runs ``alembic``) start with ``#!<scripts>/python``: point the copy's
    at the copy. Each is written as a new file: writing through the hard link would change this checkout's."""
    old, new = f"#!{scripts}/".encode(), f"#!{copied}/".encode()
    for script in copied.iterdir():
        if script.is_symlink() or not script.is_file():
            continue
        text = script.read_bytes()
        if text.startswith(old):
            mode = script.stat().st_mode
            script.unlink()
            script.write_bytes(new + text[len(old):])
            script.chmod(mode)
