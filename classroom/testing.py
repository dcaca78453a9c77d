"""What the classroom's tests share (tests/test_classroom*.py): one classroom at a time on a machine, the
classrooms that killed test runs left, and the checks an attacker's process would make.

A test classroom lives at /srv/sdt<tag>-classroom with users sdt<tag>-...; the course's groups
(nbgrader-<course>, formgrade-<course>) exist once per machine, so two test classrooms take turns on a lock.
"""

import contextlib
import fcntl
import json
import os
import pwd
import shutil
import time
from pathlib import Path

LOCK = "/tmp/specdec-classroom-test.lock"


@contextlib.contextmanager
def machine_lock(timeout=600):
    """Hold the machine's classroom-test lock (another run's classroom must be gone first); TimeoutError after
    `timeout` seconds of waiting."""
    lock = open(LOCK, "w")
    deadline = time.monotonic() + timeout
    try:
        while True:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"another classroom test on this machine held {LOCK} for {timeout} s") from None
                time.sleep(2)
        remove_stale_test_classrooms()
        yield
    finally:
        lock.close()


def cannot_create_users():
    """Why this machine cannot hold a test classroom, or None."""
    if os.geteuid() != 0:
        return "not root: the classroom creates Unix users (run `make test` as root, as CI does)"
    if not shutil.which("useradd"):
        return "useradd is missing: this machine cannot create Unix users"
    return None


def user_exists(name):
    try:
        pwd.getpwnam(name)
        return True
    except KeyError:
        return False


@contextlib.contextmanager
def disposable_classroom(room, artifacts, keep=False):
    """Hold the machine's lock while the test uses `room` (a Classroom, set up by the test); at the end copy the
    hub's log into `artifacts`, tear the classroom down (unless `keep`: debugging) and check that none of its
    users and folders is left. room.teardown_seconds: how long the tear-down took. Skips the test where the
    machine cannot create users."""
    import pytest

    why = cannot_create_users()
    if why:
        pytest.skip(why)
    Path(artifacts).mkdir(parents=True, exist_ok=True)
    held = contextlib.ExitStack()
    try:
        held.enter_context(machine_lock())
    except TimeoutError as exc:
        pytest.fail(str(exc))
    with held:
        try:
            yield room
        finally:
            try:
                shutil.copy(room.hub_dir / "jupyterhub.log", Path(artifacts) / "jupyterhub.log")
            except OSError:
                pass
            if keep:
                print(f"the classroom stays at {room.root} (`python -m classroom down --root {room.root}`)")
            else:
                t0 = time.monotonic()
                room.teardown()
                room.teardown_seconds = time.monotonic() - t0
                left = [u for u in [room.instructor, *room.students] if user_exists(u)]
                assert not left, f"teardown left Unix users {left}"
                assert not Path(room.root).exists() and not Path(room.prefix).exists()


def remove_stale_test_classrooms():
    """A test run killed outright (SIGKILL, a lost machine) cannot tear down: the next run removes what
    such a run left, found by its state file, once the process that made it is gone."""
    from classroom.provision import Classroom

    for state in Path("/srv").glob("sdt*-classroom/state.json"):
        pid = json.loads(state.read_text()).get("owner_pid")
        if pid and not Path(f"/proc/{pid}").exists():
            print(f"removing the classroom a killed test run left at {state.parent}")
            Classroom.load(state.parent).teardown()


def listening_ports(uid):
    """The TCP ports on which processes of `uid` listen: /proc/net/tcp, which every user may read, names the
    owner of each socket (so an attacker finds another learner's server without the hub)."""
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if fields[3] == "0A" and int(fields[7]) == uid:  # 0A: LISTEN
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return sorted(ports)


# run as a learner (python -c, secrets on stdin, never in argv): every file under the given folders and every
# process's command line and environment that the learner can read, and which of the secrets each one holds
SECRET_SCAN = r"""
import os, sys
secrets = [s for s in sys.stdin.read().split() if s]
found = []
def look(name, data):
    for i, s in enumerate(secrets):
        if s.encode() in data:
            found.append(f"{name} holds secret #{i}")
for top in sys.argv[1:]:
    for dirpath, dirnames, filenames in os.walk(top):
        for f in filenames:
            p = os.path.join(dirpath, f)
            try:
                if os.path.isfile(p) and not os.path.islink(p) and os.path.getsize(p) < 50_000_000:
                    look(p, open(p, 'rb').read())
            except OSError:
                pass
for pid in os.listdir('/proc'):
    if pid.isdigit() and int(pid) != os.getpid():
        for part in ('cmdline', 'environ'):
            try:
                look(f'/proc/{pid}/{part}', open(f'/proc/{pid}/{part}', 'rb').read())
            except OSError:
                pass
print('\n'.join(found) or 'none')
"""


# run as a learner: HTTP requests [method, url, token or null, json body or null] on stdin; prints each answer's
# status, never following a redirect (a 302 to the hub's login is a refusal, not the page behind it)
HTTP_PROBE = r"""
import json, sys, urllib.error, urllib.request

class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args):
        return None

opener = urllib.request.build_opener(NoRedirect)
answers = []
for method, url, token, body in json.loads(sys.stdin.read()):
    request = urllib.request.Request(url, method=method, data=None if body is None else json.dumps(body).encode(),
                                     headers={"Authorization": f"token {token}"} if token else {})
    try:
        with opener.open(request, timeout=60) as answer:
            answers.append(answer.status)
    except urllib.error.HTTPError as exc:
        answers.append(exc.code)
    except OSError as exc:
        answers.append(str(exc))
print(json.dumps(answers))
"""
