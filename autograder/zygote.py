"""The kernel zygote: one Python in the grading sandbox that imports the heavy libraries once and
forks a fresh kernel for each submission (started and driven by autograder/zygote_pool.py).

A graded submission is CPU-bound and most of its cost used to be the same for every student:
starting Python and ipykernel and importing torch and matplotlib (about 2.5 s of a 5 s
submission on one core). The zygote pays it once per grading process; each kernel is a fork of it.

Between two kernels nothing of the first survives: once the grader is done with a kernel, the
zygote kills every other process of its sandbox (``kill(-1)`` in its own PID namespace reaches all
of them at once, so nothing can fork away from it) and removes the System V IPC objects; once the
grader has copied the submission folder back, it empties the only writable places (the layout's
temporary folders, ``/tmp`` and ``/dev/shm``, and the folder of submissions), checks that they are
empty and puts back the little its own start left there (matplotlib's configuration folder), so
every kernel finds what a fresh one would. POSIX message queues cannot be created at all
(RLIMIT_MSGQUEUE = 0). If anything survives, the zygote says so and exits, and the pool starts a
new sandbox. The zygote is the sandbox's init (its kernels cannot kill or stop it) and not dumpable
(they cannot read or trace it). It runs with the standard library only until it preloads; it writes
nothing to its output streams (its kernels share them).

Protocol: one JSON object per message of a :class:`multiprocessing.connection.Connection` (its
framing: no message is ever half read); the zygote reads requests on fd ``requests`` and answers
on fd ``replies`` (both given on the command line, closed in every kernel); the command line then
names the folder of submissions, the grader's PID namespace and the temporary folders to clear.

* ``{"op": "spawn", "connection": {...}, "env": {...}, "cwd": path, "arguments": [...]}`` → ``{"pid": n}``:
  a kernel working in ``cwd``, which lies in the folder of submissions (the grader has copied the
  notebook's folder there), with the kernel spec's extra ``arguments``
* ``{"op": "poll", "pid": n}`` → ``{"returncode": null | int}`` (negative: killed by a signal)
* ``{"op": "signal", "pid": n, "signum": s}`` → ``{}``
* ``{"op": "sweep"}`` → ``{}``: every process but the zygote killed (the kernel too, if it still runs)
* ``{"op": "clear"}`` → ``{}``: the writable folders emptied (after the grader copied the submission
  folder back), so the next kernel may be forked
* any request → ``{"error": why}``: something survived; the zygote exits
"""
from __future__ import annotations

import contextlib
import ctypes
import importlib
import io
import json
import os
import random
import resource
import shutil
import signal
import stat
import sys
import time
from multiprocessing.connection import Connection

# What every kernel of the course imports (a kernel's start imports the last three). The course's own
# package installs a hook into the shell when imported, so each kernel imports it; ipywidgets registers
# its comm targets with the shell when imported there, so each kernel loads it as an extension instead,
# which registers them (SHELL_EXTENSIONS).
KERNEL_IMPORTS = ("torch", "numpy", "matplotlib", "matplotlib.pyplot", "IPython", "ipykernel.kernelapp",
                  "ipykernel.ipkernel", "ipykernel.debugger", "ipywidgets", "sqlite3", "pdb", "psutil")
SHELL_EXTENSIONS = ("ipywidgets",)
# ipykernel sets this before any user code runs; matplotlib reads it when it is imported.
INLINE_BACKEND = "module://matplotlib_inline.backend_inline"
SYSV_IPC = {"shm": "shmctl", "msg": "msgctl", "sem": "semctl"}
PR_SET_DUMPABLE = 4
IPC_RMID = 0
SWEEP_SECONDS = 5   # how long killed processes may take to be gone

libc = ctypes.CDLL(None, use_errno=True)


class Dirty(Exception):
    """Something of the last kernel survived the sweep: this sandbox must not be used again."""


# --- between kernels ------------------------------------------------------------------------------

