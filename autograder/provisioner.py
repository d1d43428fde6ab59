"""Grading kernels, through jupyter_client's documented seam: one kernel provisioner.

:class:`SandboxProvisioner` owns a grading kernel from launch to cleanup. ``pre_launch`` puts the
kernel on unix sockets of its own (jupyter_client's ``ipc`` transport) and wraps its command in the
sandbox (autograder/sandbox.py), unless a zygote will fork it; ``launch_kernel`` forks it from that
zygote (autograder/zygote_pool.py) or execs the command; a forked kernel is no child of the grader,
so the provisioner's ``poll``, ``wait``, ``send_signal``, ``kill`` and ``terminate`` ask its zygote;
``cleanup`` ends it (a forked kernel's sandbox is swept and what it wrote copied back), makes its
notebook's folder safe for nbgrader to write and copy (:func:`tree.remove_link_hazards`, whichever way
the kernel ran: forked, started by bwrap or unsandboxed) and removes its sockets. It is found by the
entry point pyproject.toml registers, named by the kernel specs of :class:`GradingKernelSpecs`; its
switches are its own traits (``c.SandboxProvisioner.fork``, …), read from its kernel manager's
configuration, its limits from ``c.GradingLimits`` (autograder/limits.py).

Where bwrap is missing or the kernel refuses user namespaces, each kernel logs a warning and runs
unsandboxed, still on unix sockets: TCP ports are picked by the grader, freed and handed to the
kernel to bind when it has started, and meanwhile another process of the machine may take one.
Whichever way it starts, a kernel's raw output streams lead nowhere: it never reaches the log.
Interrupts go by message (``interrupt_mode``): a SIGINT sent from outside would stop bwrap itself.
"""
from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
from queue import Empty

from jupyter_client.asynchronous import AsyncKernelClient
from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.provisioning import LocalProvisioner
from traitlets import Bool, Int, Unicode

from utils import GRADING_BACKEND

from . import kernel_channel, zygote_pool, sandbox, tree
from .zygote_pool import ZygoteHandle, ZygoteLost, forkable
from .limits import GradingLimits
from .sandbox import SandboxLayout

PROVISIONER = "attention-course-sandbox"   # its entry point (pyproject.toml)
POLL_SECONDS = 0.02   # how often ``wait`` asks a forked kernel's zygote whether it has ended


