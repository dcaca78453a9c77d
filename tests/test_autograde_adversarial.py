"""The adversarial suite: real submissions, graded by the real tool (`python -m autograde class`).

One class run grades every case of tests/adversarial/cases.py (two at a time); a second, short run
checks the whole-notebook time limit.  For each case: the score and status it must get (0 for every
cheat), that the other students were still graded, that the gradebook agrees with grades.csv, and
that the message names the student and the cause.  The sandbox cases aim at the real paths of this
run's gradebook and of another student's files, and at a TCP port this test listens on.
"""

import hashlib
import html
import inspect
import json
import re
import shutil
import socket
import sqlite3
import threading
from pathlib import Path

import nbformat
import pytest
from adversarial import cases
from adversarial.cases import VICTIM, A
from adversarial.classrun import class_run

from autograde import REPO, sandbox
from autograde.release import tool_env

pytestmark = [pytest.mark.notebooks, pytest.mark.timeout(1500)]
PROTECTED = [REPO / "specdec" / "__init__.py", REPO / "data" / "hardware.csv", cases.SOLUTION, cases.RELEASED]
REPORT = REPO / "tests" / "artifacts" / "adversarial_report.md"
# every graded test cell of the released notebook is a grade of its own in the gradebook
RELEASED_TESTS = {
    cases.meta(c)["grade_id"] for c in nbformat.read(str(cases.RELEASED), as_version=4).cells if cases.is_test(c)
}


def _sha(path):
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _run_class(subs, work, *extra):
    env = {**tool_env(), "AUTOGRADE_TEST_SECRET": "the grader's environment must not reach the student"}
    return class_run(A, subs, work, *extra, env=env)


