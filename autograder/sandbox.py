"""Grading kernels sealed with bubblewrap (``bwrap``, Debian package ``bubblewrap``).

:class:`SandboxedKernelManager` is jupyter_client's kernel manager with one change: the
kernel's command line is prefixed with ``bwrap`` (``format_kernel_cmd``, the public hook that
turns a kernel spec into a command). ``ResilientExecute`` uses it when
``c.ResilientExecute.sandbox`` is on (autograder/config.py), so ``nbgrader autograde`` and
``python -m autograder.grade`` both grade in it; learners' own JupyterLab never does.

Inside, the kernel sees only: the system (``/usr`` and a few files of ``/etc``), read-only;
the Python installation and the course package ``utils/``, read-only; its own connection
file, read-only; its own folder of ZMQ sockets and its own notebook's directory, writable. ``/tmp``,
``/dev/shm`` and ``HOME`` are fresh tmpfs; everything else is read-only. So the source notebooks,
the gradebook, other students' folders, other kernels' connection files and the instructor's home
do not exist in there. It runs without any capability (also when grading runs as root), in its own
PID namespace (it cannot see or signal the grader) and its own network namespace with nothing but
a loopback of its own (it reaches no server of the machine or beyond: the kernel talks to the
grader over unix sockets, jupyter_client's ``ipc`` transport), and dies with its parent
(``--die-with-parent``): nothing it starts outlives the kernel. :class:`Limits` caps its memory
(RLIMIT_AS of every process, set by a launcher that bwrap runs) and its number of processes (a
pids cgroup per sandbox where the grader can make one, else RLIMIT_NPROC, which holds only when
grading does not run as root). The environment is cleared but for a few harmless variables and
nbgrader's ``NBGRADER_EXECUTION``. Interrupts go by message (``interrupt_mode = "message"``): a
SIGINT sent from outside would stop bwrap itself. With ``c.ResilientExecute.fork_kernels`` (the
default) the same sandbox holds a zygote that forks the kernels (autograder/kernel_pool.py). A
grading kernel counts as ready as soon as it has answered (:class:`ReadyKernelClient`).

Where bwrap is missing or the kernel refuses user namespaces, :func:`kernel_manager_class`
logs a warning and grading runs unsandboxed (docs/instructor_guide.md says what to do then).
"""
from __future__ import annotations

import atexit
import contextlib
import functools
import importlib.util
import itertools
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from queue import Empty

from jupyter_client import protocol_version_info
from jupyter_client.asynchronous import AsyncKernelClient
from jupyter_client.manager import AsyncKernelManager
from traitlets import DottedObjectName, Type

SYSTEM_PATHS = ("/usr", "/etc/ld.so.cache", "/etc/localtime", "/etc/passwd", "/etc/group",
                "/etc/nsswitch.conf", "/etc/fonts", "/etc/alternatives")
MERGED_USR_LINKS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64")
KEPT_ENV = ("PATH", "LANG", "LANGUAGE", "LC_ALL", "LC_CTYPE", "TZ", "PYTHONHASHSEED", "MPLBACKEND",
            "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS",
            # nbgrader's documented signal to the notebook that it is being graded: the course's
            # notebooks then shrink their timing sweeps and training (authoring guide)
            "NBGRADER_EXECUTION", "NBGRADER_VALIDATING")
SANDBOX_HOME = "/tmp"
PROCESS_LIMIT_WARNING = ("评分内核的进程数没有上限（评分以 root 运行，而 root 不受 RLIMIT_NPROC 限制，又无法在 "
                         "/sys/fs/cgroup 下建立 pids cgroup）：一个不停 fork 的提交会拖垮评分机。请用专门的评分用户"
                         "评分，或让评分进程能写 pids cgroup（教师指南 §6.3）。")
CGROUP_PREFIX = "autograder-sandbox-"
STALE_CGROUP_SECONDS = 60   # a sandbox's launcher joins its cgroup within milliseconds of its creation
# Joins the pids cgroup whose cgroup.procs is $0, then becomes bwrap: the sandbox and all it starts are in it.
JOIN_CGROUP = 'echo $$ > "$0" && exec "$@"'
# Run by bwrap, inside: the limits (argv 1, 2), then the sandboxed command; forked kernels inherit them.
LAUNCHER = ("import os, resource, sys\n"
            "resource.setrlimit(resource.RLIMIT_AS, (int(sys.argv[1]),) * 2)\n"
            "resource.setrlimit(resource.RLIMIT_NPROC, (int(sys.argv[2]),) * 2)\n"
            "os.execvp(sys.argv[3], sys.argv[3:])\n")
