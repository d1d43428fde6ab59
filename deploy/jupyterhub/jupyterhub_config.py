"""JupyterHub for one class of the course (read by `classroom.py start`; see docs/jupyterhub.md).

The class is described by the file $ATTENTION_CLASS (root/class.toml, written by `classroom.py
setup` from the instructor's class.toml).
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from classroom import Classroom  # noqa: E402

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
c.JupyterHub.cookie_secret_file = str(cls.hub_dir / "jupyterhub_cookie_secret")

# --- who may log in: Unix accounts by PAM. DummyAuthenticator (any listed name, one shared password)
# --- exists only for the demo and the tests.
if cls.authenticator == "dummy":
    c.JupyterHub.authenticator_class = "dummy"
    c.DummyAuthenticator.password = cls.dummy_password
else:
    c.JupyterHub.authenticator_class = "pam"
c.Authenticator.allowed_users = set(cls.members)

# --- each person's JupyterLab runs as their own Unix account, in the class edition's environment -
c.JupyterHub.spawner_class = "jupyterhub.spawner.LocalProcessSpawner"
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
]

# --- the formgrader: the grading account's JupyterLab, run by the Hub as a service ---------------
c.JupyterHub.services = [{
    "name": course,   # nbgrader: the service's name is the course id
    "url": f"http://127.0.0.1:{cls.formgrader_port}",
    "command": [sys.executable, "-m", "jupyterhub.singleuser"],
    "user": cls.grader,
    "cwd": str(cls.home(cls.grader)),
    "environment": {**cls.grader_environment(), "JUPYTERHUB_DEFAULT_URL": "/lab"},
    "oauth_no_confirm": True,
}]
