"""Submissions that plant links (and FIFOs) in their folder to make the grader's own code write or
copy outside it, graded for real: nothing outside the submission's folder changes, no link is left
in autograded/ or feedback/, the source notebook reaches no feedback, and generate_feedback succeeds.

A kernel cannot reach the course directory itself (autograder/sandbox.py), but code on the host
side works in the notebook's folder after it: the forked kernels' copy back
(autograder/zygote_pool.py), nbgrader writing the graded notebook and copying the folder's other
files, generate_feedback copying them again. Each student carries one attack; the attacks that need
two kernels hang their first one (the cell times out and runs again in a fresh kernel,
autograder/preprocessors.py), which keeps a marker file in the folder to know it is the second.
"""
from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from autograder import grade, tree

from .busy_machine import cell_timeouts
from .nbgrader_course import Course, slim, with_solution

SECTION = "00_start_here"
EXERCISE = "tensor_shape_quiz"
DECOY_TEXT = "a file of the course that no submission may touch"
SOLUTION_MARK = "BEGIN SOLUTION"   # only the source notebook has it
ATTACK_RAN = "the attack ran to its end"


def two_kernels(first: str, then: str) -> str:
    """A cell that runs ``first`` and hangs its kernel; in the fresh kernel that runs the cell again, ``then``."""
    return ("import os, time\n"
            "if not os.path.exists('attack.marker'):\n"
            "    open('attack.marker', 'w').close()\n"
            + textwrap.indent(first, "    ") +
            "\n    while True:\n        time.sleep(0.1)\n" + then)


def attacks(course: Path) -> dict[str, str]:
    """student -> the code of their solution cell. Each aims at its own decoy under ``decoys/``, and says
    ATTACK_RAN once it is done (in the second kernel, for those that need two)."""
    return {student: code + f"\nprint({ATTACK_RAN!r})\n" for student, code in _attacks(course).items()}


def _attacks(course: Path) -> dict[str, str]:
    decoys = course / "decoys"
    solution = course / "solutions" / SECTION / f"{SECTION}.ipynb"
    return {
        # a link to a file of the course, written through by the kernel (it cannot: the file is not in its
        # sandbox) and left for the grader to copy into the feedback
        "file-link": f"import os\nos.symlink({str(decoys / 'file-link.txt')!r}, 'x.txt')\n"
                     "try:\n    open('x.txt', 'w').write('pwned')\nexcept OSError:\n    pass\n",
        # the kernel's own notebook replaced by a link: nbgrader writes the graded notebook through it
        "notebook-link": f"import os\nos.remove('{SECTION}.ipynb')\n"
                         f"os.symlink({str(decoys / 'notebook-link.txt')!r}, '{SECTION}.ipynb')\n",
        # a link planted by the first kernel, a regular file written in its place by the second: the copy
        # back of a forked kernel wrote it through the link
        "link-then-file": two_kernels(f"os.symlink({str(decoys / 'link-then-file.txt')!r}, 'x.txt')",
                                      "if os.path.islink('x.txt'):\n    os.remove('x.txt')\n"
                                      "open('x.txt', 'w').write('pwned')\n"),
        # a link to a folder of the course, then a file written "into" it by the next kernel
        "folder-link": two_kernels(f"os.symlink({str(decoys / 'folder-link')!r}, 'd')",
                                   "if os.path.islink('d'):\n    os.remove('d')\n"
                                   "os.makedirs('d', exist_ok=True)\nopen('d/planted.txt', 'w').write('pwned')\n"),
        # a regular file written by the first kernel, swapped for a link by the second, and a FIFO
        "file-then-link": two_kernels("open('notes.txt', 'w').write('mine')",
                                      f"os.remove('notes.txt')\nos.symlink({str(decoys / 'file-then-link.txt')!r}, "
                                      "'notes.txt')\nos.mkfifo('pipe')\n"),
        # the source notebook (with the solutions and hidden tests) linked as one of the folder's other files
        "solution-link": f"import os\nos.symlink({str(solution)!r}, 'answers.txt')\n",
    }


