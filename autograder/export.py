"""Grades out of the gradebook for a spreadsheet and for an LMS: ``nbgrader export --exporter`` plugins.

    nbgrader export --exporter=autograder.export.ExcelCsvExportPlugin            # grades.csv, UTF-8 with BOM
    nbgrader export --exporter=autograder.export.LmsCsvExportPlugin --LmsCsvExportPlugin.lms=moodle --to moodle.csv
    nbgrader export --exporter=autograder.export.LmsCsvExportPlugin --LmsCsvExportPlugin.lms=canvas --to canvas.csv

nbgrader's own CsvExportPlugin writes grades.csv without a byte order mark, so Excel on Chinese Windows
reads it as GBK and garbles every Chinese name, and it joins fields with commas unquoted. The first
plugin writes the same columns, quoted as CSV wants, in UTF-8 with a BOM (Excel then reads UTF-8).
The second writes one row per student and one column per assignment (its score after the late
penalty), in the layout an LMS gradebook imports: Canvas's ("Student", "ID", "SIS User ID",
"SIS Login ID", "Section", then the assignments; students matched by SIS Login ID, the nbgrader id,
which is their login) or Moodle's (an "Username" column to map to the user's username, then the
assignments, each mapped to a grade item when imported).
"""
from __future__ import annotations

import csv

from nbgrader.api import Gradebook, MissingEntry
from nbgrader.plugins import ExportPlugin
from traitlets import Enum

COLUMNS = ["assignment", "duedate", "timestamp", "student_id", "last_name", "first_name", "email",
           "raw_score", "late_submission_penalty", "score", "max_score"]   # nbgrader's grades.csv


def grade_rows(plugin: ExportPlugin, gradebook: Gradebook) -> list[dict]:
    """One row of nbgrader's grades.csv columns per (assignment, student) that ``plugin``'s --assignment
    and --student select; a student who handed nothing in scores 0."""
    rows = []
    for assignment in gradebook.assignments:
        if plugin.assignment and assignment.name not in plugin.assignment:
            continue
        for student in gradebook.students:
            if plugin.student and student.id not in plugin.student:
                continue
            row = {"assignment": assignment.name, "duedate": assignment.duedate, "student_id": student.id,
                   "last_name": student.last_name, "first_name": student.first_name, "email": student.email,
                   "max_score": assignment.max_score, "timestamp": None, "raw_score": 0.0,
                   "late_submission_penalty": 0.0, "score": 0.0}
            try:
                submission = gradebook.find_submission(assignment.name, student.id)
            except MissingEntry:
                pass
            else:
                penalty = submission.late_submission_penalty or 0.0
                row.update(timestamp=submission.timestamp, raw_score=submission.score,
                           late_submission_penalty=penalty, score=max(0.0, submission.score - penalty))
            rows.append({k: "" if v is None else v for k, v in row.items()})
    return rows


class ExcelCsvExportPlugin(ExportPlugin):
    """nbgrader's grades.csv columns, in UTF-8 with a BOM (Excel on Chinese Windows opens it right)."""

    def export(self, gradebook: Gradebook) -> None:
        dest = self.to or "grades.csv"
        self.log.info("Exporting grades to %s (UTF-8 with BOM)", dest)
        with open(dest, "w", encoding="utf-8-sig", newline="") as fh:
            writer = csv.DictWriter(fh, COLUMNS)
            writer.writeheader()
            writer.writerows(grade_rows(self, gradebook))


class LmsCsvExportPlugin(ExportPlugin):
    """One row per student, one column per assignment: a gradebook import for Canvas or Moodle."""

    lms = Enum(("canvas", "moodle"), default_value="moodle", help="whose gradebook import layout").tag(config=True)

    def export(self, gradebook: Gradebook) -> None:
        dest = self.to or f"grades-{self.lms}.csv"
        rows = grade_rows(self, gradebook)
        assignments = list(dict.fromkeys(r["assignment"] for r in rows))
        students = {r["student_id"]: r for r in rows}
        scores = {(r["student_id"], r["assignment"]): r["score"] for r in rows}
        self.log.info("Exporting grades for %s to %s", self.lms, dest)
        with open(dest, "w", encoding="utf-8", newline="") as fh:
            writer = csv.writer(fh)
            writer.writerow([*self.identity_header(), *assignments])
            for student_id, row in students.items():
                writer.writerow([*self.identity(row), *(scores[student_id, a] for a in assignments)])

    def identity_header(self) -> list[str]:
        return ["Student", "ID", "SIS User ID", "SIS Login ID", "Section"] if self.lms == "canvas" else ["Username"]

    def identity(self, row: dict) -> list[str]:
        if self.lms == "moodle":
            return [row["student_id"]]
        name = ", ".join(part for part in (row["last_name"], row["first_name"]) if part)
        return [name, "", "", row["student_id"], ""]
