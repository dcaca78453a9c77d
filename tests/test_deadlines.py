"""Deadlines, the late policy, resubmissions and the LMS export (autograde/deadlines.py, autograde/export.py):
each penalty rule, each resubmission rule, and each bad input named by file and field. No kernel runs,
except in the one class run at the end (marked `notebooks`)."""

import csv
import datetime as dt
import os
import subprocess
import sys

import nbformat
import pytest

from autograde import REPO, deadlines, tool_env
from autograde.assignment import load_assignment
from autograde.deadlines import PolicyError, Rule, assess, choose, load_policy, penalty_points
from autograde.grade_class import discover

# nbgrader's own Gradebook.add_submission warns (SQLAlchemy autoflush) while the gradebook fixture builds
pytestmark = pytest.mark.filterwarnings("ignore::sqlalchemy.exc.SAWarning")
A = "03_acceptance_math"
UTC = dt.timezone.utc
DUE = dt.datetime(2026, 12, 9, 16, 0, tzinfo=UTC)
NOW = DUE + dt.timedelta(days=30)


def course_file(tmp_path, text):
    path = tmp_path / "course.toml"
    path.write_text(text)
    return path


def rule(**kw):
    base = dict(
        assignment=A,
        due=DUE,
        grace=dt.timedelta(minutes=15),
        penalty="percent_per_day",
        percent_per_day=10,
        max_percent=50,
    )
    return Rule(**{**base, **kw})


def at(**delta):
    return DUE + dt.timedelta(**delta)


# ---------------------------------------------------------------------------------------- the course file
def test_the_course_file_gives_each_assignment_its_due_date_and_the_shared_policy(tmp_path):
    path = course_file(
        tmp_path,
        f"""
[late_policy]
grace = "15m"
penalty = "percent_per_day"
percent_per_day = 10
max_percent = 50
resubmission = "latest_on_time"
[assignments.{A}]
due = 2026-12-09T17:00:00+01:00
[assignments.04_speculative_decoder]
due = "2026-12-10 09:30 Europe/Berlin"
penalty = "zero"
grace = "2h"
""",
    )
    policy = load_policy(path, known=[A, "04_speculative_decoder", "05_acceptance_in_practice"])
    r3, r4, r5 = (policy.rule(n) for n in (A, "04_speculative_decoder", "05_acceptance_in_practice"))
    assert r3.due == DUE and r3.grace == dt.timedelta(minutes=15) and r3.penalty == "percent_per_day"
    assert r3.resubmission == "latest_on_time" and (r3.percent_per_day, r3.max_percent) == (10, 50)
    assert deadlines.utc(r4.due) == dt.datetime(2026, 12, 10, 8, 30, tzinfo=UTC)  # CET is UTC+1 in December
    assert (r4.penalty, r4.grace, r4.resubmission) == ("zero", dt.timedelta(hours=2), "latest_on_time")
    assert r5.due is None and r5.penalty == "percent_per_day"  # no deadline, shared policy
    assert "due 2026-12-09T17:00:00+01:00 (UTC 2026-12-09 16:00)" in r3.describe()


def test_the_shipped_course_file_loads_and_sets_no_deadline_by_default():
    from autograde import assignments

    policy = load_policy(REPO / "course.toml", known=assignments())
    assert all(policy.rule(n).due is None for n in assignments())
    assert policy.default.resubmission in deadlines.RESUBMISSION_RULES


@pytest.mark.parametrize(
    "due, message",
    [
        ('"next friday"', r"due: 'next friday' is not a date and time with a time zone"),
        ("2026-12-09T17:00:00", r"due: 2026-12-09T17:00:00 has no time zone"),
        ("2026-12-09", r"due: 2026-12-09 is a date without a time and a time zone"),
        ('"2026-12-09 17:00 Mars/Olympus"', r"is not a date and time with a time zone"),
        ('"2026-12-09T17:00"', r"due: 2026-12-09T17:00:00 has no time zone"),
        ("17", r"due: 17 is not a date and time"),
    ],
)
def test_a_due_date_that_does_not_parse_is_an_error_naming_the_file_and_field(tmp_path, due, message):
    path = course_file(tmp_path, f"[assignments.{A}]\ndue = {due}\n")
    with pytest.raises(PolicyError, match=message) as err:
        load_policy(path, known=[A])
    assert f"{path}: [assignments.{A}] due" in str(err.value)