def make_course(root: Path, extra_config: str) -> Course:
    course = Course.create(root, [SECTION], extra_config=cell_timeouts(6) + extra_config)
    (course.root / "decoys" / "folder-link").mkdir(parents=True)
    release = slim(course.release_notebook(SECTION))
    for student, code in attacks(course.root).items():
        (course.root / "decoys" / f"{student}.txt").write_text(DECOY_TEXT, encoding="utf-8")
        course.submit(student, SECTION, with_solution(release, EXERCISE, code))
    return course


def outside(course: Path) -> dict[str, object]:
    """Everything of the course but what grading writes (autograded/, feedback/, the class edition its
    kernels import in grading/, the gradebook, logs): path -> a link's target or a file's content (None: a
    folder)."""
    found = {}
    for root, dirs, files in os.walk(course):
        if root == str(course):
            dirs[:] = [d for d in dirs if d not in ("autograded", "feedback", "grading")]
        for name in dirs + files:
            path = Path(root, name)
            if name in ("gradebook.db", ".nbgrader.log") or name.startswith("gradebook.db-"):
                continue
            found[str(path.relative_to(course))] = (f"-> {os.readlink(path)}" if path.is_symlink()
                                                   else None if path.is_dir() else path.read_bytes())
    return found


def printed(course: Course, student: str) -> str:
    """What the cells of the student's autograded notebook printed ("" if there is none)."""
    path = course.root / "autograded" / student / SECTION / f"{SECTION}.ipynb"
    if not path.is_file() or path.is_symlink():
        return ""
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    return "".join("".join(out.get("text", "")) for cell in cells for out in cell.get("outputs", []))


def not_regular(folder: Path) -> list[str]:
    """What in ``folder``'s tree is neither a regular file nor a folder (links, FIFOs …)."""
    return [str(p.relative_to(folder)) for p in folder.rglob("*")
            if not (stat.S_ISREG(p.lstat().st_mode) or stat.S_ISDIR(p.lstat().st_mode))]


def leaks(folder: Path) -> list[str]:
    """The files under ``folder`` holding a decoy's text or the source notebook's solutions."""
    return [str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file() and not p.is_symlink()
            and any(mark in p.read_text(encoding="utf-8", errors="replace") for mark in (DECOY_TEXT, SOLUTION_MARK))]


def nbgrader(course: Course, *args: str) -> tuple[int, str]:
    """An nbgrader command of the course: its exit status and log."""
    try:
        return 0, course.nbgrader(*args).stderr
    except subprocess.CalledProcessError as failed:
        return failed.returncode, failed.stderr


def autograde(course: Course, monkeypatch) -> list[str]:  # noqa: ARG001
    """``nbgrader autograde``; what went wrong (the warnings must name the links left out or removed)."""
    status, log = nbgrader(course, "autograde", SECTION)
    unnamed = [name for name in ("x.txt", "answers.txt") if name not in log]
    return ([f"nbgrader autograde failed: {log[-2000:]}"] if status else []) + \
        ([f"no warning names {unnamed}"] if unnamed else [])


def grade_in_parallel(course: Course, monkeypatch) -> list[str]:
    """``python -m autograder.grade`` (its workers log nowhere); what went wrong."""
    monkeypatch.chdir(course.root)
    monkeypatch.setattr(sys, "argv", ["grade"])
    return [] if grade.main([SECTION, "--jobs", "2"]) == 0 else ["python -m autograder.grade failed"]