class SandboxProvisioner(LocalProvisioner):
    """jupyter_client's local provisioner, for a kernel in the grading sandbox (module docstring)."""

    sandbox = Bool(True, help="Run the kernel in bubblewrap where it can run (autograder/sandbox.py); "
                              "elsewhere it runs unsandboxed, with a warning.").tag(config=True)
    fork = Bool(True, help="Fork the sandboxed kernel from a zygote that imported torch and matplotlib once "
                           "per grading process (autograder/zygote_pool.py), where the spec starts this "
                           "Python's ipykernel: about half of what a submission used to cost. Between two "
                           "kernels the zygote clears its sandbox (autograder/zygote.py). False starts every "
                           "kernel on its own in bwrap.").tag(config=True)
    course_package = Unicode("", help="The folder of the course package the kernel imports: read-only in "
                                      "the sandbox, its parent first on the kernel's PYTHONPATH. Empty: "
                                      "the installed utils package.").tag(config=True)

    layout: SandboxLayout
    zygote: ZygoteHandle | None = None   # the zygote that forks this kernel
    forked: int | None = None            # the forked kernel's pid, until it has been waited for
    sockets = ""                         # this kernel's folder of unix sockets
    workdir: str | None = None           # the notebook's folder the kernel works in, if its client named one

    async def pre_launch(self, **kw) -> dict:
        km = self.parent
        if not self.sockets:   # a restart keeps its connection file, so its sockets' paths
            self.sockets = tempfile.mkdtemp(prefix="k-", dir=sandbox.socket_root())
            km.transport, km.ip = "ipc", os.path.join(self.sockets, "s")   # the sockets: s-1 … s-5
        self.workdir = kw.get("cwd")
        kw = await super().pre_launch(**kw)   # the connection file; the kernel spec's command
        self.layout = SandboxLayout.here(self.course_package)
        if not self._sealed():
            kw["env"]["PYTHONPATH"] = os.pathsep.join(filter(None, [self.layout.import_root,
                                                                    kw["env"].get("PYTHONPATH")]))
            return kw
        kw["env"], kw["cwd"] = self.layout.environment(kw["env"]), os.path.realpath(kw.get("cwd") or os.getcwd())
        if self.fork and forkable(self.kernel_spec.argv):
            limits = GradingLimits(parent=self)
            self.zygote = zygote_pool.POOL.acquire(kw["env"], self.layout.anchor_of(kw["cwd"]), self.layout,
                                                   limits.memory_mb, limits.max_processes)
        if self.zygote is None:
            kw["cmd"] = self._in_bwrap(kw["cmd"], kw["cwd"], kw["env"])
        return kw

    async def launch_kernel(self, cmd: list[str], **kw) -> dict:
        if self.zygote is not None:
            try:
                connection = {k: v.decode() if isinstance(v, bytes) else v for k, v in self.connection_info.items()}
                arguments = cmd[len(self.kernel_spec.argv):]   # the extra ones after the spec's own
                self.forked = self.pid = self.zygote.spawn(connection, kw["env"], kw["cwd"], arguments)
                self.cwd = kw["cwd"]
                return self.connection_info
            except ZygoteLost as lost:
                self.log.warning("%s: this kernel starts in bwrap", lost)
                self.zygote = None
                cmd = self._in_bwrap(cmd, kw["cwd"], kw["env"])
        return await super().launch_kernel(cmd, **{**kw, "stdout": subprocess.DEVNULL,
                                                   "stderr": subprocess.DEVNULL})

    @property
    def has_process(self) -> bool:
        return self.forked is not None or super().has_process

    async def poll(self) -> int | None:
        return await super().poll() if self.forked is None else self.zygote.poll(self.forked)

    async def wait(self) -> int | None:
        if self.forked is None:
            return await super().wait()
        while (returncode := await self.poll()) is None:
            await asyncio.sleep(POLL_SECONDS)
        self.forked = None
        return returncode

    async def send_signal(self, signum: int) -> None:
        if self.forked is None:
            return await super().send_signal(signum)
        return self.zygote.send_signal(self.forked, signum)

    async def kill(self, restart: bool = False) -> None:
        if self.forked is None:
            return await super().kill(restart)
        return await self.send_signal(signal.SIGKILL)

    async def terminate(self, restart: bool = False) -> None:
        if self.forked is None:
            return await super().terminate(restart)
        return await self.send_signal(signal.SIGTERM)

    async def cleanup(self, restart: bool = False) -> None:
        await super().cleanup(restart)
        if self.zygote is not None:
            self.zygote.end_kernel()
            self.zygote = self.forked = None
        if self.workdir and (changed := tree.remove_link_hazards(self.workdir)):
            self.log.warning("in %s, removed what grading must not follow or open (links, FIFOs, sockets, devices) "
                             "or gave a hard-linked file a copy of its own: %s", self.workdir, ", ".join(changed))
        if not restart and self.sockets:
            shutil.rmtree(self.sockets, ignore_errors=True)
            self.sockets = ""

    def _sealed(self) -> bool:
        """Whether this kernel runs in bwrap; where it cannot, or only without a process limit, says so."""
        if not self.sandbox:
            return False
        reason = sandbox.unavailable_reason()
        if reason is not None:
            self.log.warning(sandbox.FALLBACK_WARNING, reason)
            return False
        if sandbox.processes_unlimited():
            self.log.warning(sandbox.PROCESS_LIMIT_WARNING)
        return True

    def _in_bwrap(self, cmd: list[str], cwd: str, env: dict[str, str]) -> list[str]:
        """``cmd`` in its own sandbox, working in the notebook's folder, its connection file readable."""
        connection_file = os.path.realpath(self.parent.connection_file)
        limits = GradingLimits(parent=self)
        return self.layout.bwrap(cmd, (cwd, cwd), env, memory_mb=limits.memory_mb,
                                 max_processes=limits.max_processes, sockets=self.sockets,
                                 read_only={connection_file: connection_file})


