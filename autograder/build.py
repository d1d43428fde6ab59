"""Regenerate everything that is derived from solutions/:

* utils/reference/<module>.py   the solution cells of each section, as importable code
* utils/reference/__init__.py   re-exports every graded name
* docs/misconceptions.md        the table of check codes
* utils/data/course_prose.txt   the prose of every section, the text section 10's model learns
* utils/checks/fixtures/*.pt    what the checks' oracles return on the visible cases: the class edition's
                                checks compare with these (autograder/fixtures.py; recorded from the bug
                                bank by tests/record_fixtures.py, which `python3 course.py build` runs next)
* notebooks/<id>/<id>.ipynb     learner notebooks, made by `nbgrader generate_assignment`

    python -m autograder.build            (what `python3 course.py build` runs, before tests.record_fixtures)
    python -m autograder.build 06_complexity_and_memory   only these sections' notebooks and modules
"""
from __future__ import annotations

import ast
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

from utils.sections import section_ids

from .config import RELEASE_DIR, SOURCE_DIR
from .notebook_format import canonical, cell_kind, dumps, exercises, read

ROOT = Path(__file__).resolve().parents[1]
GENERATED = "# Generated from {src}\n# by `python3 course.py build`. Do not edit: edit the notebook.\n"
HEADER = '''"""Reference implementations of section {id} (the solution cells of its notebook)."""
'''
# The names every notebook's first cell imports, so solution cells may use them: a module
# imports those its code uses.
NOTEBOOK_IMPORTS = {"math": "import math", "torch": "import torch", "nn": "import torch.nn as nn",
                    "F": "import torch.nn.functional as F"}


def module_name(section_id: str) -> str:
    return f"s{section_id}"


def strip_markers(source: str) -> str:
    keep = [ln for ln in source.splitlines() if ln.strip() not in ("### BEGIN SOLUTION", "### END SOLUTION")]
    return "\n".join(keep).strip("\n")


def relative_imports(source: str, defined_in: dict[str, str]) -> str:
    """``from utils.reference import Head`` -> ``from .s03_single_head_attention import Head``.

    A notebook imports earlier sections' components from the package; inside the package a
    module must import its siblings, not the package that is still being imported."""
    def rewrite(match: re.Match) -> str:
        names = [n.strip() for n in match.group(2).split(",")]
        modules = {defined_in[n.split(" as ")[0].strip()] for n in names}
        if len(modules) != 1:
            raise ValueError(f"import names from one section per line: {match.group(0)!r}")
        return f"{match.group(1)}from .{modules.pop()} import {match.group(2)}"
    return re.sub(r"^(\s*)from utils\.reference import ([^#\n]+?)(?=\s*(#|$))", rewrite, source, flags=re.M)


def reference_module(section_id: str, nb: dict, defined_in: dict[str, str],
                     kinds: tuple[str, ...] = ("solution", "export")) -> tuple[str, list[str]]:
    """The module text and the graded names it defines (``kinds``: the cells it is made of; the
    class edition's module of an open section has the given ``export`` cells only)."""
    names = exercises(nb) if "solution" in kinds else []
    blocks = []
    for cell in nb["cells"]:
        if cell_kind(cell) in kinds:
            blocks.append(relative_imports(strip_markers(cell["source"]), defined_in))
    src = f"{SOURCE_DIR}/{section_id}/{section_id}.ipynb"
    body = "\n\n\n".join(blocks)
    used = {node.id for node in ast.walk(ast.parse(body)) if isinstance(node, ast.Name)}
    imports = [line for name, line in NOTEBOOK_IMPORTS.items() if name in used]
    stdlib, third_party = [i for i in imports if "torch" not in i], [i for i in imports if "torch" in i]
    import_block = "\n\n".join("\n".join(group) for group in (stdlib, third_party) if group)
    text = GENERATED.format(src=src) + HEADER.format(id=section_id) + import_block
    text += "\n\n" + wrapped(f"__all__ = {names!r}") + "\n\n\n" + body + "\n"
    return text, names


def wrapped(line: str) -> str:
    return textwrap.fill(line, width=110, subsequent_indent="    ", break_on_hyphens=False, break_long_words=False)


_FENCE = re.compile(r"^```.*?^```[ \t]*$", re.M | re.S)
_DISPLAY_MATH = re.compile(r"^\$\$.*?\$\$[ \t]*$", re.M | re.S)


