"""A class under load (classroom/, docs/classroom.md): the 30 learners of `make classroom` at once, no mocks.

Its own classroom (users sdt<pid>l-instructor, sdt<pid>l-s01 ...; /srv/sdt<pid>l-classroom, /opt/sdt<pid>l-classroom;
JupyterHub on a free port of 127.0.0.1), removed at teardown. Every learner, each in a thread of its own and all
at the same moment: logs in through the hub's login form with their own password, makes a token with that
session, starts their own JupyterLab server through the hub's API, fetches 03_acceptance_math through nbgrader's
server extension, saves a notebook filled as a correct, partial or blank learner would (a first cell names
them), and submits it. All 30 servers run at once (about 150 MiB each: the machine's 24 GB hold them). The
instructor logs in, collects through formgrader and grades `collected/` with `python -m autograde class --jobs 2`
(sandbox on) as their Unix user. Every learner's submission is collected under their own name, and their grade,
the one their kind earns, is in the grades CSV and in the gradebook. Throughout, a probe asks the hub's
API for a user model every 0.5 s (its p99 and max are reported, and bounded), and the memory of the classroom's
processes (PSS of the hub, the proxy and every process of its users) is sampled every 2 s.

The figures go to tests/artifacts/classroom-load/figures.json. SPECDEC_CLASS_SIZE changes the number of learners.
Skips, with the reason, where the machine cannot create users (not root, no useradd).
"""

import csv
import json
import os
import pwd
import shutil
import statistics
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import nbformat
import pytest

from classroom import COURSE_ID, fill
from classroom.hub import free_port
from classroom.measure import memory_in_use_gib, memory_of_all
from classroom.provision import Classroom
from classroom.testing import disposable_classroom

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.notebooks, pytest.mark.timeout(1800)]

ASSIGNMENT = "03_acceptance_math"  # runs in seconds: 30 gradings stay within a few minutes
PARTIAL = "expected_tokens"
SIZE = int(os.environ.get("SPECDEC_CLASS_SIZE", "30"))
TAG = f"sdt{os.getpid() % 100000}l"
INSTRUCTOR = f"{TAG}-instructor"
STUDENTS = [f"{TAG}-s{i:02d}" for i in range(1, SIZE + 1)]
KIND = {s: fill.KINDS[i % 3] for i, s in enumerate(STUDENTS)}
ARTIFACTS = Path(__file__).resolve().parent / "artifacts" / "classroom-load"
PROBE_P99_S = 10.0  # the hub must answer 99% of its API requests within this while the class works


@pytest.fixture(scope="module")
def room():
    room = Classroom(
        INSTRUCTOR, STUDENTS, port=free_port(), root=f"/srv/{TAG}-classroom", prefix=f"/opt/{TAG}-classroom"
    )
    with disposable_classroom(room, ARTIFACTS):
        yield room  # set up by the test, which times it


class Probe(threading.Thread):
    """The hub's API asked for a user model every 0.5 s (the call a spawning learner's page repeats), and the
    memory of the classroom's processes every 2 s, until stopped."""

    def __init__(self, room):
        super().__init__(daemon=True)
        self.room, self.answers, self.failures, self.memory = room, [], [], []
        self.phase = "set-up"  # the phase each answer is counted in (the test moves it on)
        self.halt = threading.Event()
        self.uids = {pwd.getpwnam(u).pw_uid for u in [INSTRUCTOR, *STUDENTS]}

    def run(self):
        pids = {self.room.proc.pid}
        try:
            pids.add(int((self.room.hub_dir / "proxy.pid").read_text()))
        except (OSError, ValueError):
            pass
        i = 0
        while not self.halt.is_set():
            t0 = time.monotonic()
            try:
                self.room.api(f"/hub/api/users/{STUDENTS[i % len(STUDENTS)]}", timeout=60)
                self.answers.append((self.phase, time.monotonic() - t0))
            except Exception as exc:  # counted, and the test fails on any
                self.failures.append(repr(exc))
            if i % 4 == 0:
                self.memory.append((memory_of_all(self.uids, pids)[0] / 1024, memory_in_use_gib()))
            i += 1
            self.halt.wait(max(0.0, 0.5 - (time.monotonic() - t0)))


