"""One cgroup per account: a ceiling on the memory, processes and CPU of everything an account's server
starts (deploy/jupyterhub/spawner.py puts each server in one, on a machine without systemd).

cgroup v2 where the machine has it with the memory, pids and cpu controllers, else v1's hierarchies of
those controllers (a container's, as on the machine the tests run on). Needs root; no account but root
can move a process out of its cgroup.
"""
from __future__ import annotations

import os
import resource
from pathlib import Path

CONTROLLERS = ("memory", "pids", "cpu")
PERIOD_US = 100_000   # the CPU quota's period


def cgroup_mounts() -> list[tuple[str, Path, set[str]]]:
    """(file system type, mount point, super options) of every cgroup and cgroup2 mount."""
    found = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields, _, rest = line.partition(" - ")
        fstype, _source, options = (rest.split(" ") + ["", ""])[:3]
        if fstype in ("cgroup", "cgroup2"):
            found.append((fstype, Path(fields.split(" ")[4]), set(options.split(","))))
    return found


class Ceiling:
    """One cgroup (v2) or one cgroup in each of v1's memory, pids and cpu hierarchies, named ``group``,
    with the limits of :meth:`set_limits`; :meth:`enter` moves the calling process into it."""

    def __init__(self, version: int, mounts: dict[str, Path], group: str):
        self.version, self.mounts, self.group = version, mounts, group
        self.folders = {controller: mount / group for controller, mount in mounts.items()}

    @classmethod
    def where_available(cls, group: str) -> "Ceiling | None":
        mounts = cgroup_mounts()
        for fstype, point, _ in mounts:
            if fstype == "cgroup2" and set(CONTROLLERS) <= set((point / "cgroup.controllers").read_text().split()):
                return cls(2, dict.fromkeys(CONTROLLERS, point), group)
        v1 = {c: point for fstype, point, options in mounts if fstype == "cgroup" for c in CONTROLLERS if c in options}
        return cls(1, v1, group) if set(v1) == set(CONTROLLERS) else None

    def set_limits(self, memory_bytes: int | None, cpus: float | None, processes: int) -> None:
        """Make the cgroup(s) (again) and write the limits; None: no limit."""
        quota = int(cpus * PERIOD_US) if cpus else None
        if self.version == 2:
            self._delegate()
            folder = self.folders["memory"]
            self._write(folder, "memory.max", memory_bytes or "max")
            self._write(folder, "memory.swap.max", 0, optional=True)
            self._write(folder, "pids.max", processes)
            self._write(folder, "cpu.max", f"{quota or 'max'} {PERIOD_US}")
            return
        for folder in self.folders.values():
            folder.mkdir(parents=True, exist_ok=True)
        memory = self.folders["memory"]
        self._write(memory, "memory.memsw.limit_in_bytes", -1, optional=True)   # so the limit may be raised
        self._write(memory, "memory.limit_in_bytes", memory_bytes or -1)
        self._write(memory, "memory.memsw.limit_in_bytes", memory_bytes or -1, optional=True)   # no swap past it
        self._write(self.folders["pids"], "pids.max", processes)
        self._write(self.folders["cpu"], "cpu.cfs_period_us", PERIOD_US)
        self._write(self.folders["cpu"], "cpu.cfs_quota_us", quota or -1)

    def _delegate(self) -> None:
        """v2: the cgroup and the folders above it made, each handing the three controllers down."""
        folder = self.mounts["memory"]
        for part in self.folders["memory"].relative_to(folder).parts:
            self._write(folder, "cgroup.subtree_control", " ".join(f"+{c}" for c in CONTROLLERS))
            folder = folder / part
            folder.mkdir(exist_ok=True)

    @staticmethod
    def _write(folder: Path, name: str, value, optional: bool = False) -> None:
        if optional and not (folder / name).exists():
            return
        (folder / name).write_text(f"{value}\n")

    def limits(self) -> dict:
        """The limits as the cgroup files hold them, in :meth:`set_limits`' terms."""
        def read(controller: str, name: str) -> str:
            return (self.folders[controller] / name).read_text().strip()

        if self.version == 2:
            memory, processes = read("memory", "memory.max"), read("pids", "pids.max")
            quota, period = read("cpu", "cpu.max").split()
        else:
            memory, processes = read("memory", "memory.limit_in_bytes"), read("pids", "pids.max")
            quota, period = read("cpu", "cpu.cfs_quota_us"), read("cpu", "cpu.cfs_period_us")
        unlimited = ("max", "-1", str(2**63 - 1 - (2**63 - 1) % os.sysconf("SC_PAGE_SIZE")))
        return {"memory_bytes": None if memory in unlimited else int(memory),
                "cpus": None if quota in unlimited else int(quota) / int(period),
                "processes": None if processes == "max" else int(processes)}

    def holds(self, pid: int) -> bool:
        """Whether the process ``pid`` is in this cgroup (in each of v1's three hierarchies)."""
        where = {}
        for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            for controller in controllers.split(",") if self.version == 1 else CONTROLLERS:
                where[controller] = path
        return all(where.get(c) == f"/{self.group}" for c in CONTROLLERS)

    def enter(self) -> None:
        """The calling process (and all it will start) into the cgroup(s)."""
        for folder in set(self.folders.values()):
            (folder / "cgroup.procs").write_text(f"{os.getpid()}\n")

    def remove(self) -> None:
        """The cgroup(s) removed, where no process is left in them."""
        for folder in set(self.folders.values()):
            try:
                folder.rmdir()
            except OSError:
                pass


def server_preexec(ceiling: Ceiling | None, limits: dict[int, int], niceness: int, become_user):
    """What the server's process runs between fork and exec, as root: into the ceiling, under the
    resource limits, at the lower priority, then the account's own uid and groups (``become_user``)."""
    def preexec():
        if ceiling is not None:
            ceiling.enter()
        for kind, value in limits.items():
            resource.setrlimit(kind, (value, value))
        os.nice(niceness)
        become_user()

    return preexec
