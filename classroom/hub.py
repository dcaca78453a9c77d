"""Hub control: start and stop the classroom's JupyterHub, and what the hub needs to run (its proxy, a free port,
a sound nbgrader exchange, the arguments of each user's server; classroom/jupyterhub_config.py reads them).

`HubControl` is a part of classroom.provision.Classroom: it uses the classroom's state, paths and url.
"""

import os
import pwd
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
import urllib.error
from pathlib import Path

from classroom import COURSE_ID, REPO, ClassroomError


def check_port_free(port, what="the hub"):
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", int(port)))
        except OSError as exc:
            raise ClassroomError(
                f"port {port} on 127.0.0.1 is in use ({exc.strerror}), so {what} cannot listen there: "
                f"stop what holds it (`ss -ltnp 'sport = :{port}'`) or choose another port (make classroom PORT=...)"
            ) from None
    return int(port)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


EXCHANGE_MODES = {  # path under the exchange root -> (mode, owner) ; owner None: root
    ".": (0o1777, None),  # nbgrader checks every user can write here (like /tmp)
    "{course}": (0o2755, "instructor"),
    "{course}/outbound": (0o2755, "instructor"),  # released assignments: everyone reads
    "{course}/inbound": (0o2773, "instructor"),  # submissions: students write, cannot list
    "{course}/feedback": (0o2771, "instructor"),  # feedback: found only by its secret hash
}


def check_exchange(exchange, course=COURSE_ID, instructor=None):
    """Raise ClassroomError naming what is wrong with an nbgrader exchange, else return its path."""
    exchange = Path(exchange)
    for rel, (mode, owner) in EXCHANGE_MODES.items():
        path = exchange / rel.format(course=course)
        if not path.is_dir():
            raise ClassroomError(
                f"the nbgrader exchange folder {path} does not exist: students could not fetch or submit "
                "(nbgrader says only 'The exchange directory does not exist'); run `make classroom` to create it"
            )
        st = path.stat()
        have = stat.S_IMODE(st.st_mode)
        if have != mode:
            raise ClassroomError(
                f"the nbgrader exchange folder {path} has mode {have:04o}, it needs {mode:04o}"
                + (
                    " (every user must be able to write into the exchange root, sticky like /tmp)"
                    if rel == "."
                    else " (students write submissions into inbound/ but must not list it)"
                    if rel.endswith("inbound")
                    else ""
                )
                + f": chmod {mode:04o} {path}, or run `make classroom` again"
            )
        if owner == "instructor" and instructor is not None and pwd.getpwuid(st.st_uid).pw_name != instructor:
            raise ClassroomError(
                f"{path} belongs to {pwd.getpwuid(st.st_uid).pw_name}, not the instructor "
                f"{instructor}: nbgrader refuses to release into a folder it does not own"
            )
    return exchange


def singleuser_args(username, log_warning=None):
    """Extra arguments for a user's single-user server: jupyter refuses to start as root without
    --allow-root (a hub user mapped to uid 0)."""
    try:
        uid = pwd.getpwnam(username).pw_uid
    except KeyError:
        raise ClassroomError(
            f"the hub user {username!r} has no Unix account: LocalProcessSpawner runs each "
            f"server as the Unix user of the same name (useradd {username})"
        ) from None
    if uid == 0:
        if log_warning:
            log_warning(
                f"{username} is root: its single-user server gets --allow-root (jupyter refuses "
                "to run as root otherwise); do not give learners root"
            )
        return ["--allow-root"]
    return []


def proxy_command():
    """configurable-http-proxy: the npm package (JupyterHub's reference proxy, what Zero to JupyterHub
    runs) where `make classroom-proxy` installed it with node, else the pure-Python drop-in from PyPI."""
    npm = REPO / "classroom" / "proxy" / "node_modules" / ".bin" / "configurable-http-proxy"
    if npm.exists() and shutil.which("node"):
        return [str(npm)], "configurable-http-proxy (npm, node " + _node_version() + ")"
    py = Path(sys.executable).parent / "configurable-http-proxy"
    if py.exists():
        return [str(py)], "configurable-http-proxy (PyPI pure-Python drop-in; node is absent)"
    raise ClassroomError(
        "configurable-http-proxy is not installed: run `make classroom-proxy` (npm package "
        "with node, else the PyPI drop-in `pip install configurable-http-proxy`)"
    )