FALLBACK_WARNING = ("评分内核没有放进沙箱（%s）：学生代码将以评分用户的身份运行，能读取 source 目录、成绩库和"
                    "其他学生的提交，并能留下评分结束后仍在运行的进程。请安装 bubblewrap，或按教师指南 §6.3 "
                    "用专门的评分用户或容器评分。")


@functools.lru_cache(maxsize=1)
def unavailable_reason() -> str | None:
    """Why kernels cannot be sandboxed here (None when they can): no bwrap, or no user namespaces."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return "没有找到 bwrap 命令（Debian/Ubuntu：apt-get install bubblewrap）"
    probe = subprocess.run(bwrap_argv(["true"], (tempfile.gettempdir(),) * 2), capture_output=True, text=True)
    if probe.returncode != 0:
        return f"bwrap 无法创建命名空间：{probe.stderr.strip() or probe.returncode}"
    return None


@dataclass(frozen=True)
class Limits:
    """What one sandbox may use: a kernel and all it starts (with ``fork_kernels``: the zygote and its
    one kernel at a time). ``c.ResilientExecute.memory_mb`` and ``max_processes`` set them."""

    memory_mb: int = 6144   # address space of each process (RLIMIT_AS); grading section 11 peaks at 1.8 GB
    processes: int = 256    # processes and threads of the whole sandbox; a kernel has about 15


LIMITS = Limits()   # this grading process's: set by kernel_manager_class


def kernel_manager_class(log, limits: Limits = Limits()) -> type[AsyncKernelManager]:
    """The sandboxed kernel manager, or (with a logged warning) the plain one where bwrap fails (the
    forking one of autograder/kernel_pool.py is chosen by the caller where this gives the sandboxed one).
    ``limits`` become this process's :data:`LIMITS`, which every sandbox it starts gets."""
    global LIMITS
    LIMITS = limits
    reason = unavailable_reason()
    if reason is None and pids_cgroup_parent() is None and os.getuid() == 0:
        log.warning(PROCESS_LIMIT_WARNING)
    if reason is None:
        return SandboxedKernelManager
    log.warning(FALLBACK_WARNING, reason)
    return UnixSocketKernelManager


@functools.lru_cache(maxsize=1)
def pids_cgroup_parent() -> Path | None:
    """The cgroup under which the grader can make a pids cgroup per sandbox (its own, in the pids
    hierarchy of cgroup v1 or in cgroup v2 where its children get the pids controller), or None."""
    with open("/proc/self/cgroup", encoding="utf-8") as own:   # "id:controllers:path" ("" for cgroup v2)
        groups = dict(line.rstrip("\n").split(":", 2)[1:] for line in own)
    with open("/proc/self/mountinfo", encoding="utf-8") as mounts:
        candidates = [where for line in mounts if (where := own_cgroup(line, groups)) is not None]
    for parent in candidates:
        control = parent / "cgroup.subtree_control"
        if os.access(parent, os.W_OK) and (not control.exists() or "pids" in control.read_text().split()):
            return parent
    return None


def own_cgroup(mount: str, groups: dict[str, str]) -> Path | None:
    """Where this process's cgroup is in the mount of ``/proc/self/mountinfo`` line ``mount``, if it
    is a pids hierarchy (cgroup v1) or cgroup v2; None for any other mount."""
    ours, theirs = mount.split(" - ")
    root, point = ours.split()[3:5]
    fstype, _, options = theirs.split()[:3]
    controllers = "" if fstype == "cgroup2" else next((c for c in groups if "pids" in c.split(",")), None)
    if fstype not in ("cgroup", "cgroup2") or controllers not in groups or (
            fstype == "cgroup" and "pids" not in options.split(",")):
        return None
    return Path(point, os.path.relpath(groups[controllers], root))


_cgroup_numbers = itertools.count()


def pids_cgroup(processes: int) -> Path | None:
    """A new pids cgroup that holds at most ``processes`` tasks (None where none can be made); the
    empty ones of earlier sandboxes (a cgroup cannot be removed while a process is in it) go."""
    parent = pids_cgroup_parent()
    if parent is None:
        return None
    now = time.time_ns()
    for stale in parent.glob(f"{CGROUP_PREFIX}*"):
        if now - int(stale.name.split("-")[2]) > STALE_CGROUP_SECONDS * 10**9:
            with contextlib.suppress(OSError):
                stale.rmdir()
    group = parent / f"{CGROUP_PREFIX}{now}-{os.getpid()}-{next(_cgroup_numbers)}"
    try:
        group.mkdir()
        (group / "pids.max").write_text(str(processes))
    except OSError:
        return None
    return group


