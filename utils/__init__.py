"""The course package: checks, reference implementations, figures, widgets, environment check."""
