"""Section 11's corpus (utils/data/course_prose.txt): the prose extraction leaves no holes where inline
code was, and the train / validation split of the character model shares no window of text."""
from __future__ import annotations

import re

import pytest

from autograder import build
from utils.demos import s11

from .conftest import ROOT, SECTIONS, load_notebook

# What a sentence looks like after a piece of inline code was cut out of it: a space or an opening
# bracket right before CJK punctuation ("例如其中的 ），"), or two list marks in a row ("键是 、、").
LEFTOVER = re.compile(r"[ \t][，。、；：！？）]|（[，。、；：）]|[、，][、，。；）]")
WINDOW = 65                     # one window of the character model: 64 characters of context and the target


def leftovers(text: str) -> list[str]:
    return [text[max(0, m.start() - 12):m.end() + 2] for m in LEFTOVER.finditer(text)]


@pytest.fixture(scope="module")
def corpus() -> str:
    return build.course_prose({sid: load_notebook("solutions", sid) for sid in SECTIONS})


def test_leftover_counter_finds_what_cutting_inline_code_leaves():
    cell = "删掉 `raise NotImplementedError`，写好实现（例如 `x.shape`）。键是 `a`、`b`、`c`。"
    cut = re.sub(r"`[^`\n]*`", "", cell)                         # inline code dropped, as before the fix
    assert len(leftovers(cut)) == 4, leftovers(cut)
    kept = build.prose_text(cell)
    assert leftovers(kept) == [] and "x.shape" in kept and "`" not in kept


def test_course_prose_has_no_holes_where_inline_code_was(corpus):
    found = leftovers(corpus)
    assert not found, f"{len(found)} leftovers of removed inline code, e.g. {found[:5]}"


def test_shipped_corpus_is_the_generated_one(corpus):
    shipped = (ROOT / "utils" / "data" / "course_prose.txt").read_text(encoding="utf-8")
    assert shipped == corpus, "utils/data/course_prose.txt is stale: run python -m autograder.build"


def test_split_shares_no_window_and_loses_no_paragraph(corpus):
    train, val = s11.split_paragraphs(corpus, every=10, window=WINDOW)
    assert val and s11.shared_share(train, val, WINDOW) == 0
    distinct = set(p for p in corpus.split("\n\n") if p.strip())
    train_paragraphs, val_paragraphs = set(train.split("\n\n")), set(val.split("\n\n"))
    assert train_paragraphs | val_paragraphs == distinct and not train_paragraphs & val_paragraphs


def test_overlap_measure_sees_the_repeats_of_a_block_split(corpus):
    """The measure can fail: the usual split in blocks of 2000 characters shares windows."""
    blocks = [corpus[i:i + 2000] for i in range(0, len(corpus), 2000)]
    train = "".join(b for i, b in enumerate(blocks) if i % 10 != 9)
    assert s11.shared_share(train, "".join(blocks[9::10]), WINDOW) > 0