_socket_roots: dict[int, str] = {}


def socket_root() -> str:
    """This process's folder of the kernels' socket folders (removed when it exits). A zygote's
    sandbox has it bound in, as it must serve kernels whose folders do not exist yet."""
    pid = os.getpid()   # a grading worker forked from its parent gets its own
    if pid not in _socket_roots:
        _socket_roots[pid] = tempfile.mkdtemp(prefix="grading-sockets-")
        atexit.register(lambda: os.getpid() == pid and shutil.rmtree(_socket_roots[pid], ignore_errors=True))
    return _socket_roots[pid]


def within_hard_limit(kind: int, wanted: int) -> int:
    """``wanted``, or less where this process's own hard limit of resource ``kind`` is lower (the
    sandbox inherits it and cannot raise it)."""
    hard = resource.getrlimit(kind)[1]
    return wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)


def python_paths() -> list[str]:
    """Read-only in the sandbox: the Python installation and the course package (not its repository)."""
    prefixes = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
    package = importlib.util.find_spec("utils").submodule_search_locations[0]
    return sorted(prefixes | {package})


def system_args() -> list[str]:
    args = []
    for path in MERGED_USR_LINKS:
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
    for path in SYSTEM_PATHS:
        args += ["--ro-bind-try", path, path]
    return args + ["--dev", "/dev", "--tmpfs", "/dev/shm", "--proc", "/proc", "--tmpfs", "/tmp"]


def font_cache_args() -> list[str]:
    """The grader's matplotlib font list, read-only where matplotlib looks for it in the sandbox:
    without it every kernel that imports matplotlib rebuilds it (about half a second)."""
    cache = Path(os.environ.get("MPLCONFIGDIR") or
                 Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "matplotlib")
    args = []
    for fontlist in cache.glob("fontlist-*.json"):
        args += ["--ro-bind", str(fontlist), f"{SANDBOX_HOME}/.cache/matplotlib/{fontlist.name}"]
    return args


def sandbox_env(env: Mapping[str, str]) -> dict[str, str]:
    """The whole environment of the sandboxed process: the harmless part of ``env``.

    JPY_PARENT_PID=1: the kernel's parent is the sandbox's init or the zygote (it dies with
    either), so ipykernel neither polls for a parent it cannot see nor prints its console banner."""
    return {"HOME": SANDBOX_HOME, "JPY_PARENT_PID": "1", **{name: env[name] for name in KEPT_ENV if name in env}}


def environment_args(env: Mapping[str, str]) -> list[str]:
    args = ["--clearenv"]
    for name, value in sandbox_env(env).items():
        args += ["--setenv", name, value]
    return args


def bwrap_argv(cmd: list[str], workdir: tuple[str, str], env: Mapping[str, str] = os.environ,
               read_only: Mapping[str, str] | None = None, init: bool = False, sockets: str | None = None,
               limits: Limits | None = None) -> list[str]:
    """``cmd`` run by bwrap, sealed as the module docstring says, with the harmless part of ``env``
    (the environment it was to be launched with). ``workdir``: the host folder that is its only
    writable place (besides ``/tmp``, ``/dev/shm`` and ``sockets``) and the path it has inside, its
    working directory; ``read_only``: files it may read (host path → path inside); ``init``: ``cmd``
    is the sandbox's PID 1 (which no process of the sandbox can kill or stop) instead of bwrap's;
    ``sockets``: a folder bound writable at its own path, where the kernel's unix sockets go;
    ``limits``: its memory and processes (:data:`LIMITS` if None)."""
    limits = limits or LIMITS
    args = [shutil.which("bwrap"), *(["--as-pid-1"] if init else []), "--die-with-parent", "--new-session",
            "--cap-drop", "ALL", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-net",
            "--unshare-cgroup-try", *environment_args(env), *system_args()]
    for path in python_paths():
        args += ["--ro-bind", path, path]
    args += font_cache_args()
    for host, inside in (read_only or {}).items():
        args += ["--ro-bind", host, inside]
    if sockets is not None:
        args += ["--bind", sockets, sockets]
    host, inside = workdir
    args += ["--bind", host, inside, "--chdir", inside, "--remount-ro", "/dev", "--remount-ro", "/"]
    launcher = [sys.executable, "-I", "-S", "-c", LAUNCHER,
                str(within_hard_limit(resource.RLIMIT_AS, limits.memory_mb * 1024 * 1024)),
                str(within_hard_limit(resource.RLIMIT_NPROC, limits.processes))]
    group = pids_cgroup(limits.processes)
    joined = [] if group is None else [shutil.which("sh"), "-c", JOIN_CGROUP, str(group / "cgroup.procs")]
    return [*joined, *args, "--", *launcher, *cmd]


