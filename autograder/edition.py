"""The class edition: the course package and learner notebooks that students install in a class.

    python3 course.py edition student OUT [--answers-through SECTION]

It holds no answer to an open assignment (a section after ``--answers-through``, all sections
without it): no solution, no reference implementation, no hidden case, no quiz answer. The checks
keep their visible cases and diagnoses: the body of every ``@oracle`` / ``@instructor_only``
function is left out and the oracles answer from the results stored at build time
(utils/checks/oracle.py, utils/checks/fixtures/). ``utils.reference`` holds the references of the
closed sections; an open section's name there is the learner's own solution, read from their saved
notebook when first used (utils/learner_solutions.py). The instructor grades with the full course.
"""
from __future__ import annotations

import argparse
import ast
import compileall
import contextlib
import functools
import hashlib
import os
import re
import shutil
import sys
import tempfile
import tomllib
from pathlib import Path

from .build import ROOT, module_name, reference_module, section_ids, wrapped
from .config import RELEASE_DIR, SOURCE_DIR
from utils.notebook import SHOWN_LATER, shown_answers

from .notebook_format import dumps, exercises, read

MARKER = ".attention-course-class-edition"
STRIPPED = ("oracle", "instructor_only")
LEFT_OUT = ("__pycache__", "overview.py")     # overview.py draws the README's figure with the references
PACKAGES = ["utils", "utils.checks", "utils.demos", "utils.reference"]


def strip_oracles(source: str) -> str:
    """``source`` with the body of every function decorated @oracle or @instructor_only replaced by
    ``...`` (its docstring kept): the class edition answers those from stored results."""
    lines = source.splitlines(keepends=True)
    cuts = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and any(
                _name(d) in STRIPPED for d in node.decorator_list):
            body = node.body[1:] if ast.get_docstring(node) else node.body
            if body:
                cuts.append((body[0].lineno, body[-1].end_lineno, body[0].col_offset))
    for first, last, indent in sorted(cuts, reverse=True):
        lines[first - 1:last] = [" " * indent + "...  # left out of the class edition (utils/checks/oracle.py)\n"]
    return "".join(lines)


def _name(decorator: ast.expr) -> str:
    target = decorator.func if isinstance(decorator, ast.Call) else decorator
    return target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", "")


def without_shown_answers(nb: dict, open_exercises: set[str]) -> dict:
    """A learner notebook without the cells that show the answer of an open exercise (tagged
    ``shows-answer:<exercise>``: the book's code after the check, compared with the learner's once it passes;
    a later section's demo written with an earlier answer): each becomes a note."""
    for i, cell in enumerate(nb["cells"]):
        if shown_answers(cell) & open_exercises:
            nb["cells"][i] = {"cell_type": "markdown", "id": cell.get("id", f"shown-{i}"), "metadata": {},
                              "source": SHOWN_LATER}
    return nb


def reference_package(released: list[str], root: Path = ROOT) -> dict[str, str]:
    """utils/reference/ of the class edition: file name -> text."""
    notebooks = {sid: read(root / SOURCE_DIR / sid / f"{sid}.ipynb") for sid in section_ids(root)}
    defined_in = {name: module_name(sid) for sid, nb in notebooks.items() for name in exercises(nb)}
    open_modules = {module_name(sid): sid for sid in notebooks if sid not in released}
    files, imports, later = {}, [], {}
    for sid, nb in notebooks.items():
        if sid in released:
            text, names = reference_module(sid, nb, defined_in)
            imports.append(wrapped(f"from .{module_name(sid)} import ({', '.join(names)})"))
        else:
            text, _ = reference_module(sid, nb, defined_in, kinds=("export",))
            text = _later_imports(text.replace("(the solution cells of its notebook)", "(its given code only: "
                                                             "the assignment is open)"), open_modules)
            later.update({name: sid for name in exercises(nb)})
        files[f"{module_name(sid)}.py"] = text
    files["__init__.py"] = _init(released, imports, later)
    return files


