"""The one nbgrader configuration, shared by nbgrader_config.py and the tests."""
from __future__ import annotations

from utils.notebook import TEXT_STUB

SOURCE_DIR = "solutions"
RELEASE_DIR = "notebooks"
CODE_STUB = "# 请在这里写你的代码（删掉下面这行）\nraise NotImplementedError(\"尚未实现\")"


def configure(c, course_root: str | None = None) -> None:
    """Apply the course's nbgrader settings to the config object ``c``."""
    c.CourseDirectory.course_id = "attention"
    c.CourseDirectory.source_directory = SOURCE_DIR
    c.CourseDirectory.release_directory = RELEASE_DIR
    if course_root is not None:
        c.CourseDirectory.root = course_root
    c.ClearSolutions.code_stub = {"python": CODE_STUB}
    c.ClearSolutions.text_stub = TEXT_STUB
    # What a class is released holds no answer: after ClearSolutions, a note replaces every cell that quotes an
    # open exercise's answer (the book's code after its check) and every demo that uses it (autograder/release.py);
    # set c.ClearShownAnswers.answers_through to the last closed section as the class edition's --answers-through.
    # nbgrader's own list otherwise. `course.py build` keeps those cells in the self-study notebooks/.
    c.GenerateAssignment.preprocessors = [
        "nbgrader.preprocessors.IncludeHeaderFooter",
        "nbgrader.preprocessors.InstantiateTests",
        "nbgrader.preprocessors.LockCells",
        "nbgrader.preprocessors.ClearSolutions",
        "autograder.release.ClearShownAnswers",
        "nbgrader.preprocessors.ClearOutput",
        "nbgrader.preprocessors.CheckCellMetadata",
        "nbgrader.preprocessors.ComputeChecksums",
        "nbgrader.preprocessors.SaveCells",
        "nbgrader.preprocessors.ClearHiddenTests",
        "nbgrader.preprocessors.ClearMarkScheme",
        "nbgrader.preprocessors.ComputeChecksums",
        "nbgrader.preprocessors.CheckCellMetadata",
    ]
    # Per-cell limit; nbgrader's default is 30 s and, without one, a lost kernel reply hangs.
    c.Execute.timeout = 60
    c.Execute.interrupt_on_timeout = True
    c.Execute.shutdown_kernel = "immediate"
    # A deleted test cell is put back and run, instead of silently skipping its points.
    c.OverwriteCells.add_missing_cells = True
    c.Autograde.sanitize_preprocessors = [
        "nbgrader.preprocessors.ClearOutput",
        "autograder.preprocessors.DeduplicateGradeIds",
        "nbgrader.preprocessors.OverwriteKernelspec",
        "nbgrader.preprocessors.OverwriteCells",
        "nbgrader.preprocessors.CheckCellMetadata",
    ]
    # Submissions are read through the course's exporter (autograder/submission.py): a file that is no
    # notebook is kept and graded as the released notebook with a note, pasted cell ids are repaired,
    # and grading that raises is tried once more; the same for nbgrader autograde and autograder.grade.
    c.Autograde.exporter_class = "autograder.submission.SubmissionExporter"
    # Student code runs in kernels sealed by bubblewrap (autograder/sandbox.py), each forked from a zygote
    # that imported torch once, started by the course's kernel provisioner (autograder/provisioner.py:
    # c.SandboxProvisioner.sandbox, .fork, .course_package), with the limits of c.GradingLimits
    # (autograder/limits.py) and no figure rendered (c.GradingKernelSpecs.draw_figures). Only grading:
    # learners' JupyterLab is not sandboxed.
    # Execution that survives a killed or hung kernel and whose graded test cells are decided by the
    # judge outside the kernel (c.ResilientExecute.judge_tests, autograder/judge.py; each check with a
    # fresh seed unless c.Judge.seed is set); otherwise nbgrader's own autograde pipeline.
    c.Autograde.autograde_preprocessors = [
        "autograder.preprocessors.ResilientExecute",
        "nbgrader.preprocessors.IgnorePattern",
        "nbconvert.preprocessors.ClearMetadataPreprocessor",
        "nbgrader.preprocessors.LimitOutput",
        "nbgrader.preprocessors.SaveAutoGrades",
        "nbgrader.preprocessors.AssignLatePenalties",
        "nbgrader.preprocessors.CheckCellMetadata",
    ]
    # Late hand-ins (after the assignment's due date plus the student's extension, if any; the hand-in
    # time is the one `nbgrader collect` records): nbgrader's LateSubmissionPlugin scores them 0 (its
    # default, "none", only records that they were late). docs/instructor_guide.md §9.
    c.LateSubmissionPlugin.penalty_method = "zero"
    # A Python warning on stderr would otherwise score a passing test cell 0.
    c.IgnorePattern.enabled = True
    c.IgnorePattern.pattern = r":\d+: \w*Warning: "
    # Feedback must not show the hidden tests.
    c.GenerateFeedback.preprocessors = [
        "nbgrader.preprocessors.GetGrades",
        "nbgrader.preprocessors.ClearHiddenTests",
        "nbconvert.preprocessors.CSSHTMLHeaderPreprocessor",
    ]