@pytest.mark.slow
@pytest.mark.needs("bwrap")
@pytest.mark.parametrize("run, config", [
    (autograde, ""),                                                   # forked kernels (the default)
    (grade_in_parallel, "c.SandboxProvisioner.fork = False\n"),      # each kernel started by bwrap
], ids=["nbgrader-autograde-forked", "autograder-grade-bwrap"])
def test_links_planted_by_a_submission_reach_nothing_outside_it(run, config, tmp_path, monkeypatch):
    course = make_course(tmp_path / "course", config)
    before = outside(course.root)
    problems = run(course, monkeypatch)
    status, log = nbgrader(course, "generate_feedback", SECTION)

    after = outside(course.root)
    feedback = course.root / "feedback"
    found = {
        "changed outside the submissions' folders": sorted(p for p in before.keys() | after.keys()
                                                           if before.get(p, "missing") != after.get(p, "missing")),
        "left in autograded/": not_regular(course.root / "autograded"),
        "generate_feedback failed": log[-2000:] if status else "",
        "left in feedback/": not_regular(feedback),
        "a decoy or the source notebook in feedback/": leaks(feedback),
        "no feedback": [s for s in attacks(course.root) if not (feedback / s / SECTION / f"{SECTION}.html").exists()],
        "attacks that did not run": [s for s in attacks(course.root) if ATTACK_RAN not in printed(course, s)],
    }
    problems += [f"{what}: {items}" for what, items in found.items() if items]
    assert not problems, "\n".join(problems)


def planted(folder: Path, elsewhere: Path) -> None:
    """A file, and what a kernel may leave beside it: links to a file and a folder elsewhere, a FIFO,
    a hard link."""
    folder.mkdir()
    (folder / "mine.txt").write_text("mine")
    (folder / "x.txt").symlink_to(elsewhere / "decoy.txt")
    (folder / "d").symlink_to(elsewhere)
    os.mkfifo(folder / "pipe")
    os.link(folder / "mine.txt", folder / "same.txt")


def test_the_copy_between_a_notebook_and_its_sandbox_takes_regular_files_and_follows_no_link(tmp_path, caplog):
    elsewhere, source, target = tmp_path / "elsewhere", tmp_path / "sandbox", tmp_path / "notebook"
    elsewhere.mkdir()
    (elsewhere / "decoy.txt").write_text(DECOY_TEXT)
    planted(source, elsewhere)
    (source / "x.txt").unlink()
    (source / "x.txt").write_text("pwned")     # the next kernel's file where the last one left a link …
    (source / "d").unlink()
    (source / "d").mkdir()
    (source / "d" / "planted.txt").write_text("pwned")   # … and its folder where a link to a folder was
    target.mkdir()
    (target / "x.txt").symlink_to(elsewhere / "decoy.txt")
    (target / "d").symlink_to(elsewhere)
    left_out = tree.copy_tree(str(source), str(target))
    assert sorted(os.listdir(elsewhere)) == ["decoy.txt"] and (elsewhere / "decoy.txt").read_text() == DECOY_TEXT
    assert (target / "x.txt").read_text() == "pwned" and not (target / "x.txt").is_symlink()
    assert sorted(os.listdir(target)) == ["d", "mine.txt", "same.txt", "x.txt"] and not_regular(target) == ["d"]
    assert left_out == ["d", "pipe"], "the FIFO, and the folder a link stands in the way of (not what is in it)"
    [warning] = [r.getMessage() for r in caplog.records if r.getMessage().startswith("not copied")]
    assert sorted(warning.rsplit(": ", 1)[1].split(", ")) == left_out, "the log names what was left out"


def test_removing_link_hazards_leaves_regular_files_and_folders_of_their_own(tmp_path):
    elsewhere, folder = tmp_path / "elsewhere", tmp_path / "notebook"
    elsewhere.mkdir()
    (elsewhere / "decoy.txt").write_text(DECOY_TEXT)
    planted(folder, elsewhere)
    (folder / "inner").mkdir()
    (folder / "inner" / "y.txt").symlink_to(elsewhere / "decoy.txt")
    os.chmod(folder / "inner", 0)
    changed = tree.remove_link_hazards(str(folder))
    hard_linked = [name for name in changed if name in ("mine.txt", "same.txt")]
    assert len(hard_linked) == 1 and sorted(set(changed) - set(hard_linked)) == ["d", "inner/y.txt", "pipe", "x.txt"]
    assert sorted(os.listdir(folder)) == ["inner", "mine.txt", "same.txt"] and not_regular(folder) == []
    assert (folder / "same.txt").stat().st_nlink == (folder / "mine.txt").stat().st_nlink == 1
    assert (folder / "same.txt").read_text() == "mine" and (elsewhere / "decoy.txt").read_text() == DECOY_TEXT