@pytest.mark.parametrize(
    "key, value, message",
    [
        ("percent_per_day", "150", r"\[late_policy\] percent_per_day: 150 % is outside \[0, 100\] %"),
        ("percent_per_day", "-5", r"\[late_policy\] percent_per_day: -5 % is outside \[0, 100\] %"),
        ("max_percent", "101", r"\[late_policy\] max_percent: 101 % is outside \[0, 100\] %"),
        ("percent_per_day", '"ten"', r"percent_per_day: 'ten' is not a number of percent"),
        ("penalty", '"half"', r"\[late_policy\] penalty: 'half' is not one of none, zero, percent_per_day"),
        ("resubmission", '"first"', r"resubmission: 'first' is not one of latest, latest_on_time"),
        ("grace", '"soon"', r"\[late_policy\] grace: 'soon' is not a duration"),
        ("grace", '"-1h"', r"grace: '-1h' must be a duration of 0 or more"),
        ("graze", '"1h"', r"unknown key\(s\) \['graze'\]"),
    ],
)
def test_a_bad_policy_value_is_an_error_naming_the_file_and_field(tmp_path, key, value, message):
    path = course_file(
        tmp_path,
        f'[late_policy]\npenalty = "percent_per_day"\npercent_per_day = 10\n{key} = {value}\n'
        if key not in ("penalty", "percent_per_day")
        else f"[late_policy]\n{key} = {value}\n",
    )
    with pytest.raises(PolicyError, match=message) as err:
        load_policy(path)
    assert str(path) in str(err.value)


def test_an_assignment_table_that_names_no_assignment_and_a_broken_file_are_errors(tmp_path):
    path = course_file(tmp_path, '[assignments.03_acceptance_maths]\ndue = 2026-12-09T17:00:00Z\n')
    with pytest.raises(PolicyError, match=r"\[assignments.03_acceptance_maths\]: no assignment is called"):
        load_policy(path, known=[A])
    path.write_text("[late_policy\ngrace = 1")
    with pytest.raises(PolicyError, match="not a readable TOML file"):
        load_policy(path)
    with pytest.raises(PolicyError, match="does not exist"):
        load_policy(tmp_path / "nowhere.toml")
    path.write_text('[late_policy]\npenalty = "percent_per_day"\n')
    with pytest.raises(PolicyError, match="needs percent_per_day above 0"):
        load_policy(path)


# ---------------------------------------------------------------------------------------- each policy
@pytest.mark.parametrize(
    "when, status, hours, percent",
    [
        (at(hours=-2), "on_time", 0, 0),
        (at(), "on_time", 0, 0),
        (at(minutes=15), "in_grace", 0.25, 0),  # the end of the grace period is still in it
        (at(minutes=15, seconds=1), "late", 0.2503, 10),  # one day started, counted from the due date
        (at(hours=24), "late", 24, 10),
        (at(hours=24, seconds=1), "late", 24.0003, 20),
        (at(days=9), "late", 216, 50),  # capped at max_percent
    ],
)
def test_percent_per_day_counts_days_started_after_the_due_date_with_a_cap(when, status, hours, percent):
    late = assess(rule(), when, now=NOW)
    assert (late.status, late.hours_late, late.percent) == (status, hours, percent), late
    assert penalty_points(8, late) == pytest.approx(8 * percent / 100)