def learner(room, user, password):
    """One learner's session, start to submission, as their own user; returns their timestamp and timings."""
    t, t0 = {}, time.monotonic()
    session, answer = room.login(user, password)
    assert answer.status_code == 302, (user, answer.status_code)
    t["login_s"] = time.monotonic() - t0
    token = room.session_token(session, user)
    t["spawn_s"] = room.spawn(user, timeout=400, token=token, poll=1.0)

    def api(path, method="GET", body=None):
        result = room.api(f"/user/{user}{path}", method, body, token=token, timeout=300)
        assert not (isinstance(result, dict) and result.get("success") is False), (user, path, result)
        return result

    t1 = time.monotonic()
    listed = api(f"/assignments?course_id={COURSE_ID}")
    assert {a["assignment_id"]: a["status"] for a in listed["value"]}.get(ASSIGNMENT) == "released", (user, listed)
    api("/assignments/fetch", "POST", {"course_id": COURSE_ID, "assignment_id": ASSIGNMENT})
    nb = fill.filled_notebook(ASSIGNMENT, KIND[user], PARTIAL)
    nb.cells.insert(0, nbformat.v4.new_markdown_cell(f"Submitted by {user} ({KIND[user]})."))
    api(f"/api/contents/{ASSIGNMENT}/{ASSIGNMENT}.ipynb", "PUT", {"type": "notebook", "format": "json", "content": nb})
    submitted = api("/assignments/submit", "POST", {"course_id": COURSE_ID, "assignment_id": ASSIGNMENT})
    rows = [a for a in submitted["value"] if a["assignment_id"] == ASSIGNMENT and a["status"] == "submitted"]
    t["fetch_fill_submit_s"] = time.monotonic() - t1
    t["total_s"] = time.monotonic() - t0
    return rows[0]["submissions"][-1]["timestamp"], t


def _latencies(seconds):
    """Count, median, p99 and max (ms) of the probe's answer times."""
    ms = sorted(1000 * s for s in seconds)
    if not ms:
        return {}
    return {
        "answers": len(ms),
        "median_ms": round(statistics.median(ms), 1),
        "p99_ms": round(ms[min(len(ms) - 1, int(0.99 * len(ms)))], 1),
        "max_ms": round(ms[-1], 1),
    }


def _summary(values):
    values = sorted(values)
    return {"median": round(statistics.median(values), 2), "max": round(values[-1], 2), "min": round(values[0], 2)}