def _later_imports(text: str, open_modules: dict[str, str]) -> str:
    """``from .s05_x import A  # …`` of an open section -> ``A = later("A", "05_x")``."""
    def rewrite(match: re.Match) -> str:
        module, names = match.group(1), [n.strip() for n in match.group(2).split(",")]
        if module not in open_modules:
            return match.group(0)
        sid = open_modules[module]
        return "\n".join(f'{n} = later("{n}", "{sid}")' for n in names)
    text = re.sub(r"^from \.(s\d\d_\w+) import ([\w, ]+?)(?:\s*#.*)?$", rewrite, text, flags=re.M)
    if "later(" in text:
        text = text.replace("\n\n__all__", "\n\nfrom utils.learner_solutions import later\n\n__all__", 1)
    return text


def _init(released: list[str], imports: list[str], later: dict[str, str]) -> str:
    through = f"sections {released[0][:2]}–{released[-1][:2]}" if released else "no section"
    return ("# Generated by `python3 course.py edition student`. Do not edit.\n" +
            f'"""The class edition\'s reference implementations: those of {through} (assignments closed).\n\n'
            "A later section's name is the learner's own solution, taken from their saved notebook when first\n"
            'used (utils/learner_solutions.py)."""\n'
            "from utils.learner_solutions import later as _later\n\n" + "\n".join(imports) + "\n\n"
            + wrapped(f"_OPEN = {later!r}") + "\n\n\n"
            "def __getattr__(name: str):\n"
            "    if name in _OPEN:\n"
            "        return _later(name, _OPEN[name])\n"
            "    raise AttributeError(f\"module 'utils.reference' has no attribute {name!r}\")\n\n\n"
            + wrapped(f"__all__ = {sorted(_names(imports))!r}") + "\n")


def _names(imports: list[str]) -> list[str]:
    return [n.strip() for line in imports for n in re.search(r"\((.*)\)", line, re.S).group(1).split(",")]


def edition_module(released: list[str]) -> str:
    return ('"""Which edition of the course this package belongs to: the class edition (see\n'
            'autograder/edition.py of the course). Generated; do not edit."""\n'
            'EDITION = "student"\nIS_STUDENT = EDITION == "student"\n'
            f"ANSWERS_THROUGH: str | None = {released[-1] if released else None!r}\n")


def pyproject(root: Path = ROOT) -> str:
    project = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    deps = ",\n    ".join(f'"{d}"' for d in project["dependencies"])
    return ('[build-system]\nrequires = ["setuptools>=68"]\nbuild-backend = "setuptools.build_meta"\n\n'
            '[project]\nname = "attention-course-class"\n'
            f'version = "{project["version"]}"\n'
            'description = "注意力机制课程（班级版）：练习、检查与演示，不含未截止作业的答案"\n'
            f'requires-python = "{project["requires-python"]}"\n'
            f"dependencies = [\n    {deps},\n]\n\n"
            f"[tool.setuptools]\npackages = {PACKAGES!r}\n\n".replace("'", '"') +
            '[tool.setuptools.package-data]\nutils = ["data/*.txt"]\n"utils.checks" = ["fixtures/*.pt"]\n')


README = """# 注意力机制 · 班级版

这是课程的**班级版**：课程包 `utils/`（检查、演示、画图、控件）和学生版 notebook（`notebooks/`）。
它不含还没截止的作业的参考答案、隐藏测试和测验答案；检查单元格照常即时给出中文判定和误区诊断。
作业请通过 JupyterLab 的 Assignments 标签页取回和提交。

安装（在与课程相同的 Python 环境里）：`pip install .`
"""


def released_sections(answers_through: str | None, root: Path = ROOT) -> list[str]:
    """The sections up to and including ``answers_through`` (none without it): their answers ship."""
    sections = section_ids(root)
    if answers_through is None:
        return []
    if answers_through not in sections:
        raise SystemExit(f"--answers-through: 没有这一节 {answers_through!r}（可选：{', '.join(sections)}）")
    return sections[:sections.index(answers_through) + 1]


