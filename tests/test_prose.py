r"""The mechanical rules of the notebooks' Chinese prose (every solution notebook, every section).

- the sources are named 第六章 / 主干篇 / 原书仓库, with no space between them and a Chinese
  character (原文, 第 6 章, 《Transformer 主干》, seed are not names a learner was introduced to);
- no internal file numbers of the sources (000 / 002) are shown to learners;
- Chinese text in Markdown is quoted with “…”, not ASCII "…" (code spans and code cells excepted);
- no line break between two Chinese characters inside a Markdown paragraph: it renders as a
  visible space;
- no control character where a LaTeX command lost its backslash to an escape (``\to`` written as a
  TAB and "o", ``\frac`` as a form feed, ``\beta`` as a backspace…): in Markdown, and in the strings
  of code cells and of the course's modules (a "$\theta$" that is not a raw string).

Each rule is also shown to fail on a small bad snippet, so a rule that can never fire is caught.
A failure names the notebook, the cell number and the offending text.
"""
from __future__ import annotations

import ast
import pathlib
import re

import pytest

from autograder.notebook_format import cell_kind

from .conftest import SECTIONS, load_notebook

SOURCES = ("第六章", "主干篇", "原书仓库")
# CJK ideographs, CJK punctuation, fullwidth forms, Chinese quotation marks, dash and ellipsis
CJK = "\u3000-\u303f\u3400-\u4dbf\u4e00-\u9fff\uff00-\uffef\u201c\u201d\u2018\u2019\u2014\u2026"
_CJK_CHAR = re.compile(f"[{CJK}]")
_SPACED_SOURCE = re.compile(rf"[{CJK}][ \t]+(?:{'|'.join(SOURCES)})|(?:{'|'.join(SOURCES)})[ \t]+[{CJK}]")
_FILE_NUMBER = re.compile(r"(?<![\d_.,])(?<!\d\s)00[02](?![\d_.,])")
_OTHER_NAMES = re.compile(r"原文|原书(?!仓库)|第\s*6\s*章|《Transformer 主干》|Transformer 主干篇")
_SEED_WORD = re.compile(r"(?<![\w.])seed(?![\w(=])", re.IGNORECASE)
_ASCII_QUOTED_CJK = re.compile(rf'"[^"\n]*[{CJK}][^"\n]*"|(?<![A-Za-z])\'[^\'\n]*[{CJK}][^\'\n]*\'')
# \a \b \v \f \r, or a TAB before a letter: what "\alpha", "\beta", "\frac", "\right", "\to", "\theta",
# "\times" become when their backslash is read as an escape
_EATEN_ESCAPE = re.compile(r"[\x07\x08\x0b\x0c\r]|\t(?=[A-Za-z])")
_NEW_BLOCK = re.compile(r"\s*(?:[-*+]\s|\d+[.)]\s|#|\||>|\$\$|```|<)")


def _without_code_and_math(line: str) -> str:
    """A Markdown line with its code spans and inline math blanked out."""
    line = re.sub(r"`[^`]*`", "``", line)
    return re.sub(r"\$[^$]*\$", "$$", line)


def _prose_lines(markdown: str):
    """(line number, line) of a Markdown cell outside fenced code and display math."""
    fenced = math = False
    for number, line in enumerate(markdown.split("\n"), 1):
        stripped = line.strip()
        if stripped.startswith("```"):
            fenced = not fenced
            continue
        if not fenced and stripped.startswith("$$") and not (len(stripped) > 2 and stripped.endswith("$$")):
            math = not math
            continue
        if not fenced and not math:
            yield number, line


def eaten_escapes(kind: str, source: str) -> list[str]:
    """The control characters of a Markdown cell, or of a code cell's (or module's) string constants, that
    stand where a LaTeX command's backslash was read as an escape."""
    if kind == "markdown":
        texts = [source]
    else:
        try:
            tree = ast.parse(re.sub(r"^\s*[%!].*$", "", source, flags=re.M))
        except SyntaxError:
            return []
        texts = [node.value for node in ast.walk(tree)
                 if isinstance(node, ast.Constant) and isinstance(node.value, str)]
    return [f"an escape ate a LaTeX backslash: {text[max(0, m.start() - 20):m.end() + 10]!r}"
            for text in texts for m in _EATEN_ESCAPE.finditer(text)]


