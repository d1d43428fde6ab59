"""Grading kernels forked from a zygote that already imported torch (autograder/zygote.py).

:class:`ForkingKernelManager` is the sandboxed kernel manager of autograder/sandbox.py whose
kernel is not a new process started by bwrap but a fork of a zygote that waits in its own bwrap
sandbox. The fork is made by :class:`ForkedKernelProvisioner`, a jupyter_client kernel provisioner
(the documented seam for launching kernels another way, registered as an entry point in
pyproject.toml): it asks the zygote for a kernel and keeps a Popen-like :class:`ForkedKernel`, so
interrupts, restarts, timeouts and kills go through jupyter_client unchanged, and its ``cleanup``
hands the zygote back once the kernel is gone.

A zygote serves one kernel at a time; the pool keeps one per grading process and anchor (a
second when two kernels are asked for at once). Its sandbox has a folder of its own bound at the
anchor, the folder two above the notebook's (:func:`anchor_of`; nbgrader's autograded/): before
each kernel the notebook's folder is copied to the same path in there, and the kernel works at its
notebook's real path, as one started by bwrap does; when it has ended, what it wrote there is
copied back, so the notebook's folder ends up as if the kernel had worked in it; then the zygote
clears its sandbox (see zygote.py). Both copies take regular files and folders only and follow no
link (:func:`copy_tree`): the kernel may have planted links to anything the grader can write. A
zygote that died, hangs or could not start is replaced, and where none can start the kernel is
started by bwrap as before.
"""
from __future__ import annotations

import atexit
import contextlib
import json
import logging
import os
import secrets
import shutil
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from multiprocessing.connection import Connection
from pathlib import Path

from jupyter_client.provisioning import LocalProvisioner

from . import sandbox

ZYGOTE = Path(__file__).with_name("zygote.py")
ZYGOTE_INSIDE = "/run/grading/zygote.py"
READY_SECONDS = 120   # the zygote imports torch and matplotlib
REPLY_SECONDS = 15    # a kernel's sweep is milliseconds; a zygote stopped by a kernel never answers

log = logging.getLogger(__name__)


class ZygoteLost(Exception):
    """The zygote died, hangs or refused: its kernel (if any) died with its sandbox."""


class ZygoteHandle:
    """The grader's side of one zygote (autograder/zygote.py) in its own sandbox: the process, and the
    connections to talk to it (one JSON object per message, framed by multiprocessing.connection)."""

    def __init__(self, env: dict[str, str], anchor: str):
        self.env, self.anchor = env, anchor   # anchor: where the sandbox has ``folder`` (see anchor_of)
        self.folder = tempfile.mkdtemp(prefix="grading-submission-")
        self.busy = False   # handed out for a kernel that has not been cleared away yet
        self.cwd = ""       # the folder of the notebook whose kernel runs
        self.copy = ""      # its copy in ``folder``
        self.lock = threading.Lock()
        (ask_r, ask_w), (answer_r, answer_w) = os.pipe(), os.pipe()
        cmd = [sys.executable, ZYGOTE_INSIDE, str(ask_r), str(answer_w), anchor, host_pid_namespace()]
        argv = sandbox.bwrap_argv(cmd, (self.folder, anchor), env, read_only={str(ZYGOTE): ZYGOTE_INSIDE},
                                  init=True, sockets=sandbox.socket_root())
        # stdout to the grader's stderr: the kernels' raw output never mixes with a grading worker's answers
        self.proc = subprocess.Popen(argv, pass_fds=(ask_r, answer_w), stdin=subprocess.DEVNULL, stdout=2)
        os.close(ask_r)
        os.close(answer_w)
        self.requests, self.replies = Connection(ask_w, readable=False), Connection(answer_r, writable=False)
        self._read(READY_SECONDS)

    def ask(self, **request) -> dict:
        with self.lock:
            try:
                self.requests.send_bytes(json.dumps(request).encode())
            except OSError as err:
                raise self._lost(f"cannot write: {err}") from err
            return self._read(REPLY_SECONDS)

    def _read(self, seconds: float) -> dict:
        try:
            if not self.replies.poll(seconds):
                raise self._lost("no answer")
            return json.loads(self.replies.recv_bytes())
        except (EOFError, OSError) as err:
            raise self._lost("ended") from err

    def _lost(self, why: str) -> ZygoteLost:
        self.close()
        return ZygoteLost(f"kernel zygote lost ({why})")

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def spawn(self, connection: Mapping, env: dict[str, str], cwd: str) -> ForkedKernel:
        """A kernel for the notebook in ``cwd``: its folder's files copied to where the sandbox has
        ``cwd``, then forked to work there."""
        self.cwd, self.copy = cwd, os.path.join(self.folder, os.path.relpath(cwd, self.anchor))
        os.makedirs(self.copy, exist_ok=True)
        copy_tree(cwd, self.copy)
        pid = self.ask(op="spawn", connection=dict(connection), env=env, cwd=cwd)["pid"]
        return ForkedKernel(self, pid)

    def end_kernel(self) -> None:
        """The kernel and all it started have ended: what it wrote goes back to the notebook's folder
        (as if it had worked there), then the sandbox is cleared for the next one."""
        copy_tree(self.copy, self.cwd)
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

    def __init__(self, zygote: ZygoteHandle, pid: int):
        self.zygote, self.pid = zygote, pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                self.returncode = self.zygote.ask(op="poll", pid=self.pid)["returncode"]
            except ZygoteLost:  # its sandbox is gone, and the kernel with it
                self.returncode = -9
        return self.returncode

    def end(self) -> None:
        """Once the kernel has ended (the provisioner's cleanup): the zygote copies back and clears."""
        if self.zygote is not None and self.poll() is not None:
            zygote, self.zygote = self.zygote, None
            if zygote.alive:
                try:
                    zygote.end_kernel()
                except ZygoteLost:
                    pass

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired("forked kernel", timeout)
            time.sleep(0.02)
        return self.returncode

    def send_signal(self, signum: int) -> None:
        if self.zygote is not None and self.poll() is None:
            try:
                self.zygote.ask(op="signal", pid=self.pid, signum=int(signum))
            except ZygoteLost:
                pass

    def kill(self) -> None:
        self.send_signal(9)

    def terminate(self) -> None:
        self.send_signal(15)


