"""The class misconception report of one section, for the instructor (after autograding).

    python -m autograder.report 01_qkv_and_scores              # writes reports/01_qkv_and_scores/
    python -m autograder.report 01_qkv_and_scores --out DIR

Run from the course root (where nbgrader_config.py is). Scores come from the gradebook;
misconception codes from the error outputs of the autograded notebooks: every failing check
raises ``CheckError`` whose message starts with ``[code]`` (utils/checks/codes.py: the judge writes
them, autograder/judge.py), and the grading preprocessors add ``[kernel-died]`` and ``[timeout]``.
A student counts once per exercise per code; when the visible and the hidden test of an
exercise report different codes, both count. An exercise passes when every one of its test
cells has full points. A student of the gradebook, or with a submitted/ folder, but without an
autograded notebook is listed as not graded and left out of the rates. Writes exercises.csv,
codes.csv, students.csv (UTF-8 with BOM, for Excel) and a self-contained report.html (figure
embedded as a PNG); prints a Chinese summary.
"""
from __future__ import annotations

import argparse
import base64
import csv
import glob
import html
import io
import json
import statistics
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from nbgrader.api import Gradebook, MissingEntry
from nbgrader.coursedir import CourseDirectory
from traitlets.config.loader import PyFileConfigLoader

from utils.checks.codes import CODES, describe, parse_code

from .notebook_format import exercise_of, grade_id, visible_and_hidden

UNREGISTERED = "未登记的代码"
EXAMPLES = 3      # example students shown per code
TOP_SUMMARY = 5   # codes printed to stdout
TOP_FIGURE = 10   # codes drawn in the figure
EXERCISE_HEADER = ["练习", "提交数", "通过人数", "通过率", "仅可见测试通过率", "仅隐藏测试通过率",
                   "平均得分", "满分", "得分分布"]
CODE_HEADER = ["练习", "代码", "人数", "占提交比例", "示例学生", "可能的误区", "提示"]
STUDENT_HEADER = ["学生", "状态", "自动评分得分", "满分", "通过的练习", "误区代码"]
PASS_NOTE = "通过 = 该练习的全部测试单元格（可见与隐藏）都拿到满分；每名学生每个练习每个代码只计一次。"


class ReportError(Exception):
    """Why no report can be made (a Chinese message for the instructor)."""


# --- reading: one autograded notebook ----------------------------------------------------

def error_codes(cell: dict, uncoded: bool = True) -> list[str]:
    """The codes of a cell's error outputs: ``[code]`` at the start of evalue; for an error
    without one (a NameError …), its ename, unless ``uncoded`` is False."""
    codes = []
    for output in cell.get("outputs", []):
        if output.get("output_type") == "error":
            code = parse_code(output.get("evalue", ""))
            codes += [code] if code else [output.get("ename", "Error")] if uncoded else []
    return codes


def notebook_codes(nb: dict) -> dict[str, list[str]]:
    """exercise -> the codes of its test cells, and the ``[code]``s of its solution cell (a kernel
    that died or hung there), in notebook order, each code once. Every tested exercise is a key."""
    cells = [c for c in nb["cells"] if c["cell_type"] == "code"]
    codes: dict[str, list[str]] = {e: [] for e in map(exercise_of, map(grade_id, cells)) if e}
    for cell in cells:
        test_of = exercise_of(grade_id(cell))
        exercise = test_of or grade_id(cell)
        if exercise in codes:
            codes[exercise] += [c for c in error_codes(cell, uncoded=bool(test_of)) if c not in codes[exercise]]
    return codes


# --- reading: the class -----------------------------------------------------------------

@dataclass
class Graded:
    student: str
    scores: dict[str, tuple[float, float]]  # test cell grade_id -> (score, max score)
    codes: dict[str, list[str]]             # exercise -> codes found, notebook order


@dataclass
class ClassResults:
    section: str
    graded: list[Graded]
    missing: dict[str, str] = field(default_factory=dict)  # student -> why there is no result

    @property
    def exercises(self) -> list[str]:
        """In notebook order (then any exercise known only from the gradebook)."""
        names: dict[str, None] = {}
        for g in self.graded:
            names.update(dict.fromkeys(g.codes))
        for g in self.graded:
            names.update(dict.fromkeys(e for e in map(exercise_of, g.scores) if e))
        return list(names)


def course_directory(root: Path) -> CourseDirectory:
    if not (root / "nbgrader_config.py").exists():
        raise ReportError(f"{root} 里没有 nbgrader_config.py：请在课程根目录运行。")
    config = PyFileConfigLoader("nbgrader_config.py", path=str(root)).load_config()
    return CourseDirectory(config=config, root=str(root))


