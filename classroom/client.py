"""A client of the running classroom, for the tests and classroom/measure.py: the hub's REST API with the
classroom's tokens, a user's server started through it, and commands run as a classroom user.

`HubClient` is a part of classroom.provision.Classroom: it uses the classroom's state, url and python.
"""

import json
import os
import pwd
import subprocess
import time
import urllib.request

from classroom import ClassroomError


class HubClient:
    """The hub's REST API and the classroom's users, as a test drives them (a mixin of
    classroom.provision.Classroom)."""

    def api(self, path, method="GET", body=None, token=None, timeout=60):
        """The hub's REST API (or a server behind the proxy) with the classroom's admin token."""
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(
            self.url + path,
            data=data,
            method=method,
            headers={
                "Authorization": f"token {token or self.state['admin_token']}",
                "Content-Type": "application/json",
            },
        )
        with urllib.request.urlopen(req, timeout=timeout) as r:
            raw = r.read()
        return json.loads(raw) if raw.strip() else None

    def spawn(self, user, timeout=180, token=None, poll=0.25):
        """Start `user`'s single-user server through the hub's REST API (with the admin token, or `token`: the
        user's own); return the seconds until it is ready (asking every `poll` seconds)."""
        t0 = time.monotonic()
        self.api(f"/hub/api/users/{user}/server", "POST", {}, token=token)
        while time.monotonic() - t0 < timeout:
            server = self.api(f"/hub/api/users/{user}", token=token)["servers"].get("")
            if server and server.get("ready"):
                return time.monotonic() - t0
            time.sleep(poll)
        raise ClassroomError(f"the server of {user} was not ready within {timeout} s:\n{self.log_tail()}")

    def run_as(self, user, args, cwd="/", timeout=600, env=None, input=None):
        """Run the classroom's python with `args` as `user`: that uid, its group and its supplementary
        groups only (never root's), HOME its home, PATH the classroom environment first."""
        pw = pwd.getpwnam(user)
        groups = os.getgrouplist(user, pw.pw_gid)
        run_env = {"PATH": f"{self.python.parent}:/usr/bin:/bin", "HOME": pw.pw_dir, "LANG": "C.UTF-8", **(env or {})}
        return subprocess.run(
            [str(self.python), *args],
            user=pw.pw_uid,
            group=pw.pw_gid,
            extra_groups=groups,
            cwd=cwd,
            env=run_env,
            capture_output=True,
            text=True,
            timeout=timeout,
            input=input,
        )

    def login(self, user, password, timeout=60):
        """Log in through the hub's login form as a browser does (its _xsrf cookie and field); returns the
        requests.Session and the hub's answer: 302 logged in, 403 refused, 429 locked."""
        import requests

        session = requests.Session()
        session.get(f"{self.url}/hub/login", timeout=timeout).raise_for_status()
        answer = session.post(
            f"{self.url}/hub/login",
            timeout=timeout,
            allow_redirects=False,
            data={"username": user, "password": password, "_xsrf": session.cookies.get("_xsrf", path="/hub/")},
        )
        return session, answer

    def session_token(self, session, user, note="classroom"):
        """A token of `user` made with their logged-in session (the hub's cookie and its _xsrf), not with the
        admin token."""
        answer = session.post(
            f"{self.url}/hub/api/users/{user}/tokens",
            timeout=60,
            json={"note": note, "expires_in": 4 * 3600},
            headers={"X-XSRFToken": session.cookies.get("_xsrf", path="/hub/")},
        )
        answer.raise_for_status()
        return answer.json()["token"]

    def token(self, user, note="classroom"):
        """A fresh API token of `user` (with the user's own permissions), through the hub's REST API."""
        return self.api(f"/hub/api/users/{user}/tokens", "POST", {"note": note, "expires_in": 4 * 3600})["token"]
