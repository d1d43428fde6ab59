"""The class edition as students install it: built, installed into a fresh virtual environment,
searched for answers and run through the bug bank.

Built with ``--answers-through 04_masks``: sections 05–12 are the open assignments here.
"""
from __future__ import annotations

import ast
import importlib
import json
import os
import shutil
import subprocess
import sys

import pytest

from autograder.notebook_format import cell_kind, exercises, grade_id

from .bugbank import all_variants
from .class_edition import ANSWERS_THROUGH, OPEN, OPEN_EXERCISES, install, renamed_copy
from .conftest import ROOT, SECTIONS, load_notebook
from .nbgrader_course import Course
from .edition_candidates import passing_candidates
from .test_learners_build import ALLOWED, exercise_answers, forms, normalized_text
from .test_bugbank import run_check

pytestmark = pytest.mark.slow
# A learner's machine whose CPU kernels are not the builder's (tests/test_kernel_sets.py tries more of them).
OTHER_CPU = {**os.environ, "ATEN_CPU_CAPABILITY": "default"}


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    return install(tmp_path_factory.mktemp("class"), ANSWERS_THROUGH)


def test_no_function_class_or_constant_it_holds_passes_an_open_check(installed, tmp_path):
    """Everything the installed package defines, tried as each open exercise under the full instructor
    check: nothing passes. (tests/test_editions.py shows the same search finds the answers in the full
    course.)"""
    renamed_copy(installed.package, tmp_path, "student_utils")
    sys.path.insert(0, str(tmp_path))
    try:
        package = importlib.import_module("student_utils")
        assert importlib.import_module("student_utils.edition").IS_STUDENT
        hits = passing_candidates(package, OPEN_EXERCISES, skip=("student_utils.progress",))
    finally:
        sys.path.remove(str(tmp_path))
        for name in [m for m in sys.modules if m == "student_utils" or m.startswith("student_utils.")]:
            del sys.modules[name]
    assert not hits, "the class edition hands out answers:\n" + "\n".join(hits)


def test_the_bug_bank_gets_the_same_diagnoses(installed, tmp_path):
    """Every variant's visible check in the installed edition, on a learner's CPU that runs other kernels than the
    builder's (PyTorch's portable ``default`` set), says what the full course says here. The learner's folder holds
    their (here: the course's) notebooks of the other sections, whose solutions the open sections' given code and
    imports take (utils/learner_solutions.py)."""
    work = tmp_path / "work"
    for section in SECTIONS:
        shutil.copytree(ROOT / "solutions" / section, work / section)
    variants = all_variants()
    (tmp_path / "variants.json").write_text(json.dumps(
        [{"id": v.id, "exercise": v.exercise, "source": v.source} for v in variants]), encoding="utf-8")
    subprocess.run([installed.python, str(ROOT / "tests" / "class_edition_bank.py"), str(tmp_path / "variants.json"),
                    str(tmp_path / "codes.json")], cwd=work / SECTIONS[-1], check=True, capture_output=True,
                   text=True, timeout=600, env=OTHER_CPU)
    in_class = json.loads((tmp_path / "codes.json").read_text(encoding="utf-8"))
    differ = [f"{v.id}: class edition {in_class[v.id]}, full course {full}"
              for v in variants if in_class[v.id] != (full := run_check(v.exercise, _load(v)))]
    assert not differ, "\n".join(differ)