def test_zero_takes_the_whole_score_and_none_takes_nothing_but_both_report_the_lateness():
    zero, none = assess(rule(penalty="zero"), at(hours=1), now=NOW), assess(rule(penalty="none"), at(hours=1), now=NOW)
    assert (zero.status, penalty_points(7, zero)) == ("late", 7)
    assert (none.status, none.hours_late, penalty_points(7, none)) == ("late", 1, 0)
    assert penalty_points(0, zero) == 0 and penalty_points(None, zero) == 0
    assert assess(rule(penalty="zero"), at(minutes=10), now=NOW).status == "in_grace"


def test_without_a_deadline_nothing_is_late_and_without_a_timestamp_it_is_reported_not_on_time():
    assert assess(rule(due=None), at(days=3), now=NOW).status == "no_deadline"
    missing = assess(rule(), None, now=NOW, why_missing="timestamp.txt: empty")
    assert missing.status == "no_timestamp" and missing.needs_attention and missing.percent == 0
    assert "timestamp.txt: empty" in missing.detail


def test_a_timestamp_in_the_future_is_reported_with_its_time():
    late = assess(rule(), NOW + dt.timedelta(hours=1), now=NOW)
    assert late.status == "bad_timestamp" and late.needs_attention and late.percent == 0
    assert "is in the future" in late.detail
    assert assess(rule(), NOW + dt.timedelta(minutes=4), now=NOW).status == "late"  # clock skew is tolerated


@pytest.mark.parametrize(
    "policy, pick, words", [("latest", "c", "the latest"), ("latest_on_time", "b", "the latest on time")]
)
def test_resubmissions_are_chosen_by_the_stated_rule(policy, pick, words):
    attempts = [(at(hours=-3), "a"), (at(minutes=5), "b"), (at(hours=5), "c")]
    chosen, note = choose(rule(resubmission=policy), attempts)
    assert chosen == pick and f"rule {policy}: graded {words}" in note and "3 submissions" in note
    chosen, note = choose(rule(resubmission="latest_on_time"), [(at(hours=2), "x"), (at(hours=5), "y")])
    assert chosen == "y" and "none was on time" in note


def test_the_nbgrader_plugin_takes_the_same_penalty_as_the_csv(tmp_path):
    path = course_file(
        tmp_path,
        f'[late_policy]\npenalty = "percent_per_day"\npercent_per_day = 25\n'
        f'grace = "1h"\n[assignments.{A}]\ndue = 2026-12-09T16:00:00Z\n',
    )

    from traitlets.config import Configurable

    class Step(Configurable):  # nbgrader's AssignLatePenalties, as far as the plugin reads it
        assignment_id = A

    plugin = deadlines.CoursePenalty(parent=Step(), course_file=str(path))
    assert plugin.late_submission_penalty("s", 8.0, 1800) is None  # inside grace
    assert plugin.late_submission_penalty("s", 8.0, 2 * 3600) == 2.0  # 1 day started: 25%
    expected = penalty_points(8.0, assess(load_policy(path).rule(A), DUE + dt.timedelta(days=2, hours=1), now=NOW))
    assert plugin.late_submission_penalty("s", 8.0, (2 * 24 + 1) * 3600) == expected == 6.0


# ---------------------------------------------------------------------------------------- timestamps
def test_the_timestamps_csv_reads_offsets_and_zones_and_names_a_bad_line_and_field(tmp_path):
    path = tmp_path / "timestamps.csv"
    path.write_text("student,submitted_at\nada,2026-12-09T17:05:00+01:00\nbob,2026-12-09 16:00 UTC\n")
    assert deadlines.read_timestamps_csv(path) == {"ada": at(minutes=5), "bob": DUE}
    path.write_text("student,submitted_at\nada,2026-12-09T17:05:00+01:00\nbob,yesterday\n")
    with pytest.raises(PolicyError, match=r"timestamps.csv, line 3, field submitted_at: 'yesterday' is not a date"):
        deadlines.read_timestamps_csv(path)
    path.write_text("student,submitted_at\nada,2026-12-09T17:05:00\n")
    with pytest.raises(PolicyError, match=r"line 2, field submitted_at: .* has no time zone"):
        deadlines.read_timestamps_csv(path)
    path.write_text("name,when\nada,2026-12-09T17:05:00Z\n")
    with pytest.raises(PolicyError, match=r"must name the columns student and submitted_at"):
        deadlines.read_timestamps_csv(path)
    path.write_text("student,submitted_at\nada,2026-12-09T17:05:00Z\nada,2026-12-09T17:06:00Z\n")
    with pytest.raises(PolicyError, match=r"line 3: student 'ada' has a second row"):
        deadlines.read_timestamps_csv(path)