def gradebook_scores(coursedir: CourseDirectory, section: str) -> tuple[dict, set[str]]:
    """({student: {notebook: {test grade_id: (score, max)}}}, every student of the gradebook)."""
    db = coursedir.db_url
    if db.startswith("sqlite:///") and not Path(db[len("sqlite:///"):]).exists():
        raise ReportError(f"没有成绩库 {db[len('sqlite:///'):]}：先运行 nbgrader autograde {section}。")
    with Gradebook(db, coursedir.course_id) as gb:
        try:
            submissions = gb.assignment_submissions(section)
        except MissingEntry:
            raise ReportError(f"成绩库里没有作业 {section}：先运行 nbgrader autograde {section}。") from None
        scores = {s.student_id: {nb.name: {g.name: (g.score, g.max_score) for g in nb.grades if exercise_of(g.name)}
                                 for nb in s.notebooks} for s in submissions}
        return scores, {s.id for s in gb.students}


def student_dirs(coursedir: CourseDirectory, step: str, section: str) -> set[str]:
    """Students with a folder for ``section`` under ``step`` (e.g. submitted/<student>/<section>)."""
    return {Path(p).parent.name for p in glob.glob(coursedir.format_path(step, "*", section))}


def why_missing(student: str, in_gradebook: bool, submitted: set[str]) -> str:
    if in_gradebook:
        return "autograded/ 中没有批改后的 notebook"
    return "已提交，尚未批改" if student in submitted else "未提交"


def load_results(root: Path, section: str) -> ClassResults:
    coursedir = course_directory(root)
    scores, students = gradebook_scores(coursedir, section)
    submitted = student_dirs(coursedir, coursedir.submitted_directory, section)
    results = ClassResults(section, [])
    for student in sorted(students | set(scores) | submitted):
        folder = Path(coursedir.format_path(coursedir.autograded_directory, student, section))
        notebooks = {name: folder / f"{name}.ipynb" for name in scores.get(student, {})}
        if notebooks and all(p.exists() for p in notebooks.values()):
            results.graded.append(read_graded(student, scores[student], notebooks))
        else:
            results.missing[student] = why_missing(student, student in scores, submitted)
    return results


def read_graded(student: str, scores: dict, notebooks: dict[str, Path]) -> Graded:
    graded = Graded(student, {}, {})
    for name, path in notebooks.items():
        graded.scores.update(scores[name])
        graded.codes.update(notebook_codes(json.loads(path.read_text(encoding="utf-8"))))
    return graded


# --- statistics ---------------------------------------------------------------------------

def cells_of(g: Graded, exercise: str, kind: str) -> list[str]:
    """The test cells of an exercise a student was graded on: kind "visible", "hidden" or "all"."""
    visible, hidden = visible_and_hidden(exercise)
    ids = {"visible": [visible], "hidden": [hidden]}.get(kind, [visible, hidden])
    return [i for i in ids if i in g.scores]


def passes(g: Graded, ids: list[str]) -> bool:
    return all(g.scores[i][0] >= g.scores[i][1] - 1e-9 for i in ids)


def pass_rate(graded: list[Graded], exercise: str, kind: str) -> float | None:
    counted = [g for g in graded if cells_of(g, exercise, kind)]
    return sum(passes(g, cells_of(g, exercise, kind)) for g in counted) / len(counted) if counted else None


def points(g: Graded, exercise: str | None = None) -> tuple[float, float]:
    """(score, max) of one exercise, or of every test cell when exercise is None."""
    ids = cells_of(g, exercise, "all") if exercise else list(g.scores)
    return sum(g.scores[i][0] for i in ids), sum(g.scores[i][1] for i in ids)


def full_points(results: ClassResults) -> float:
    return max((points(g)[1] for g in results.graded), default=0.0)


@dataclass
class ExerciseStats:
    exercise: str
    submissions: int
    passed: int
    pass_rate: float | None
    visible_rate: float | None
    hidden_rate: float | None
    scores: list[float]
    max_points: float


@dataclass
class CodeStats:
    exercise: str
    code: str
    students: list[str]

    @property
    def count(self) -> int:
        return len(self.students)

    @property
    def examples(self) -> list[str]:
        return self.students[:EXAMPLES]

    @property
    def texts(self) -> tuple[str, str]:
        """The misconception and the first hint (what the feedback showed)."""
        if self.code not in CODES:
            return UNREGISTERED, ""
        entry = describe(self.code)
        return entry.misconception, entry.idea


