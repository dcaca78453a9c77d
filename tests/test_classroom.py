"""The JupyterHub classroom end to end, no mocks (classroom/, docs/classroom.md).

One classroom for the module: real Unix users (prefix `sdt<pid>-`: an instructor, three students who
work through the REST APIs, one who works in Chromium), the classroom environment under
/opt/sdt<pid>-classroom, the exchange and course folder under /srv/sdt<pid>-classroom, JupyterHub on
a free port of 127.0.0.1 with configurable-http-proxy. All of it is removed at teardown, also when a
test fails. The tests run in file order and build on each other:

  the instructor releases 03_acceptance_math through formgrader's API (the hub service); with 07 open in the
  course file, formgrader refuses 08 (which restates 07's answers) with the reason, releases it when forced;
  each student's own single-user server (started by the hub) fetches it, the student's notebook is
  filled (correct / partial / blank) through the contents API and submitted through nbgrader's
  server extension; a fourth student does the same in Chromium (Assignment List, Fetch, run,
  Validate, Submit);
  students can neither list nor open another's submission, nor read solutions or the gradebook;
  they submit in the order blank, partial, correct, and the blank student then resubmits a correct
  notebook; the instructor sets the deadline in the course file (course.toml) between those timestamps:
  blank on time, partial late inside the grace period, correct late outside it (10% per day started),
  the resubmission late too, and the rule latest_on_time;
  the instructor collects (formgrader API), grades the exchange's inbound/ (every submission) with
  `python -m autograde class` (sandbox on) as their Unix user, releases feedback (formgrader API); the
  grades CSV (lateness, penalty, final score), the gradebook (duedate, timestamps, nbgrader's
  late_submission_penalty) and formgrader hold the expected values; `nbgrader export` with the course's
  Canvas and Moodle exporters writes the scores after the penalty; formgrader, opened in its own tab in
  Chromium, lists the submissions; each student fetches feedback and gets only their own.

Skips, with the reason, where the machine cannot create users (not root, no useradd).
"""

import csv
import json
import os
import shutil
import socket
import time
import urllib.error
import urllib.parse
from pathlib import Path

import nbformat
import pytest

from autograde import NOTEBOOKS, SOLUTIONS
from classroom import COURSE_ID, ClassroomError, fill
from classroom.hub import check_exchange, check_port_free, free_port, singleuser_args
from classroom.provision import Classroom, check_username
from classroom.testing import HTTP_PROBE, SECRET_SCAN, disposable_classroom, listening_ports, user_exists
from specdec.measure.my_measurements import FILE as INSIGHTS_FILE

ASSIGNMENT = "03_acceptance_math"
TAG = f"sdt{os.getpid() % 100000}"
INSTRUCTOR = f"{TAG}-instructor"
STUDENTS = {f"{TAG}-correct": "correct", f"{TAG}-partial": "partial", f"{TAG}-blank": "blank"}
BROWSER_STUDENT = f"{TAG}-browser"
PARTIAL_FILLS = "expected_tokens"  # the partial student answers only this part
SUBMIT_ORDER = [f"{TAG}-blank", f"{TAG}-partial", f"{TAG}-correct"]  # on time, inside grace, after grace
RESUBMITTER = f"{TAG}-blank"  # resubmits a correct notebook after the deadline
MEASURED = {f"{TAG}-correct": 1.12, f"{TAG}-partial": 1.46}  # students whose submission carries measurements: v(4)


def measurements(user):
    """A my_measurements.json as a notebook writes it (specdec.measure.my_measurements.record), with this student's
    v(4)."""
    import tempfile

    from specdec.measure.my_measurements import record

    with tempfile.TemporaryDirectory() as d:
        return record(
            ASSIGNMENT,
            {
                "path": "bf16",
                "c": 0.06,
                "v": {1: 1.04, 4: MEASURED[user]},
                "alpha": {"code": 0.6, "json": 0.87},
                "speedup": {"code": 1.3, "json": 2.1},
            },
            folder=d,
        ).read_text()


ARTIFACTS = Path(__file__).resolve().parent / "artifacts" / "classroom"

pytestmark = [pytest.mark.e2e, pytest.mark.notebooks, pytest.mark.timeout(600)]


# ----------------------------------------------------------------------------- traps (no users needed)
@pytest.mark.parametrize("name", ["Alice", "1abc", "a+b", "x" * 33, "", "bad name", "../etc"])
def test_an_invalid_unix_user_name_is_refused_with_the_rule(name):
    with pytest.raises(ClassroomError, match="not a valid Unix user name"):
        check_username(name)


def test_valid_unix_user_names_pass():
    for name in ("alice", "sd-student01", "_x", "a_b-c9"):
        assert check_username(name) == name


def test_a_port_in_use_is_reported_with_the_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        with pytest.raises(ClassroomError, match=f"port {port} on 127.0.0.1 is in use"):
            check_port_free(port)
    assert check_port_free(port) == port  # free again once released


def test_a_missing_exchange_or_a_wrong_mode_is_reported(tmp_path):
    with pytest.raises(ClassroomError, match="exchange folder .* does not exist"):
        check_exchange(tmp_path / "nowhere")
    root = tmp_path / "exchange"
    for rel, mode in (
        (".", 0o1777),
        (COURSE_ID, 0o2755),
        (f"{COURSE_ID}/outbound", 0o2755),
        (f"{COURSE_ID}/inbound", 0o2773),
        (f"{COURSE_ID}/feedback", 0o2771),
    ):
        (root / rel).mkdir(parents=True, exist_ok=True)
        os.chmod(root / rel, mode)
    assert check_exchange(root) == root
    os.chmod(root, 0o755)
    with pytest.raises(ClassroomError, match=r"mode 0755, it needs 1777 \(every user must be able to write"):
        check_exchange(root)
    os.chmod(root, 0o1777)
    os.chmod(root / COURSE_ID / "inbound", 0o777)
    with pytest.raises(ClassroomError, match=r"inbound has mode 0777, it needs 2773"):
        check_exchange(root)


