"""Which edition of the course this package belongs to.

The course's own clone is the full edition: the self-study course, and what the instructor grades
with. ``python3 course.py edition student OUT`` builds the class edition that students install and
rewrites this file there: no oracle bodies, no hidden cases and no reference implementation of a
section after ``ANSWERS_THROUGH`` (see utils/checks/oracle.py and autograder/edition.py).
"""
EDITION = "full"
IS_STUDENT = EDITION == "student"
# The sections whose reference implementations this package holds (all, in the full edition).
ANSWERS_THROUGH: str | None = None
