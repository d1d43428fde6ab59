"""Each section's 评分要点 as a page to open beside the formgrader: for every manually graded answer cell,
the question (the cell before it), its points, and the reference answer with its marking scheme, as
solutions/ has them (they never reach students: the release and the feedback leave them out).

    python -m autograder.rubric SOURCE OUT [SECTION ...]

writes OUT/<section>.html for every section of SOURCE (nbgrader's source directory, solutions/) that has
answer cells, and OUT/index.html linking them. ``classroom.py setup`` runs it in the grading account's
course directory (``评分要点/``, served by the formgrader's JupyterLab at
/services/<course>/files/<course>/评分要点/index.html); run it again after editing an answer cell.
"""
from __future__ import annotations

import argparse
import html
import sys
from pathlib import Path

import nbformat
from nbconvert import HTMLExporter

from utils.sections import section_ids

from .notebook_format import cell_kind, grade_id, read


def answers(nb: dict) -> list[tuple[dict, dict]]:
    """(the cell before it: the question, the answer cell) for each manually graded answer cell."""
    cells = nb["cells"]
    return [(cells[i - 1], cell) for i, cell in enumerate(cells) if cell_kind(cell) == "answer" and i > 0]


def rubric_notebook(section: str, nb: dict) -> nbformat.NotebookNode:
    markdown = nbformat.v4.new_markdown_cell
    cells = [markdown(f"# {section} 评分要点\n\n人工批改的每道简答题：题目、分值、参考答案和评分要点"
                      f"（来自 solutions/{section}/{section}.ipynb）。")]
    for question, answer in answers(nb):
        points = answer["metadata"]["nbgrader"]["points"]
        cells += [markdown(f"---\n## `{grade_id(answer)}`（{points:g} 分）\n\n**题目**（答题单元格前的一格）："),
                  markdown(question["source"]), markdown(answer["source"])]
    return nbformat.v4.new_notebook(cells=cells, metadata={"language_info": {"name": "python"}})


def write_pages(source: Path, out: Path, sections: list[str] | None = None) -> list[Path]:
    """OUT/<section>.html for each section with answer cells, and OUT/index.html; the pages written."""
    out.mkdir(parents=True, exist_ok=True)
    exporter = HTMLExporter(template_name="lab")
    pages = []
    for sid in section_ids(source):
        if sections and sid not in sections:
            continue
        nb = read(source / sid / f"{sid}.ipynb")
        if answers(nb):
            body, _ = exporter.from_notebook_node(rubric_notebook(sid, nb))
            pages.append(out / f"{sid}.html")
            pages[-1].write_text(body, encoding="utf-8")
    links = "".join(f'<li><a href="{html.escape(p.name)}">{html.escape(p.stem)}</a></li>' for p in pages)
    (out / "index.html").write_text(f'<!DOCTYPE html><html lang="zh-CN"><meta charset="utf-8"><title>评分要点</title>'
                                    f"<h1>评分要点</h1><ul>{links}</ul></html>\n", encoding="utf-8")
    return pages


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("source", type=Path, help="nbgrader's source directory (solutions/)")
    parser.add_argument("out", type=Path)
    parser.add_argument("sections", nargs="*")
    args = parser.parse_args(argv)
    for page in write_pages(args.source, args.out, args.sections):
        print(page)
    return 0


if __name__ == "__main__":
    sys.exit(main())