def problems(kind: str, source: str) -> list[str]:
    """What the rules find in one cell (kind "markdown" or "code"), each as 'line N: rule: text'."""
    found = eaten_escapes(kind, source)

    def report(number, rule, text):
        found.append(f"line {number}: {rule}: {text.strip()[:80]!r}")

    lines = list(_prose_lines(source)) if kind == "markdown" else list(enumerate(source.split("\n"), 1))
    for number, line in lines:
        if _SPACED_SOURCE.search(line):
            report(number, "space between a Chinese character and a source name", line)
        if _FILE_NUMBER.search(line):
            report(number, "internal file number 000/002 shown to learners", line)
        if _OTHER_NAMES.search(line):
            report(number, "a source named other than 第六章 / 主干篇 / 原书仓库", line)
        if kind == "markdown":
            prose = _without_code_and_math(line)
            if _SEED_WORD.search(prose):
                report(number, "the internal word 'seed' for a source", line)
            if _ASCII_QUOTED_CJK.search(prose):
                report(number, "ASCII quotes around Chinese text (use “…” or ‘…’)", line)
    if kind == "markdown":
        previous = None
        for number, line in lines:
            if previous is not None and previous[0] == number - 1 and line.strip() and previous[1].strip():
                before = previous[1].rstrip()
                after = re.sub(r"^\s*(?:>\s*)?", "", line)
                quote_goes_on = line.lstrip().startswith(">") and before.lstrip().startswith(">")
                if ((quote_goes_on or not _NEW_BLOCK.match(line)) and not before.lstrip().startswith("|")
                        and _CJK_CHAR.fullmatch(before[-1]) and after and _CJK_CHAR.fullmatch(after[0])):
                    report(number, "line break between two Chinese characters (renders as a space)",
                           before[-12:] + "⏎" + after[:12])
            previous = (number, line)
    return found


def notebook_problems(section: str) -> list[str]:
    nb = load_notebook("solutions", section)
    found = []
    for index, cell in enumerate(nb["cells"]):
        kind = "markdown" if cell["cell_type"] == "markdown" else "code"
        label = f"{section} cell {index} ({cell_kind(cell) or kind})"
        found += [f"{label} {p}" for p in problems(kind, cell["source"])]
    return found


@pytest.mark.parametrize("section", SECTIONS)
def test_prose_follows_the_mechanical_rules(section):
    found = notebook_problems(section)
    assert not found, "\n".join(found)


BAD = {
    "space between a Chinese character and a source name": ("markdown", "实现 原书仓库里的 Head"),
    "space after a source name": ("code", 'print("对应主干篇 说的")'),
    "internal file number 000/002": ("markdown", "**002** 的掩码"),
    "file number in a code string": ("code", 'print("== ~triu(diagonal=1)（002）")'),
    "another name for a source": ("markdown", "对应原文：第 6 章 §6.2.3"),
    "the internal word seed": ("markdown", "这一句来自 seed 的第二章"),
    "ASCII quotes": ("markdown", 'softmax 会"饱和"。'),
    "ASCII single quotes": ("markdown", "不是人工指定'语法头'。"),
    "line break between Chinese characters": ("markdown", "第一行的最后一个字\n第二行的第一个字"),
    "line break inside a blockquote": ("markdown", "> 引用的第一行，\n> 引用的第二行"),
    "a LaTeX arrow eaten by an escape": ("markdown", "`lm_head`（$C \to V$ 的 `nn.Linear`）"),
    "a LaTeX fraction eaten in a code string": ("code", 'plt.title("$\\frac{1}{2}$")'),
}
GOOD = {
    "source names without spaces": ("markdown", "第六章的代码和主干篇的表；原书仓库里的 `Head`。"),
    "quotes in code spans and code cells": ("markdown", '写成 `"btd,bsd->bts"`；“饱和”。'),
    "a code cell with quotes": ("code", 'print("分数")  # "注释"'),
    "an English apostrophe": ("markdown", "PyTorch's 的默认值，nanoGPT's 写法"),
    "list items on new lines": ("markdown", "说明：\n- 第一项\n- 第二项\n1. 第三项"),
    "a break next to Latin or math": ("markdown", "分数表\n$S$ 的形状\n(B, T)"),
    "display math and fences": ("markdown", "公式\n$$\n中文\n文字\n$$\n```\n中文\n文字\n```"),
    "numbers that are not file numbers": ("code", "x = 20_000  # 20 000 个样本, 1.002"),
    "manual_seed in code": ("markdown", "用 `torch.manual_seed(0)` 固定随机种子。"),
    "LaTeX commands kept": ("markdown", "$C \\to V$，$\\frac{1}{\\sqrt{D}}$，$\\theta$"),
    "a raw string of LaTeX and a tab in code": ("code", 'plt.title(r"$\\theta$"); print("a\\t1")'),
}


@pytest.mark.parametrize("name", BAD)
def test_each_rule_can_fail(name):
    kind, snippet = BAD[name]
    assert problems(kind, snippet), f"no rule caught: {snippet!r}"


@pytest.mark.parametrize("name", GOOD)
def test_rules_leave_good_text_alone(name):
    kind, snippet = GOOD[name]
    assert not problems(kind, snippet), problems(kind, snippet)


def test_no_module_string_lost_a_latex_backslash():
    """The course's Python modules (the checks' messages, the demos' labels): no string with an eaten escape."""
    root = pathlib.Path(__file__).resolve().parents[1]
    modules = [root / "course.py", *(root / "utils").rglob("*.py"), *(root / "autograder").rglob("*.py")]
    found = [f"{path.relative_to(root)}: {p}" for path in sorted(modules)
             for p in eaten_escapes("code", path.read_text(encoding="utf-8"))]
    assert not found, "\n".join(found)