def test_nbgraders_timestamp_file_is_read_and_an_unreadable_one_is_named(tmp_path):
    good = tmp_path / "timestamp.txt"
    good.write_text("2026-12-09 16:05:00.123456 UTC")
    assert deadlines.read_timestamp_file(good)[0] == at(minutes=5, microseconds=123456)
    good.write_text("2026-12-09 17:05:00.000000 CET")
    assert deadlines.read_timestamp_file(good)[0] == at(minutes=5)
    good.write_text("garbage!")
    moment, why = deadlines.read_timestamp_file(good)
    assert moment is None and f"{good}: 'garbage!' is not a timestamp" == why
    good.write_text("")
    assert deadlines.read_timestamp_file(good) == (None, f"{good}: empty")


def _notebook(path):
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nbformat.read(str(REPO / "notebooks" / A / f"{A}.ipynb"), as_version=4), str(path))


def test_discover_picks_a_resubmission_from_the_exchange_inbound_and_reads_its_timestamp(tmp_path):
    inbound = tmp_path / "inbound"
    for student, stamps in {
        "ada": ["2026-12-09 15:00:00.000000 UTC", "2026-12-09 18:00:00.000000 UTC"],
        "bob": ["2026-12-09 16:10:00.000000 UTC"],
    }.items():
        for stamp in stamps:
            folder = inbound / f"{student}+{A}+{stamp}+rAnD0m"
            _notebook(folder / f"{A}.ipynb")
            (folder / "timestamp.txt").write_text(stamp)
    (inbound / "ada+04_speculative_decoder+2026-12-09 15:00:00.000000 UTC").mkdir()  # another assignment
    assignment = load_assignment(A)
    for policy, when, status in (("latest", at(hours=2), "late"), ("latest_on_time", at(hours=-1), "on_time")):
        subs = {s.student: s for s in discover(inbound, assignment, rule=rule(resubmission=policy), now=NOW)}
        assert sorted(subs) == ["ada", "bob"]
        assert subs["ada"].submitted_at == when and subs["ada"].lateness.status == status
        assert f"2 submissions, rule {policy}" in subs["ada"].detail
        assert subs["bob"].lateness.status == "in_grace"
    assert len(list(inbound.iterdir())) == 4  # nothing moved or removed


def test_discover_reports_a_folder_without_a_notebook_and_a_bad_timestamp_as_rows(tmp_path):
    subs_dir = tmp_path / "subs"
    (subs_dir / "empty").mkdir(parents=True)
    (subs_dir / "empty" / "notes.txt").write_text("I ran out of time")
    _notebook(subs_dir / "garbled" / f"{A}.ipynb")
    (subs_dir / "garbled" / "timestamp.txt").write_text("not a time")
    _notebook(subs_dir / "future.ipynb")
    _notebook(subs_dir / "plain.ipynb")
    stamps = {"future": NOW + dt.timedelta(days=2), "empty": DUE}
    subs = {s.student: s for s in discover(subs_dir, load_assignment(A), rule=rule(), stamps=stamps, now=NOW)}
    assert subs["empty"].status == "missing"
    assert f"no .ipynb file in the submission folder {subs_dir / 'empty'}" in subs["empty"].detail
    assert subs["empty"].lateness.status == "on_time"
    assert subs["garbled"].lateness.status == "no_timestamp"
    assert f"{subs_dir / 'garbled' / 'timestamp.txt'}: 'not a time' is not a timestamp" in subs["garbled"].detail
    assert subs["future"].lateness.status == "bad_timestamp" and "in the future" in subs["future"].detail
    assert subs["plain"].lateness.status == "no_timestamp"
    assert "no row for 'plain' in timestamps.csv" in subs["plain"].detail
    assert (subs_dir / "empty" / "notes.txt").exists()


