"""The course's notebook format: nbgrader metadata, canonical JSON, the "cells" text format
(the conventions of cell kinds and grade_ids are utils/notebook.py's, re-exported here).

Authors may edit solutions/*.ipynb in JupyterLab (nbgrader's "Create Assignment" toolbar)
or as plain text in the "cells" format below, which round-trips exactly:

    python -m autograder.notebook_format unpack solutions/01_x/01_x.ipynb > /tmp/01.cells
    python -m autograder.notebook_format pack /tmp/01.cells solutions/01_x/01_x.ipynb

A cells file is a sequence of cells, each opened by a header line:

    %% markdown                      prose (not graded)
    %% code                          a demo / setup code cell (not graded)
    %% solution <name>               graded exercise: the cell defines exactly <name>
    %% test <grade_id> <points>      locked autograded test cell (grade_id starts test_<name>)
    %% answer <grade_id> <points>    manually graded markdown answer (reference answer inside)
    %% export                        code copied into utils/reference (setup a solution needs)

A header may end with the cell's tags in brackets, e.g. ``%% markdown [shows-answer:softmax]`` (a cell
that shows an exercise's answer: the class edition leaves it out while that exercise is open).
"""
from __future__ import annotations

import hashlib
import json
import re
import sys
from pathlib import Path

import nbformat

# The conventions themselves live in utils/notebook.py (the learner side reads notebooks too); re-exported here.
from utils.notebook import KINDS, cell_kind, exercise_of, exercises, grade_id, points, visible_and_hidden

__all__ = ["KINDS", "SCHEMA", "canonical", "cell_kind", "dumps", "exercise_of", "exercises", "grade_id", "make_cell",
           "nbgrader_meta", "new_notebook", "pack", "points", "read", "unpack", "visible_and_hidden"]

SCHEMA = 3
_HEADER = re.compile(r"^%% (\w+)(?: ([^\s\[]\S*))?(?: (\d+))?(?: \[([^\]]*)\])?\s*$")


def nbgrader_meta(kind: str, grade_id: str | None, points: int | None) -> dict | None:
    if kind == "solution":
        return {"grade": False, "grade_id": grade_id, "locked": False, "schema_version": SCHEMA,
                "solution": True}
    if kind == "test":
        return {"grade": True, "grade_id": grade_id, "locked": True, "points": points,
                "schema_version": SCHEMA, "solution": False}
    if kind == "answer":
        return {"grade": True, "grade_id": grade_id, "locked": False, "points": points,
                "schema_version": SCHEMA, "solution": True}
    return None


def make_cell(kind: str, source: str, grade_id: str | None = None, points: int | None = None,
              tags: tuple[str, ...] = ()) -> dict:
    if kind not in KINDS:
        raise ValueError(f"unknown cell kind {kind!r}; expected one of {KINDS}")
    cell_type = "markdown" if kind in ("markdown", "answer") else "code"
    metadata: dict = {}
    nbg = nbgrader_meta(kind, grade_id, points)
    if nbg:
        metadata["nbgrader"] = nbg
    if tags := (["export"] if kind == "export" else []) + list(tags):
        metadata["tags"] = tags
    cell = {"cell_type": cell_type, "id": "", "metadata": metadata, "source": source}
    if cell_type == "code":
        cell.update(execution_count=None, outputs=[])
    return cell


def new_notebook(cells: list[dict]) -> dict:
    nb = {"cells": cells, "metadata": {
        "kernelspec": {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"},
        "language_info": {"name": "python"}}, "nbformat": 4, "nbformat_minor": 5}
    return canonical(nb)


def canonical(nb: dict) -> dict:
    """Strip outputs and execution counts; give every cell a stable id."""
    seen: set[str] = set()
    for cell in nb["cells"]:
        if isinstance(cell["source"], list):
            cell["source"] = "".join(cell["source"])
        if cell["cell_type"] == "code":
            cell["outputs"] = []
            cell["execution_count"] = None
        grade_id = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
        base = grade_id or hashlib.sha1(cell["source"].encode()).hexdigest()[:10]
        cell_id, n = base, 1
        while cell_id in seen:
            n += 1
            cell_id = f"{base}-{n}"
        seen.add(cell_id)
        cell["id"] = cell_id
    return nb


def dumps(nb: dict) -> str:
    """Exactly what nbformat (hence JupyterLab and nbgrader) writes, so saving never churns."""
    text = nbformat.writes(nbformat.from_dict(nb), version=4)
    return text if text.endswith("\n") else text + "\n"


def read(path: Path) -> dict:
    """A notebook as a plain dict whose cell sources are single strings."""
    nb = json.loads(Path(path).read_text(encoding="utf-8"))
    for cell in nb["cells"]:
        if isinstance(cell["source"], list):
            cell["source"] = "".join(cell["source"])
    return nb


def pack(text: str) -> dict:
    cells, header, body = [], None, []

    def flush():
        if header is not None:
            kind, grade_id, points, tags = header
            cells.append(make_cell(kind, "\n".join(body).strip("\n"), grade_id,
                                   int(points) if points else None, tuple(tags.split(",")) if tags else ()))

    for line in text.splitlines():
        match = _HEADER.match(line)
        if match and match.group(1) in KINDS:
            flush()
            header, body = match.groups(), []
        else:
            body.append(line)
    flush()
    return new_notebook(cells)


def unpack(nb: dict) -> str:
    parts = []
    for cell in nb["cells"]:
        kind = cell_kind(cell)
        nbg = cell.get("metadata", {}).get("nbgrader", {})
        head = f"%% {kind}"
        if kind in ("solution", "test", "answer"):
            head += f" {nbg['grade_id']}"
        if kind in ("test", "answer"):
            head += f" {nbg['points']}"
        if tags := [t for t in cell.get("metadata", {}).get("tags", []) if not (kind == "export" and t == "export")]:
            head += f" [{','.join(tags)}]"
        source = cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])
        parts.append(f"{head}\n{source}\n")
    return "\n".join(parts)


def main(argv: list[str]) -> None:
    if argv[:1] == ["unpack"] and len(argv) == 2:
        sys.stdout.write(unpack(read(Path(argv[1]))))
    elif argv[:1] == ["pack"] and len(argv) == 3:
        Path(argv[2]).parent.mkdir(parents=True, exist_ok=True)
        Path(argv[2]).write_text(dumps(pack(Path(argv[1]).read_text(encoding="utf-8"))), encoding="utf-8")
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