def test_the_command_refuses_an_invalid_student_name_before_creating_anything(tmp_path, capsys):
    from classroom.__main__ import main

    root = tmp_path / "room"
    assert (
        main(
            [
                "up",
                "--names",
                "sd-ok,Bad Name",
                "--root",
                str(root),
                "--prefix",
                str(tmp_path / "env"),
                "--port",
                str(free_port()),
                "--no-hub",
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    if os.geteuid() == 0:
        assert "'Bad Name' is not a valid Unix user name" in err, err
        assert not user_exists("sd-ok")
    else:
        assert "need root" in err, err
    assert not root.exists() and not (tmp_path / "env").exists()


def test_a_root_user_server_gets_allow_root_and_an_unknown_user_is_named():
    warnings = []
    assert singleuser_args("root", warnings.append) == ["--allow-root"]
    assert "--allow-root" in warnings[0]
    assert singleuser_args("nobody") == []
    with pytest.raises(ClassroomError, match="has no Unix account"):
        singleuser_args("no-such-user-xyz")


def test_a_classroom_gives_each_user_a_password_and_locks_after_5_failures_for_300_s_by_default():
    room = Classroom("sd-instructor", ["sd-student01"])
    assert room.auth == "pam"
    assert room.lockout == {"failed_logins_allowed": 5, "lockout_seconds": 300}
    with pytest.raises(ClassroomError, match="unknown authentication 'ldap'"):
        Classroom("sd-instructor", [], auth="ldap")
    from classroom.provision import new_password

    passwords = {new_password() for _ in range(200)}
    assert len(passwords) == 200 and all(len(p) == 19 and not set(p) & set("01ilo") for p in passwords)


def test_the_lockout_counts_attempts_in_flight_and_lifts_after_its_time():
    """LoginLockout (classroom/auth.py) in front of a slow authenticator, on a fake clock: 8 guesses at once get
    5 answers and 3 refusals; then the right password is refused until the lockout's time has passed."""
    import asyncio

    from jupyterhub.auth import Authenticator
    from tornado import web

    from classroom.auth import LoginLockout

    class Slow(Authenticator):
        async def authenticate(self, handler, data):
            await asyncio.sleep(0.05)  # as PAM, which waits after a wrong password
            return data["username"] if data["password"] == "right" else None

    class Locked(LoginLockout, Slow):
        pass

    now = [1000.0]
    auth = Locked(lockout_seconds=300)
    auth.clock = lambda: now[0]

    async def attempt(password, name="alice"):
        try:
            return await auth.authenticate(None, {"username": name, "password": password})
        except web.HTTPError as exc:
            return exc.status_code

    async def run():
        guesses = await asyncio.gather(*(attempt(f"guess-{i}") for i in range(8)))
        assert sorted(guesses, key=str) == [429, 429, 429, None, None, None, None, None], guesses
        assert await attempt("right") == 429 and await attempt("right", "bob") == "bob"
        now[0] += 299
        assert await attempt("right") == 429
        now[0] += 2
        assert await attempt("right") == "alice"
        assert [await attempt("guess") for _ in range(4)] == [None] * 4 and await attempt("right") == "alice"

    asyncio.run(run())


@pytest.mark.parametrize("auth", ["pam", "shared"])
def test_the_hub_configuration_takes_the_authenticator_and_the_lockout_from_the_state(tmp_path, monkeypatch, auth):
    from traitlets.config.loader import PyFileConfigLoader

    from classroom import REPO
    from classroom.auth import LockoutPAMAuthenticator, LockoutSharedPasswordAuthenticator

    state = {
        "hub_dir": str(tmp_path),
        "course": COURSE_ID,
        "instructor": "root",
        "students": ["nobody"],
        "python": "/usr/bin/python3",
        "port": 1,
        "hub_port": 2,
        "proxy_command": ["chp"],
        "proxy_api_port": 3,
        "proxy_token": "t",
        "service_port": 4,
        "admin_token": "a",
        "course_dir": str(tmp_path),
        "auth": auth,
        "lockout": {"failed_logins_allowed": 7, "lockout_seconds": 60},
    }
    if auth == "shared":
        state["password"] = "a-shared-password"
    (tmp_path / "state.json").write_text(json.dumps(state))
    monkeypatch.setenv("CLASSROOM_STATE", str(tmp_path / "state.json"))
    config = PyFileConfigLoader("jupyterhub_config.py", str(REPO / "classroom")).load_config()
    want = LockoutPAMAuthenticator if auth == "pam" else LockoutSharedPasswordAuthenticator
    assert config.JupyterHub.authenticator_class is want
    assert config.LoginLockout.failed_logins_allowed == 7 and config.LoginLockout.lockout_seconds == 60
    assert config.Authenticator.allowed_users == {"root", "nobody"}
    assert ("user_password" in config.SharedPasswordAuthenticator) == (auth == "shared")


# ------------------------------------------------------------------------------------------- helpers
def as_user(room, user, code, cwd="/", timeout=600, args=(), env=None, input=None):
    """Run Python code (or `args`) as `user` with the classroom's python."""
    return room.run_as(user, [*(["-c", code] if code else []), *args], cwd=cwd, timeout=timeout, env=env, input=input)


def can_read(room, user, path):
    """'ok', or the error `user` gets listing (folder) or reading (file) `path`."""
    done = as_user(
        room,
        user,
        "import os, sys\np = sys.argv[1]\n"
        "try:\n    os.listdir(p) if os.path.isdir(p) else open(p, 'rb').read(1)\n"
        "    print('ok')\nexcept OSError as e:\n    print(type(e).__name__)",
        args=[str(path)],
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def filled_notebook(kind):
    return fill.filled_notebook(ASSIGNMENT, kind, PARTIAL_FILLS)


def expected_points(kind):
    return fill.expected_points(ASSIGNMENT, kind, PARTIAL_FILLS)


def max_points():
    return fill.max_points(ASSIGNMENT)


# --------------------------------------------------------------------------------------- the classroom
TIMES = {}
DONE = set()  # steps that completed, for the ones that build on them


def need(*steps):
    missing = [s for s in steps if s not in DONE]
    if missing:
        pytest.fail(f"an earlier step failed, so this one cannot run: {missing}")


LOCKOUT_S = 15  # the test classroom's lockout (the default is 300 s): long enough to see, short to wait out


@pytest.fixture(scope="module")
def room():
    room = Classroom(
        INSTRUCTOR,
        [*STUDENTS, BROWSER_STUDENT],
        port=free_port(),
        root=f"/srv/{TAG}-classroom",
        prefix=f"/opt/{TAG}-classroom",
        lockout_seconds=LOCKOUT_S,
    )
    # SPECDEC_CLASSROOM_KEEP=1 (debugging) leaves the classroom standing: `python -m classroom down --root ...`
    with disposable_classroom(room, ARTIFACTS, keep=os.environ.get("SPECDEC_CLASSROOM_KEEP") == "1"):
        t0 = time.monotonic()
        room.setup()
        TIMES["setup_s"] = time.monotonic() - t0
        room.start()
        TIMES["hub_start_s"] = room.start_seconds
        yield room
    TIMES["teardown_s"] = getattr(room, "teardown_seconds", 0.0)
    (ARTIFACTS / "times.json").write_text(json.dumps({k: round(v, 1) for k, v in TIMES.items()}, indent=1))


def user_api(room, user, token, path, method="GET", body=None):
    result = room.api(f"/user/{user}{path}", method, body, token=token)
    if isinstance(result, dict) and result.get("success") is False:
        pytest.fail(f"{user}: {method} {path} failed:\n{result.get('value')}")
    return result


def formgrader(room, token, path, method="GET"):
    result = room.api(
        f"/services/{COURSE_ID}/formgrader/api{path}", method, {} if method == "POST" else None, token=token
    )
    if isinstance(result, dict) and result.get("success") is False:
        pytest.fail(f"formgrader {method} {path} failed:\n{result.get('error')}\n{result.get('log')}")
    return result


TOKENS = {}


def test_the_classroom_is_set_up_with_users_groups_and_a_private_course(room):
    import grp
    import pwd

    nbgrader_group, formgrade_group = grp.getgrnam(f"nbgrader-{COURSE_ID}"), grp.getgrnam(f"formgrade-{COURSE_ID}")
    assert set(nbgrader_group.gr_mem) == {INSTRUCTOR, *STUDENTS, BROWSER_STUDENT}
    assert formgrade_group.gr_mem == [INSTRUCTOR]
    for user in [INSTRUCTOR, *STUDENTS]:
        home = Path(pwd.getpwnam(user).pw_dir)
        assert home.stat().st_mode & 0o777 == 0o700, f"{home} must be private"
    check_exchange(room.exchange, COURSE_ID, INSTRUCTOR)
    users = {u["name"]: u for u in room.api("/hub/api/users")}
    assert set(users) == {INSTRUCTOR, *STUDENTS, BROWSER_STUDENT}
    assert f"formgrade-{COURSE_ID}" in users[INSTRUCTOR]["groups"]
    # students can run the classroom's Python (the repo's interpreter lives under /root)
    done = as_user(room, f"{TAG}-blank", "import torch, specdec, nbgrader; print(specdec.DATA_DIR)")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().startswith(str(room.prefix))
    DONE.add("setup")


# ------------------------------------------------------------------------------ accounts and logins
def secrets_of(room, but=None):
    """What no learner may read: the hub's tokens and cookie secret, every other user's password."""
    found = [
        room.state["admin_token"],
        room.state["proxy_token"],
        (room.hub_dir / "jupyterhub_cookie_secret").read_text().strip(),
    ]
    return found + [p for u, p in room.credentials().items() if u != but]


def test_every_user_has_a_password_of_their_own_in_a_file_only_root_reads(room):
    import pwd
    import re
    import stat

    need("setup")
    path = room.credentials_file
    st = path.stat()
    assert stat.S_IMODE(st.st_mode) == 0o600 and st.st_uid == 0, (oct(st.st_mode), st.st_uid)
    creds = room.credentials()
    assert list(creds) == [INSTRUCTOR, *STUDENTS, BROWSER_STUDENT]
    assert len(set(creds.values())) == len(creds), "two users share a password"
    assert all(re.fullmatch(r"([a-z2-9]{4}-){3}[a-z2-9]{4}", p) for p in creds.values()), creds
    # the hub checks them through PAM against /etc/shadow (a hash there, not locked); the state file has none
    shadow = {line.split(":")[0]: line.split(":")[1] for line in Path("/etc/shadow").read_text().splitlines()}
    assert all(shadow[u].startswith("$") for u in creds), {u: shadow[u][:3] for u in creds}
    state = room.state_file.read_text()
    assert not [u for u, p in creds.items() if p in state]
    assert "password" not in room.state
    # the table printed for the instructor names every user once
    table = room.credentials_table()
    assert all(table.count(f"{u} ") == 1 and creds[u] in table for u in creds), table
    # no learner reads the file, the state, or the hub's folder (database, cookie secret, log)
    learner = f"{TAG}-blank"
    for p in (
        path,
        room.state_file,
        room.hub_dir,
        room.hub_dir / "jupyterhub_cookie_secret",
        room.hub_dir / "jupyterhub.sqlite",
        room.hub_dir / "jupyterhub.log",
    ):
        assert can_read(room, learner, p) == "PermissionError", f"{learner} could read {p}"
    assert stat.S_IMODE((room.hub_dir / "jupyterhub_cookie_secret").stat().st_mode) == 0o600
    # nor finds a secret anywhere it can read: the classroom's folders, /tmp, every process's command line
    # and environment (the hub hands tokens to the proxy and to the servers in their environment, not argv)
    done = as_user(
        room,
        learner,
        SECRET_SCAN,
        args=[str(room.root), str(room.prefix / "venv" / "etc"), "/tmp"],
        input="\n".join(secrets_of(room, but=learner)),
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "none", done.stdout
    assert pwd.getpwnam(learner).pw_uid != 0
    DONE.add("credentials")


def test_a_learner_logs_in_with_their_own_password_and_nobody_with_a_wrong_one(room):
    need("credentials")
    creds = room.credentials()
    a, b = f"{TAG}-correct", f"{TAG}-partial"
    session, answer = room.login(a, creds[a])
    assert answer.status_code == 302, answer.status_code  # logged in: on to the spawn page
    assert (
        session.get(
            f"{room.url}/hub/api/user", headers={"X-XSRFToken": session.cookies.get("_xsrf", path="/hub/")}
        ).json()["name"]
        == a
    )
    from concurrent.futures import ThreadPoolExecutor

    tries = {
        "A with B's password": (a, creds[b]),
        "B with A's password": (b, creds[a]),
        "an empty password": (a, ""),
        "the instructor with a learner's password": (INSTRUCTOR, creds[a]),
        "an unknown user": (f"{TAG}-nobody", creds[a]),
        "root, not a classroom user": ("root", creds[a]),
    }
    with ThreadPoolExecutor(len(tries)) as pool:  # PAM waits 3 s after each wrong password
        refused = dict(zip(tries, pool.map(lambda t: room.login(*t), tries.values())))
    for what, (session, answer) in refused.items():
        assert answer.status_code == 403, (what, answer.status_code)
        assert "Invalid username or password" in answer.text, what
        assert "jupyterhub-hub-login" not in session.cookies, what
    DONE.add("login")


def test_the_instructor_releases_the_assignment_through_formgrader(room):
    need("setup")
    TOKENS[INSTRUCTOR] = token = room.token(INSTRUCTOR)
    t0 = time.monotonic()
    result = formgrader(room, token, f"/assignment/{ASSIGNMENT}/release", "POST")
    assert result["success"], result
    TIMES["release_s"] = time.monotonic() - t0
    released = room.exchange / COURSE_ID / "outbound" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"
    assert released.read_bytes() == (NOTEBOOKS / ASSIGNMENT / f"{ASSIGNMENT}.ipynb").read_bytes()
    listed = {a["name"]: a for a in formgrader(room, token, "/assignments")}
    assert listed[ASSIGNMENT]["releaseable"] and listed[ASSIGNMENT]["status"] == "released", listed[ASSIGNMENT]
    # a student without the graders' group gets no formgrader
    TOKENS[f"{TAG}-blank"] = room.token(f"{TAG}-blank")
    with pytest.raises(urllib.error.HTTPError) as err:
        formgrader(room, TOKENS[f"{TAG}-blank"], "/assignments")
    assert err.value.code == 403
    DONE.add("release")


def test_formgrader_refuses_a_notebook_that_restates_an_open_assignment_and_releases_it_when_forced(room):
    """Release order (docs/classroom.md): with 07 open in the course folder's course.toml, formgrader's Release of 08
    (its given cells restate 07's answers) is refused with the reason; c.OrderedRelease.force_early = True in the
    course folder's nbgrader_config.py releases it, False refuses again. Then 08 is unreleased: the class goes on."""
    need("release")
    import datetime as dt

    token = TOKENS[INSTRUCTOR]
    early, origin = "08_break_even_acceptance", "07_batch_crossover"
    toml, config = room.course_dir / "course.toml", room.course_dir / "nbgrader_config.py"
    before = toml.read_text(), config.read_text()
    closes = (dt.datetime.now(dt.timezone.utc) + dt.timedelta(days=2)).replace(microsecond=0)

    def release():
        return room.api(f"/services/{COURSE_ID}/formgrader/api/assignment/{early}/release", "POST", {}, token=token)

    refusal = (
        f"not released: {early} restates answers of {origin}, which accepts submissions until "
        f"{closes:%Y-%m-%d %H:%M} UTC"
    )
    try:
        toml.write_text(f"[assignments.{origin}]\ndue = {closes.isoformat()}\n")  # (root keeps owner and mode)
        result = release()
        assert result["success"] is False and refusal in result["log"], result
        assert "--OrderedRelease.force_early=True" in result["log"]
        assert not (room.exchange / COURSE_ID / "outbound" / early).exists()
        config.write_text(before[1] + "c.OrderedRelease.force_early = True\n")
        result = release()
        assert result["success"], result
        assert f"releasing {early} while {origin} accepts submissions until" in result["log"], result
        assert (room.exchange / COURSE_ID / "outbound" / early / f"{early}.ipynb").is_file()
        config.write_text(before[1] + "c.OrderedRelease.force_early = False\n")
        result = release()
        assert result["success"] is False and refusal in result["log"], result
    finally:
        toml.write_text(before[0])
        config.write_text(before[1])
    formgrader(room, token, f"/assignment/{early}/unrelease", "POST")
    assert not (room.exchange / COURSE_ID / "outbound" / early).exists()


SUBMITTED = {}


def test_students_fetch_fill_and_submit_through_their_own_servers(room):
    need("release")
    spawn_s = {}
    for user in SUBMIT_ORDER:
        kind = STUDENTS[user]
        spawn_s[user] = room.spawn(user)
        token = TOKENS.get(user) or room.token(user)
        TOKENS[user] = token
        listed = user_api(room, user, token, f"/assignments?course_id={COURSE_ID}")
        assert listed["success"], listed
        rows = {a["assignment_id"]: a for a in listed["value"]}
        assert rows[ASSIGNMENT]["status"] == "released", rows
        fetched = user_api(
            room, user, token, "/assignments/fetch", "POST", {"course_id": COURSE_ID, "assignment_id": ASSIGNMENT}
        )
        assert fetched["success"], fetched
        path = f"/api/contents/{ASSIGNMENT}/{ASSIGNMENT}.ipynb"
        got = user_api(room, user, token, path)
        assert got["type"] == "notebook"
        nb = filled_notebook(kind)
        nb.cells.insert(0, nbformat.v4.new_markdown_cell(f"Submitted by {user} ({kind})."))
        user_api(room, user, token, path, "PUT", {"type": "notebook", "format": "json", "content": nb})
        if (
            user in MEASURED
        ):  # what a speed notebook saves beside itself (specdec/measure/my_measurements.py), to travel along
            user_api(
                room,
                user,
                token,
                f"/api/contents/{ASSIGNMENT}/{INSIGHTS_FILE}",
                "PUT",
                {"type": "file", "format": "text", "content": measurements(user)},
            )
        submitted = user_api(
            room, user, token, "/assignments/submit", "POST", {"course_id": COURSE_ID, "assignment_id": ASSIGNMENT}
        )
        assert submitted["success"], submitted
        rows = [a for a in submitted["value"] if a["assignment_id"] == ASSIGNMENT and a["status"] == "submitted"]
        assert rows and rows[0]["submissions"], submitted
        SUBMITTED[user] = rows[0]["submissions"][-1]["timestamp"]
    TIMES["spawn_s_per_user"] = sum(spawn_s.values()) / len(spawn_s)
    # the blank student resubmits, a correct notebook this time; nbgrader keeps both in inbound/
    user, token = RESUBMITTER, TOKENS[RESUBMITTER]
    nb = filled_notebook("correct")
    nb.cells.insert(0, nbformat.v4.new_markdown_cell(f"Submitted by {user} (resubmitted, correct)."))
    user_api(
        room,
        user,
        token,
        f"/api/contents/{ASSIGNMENT}/{ASSIGNMENT}.ipynb",
        "PUT",
        {"type": "notebook", "format": "json", "content": nb},
    )
    submitted = user_api(
        room, user, token, "/assignments/submit", "POST", {"course_id": COURSE_ID, "assignment_id": ASSIGNMENT}
    )
    rows = [a for a in submitted["value"] if a["assignment_id"] == ASSIGNMENT and a["status"] == "submitted"]
    SUBMITTED["resubmission"] = max(s["timestamp"] for s in rows[0]["submissions"])
    inbound = room.exchange / COURSE_ID / "inbound"
    owners = sorted(p.name.split("+")[0] for p in inbound.iterdir())
    assert owners == sorted([*STUDENTS, RESUBMITTER]), owners
    DONE.add("submit")


def test_the_class_insights_read_the_measurements_that_travelled_with_the_submissions(room, tmp_path, capsys):
    """Two students' my_measurements.json went with their submissions through the exchange; the third ran
    nothing. `autograde class-insights` over inbound/ reads the two, names the third, and plots the class."""
    need("submit")
    from autograde.__main__ import main

    inbound = room.exchange / COURSE_ID / "inbound"
    out = tmp_path / "insights.png"
    assert main(["class-insights", ASSIGNMENT, str(inbound), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    for user in MEASURED:
        assert f"{user}: " in printed and f"v(4) {MEASURED[user]:.2f}" in printed, printed
    missing = sorted(set(STUDENTS) - set(MEASURED))
    assert [f"skipped {u}:" in printed for u in missing] == [True] * len(missing), printed
    assert out.is_file() and out.stat().st_size > 10_000


def test_a_student_cannot_list_or_open_another_students_submission_the_solutions_or_the_gradebook(room):
    need("submit")
    inbound = room.exchange / COURSE_ID / "inbound"
    theirs = next(p for p in inbound.iterdir() if p.name.startswith(f"{TAG}-correct+"))
    other = f"{TAG}-blank"
    assert can_read(room, other, inbound) == "PermissionError", "a student could list inbound/"
    for path in (theirs, theirs / f"{ASSIGNMENT}.ipynb", theirs / "submission_secret.txt"):
        assert can_read(room, other, path) == "PermissionError", f"{other} could open {path}"
    done = as_user(
        room,
        other,
        f"import os\ntry:\n    os.remove({str(theirs / 'timestamp.txt')!r})\n    print('removed')\n"
        "except OSError as e:\n    print(type(e).__name__)",
    )
    assert done.stdout.strip() == "PermissionError", "a student could delete another's submission"
    import pwd

    home = pwd.getpwnam(f"{TAG}-correct").pw_dir
    for path in (
        Path(home) / ASSIGNMENT / f"{ASSIGNMENT}.ipynb",  # fetched and filled, in the home
        room.course_dir,
        room.course_dir / "solutions" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb",
        room.course_dir / "autograde" / "work",
        SOLUTIONS / ASSIGNMENT / f"{ASSIGNMENT}.ipynb",  # the repository itself
        room.exchange / COURSE_ID / "feedback",
    ):
        assert can_read(room, other, path) == "PermissionError", f"{other} could read {path}"
    # what the students may read, they can (so the checks above are not failing for another reason)
    assert can_read(room, other, room.exchange / COURSE_ID / "outbound" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb") == "ok"
    assert can_read(room, INSTRUCTOR, theirs / f"{ASSIGNMENT}.ipynb") == "ok"
    # nor through another student's server: the hub lets a token into its owner's server only
    with pytest.raises(urllib.error.HTTPError) as err:
        user_api(room, f"{TAG}-correct", TOKENS[other], f"/api/contents/{ASSIGNMENT}/{ASSIGNMENT}.ipynb")
    assert err.value.code == 403
    assert user_api(room, other, TOKENS[other], f"/api/contents/{ASSIGNMENT}/{ASSIGNMENT}.ipynb")["type"] == "notebook"
    DONE.add("isolation")


ATTACKER, VICTIM = f"{TAG}-blank", f"{TAG}-correct"


def probe(room, user, requests_):
    """The statuses `user`'s own process gets for [method, url, token, body] requests (classroom.testing)."""
    done = as_user(room, user, HTTP_PROBE, input=json.dumps(requests_))
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


def _to_login(answer):
    """A page of the hub asked with a token and no session: sent to the login page, a refusal."""
    return answer.status_code == 302 and "/hub/login" in answer.headers.get("location", "")


def test_logged_in_as_one_learner_nothing_of_another_learners_is_reachable(room):
    """A logs in with their own password and tries B's server and account every way the hub, the proxy and
    the loopback ports offer: through the hub (session and token), by B's server's own port, by the proxy's
    API, by formgrader's port. B's server runs (it submitted)."""
    import pwd

    import requests

    need("submit", "login")
    a, b = ATTACKER, VICTIM
    session, answer = room.login(a, room.credentials()[a])
    assert answer.status_code == 302
    token = room.session_token(session, a)
    xsrf = {"X-XSRFToken": session.cookies.get("_xsrf", path="/hub/")}
    hub = f"{room.url}/hub/api"
    tries = [
        ("GET", f"{hub}/users/{b}", None),
        ("GET", f"{hub}/users/{b}/tokens", None),
        ("POST", f"{hub}/users/{b}/tokens", {"note": "mine now"}),
        ("POST", f"{hub}/users/{b}/server", {}),
        ("DELETE", f"{hub}/users/{b}/server", None),
        ("PATCH", f"{hub}/users/{a}", {"admin": True}),
        ("PATCH", f"{hub}/users/{b}", {"name": f"{a}-b"}),
        ("POST", f"{hub}/users/{a}/tokens", {"scopes": ["admin:users"]}),
        ("GET", f"{hub}/proxy", None),
        ("POST", f"{hub}/groups/formgrade-{COURSE_ID}/users", {"users": [a]}),
        ("GET", f"{room.url}/user/{b}/api/contents/{ASSIGNMENT}", None),
        ("PUT", f"{room.url}/user/{b}/api/contents/planted.txt", {"type": "file", "format": "text", "content": "x"}),
        ("GET", f"{room.url}/hub/admin", None),
        ("GET", f"{room.url}/hub/spawn/{b}", None),
    ]
    refused = (400, 403, 404)  # 400: "scopes not held by User A" (asking a token for more than A has)
    let_in = []
    for method, url, body in tries:
        by_token = requests.request(
            method, url, json=body, headers={"Authorization": f"token {token}"}, allow_redirects=False, timeout=60
        )
        by_session = session.request(method, url, json=body, headers=xsrf, timeout=60)  # redirects followed
        let_in += [
            (method, url, how, r.status_code, r.text[:200])
            for how, r in (("token", by_token), ("session", by_session))
            if r.status_code not in refused and not _to_login(r)
        ]
    assert not let_in, let_in
    # the session and the token work where A may go (so the refusals above are not a broken login)
    assert session.get(f"{hub}/users/{a}", headers=xsrf, timeout=60).json()["name"] == a
    assert requests.get(f"{hub}/users/{a}", headers={"Authorization": f"token {token}"}, timeout=60).status_code == 200
    # the list of users holds A alone, if the hub answers at all
    listed = requests.get(f"{hub}/users", headers={"Authorization": f"token {token}"}, timeout=60)
    assert listed.status_code == 403 or [u["name"] for u in listed.json()] == [a], listed.text[:300]
    # straight to the loopback ports, from A's own process: B's server (found as an attacker would, in
    # /proc/net/tcp, which names each socket's owner), the proxy's API, the hub itself, formgrader
    assert can_read(room, a, "/proc/net/tcp") == "ok"
    ports = listening_ports(pwd.getpwnam(b).pw_uid)
    assert ports, "B's server listens on no port (is it running?)"
    direct = [
        [m, f"http://127.0.0.1:{port}/user/{b}/api/contents/{ASSIGNMENT}", t, None]
        for port in ports
        for m, t in (("GET", token), ("GET", None))
    ]
    direct += [
        [
            "PUT",
            f"http://127.0.0.1:{port}/user/{b}/api/contents/planted.txt",
            token,
            {"type": "file", "format": "text", "content": "x"},
        ]
        for port in ports
    ]
    proxy = f"http://127.0.0.1:{room.state['proxy_api_port']}/api/routes"
    direct += [
        ["GET", proxy, None, None],
        ["GET", proxy, token, None],
        ["POST", f"{proxy}/user/{b}", None, {"target": "http://127.0.0.1:1"}],
        ["GET", f"http://127.0.0.1:{room.state['hub_port']}/hub/api/users/{b}", token, None],
        [
            "GET",
            f"http://127.0.0.1:{room.state['service_port']}/services/{COURSE_ID}/formgrader/api/assignments",
            token,
            None,
        ],
    ]
    statuses = probe(room, a, direct)
    let_in = [
        (method, url, bool(tok), status)
        for (method, url, tok, _), status in zip(direct, statuses)
        if status not in ((302, 403, 404) if tok is None else refused)
    ]
    assert not let_in, let_in
    assert not (Path(pwd.getpwnam(b).pw_dir) / "planted.txt").exists()
    # the same requests with B's own token do reach B's server (so the refusals above are the hub's doing)
    assert user_api(room, b, TOKENS[b], f"/api/contents/{ASSIGNMENT}")["type"] == "directory"
    DONE.add("attacker")


def test_a_learner_cannot_submit_in_another_learners_name_nor_slip_in_the_solutions(room):
    """nbgrader's own submit with --student B is refused; a folder made by hand in inbound/ (which every learner
    may write) in B's name, or in A's own with its notebook a symbolic link into the solutions, is refused by the
    instructor's collect, which moves it out of inbound/ where it can and names it where it cannot."""
    import pwd

    need("submit")
    a, b = ATTACKER, VICTIM
    home = pwd.getpwnam(a).pw_dir
    done = as_user(room, a, None, cwd=home, args=["-m", "nbgrader", "submit", ASSIGNMENT, "--student", b])
    assert done.returncode != 0 and f"you cannot submit as {b}" in done.stdout + done.stderr, done.stdout + done.stderr
    inbound = room.exchange / COURSE_ID / "inbound"
    assert sorted(p.name.split("+")[0] for p in inbound.iterdir()) == sorted([*STUDENTS, RESUBMITTER])
    import datetime as dt

    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f %Z")  # nbgrader's; the latest of all
    solution = room.course_dir / "solutions" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"
    forged, linked = f"{b}+{ASSIGNMENT}+{stamp}+forged", f"{a}+{ASSIGNMENT}+{stamp}+linked"
    done = as_user(
        room,
        a,
        f"""
import os, shutil
inbound = {str(inbound)!r}
for name, mode in (({forged!r}, 0o770), ({linked!r}, 0o755)):
    os.mkdir(os.path.join(inbound, name), mode)
    os.chmod(os.path.join(inbound, name), mode)
    open(os.path.join(inbound, name, "timestamp.txt"), "w").write({stamp!r})
shutil.copy({f"{home}/{ASSIGNMENT}/{ASSIGNMENT}.ipynb"!r}, os.path.join(inbound, {forged!r}))
os.symlink({str(solution)!r}, os.path.join(inbound, {linked!r}, {f"{ASSIGNMENT}.ipynb"!r}))
print("planted")""",
    )
    assert done.stdout.strip() == "planted", done.stderr
    try:
        result = formgrader(room, TOKENS[INSTRUCTOR], f"/assignment/{ASSIGNMENT}/collect", "POST")
        log = result.get("log", "")
        (ARTIFACTS / "collect_forged.log").write_text(log)
        assert f"refused the submission {inbound / forged}: it names {b} but {a} made" in log, log
        assert f"moved it to {room.course_dir / 'forged'}/" in log, log
        assert f"refused the submission {inbound / linked}" in log and "not a plain folder or file" in log, log
        assert "it stays in inbound/" in log and "sudo rm -r" in log, log
        assert (room.course_dir / "forged" / forged).is_dir() and not (inbound / forged).exists()
        # B's collected submission is B's own (the latest real one); nothing of the solutions was collected
        collected = room.course_dir / "collected"
        assert _utc((collected / b / ASSIGNMENT / "timestamp.txt").read_text()) == _utc(SUBMITTED[b])
        for nb in collected.glob(f"*/{ASSIGNMENT}/{ASSIGNMENT}.ipynb"):
            assert not nb.is_symlink() and nb.read_bytes() != solution.read_bytes(), nb
    finally:
        shutil.rmtree(inbound / linked, ignore_errors=True)  # as the instructor would, with sudo
    DONE.add("forgery")


GRADES = {}
DEADLINE = {}


def _utc(stamp):
    from nbgrader.utils import parse_utc

    return parse_utc(stamp)  # naive UTC, as nbgrader keeps it


def test_the_instructor_sets_a_deadline_in_the_course_file_and_formgrader_shows_it(room):
    """The due date and grace period fall between the real submission times: blank on time, partial
    inside the grace period, correct (and the blank student's resubmission) after it."""
    need("submit")
    import datetime as dt
    import grp
    import pwd

    t = {u: _utc(SUBMITTED[u]) for u in SUBMIT_ORDER}
    blank, partial, correct = (t[u] for u in SUBMIT_ORDER)
    assert blank < partial < correct < _utc(SUBMITTED["resubmission"]), SUBMITTED
    due = blank + (partial - blank) / 2
    grace = (partial - due) + (correct - partial) / 2
    DEADLINE.update(due=due, grace=grace)
    path = room.course_dir / "course.toml"
    path.write_text(
        f'[late_policy]\ngrace = "{grace.total_seconds():.6f}s"\npenalty = "percent_per_day"\n'
        f'percent_per_day = 10\nmax_percent = 50\nresubmission = "latest_on_time"\n\n'
        f'[assignments.{ASSIGNMENT}]\ndue = {due.replace(tzinfo=dt.timezone.utc).isoformat()}\n'
    )
    os.chown(path, pwd.getpwnam(INSTRUCTOR).pw_uid, grp.getgrnam(f"formgrade-{COURSE_ID}").gr_gid)
    os.chmod(path, 0o660)
    assert room.set_deadlines() == {ASSIGNMENT: due}
    listed = {a["name"]: a for a in formgrader(room, TOKENS[INSTRUCTOR], "/assignments")}
    assert listed[ASSIGNMENT]["duedate_notimezone"] == due.isoformat(), listed[ASSIGNMENT]
    DONE.add("deadline")


def test_the_instructor_collects_autogrades_in_the_sandbox_and_releases_feedback(room):
    need("submit", "deadline")
    token = TOKENS[INSTRUCTOR]
    result = formgrader(room, token, f"/assignment/{ASSIGNMENT}/collect", "POST")
    assert result["success"], result
    collected = room.course_dir / "collected"
    assert sorted(p.name for p in collected.iterdir()) == sorted(STUDENTS)
    t0 = time.monotonic()
    # as in the instructor's terminal (the hub sets PYTHONPATH to the course folder for the instructor); the
    # exchange's inbound/ holds every submission, so the course file's resubmission rule can choose
    inbound = room.exchange / COURSE_ID / "inbound"
    done = as_user(
        room,
        INSTRUCTOR,
        None,
        cwd=room.course_dir,
        env={"PYTHONPATH": str(room.course_dir)},
        args=["-m", "autograde", "class", ASSIGNMENT, str(inbound), "--work", "autograde/work", "--jobs", "2"],
    )
    TIMES["autograde_3_s"] = time.monotonic() - t0
    (ARTIFACTS / "autograde.log").write_text(done.stdout + done.stderr)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "unconfined" not in done.stdout + done.stderr
    assert "feedback failed" not in done.stdout, done.stdout[-3000:]
    shutil.copy(room.course_dir / "autograde" / "work" / f"grades_{ASSIGNMENT}.csv", ARTIFACTS)
    with open(room.course_dir / "autograde" / "work" / f"grades_{ASSIGNMENT}.csv") as fh:
        rows = {r["student"]: r for r in csv.DictReader(fh) if r["part"] == "total"}
    totals = {u: (float(r["score"]), float(r["max_score"]), r["status"]) for u, r in rows.items()}
    want = {u: expected_points(kind) for u, kind in STUDENTS.items()}  # the blank student's on-time submission
    assert want[f"{TAG}-correct"] == max_points() and 0 < want[f"{TAG}-partial"] < max_points()
    assert {u: t[0] for u, t in totals.items()} == want, totals
    assert all(t[1] == max_points() and t[2] == "ok" for t in totals.values()), totals
    GRADES.update(want)
    # lateness and penalty: blank on time, partial inside grace, correct after it (10% of 10 for 1 day started)
    blank, partial, correct = SUBMIT_ORDER
    final = {blank: want[blank], partial: want[partial], correct: want[correct] * 0.9}
    got = {
        u: (r["lateness"], float(r["raw_score"]), float(r["penalty"]), float(r["final_score"])) for u, r in rows.items()
    }
    assert got == {
        blank: ("on_time", want[blank], 0, final[blank]),
        partial: ("in_grace", want[partial], 0, final[partial]),
        correct: ("late", want[correct], want[correct] * 0.1, final[correct]),
    }, got
    for u in SUBMIT_ORDER:  # the time nbgrader's exchange gave each graded submission
        assert rows[u]["submitted_at"] == _utc(SUBMITTED[u]).strftime("%Y-%m-%dT%H:%M:%SZ"), (u, rows[u])
    assert "2 submissions, rule latest_on_time: graded the latest on time" in rows[RESUBMITTER]["detail"]
    late_line = next(line for line in done.stdout.splitlines() if line.startswith("late: "))
    assert f"{partial} " in late_line and f"{correct} " in late_line and blank not in late_line, late_line
    assert "without a usable timestamp" not in done.stdout
    # nbgrader's gradebook holds the same: the due date, each graded submission's time and its penalty
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{room.course_dir / 'autograde' / 'work' / 'gradebook.db'}", COURSE_ID) as gb:
        assert gb.find_assignment(ASSIGNMENT).duedate == DEADLINE["due"]
        for u in SUBMIT_ORDER:
            sub = gb.find_submission(ASSIGNMENT, u)
            assert sub.timestamp == _utc(SUBMITTED[u]), (u, sub.timestamp)
            assert abs(sub.late_submission_penalty - (want[u] - final[u])) < 1e-9, (u, sub.late_submission_penalty)
    # the resubmission is still in the exchange; collected/ now holds the submission graded (formgrader compares
    # the two), and what collect had put there (the resubmission) is kept in superseded/
    assert len([p for p in inbound.iterdir() if p.name.startswith(RESUBMITTER + "+")]) == 2
    work = room.course_dir / "autograde" / "work"
    assert _utc((collected / RESUBMITTER / ASSIGNMENT / "timestamp.txt").read_text()) == _utc(SUBMITTED[RESUBMITTER])
    kept = work / "superseded" / RESUBMITTER / ASSIGNMENT / "1" / "timestamp.txt"
    assert _utc(kept.read_text()) == _utc(SUBMITTED["resubmission"]), kept
    # formgrader reads the same gradebook (its submissions list shows the score before the penalty)
    subs = {s["student"]: s for s in formgrader(room, token, f"/submissions/{ASSIGNMENT}")}
    assert {u: subs[u]["score"] for u in STUDENTS} == want, subs
    # the runbook's exports, in the course folder, as the instructor: nbgrader's CSV, Canvas's and Moodle's
    for exporter, to in (
        ("", "export.csv"),
        ("autograde.export.CanvasExport", "canvas.csv"),
        ("autograde.export.MoodleExport", "moodle.csv"),
    ):
        done = as_user(
            room,
            INSTRUCTOR,
            None,
            cwd=room.course_dir,
            env={"PYTHONPATH": str(room.course_dir)},
            args=["-m", "nbgrader", "export", "--to", to] + ([f"--exporter={exporter}"] if exporter else []),
        )
        assert done.returncode == 0, done.stderr[-2000:]
        shutil.copy(room.course_dir / to, ARTIFACTS)
    with open(room.course_dir / "export.csv") as fh:
        exported = {r["student_id"]: float(r["score"]) for r in csv.DictReader(fh) if r["assignment"] == ASSIGNMENT}
    assert exported == final, exported
    with open(room.course_dir / "canvas.csv", newline="") as fh:
        canvas = list(csv.reader(fh))
    assert canvas[0][:5] == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section"] and ASSIGNMENT in canvas[0]
    col = canvas[0].index(ASSIGNMENT)
    assert canvas[1][0] == "Points Possible" and float(canvas[1][col]) == max_points(), canvas[1]
    assert {r[2]: float(r[col]) for r in canvas[2:]} == final, canvas
    with open(room.course_dir / "moodle.csv", newline="") as fh:
        moodle = list(csv.DictReader(fh))
    assert {r["Username"]: float(r[f"{ASSIGNMENT} (out of {max_points():g})"]) for r in moodle} == final, moodle
    result = formgrader(room, token, f"/assignment/{ASSIGNMENT}/release_feedback", "POST")
    assert result["success"], result
    (ARTIFACTS / "release_feedback.log").write_text(result.get("log", ""))
    released = list((room.exchange / COURSE_ID / "feedback").glob("*.html"))
    assert len(released) == len(STUDENTS), released
    DONE.add("graded")


def test_each_student_fetches_feedback_and_sees_only_their_own(room):
    need("graded")
    for user, kind in STUDENTS.items():
        token = TOKENS[user]
        fetched = user_api(
            room,
            user,
            token,
            "/assignments/fetch_feedback",
            "POST",
            {"course_id": COURSE_ID, "assignment_id": ASSIGNMENT},
        )
        assert fetched["success"], fetched
        folder = user_api(room, user, token, f"/api/contents/{ASSIGNMENT}/feedback")
        stamps = [e["name"] for e in folder["content"]]
        assert len(stamps) == 1, stamps
        stamp = urllib.parse.quote(stamps[0])
        files = user_api(room, user, token, f"/api/contents/{ASSIGNMENT}/feedback/{stamp}")["content"]
        assert [f["name"] for f in files] == [f"{ASSIGNMENT}.html"], files
        html = user_api(room, user, token, f"/api/contents/{ASSIGNMENT}/feedback/{stamp}/{ASSIGNMENT}.html")
        text = html["content"]
        assert f"Submitted by {user} ({kind})" in text
        others = [u for u in STUDENTS if u != user and u in text]
        assert not others, f"{user}'s feedback names {others}"
        assert f"{GRADES[user]:g}" in text and "HIDDEN TESTS" not in text
    DONE.add("feedback")


def test_a_learner_cannot_fetch_or_read_another_learners_feedback(room):
    import pwd

    need("graded")
    a, b = ATTACKER, VICTIM
    assert can_read(room, a, room.exchange / COURSE_ID / "feedback") == "PermissionError"
    # nbgrader's fetch_feedback in B's name: a feedback file is found by the hash of its submission's secret,
    # which A does not hold, so A gets nothing of B's
    home = Path(pwd.getpwnam(a).pw_dir)
    done = as_user(room, a, None, cwd=home, args=["-m", "nbgrader", "fetch_feedback", ASSIGNMENT, "--student", b])
    fetched = [p for p in home.rglob("*.html") if f"Submitted by {b}" in p.read_text(errors="replace")]
    assert not fetched, (fetched, done.stdout[-1000:], done.stderr[-1000:])


def test_five_wrong_passwords_lock_the_account_for_the_stated_time(room):
    """The hub refuses a user name, the right password too, for the lockout's time after 5 wrong passwords in a
    row (the test classroom's lockout is LOCKOUT_S; `make classroom`'s is 300 s); other users log in meanwhile."""
    from concurrent.futures import ThreadPoolExecutor

    need("login")
    victim, other = f"{TAG}-partial", f"{TAG}-correct"
    creds = room.credentials()
    assert room.lockout == {"failed_logins_allowed": 5, "lockout_seconds": LOCKOUT_S}
    assert room.login(victim, creds[victim])[1].status_code == 302  # a login clears the earlier failures
    with ThreadPoolExecutor(5) as pool:  # at once: attempts in flight count against the limit
        answers = list(pool.map(lambda i: room.login(victim, f"guess-{i}")[1].status_code, range(5)))
    assert answers == [403] * 5, answers
    locked_at = time.monotonic()
    session, answer = room.login(victim, creds[victim])
    assert answer.status_code == 429 and "Too many failed logins" in answer.text, (
        answer.status_code,
        answer.text[:500],
    )
    assert "jupyterhub-hub-login" not in session.cookies
    assert room.login(other, creds[other])[1].status_code == 302  # one name's lock, not the hub's
    unknown = f"{TAG}-nobody"  # a name nobody has locks the same way
    with ThreadPoolExecutor(5) as pool:
        list(pool.map(lambda i: room.login(unknown, f"guess-{i}"), range(5)))
    assert room.login(unknown, "guess")[1].status_code == 429
    assert f"login lockout: '{victim}' locked for {LOCKOUT_S} s after 5 failed logins" in room.log_tail(10**7)
    time.sleep(max(0.0, locked_at + LOCKOUT_S + 1 - time.monotonic()))
    assert room.login(victim, creds[victim])[1].status_code == 302  # the lock has run out


# ------------------------------------------------------------------------------------------- browser
@pytest.fixture(scope="module")
def browser():
    from browser.lab import CHROMIUM, launch_browser

    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: `apt-get install chromium` (make test does this)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = launch_browser(p)
        yield b
        b.close()


def _login(room, page, user):
    page.goto(f"{room.url}/hub/login")
    page.fill("input[name=username]", user)
    page.fill("input[name=password]", room.credentials()[user])
    page.click("#login_submit")


def test_a_student_in_chromium_fetches_runs_validates_and_submits(room, browser):
    need("release")
    from browser import page as lab_page

    context = browser.new_context(viewport={"width": 1280, "height": 800})
    page = context.new_page()
    page.set_default_timeout(120_000)
    user = BROWSER_STUDENT
    t0 = time.monotonic()
    try:
        _login(room, page, user)  # the hub spawns the server and redirects to /user/<name>/lab
        page.wait_for_url(f"**/user/{user}/lab**", timeout=180_000)
        base = f"{room.url}/user/{user}"
        lab_page.load_lab(page, base)
        lab_page.menu(page, "Nbgrader", "Assignment List")
        panel = page.locator("#nbgrader-assignment-list")
        released = panel.locator("#released_assignments_list")
        row = released.locator(".list_item", has_text=ASSIGNMENT)
        row.get_by_role("button", name="Fetch").click()
        fetched = panel.locator("#fetched_assignments_list")
        fetched.get_by_text(ASSIGNMENT, exact=True).first.wait_for()
        page.screenshot(path=str(ARTIFACTS / "student-assignment-list.png"))
        rel = f"{ASSIGNMENT}/{ASSIGNMENT}.ipynb"
        lab_page.open_notebook(page, base, rel)
        lab_page.run_all_and_wait(page, 180)
        report = lab_page.cell_report(page)
        ran = [r for r in report if r["type"] == "code" and r["execution_count"] is not None]
        assert ran, "Run All ran no cell"
        dialog, result = lab_page.click_validate(page, 180)
        page.screenshot(path=str(ARTIFACTS / "student-validate.png"))
        assert "validation-failed" in result["class"].split(), result  # the untouched notebook fails
        assert "The following cell failed" in result["text"]
        lab_page.dismiss_dialog(dialog)
        lab_page.save(page)
        lab_page.close_current(page)
        lab_page.menu(page, "Nbgrader", "Assignment List")
        row = panel.locator("#fetched_assignments_list .list_item", has_text=ASSIGNMENT).first
        row.get_by_role("button", name="Submit").click()
        panel.locator("#submitted_assignments_list").get_by_text(ASSIGNMENT).first.wait_for()
        page.screenshot(path=str(ARTIFACTS / "student-submitted.png"))
        TIMES["browser_student_s"] = time.monotonic() - t0
    except Exception:
        page.screenshot(path=str(ARTIFACTS / "student-failure.png"))
        raise
    finally:
        context.close()
    inbound = room.exchange / COURSE_ID / "inbound"
    assert any(p.name.startswith(user + "+") for p in inbound.iterdir()), "no submission from the browser student"


def test_formgrader_in_its_own_tab_lists_the_graded_submissions(room, browser):
    """JupyterHub >= 4.1 forbids framing a server (frame-ancestors 'none'), so formgrader inside
    JupyterLab's Formgrader panel stays blank: the instructor opens /services/<course>/formgrader in a tab."""
    need("graded")
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    page = context.new_page()
    page.set_default_timeout(120_000)
    try:
        _login(room, page, INSTRUCTOR)
        page.wait_for_url(f"**/user/{INSTRUCTOR}/**", timeout=180_000)
        response = page.goto(f"{room.url}/services/{COURSE_ID}/formgrader/manage_submissions/{ASSIGNMENT}")
        assert response.ok, response.status
        csp = response.headers.get("content-security-policy", "")
        assert "frame-ancestors 'none'" in csp, csp  # why formgrader gets its own tab
        table = page.locator("table")
        for user in STUDENTS:
            table.get_by_text(user).first.wait_for()
        page.screenshot(path=str(ARTIFACTS / "formgrader-submissions.png"))
        text = table.inner_text()
        for user in STUDENTS:
            line = next(ln for ln in text.splitlines() if user in ln)
            assert f"{GRADES[user]:g} / {max_points():g}" in line, line
    except Exception:
        page.screenshot(path=str(ARTIFACTS / "formgrader-failure.png"))
        raise
    finally:
        context.close()
