"""Grading kernels forked from a zygote that already imported torch (autograder/zygote.py).

:class:`ForkingKernelManager` is the sandboxed kernel manager of autograder/sandbox.py whose
kernel is not a new process started by bwrap but a fork of a zygote that waits in its own bwrap
sandbox: ``_async_launch_kernel``, jupyter_client's seam for launching a kernel differently,
asks the zygote for a kernel and hands the provisioner a Popen-like :class:`ForkedKernel`, so
interrupts, restarts, timeouts and kills go through jupyter_client unchanged.

A zygote serves one kernel at a time; the pool keeps one per grading process (a second when two
kernels are asked for at once). Before each kernel the files of the notebook's folder are
copied into the sandbox's ``/submission`` (the kernel's working directory), and when it has
ended what it wrote there is copied back, so the notebook's folder ends up as if the kernel had
worked in it; then the zygote clears its sandbox (see zygote.py). A zygote that died, hangs or
could not start is replaced, and where none can start the kernel is started by bwrap as before.
"""
from __future__ import annotations

import atexit
import json
import logging
import os
import select
import shutil
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from pathlib import Path

from . import sandbox

ZYGOTE = Path(__file__).with_name("zygote.py")
ZYGOTE_INSIDE = "/run/grading/zygote.py"
SUBMISSION_INSIDE = "/submission"
READY_SECONDS = 120   # the zygote imports torch and matplotlib
REPLY_SECONDS = 15    # a kernel's sweep is milliseconds; a zygote stopped by a kernel never answers

log = logging.getLogger(__name__)


class ZygoteLost(Exception):
    """The zygote died, hangs or refused: its kernel (if any) died with its sandbox."""


class Zygote:
    """One zygote process in its own sandbox, and the pipes to talk to it."""

    def __init__(self, env: dict[str, str]):
        self.env = env
        self.folder = tempfile.mkdtemp(prefix="grading-submission-")
        self.busy = False   # handed out for a kernel that has not been cleared away yet
        self.cwd = ""   # the folder of the notebook whose kernel runs
        self.lock = threading.Lock()
        (ask_r, ask_w), (answer_r, answer_w) = os.pipe(), os.pipe()
        cmd = [sys.executable, ZYGOTE_INSIDE, str(ask_r), str(answer_w), SUBMISSION_INSIDE, host_pid_namespace()]
        argv = sandbox.bwrap_argv(cmd, (self.folder, SUBMISSION_INSIDE), env, read_only={str(ZYGOTE): ZYGOTE_INSIDE},
                                  init=True)
        # stdout to the grader's stderr: the kernels' raw output never mixes with a grading worker's answers
        self.proc = subprocess.Popen(argv, pass_fds=(ask_r, answer_w), stdin=subprocess.DEVNULL, stdout=2)
        os.close(ask_r)
        os.close(answer_w)
        self.requests, self.replies = os.fdopen(ask_w, "w"), os.fdopen(answer_r, "r")
        self._read(READY_SECONDS)

    def ask(self, **request) -> dict:
        with self.lock:
            try:
                self.requests.write(json.dumps(request) + "\n")
                self.requests.flush()
            except (BrokenPipeError, ValueError) as err:
                raise self._lost(f"cannot write: {err}") from err
            return self._read(REPLY_SECONDS)

    def _read(self, seconds: float) -> dict:
        ready, _, _ = select.select([self.replies], [], [], seconds)
        line = self.replies.readline() if ready else ""
        if not line:
            raise self._lost("no answer" if not ready else "ended")
        return json.loads(line)

    def _lost(self, why: str) -> ZygoteLost:
        self.close()
        return ZygoteLost(f"kernel zygote lost ({why})")

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def spawn(self, connection: Mapping, env: dict[str, str], cwd: str) -> ForkedKernel:
        """A kernel for the notebook in ``cwd``: its folder's files copied in, then forked."""
        self.cwd = cwd
        shutil.copytree(cwd, self.folder, symlinks=True, dirs_exist_ok=True)
        pid = self.ask(op="spawn", connection=dict(connection), env=env)["pid"]
        return ForkedKernel(self, pid)

    def end_kernel(self) -> None:
        """The kernel and all it started have ended: what it wrote goes back to the notebook's folder
        (as if it had worked there), then the sandbox is cleared for the next one."""
        copy_back(self.folder, self.cwd)
        self.ask(op="clear")
        self.busy = False

    def close(self) -> None:
        if self.alive:
            self.proc.kill()  # its PID namespace ends with it: every kernel in there too
            self.proc.wait()
        shutil.rmtree(self.folder, ignore_errors=True)