def test_the_courses_collected_folder_gets_the_submission_graded_and_keeps_what_it_held(tmp_path, monkeypatch):
    from traitlets.config import Config

    import autograde.course
    from autograde.course import Course
    from autograde.grade_class import align_collected

    inbound = tmp_path / "inbound"
    for stamp in ("2026-12-09 15:00:00.000000 UTC", "2026-12-09 18:00:00.000000 UTC"):
        folder = inbound / f"ada+{A}+{stamp}"
        _notebook(folder / f"{A}.ipynb")
        (folder / "timestamp.txt").write_text(stamp)
    collected = tmp_path / "collected" / "ada" / A  # nbgrader collect took the latest
    collected.parent.mkdir(parents=True)
    import shutil

    shutil.copytree(inbound / f"ada+{A}+2026-12-09 18:00:00.000000 UTC", collected)
    cfg = Config()
    cfg.CourseDirectory.submitted_directory = str(tmp_path / "collected")
    monkeypatch.setattr(autograde.course, "load_course_config", lambda: cfg)
    subs = discover(inbound, load_assignment(A), rule=rule(resubmission="latest_on_time"), now=NOW)
    course = Course.__new__(Course)  # paths only: no nbgrader run
    course.work, course.config = tmp_path / "work", Config()
    course.config.CourseDirectory.root = str(REPO)
    course.config.CourseDirectory.submitted_directory = str(tmp_path / "work" / "submitted")
    assert align_collected(course, load_assignment(A), subs, out=open(os.devnull, "w")) == ["ada"]
    assert (collected / "timestamp.txt").read_text().startswith("2026-12-09 15:00")
    kept = tmp_path / "work" / "superseded" / "ada" / A / "1"
    assert (kept / "timestamp.txt").read_text().startswith("2026-12-09 18:00") and (kept / f"{A}.ipynb").exists()
    assert align_collected(course, load_assignment(A), subs, out=open(os.devnull, "w")) == []  # already aligned
    assert len(list(inbound.iterdir())) == 2


def test_bad_input_stops_a_class_run_before_anything_is_graded(tmp_path):
    from autograde.grade_class import grade_class

    subs = tmp_path / "subs"
    _notebook(subs / "ada.ipynb")
    bad = course_file(tmp_path, f"[assignments.{A}]\ndue = \"tomorrow\"\n")
    with pytest.raises(ValueError, match=r"course.toml: \[assignments.03_acceptance_math\] due: 'tomorrow'"):
        grade_class(A, subs, work=tmp_path / "work", course_file=bad, sandboxed=False)
    (subs / "timestamps.csv").write_text("student,submitted_at\nada,soon\n")
    with pytest.raises(ValueError, match=r"timestamps.csv, line 2, field submitted_at"):
        grade_class(A, subs, work=tmp_path / "work", sandboxed=False)
    with pytest.raises(ValueError, match=r"the timestamps file .*nowhere.csv does not exist"):
        grade_class(A, subs, work=tmp_path / "work", timestamps=tmp_path / "nowhere.csv", sandboxed=False)
    assert not (tmp_path / "work").exists() and (subs / "ada.ipynb").exists()