def test_a_class_of_30_logs_in_submits_at_once_and_is_graded_with_nothing_lost(room):
    from nbgrader.api import Gradebook
    from nbgrader.utils import parse_utc

    figures = {"learners": SIZE, "cpus": os.cpu_count(), "load_average_at_start": os.getloadavg()}
    memory_before = memory_in_use_gib()
    t_start = time.monotonic()
    room.setup()
    figures["setup_s"] = round(time.monotonic() - t_start, 1)
    room.start()
    figures["hub_start_s"] = round(room.start_seconds, 1)
    creds = room.credentials()
    probe = Probe(room)
    probe.start()
    try:
        # the instructor logs in and releases the assignment through formgrader
        session, answer = room.login(INSTRUCTOR, creds[INSTRUCTOR])
        assert answer.status_code == 302
        itoken = room.session_token(session, INSTRUCTOR)
        fg = f"/services/{COURSE_ID}/formgrader/api/assignment/{ASSIGNMENT}"
        assert room.api(f"{fg}/release", "POST", {}, token=itoken, timeout=300)["success"]

        # the whole class at once
        probe.phase = "class"
        t0 = time.monotonic()
        with ThreadPoolExecutor(SIZE) as pool:
            done = dict(zip(STUDENTS, pool.map(lambda u: learner(room, u, creds[u]), STUDENTS)))
        figures["class_log_in_to_submitted_s"] = round(time.monotonic() - t0, 1)
        for key in ("login_s", "spawn_s", "fetch_fill_submit_s", "total_s"):
            figures[key] = _summary(t[key] for _, t in done.values())
        servers = {u["name"]: u["servers"].get("", {}) for u in room.api("/hub/api/users")}
        figures["servers_running_at_once"] = sum(1 for u in STUDENTS if servers[u].get("ready"))
        assert figures["servers_running_at_once"] == SIZE, servers
        figures["memory_after_submit_pss_gib"] = round(probe.memory[-1][0], 2) if probe.memory else None

        # every submission is in inbound/, made by the learner it names
        inbound = room.exchange / COURSE_ID / "inbound"
        owners = {p.name.split("+")[0]: pwd.getpwuid(p.stat().st_uid).pw_name for p in inbound.iterdir()}
        assert len(list(inbound.iterdir())) == SIZE and owners == {u: u for u in STUDENTS}, owners

        # the instructor collects and grades
        probe.phase = "collect and grade"
        t1 = time.monotonic()
        collected = room.api(f"{fg}/collect", "POST", {}, token=itoken, timeout=600)
        assert collected["success"], collected
        figures["collect_s"] = round(time.monotonic() - t1, 1)
        assert "refused the submission" not in collected.get("log", "")
        folder = room.course_dir / "collected"
        assert sorted(p.name for p in folder.iterdir()) == sorted(STUDENTS)
        for user, (stamp, _) in done.items():  # each under its own name: the learner's own notebook
            text = (folder / user / ASSIGNMENT / f"{ASSIGNMENT}.ipynb").read_text()
            assert f"Submitted by {user} ({KIND[user]})." in text, user
            assert parse_utc((folder / user / ASSIGNMENT / "timestamp.txt").read_text()) == parse_utc(stamp), user
        t2 = time.monotonic()
        graded = room.run_as(
            INSTRUCTOR,
            ["-m", "autograde", "class", ASSIGNMENT, "collected", "--work", "autograde/work", "--jobs", "2"],
            cwd=room.course_dir,
            env={"PYTHONPATH": str(room.course_dir)},
            timeout=1500,
        )
        figures["autograde_s"] = round(time.monotonic() - t2, 1)
        (ARTIFACTS / "autograde.log").write_text(graded.stdout + graded.stderr)
        import re

        each = [float(x) for x in re.findall(r"^\[\d+/\d+\] \S+: .* \(([\d.]+) s\)$", graded.stdout, re.M)]
        if each:  # the grader's own time per submission; over 60 s: the grader's 120 s stall (docs/classroom.md)
            figures["autograde_per_submission_s"] = {**_summary(each), "over_60_s": sum(t > 60 for t in each)}
        assert graded.returncode == 0, graded.stdout[-3000:] + graded.stderr[-3000:]
        assert "unconfined" not in graded.stdout + graded.stderr
        figures["cycle_s"] = round(time.monotonic() - t0, 1)
    finally:
        probe.halt.set()
        probe.join(timeout=30)
        if probe.answers:
            figures["hub_api"] = {"failures": len(probe.failures), **_latencies(s for _, s in probe.answers)}
            for phase in ("class", "collect and grade"):
                figures[f"hub_api_during_{phase.replace(' ', '_')}"] = _latencies(
                    s for p, s in probe.answers if p == phase
                )
        if probe.memory:
            figures["memory_peak_classroom_pss_gib"] = round(max(m[0] for m in probe.memory), 2)
            figures["memory_peak_machine_in_use_gib"] = round(max(m[1] for m in probe.memory), 2)
            figures["memory_machine_in_use_before_gib"] = round(memory_before, 2)
        figures["load_average_at_end"] = os.getloadavg()
        figures["wall_s"] = round(time.monotonic() - t_start, 1)
        (ARTIFACTS / "figures.json").write_text(json.dumps(figures, indent=1))
        print(json.dumps(figures, indent=1))

    # every grade: the CSV and the gradebook hold each learner's, the one their kind earns
    want = {u: fill.expected_points(ASSIGNMENT, KIND[u], PARTIAL) for u in STUDENTS}
    assert len(set(want.values())) == 3
    work = room.course_dir / "autograde" / "work"
    shutil.copy(work / f"grades_{ASSIGNMENT}.csv", ARTIFACTS)
    with open(work / f"grades_{ASSIGNMENT}.csv") as fh:
        every = list(csv.DictReader(fh))
    rows = {r["student"]: r for r in every if r["part"] == "total"}
    got = {u: float(r["score"]) for u, r in rows.items()}
    # on a mismatch: the parts each wrong learner lost, with the grader's detail (which rule, which cell)
    lost = [
        {k: r[k] for k in ("student", "part", "grade_ids", "score", "max_score", "detail")}
        for r in every
        if r["part"] != "total"
        and got.get(r["student"]) != want.get(r["student"])
        and float(r["score"] or 0) < float(r["max_score"] or 0)
    ]
    assert got == want, lost
    assert all(r["status"] == "ok" for r in rows.values()), [r for r in rows.values() if r["status"] != "ok"]
    with Gradebook(f"sqlite:///{work / 'gradebook.db'}", COURSE_ID) as gb:
        assert {u: gb.find_submission(ASSIGNMENT, u).score for u in STUDENTS} == want
    # the hub stayed responsive: every probe answered, 99% of them within PROBE_P99_S
    assert not probe.failures, probe.failures[:5]
    assert figures["hub_api"]["p99_ms"] < 1000 * PROBE_P99_S, figures["hub_api"]