class ZygotePool:
    """Zygotes of this process, by sandbox environment (it shapes what they imported) and anchor."""

    def __init__(self):
        self.zygotes: list[ZygoteHandle] = []
        self.broken: set[tuple] = set()   # environments and anchors where no zygote could start
        self.lock = threading.Lock()

    def kernel(self, connection: Mapping, env: dict[str, str], cwd: str) -> ForkedKernel | None:
        """A forked kernel, or None where no zygote can start (the caller starts one with bwrap)."""
        for _ in range(2):  # a zygote may be lost between its last kernel and this one
            zygote = self._idle(env, anchor_of(cwd))
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

    def _idle(self, env: dict[str, str], anchor: str) -> ZygoteHandle | None:
        key = (tuple(sorted(env.items())), anchor)
        with self.lock:
            for lost in [z for z in self.zygotes if not z.alive]:
                lost.close()  # its folder
                self.zygotes.remove(lost)
            for zygote in self.zygotes:
                if (zygote.env, zygote.anchor) == (env, anchor) and not zygote.busy:
                    zygote.busy = True
                    return zygote
            if key in self.broken:
                return None
            try:
                zygote = ZygoteHandle(env, anchor)
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


def anchor_of(cwd: str) -> str:
    """Where a zygote's sandbox has its copy of the submissions, so that a kernel for the notebook in
    ``cwd`` works at that very path, as one started by bwrap: the folder two above the notebook's
    (nbgrader's autograded/ for autograded/<student>/<assignment>/, so one zygote serves a whole
    class), or the notebook's own folder where that one holds something the sandbox binds itself."""
    anchor = os.path.dirname(os.path.dirname(cwd))
    bound = [*sandbox.python_paths(), *sandbox.SYSTEM_PATHS, *sandbox.MERGED_USR_LINKS, "/tmp", "/dev", "/proc",
             os.path.dirname(ZYGOTE_INSIDE), sandbox.socket_root()]
    holds_bound = any(os.path.commonpath([anchor, path]) == anchor for path in bound)
    return cwd if holds_bound else anchor


