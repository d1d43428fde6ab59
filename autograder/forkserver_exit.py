"""Imported by the grading workers' forkserver alone, as the last module it preloads (autograder/worker.py):
the server ends without tearing down what it imported.

The forkserver ends once the grading command has ended. Tearing down nbgrader and torch took it about
0.7 s, and all that time it still held the command's output streams open, so whoever read them to their
end (a script, the benchmark) waited for it. It has nothing to flush or clean up: its workers are gone.
"""
import atexit
import os

atexit.register(os._exit, 0)