def test_the_classroom_writes_the_course_folders_due_dates_into_the_gradebook_and_names_a_bad_file(tmp_path):
    from nbgrader.api import Gradebook

    from classroom import ClassroomError
    from classroom.provision import Classroom

    room = Classroom("sd-instructor", ["sd-student01"], root=tmp_path / "room", prefix=tmp_path / "env")
    (room.course_dir / "autograde" / "work").mkdir(parents=True)
    course_file(room.course_dir, f"[assignments.{A}]\ndue = 2026-12-09T17:00:00+01:00\n")
    assert room.set_deadlines(chown=False) == {A: dt.datetime(2026, 12, 9, 16)}
    with Gradebook(
        f"sqlite:///{room.course_dir / 'autograde' / 'work' / 'gradebook.db'}", "speculative-decoding"
    ) as gb:
        assert gb.find_assignment(A).duedate == dt.datetime(2026, 12, 9, 16)
    course_file(room.course_dir, "[late_policy]\npercent_per_day = 120\n")
    with pytest.raises(ClassroomError, match=r"course.toml: \[late_policy\] percent_per_day: 120 % is outside"):
        room.set_deadlines(chown=False)


def test_release_refuses_a_bad_course_file_before_writing(tmp_path, monkeypatch):
    from autograde.release import release

    monkeypatch.setattr(deadlines, "COURSE_FILE", course_file(tmp_path, "[late_policy]\nmax_percent = 500\n"))
    with pytest.raises(PolicyError, match=r"max_percent: 500 % is outside \[0, 100\] %"):
        release([A], release_dir=str(tmp_path / "r"), db_url=f"sqlite:///{tmp_path / 'g.db'}", given=False)
    assert not (tmp_path / "r").exists() and not (tmp_path / "g.db").exists()


# ---------------------------------------------------------------------------------------- gradebook, export
@pytest.fixture
def gradebook(tmp_path):
    """A gradebook with one assignment of 10 points, due DUE, and three students: graded late with a penalty,
    waiting for manual grading, and never submitted."""
    from nbgrader.api import Gradebook

    from autograde import put_tools_on_path

    put_tools_on_path()
    url = f"sqlite:///{tmp_path / 'gradebook.db'}"
    with Gradebook(url, "speculative-decoding") as gb:
        gb.add_assignment(A)
        gb.add_notebook(A, A)
        gb.add_grade_cell("g1", A, A, max_score=10, cell_type="code")
        gb.add_solution_cell("g1", A, A)
        for sid, first, last in (("ada", "Ada", "Lovelace"), ("bob", None, None), ("cyd", None, None)):
            gb.add_student(sid, first_name=first, last_name=last)
        for sid, auto, manual in (("ada", 8.0, False), ("bob", None, True)):
            gb.add_submission(A, sid, timestamp=DUE.replace(tzinfo=None) + dt.timedelta(hours=5))
            grade = gb.find_grade("g1", A, A, sid)
            grade.auto_score, grade.needs_manual_grade = auto, manual
            gb.find_submission_notebook(A, A, sid).late_submission_penalty = 0.8 if sid == "ada" else None
        gb.db.commit()
    return url


def test_write_duedates_puts_the_course_files_dates_into_the_gradebook(gradebook, tmp_path):
    from nbgrader.api import Gradebook

    policy = load_policy(
        course_file(tmp_path, f"[assignments.{A}]\ndue = \"2026-12-09 17:00 Europe/Berlin\"\n"), known=[A]
    )
    assert deadlines.write_duedates(gradebook, "speculative-decoding", policy, [A]) == {A: dt.datetime(2026, 12, 9, 16)}
    with Gradebook(gradebook, "speculative-decoding") as gb:
        assert gb.find_assignment(A).duedate == dt.datetime(2026, 12, 9, 16)
        assert gb.find_submission(A, "ada").total_seconds_late == 5 * 3600  # nbgrader's own view agrees


