"""JupyterHub configuration of the classroom (`python -m classroom up` starts the hub with it).

Everything comes from the classroom's state file (CLASSROOM_STATE, written by `up`): users, ports,
the shared password, tokens. The hub runs as root on 127.0.0.1 and starts:
- configurable-http-proxy (see classroom.hub.proxy_command for which one);
- one single-user JupyterLab per user, as that Unix user (LocalProcessSpawner), from the classroom
  environment under /opt (PREFIX), whose nbgrader_config.py points at the exchange;
- formgrader for the course, as a hub service run as the instructor in the course folder, open to the
  hub group formgrade-<course>: /services/<course>/formgrader, in its own browser tab (JupyterHub >= 4.1
  sends `Content-Security-Policy: frame-ancestors 'none'`, so formgrader inside JupyterLab's iframe stays blank).

Logins (classroom/auth.py): by default PAM over the classroom's Unix users, each with a password of its own
(ROOT/credentials.csv, root only); with `up --auth shared`, SharedPasswordAuthenticator, one password for every
learner, for a closed workshop network only: anyone who knows it can log in as any learner. Both lock a user
name for a while after repeated wrong passwords.
"""

import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from classroom.auth import LockoutPAMAuthenticator, LockoutSharedPasswordAuthenticator  # noqa: E402
from classroom.hub import singleuser_args  # noqa: E402

c = get_config()  # noqa: F821 (provided by traitlets)
state = json.loads(Path(os.environ["CLASSROOM_STATE"]).read_text())
hub = Path(state["hub_dir"])
course, instructor, students = state["course"], state["instructor"], state["students"]
python = state["python"]
path = f"{Path(python).parent}:/usr/local/bin:/usr/bin:/bin"

c.JupyterHub.ip = "127.0.0.1"
c.JupyterHub.port = state["port"]
c.JupyterHub.hub_ip = "127.0.0.1"
c.JupyterHub.hub_port = state["hub_port"]
c.JupyterHub.db_url = f"sqlite:///{hub / 'jupyterhub.sqlite'}"
c.JupyterHub.cookie_secret_file = str(hub / "jupyterhub_cookie_secret")
c.JupyterHub.pid_file = str(hub / "jupyterhub.pid")
c.JupyterHub.cleanup_servers = True

c.ConfigurableHTTPProxy.command = state["proxy_command"]
c.ConfigurableHTTPProxy.api_url = f"http://127.0.0.1:{state['proxy_api_port']}"
c.ConfigurableHTTPProxy.auth_token = state["proxy_token"]
c.ConfigurableHTTPProxy.pid_file = str(hub / "proxy.pid")

if state.get("auth", "shared") == "pam":
    # each user's own password, checked by PAM against /etc/shadow (PAM's `login` service)
    c.JupyterHub.authenticator_class = LockoutPAMAuthenticator
else:
    # closed workshop network only: one shared password for all learners
    c.JupyterHub.authenticator_class = LockoutSharedPasswordAuthenticator
    c.SharedPasswordAuthenticator.user_password = state["password"]
# the classroom's users only: not root, nor any other account of the machine
c.Authenticator.allowed_users = set(students) | {instructor}
for name, value in state.get("lockout", {}).items():
    setattr(c.LoginLockout, name, value)

c.JupyterHub.spawner_class = "localprocess"
c.Spawner.ip = "127.0.0.1"  # (the default, stated: user servers listen on loopback only)
c.Spawner.cmd = [python, "-m", "jupyterhub.singleuser"]
c.Spawner.default_url = "/lab"
# offline workshop: no news or update checks; window.jupyterapp for the browser test
c.Spawner.args = [
    "--LabApp.news_url=None",
    "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
    "--LabApp.expose_app_in_browser=True",
]
c.Spawner.environment = {"PATH": path, "SPECDEC_QUICK": "1"}
c.Spawner.start_timeout = 180
c.Spawner.http_timeout = 180


def pre_spawn_hook(spawner):
    spawner.args = list(spawner.args) + singleuser_args(spawner.user.name, spawner.log.warning)
    if spawner.user.name == instructor:
        # the instructor's terminal runs the course's grader: `python -m autograde class ...` in the course folder
        spawner.environment = dict(spawner.environment, PYTHONPATH=state["course_dir"])


c.Spawner.pre_spawn_hook = pre_spawn_hook

c.JupyterHub.load_groups = {
    f"nbgrader-{course}": {"users": sorted(set(students) | {instructor})},
    f"formgrade-{course}": {"users": [instructor]},
}
c.JupyterHub.services = [
    {  # formgrader, run by the hub as the instructor in the course folder
        "name": course,
        "url": f"http://127.0.0.1:{state['service_port']}",
        "command": [python, "-m", "jupyterhub.singleuser", *singleuser_args(instructor)],
        "user": instructor,
        "cwd": state["course_dir"],
        "environment": {"JUPYTERHUB_DEFAULT_URL": "/formgrader", "PATH": path, "PYTHONPATH": state["course_dir"]},
        "oauth_no_confirm": True,
    },
    # the classroom's own tools (tests, measurements) drive the hub's REST API with this token
    {"name": "classroom-admin", "api_token": state["admin_token"]},
]
c.JupyterHub.load_roles = [
    {"name": f"formgrade-{course}", "groups": [f"formgrade-{course}"], "scopes": [f"access:services!service={course}"]},
    {"name": "admin", "services": ["classroom-admin"]},
]
