"""What grading lets one submission use: one traitlets Configurable, read by both entry points.

``nbgrader autograde`` reads it from nbgrader_config.py (``c.GradingLimits.memory_mb = 4096``) or its
command line (``--GradingLimits.memory_mb=4096``); ``python -m autograder.grade`` from the same file or
its own shorter flags (:data:`ALIASES`: ``--memory-mb 4096``). ``--help-all`` of either lists them.
"""
from __future__ import annotations

from traitlets import Int
from traitlets.config import Configurable


class GradingLimits(Configurable):
    """The limits of one submission's grading (autograder/sandbox.py enforces the first two)."""

    memory_mb = Int(6144, help="Address space of each process of a grading sandbox, in MB (RLIMIT_AS); "
                               "python -m autograder.grade also caps each worker process with it. Grading "
                               "section 11 peaks at 1.8 GB.").tag(config=True)
    max_processes = Int(256, help="Processes and threads of one grading sandbox, all together (a pids cgroup, "
                                  "else RLIMIT_NPROC); an idle kernel has about 15.").tag(config=True)
    submission_seconds = Int(900, help="Wall-clock limit of one submission under python -m autograder.grade: its "
                                       "worker is killed, the submission tried once more, then graded as the "
                                       "released notebook. nbgrader autograde has only the per-cell limit "
                                       "(c.Execute.timeout).").tag(config=True)


# python -m autograder.grade's flags for them
ALIASES = {"memory-mb": "GradingLimits.memory_mb", "max-processes": "GradingLimits.max_processes",
           "timeout": "GradingLimits.submission_seconds"}