def _export(gradebook, exporter, tmp_path):
    out = tmp_path / f"{exporter}.csv"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "nbgrader",
            "export",
            f"--exporter=autograde.export.{exporter}",
            "--to",
            str(out),
            "--db",
            gradebook,
            "--course",
            "speculative-decoding",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**tool_env(), "PYTHONPATH": str(REPO)},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    with open(out, newline="") as fh:
        return list(csv.reader(fh)), done.stderr


def test_the_canvas_export_has_canvas_columns_a_points_row_and_the_score_after_the_penalty(gradebook, tmp_path):
    rows, log = _export(gradebook, "CanvasExport", tmp_path)
    assert rows[0] == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", A]
    assert rows[1] == ["Points Possible", "", "", "", "", "10"]
    assert rows[2:] == [
        ["Lovelace, Ada", "", "ada", "ada", "", "7.2"],
        ["bob", "", "bob", "bob", "", ""],  # waits for manual grading: empty, not 0
        ["cyd", "", "cyd", "cyd", "", ""],
    ]  # never submitted: empty
    assert "bob: 03_acceptance_math waits for manual grading" in log


def test_the_moodle_export_has_moodle_columns(gradebook, tmp_path):
    rows, _ = _export(gradebook, "MoodleExport", tmp_path)
    assert rows[0] == ["First name", "Last name", "Username", "ID number", "Email address", f"{A} (out of 10)"]
    assert rows[1] == ["Ada", "Lovelace", "ada", "", "", "7.2"]
    assert [r[2] for r in rows[1:]] == ["ada", "bob", "cyd"]


# ---------------------------------------------------------------------------------------- a class run
@pytest.mark.notebooks
@pytest.mark.timeout(600)
def test_a_class_run_writes_lateness_and_penalties_into_the_csv_and_the_gradebook(tmp_path):
    from classroom import fill

    subs = tmp_path / "subs"
    subs.mkdir()
    for who in ("ontime", "grace", "late"):
        nbformat.write(fill.filled_notebook(A, "correct", "expected_tokens"), str(subs / f"{who}.ipynb"))
    (subs / "nothing").mkdir()
    (subs / "timestamps.csv").write_text(
        "student,submitted_at\nontime,2026-11-25T16:59:00+01:00\n"
        "grace,2026-11-25T16:10:00Z\nlate,2026-11-26 18:00 Europe/Berlin\n"
    )
    path = course_file(
        tmp_path,
        f'[late_policy]\ngrace = "15m"\npenalty = "percent_per_day"\npercent_per_day = 10\n'
        f'max_percent = 50\n[assignments.{A}]\ndue = 2026-11-25T17:00:00+01:00\n',
    )
    work = tmp_path / "work"
    done = subprocess.run(
        [sys.executable, "-m", "autograde", "class", A, str(subs), "--work", str(work), "--course-file", str(path)],
        capture_output=True,
        text=True,
        cwd="/",
        env={**tool_env(), "PYTHONPATH": str(REPO)},
    )
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]  # the folder without a timestamp
    assert "consistent with the grades" in done.stdout, done.stdout[-3000:]
    assert "1 submission(s) without a usable timestamp" in done.stdout and "nothing: no_timestamp" in done.stdout
    with open(work / f"grades_{A}.csv", newline="") as fh:
        total = {r["student"]: r for r in csv.DictReader(fh) if r["part"] == "total"}
    got = {
        s: (r["submitted_at"], r["lateness"], r["hours_late"], r["raw_score"], r["penalty"], r["final_score"])
        for s, r in total.items()
    }
    assert got == {
        "ontime": ("2026-11-25T15:59:00Z", "on_time", "0", "10", "0", "10"),
        "grace": ("2026-11-25T16:10:00Z", "in_grace", "0.1667", "10", "0", "10"),
        "late": ("2026-11-26T17:00:00Z", "late", "25", "10", "2", "8"),
        "nothing": ("", "no_timestamp", "", "0", "0", "0"),
    }, got
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{work / 'gradebook.db'}", "speculative-decoding") as gb:
        assert gb.find_assignment(A).duedate == dt.datetime(2026, 11, 25, 16)
        late = gb.find_submission(A, "late")
        assert (late.timestamp, late.late_submission_penalty) == (dt.datetime(2026, 11, 26, 17), 2.0)
        assert gb.find_submission(A, "grace").late_submission_penalty == 0
    assert (work / "submitted" / "late" / A / "timestamp.txt").read_text().startswith("2026-11-26 17:00:00")


