"""Each person's server with a ceiling, on a machine without systemd (read by jupyterhub_config.py).

Where systemd runs the machine, the class uses systemdspawner as The Littlest JupyterHub does: every
server in a transient unit whose cgroup caps its memory (``MemoryMax``) and CPU (``CPUQuota``), all
processes of it together. Without systemd (a container, as on the machine the tests run on) this
spawner starts the server as LocalProcessSpawner does, but first puts it in a cgroup of the account's
own, ``<cgroup_parent>/<user>`` (ceiling.py's ``Ceiling``: cgroup v2 where the machine has it with the memory,
pids and cpu controllers, else v1's hierarchies of those controllers). Everything the server starts
(kernels, terminals, what they start) stays in it, and no account but root can move a process out:

- memory: ``Spawner.mem_limit`` for all the account's processes together (v1: swap included); past it
  the kernel's OOM killer ends a process of that account, never another's;
- processes and threads: ``max_processes`` (a fork bomb stops there);
- CPU: ``Spawner.cpu_limit`` CPUs (a quota per 100 ms period), so one account cannot take the
  machine's cores from the others.

Each process also keeps resource limits it inherits and cannot raise (``RLIMIT_AS`` = ``mem_limit``,
``RLIMIT_NPROC``, ``RLIMIT_CPU`` of 4 h) and a lower scheduling priority (nice), so that the Hub and
grading stay responsive; where no cgroup can be made (no controllers mounted, not root) those are all
there is, and the Hub's log says so.
"""
from __future__ import annotations

import resource

from jupyterhub.spawner import LocalProcessSpawner
from traitlets import Integer, Unicode

from ceiling import Ceiling, server_preexec   # jupyterhub_config.py puts this folder on sys.path
from classroom import Classroom


class LimitedLocalProcessSpawner(LocalProcessSpawner):
    max_processes = Integer(Classroom.max_processes, help="processes and threads of the account: its cgroup's "
                                                          "pids.max and RLIMIT_NPROC").tag(config=True)
    cpu_seconds = Integer(4 * 3600, help="RLIMIT_CPU: CPU seconds of each process").tag(config=True)
    niceness = Integer(5, help="added to the servers' scheduling priority").tag(config=True)
    cgroup_parent = Unicode("jupyterhub", help="each account's cgroup is <cgroup_parent>/<user>").tag(config=True)

    ceiling: Ceiling | None = None

    async def start(self):
        self.ceiling = Ceiling.where_available(f"{self.cgroup_parent}/{self.user.name}")
        if self.ceiling is None:
            self.log.warning("No cgroup with the memory, pids and cpu controllers: %s's server has per-process "
                             "limits only", self.user.name)
        else:
            self.ceiling.set_limits(self.mem_limit, self.cpu_limit, self.max_processes)
        return await super().start()

    async def stop(self, now=False):
        await super().stop(now)
        if self.ceiling is not None:
            self.ceiling.remove()

    def make_preexec_fn(self, name):
        limits = {resource.RLIMIT_NPROC: self.max_processes, resource.RLIMIT_CPU: self.cpu_seconds}
        if self.mem_limit:
            limits[resource.RLIMIT_AS] = self.mem_limit
        return server_preexec(self.ceiling, limits, self.niceness, super().make_preexec_fn(name))