def copy_tree(source: str, target: str) -> None:
    """Copy the folders and the new or changed regular files of ``source`` into ``target``
    (keeping modes and times); log a warning naming what it left out: links, FIFOs, sockets and
    devices, and what a non-folder or a link in ``target`` stands in the way of.

    No link is followed on either side (either side may be a kernel's work): each folder is
    opened beneath its parent with ``O_NOFOLLOW``, and each file is written anew under a name of
    its own and renamed over its destination, so it never writes into a file that is there.
    """
    left_out: list[str] = []
    try:
        with opened_folder(source) as src, opened_folder(target) as dst:
            _copy_folder(src, dst, "", left_out)
    except OSError:
        left_out.append(".")
    if left_out:
        log.warning("not copied from %s to %s (only regular files and folders are, never through a link): %s",
                    source, target, ", ".join(left_out))


def _copy_folder(src: int, dst: int, where: str, left_out: list[str]) -> None:
    with os.scandir(src) as entries:
        entries = list(entries)
    for entry in entries:
        path = os.path.join(where, entry.name)
        try:
            mode = entry.stat(follow_symlinks=False).st_mode
            if stat.S_ISDIR(mode):
                with contextlib.suppress(FileExistsError):
                    os.mkdir(entry.name, stat.S_IMODE(mode) | stat.S_IRWXU, dir_fd=dst)
                with opened_folder(entry.name, src) as inner_src, opened_folder(entry.name, dst) as inner_dst:
                    _copy_folder(inner_src, inner_dst, path, left_out)
            elif not stat.S_ISREG(mode):
                left_out.append(path)
            elif _differs(entry.stat(follow_symlinks=False), entry.name, dst):
                copy_file(entry.name, src, dst)
        except OSError:
            left_out.append(path)


@contextlib.contextmanager
def opened_folder(path: str, parent: int | None = None):
    """A folder's descriptor; ``path`` must be a folder, not a link to one."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=parent)
    try:
        yield fd
    finally:
        os.close(fd)


def _differs(source: os.stat_result, name: str, dst: int) -> bool:
    try:
        target = os.stat(name, dir_fd=dst, follow_symlinks=False)
    except FileNotFoundError:
        return True
    return not stat.S_ISREG(target.st_mode) or (target.st_size, target.st_mtime_ns) != (source.st_size,
                                                                                      source.st_mtime_ns)


def copy_file(name: str, src: int, dst: int) -> None:
    """``name`` from folder ``src`` to folder ``dst``: written as a new file, renamed into place."""
    partial = f".copying-{secrets.token_hex(8)}"
    with os.fdopen(os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=src), "rb") as reader:
        info = os.fstat(reader.fileno())
        if not stat.S_ISREG(info.st_mode):  # swapped since it was listed
            raise OSError(f"{name} is no regular file")
        with os.fdopen(os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600,
                               dir_fd=dst), "wb") as writer:
            shutil.copyfileobj(reader, writer)
            os.fchmod(writer.fileno(), stat.S_IMODE(info.st_mode))
            os.utime(writer.fileno(), ns=(info.st_atime_ns, info.st_mtime_ns))
    try:
        os.rename(partial, name, src_dir_fd=dst, dst_dir_fd=dst)
    except OSError:
        os.unlink(partial, dir_fd=dst)
        raise


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


class ForkedKernelProvisioner(LocalProvisioner):
    """jupyter_client's local provisioner, whose kernel is forked from a zygote where this Python's
    ipykernel is asked for and a zygote can start (else the bwrap process it would launch anyway)."""

    forked: ForkedKernel | None = None

    async def launch_kernel(self, cmd: list[str], **kwargs) -> dict:
        manager = self.parent
        if forkable(manager.kernel_spec.argv):
            connection = {k: v.decode() if isinstance(v, bytes) else v for k, v in self.connection_info.items()}
            self.forked = POOL.kernel(connection, sandbox.sandbox_env(manager.env), manager.cwd)
        if self.forked is None:
            return await super().launch_kernel(cmd, **kwargs)
        self.process, self.pid, self.pgid = self.forked, self.forked.pid, None
        return self.connection_info

    async def cleanup(self, restart: bool = False) -> None:
        await super().cleanup(restart)
        if self.forked is not None:
            self.forked.end()
            self.forked = None


PROVISIONER = "attention-course-forked"   # its entry point (pyproject.toml)


class ForkingKernelManager(sandbox.SandboxedKernelManager):
    """A sandboxed kernel manager whose kernels come from :class:`ForkedKernelProvisioner`."""

    @property
    def kernel_spec(self):
        spec = super().kernel_spec
        if spec is not None:
            spec.metadata["kernel_provisioner"] = {"provisioner_name": PROVISIONER}
        return spec
