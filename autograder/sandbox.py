"""What a grading sandbox is: bubblewrap (``bwrap``, Debian package ``bubblewrap``) around a kernel
or a kernel zygote, laid out by one :class:`SandboxLayout`.

Inside, the process sees only: the system (``/usr`` and a few files of ``/etc``), read-only; the
Python installation and the course package (``SandboxLayout.course_package``), read-only; what its starter
binds read-only for it (a kernel's connection file, the zygote's script); its folder of ZMQ sockets
and its working folder (a notebook's folder, or a zygote's folder of submissions), writable.
``/tmp``, ``/dev/shm`` and ``HOME`` are fresh tmpfs; everything else is read-only. So the source
notebooks, the gradebook, other students' folders, other kernels' connection files and the
instructor's home do not exist in there. It runs without any capability (also when grading runs as
root), in its own PID namespace (it cannot see or signal the grader) and its own network namespace
with nothing but a loopback of its own (it reaches no server of the machine or beyond: the kernel
talks to the grader over unix sockets, jupyter_client's ``ipc`` transport), and dies with its parent
(``--die-with-parent``): nothing it starts outlives it. Its memory is capped (RLIMIT_AS of every
process, set by a launcher that bwrap runs) and so is its number of processes (a pids cgroup per
sandbox where the grader can make one, else RLIMIT_NPROC, which holds only when grading does not run
as root): ``c.GradingLimits`` (autograder/limits.py). The environment is cleared but for a few
harmless variables, nbgrader's ``NBGRADER_EXECUTION`` and the course package's folder on
``PYTHONPATH``.

autograder/provisioner.py starts the grading kernels in such a sandbox (or, where
:func:`unavailable_reason` says bwrap cannot work here, unsandboxed with a warning);
autograder/zygote_pool.py starts the zygotes that fork them.
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

SYSTEM_PATHS = ("/usr", "/etc/ld.so.cache", "/etc/localtime", "/etc/passwd", "/etc/group",
                "/etc/nsswitch.conf", "/etc/fonts", "/etc/alternatives")
MERGED_USR_LINKS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64")
KEPT_ENV = ("PATH", "LANG", "LANGUAGE", "LC_ALL", "LC_CTYPE", "TZ", "PYTHONHASHSEED", "MPLBACKEND",
            "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS",
            # nbgrader's documented signal to the notebook that it is being graded: the course's
            # notebooks then shrink their timing sweeps and training (authoring guide)
            "NBGRADER_EXECUTION", "NBGRADER_VALIDATING")
NAMESPACES = ("--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-net", "--unshare-cgroup-try")
PROCESS_LIMIT_WARNING = ("评分内核的进程数没有上限（评分以 root 运行，而 root 不受 RLIMIT_NPROC 限制，又无法在 "
                         "/sys/fs/cgroup 下建立 pids cgroup）：一个不停 fork 的提交会拖垮评分机。请用专门的评分用户"
                         "评分，或让评分进程能写 pids cgroup（教师指南 §6.3）。")
FALLBACK_WARNING = ("评分内核没有放进沙箱（%s）：学生代码将以评分用户的身份运行，能读取 source 目录、成绩库和"
                    "其他学生的提交，并能留下评分结束后仍在运行的进程。请安装 bubblewrap，或按教师指南 §6.3 "
                    "用专门的评分用户或容器评分。")
CGROUP_PREFIX = "autograder-sandbox-"
STALE_CGROUP_SECONDS = 60   # a sandbox's launcher joins its cgroup within milliseconds of its creation
# Joins the pids cgroup whose cgroup.procs is $0, then becomes bwrap: the sandbox and all it starts are in it.
JOIN_CGROUP = 'echo $$ > "$0" && exec "$@"'
# Run by bwrap, inside: the limits (argv 1, 2), then the sandboxed command; forked kernels inherit them.
LAUNCHER = ("import os, resource, sys\n"
            "resource.setrlimit(resource.RLIMIT_AS, (int(sys.argv[1]),) * 2)\n"
            "resource.setrlimit(resource.RLIMIT_NPROC, (int(sys.argv[2]),) * 2)\n"
            "os.execvp(sys.argv[3], sys.argv[3:])\n")


@dataclass(frozen=True)
class SandboxLayout:
    """Where everything is in a grading sandbox, the one description of it: read by the bwrap
    command (:meth:`bwrap`), by the zygote pool (:meth:`anchor_of`: where a zygote keeps its copy
    of the submissions) and by the zygote (``temporary``: the writable folders it empties)."""

    course_package: str       # the folder of the course package the kernel imports (read-only)
    python: tuple[str, ...]   # the Python installation (read-only)
    sockets: str              # this grading process's folder of the kernels' socket folders
    temporary: tuple[str, ...] = ("/tmp", "/dev/shm")   # fresh tmpfs, writable
    home: str = "/tmp"
    zygote: str = "/run/grading/zygote.py"              # where a zygote's sandbox has autograder/zygote.py

    @classmethod
    def here(cls, course_package: str = "") -> SandboxLayout:
        """This grading process's layout; ``course_package`` "" stands for the installed ``utils``."""
        package = course_package or importlib.util.find_spec("utils").submodule_search_locations[0]
        prefixes = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
        return cls(os.path.realpath(package), tuple(sorted(prefixes)), socket_root())

    def read_only(self) -> dict[str, str]:
        """Host path -> path inside, read-only: the Python installation, the course package and the
        grader's matplotlib font list (without it every kernel that imports matplotlib rebuilds it,
        about half a second)."""
        cache = Path(os.environ.get("MPLCONFIGDIR") or
                     Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "matplotlib")
        fonts = {str(f): f"{self.home}/.cache/matplotlib/{f.name}" for f in cache.glob("fontlist-*.json")}
        return {**{path: path for path in (*self.python, self.course_package)}, **fonts}

    def bound(self) -> list[str]:
        """Every path inside that the sandbox makes itself, whatever its working folder."""
        return [*self.python, self.course_package, *SYSTEM_PATHS, *MERGED_USR_LINKS, *self.temporary, "/dev",
                "/proc", os.path.dirname(self.zygote), self.sockets]

    def anchor_of(self, cwd: str) -> str:
        """Where a zygote's sandbox has its copy of the submissions, so that a kernel for the notebook in
        ``cwd`` works at that very path, as one started by bwrap: the folder two above the notebook's
        (nbgrader's autograded/ for autograded/<student>/<assignment>/, so one zygote serves a whole
        class), or the notebook's own folder where that one holds something the sandbox makes itself."""
        anchor = os.path.dirname(os.path.dirname(cwd))
        holds_bound = any(os.path.commonpath([anchor, path]) == anchor for path in self.bound())
        return cwd if holds_bound else anchor

    def environment(self, env: Mapping[str, str]) -> dict[str, str]:
        """The whole environment of a sandboxed process: the harmless part of ``env``, and the course
        package found first. JPY_PARENT_PID=1: the kernel's parent is the sandbox's init or the zygote
        (it dies with either), so ipykernel neither polls for a parent it cannot see nor prints its
        console banner."""
        kept = {name: env[name] for name in KEPT_ENV if name in env}
        return {"HOME": self.home, "JPY_PARENT_PID": "1", "PYTHONPATH": self.import_root, **kept}

    @property
    def import_root(self) -> str:
        """The folder to put first on ``sys.path`` for the course package to be imported from its folder."""
        return os.path.dirname(self.course_package)

    def bwrap(self, cmd: list[str], workdir: tuple[str, str], env: Mapping[str, str], *, memory_mb: int,
              max_processes: int, sockets: str, read_only: Mapping[str, str] | None = None,
              init: bool = False) -> list[str]:
        """``cmd`` run by bwrap, sealed as the module docstring says, in a new pids cgroup where one can
        be made. ``workdir``: the host folder that is its only writable place (besides ``temporary`` and
        ``sockets``, bound writable at its own path) and the path it has inside, its working directory;
        ``env``: the environment it was to be launched with (:meth:`environment` keeps what is harmless);
        ``read_only``: more files it may read (host path -> path inside); ``init``: ``cmd`` is the
        sandbox's PID 1 (which no process of the sandbox can kill or stop) instead of bwrap's."""
        args = [shutil.which("bwrap"), *(["--as-pid-1"] if init else []), "--die-with-parent", "--new-session",
                "--cap-drop", "ALL", *NAMESPACES, "--clearenv"]
        for name, value in self.environment(env).items():
            args += ["--setenv", name, value]
        args += system_args() + [arg for folder in self.temporary for arg in ("--tmpfs", folder)]
        for host, inside in {**self.read_only(), **(read_only or {})}.items():
            args += ["--ro-bind", host, inside]
        host, inside = workdir
        args += ["--bind", sockets, sockets, "--bind", host, inside, "--chdir", inside,
                 "--remount-ro", "/dev", "--remount-ro", "/"]
        launcher = [sys.executable, "-I", "-S", "-c", LAUNCHER,
                    str(within_hard_limit(resource.RLIMIT_AS, memory_mb * 1024 * 1024)),
                    str(within_hard_limit(resource.RLIMIT_NPROC, max_processes))]
        group = pids_cgroup(max_processes)
        joined = [] if group is None else [shutil.which("sh"), "-c", JOIN_CGROUP, str(group / "cgroup.procs")]
        return [*joined, *args, "--", *launcher, *cmd]


def system_args() -> list[str]:
    args = []
    for path in MERGED_USR_LINKS:
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
    for path in SYSTEM_PATHS:
        args += ["--ro-bind-try", path, path]
    return args + ["--dev", "/dev", "--proc", "/proc"]


@functools.lru_cache(maxsize=1)
def unavailable_reason() -> str | None:
    """Why kernels cannot be sandboxed here (None when they can): no bwrap, or no user namespaces."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return "没有找到 bwrap 命令（Debian/Ubuntu：apt-get install bubblewrap）"
    probe = subprocess.run([bwrap, *NAMESPACES, "--ro-bind", "/", "/", "true"], capture_output=True, text=True)
    if probe.returncode != 0:
        return f"bwrap 无法创建命名空间：{probe.stderr.strip() or probe.returncode}"
    return None


def processes_unlimited() -> bool:
    """Whether a sandbox's processes go uncounted: grading as root (RLIMIT_NPROC does not hold for
    root) where no pids cgroup can be made."""
    return os.getuid() == 0 and pids_cgroup_parent() is None


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