class Listener:
    """A TCP server on the grader's loopback that records every connection a student makes."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.hits = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                conn, addr = self.sock.accept()
            except OSError:
                return
            self.hits.append(addr)
            conn.close()


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    ok, why = sandbox.bwrap_status()
    assert ok, f"the adversarial suite needs the sandbox: {why}"
    root = tmp_path_factory.mktemp("adversarial")
    listener = Listener()
    ctx = cases.Ctx(work=root / "work", port=listener.port, host_marker=root / "host_marker")
    expect = cases.build(root / "subs", ctx)
    victim_submission = next((root / "subs" / VICTIM).rglob("*.ipynb")).read_bytes()
    before = {p: _sha(p) for p in PROTECTED}
    done, rows = _run_class(
        root / "subs", ctx.work, "--cell-timeout", "20", "--notebook-timeout", "120", "--jobs", "2", "--skip-preflight"
    )  # the preflight is tested elsewhere
    listener.sock.close()
    return {
        "root": root,
        "work": ctx.work,
        "ctx": ctx,
        "expect": expect,
        "done": done,
        "rows": rows,
        "listener": listener,
        "before": before,
        "victim_submission": victim_submission,
    }


def _outputs_text(work, student):
    nb = nbformat.read(str(work / "autograded" / student / A / f"{A}.ipynb"), as_version=4)
    return "\n".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []))


# ------------------------------------------------------------------------------------------ the run
def test_the_class_run_completes_and_grades_everyone(run):
    done, rows = run["done"], run["rows"]
    assert done.returncode == 0, (
        f"exit {done.returncode}\nstdout:\n{done.stdout[-4000:]}\nstderr:\n{done.stderr[-4000:]}"
    )
    assert set(rows) == set(run["expect"]), f"students in grades.csv: {sorted(rows)}"
    for student, parts in rows.items():
        assert len(parts) == 5 and "total" in parts, f"{student}: expected 4 parts and a total, got {list(parts)}"
    assert "consistent with the grades" in done.stdout, done.stdout[-2000:]


CASES = [
    "blank",
    "correct",
    "hardcoded",
    "lookup",
    "edited_test",
    "deleted_test",
    "stripped_metadata",
    "cell_type_changed",
    "reordered",
    "forged_metadata",
    "loop_in_answer",
    "loop_after_answer",
    "loop_uninterruptible",
    "os_exit",
    "sys_exit",
    "big_output",
    "truncated_json",
    "other_assignment",
    "missing",
    "monkeypatch",
    "builtins_shadow",
    "hide_errors",
    "patch_during_test",
    "global_oracle",
    "frame_oracle",
    "read_solutions",
    "write_other",
    "network",
    "memory_hog",
]


@pytest.mark.parametrize("student", CASES)
def test_case_gets_its_score_and_status(run, student):
    expect = run["expect"][student]
    total = run["rows"][student]["total"]
    assert float(total["score"]) == expect.score, f"{student} ({expect.what}): {total}"
    assert total["status"] == expect.status, f"{student} ({expect.what}): {total}"
    autograded = expect.score if expect.autograded is None else expect.autograded
    assert float(total["autograded_score"]) == autograded, f"{student}: {total}"
    assert float(total["max_score"]) == cases.FULL
    for needle in expect.detail:
        assert needle in total["detail"], f"{student}: {needle!r} not in {total['detail']!r}"


def test_every_case_is_listed_in_the_suite(run):
    assert sorted(CASES) == sorted(run["expect"]), "add the new case to CASES"


def test_messages_name_the_student_and_the_cause(run):
    out = run["done"].stdout
    for student, expect in run["expect"].items():
        if expect.status == "ok":
            continue
        line = next((ln for ln in out.splitlines() if ln.startswith(f"  {student}: {expect.status}: ")), None)
        assert line, f"no summary line names {student} with status {expect.status}:\n{out[-3000:]}"
        for needle in expect.detail:
            assert needle in line, f"{student}: the cause {needle!r} is not in {line!r}"


def test_gradebook_agrees_with_the_csv(run):
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{run['work'] / 'gradebook.db'}", "speculative-decoding") as gb:
        assert sorted(s.id for s in gb.students) == sorted(run["expect"])
        for student, parts in run["rows"].items():
            nb = gb.find_submission_notebook(A, A, student)
            grades = {g.name: g for g in nb.grades}
            assert set(grades) == RELEASED_TESTS
            assert sum(float(g.score or 0) for g in grades.values()) == float(parts["total"]["score"]), student
            assert sum(float(g.max_score) for g in grades.values()) == cases.FULL
    con = sqlite3.connect(run["work"] / "gradebook.db")
    assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    con.close()


def test_feedback_holds_no_hidden_test(run):
    released_text = json.dumps(nbformat.read(str(cases.RELEASED), as_version=4))
    hidden = []
    for cell in nbformat.read(str(cases.SOLUTION), as_version=4).cells:
        if "### BEGIN HIDDEN TESTS" in cell.source:
            block = cell.source.split("### BEGIN HIDDEN TESTS")[1].split("### END HIDDEN TESTS")[0]
            hidden += [
                ln.strip()
                for ln in block.splitlines()
                if len(ln.strip()) > 15 and json.dumps(ln.strip())[1:-1] not in released_text
            ]
    # 01's hidden tests are its judge's code (a judged cell's hidden block is one line naming it)
    from autograde.judges import nb01

    hidden += [
        ln.strip()
        for ln in inspect.getsource(nb01).splitlines()
        if len(ln.strip()) > 15
        and not ln.strip().startswith(('"', "'", "#"))
        and json.dumps(ln.strip())[1:-1] not in released_text
    ]
    assert len(hidden) > 20
    pages = sorted((run["work"] / "feedback").rglob("*.html"))
    assert len(pages) == len(run["expect"])
    for page in pages:
        text = html.unescape(re.sub(r"<[^>]+>", "", page.read_text()))
        leaked = [ln for ln in hidden if ln in text]
        assert not leaked and "HIDDEN TESTS" not in text, f"{page}: hidden test text in feedback: {leaked[:3]}"
    hardcoded = html.unescape((run["work"] / "feedback" / "hardcoded" / A / f"{A}.html").read_text())
    assert "failed: AssertionError in the hidden tests" in hardcoded
    blank = html.unescape((run["work"] / "feedback" / "blank" / A / f"{A}.html").read_text())
    assert "NotImplementedError at line 2 of the visible test" in blank


# -------------------------------------------------------------------------------------- the sandbox
def test_sandbox_hides_solutions_gradebook_and_other_students(run):
    text = _outputs_text(run["work"], "read_solutions")
    assert "LEAK" not in text, text
    assert text.count("blocked") == 6, text
    assert "clean /proc/1/environ" in text, text  # bwrap's environment is not ours
    assert f"{A}.ipynb" not in text.split("files here:")[1].splitlines()[0]
    assert float(run["rows"]["read_solutions"]["total"]["score"]) == 0


def test_sandbox_cannot_write_outside_the_submission(run):
    text = _outputs_text(run["work"], "write_other")
    assert text.count("blocked") + text.count("WROTE") == 9, text
    for path, digest in run["before"].items():
        assert _sha(path) == digest, f"{path} changed during grading"
    submitted = run["work"] / "submitted" / VICTIM / A / f"{A}.ipynb"
    assert submitted.read_bytes() == run["victim_submission"], "the victim's submitted notebook changed"
    graded = (run["work"] / "autograded" / VICTIM / A / f"{A}.ipynb").read_text()
    assert "vandalised" not in graded
    assert b"vandalised" not in (run["work"] / "gradebook.db").read_bytes()
    assert not run["ctx"].host_marker.exists(), "the sandbox wrote into the host's /tmp"
    assert float(run["rows"][VICTIM]["total"]["score"]) == cases.FULL


def test_sandbox_has_no_network(run):
    text = _outputs_text(run["work"], "network")
    assert "CONNECTED" not in text, text
    assert text.count("blocked") == 5, text
    assert run["listener"].hits == [], f"the student reached the grader's loopback: {run['listener'].hits}"


def test_memory_is_bounded(run):
    text = _outputs_text(run["work"], "memory_hog")
    assert "MemoryError: bytearray of 8 GiB refused" in text, text
    assert "refused: torch 8 GiB" in text, text


def test_time_is_bounded(run):
    parts = run["rows"]["loop_in_answer"]
    assert parts["Part B: the ridge point"]["status"] == "timeout"
    assert float(parts["Part A: weight bytes"]["score"]) == 3
    parts = run["rows"]["loop_uninterruptible"]
    assert parts["Part A: weight bytes"]["status"] == "ok" and float(parts["Part A: weight bytes"]["score"]) == 3
    assert parts["Part B: the ridge point"]["status"] == "timeout"
    assert "not run" in parts["Part B: the ridge point"]["detail"]


def test_output_is_capped(run):
    graded = run["work"] / "autograded" / "big_output" / A / f"{A}.ipynb"
    assert graded.stat().st_size < 3_000_000, graded.stat().st_size
    assert "[autograde: output truncated" in _outputs_text(run["work"], "big_output")


def test_whole_notebook_time_limit(tmp_path):
    expect = cases.build_limits(tmp_path / "subs")
    # limits this short cannot run the solution either: no preflight
    done, rows = _run_class(
        tmp_path / "subs", tmp_path / "work", "--cell-timeout", "3", "--notebook-timeout", "10", "--skip-preflight"
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    for student, e in expect.items():
        total = rows[student]["total"]
        assert (float(total["score"]), total["status"]) == (e.score, e.status), total
        assert all(n in total["detail"] for n in e.detail), total


@pytest.mark.filterwarnings("ignore::Warning")
def test_without_the_guard_the_judges_still_hold(tmp_path, run):
    """These cheats scored 9, 9 and 4 of 9 under plain nbgrader without the guard, when 01's hidden tests ran in the
    student's kernel (the proof that they are real attacks). 01's test cells are now decided by judges outside the
    kernel (issue 61), so without the guard they still score nothing but the input checks the VALIDATING answers
    meet honestly: the guard and the scan are defence in depth that can only add a flag."""
    from autograde.course import Course

    course = Course(tmp_path / "work", cell_timeout=20, notebook_timeout=120, guard=False)
    course.prepare(A)
    for student, unguarded in (("hide_errors", 0), ("builtins_shadow", 4), ("global_oracle", 0)):
        dest = course.path("submitted", student, A)
        dest.mkdir(parents=True)
        shutil.copy(next((run["root"] / "subs" / student).rglob("*.ipynb")), dest / f"{A}.ipynb")
        ok, log = course.autograde(A, student)
        assert ok, log[-2000:]
        with course.gradebook() as gb:
            score = sum(float(g.score or 0) for g in gb.find_submission_notebook(A, A, student).grades)
        assert score == unguarded, f"{student} without the guard: {score}"


def test_write_report(run):
    """tests/artifacts/adversarial_report.md: each case with its score and status (for the record)."""
    lines = ["| case | what it does | score | autograded | status | seconds / detail |", "|---|---|---|---|---|---|"]
    for student, e in sorted(run["expect"].items()):
        total = run["rows"][student]["total"]
        lines.append(
            f"| {student} | {e.what} | {total['score']}/{total['max_score']} | {total['autograded_score']} "
            f"| {total['status']} | {total['detail'][:160]} |"
        )
    REPORT.parent.mkdir(parents=True, exist_ok=True)
    REPORT.write_text("\n".join(lines) + "\n\n```\n" + run["done"].stdout[-6000:] + "\n```\n")
    print("\n".join(lines))
