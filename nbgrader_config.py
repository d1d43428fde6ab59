"""nbgrader configuration of the course (read from the repository root).

solutions/ is nbgrader's source directory and notebooks/ its release directory, so
`python3 course.py build` (or `nbgrader generate_assignment ID --force`) regenerates
the learner notebooks. Student data (submitted/, autograded/, feedback/) and the
gradebook are created next to this file and ignored by git. `nbgrader autograde` and
`python -m autograder.grade` run student code in a bubblewrap sandbox (autograder/sandbox.py).
"""
from autograder.config import configure

c = get_config()  # noqa: F821  (provided by nbgrader)
configure(c)
