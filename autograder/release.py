"""What nbgrader releases to a class holds no answer: its one preprocessor, :class:`ClearShownAnswers`.

A source notebook quotes the book's code after an exercise's check (a cell tagged
``shows-answer:<exercise>``), for the learner to compare with their own once it passes. In the self-study
course that is the point; in a class it is the answer of the open assignment. ``nbgrader
generate_assignment`` with the course's configuration (autograder/config.py) therefore puts a note in each
such cell's place, as the class edition's notebooks do (autograder/edition.py); the book's code comes back
with the section's solutions once its deadline has passed (``course.py edition student --answers-through``).
``course.py build`` turns it off for the self-study notebooks/ (autograder/build.py).
"""
from __future__ import annotations

from nbgrader.preprocessors import NbGraderPreprocessor
from traitlets import Bool

from utils.notebook import SHOWN_LATER, shown_answers


class ClearShownAnswers(NbGraderPreprocessor):
    """Replace every cell tagged ``shows-answer:<exercise>`` by a note that the answer comes after the deadline."""

    enabled = Bool(True, help="Put a note in place of every cell that shows an exercise's answer (a class's "
                              "release); False keeps them (the self-study notebooks).").tag(config=True)

    def preprocess_cell(self, cell, resources, index):  # noqa: ARG002  (nbgrader's signature)
        if self.enabled and shown_answers(cell):
            cell.cell_type, cell.source, cell.metadata = "markdown", SHOWN_LATER, {}
            cell.pop("outputs", None)
            cell.pop("execution_count", None)
        return cell, resources
