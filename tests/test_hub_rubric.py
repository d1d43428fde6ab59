"""The 评分要点 pages (autograder/rubric.py) stay in step with solutions/: one page per section with
manually graded answer cells, each answer with its points, its question and every phrase of its reference
answer and marking scheme. The class generates them into the grading account's course directory
(deploy/jupyterhub/classroom.py); tests/test_hub.py opens one through the formgrader service."""
from __future__ import annotations

import html
import re

from autograder.notebook_format import cell_kind, grade_id
from autograder.rubric import write_pages

from .conftest import ROOT, SECTIONS, load_notebook

PHRASE = re.compile(r"[\u4e00-\u9fff]{4,}")   # runs of Chinese: what markdown rendering leaves as they are


def page_text(path) -> str:
    """The page's text as a reader sees it (tags dropped, entities decoded)."""
    return html.unescape(re.sub(r"<[^>]+>", " ", path.read_text(encoding="utf-8")))


def test_each_sections_page_has_every_answer_with_its_question_and_marking_scheme(tmp_path):
    pages = {p.stem: p for p in write_pages(ROOT / "solutions", tmp_path)}
    with_answers = {s for s in SECTIONS
                    if any(cell_kind(c) == "answer" for c in load_notebook("solutions", s)["cells"])}
    assert set(pages) == with_answers and len(with_answers) >= 10
    index = (tmp_path / "index.html").read_text(encoding="utf-8")
    assert all(f'href="{section}.html"' in index for section in pages)
    for section, path in pages.items():
        text = page_text(path)
        cells = load_notebook("solutions", section)["cells"]
        for i, cell in enumerate(cells):
            if cell_kind(cell) != "answer":
                continue
            assert "评分要点" in cell["source"], f"{section}: {grade_id(cell)} has no marking scheme"
            heading = rf"{grade_id(cell)}\s*（{cell['metadata']['nbgrader']['points']:g} 分）"
            assert re.search(heading, text), f"{section}: no heading {heading}"
            for source in (cells[i - 1]["source"], cell["source"]):
                missing = [p for p in PHRASE.findall(source) if p not in text]
                assert not missing, f"{section}/{grade_id(cell)}: {missing[:5]}"
