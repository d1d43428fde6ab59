"""Grading kernels started by the course's provisioner (autograder/provisioner.py): forked from a
zygote (autograder/zygote_pool.py, autograder/zygote.py) they are the kernels bwrap would start, nothing
of one kernel reaches the next one forked from the same zygote, and every kernel imports the course
package from the layout's folder."""
from __future__ import annotations

import asyncio
import importlib.util
import json
import logging
import os
import secrets
import struct
import sys
from pathlib import Path

import pytest
from jupyter_client.manager import AsyncKernelManager
from traitlets.config import Config

from autograder import zygote_pool, zygote
from autograder.config import configure
from autograder.edition import for_grading
from autograder.zygote_pool import ZygotePool
from autograder.preprocessors import ResilientExecute
from autograder.provisioner import SandboxProvisioner, grading_kernels

needs_bwrap = pytest.mark.needs("bwrap")
LAUNCHER = ["-m", "ipykernel_launcher", "-f", "{connection_file}"]

# What a notebook could observe of its kernel, before importing anything itself (nbclient tells a
# kernel nothing of its notebook's path but the working directory: no JPY_SESSION_NAME, no __session__).
OBSERVE = """
import json, os, sys
preloaded = 'torch' in sys.modules
import ipywidgets, matplotlib, torch
print(json.dumps({"env": dict(os.environ), "cwd": os.getcwd(), "path": sys.path, "files": sorted(os.listdir('.')),
                  "comm_targets": sorted(get_ipython().kernel.comm_manager.targets),
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


def grading_kernel_manager(**provisioner) -> AsyncKernelManager:
    """jupyter_client's own kernel manager, as ResilientExecute configures it (``provisioner``: the
    provisioner's traits; by default, forked in the sandbox)."""
    config = Config({"SandboxProvisioner": provisioner})
    return grading_kernels(AsyncKernelManager(kernel_name="python3", config=config))


async def _run(code: str, cwd: str, env: dict | None = None, **provisioner) -> str:
    """Start a grading kernel in ``cwd``, run ``code``, shut it down; its stdout."""
    km = grading_kernel_manager(**provisioner)
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
    monkeypatch.setattr(zygote_pool, "POOL", pool)
    yield pool
    pool.close()


def test_grading_kernels_come_from_the_registered_provisioner_configured_by_the_course():
    """The sandbox is owned by one class on jupyter_client's documented seam: a kernel provisioner, found by
    the entry point pyproject.toml registers, its traits from the course's configuration (through its
    kernel manager's), under jupyter_client's own kernel manager; nothing of ours overrides a private method."""
    from jupyter_client.provisioning import KernelProvisionerFactory
    config = Config()
    configure(config)
    config.SandboxProvisioner.update(fork=False, course_package="/edition/utils")
    km = ResilientExecute(config=config, kernel_name="python3").create_kernel_manager()
    assert type(km) is AsyncKernelManager
    factory = KernelProvisionerFactory.instance()
    assert factory.is_provisioner_available(km.kernel_spec), "the entry point is registered"
    provisioner = factory.create_provisioner_instance("k", km.kernel_spec, parent=km)
    assert isinstance(provisioner, SandboxProvisioner)
    assert (provisioner.sandbox, provisioner.fork, provisioner.course_package) == (True, False, "/edition/utils")
    assert km.kernel_spec.interrupt_mode == "message", "a SIGINT from outside would stop bwrap"
    private = [f"{cls.__name__}.{name}" for cls in SandboxProvisioner.mro() if cls.__module__.startswith("autograder")
               for name in vars(cls) if name.startswith("_async")]
    assert private == []


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
    assert zygote_pool.forkable(argv) is forkable


@pytest.mark.slow
@needs_bwrap
def test_a_forked_kernel_is_the_kernel_bwrap_would_start(tmp_path):
    folder = tmp_path / "autograded" / "alice" / "01_section"   # as nbgrader lays a submission out
    folder.mkdir(parents=True)
    (folder / "data.txt").write_text("the submission's own file")
    env = {**os.environ, "NBGRADER_EXECUTION": "autograde"}
    started, forked, forked_again = (last_json(run(OBSERVE, folder, env=env, fork=fork)) for fork in
                                     (False, True, True))
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
    monkeypatch.setattr(zygote_pool, "ZYGOTE", broken)
    with caplog.at_level(logging.WARNING):
        observed = last_json(run(OBSERVE, tmp_path))
    assert not observed["preloaded"] and observed["files"] == ["zygote.py"]
    assert "no kernel zygote" in caplog.text and fresh_pool.zygotes == []