def build(out: Path, answers_through: str | None, root: Path = ROOT) -> None:
    released = released_sections(answers_through, root)
    if out.exists() and any(out.iterdir()):
        if not (out / MARKER).exists():
            raise SystemExit(f"{out} 不是空文件夹，也不是以前生成的班级版：请换一个文件夹。")
        shutil.rmtree(out)
    shutil.copytree(root / "utils", out / "utils", ignore=shutil.ignore_patterns(*LEFT_OUT))
    for path in (out / "utils").rglob("*.py"):
        path.write_text(strip_oracles(path.read_text(encoding="utf-8")), encoding="utf-8")
    shutil.rmtree(out / "utils" / "reference")
    (out / "utils" / "reference").mkdir()
    for name, text in reference_package(released, root).items():
        (out / "utils" / "reference" / name).write_text(text, encoding="utf-8")
    (out / "utils" / "edition.py").write_text(edition_module(released), encoding="utf-8")
    shutil.copytree(root / RELEASE_DIR, out / "notebooks")
    open_exercises = {name for sid in section_ids(root) if sid not in released
                      for name in exercises(read(root / SOURCE_DIR / sid / f"{sid}.ipynb"))}
    for path in (out / "notebooks").glob("*/*.ipynb"):
        path.write_text(dumps(without_shown_answers(read(path), open_exercises)), encoding="utf-8")
    (out / "pyproject.toml").write_text(pyproject(root), encoding="utf-8")
    (out / "README.md").write_text(README, encoding="utf-8")
    (out / MARKER).write_text(f"answers through: {released[-1] if released else '-'}\n", encoding="utf-8")


def section_before(section: str, root: Path = ROOT) -> str | None:
    """The section whose answers a grading kernel of ``section`` may hold: the one before it (None for the
    first section, and for an assignment that is no section of the course)."""
    sections = section_ids(root)
    if section not in sections or sections.index(section) == 0:
        return None
    return sections[sections.index(section) - 1]


@functools.lru_cache(maxsize=None)
def for_grading(answers_through: str | None, cache: Path, root: Path = ROOT) -> str:
    """The ``utils`` folder of a class edition with answers through ``answers_through``, for grading
    kernels to import: built once per version of the course and of Python into ``cache`` (a folder named
    after what it was built from, so a changed course builds anew), shared by grading processes (each
    builds in a temporary folder and renames it into place). It holds its bytecode: the sandbox binds it
    read-only, and without it every kernel would compile the package anew (0.1 s a submission)."""
    digest = hashlib.sha256(f"{answers_through}:{sys.implementation.cache_tag}".encode())
    for path in sorted([*(root / "utils").rglob("*"), *(root / SOURCE_DIR).rglob("*.ipynb")]):
        if path.is_file() and "__pycache__" not in path.parts:
            digest.update(f"{path.relative_to(root)}:".encode() + path.read_bytes())
    target = cache / f"{answers_through or 'none'}-{digest.hexdigest()[:16]}"
    if not (target / MARKER).exists():
        cache.mkdir(parents=True, exist_ok=True)
        scratch = Path(tempfile.mkdtemp(prefix=".building-", dir=cache))
        try:
            build(scratch / "edition", answers_through, root)
            if not compileall.compile_dir(scratch / "edition" / "utils", quiet=1):
                raise RuntimeError("the class edition for grading does not compile (compileall's errors above)")
            with contextlib.suppress(OSError):   # another grading process put it there first
                os.rename(scratch / "edition", target)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    return str(target / "utils")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python3 course.py edition", description=__doc__.split("\n\n")[0])
    parser.add_argument("kind", choices=["student"])
    parser.add_argument("out", type=Path)
    parser.add_argument("--answers-through", metavar="SECTION", default=None,
                        help="the last section whose references students may have (its deadline has passed)")
    args = parser.parse_args(argv)
    build(args.out.resolve(), args.answers_through)
    print(f"班级版已生成：{args.out}（参考实现截至：{args.answers_through or '无'}）")


if __name__ == "__main__":
    main(sys.argv[1:])
