"""Grading kernels forked from a zygote (autograder/kernel_pool.py, autograder/zygote.py) are the
kernels bwrap would start, and nothing of one kernel reaches the next one forked from the same zygote."""
from __future__ import annotations

import asyncio
import json
import logging
import os
import sys

import pytest

from autograder import kernel_pool, sandbox, zygote
from autograder.kernel_pool import ForkingKernelManager, ZygotePool

needs_bwrap = pytest.mark.skipif(sandbox.unavailable_reason() is not None,
                                 reason=f"no sandbox on this machine: {sandbox.unavailable_reason()}")
LAUNCHER = ["-m", "ipykernel_launcher", "-f", "{connection_file}"]

# What a notebook could observe of its kernel, before importing anything itself (nbclient tells a
# kernel nothing of its notebook's path but the working directory: no JPY_SESSION_NAME, no __session__).
OBSERVE = """
import json, os, sys
preloaded = 'torch' in sys.modules
import matplotlib, torch
print(json.dumps({"env": dict(os.environ), "cwd": os.getcwd(), "path": sys.path, "files": sorted(os.listdir('.')),
                  "above": [sorted(os.listdir(up)) for up in ('..', '../..')], "session": globals().get('__session__'),
                  "backend": matplotlib.get_backend(), "seed": torch.initial_seed(), "preloaded": preloaded,
                  "uid": os.getuid(), "argv": sys.argv[1:2]}))
"""

# Everything a kernel might leave behind for the next one.
LEAVE_TRACES = """
import ctypes, os, subprocess, sys
libc = ctypes.CDLL(None, use_errno=True)
for path in ('/tmp/left', '/dev/shm/left', 'left'):
    open(path, 'w').write('secret')
os.makedirs('/tmp/locked/inner')
open('/tmp/locked/inner/file', 'w').write('secret')
os.chmod('/tmp/locked/inner', 0); os.chmod('/tmp/locked', 0)
subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'], start_new_session=True)
print('shm id', libc.shmget(4242, 4096, 0o1000 | 0o600))
libc.mq_open.restype = ctypes.c_int
print('mq', libc.mq_open(b'/left', 0o100 | 0o2, 0o600, None), ctypes.get_errno())
"""

LOOK_FOR_TRACES = """
import json, os
print(json.dumps({"tmp": sorted(os.listdir('/tmp')), "shm": sorted(os.listdir('/dev/shm')),
                  "cwd": sorted(os.listdir('.')),
                  "processes": sorted(int(p) for p in os.listdir('/proc') if p.isdigit()),
                  "sysv": open('/proc/sysvipc/shm').read().splitlines()[1:],
                  "me": os.getpid(), "zygote": os.getppid()}))
"""


async def _run(code: str, cwd: str, manager=ForkingKernelManager, env: dict | None = None) -> str:
    """Start a kernel with ``manager`` in ``cwd``, run ``code``, shut it down; its stdout."""
    km = manager(kernel_name="python3")
    await km.start_kernel(cwd=cwd, env=env or dict(os.environ))
    kc = km.client()
    kc.start_channels()
    out: list[str] = []
    try:
        await kc.wait_for_ready(timeout=120)
        await kc.execute_interactive(code, timeout=120, output_hook=lambda m: out.append(
            m["content"].get("text", "") if m["msg_type"] == "stream" else ""))
    finally:
        kc.stop_channels()
        await km.shutdown_kernel(now=True)
    return "".join(out)


def run(code: str, cwd, **kw) -> str:
    return asyncio.run(_run(code, str(cwd), **kw))


def last_json(text: str) -> dict:
    return json.loads(text.strip().splitlines()[-1])


@pytest.fixture
def fresh_pool(monkeypatch):
    pool = ZygotePool()
    monkeypatch.setattr(kernel_pool, "POOL", pool)
    yield pool
    pool.close()


def test_forked_kernels_come_from_the_registered_provisioner():
    """The fork is made through jupyter_client's documented seam: a kernel provisioner, found by the
    entry point pyproject.toml registers and named by the forking manager's kernel spec."""
    from jupyter_client.provisioning import KernelProvisionerFactory
    km = ForkingKernelManager(kernel_name="python3")
    factory = KernelProvisionerFactory.instance()
    assert factory.is_provisioner_available(km.kernel_spec), "the entry point is registered"
    provisioner = factory.create_provisioner_instance("k", km.kernel_spec, parent=km)
    assert isinstance(provisioner, kernel_pool.ForkedKernelProvisioner)
    assert "_async_launch_kernel" not in vars(ForkingKernelManager), "no private launch override"


def test_the_zygote_refuses_to_run_in_the_graders_pid_namespace():
    """Its kill(-1) between kernels must only ever reach its own sandbox."""
    with pytest.raises(SystemExit, match="PID namespace"):
        zygote.prepare(os.readlink("/proc/self/ns/pid"))