def _node_version():
    try:
        return subprocess.run(["node", "--version"], capture_output=True, text=True).stdout.strip()
    except OSError:
        return "?"


class HubControl:
    """Start and stop the hub of a classroom (a mixin of classroom.provision.Classroom)."""

    def start(self, timeout=120):
        """Start JupyterHub (as root, from the repo's .venv) in the background; wait until it answers."""
        if not self.state.get("admin_token"):
            raise ClassroomError("the classroom is not set up: run `python -m classroom up`")
        check_port_free(self.port)
        check_exchange(self.exchange, self.course, self.instructor)
        env = dict(os.environ, CLASSROOM_STATE=str(self.state_file))
        env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
        self.log_path = self.hub_dir / "jupyterhub.log"
        logf = open(self.log_path, "a")
        t0 = time.monotonic()
        proc = subprocess.Popen(
            [sys.executable, "-m", "jupyterhub", "-f", str(REPO / "classroom" / "jupyterhub_config.py")],
            cwd=self.hub_dir,
            env=env,
            stdout=logf,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        logf.close()
        self.state["hub_pid"] = proc.pid
        self.save()
        self.proc = proc
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise ClassroomError(
                    f"JupyterHub exited with {proc.returncode}; its log {self.log_path} ends:\n" + self.log_tail()
                )
            try:
                self.api("/hub/api/")
                self.start_seconds = time.monotonic() - t0
                return self
            except (urllib.error.URLError, ConnectionError, socket.timeout, OSError):
                time.sleep(0.3)
        raise ClassroomError(f"JupyterHub did not answer on {self.url} within {timeout} s:\n{self.log_tail()}")

    def log_tail(self, n=4000):
        try:
            return (self.hub_dir / "jupyterhub.log").read_text()[-n:]
        except OSError:
            return ""

    def stop(self):
        """Stop the hub (which stops the user servers, the formgrader service and the proxy), then any
        process left running as a classroom user."""
        pid = self.state.get("hub_pid")
        if pid and _alive(pid) and "jupyterhub" in _cmdline(pid):
            os.kill(pid, signal.SIGTERM)
            # it stops the servers, the service and the proxy, then exits (about 4 s here)
            t0 = time.monotonic()
            while _alive(pid) and time.monotonic() - t0 < 30:
                time.sleep(0.2)
            if _alive(pid):
                os.killpg(pid, signal.SIGKILL)
        proc = getattr(self, "proc", None)
        if proc is not None:
            try:
                proc.wait(timeout=10)  # reap our child, so it does not linger as a zombie
            except subprocess.TimeoutExpired:
                pass
        self._kill_user_processes()
        proxy_pid = self.hub_dir / "proxy.pid"
        if proxy_pid.exists():
            try:
                pid = int(proxy_pid.read_text().strip())
                if _alive(pid) and _cmdline(pid).find("configurable-http-proxy") >= 0:
                    os.kill(pid, signal.SIGTERM)
            except (ValueError, OSError):
                pass

    def _kill_user_processes(self):
        uids = set()
        for name in self.state.get("created_users", []):
            try:
                uids.add(pwd.getpwnam(name).pw_uid)
            except KeyError:
                pass
        for _ in range(3):
            left = [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit() and _uid(p) in uids]
            if not left:
                return
            for pid in left:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.5)


def _alive(pid):
    """True while `pid` runs (a zombie, dead but not yet reaped, counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def _uid(proc_dir):
    try:
        return proc_dir.stat().st_uid
    except OSError:
        return None


def _cmdline(pid):
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return ""
