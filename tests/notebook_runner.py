"""Kept while tests import it from here; the runner lives in autograder.execute."""
from autograder.execute import errors, execute, stream_text  # noqa: F401