class GradingKernelSpecs(KernelSpecManager):
    """The kernel specs as grading starts them: by :class:`SandboxProvisioner`, interrupted by message,
    with the environment of a grading kernel (torch's threads, matplotlib's backend)."""

    kernel_threads = Int(1, help="torch's threads in a grading kernel (OMP_NUM_THREADS): a graded notebook's "
                                 "tensors are small, and a second thread's spin-wait takes the core the grading "
                                 "process or another kernel needs.").tag(config=True)
    draw_figures = Bool(False, help="Render the notebook's figures at grading time. False: they are not rendered "
                                    "(utils/grading_backend.py), and the course's demo figures not even built "
                                    "(@demo_figure, utils/plotting.py): they say nothing about the student, and "
                                    "building and rendering them was more than half of grading a figure-heavy "
                                    "section (README's benchmark). True builds and renders them and puts them "
                                    "back into the feedback.").tag(config=True)

    def get_kernel_spec(self, kernel_name: str):
        spec = super().get_kernel_spec(kernel_name)
        spec.interrupt_mode = "message"
        spec.metadata["kernel_provisioner"] = {"provisioner_name": PROVISIONER}
        spec.env = {**spec.env, "OMP_NUM_THREADS": str(self.kernel_threads),
                    "MKL_NUM_THREADS": str(self.kernel_threads)}
        if not self.draw_figures:
            spec.env["MPLBACKEND"] = GRADING_BACKEND
        return spec


def grading_kernels(km):
    """Kernel manager ``km`` (jupyter_client's own), configured to start grading kernels: their specs
    from :class:`GradingKernelSpecs`, their clients :class:`GradingKernelClient`, what they send bounded
    (autograder/kernel_channel.py). Its configuration reaches both, and the provisioner."""
    km.kernel_spec_manager = GradingKernelSpecs(parent=km)
    km.client_factory = GradingKernelClient
    km.session = kernel_channel.BoundedSession(parent=km)
    return km


class GradingKernelClient(AsyncKernelClient):
    """jupyter_client's kernel client, its sockets bounded and ready as soon as the kernel is.

    Its sockets refuse a message part larger than kernel_channel.MAX_FRAME. jupyter_client's own
    ``wait_for_ready`` ends by reading IOPub until 0.2 s pass without a message: a fifth of a second
    or more of waiting for every graded kernel, on a core that has nothing else to do. This one
    (public calls only) stops where that drain starts: the kernel has answered ``kernel_info`` on the
    shell channel and IOPub has delivered a message. The status messages left on IOPub are harmless:
    nbclient keeps only the messages whose parent is the request it is waiting for. A grading kernel
    is this Python's ipykernel: its protocol's major version is the client's, none to adapt to.
    """

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        kernel_channel.bound(self.context)

    async def wait_for_ready(self, timeout: float | None = None) -> None:
        deadline = time.monotonic() + (float("inf") if timeout is None else timeout)
        while True:
            with contextlib.suppress(TimeoutError, Empty):
                await self.kernel_info(reply=True, timeout=1)
                await self.iopub_channel.get_msg(timeout=0.2)   # IOPub is connected, too
                return
            if not await self.is_alive():
                raise RuntimeError("Kernel died before replying to kernel_info")
            if time.monotonic() > deadline:
                raise RuntimeError(f"Kernel didn't respond in {timeout:.0f} seconds")
