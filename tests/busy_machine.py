"""Cell time limits for grading tests on a shared, busy machine."""

IMPORT_CELL_SECONDS = 90  # importing torch, matplotlib and the checks: seconds when the machine is busy


def cell_timeouts(seconds: int) -> str:
    """Lines for a test course's nbgrader_config.py: the notebook's import cell gets
    IMPORT_CELL_SECONDS, every other cell ``seconds`` (so runaway cells cost little test time)."""
    return (f"c.Execute.timeout = {seconds}\n"
            f"c.Execute.timeout_func = lambda cell: {IMPORT_CELL_SECONDS} "
            f"if 'from utils.checks import' in cell.source else {seconds}\n")
