"""The course package: checks, reference implementations, figures, widgets, environment check."""

# The matplotlib backend grading kernels run with (utils/grading_backend.py) unless the instructor
# asks for the figures (autograder/preprocessors.py sets it; utils/plotting.py recognises it).
GRADING_BACKEND = "module://utils.grading_backend"
