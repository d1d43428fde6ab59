"""The course's sections, the one rule for all: a section is a folder ``NN_name`` (two digits, then a name)
that holds its notebook ``NN_name.ipynb``; the sections' order is their names'. New sections appear by
themselves, in solutions/ (the course's source) and in notebooks/ (the release).

Only the standard library: ``course.py`` and utils/working_copy.py run on a bare Python.
"""
from __future__ import annotations

import re
from pathlib import Path

SECTION_FOLDER = re.compile(r"\d\d_\w+")


def is_section(folder: Path) -> bool:
    return SECTION_FOLDER.fullmatch(folder.name) is not None and (folder / f"{folder.name}.ipynb").is_file()


def section_ids(*folders: Path) -> list[str]:
    """The sections in any of ``folders`` (e.g. solutions/, notebooks/; one missing holds none), in order."""
    return sorted({p.name for folder in folders if folder.is_dir() for p in folder.iterdir() if is_section(p)})