def exercise_stats(results: ClassResults) -> list[ExerciseStats]:
    stats = []
    for e in results.exercises:
        graded = [g for g in results.graded if cells_of(g, e, "all")]
        stats.append(ExerciseStats(
            e, len(graded), sum(passes(g, cells_of(g, e, "all")) for g in graded),
            pass_rate(graded, e, "all"), pass_rate(graded, e, "visible"), pass_rate(graded, e, "hidden"),
            [points(g, e)[0] for g in graded], max((points(g, e)[1] for g in graded), default=0.0)))
    return stats


def code_stats(results: ClassResults) -> list[CodeStats]:
    """Every (exercise, code) found, most frequent first; students sorted by id."""
    found: dict[tuple[str, str], list[str]] = {}
    for g in sorted(results.graded, key=lambda g: g.student):
        for exercise, codes in g.codes.items():
            for code in codes:
                found.setdefault((exercise, code), []).append(g.student)
    order = {e: i for i, e in enumerate(results.exercises)}
    rows = [CodeStats(e, c, s) for (e, c), s in found.items()]
    return sorted(rows, key=lambda r: (-r.count, order.get(r.exercise, len(order)), r.code))


# --- output -------------------------------------------------------------------------------

def percent(rate: float | None) -> str:
    return "—" if rate is None else f"{rate:.1%}"


def distribution(scores: list[float]) -> str:
    return "；".join(f"{s:g} 分 × {n}" for s, n in sorted(Counter(scores).items()))


def exercise_rows(stats: list[ExerciseStats]) -> list[list]:
    return [[s.exercise, s.submissions, s.passed, percent(s.pass_rate), percent(s.visible_rate),
             percent(s.hidden_rate), f"{statistics.mean(s.scores):.2f}" if s.scores else "—", f"{s.max_points:g}",
             distribution(s.scores)] for s in stats]


def code_rows(stats: list[CodeStats], submissions: int) -> list[list]:
    return [[s.exercise, s.code, s.count, percent(s.count / submissions), "、".join(s.examples), *s.texts]
            for s in stats]


def student_rows(results: ClassResults) -> list[list]:
    rows = []
    for g in results.graded:
        score, full = points(g)
        rows.append([g.student, "已批改", f"{score:g}", f"{full:g}",
                     "、".join(e for e in g.codes if passes(g, cells_of(g, e, "all"))),
                     "；".join(f"{e}: {', '.join(c)}" for e, c in g.codes.items() if c)])
    return rows + [[s, why, "", "", "", ""] for s, why in results.missing.items()]


def write_csv(path: Path, header: list[str], rows: list[list]) -> None:
    with path.open("w", encoding="utf-8-sig", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(header)
        writer.writerows(rows)


def figure_png(exercises: list[ExerciseStats], codes: list[CodeStats], totals: list[float], full: float) -> bytes:
    from matplotlib.figure import Figure

    from utils.plotting import setup_chinese_font

    setup_chinese_font()
    fig = Figure(figsize=(15, 4.8), layout="constrained")
    ax_rates, ax_codes, ax_totals = fig.subplots(1, 3, width_ratios=[1.1, 1.4, 0.9])
    draw_pass_rates(ax_rates, exercises)
    draw_top_codes(ax_codes, codes[:TOP_FIGURE])
    ax_totals.hist(totals, bins=[x - 0.5 for x in range(int(full) + 2)], color="#4C72B0", rwidth=0.85)
    ax_totals.set(title="每名学生的自动评分得分", xlabel=f"得分（满分 {full:g}）", ylabel="人数")
    ax_totals.yaxis.get_major_locator().set_params(integer=True)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110)
    return buffer.getvalue()


def draw_pass_rates(ax, exercises: list[ExerciseStats]) -> None:
    kinds = [("仅可见测试", "visible_rate", "#9DB9D8"), ("仅隐藏测试", "hidden_rate", "#DD8452"),
             ("全部测试", "pass_rate", "#4C72B0")]
    width = 0.8 / len(kinds)
    for k, (label, attr, color) in enumerate(kinds):
        xs = [i + (k - 1) * width for i in range(len(exercises))]
        ax.bar(xs, [100 * (getattr(s, attr) or 0) for s in exercises], width, label=label, color=color)
    ax.set_xticks(range(len(exercises)), [s.exercise for s in exercises], rotation=20, ha="right")
    ax.set(title="各练习的通过率", ylabel="通过率（%）", ylim=(0, 118), yticks=range(0, 101, 20))
    ax.legend(fontsize=8, loc="upper center", ncol=len(kinds), frameon=False)


