"""A stand-in for an exercise that is not done yet: using it says, in one Chinese line, what is missing.

The demos get one where they need a learner's exercise that has not passed its check (utils/checks/core.py's
``mine_or_reference``) or that no saved notebook holds (utils/learner_solutions.py)."""
from __future__ import annotations


class ExerciseNeeded(Exception):
    """A demo or a given component needs an exercise that is not done: one line in Jupyter."""

    def _render_traceback_(self) -> list[str]:
        return [f"\x1b[33m{self}\x1b[0m"]


class Pending:
    """Stands in for ``name`` until the learner's exercise passes: using it raises ExerciseNeeded."""

    def __init__(self, name: str, message: str):
        self._name, self._message = name, message

    def __call__(self, *_args, **_kwargs):
        raise ExerciseNeeded(self._message)

    def __getattr__(self, attribute: str):
        if attribute.startswith("__"):
            raise AttributeError(attribute)
        raise ExerciseNeeded(self._message)

    def __repr__(self) -> str:
        return f"<{self._name}：尚未完成>"
