"""A failure outside the student's code is never the student's zero: the course's package is imported from the
checkout that grades, whatever the environment's install of it points at; a class run first grades the
solution (preflight) and stops with the cause when that fails; a locked cell that fails before any of the
student's code ran makes the submission `error` (no score, manual grading), and `check` says so."""

import csv
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from autograde import REPO, tool_env
from autograde.pipeline import Graded
from autograde.records import RunRecord

A = "01_decode_is_bandwidth_bound"
pytestmark = [pytest.mark.notebooks, pytest.mark.timeout(600)]


@pytest.fixture(scope="module")
def elsewhere(tmp_path_factory):
    """A second checkout of the course (tracked files only), graded by this environment, whose editable
    install of `specdec` points at the first checkout: the sandbox shows the kernel only the second."""
    root = tmp_path_factory.mktemp("elsewhere")
    copy = root / "course"
    files = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout
    for rel in filter(None, files.decode().split("\0")):
        if (REPO / rel).is_file():
            (copy / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / rel, copy / rel)
    subs = root / "subs" / "good"
    subs.mkdir(parents=True)
    shutil.copy(REPO / "solutions" / A / f"{A}.ipynb", subs / f"{A}.ipynb")
    return {"copy": copy, "subs": root / "subs", "root": root}


def _class(course, subs, work, *extra):
    # `python -m autograde` from the copy's folder runs the copy's grader with this environment's packages
    return subprocess.run(
        [sys.executable, "-m", "autograde", "class", A, str(subs), "--work", str(work), *extra],
        capture_output=True,
        text=True,
        cwd=course,
        env=tool_env(),
    )


def _rows(work):
    with open(Path(work) / f"grades_{A}.csv", newline="") as fh:
        return {row["part"]: row for row in csv.DictReader(fh)}


def test_the_environment_imports_specdec_from_another_checkout(elsewhere):
    where = subprocess.run(
        [sys.executable, "-c", "import specdec; print(specdec.__file__)"],
        capture_output=True,
        text=True,
        cwd="/",
        env=tool_env(),
    ).stdout.strip()
    assert where and not where.startswith(str(elsewhere["copy"])), where


def test_a_checkout_graded_with_another_checkouts_environment_gives_full_marks(elsewhere):
    done = _class(elsewhere["copy"], elsewhere["subs"], elsewhere["root"] / "work-good")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert f"course package {elsewhere['copy'] / 'specdec'}" in done.stdout, done.stdout
    total = _rows(elsewhere["root"] / "work-good")["total"]
    assert (total["score"], total["status"]) == ("9", "ok"), total


@pytest.fixture(scope="module")
def broken(elsewhere):
    """The same checkout with a data file the setup cell reads taken away."""
    (elsewhere["copy"] / "data" / "hardware.csv").unlink()
    return elsewhere


def test_the_preflight_stops_a_class_that_cannot_grade_the_solution(broken):
    work = broken["root"] / "work-preflight"
    done = _class(broken["copy"], broken["subs"], work)
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-2000:]
    assert (
        "preflight failed" in done.stderr and "hardware.csv" in done.stderr and "No student was graded" in done.stderr
    ), done.stderr
    assert not (work / f"grades_{A}.csv").exists()


def test_a_failing_setup_cell_is_an_error_not_the_students_zero(broken):
    work = broken["root"] / "work-skip"
    done = _class(broken["copy"], broken["subs"], work, "--skip-preflight")
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-2000:]
    assert "good: error:" in done.stdout and "'setup' raised FileNotFoundError" in done.stdout, done.stdout
    rows = _rows(work)
    assert all(row["status"] == "error" and row["score"] == "" for row in rows.values()), rows
    assert "the grading environment is broken, not the submission" in rows["total"]["detail"]
    with sqlite3.connect(work / "gradebook.db") as db:
        waiting = db.execute("select auto_score, manual_score, needs_manual_grade from grade").fetchall()
    assert waiting and all(r == (None, None, 1) for r in waiting), waiting


def test_check_says_the_course_environment_is_broken(broken):
    done = subprocess.run(
        [sys.executable, "-m", "autograde", "check", str(broken["subs"] / "good" / f"{A}.ipynb")],
        capture_output=True,
        text=True,
        cwd=broken["copy"],
        env=tool_env(),
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Your code is not the cause" in done.stdout and "hardware.csv" in done.stdout, done.stdout


def _graded(events, own_files=()):
    return Graded("s", True, record=RunRecord(locked_errors=events), own_files=list(own_files))


def test_who_is_blamed_for_a_failing_locked_cell():
    early = {
        "cell": 1,
        "grade_id": "setup",
        "ename": "ModuleNotFoundError",
        "evalue": "No module named 'specdec'",
        "after_student_code": False,
    }
    late = dict(early, grade_id="given_answers", ename="NameError", after_student_code=True)
    assert "grading environment is broken" in _graded([early]).course_failure
    assert _graded([early]).locked_notes == []
    # after the student's code ran, or with the student's own files beside the notebook: the student's result
    assert _graded([late]).course_failure == "" and "after the student's code" in _graded([late]).locked_notes[0]
    with_files = _graded([early], own_files=["specdec.py"])
    assert with_files.course_failure == "" and "specdec.py" in with_files.locked_notes[0]


def test_a_course_cell_past_its_time_limit_is_the_courses_failure_never_the_students_points():
    timed_out = Graded("s", True, record=RunRecord(course_timeouts=[{"cell": 31, "seconds": 120}]))
    assert "cell 31" in timed_out.course_failure and "120 s" in timed_out.course_failure
    assert "waits for an instructor" in timed_out.course_failure
    assert (
        Graded("s", True, record=RunRecord(events=[{"kind": "timeout", "cell": 31, "message": "x"}])).course_failure
        == ""
    )
    assert RunRecord.from_dict(timed_out.record.to_dict()).course_timeouts == [{"cell": 31, "seconds": 120}]


def test_the_graders_own_submitted_folder_is_refused_and_left_intact(tmp_path):
    """Grading empties each student's place in WORK/submitted/ before copying the submission there: given that
    folder itself (or a work folder holding it) as input, the tool refuses instead of deleting submissions."""
    work = tmp_path / "work"
    nb_path = work / "submitted" / "ada" / A / f"{A}.ipynb"
    nb_path.parent.mkdir(parents=True)
    shutil.copy(REPO / "solutions" / A / f"{A}.ipynb", nb_path)
    before = nb_path.read_bytes()
    for given in (work / "submitted", work):
        done = subprocess.run(
            [sys.executable, "-m", "autograde", "class", A, str(given), "--work", str(work), "--skip-preflight"],
            capture_output=True,
            text=True,
            cwd="/",
            env=tool_env(),
        )
        assert done.returncode == 2 and "the grader's own submitted/ folder" in done.stderr, done.stderr
        assert nb_path.read_bytes() == before
