"""Learners build, the notebook never dictates: no significant line of an exercise's answer appears in
the learner notebook before that exercise's check has passed — not in prose, code blocks, tables,
docstrings, pseudo-code or earlier cells — and no hint of the checks holds one.

A line is compared without spaces and comments (``w = q@k.mT`` is ``w = q @ k.mT``). What the
contract or the book itself fixes may appear (a layer's name and what it maps is the contract; its
line is not): those lines are listed in ALLOWED, each with its reason.
"""
from __future__ import annotations

import re

import pytest

from autograder.notebook_format import cell_kind, grade_id
from utils.notebook import shown_answers
from utils.checks.codes import CODES

from .conftest import SECTIONS, load_notebook

MIN_LENGTH = 12   # shorter normalized lines say too little to give an answer away ("out=w@v" …)
MIN_PART = 16     # and shorter parts of a line (an assignment's right-hand side) are common expressions ("C//H")
# Lines every answer of a kind has, which tell nothing of the answer's decisions.
BOILERPLATE = re.compile(r"^(super\(\)\.__init__\(\)|def\w+\(.*\):|class\w+(\(.*\))?:|returnself|pass|"
                         r"withtorch\.no_grad\(\):|@torch\.no_grad\(\)|@staticmethod|B,T,C=x\.(shape|size\(\)))$")
# (section, exercise, normalized line) -> why the notebook may show it before the check
ALLOWED: dict[tuple[str, str, str], str] = {
    ("04_masks", "is_causal", "g=torch.Generator().manual_seed(0)"):
        "04's exercise text asks for a fixed-seed torch.Generator (reproducible verdicts); seeding one decides nothing "
        "of the test, and §6.6's experiment seeds its own the same way",
    ("05_multi_head_attention", "CausalSelfAttention", "proj=nn.Linear(n_embed,n_embed)"):
        "the book's MultiHeadAttention line, quoted after exercise 1's check; the contract makes CausalSelfAttention's "
        "proj the very same C -> C layer with a bias",
    ("10_decoder_only_model", "generate", "caches=[KVCache()for_inmodel.blocks]"):
        "10's contract: caches is a list of one KVCache per block (DecoderLM's interface); §4's demo builds it to "
        "show that cached decoding equals the full forward",
}


def normalized(line: str) -> str:
    """Without comments, spaces and ``self.`` (``x = x + self.attn(self.norm1(x))`` is ``x=x+attn(norm1(x))``)."""
    return re.sub(r"\bself\.", "", re.sub(r"\s+", "", re.sub(r"#.*$", "", line)))


def forms(line: str) -> list[str]:
    """A normalized line and the parts that carry its answer: the right-hand side of an assignment, a
    returned expression (each only if long enough to give something away)."""
    parts = []
    assignment = re.match(r"^[\w.,\[\]()]+=(?!=)(.+)$", line)
    if assignment:
        parts.append(assignment.group(1))
    if line.startswith("return"):
        parts.append(line.removeprefix("return"))
    return [line] + [part for part in parts if len(part) >= MIN_PART]


def solution_lines(source: str) -> list[str]:
    """The significant lines between ### BEGIN SOLUTION and ### END SOLUTION, normalized."""
    inside, lines = False, []
    for raw in source.splitlines():
        marker = raw.strip()
        if marker == "### BEGIN SOLUTION":
            inside = True
        elif marker == "### END SOLUTION":
            inside = False
        elif inside:
            line = normalized(raw)
            if len(line) >= MIN_LENGTH and not BOILERPLATE.match(line) and not line.startswith(('"""', "'''")):
                lines.append(line)
    return lines


def shown_before_check(learner: dict, exercise: str) -> str:
    """Everything the learner notebook shows up to and including the exercise's visible check cell."""
    shown = []
    for cell in learner["cells"]:
        shown.append(cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"]))
        if cell_kind(cell) == "test" and grade_id(cell) == f"test_{exercise}":
            break
    return normalized_text("\n".join(shown))


def normalized_text(text: str) -> str:
    return "".join(normalized(line) for line in text.splitlines())


def exercise_answers(section: str) -> dict[str, list[str]]:
    source = load_notebook("solutions", section)
    return {grade_id(c): solution_lines(c["source"] if isinstance(c["source"], str) else "".join(c["source"]))
            for c in source["cells"] if cell_kind(c) == "solution" and not grade_id(c).startswith("quiz_")}


CASES = [(section, exercise) for section in SECTIONS for exercise in exercise_answers(section)]


@pytest.mark.parametrize(("section", "exercise"), CASES, ids=[f"{s[:2]}-{e}" for s, e in CASES])
def test_no_answer_line_is_shown_before_its_check(section, exercise):
    shown = shown_before_check(load_notebook("notebooks", section), exercise)
    dictated = [line for line in exercise_answers(section)[exercise]
                if any(form in shown for form in forms(line)) and (section, exercise, line) not in ALLOWED]
    assert not dictated, (f"{section}: the learner notebook shows these lines of {exercise}'s answer before its "
                          f"check (move book code after the check; give shapes, formulas, names, a worked "
                          f"example instead):\n  " + "\n  ".join(dictated))


def test_every_allowance_is_still_needed_and_says_why():
    for (section, exercise, line), reason in ALLOWED.items():
        assert len(reason) > 10, f"{section} {exercise}: say why {line!r} may be shown"
        assert line in exercise_answers(section)[exercise], f"{section} {exercise}: {line!r} is no answer line now"


def test_no_hint_holds_an_answer_line():
    answers = {line for section in SECTIONS for lines in exercise_answers(section).values() for line in lines}
    for code, entry in CODES.items():
        for hint in entry[1:]:
            text = normalized_text(hint)
            found = [line for line in answers if any(form in text for form in forms(line))]
            assert not found, f"[{code}]'s hint holds an answer line: {found}"


def answers_shown(cell: dict, section: str) -> set[str]:
    """The exercises of this section or an earlier one whose answer lines the cell shows."""
    if cell_kind(cell) in ("solution", "test", "answer", "export"):
        return set()
    text = normalized_text(cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"]))
    return {exercise for s in SECTIONS if s <= section for exercise, lines in exercise_answers(s).items()
            for line in lines if any(form in text for form in forms(line)) and (s, exercise, line) not in ALLOWED}


@pytest.mark.parametrize("section", SECTIONS)
def test_every_cell_that_shows_an_answer_says_whose(section):
    """A cell after an exercise's check may show its answer (the book's code, to compare with), and a later
    section's demo may be written with an earlier answer: each is tagged shows-answer:<exercise>, so that the
    class edition leaves it out while that exercise is open (and keeps it once it is closed)."""
    for index, cell in enumerate(load_notebook("solutions", section)["cells"]):
        tagged = shown_answers(cell)
        assert tagged == answers_shown(cell, section), f"{section} cell {index}: tagged {sorted(tagged)}"