def running(token: str) -> list[int]:
    """The processes of this machine (sandboxes included) whose command line holds ``token``."""
    found = []
    for pid in (p for p in os.listdir("/proc") if p.isdigit()):
        try:
            if token.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                found.append(int(pid))
        except OSError:
            continue
    return found


@pytest.mark.slow
@needs_bwrap
@pytest.mark.usefixtures("fresh_pool")   # its zygote ends with the test, whatever happens
def test_polling_a_forked_kernel_only_reports_and_its_cleanup_ends_all_it_started(tmp_path):
    """The zygote's poll reports the kernel's end and does nothing else; the provisioner's cleanup stops
    every process of the sandbox (here a detached one the kernel left) before its files are copied back."""
    token = secrets.token_hex(8)
    leave = (f"import os, subprocess, sys\nsubprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)', "
             f"'{token}'], start_new_session=True)\nos._exit(3)")

    async def scenario() -> tuple[list, list, list]:
        km = grading_kernel_manager()
        await km.start_kernel(cwd=str(tmp_path), env=dict(os.environ))
        kc = km.client()
        kc.start_channels()
        try:
            await kc.wait_for_ready(timeout=120)
            kc.execute(leave)
            while await km.is_alive():
                await asyncio.sleep(0.05)
            polled = [await km.provisioner.poll() for _ in range(3)]
            left = running(token)
        finally:
            kc.stop_channels()
            await km.cleanup_resources()
        return polled, left, running(token)

    polled, left, after_cleanup = asyncio.run(scenario())
    assert polled == [3, 3, 3], "poll reports the kernel's exit status"
    assert len(left) == 1, "polling stopped nothing: the detached process still runs"
    assert after_cleanup == [], "the cleanup ended it"


def edition(tmp_path: Path) -> Path:
    """A course package folder of its own (a class edition's, say), its ``utils`` saying where it is from."""
    package = tmp_path / "edition" / "utils"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("FROM = 'the class edition'\n")
    return package


@pytest.mark.slow
@pytest.mark.parametrize("provisioner", [
    pytest.param({"fork": True}, marks=needs_bwrap, id="forked"),
    pytest.param({"fork": False}, marks=needs_bwrap, id="bwrap"),
    pytest.param({"sandbox": False}, id="unsandboxed"),
])
@pytest.mark.usefixtures("fresh_pool")
def test_the_kernel_imports_the_course_package_from_the_layouts_folder(tmp_path, provisioner):
    package = edition(tmp_path)
    work = tmp_path / "work"
    work.mkdir()
    out = run("import utils\nprint(utils.FROM, utils.__file__)", work, course_package=str(package), **provisioner)
    assert out.strip() == f"the class edition {package / '__init__.py'}"


def has_bytecode(source: Path) -> bool:
    """Whether Python finds bytecode of ``source`` valid: its header (PEP 552) has this Python's magic
    number, flags 0 (checked by timestamp) and the source's modification time and size."""
    compiled = Path(importlib.util.cache_from_source(str(source)))
    info = source.stat()
    expected = importlib.util.MAGIC_NUMBER + struct.pack("<3I", 0, int(info.st_mtime) & 0xFFFFFFFF,
                                                         info.st_size & 0xFFFFFFFF)
    return compiled.exists() and compiled.read_bytes()[:16] == expected


@pytest.mark.slow
def test_the_grading_edition_holds_its_bytecode(tmp_path):
    """The sandbox binds the grading edition read-only: without its bytecode, every kernel compiles it anew."""
    package = Path(for_grading("02_scaling_and_softmax", tmp_path / "cache"))
    sources = sorted(package.rglob("*.py"))
    assert len(sources) > 20
    assert [str(s.relative_to(package)) for s in sources if not has_bytecode(s)] == []
