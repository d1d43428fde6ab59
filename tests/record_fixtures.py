"""Record utils/checks/fixtures/ (autograder/fixtures.py) from the course's reference and the bug bank.

A developers' entry point, run by `python3 course.py build` after `python -m autograder.build`: the bug
bank holds correct variants of the exercises — answers — so it lives here in tests/ and never ships in
the course package (tests/test_packaging.py checks that nothing there imports tests).

    python -m tests.record_fixtures
"""
from __future__ import annotations

from autograder import fixtures

from .bugbank import all_variants, load


def record() -> fixtures.Store:
    """What the checks' oracles return on the reference and every variant of the bug bank."""
    variants = all_variants()
    return fixtures.record(lambda exercise: [load(v) for v in variants if v.exercise == exercise])


if __name__ == "__main__":
    fixtures.write(record())
