"""Grade every collected submission of a section, using every core, with limits.

    python -m autograder.grade 01_qkv_and_scores              # all students in submitted/
    python -m autograder.grade 01_qkv_and_scores --jobs 2 --students alice,bob --memory-mb 4096
    python -m autograder.grade 01_qkv_and_scores --sequential  # plain `nbgrader autograde`, for comparison
    python -m autograder.grade --help-all                      # every option, c.GradingLimits included

``--jobs`` worker processes (default: one per core) each run nbgrader's own autograde for one student
after another (autograder/worker.py), so scores and feedback are exactly those of ``nbgrader
autograde``: the same converter, preprocessors, exporter and configuration (nbgrader_config.py),
with this command's options on top. autograder/scheduler.py hands out the students, enforces the
wall-clock limit and reports what could not be graded (exit status 1). The limits are
``c.GradingLimits`` (autograder/limits.py), set in nbgrader_config.py or by the options here.

Every path comes from nbgrader's CourseDirectory (run from the course root, as nbgrader itself).
"""
from __future__ import annotations

import os
import subprocess
import sys
import time

from traitlets import Bool, Int, Unicode
from traitlets.config import Application, Config

from . import sandbox
from .limits import ALIASES, GradingLimits
from .worker import child_env, course_app, start_forkserver


class GradeApp(Application):
    """The command line of ``python -m autograder.grade SECTION``."""

    name = "python -m autograder.grade"
    description = "并行批改一节作业的全部提交（nbgrader autograde）。"
    classes = [GradingLimits]
    aliases = {"jobs": "GradeApp.jobs", "students": "GradeApp.students", "cell-timeout": "GradeApp.cell_timeout",
               **ALIASES}
    flags = {"sequential": ({"GradeApp": {"sequential": True}}, "用一个 nbgrader 进程依次批改（对照用）")}

    jobs = Int(os.cpu_count() or 1, help="同时批改的份数（默认：CPU 核数）").tag(config=True)
    students = Unicode("", help="逗号分隔的学生 id；默认 submitted/ 下的全部学生").tag(config=True)
    cell_timeout = Int(0, help="每个单元格的时间上限（秒），即 nbgrader 的 c.Execute.timeout；"
                               "0：用课程配置里的值").tag(config=True)
    sequential = Bool(False, help="用一个 nbgrader 进程依次批改（对照用）").tag(config=True)

    def overrides(self) -> Config:
        """What the command line changes in the course's configuration."""
        overrides = Config({name: traits for name, traits in self.cli_config.items() if name != "GradeApp"})
        if self.cell_timeout:
            overrides.Execute.timeout = self.cell_timeout
        return overrides


def nbgrader_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "nbgrader", *args, "--log-level=WARN"]


def as_flags(overrides: Config) -> list[str]:
    """The options of nbgrader's own command line that set ``overrides``."""
    return [f"--{section}.{name}={value}" for section, traits in overrides.items() for name, value in traits.items()]


def warn_if_unsealed(config) -> None:
    """Say so when the course asks for sandboxed kernels and this machine cannot give them."""
    from .provisioner import SandboxProvisioner   # jupyter_client: only now

    reason = sandbox.unavailable_reason()
    if SandboxProvisioner(config=config).sandbox and reason:
        print(sandbox.FALLBACK_WARNING % reason, file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    cli = GradeApp()
    cli.initialize(argv)
    if len(cli.extra_args) != 1:
        cli.print_help()
        return 2
    section, overrides = cli.extra_args[0], cli.overrides()
    if not cli.sequential:
        start_forkserver()  # it imports nbgrader while this process does, and reads the configuration
    from . import scheduler, submission   # nbgrader and nbconvert: only now
    app = course_app()
    app.config.merge(overrides)
    warn_if_unsealed(app.config)
    coursedir = app.coursedir
    released = submission.released_notebook(coursedir, section)
    if not released.exists():  # it stands in for unreadable submissions, and the integrity scan reads it
        print(f"找不到 {section} 的发布版 notebook（{released}）：先运行 "
              f"nbgrader generate_assignment {section}。", file=sys.stderr)
        return 1
    students = cli.students.split(",") if cli.students else scheduler.students_of(coursedir, section)
    if not students:
        print(f"{coursedir.submitted_directory}/ 里没有 {section} 的提交。", file=sys.stderr)
        return 1
    start = time.perf_counter()
    if cli.sequential:
        status = subprocess.run(nbgrader_cmd("autograde", section, "--force", *as_flags(overrides)),
                                cwd=coursedir.root, env=child_env(1), check=False).returncode
    else:
        failed = [o for o in scheduler.grade_section(app, section, students, cli.jobs, overrides) if not o.ok]
        for o in failed:
            print(f"未能批改 {o.student}：{o.note}", file=sys.stderr)
        status = 1 if failed else 0
    elapsed = time.perf_counter() - start
    print(f"{len(students)} 份提交，用时 {elapsed:.1f} 秒（{60 * len(students) / elapsed:.1f} 份/分钟）"
          + (f"；有提交未能批改，退出状态 {status}" if status else ""), file=sys.stderr)
    return status


if __name__ == "__main__":
    sys.exit(main())
