"""Grading kernels sealed with bubblewrap (``bwrap``, Debian package ``bubblewrap``).

:class:`SandboxedKernelManager` is jupyter_client's kernel manager with one change: the
kernel's command line is prefixed with ``bwrap`` (``format_kernel_cmd``, the public hook that
turns a kernel spec into a command). ``ResilientExecute`` uses it when
``c.ResilientExecute.sandbox`` is on (autograder/config.py), so ``nbgrader autograde`` and
``python -m autograder.grade`` both grade in it; learners' own JupyterLab never does.

Inside, the kernel sees only: the system (``/usr`` and a few files of ``/etc``), read-only;
the Python installation and the course package ``utils/``, read-only; its own connection
file, read-only; and its own notebook's directory, writable. ``/tmp`` and ``HOME`` are a fresh
tmpfs. So the source notebooks, the gradebook, other students' folders, other kernels'
connection files and the instructor's home do not exist in there. It runs without any
capability (also when grading runs as root), in its own PID namespace (it cannot see or
signal the grader), and dies with its parent
(``--die-with-parent``): nothing it starts outlives the kernel. The environment is cleared
but for a few harmless variables and nbgrader's ``NBGRADER_EXECUTION``. Interrupts go by
message (``interrupt_mode = "message"``): a SIGINT sent from outside would stop bwrap itself.

Where bwrap is missing or the kernel refuses user namespaces, :func:`kernel_manager_class`
logs a warning and grading runs unsandboxed (docs/instructor_guide.md says what to do then).
"""
from __future__ import annotations

import functools
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path

from jupyter_client.manager import AsyncKernelManager

SYSTEM_PATHS = ("/usr", "/etc/ld.so.cache", "/etc/localtime", "/etc/passwd", "/etc/group",
                "/etc/nsswitch.conf", "/etc/fonts", "/etc/alternatives")
MERGED_USR_LINKS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64")
KEPT_ENV = ("PATH", "LANG", "LANGUAGE", "LC_ALL", "LC_CTYPE", "TZ", "PYTHONHASHSEED", "MPLBACKEND",
            "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS",
            # nbgrader's documented signal to the notebook that it is being graded: the course's
            # notebooks then shrink their timing sweeps and training (authoring guide)
            "NBGRADER_EXECUTION", "NBGRADER_VALIDATING")
SANDBOX_HOME = "/tmp"
FALLBACK_WARNING = ("评分内核没有放进沙箱（%s）：学生代码将以评分用户的身份运行，能读取 source 目录、成绩库和"
                    "其他学生的提交，并能留下评分结束后仍在运行的进程。请安装 bubblewrap，或按教师指南 §6.3 "
                    "用专门的评分用户或容器评分。")


@functools.lru_cache(maxsize=1)
def unavailable_reason() -> str | None:
    """Why kernels cannot be sandboxed here (None when they can): no bwrap, or no user namespaces."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return "没有找到 bwrap 命令（Debian/Ubuntu：apt-get install bubblewrap）"
    probe = subprocess.run(bwrap_argv(["true"], tempfile.gettempdir(), os.devnull), capture_output=True, text=True)
    if probe.returncode != 0:
        return f"bwrap 无法创建命名空间：{probe.stderr.strip() or probe.returncode}"
    return None


def kernel_manager_class(log) -> type[AsyncKernelManager]:
    """The sandboxed kernel manager, or (with a logged warning) the plain one where bwrap fails."""
    reason = unavailable_reason()
    if reason is None:
        return SandboxedKernelManager
    log.warning(FALLBACK_WARNING, reason)
    return AsyncKernelManager


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
    return args + ["--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"]


def font_cache_args() -> list[str]:
    """The grader's matplotlib font list, read-only where matplotlib looks for it in the sandbox:
    without it every kernel that imports matplotlib rebuilds it (about half a second)."""
    cache = Path(os.environ.get("MPLCONFIGDIR") or
                 Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "matplotlib")
    args = []
    for fontlist in cache.glob("fontlist-*.json"):
        args += ["--ro-bind", str(fontlist), f"{SANDBOX_HOME}/.cache/matplotlib/{fontlist.name}"]
    return args


def environment_args(env: Mapping[str, str]) -> list[str]:
    # JPY_PARENT_PID=1: the kernel's parent is the sandbox's init (it dies with it anyway), so
    # ipykernel neither polls for a parent it cannot see nor prints its console banner.
    args = ["--clearenv", "--setenv", "HOME", SANDBOX_HOME, "--setenv", "JPY_PARENT_PID", "1"]
    for name in KEPT_ENV:
        if name in env:
            args += ["--setenv", name, env[name]]
    return args


def bwrap_argv(cmd: list[str], cwd: str, connection_file: str, env: Mapping[str, str] = os.environ) -> list[str]:
    """``cmd`` run by bwrap: sealed as the module docstring says, in ``cwd`` (its only writable place),
    with the harmless part of ``env`` (the environment the kernel was to be launched with)."""
    args = [shutil.which("bwrap"), "--die-with-parent", "--new-session", "--cap-drop", "ALL", "--unshare-pid",
            "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try", *environment_args(env), *system_args()]
    for path in python_paths():
        args += ["--ro-bind", path, path]
    args += [*font_cache_args(), "--ro-bind", connection_file, connection_file, "--bind", cwd, cwd, "--chdir", cwd]
    return [*args, "--", *cmd]


class SandboxedKernelManager(AsyncKernelManager):
    """A kernel manager whose kernels run inside bwrap (see the module docstring)."""

    cwd: str                  # the kernel's working directory: its notebook's folder
    env: Mapping[str, str]    # the environment it was to be launched with

    async def start_kernel(self, **kw) -> None:
        self.cwd = os.path.realpath(kw.get("cwd") or os.getcwd())
        self.env = kw.get("env") or os.environ
        await super().start_kernel(**kw)

    def format_kernel_cmd(self, extra_arguments: list[str] | None = None) -> list[str]:
        cmd = super().format_kernel_cmd(extra_arguments)
        return bwrap_argv(cmd, self.cwd, os.path.realpath(self.connection_file), self.env)

    @property
    def kernel_spec(self):
        spec = super().kernel_spec
        if spec is not None:
            spec.interrupt_mode = "message"
        return spec
