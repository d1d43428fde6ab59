"""JupyterHub for one class of the course (read by `classroom.py start`; see docs/jupyterhub.md).

The class is described by the file $ATTENTION_CLASS (root/class.toml, written by `classroom.py
setup` from the instructor's class.toml).
"""
import os
import sys
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from classroom import Classroom, intake_command  # noqa: E402

c = get_config()  # noqa: F821
cls = Classroom.load(os.environ["ATTENTION_CLASS"])
course = cls.course_id

# --- network: the proxy is what browsers reach; the Hub and the proxy's API stay on loopback -----
c.JupyterHub.ip = cls.ip
c.JupyterHub.port = cls.port
c.JupyterHub.hub_ip = "127.0.0.1"
c.JupyterHub.hub_port = cls.hub_port
c.ConfigurableHTTPProxy.api_url = f"http://127.0.0.1:{cls.proxy_api_port}"
c.ConfigurableHTTPProxy.pid_file = str(cls.hub_dir / "proxy.pid")
c.JupyterHub.db_url = f"sqlite:///{cls.hub_dir / 'jupyterhub.sqlite'}"
# Secrets live in files only root reads (hub/ is 0700) or in the environment of a process of the
# account they belong to (/proc/<pid>/environ is readable by that account and root only): the proxy's
# token (CONFIGPROXY_AUTH_TOKEN, made by the Hub), each server's and service's API token. None is on a
# command line (/proc/<pid>/cmdline is readable by everyone); tests/test_hub.py checks all of them.
c.JupyterHub.cookie_secret_file = str(cls.hub_dir / "jupyterhub_cookie_secret")
# HTTPS: the proxy serves TLS with a certificate and key of class.toml (e.g. Let's Encrypt's, renewed by
# certbot), or a reverse proxy in front terminates TLS and forwards to ip:port (docs/jupyterhub.md §2).
if cls.ssl_cert:
    c.JupyterHub.ssl_cert = cls.ssl_cert
    c.JupyterHub.ssl_key = cls.ssl_key

# --- who may log in: Unix accounts by PAM. DummyAuthenticator (any listed name, one shared password)
# --- exists only for the demo and the tests.
if cls.authenticator == "dummy":
    c.JupyterHub.authenticator_class = "dummy"
    c.DummyAuthenticator.password = cls.dummy_password
else:
    c.JupyterHub.authenticator_class = "pam"
c.Authenticator.allowed_users = set(cls.members)

# --- each person's JupyterLab runs as their own Unix account, in the class edition's environment,
# --- with a ceiling: a cgroup per server (systemd's unit, as The Littlest JupyterHub; without systemd
# --- deploy/jupyterhub/spawner.py makes one per account itself)
if Path("/run/systemd/system").is_dir():
    c.JupyterHub.spawner_class = "systemdspawner.SystemdSpawner"
    c.SystemdSpawner.unit_name_template = f"jupyter-{course}-{{USERNAME}}"
    c.SystemdSpawner.isolate_tmp = True
    c.SystemdSpawner.isolate_devices = True
    c.SystemdSpawner.disable_user_sudo = True
else:
    from spawner import LimitedLocalProcessSpawner  # noqa: E402
    c.JupyterHub.spawner_class = LimitedLocalProcessSpawner
    c.LimitedLocalProcessSpawner.max_processes = cls.max_processes
    c.LimitedLocalProcessSpawner.cgroup_parent = f"jupyter-{course}"   # each account's: jupyter-<course>/<user>
c.Spawner.mem_limit = f"{cls.mem_limit_mb}M"
c.Spawner.cpu_limit = cls.cpu_limit
c.Spawner.cmd = [str(cls.class_python), "-m", "jupyterhub.singleuser"]
c.Spawner.default_url = "/lab"
c.Spawner.environment = cls.server_environment("student")
c.Spawner.start_timeout = 120
c.Spawner.http_timeout = 120

# --- the course: groups nbgrader's JupyterHubAuthPlugin reads, and what each group may do -------
c.JupyterHub.load_groups = {
    f"formgrade-{course}": [cls.grader, *cls.instructors],
    f"nbgrader-{course}": list(cls.students),
}
c.JupyterHub.load_roles = [
    {"name": f"formgrade-{course}", "groups": [f"formgrade-{course}"],
     "scopes": [f"access:services!service={course}", "list:services", f"read:services!service={course}"]},
    # the course list finds the course's service
    {"name": f"nbgrader-{course}", "groups": [f"nbgrader-{course}"],
     "scopes": ["list:services", f"read:services!service={course}"]},
    # servers' tokens may do what their owner may (the course list, the auth plugin's group lookup)
    {"name": "server", "scopes": ["inherit"]},
    # jupyterhub-idle-culler: what its README asks for, to stop idle servers (not to delete users)
    {"name": "idle-culler", "services": ["idle-culler"],
     "scopes": ["list:users", "read:users:activity", "read:servers", "delete:servers"]},
]

# --- the formgrader: the grading account's JupyterLab, run by the Hub as a service from the grading
# --- account's own environment; the intake takes each hand-in out of the students' reach as it arrives
# --- (the seam an HTTP exchange behind the Hub would replace); the idle culler stops servers nobody
# --- used for idle_timeout s ------------------------------------------------------------------------
c.JupyterHub.services = [{
    "name": course,   # nbgrader: the service's name is the course id
    "url": f"http://127.0.0.1:{cls.formgrader_port}",
    "command": [str(cls.grading_python), "-m", "jupyterhub.singleuser"],
    "user": cls.grader,
    "cwd": str(cls.home(cls.grader)),
    "environment": {**cls.grader_environment(), "JUPYTERHUB_DEFAULT_URL": "/lab"},
    "oauth_no_confirm": True,
}, {
    "name": "intake",
    "command": intake_command(cls, cls.grading_python),
    "user": cls.grader,
    "cwd": str(cls.course_dir),
    "environment": cls.grader_environment(),
}, {
    "name": "idle-culler",
    "command": [sys.executable, "-m", "jupyterhub_idle_culler", f"--timeout={cls.idle_timeout}",
                f"--cull-every={cls.idle_cull_every}"],
}]
