"""A grading kernel starts as close to nbgrader as a stock one: counted on the real stack of a real
``nbgrader autograde`` with the course's configuration (its kernels forked from a zygote).

nbgrader's Execute preprocessor starts its kernel in nbclient's ``async_start_new_kernel``; stock
jupyter_client reaches the provisioner's ``launch_kernel`` five frames below it (``ensure_async``, the
kernel manager's pending-state wrapper, ``_async_start_kernel``, ``_async_launch_kernel``, the
provisioner). The course's provisioner must be no further: whatever the sandbox and the zygote need
happens in the provisioner, not in frames of ours stacked above it."""
from __future__ import annotations

import json

import pytest

from autograder.notebook_format import cell_kind

from .nbgrader_course import Course, slim

SECTION = "01_qkv_and_scores"
STOCK_FRAMES = 5

# Appended to the course's nbgrader_config.py: each way a kernel is started (forked by a zygote, or a
# process started by jupyter_client's launcher) first writes the stack it is called from.
RECORD_STACKS = """
import json as _json, traceback as _traceback
import jupyter_client.provisioning.local_provisioner as _local
from autograder import zygote_pool as _pool

def _recorded(start):
    def recording(*args, **kwargs):
        with open({out!r}, "a", encoding="utf-8") as f:
            f.write(_json.dumps([[frame.filename, frame.name] for frame in _traceback.extract_stack()[:-1]]) + "\\n")
        return start(*args, **kwargs)
    return recording

_local.launch_kernel = _recorded(_local.launch_kernel)
_pool.ZygoteHandle.spawn = _recorded(_pool.ZygoteHandle.spawn)
"""


def frames_below_kernel_start(stack: list[list[str]]) -> int:
    """How many frames lie from nbgrader's Execute starting its kernel (the outermost
    ``async_start_new_kernel``) down to the frame that starts the kernel's process (the last one)."""
    start = next(i for i, (_, name) in enumerate(stack) if name == "async_start_new_kernel")
    return len(stack) - 1 - start


@pytest.mark.needs("bwrap")
def test_a_forked_grading_kernel_starts_within_the_frames_of_a_stock_one(tmp_path):
    stacks = tmp_path / "stacks.jsonl"
    course = Course.create(tmp_path / "course", [SECTION], RECORD_STACKS.format(out=str(stacks)))
    nb = slim(course.release_notebook(SECTION))
    nb["cells"] = [c for c in nb["cells"] if cell_kind(c) != "test"]   # one kernel, no judge: the start is what counts
    course.submit("alice", SECTION, nb)
    course.nbgrader("autograde", SECTION, "--force")
    recorded = [json.loads(line) for line in stacks.read_text(encoding="utf-8").splitlines()]
    assert recorded, "no kernel was started"
    stack = recorded[0]
    assert stack[-1][1] == "launch_kernel" and "autograder" in stack[-1][0], \
        "the course's provisioner starts the kernel (forked by its zygote)"
    shown = "\n".join(f"{file.rsplit('site-packages/', 1)[-1]}: {name}" for file, name in stack)
    assert frames_below_kernel_start(stack) <= STOCK_FRAMES, shown