def stop_everything() -> None:
    """Kill every other process of the sandbox and the System V IPC objects they made."""
    try:
        os.kill(-1, signal.SIGKILL)  # from init: every process of this PID namespace but init
    except ProcessLookupError:
        pass
    deadline = time.monotonic() + SWEEP_SECONDS
    while others():
        reap()
        if time.monotonic() > deadline:
            raise Dirty(f"processes survive: {others()}")
        time.sleep(0.002)
    remove_sysv_ipc()


def others() -> list[int]:
    return [int(p) for p in os.listdir("/proc") if p.isdigit() and int(p) != os.getpid()]


def reap() -> dict[int, int]:
    """Wait for every child that has ended (orphans are the zygote's, as init); pid -> return code."""
    ended = {}
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return ended
        if not pid:
            return ended
        ended[pid] = os.waitstatus_to_exitcode(status)


def remove_sysv_ipc() -> None:
    for kind, control in SYSV_IPC.items():
        with open(f"/proc/sysvipc/{kind}", encoding="ascii") as table:
            ids = [int(line.split()[1]) for line in list(table)[1:]]
        for ipc_id in ids:
            args = (ipc_id, 0, IPC_RMID) if kind == "sem" else (ipc_id, IPC_RMID, None)
            getattr(libc, control)(*args)
        with open(f"/proc/sysvipc/{kind}", encoding="ascii") as table:
            if len(list(table)) > 1:
                raise Dirty(f"System V {kind} objects survive")


def mount_points() -> set[str]:
    with open("/proc/self/mountinfo", encoding="utf-8") as mounts:
        return {line.split()[4] for line in mounts}


def empty(folder: str, mode: int) -> None:
    """Remove everything in ``folder`` but what is bound into it read-only (the Python installation
    or the font list may lie under ``/tmp``) and the folders on the way to it; give ``folder`` back
    its ``mode``."""
    mounts = mount_points()
    os.chmod(folder, stat.S_IRWXU)
    for root, dirs, files in os.walk(folder):
        for name in files + dirs:
            path = os.path.join(root, name)
            if path not in mounts and not any(m.startswith(path + "/") for m in mounts):
                remove(path)
        dirs[:] = [d for d in dirs if any(m.startswith(os.path.join(root, d) + "/") for m in mounts)]
    os.chmod(folder, mode)
    for root, dirs, files in os.walk(folder):
        for name in files + dirs:
            path = os.path.join(root, name)
            if path not in mounts and not any(m.startswith(path + "/") for m in mounts):
                raise Dirty(f"{path} survives")
        dirs[:] = [d for d in dirs if os.path.join(root, d) not in mounts]


def snapshot(folder: str) -> list[tuple[str, bytes | None, int]]:
    """What is in ``folder`` apart from what is bound in read-only: (path, content or None for a
    folder, mode), parents first. The zygote's own imports leave a little (matplotlib makes its
    configuration folder), and a fresh kernel would find it: every kernel gets it back."""
    mounts, found = mount_points(), []
    for root, dirs, files in os.walk(folder):
        for name in dirs + files:
            path = os.path.join(root, name)
            if path not in mounts:
                content = None if name in dirs else read_bytes(path)
                found.append((path, content, stat.S_IMODE(os.lstat(path).st_mode)))
        dirs[:] = [d for d in dirs if os.path.join(root, d) not in mounts]
    return found