def prose_text(cell_source: str) -> str:
    """A Markdown cell as running prose: fenced code, display math, table rows and bold marks left out.

    Inline code stays, without its backticks: it is a word of the sentence ("例如 `x.shape`，…"), and
    dropping it would leave the sentence with a hole ("例如 ，…")."""
    text = _DISPLAY_MATH.sub("", _FENCE.sub("", cell_source))
    lines = [line.rstrip() for line in text.splitlines() if not line.lstrip().startswith("|")]
    text = re.sub(r"`([^`\n]*)`", r"\1", "\n".join(lines)).replace("**", "")   # inline code as text; bold marks
    return re.sub(r"\n{3,}", "\n\n", re.sub(r"[ \t]{2,}", " ", text)).strip()


def course_prose(notebooks: dict[str, dict]) -> str:
    """The Markdown prose of every section, in order: the corpus of section 10's character model.

    Only prose cells: the manually graded answer cells hold the reference answers and their
    grading notes, which the learner's package must not carry."""
    paragraphs = [prose_text(cell["source"]) for nb in notebooks.values() for cell in nb["cells"]
                  if cell_kind(cell) == "markdown"]
    return "\n\n".join(p for p in paragraphs if p) + "\n"


def reference_files(root: Path = ROOT, only: list[str] | None = None) -> dict[Path, str]:
    """Every generated file of utils/reference, utils/data and docs (section modules: of ``only``),
    path -> text."""
    notebooks = {sid: read(root / SOURCE_DIR / sid / f"{sid}.ipynb") for sid in section_ids(root / SOURCE_DIR)}
    defined_in = {name: module_name(sid) for sid, nb in notebooks.items() for name in exercises(nb)}
    files, imports = {}, []
    for sid, nb in notebooks.items():
        text, names = reference_module(sid, nb, defined_in)
        if only is None or sid in only:
            files[root / "utils" / "reference" / f"{module_name(sid)}.py"] = text
        if names:
            imports.append(wrapped(f"from .{module_name(sid)} import ({', '.join(names)})"))
    init = (GENERATED.format(src=f"{SOURCE_DIR}/") + '"""Reference implementations of every graded exercise."""\n'
            + "\n".join(imports) + "\n\n" + wrapped(f"__all__ = {sorted(defined_in)!r}") + "\n")
    files[root / "utils" / "reference" / "__init__.py"] = init
    # only now: utils.checks imports torch (2 CPU-s), which the class edition's build (autograder/edition.py
    # imports this module) does not need
    from utils.checks.codes import markdown_table
    files[root / "docs" / "misconceptions.md"] = (
        "# 检查代码一览：误区 → 提示\n\n<!-- Generated from utils/checks/codes.py by "
        "`python3 course.py build`. Do not edit. -->\n\n" + markdown_table())
    files[root / "utils" / "data" / "course_prose.txt"] = course_prose(notebooks)
    return files


def generate_release(section_id: str, course_root: Path) -> Path:
    """Run nbgrader generate_assignment in ``course_root``; return the self-study learner notebook (the cells that
    quote an answer after its check kept: a class's release replaces them, autograder/release.py)."""
    cmd = [sys.executable, "-m", "nbgrader", "generate_assignment", section_id, "--force", "--no-db",
           f"--CourseDirectory.root={course_root}", "--ClearShownAnswers.enabled=False", "--log-level=WARN"]
    subprocess.run(cmd, check=True, cwd=course_root)
    out = course_root / RELEASE_DIR / section_id / f"{section_id}.ipynb"
    out.write_text(dumps(canonical(read(out))), encoding="utf-8")
    return out


def learner_notebooks(root: Path = ROOT, only: list[str] | None = None) -> dict[str, str]:
    """Generate the learner notebooks (all, or ``only``) in a scratch course; section id -> text."""
    with tempfile.TemporaryDirectory() as tmp:
        course = Path(tmp)
        shutil.copytree(root / SOURCE_DIR, course / SOURCE_DIR)
        shutil.copy(root / "nbgrader_config.py", course / "nbgrader_config.py")
        return {sid: generate_release(sid, course).read_text(encoding="utf-8")
                for sid in only or section_ids(root / SOURCE_DIR)}


def main(only: list[str] | None = None) -> None:
    for sid in only or section_ids(ROOT / SOURCE_DIR):
        path = ROOT / SOURCE_DIR / sid / f"{sid}.ipynb"
        path.write_text(dumps(canonical(read(path))), encoding="utf-8")  # strip outputs
    for path, text in reference_files(only=only).items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        print(f"wrote {path.relative_to(ROOT)}")
    for sid, text in learner_notebooks(only=only).items():
        out = ROOT / RELEASE_DIR / sid / f"{sid}.ipynb"
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text, encoding="utf-8")
        print(f"wrote {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main(sys.argv[1:] or None)