class ForkedKernel:
    """The parts of :class:`subprocess.Popen` that jupyter_client's LocalProvisioner uses."""

    stdin = stdout = stderr = None

    def __init__(self, zygote: Zygote, pid: int):
        self.zygote, self.pid = zygote, pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                self.returncode = self.zygote.ask(op="poll", pid=self.pid)["returncode"]
                if self.returncode is not None:
                    self.zygote.end_kernel()
            except ZygoteLost:  # its sandbox is gone, and the kernel with it
                self.returncode = -9 if self.returncode is None else self.returncode
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired("forked kernel", timeout)
            time.sleep(0.02)
        return self.returncode

    def send_signal(self, signum: int) -> None:
        if self.poll() is None:
            try:
                self.zygote.ask(op="signal", pid=self.pid, signum=int(signum))
            except ZygoteLost:
                pass

    def kill(self) -> None:
        self.send_signal(9)

    def terminate(self) -> None:
        self.send_signal(15)


class ZygotePool:
    """Zygotes of this process, by sandbox environment (it shapes what they imported)."""

    def __init__(self):
        self.zygotes: list[Zygote] = []
        self.broken: set[tuple] = set()   # environments where no zygote could start
        self.lock = threading.Lock()

    def kernel(self, connection: Mapping, env: dict[str, str], cwd: str) -> ForkedKernel | None:
        """A forked kernel, or None where no zygote can start (the caller starts one with bwrap)."""
        for _ in range(2):  # a zygote may be lost between its last kernel and this one
            zygote = self._idle(env)
            if zygote is None:
                return None
            try:
                return zygote.spawn(connection, env, cwd)
            except ZygoteLost as lost:
                log.warning("%s: starting a new one", lost)
            except BaseException:
                zygote.busy = False
                raise
        return None

    def _idle(self, env: dict[str, str]) -> Zygote | None:
        key = tuple(sorted(env.items()))
        with self.lock:
            for lost in [z for z in self.zygotes if not z.alive]:
                lost.close()  # its folder
                self.zygotes.remove(lost)
            for zygote in self.zygotes:
                if zygote.env == env and not zygote.busy:
                    zygote.busy = True
                    return zygote
            if key in self.broken:
                return None
            try:
                zygote = Zygote(env)
            except (ZygoteLost, OSError) as err:
                log.warning("no kernel zygote (%s): kernels start one by one in bwrap", err)
                self.broken.add(key)
                return None
            zygote.busy = True
            self.zygotes.append(zygote)
            return zygote

    def close(self) -> None:
        for zygote in self.zygotes:
            zygote.close()
        self.zygotes = []


def copy_back(folder: str, cwd: str) -> None:
    """The regular files, folders and links in ``folder`` that are new or changed, into ``cwd``."""
    def changed_file(src: str, dst: str) -> None:
        source = os.lstat(src)
        target = os.stat(dst) if os.path.lexists(dst) and not os.path.islink(dst) else None
        if stat.S_ISREG(source.st_mode) and (target is None or (target.st_size, target.st_mtime_ns) !=
                                             (source.st_size, source.st_mtime_ns)):
            shutil.copy2(src, dst)

    try:
        shutil.copytree(folder, cwd, symlinks=True, dirs_exist_ok=True, copy_function=changed_file)
    except (shutil.Error, OSError) as err:
        log.warning("not every file the kernel wrote was copied back: %s", err)


POOL = ZygotePool()
atexit.register(POOL.close)


def host_pid_namespace() -> str:
    return os.readlink("/proc/self/ns/pid")


def forkable(argv: list[str]) -> bool:
    """Whether the kernel spec starts this very Python's ipykernel, which a zygote can stand in for
    (jupyter_client runs a spec's bare ``python`` as the Python it runs in)."""
    bare = {"python", f"python{sys.version_info[0]}", "python%i.%i" % sys.version_info[:2]}
    python = sys.executable if argv and argv[0] in bare else shutil.which(argv[0]) if argv else None
    return (python is not None and os.path.realpath(python) == os.path.realpath(sys.executable)
            and argv[1:] == ["-m", "ipykernel_launcher", "-f", "{connection_file}"])


class ForkingKernelManager(sandbox.SandboxedKernelManager):
    """A sandboxed kernel manager whose kernels are forked from a zygote (module docstring)."""

    async def _async_launch_kernel(self, kernel_cmd: list[str], **kw) -> None:
        provisioner = self.provisioner
        process = None
        if forkable(self.kernel_spec.argv):
            connection = {k: v.decode() if isinstance(v, bytes) else v for k, v in provisioner.connection_info.items()}
            process = POOL.kernel(connection, sandbox.sandbox_env(self.env), self.cwd)
        if process is None:
            return await super()._async_launch_kernel(kernel_cmd, **kw)
        provisioner.process, provisioner.pid, provisioner.pgid = process, process.pid, None
        self._reconcile_connection_info(provisioner.connection_info)
