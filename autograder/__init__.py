"""nbgrader set-up, notebook building and grading tools of the course."""