# ---------------------------------------------------------------------------------------- release order
def test_a_notebook_that_restates_an_open_assignment_is_held_back_until_its_window_closes(tmp_path, monkeypatch):
    """08's given cells restate 07's answers: while 07 accepts submissions (due date plus grace), 08 is not
    released; after that it is. 03 open holds back every notebook that restates expected_tokens."""
    from autograde.given import _solutions

    notebooks = _solutions()
    path = course_file(tmp_path, '[assignments.07_batch_crossover]\ndue = 2026-12-09T17:00:00+01:00\ngrace = "1h"\n')
    policy = load_policy(path)
    closes = dt.datetime(2026, 12, 9, 17, 0, tzinfo=UTC)  # 16:00 UTC + 1 h of grace
    before = deadlines.early_releases(
        ["08_break_even_acceptance", "07_batch_crossover", "03_acceptance_math"],
        policy,
        notebooks,
        now=closes - dt.timedelta(minutes=1),
    )
    assert before == [("08_break_even_acceptance", "07_batch_crossover", closes)]
    assert deadlines.early_releases(["08_break_even_acceptance"], policy, notebooks, now=closes) == []
    said = deadlines.describe_early(before, policy)
    assert "08_break_even_acceptance restates answers of 07_batch_crossover" in said and "2026-12-09 17:00 UTC" in said
    open_03 = load_policy(course_file(tmp_path, "[assignments.03_acceptance_math]\ndue = 2026-12-09T17:00:00Z\n"))
    held = {name for name, origin, _ in deadlines.early_releases(sorted(notebooks), open_03, notebooks, now=DUE)}
    assert {
        "05_acceptance_in_practice",
        "07_batch_crossover",
        "08_break_even_acceptance",
        "09_speculation_that_pays",
        "10_batches_and_servers",
        "11_real_engines",
    } <= held and "03_acceptance_math" not in held
    assert deadlines.early_releases(sorted(notebooks), load_policy(course_file(tmp_path, "")), notebooks, now=DUE) == []


def test_release_refuses_an_early_notebook_with_the_reason_and_releases_it_with_force(tmp_path, monkeypatch, capsys):
    from autograde.__main__ import main
    from autograde.release import EarlyReleaseError, release

    far = (dt.datetime.now(UTC) + dt.timedelta(days=30)).strftime("%Y-%m-%dT%H:%M:%SZ")
    monkeypatch.setattr(
        deadlines, "COURSE_FILE", course_file(tmp_path, f"[assignments.07_batch_crossover]\ndue = {far}\n")
    )
    out, db = tmp_path / "r", f"sqlite:///{tmp_path / 'g.db'}"
    with pytest.raises(
        EarlyReleaseError, match=r"08_break_even_acceptance restates answers of 07_batch_crossover.*--force"
    ):
        release(["08_break_even_acceptance"], release_dir=str(out), db_url=db, given=False)
    assert not out.exists() and not (tmp_path / "g.db").exists()
    assert main(["release", "08_break_even_acceptance"]) == 2
    assert "not released: 08_break_even_acceptance restates answers of 07_batch_crossover" in capsys.readouterr().err
    assert release(["08_break_even_acceptance"], release_dir=str(out), db_url=db, given=False, force=True)
    assert (out / "08_break_even_acceptance" / "08_break_even_acceptance.ipynb").is_file()
    assert "warning: releasing 08_break_even_acceptance while 07_batch_crossover is open" in capsys.readouterr().out