def draw_top_codes(ax, codes: list[CodeStats]) -> None:
    if not codes:
        ax.text(0.5, 0.5, "没有发现误区代码", ha="center", va="center", transform=ax.transAxes)
        ax.set_axis_off()
        return
    labels = [f"[{c.code}]\n{c.exercise}" for c in codes][::-1]
    ax.barh(range(len(codes)), [c.count for c in codes][::-1], color="#C44E52")
    ax.set_yticks(range(len(codes)), labels, fontsize=8)
    ax.set(title=f"最常见的误区代码（前 {len(codes)} 个）", xlabel="学生人数")
    ax.xaxis.get_major_locator().set_params(integer=True)


def html_table(header: list[str], rows: list[list]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(v))}</td>" for v in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


HTML_PAGE = """<!DOCTYPE html>
<html lang="zh-CN"><head><meta charset="utf-8"><title>{title}</title>
<style>body{{font-family:"Noto Sans CJK SC","Microsoft YaHei","PingFang SC",sans-serif;margin:2em;color:#222}}
table{{border-collapse:collapse;margin:0.5em 0 1.5em}}th,td{{border:1px solid #ccc;padding:4px 8px;
text-align:left;vertical-align:top}}th{{background:#f0f3f8}}img{{max-width:100%}}</style></head>
<body><h1>{title}</h1><p>{lead}</p><img alt="通过率与最常见的误区代码" src="data:image/png;base64,{png}">
<h2>各练习</h2>{exercises}<h2>误区代码</h2>{codes}<h2>学生</h2>{students}</body></html>
"""


def graded_text(results: ClassResults) -> str:
    text = f"已批改 {len(results.graded)} 份提交。"
    if results.missing:
        names = "、".join(f"{s}（{why}）" for s, why in results.missing.items())
        text += f"没有批改结果的学生 {len(results.missing)} 名：{names}。"
    return text


def summary(results: ClassResults, exercises: list[ExerciseStats], codes: list[CodeStats], out: Path) -> str:
    totals = [points(g)[0] for g in results.graded]
    lines = [f"【{results.section} 班级误区报告】" + graded_text(results),
             "通过率（全部 / 仅可见测试 / 仅隐藏测试）："]
    lines += [f"  {s.exercise:<28}" + " / ".join(f"{percent(r):>7}"
                                                  for r in (s.pass_rate, s.visible_rate, s.hidden_rate))
              for s in exercises]
    lines.append(f"自动评分得分：平均 {statistics.mean(totals):.2f} / {full_points(results):g}，"
                 f"中位数 {statistics.median(totals):g}，最低 {min(totals):g}，最高 {max(totals):g}")
    lines.append(f"最常见的误区代码（前 {TOP_SUMMARY} 个）：" if codes else "没有发现误区代码。")
    lines += [f"  {i}. [{c.code}] {c.exercise}：{c.count} 人（{'、'.join(c.examples)}）— {c.texts[0]}"
              for i, c in enumerate(codes[:TOP_SUMMARY], start=1)]
    lines.append(f"报告已写入 {out}（report.html、exercises.csv、codes.csv、students.csv）")
    return "\n".join(lines)


def write_report(results: ClassResults, out: Path) -> str:
    """Write the CSV files and report.html into ``out``; return the summary."""
    exercises, codes = exercise_stats(results), code_stats(results)
    tables = {"exercises": (EXERCISE_HEADER, exercise_rows(exercises)),
              "codes": (CODE_HEADER, code_rows(codes, len(results.graded))),
              "students": (STUDENT_HEADER, student_rows(results))}
    out.mkdir(parents=True, exist_ok=True)
    for name, (header, rows) in tables.items():
        write_csv(out / f"{name}.csv", header, rows)
    totals = [points(g)[0] for g in results.graded]
    png = figure_png(exercises, codes, totals, full_points(results))
    page = HTML_PAGE.format(title=html.escape(f"{results.section} 班级误区报告"),
                            lead=html.escape(graded_text(results) + PASS_NOTE),
                            png=base64.b64encode(png).decode("ascii"),
                            **{name: html_table(*table) for name, table in tables.items()})
    (out / "report.html").write_text(page, encoding="utf-8")
    return summary(results, exercises, codes, out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="一节作业的班级误区报告（在 nbgrader autograde 之后运行）。")
    parser.add_argument("section")
    parser.add_argument("--out", type=Path, help="输出目录（默认：课程根目录下的 reports/<section>/）")
    args = parser.parse_args(argv)
    root = Path.cwd()
    try:
        results = load_results(root, args.section)
        if not results.graded:
            raise ReportError(f"{args.section} 没有已批改的提交：先运行 nbgrader autograde {args.section}"
                              f"（或 python -m autograder.grade {args.section}）。")
    except ReportError as err:
        print(err, file=sys.stderr)
        return 1
    print(write_report(results, args.out or root / "reports" / args.section))
    return 0


if __name__ == "__main__":
    sys.exit(main())