major_protocol_version = protocol_version_info[0]


class ReadyKernelClient(AsyncKernelClient):
    """jupyter_client's kernel client, ready as soon as the kernel is.

    Its ``wait_for_ready`` ends by reading IOPub until 0.2 s pass without a message: a fifth of a
    second of waiting for every graded kernel, on a core that has nothing else to do. This one
    stops where that drain starts: the kernel has answered ``kernel_info`` on the shell channel and
    IOPub has delivered a message. The status messages left on IOPub are harmless: nbclient keeps
    only the messages whose parent is the request it is waiting for.
    """

    async def wait_for_ready(self, timeout: float | None = None) -> None:
        deadline = time.monotonic() + (float("inf") if timeout is None else timeout)
        while True:
            self.kernel_info()
            with contextlib.suppress(Empty):
                reply = await self.shell_channel.get_msg(timeout=1)
                if reply["msg_type"] == "kernel_info_reply":
                    await self.iopub_channel.get_msg(timeout=0.2)  # IOPub is connected, too
                    self._adapt_protocol(reply)
                    return
            if not await self.is_alive():
                raise RuntimeError("Kernel died before replying to kernel_info")
            if time.monotonic() > deadline:
                raise RuntimeError(f"Kernel didn't respond in {timeout:.0f} seconds")


    def _adapt_protocol(self, reply: dict) -> None:
        """Speak the kernel's major protocol version if it is not ours (what jupyter_client's own wait does)."""
        version = int(reply["content"]["protocol_version"].split(".")[0])
        if version != major_protocol_version:
            self.session.adapt_version = version


class UnixSocketKernelManager(AsyncKernelManager):
    """jupyter_client's kernel manager, whose kernel listens on unix sockets of its own folder (ipc)
    instead of TCP ports. TCP ports are picked by the grader, freed and handed to the kernel to bind
    when it has started; meanwhile another process of the machine (a parallel grading, a test's
    kernel or the connections of its client) may take one, and the kernel dies before answering."""

    sockets = ""              # the folder of its ZMQ sockets (in socket_root())

    async def start_kernel(self, **kw) -> None:
        if not self.sockets:   # a restart keeps its connection file, so its sockets' paths
            self.sockets = tempfile.mkdtemp(prefix="k-", dir=socket_root())
            self.transport, self.ip = "ipc", os.path.join(self.sockets, "s")   # the sockets: s-1 … s-5
        await super().start_kernel(**kw)

    async def _async_cleanup_resources(self, restart: bool = False) -> None:
        await super()._async_cleanup_resources(restart)
        if not restart and self.sockets:
            shutil.rmtree(self.sockets, ignore_errors=True)

    cleanup_resources = _async_cleanup_resources


class SandboxedKernelManager(UnixSocketKernelManager):
    """A kernel manager whose kernels run inside bwrap (see the module docstring), its sockets'
    folder bound in at the same path."""

    client_class = DottedObjectName(f"{__name__}.ReadyKernelClient")
    client_factory = Type(ReadyKernelClient, klass=AsyncKernelClient)

    cwd: str                  # the kernel's working directory: its notebook's folder
    env: Mapping[str, str]    # the environment it was to be launched with

    async def start_kernel(self, **kw) -> None:
        self.cwd = os.path.realpath(kw.get("cwd") or os.getcwd())
        self.env = kw.get("env") or os.environ
        await super().start_kernel(**kw)

    def format_kernel_cmd(self, extra_arguments: list[str] | None = None) -> list[str]:
        cmd = super().format_kernel_cmd(extra_arguments)
        connection_file = os.path.realpath(self.connection_file)
        return bwrap_argv(cmd, (self.cwd, self.cwd), self.env, read_only={connection_file: connection_file},
                          sockets=self.sockets)

    @property
    def kernel_spec(self):
        spec = super().kernel_spec
        if spec is not None:
            spec.interrupt_mode = "message"
        return spec