@pytest.mark.parametrize("argv, forkable", [
    (["python", *LAUNCHER], True),
    ([sys.executable, *LAUNCHER], True),
    (["python", "-m", "ipykernel_launcher", "-f", "{connection_file}", "--debug"], False),
    (["/opt/other/python3", *LAUNCHER], False),
    (["R", "--slave", "-e", "IRkernel::main()", "--args", "{connection_file}"], False),
])
def test_only_this_pythons_ipykernel_is_forked(argv, forkable):
    assert kernel_pool.forkable(argv) is forkable


@pytest.mark.slow
@needs_bwrap
def test_a_forked_kernel_is_the_kernel_bwrap_would_start(tmp_path):
    folder = tmp_path / "autograded" / "alice" / "01_section"   # as nbgrader lays a submission out
    folder.mkdir(parents=True)
    (folder / "data.txt").write_text("the submission's own file")
    env = {**os.environ, "NBGRADER_EXECUTION": "autograde"}
    started, forked, forked_again = (last_json(run(OBSERVE, folder, manager=m, env=env)) for m in
                                     (sandbox.SandboxedKernelManager, ForkingKernelManager, ForkingKernelManager))
    assert forked.pop("preloaded") and not started.pop("preloaded"), "the second one really was forked"
    assert len({started.pop("seed"), forked.pop("seed"), forked_again["seed"]}) == 3, "torch's seed is fresh in each"
    assert forked == started
    assert forked["cwd"] == forked["env"]["PWD"] == str(folder), "both work in the notebook's own folder"
    assert forked["env"]["NBGRADER_EXECUTION"] == "autograde" and forked["files"] == ["data.txt"]
    assert forked["above"] == [["01_section"], ["alice"]], "no other submission is in sight"


@pytest.mark.slow
@needs_bwrap
def test_nothing_of_one_kernel_reaches_the_next(tmp_path, fresh_pool):
    first, second = tmp_path / "first-student", tmp_path / "second-student"
    first.mkdir()
    second.mkdir()
    (second / "own.txt").write_text("")
    before = last_json(run(LOOK_FOR_TRACES, second))
    left = run(LEAVE_TRACES, first)
    assert (first / "left").read_text() == "secret", "what a kernel writes in its folder reaches its notebook's folder"
    assert "shm id -1" not in left, "the kernel could create a System V segment (so the sweep is tested)"
    assert "mq -1 24" in left, "POSIX message queues cannot be created (EMFILE)"
    after = last_json(run(LOOK_FOR_TRACES, second))
    for seen in (before, after):  # the connection file is named after the kernel
        seen["tmp"].remove(f"kernel-{seen['me']}.json")
    assert after["tmp"] == before["tmp"] and "left" not in after["tmp"]
    assert after["shm"] == [] and after["sysv"] == [] and after["cwd"] == ["own.txt"]
    assert after["zygote"] == 1, "the zygote is the sandbox's init"
    assert after["processes"] == [1, after["me"]], "no process of the first kernel is left"
    assert len(fresh_pool.zygotes) == 1, "the three kernels came from the same zygote"


@pytest.mark.slow
@needs_bwrap
def test_a_kernel_cannot_read_or_steer_its_zygote(tmp_path):
    code = ("import os\nfor path in ('mem', 'environ', 'fd/0', 'maps'):\n"
            "    try:\n        open(f'/proc/{os.getppid()}/{path}', 'rb').read(1); print('READ', path)\n"
            "    except OSError as err:\n        print('DENIED', path, type(err).__name__)\n")
    out = run(code, tmp_path)
    assert out.count("DENIED") == 4 and "READ" not in out


@pytest.mark.slow
@needs_bwrap
def test_a_kernel_cannot_kill_or_stop_its_zygote(tmp_path, fresh_pool):
    """The zygote is the sandbox's init: signals from inside the sandbox do not reach it."""
    code = "import os, signal\nfor s in (signal.SIGTERM, signal.SIGSTOP, signal.SIGKILL):\n    os.kill(os.getppid(), s)"
    run(code, tmp_path)
    assert last_json(run(OBSERVE, tmp_path))["preloaded"], "the next kernel is forked again"
    assert len(fresh_pool.zygotes) == 1 and fresh_pool.zygotes[0].alive


@pytest.mark.slow
@needs_bwrap
def test_a_lost_zygote_is_replaced(tmp_path, fresh_pool):
    run("print('first')", tmp_path)
    first = fresh_pool.zygotes[0]
    first.proc.kill()
    first.proc.wait()
    assert last_json(run(OBSERVE, tmp_path))["preloaded"]
    assert first not in fresh_pool.zygotes and fresh_pool.zygotes[0].alive
    assert not os.path.exists(first.folder), "the lost zygote's copy of the submission is removed"


@pytest.mark.slow
@needs_bwrap
def test_where_no_zygote_starts_kernels_start_in_bwrap(tmp_path, fresh_pool, monkeypatch, caplog):
    broken = tmp_path / "zygote.py"
    broken.write_text("raise SystemExit('cannot start')")
    monkeypatch.setattr(kernel_pool, "ZYGOTE", broken)
    with caplog.at_level(logging.WARNING):
        observed = last_json(run(OBSERVE, tmp_path))
    assert not observed["preloaded"] and observed["files"] == ["zygote.py"]
    assert "no kernel zygote" in caplog.text and fresh_pool.zygotes == []
