"""Kernel zygotes for grading: one sandboxed Python per grading process that imported torch and
matplotlib once, from which each kernel is forked (autograder/zygote.py runs in the sandbox; this is
the grader's side, used by autograder/provisioner.py).

A zygote's sandbox is the one a kernel started by bwrap would get (autograder/sandbox.py's
:class:`SandboxLayout`), but for its working folder: a folder of this process bound where the sandbox has
the notebooks' folders (``SandboxLayout.anchor_of``), into which each notebook's folder is copied before
its kernel is forked, and from which what the kernel wrote is copied back once every process of the
sandbox has been stopped (the zygote's sweep), before the zygote clears its sandbox for the next
kernel. Both copies take regular files and folders only and follow no link (:func:`tree.copy_tree`): the
kernel may have planted links to anything the grader can write. A zygote that died, hangs or could
not start is dropped from the pool; where none can start, the provisioner starts kernels with bwrap.
"""
from __future__ import annotations

import atexit
import contextlib
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Mapping
from multiprocessing.connection import Connection
from pathlib import Path

from .sandbox import SandboxLayout
from .tree import copy_tree

ZYGOTE = Path(__file__).with_name("zygote.py")
READY_SECONDS = 120   # the zygote imports torch and matplotlib
REPLY_SECONDS = 15    # a kernel's sweep is milliseconds; a zygote stopped by a kernel never answers

log = logging.getLogger(__name__)


class ZygoteLost(Exception):
    """The zygote died, hangs or refused: its kernel (if any) died with its sandbox."""


class ZygoteHandle:
    """The grader's side of one zygote in its own sandbox: the process, and the connections to talk
    to it (one JSON object per message, framed by multiprocessing.connection)."""

    def __init__(self, env: dict[str, str], anchor: str, layout: SandboxLayout, memory_mb: int, max_processes: int):
        self.key = (tuple(sorted(env.items())), anchor, layout, memory_mb, max_processes)
        self.anchor = anchor
        self.folder = tempfile.mkdtemp(prefix="grading-submission-")   # bound at ``anchor``
        self.busy = False   # handed out for a kernel that has not been cleared away yet
        self.cwd = ""       # the folder of the notebook whose kernel runs
        self.copy = ""      # its copy in ``folder``
        self.lock = threading.Lock()
        (ask_r, ask_w), (answer_r, answer_w) = os.pipe(), os.pipe()
        cmd = [sys.executable, layout.zygote, str(ask_r), str(answer_w), anchor, host_pid_namespace(),
               *layout.temporary]
        argv = layout.bwrap(cmd, (self.folder, anchor), env, memory_mb=memory_mb, max_processes=max_processes,
                            sockets=layout.sockets, read_only={str(ZYGOTE): layout.zygote}, init=True)
        # no output stream: its kernels inherit them, and what they print raw must reach no log
        self.proc = subprocess.Popen(argv, pass_fds=(ask_r, answer_w), stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
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
            answer = json.loads(self.replies.recv_bytes())
        except (EOFError, OSError) as err:
            raise self._lost("ended") from err
        if "error" in answer:   # it has stopped serving
            raise self._lost(answer["error"])
        return answer

    def _lost(self, why: str) -> ZygoteLost:
        self.close()
        return ZygoteLost(f"kernel zygote lost ({why})")

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def spawn(self, connection: Mapping, env: dict[str, str], cwd: str, arguments: list[str]) -> int:
        """A kernel for the notebook in ``cwd`` (``arguments``: the kernel spec's extra ones), its pid: its
        folder's files copied to where the sandbox has ``cwd``, then forked to work there."""
        self.cwd, self.copy = cwd, os.path.join(self.folder, os.path.relpath(cwd, self.anchor))
        os.makedirs(self.copy, exist_ok=True)
        copy_tree(cwd, self.copy)
        return self.ask(op="spawn", connection=dict(connection), env=env, cwd=cwd, arguments=arguments)["pid"]

    def poll(self, pid: int) -> int | None:
        """The forked kernel's return code, None while it runs (-SIGKILL once its sandbox is gone)."""
        try:
            return self.ask(op="poll", pid=pid)["returncode"]
        except ZygoteLost:   # its sandbox is gone, and the kernel with it
            return -signal.SIGKILL

    def send_signal(self, pid: int, signum: int) -> None:
        """Signal the forked kernel and what it started; answered once a killed kernel is gone."""
        with contextlib.suppress(ZygoteLost):
            self.ask(op="signal", pid=pid, signum=int(signum))

    def end_kernel(self) -> None:
        """Stop every process of the sandbox (the kernel too, if it still runs), copy what it wrote back
        to the notebook's folder (as if it had worked there), clear the sandbox for the next kernel."""
        try:
            self.ask(op="sweep")
            copy_tree(self.copy, self.cwd)
            self.ask(op="clear")
        except ZygoteLost as lost:   # its sandbox is gone, and every process in there with it
            log.warning("%s: what the kernel wrote is not copied back", lost)
        self.busy = False

    def close(self) -> None:
        if self.alive:
            self.proc.kill()  # its PID namespace ends with it: every kernel in there too
            self.proc.wait()
        shutil.rmtree(self.folder, ignore_errors=True)


class ZygotePool:
    """Zygotes of this process, each for one sandbox environment (it shapes what they imported),
    anchor, layout and limits."""

    def __init__(self):
        self.zygotes: list[ZygoteHandle] = []
        self.broken: set[tuple] = set()   # sandboxes where no zygote could start
        self.lock = threading.Lock()

    def acquire(self, env: dict[str, str], anchor: str, layout: SandboxLayout, memory_mb: int,
                max_processes: int) -> ZygoteHandle | None:
        """An idle zygote for such a sandbox, started if there is none; None where none can start (the
        caller starts its kernel with bwrap). It is the caller's until its ``end_kernel``."""
        key = (tuple(sorted(env.items())), anchor, layout, memory_mb, max_processes)
        with self.lock:
            for lost in [z for z in self.zygotes if not z.alive]:
                lost.close()  # its folder
                self.zygotes.remove(lost)
            zygote = next((z for z in self.zygotes if z.key == key and not z.busy), None)
            if zygote is None and key not in self.broken:
                try:
                    zygote = ZygoteHandle(env, anchor, layout, memory_mb, max_processes)
                    self.zygotes.append(zygote)
                except (ZygoteLost, OSError) as err:
                    log.warning("no kernel zygote (%s): kernels start one by one in bwrap", err)
                    self.broken.add(key)
            if zygote is not None:
                zygote.busy = True
            return zygote

    def close(self) -> None:
        for zygote in self.zygotes:
            zygote.close()
        self.zygotes = []


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