def read_bytes(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def restore(saved: list[tuple[str, bytes | None, int]]) -> None:
    for path, content, mode in saved:
        if content is None:
            os.makedirs(path, exist_ok=True)
        else:
            with open(path, "wb") as f:
                f.write(content)
        os.chmod(path, mode)


def remove(path: str) -> None:
    """A file, link or folder (a kernel may have taken the permissions off its own folders)."""
    if os.path.islink(path) or not os.path.isdir(path):
        os.remove(path)
        return
    os.chmod(path, stat.S_IRWXU)
    for root, dirs, _ in os.walk(path):  # top-down: each folder is opened up before it is listed
        for name in dirs:
            if not os.path.islink(inner := os.path.join(root, name)):
                os.chmod(inner, stat.S_IRWXU)
    shutil.rmtree(path)


# --- a kernel -------------------------------------------------------------------------------------

def become_kernel(request: dict, channels: tuple[int, int]) -> None:
    """In the forked child: become what ``python -m ipykernel_launcher -f FILE`` would be."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_SETMASK, set())
    for fd in channels:
        os.close(fd)
    os.setsid()
    libc.prctl(PR_SET_DUMPABLE, 1)
    os.environ.clear()
    os.environ.update(request["env"])
    os.chdir(request["cwd"])
    os.environ["PWD"] = request["cwd"]  # as bwrap's --chdir sets it
    random.seed()  # fresh seeds, as a new process would have (the forked ones are the zygote's)
    if "numpy" in sys.modules:
        sys.modules["numpy"].random.seed()
    if "torch" in sys.modules:
        sys.modules["torch"].seed()
    connection_file = f"/tmp/kernel-{os.getpid()}.json"
    with open(connection_file, "w", encoding="utf-8") as f:
        json.dump(request["connection"], f)
    from ipykernel import kernelapp

    sys.argv = [os.path.join(os.path.dirname(os.path.dirname(kernelapp.__file__)), "ipykernel_launcher.py"),
                "-f", connection_file, *request["arguments"],
                *(f"--IPKernelApp.extensions={name}" for name in SHELL_EXTENSIONS)]
    del sys.path[0]  # this script's folder; ipykernel_launcher takes the working directory out in the same way
    kernelapp.launch_new_instance()


def fork_kernel(request: dict, channels: tuple[int, int]) -> int:
    pid = os.fork()
    if pid:
        return pid
    status = 1
    try:
        become_kernel(request, channels)
        status = 0
    except SystemExit as end:
        status = end.code if isinstance(end.code, int) else 0
    finally:  # any other exception: status 1 (nothing is printed: the kernel's streams lead nowhere)
        try:
            import atexit
            atexit._run_exitfuncs()
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(status)


def signal_group(pid: int, signum: int) -> None:
    """Signal the kernel and what it started (its own session), or only the kernel before setsid."""
    for send in (os.killpg, os.kill):
        try:
            return send(pid, signum)
        except ProcessLookupError:
            continue


# --- the zygote -----------------------------------------------------------------------------------

def prepare(host_pid_namespace: str) -> dict[str, str]:
    """Check the sandbox, lock the zygote down, preload; the environment variables the imports set
    (each kernel gets them too, as its own imports would have set them)."""
    if os.readlink("/proc/self/ns/pid") == host_pid_namespace:  # kill(-1) would reach the host's processes
        raise SystemExit("zygote: not in a PID namespace of its own; refusing to start")
    libc.prctl(PR_SET_DUMPABLE, 0)
    resource.setrlimit(resource.RLIMIT_MSGQUEUE, (0, 0))
    os.environ.setdefault("MPLBACKEND", INLINE_BACKEND)
    before = dict(os.environ)
    with contextlib.redirect_stderr(io.StringIO()):  # the debugger's notes on frozen modules (a kernel hides them)
        for module in KERNEL_IMPORTS:
            importlib.import_module(module)
    return {name: value for name, value in os.environ.items() if before.get(name) != value}


class Zygote:
    """The sandbox's init (pid 1: its kernels cannot signal it) and the parent of one kernel at a time."""

    def __init__(self, channels: tuple[int, int], submissions: str, temporary: list[str],
                 set_by_imports: dict[str, str]):
        self.channels, self.submissions, self.set_by_imports = channels, submissions, set_by_imports
        self.writable = {folder: stat.S_IMODE(os.stat(folder).st_mode) for folder in (*temporary, submissions)}
        self.as_started = [entry for folder in temporary for entry in snapshot(folder)]
        self.kernel: int | None = None      # the kernel, from its spawn to the sweep
        self.ended: dict[int, int] = {}     # pid -> return code, of the kernels that have ended
        self.cleared = True                 # nothing of an ended kernel is left
        signal.signal(signal.SIGCHLD, self.on_child_exit)

    def on_child_exit(self, _signum, _frame) -> None:
        ended = reap()  # the kernel, or an orphan of a kernel: init reaps them
        if self.kernel in ended:
            self.ended[self.kernel] = ended[self.kernel]

    def wait_for_end(self, pid: int) -> None:
        deadline = time.monotonic() + SWEEP_SECONDS
        while pid not in self.ended and time.monotonic() < deadline:
            time.sleep(0.001)  # SIGCHLD interrupts it; the handler records the end

    def answer(self, request: dict) -> dict:
        """The answer to one request (module docstring); :class:`Dirty` when the sandbox must not be used again."""
        ops = {"spawn": self.spawn, "poll": self.poll, "signal": self.signal_kernel, "sweep": self.sweep,
               "clear": self.clear}
        return ops[request["op"]](request)

    def spawn(self, request: dict) -> dict:
        if self.kernel is not None or not self.cleared:
            raise Dirty("asked for a kernel before the last one was cleared away")
        if os.path.commonpath([self.submissions, os.path.realpath(request["cwd"])]) != self.submissions:
            raise Dirty(f"asked for a kernel outside {self.submissions}")
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGCHLD})  # its end must find self.kernel set
        request = {**request, "env": {**request["env"], **self.set_by_imports}}
        self.kernel, self.cleared = fork_kernel(request, self.channels), False
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGCHLD})
        return {"pid": self.kernel}

    def poll(self, request: dict) -> dict:
        """Report, nothing else."""
        pid = request["pid"]
        if pid in self.ended:
            return {"returncode": self.ended[pid]}
        return {"returncode": None if pid == self.kernel else -signal.SIGKILL}

    def signal_kernel(self, request: dict) -> dict:
        if request["pid"] == self.kernel:
            signal_group(self.kernel, request["signum"])
            if request["signum"] == signal.SIGKILL:  # answer once it is gone: the next poll finds it ended
                self.wait_for_end(self.kernel)
        return {}

    def sweep(self, _request: dict) -> dict:
        """The grader is done with the kernel: it and all it started end."""
        stop_everything()
        self.kernel = None
        return {}

    def clear(self, _request: dict) -> dict:
        """The grader has copied the submission's folder back: the writable folders are emptied."""
        if self.kernel is not None:
            raise Dirty("asked to clear before the sweep")
        for folder, mode in self.writable.items():
            empty(folder, mode)
        restore(self.as_started)
        self.cleared = True
        return {}

    def serve(self, requests: Connection, replies: Connection) -> None:
        while True:
            try:
                request = json.loads(requests.recv_bytes())
            except EOFError:  # the grader has gone
                return
            try:
                answer = self.answer(request)
            except Dirty as dirty:
                replies.send_bytes(json.dumps({"error": f"sandbox not clean: {dirty}"}).encode())
                return
            replies.send_bytes(json.dumps(answer).encode())


def main(argv: list[str]) -> None:
    requests_fd, replies_fd, submissions, host_pid_namespace, *temporary = argv
    requests = Connection(int(requests_fd), writable=False)
    replies = Connection(int(replies_fd), readable=False)
    try:
        zygote = Zygote((int(requests_fd), int(replies_fd)), submissions, temporary, prepare(host_pid_namespace))
    except (Exception, SystemExit) as err:
        replies.send_bytes(json.dumps({"error": f"cannot start: {err}"}).encode())
        raise
    replies.send_bytes(json.dumps({"ready": sorted(KERNEL_IMPORTS)}).encode())
    zygote.serve(requests, replies)


if __name__ == "__main__":
    main(sys.argv[1:])