def test_the_progress_view_finds_every_solved_exercise_passed_on_another_cpu(installed, tmp_path):
    """A learner who solved every exercise, on a CPU whose kernels are not the builder's: `course.py progress` in the
    class edition (a fresh kernel per section, each check answered from the stored results) says all passed."""
    for section in SECTIONS:
        shutil.copytree(ROOT / "solutions" / section, tmp_path / "notebooks" / section)
    script = ("import json, sys; from pathlib import Path; from utils import progress\n"
              "sections = progress.course_progress(Path(sys.argv[1]), jobs=2)\n"
              "print(json.dumps({e.name: progress.verdict(e) for s in sections for e in s.exercises}))")
    done = subprocess.run([installed.python, "-c", script, str(tmp_path)], capture_output=True, text=True,
                          timeout=900, env=OTHER_CPU, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    verdicts = json.loads(done.stdout.strip().splitlines()[-1])
    solved = [e for s in SECTIONS for e in exercises(load_notebook("solutions", s))]
    assert sorted(verdicts) == sorted(solved)
    assert {name: v for name, v in verdicts.items() if v != "通过"} == {}


def _load(variant):
    from .bugbank import load
    return load(variant)


def _region_lines(section: str, kinds: tuple[str, ...], begin: str, end: str) -> set[str]:
    """The code lines between ``### BEGIN <begin>`` and ``### END <end>`` in cells of ``kinds``, not short,
    not comments."""
    lines, inside = set(), False
    for cell in load_notebook("solutions", section)["cells"]:
        if cell_kind(cell) not in kinds:
            continue
        for line in cell["source"].splitlines():
            text = line.strip()
            if text in (f"### BEGIN {begin}", f"### END {end}"):
                inside = text.startswith("### BEGIN")
            elif inside and len(text) >= 24 and not text.startswith("#"):
                lines.add(text)
    return lines


def _solution_lines(section: str) -> set[str]:
    return _region_lines(section, ("solution",), "SOLUTION", "SOLUTION")


def _hidden_lines(section: str) -> set[str]:
    return _region_lines(section, ("test",), "HIDDEN TESTS", "HIDDEN TESTS")


# Solution lines the exercise's own statement dictates, so a demo may write them too; each with why.
DICTATED = {
    "caches = [KVCache() for _ in model.blocks]": "10's contract: one KVCache per block (DecoderLM, generate)",
}


def _given_lines() -> set[str]:
    """Lines of every section's given code (export cells) and of the closed sections' solutions: the
    course hands these out, so a solution line that is also one of them is no leak."""
    closed = {line.strip() for s in SECTIONS if s <= ANSWERS_THROUGH
              for line in (ROOT / "utils" / "reference" / f"s{s}.py").read_text(encoding="utf-8").splitlines()}
    return _handed_out_lines() | closed


def _check_code_lines() -> set[str]:
    """The lines of the full checks outside oracle and instructor-only bodies: the checks' own generic
    code (making inputs, comparing), which both editions keep."""
    lines = set()
    for path in (ROOT / "utils" / "checks").glob("*.py"):
        source = path.read_text(encoding="utf-8").splitlines()
        stripped = set()
        for node in ast.walk(ast.parse("\n".join(source))):
            if isinstance(node, ast.FunctionDef) and any(
                    getattr(d, "id", "") in ("oracle", "instructor_only") for d in node.decorator_list):
                stripped |= set(range(node.body[0].lineno, node.body[-1].end_lineno + 1))
        lines |= {line.strip() for number, line in enumerate(source, 1) if number not in stripped}
    return lines


def _instructor_only_lines() -> set[str]:
    """The lines of every @instructor_only body of the full checks: hidden cases and quiz truths."""
    lines = set()
    for path in (ROOT / "utils" / "checks").glob("*.py"):
        source = path.read_text(encoding="utf-8").splitlines()
        for node in ast.walk(ast.parse("\n".join(source))):
            if isinstance(node, ast.FunctionDef) and any(
                    getattr(d, "id", "") == "instructor_only" for d in node.decorator_list):
                body = node.body[1:] if ast.get_docstring(node) else node.body
                lines |= {line.strip() for line in source[body[0].lineno - 1:body[-1].end_lineno]
                          if len(line.strip()) >= 12 and not line.strip().startswith("#")} if body else set()
    return lines


def _text(paths) -> str:
    """The text of the files a student reads: a notebook's cell sources as they show (not JSON-escaped)."""
    return "\n".join(_readable(p) for p in paths
                     if p.is_file() and p.suffix in (".py", ".ipynb", ".txt", ".md", ".toml"))


def _readable(path) -> str:
    if path.suffix != ".ipynb":
        return path.read_text(encoding="utf-8")
    return "\n".join("".join(cell["source"]) for cell in json.loads(path.read_text(encoding="utf-8"))["cells"])


def test_no_solution_code_or_hidden_input_of_an_open_section_is_in_it(installed):
    """Nothing of the edition — the package and the learner notebooks, whose demos must not show an
    answer either — holds a line of an open section's solution (but the given code and the closed
    sections' solutions it hands out), a hidden test's line, a hidden case or a quiz truth."""
    everything = _text(installed.out.glob("**/*"))
    given = "\n".join(_given_lines())
    found = [f"{s} solution: {line}" for s in OPEN for line in _solution_lines(s)
             if line in everything and line not in given]
    found += [f"{s} hidden test: {line}" for s in SECTIONS for line in _hidden_lines(s) if line in everything]
    found += [f"hidden case or truth: {line}" for line in _instructor_only_lines() - _check_code_lines()
              if line in everything]
    found += [f"{s} notebook shows: {line}" for s in OPEN for line in _shown_answer_lines(installed.out, s)]
    assert not found, "the class edition holds:\n" + "\n".join(sorted(found))


def test_what_nbgrader_releases_to_a_class_holds_no_answer(tmp_path):
    """Every section released as an instructor does (`nbgrader generate_assignment` with the course's
    configuration): its notebook holds no line of its own or an earlier section's answer — the book's code
    quoted after a check included (autograder/release.py) — but what the course hands out (given code, the
    checks' own code). Without ClearShownAnswers the release of 03 held Head's and attention's book code."""
    course = Course.create(tmp_path / "course", SECTIONS)
    given = {normalized_text(line) for line in _handed_out_lines()}
    found = []
    for section in SECTIONS:
        normal = normalized_text(_text([course.root / "notebooks" / section / f"{section}.ipynb"]))
        found += [f"{section} release: {earlier} {exercise}: {line}" for earlier in SECTIONS if earlier <= section
                  for exercise, lines in exercise_answers(earlier).items() for line in lines
                  if line not in given and any(form in normal for form in forms(line))
                  and (earlier, exercise, line) not in ALLOWED]
    assert not found, "what nbgrader releases holds answers:\n" + "\n".join(sorted(set(found)))


def _handed_out_lines() -> set[str]:
    """The given code of every section (export cells), the checks' own code and the lines an exercise dictates."""
    given = {line.strip() for s in SECTIONS for c in load_notebook("solutions", s)["cells"]
             if cell_kind(c) == "export" for line in c["source"].splitlines()}
    return given | _check_code_lines() | set(DICTATED)


def _shown_answer_lines(out, section: str) -> list[str]:
    """The answer lines of an open section that its learner notebook or a later one in the edition shows, compared
    as tests/test_learners_build.py does (spaces, comments and ``self.`` aside; an assignment's right-hand side).
    An earlier section's notebook teaches the building blocks (a softmax line, an embedding lookup) that later
    answers reuse; a line the course hands out (given code, closed solutions) is no leak either."""
    notebooks = [path for path in out.glob("notebooks/*/*.ipynb") if path.parent.name >= section]
    text = normalized_text(_text(notebooks))
    given = {normalized_text(line) for line in _given_lines()}
    return [line for exercise, lines in exercise_answers(section).items() for line in lines
            if line not in given and any(form in text for form in forms(line))
            and (section, exercise, line) not in ALLOWED]


def test_it_keeps_the_references_of_closed_sections_only(installed):
    reference = installed.package / "reference"
    for section in SECTIONS:
        module = (reference / f"s{section}.py").read_text(encoding="utf-8")
        names = exercises(load_notebook("solutions", section))
        defined = {n.name for n in ast.parse(module).body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
        if section <= ANSWERS_THROUGH:
            assert set(names) <= defined, section
        else:
            assert not set(names) & defined, f"{section}: {set(names) & defined}"


def test_a_later_notebook_runs_with_open_sections_left_undone(installed, tmp_path):
    """07's learner notebook, untouched, in a folder where 05 was never done: top to bottom, every error is
    one of ours — a check's [code], or the one line of a demo or given component waiting for an exercise —
    and nothing falls back to an answer."""
    section = "07_gqa_and_kv_cache"
    work = tmp_path / "work" / section
    shutil.copytree(ROOT / "notebooks" / section, work)
    subprocess.run([installed.python, "-m", "nbconvert", "--to", "notebook", "--execute", "--inplace",
                    "--allow-errors", "--ExecutePreprocessor.timeout=120", f"{section}.ipynb"],
                   cwd=work, check=True, capture_output=True, text=True, timeout=600)
    cells = json.loads((work / f"{section}.ipynb").read_text(encoding="utf-8"))["cells"]
    errors = [o for c in cells for o in c.get("outputs", []) if o["output_type"] == "error"]
    texts = [o for c in cells for o in c.get("outputs", []) if o["output_type"] == "stream"]
    checks = {grade_id(c): [o for o in c.get("outputs", []) if o["output_type"] == "error"] for c in cells
              if cell_kind(c) == "test" and not grade_id(c).endswith("_hidden")}
    assert checks and all(len(e) == 1 and e[0]["evalue"].startswith("[not-implemented]") for e in checks.values()), \
        {g: [o["evalue"][:60] for o in e] for g, e in checks.items()}
    kinds = {o["ename"] for o in errors}
    assert kinds <= {"CheckError", "ExerciseNeeded", "NameError"}, kinds
    assert any(o["ename"] == "ExerciseNeeded" for o in errors), "a demo says it waits for the exercise"
    assert not any("参考实现" in t["text"] and "暂用" in t["text"] for t in texts), "no demo used a reference"
