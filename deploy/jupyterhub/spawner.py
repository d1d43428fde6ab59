"""Each person's server with limits, on a machine without systemd (read by jupyterhub_config.py).

Where systemd runs the machine, the class uses systemdspawner as The Littlest JupyterHub does: every
server in a transient unit whose cgroup caps its memory (``MemoryMax``) and CPU (``CPUQuota``), all
processes of it together. Without systemd (a container, as on the machine the tests run on) this
spawner starts the server as LocalProcessSpawner does, under resource limits that the server and
everything it starts (kernels, terminals) inherit and cannot raise:

- ``RLIMIT_AS``: each process's address space, ``Spawner.mem_limit`` (a kernel that allocates past
  it gets a MemoryError instead of taking the machine's memory);
- ``RLIMIT_NPROC``: processes and threads of the account, all its servers together (a fork bomb stops there);
- ``RLIMIT_CPU``: CPU seconds of each process (a runaway loop is ended by SIGXCPU), and a lower
  scheduling priority (nice), so that the Hub and grading stay responsive.

What rlimits cannot do is cap an account's memory or CPU share as a whole: that needs cgroups (systemd).
"""
from __future__ import annotations

import os
import resource

from jupyterhub.spawner import LocalProcessSpawner
from traitlets import Integer


class LimitedLocalProcessSpawner(LocalProcessSpawner):
    max_processes = Integer(256, help="RLIMIT_NPROC of the account's servers").tag(config=True)
    cpu_seconds = Integer(4 * 3600, help="RLIMIT_CPU: CPU seconds of each process").tag(config=True)
    niceness = Integer(5, help="added to the servers' scheduling priority").tag(config=True)

    def make_preexec_fn(self, name):
        become_user = super().make_preexec_fn(name)
        limits = {resource.RLIMIT_NPROC: self.max_processes, resource.RLIMIT_CPU: self.cpu_seconds}
        if self.mem_limit:
            limits[resource.RLIMIT_AS] = self.mem_limit
        niceness = self.niceness

        def preexec():
            for kind, value in limits.items():
                resource.setrlimit(kind, (value, value))
            os.nice(niceness)
            become_user()

        return preexec
