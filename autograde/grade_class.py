"""`python -m autograde class ASSIGNMENT SUBMISSIONS_DIR`: grade a whole class.

Ingest (one sub-folder or one .ipynb per student, or nbgrader's submitted/<student>/<assignment>/
layout), autograde each submission with nbgrader in its own sandboxed kernel, write feedback HTML and a
grades CSV with one row per student and part plus a `total` row, and check that the gradebook agrees.

Status of a row (the CSV's `status` column) tells a real zero from everything else:
  ok                graded normally; the score is what the tests gave (0 is a real zero)
  timeout           a test in this part, or the notebook as a whole, hit the time limit
  crash             the kernel died (os._exit, segfault, out of memory) before or during this part
  tampered          the grader's guard caught modified builtins/hooks or rebound course objects while a test
                    ran (that test failed), or its audit hook saw the student's code do what no answer needs
                    (walk gc, install a trace/profile/audit hook, swap a function's code, ctypes, replace a
                    module): score 0 for an instructor to review, unless --keep-flagged
  flagged           the submission contains code that tampers with the grader (autograde.scan), or the audit
                    hook saw it read frames or run code it compiled: score 0 for an instructor to review
                    (the autograded score is kept in `autograded_score`; --keep-flagged keeps it as the score)
  corrupt           the file is not a readable notebook (truncated JSON, not UTF-8 ...)
  missing           no notebook in the student's submission
  wrong_assignment  the notebook belongs to another assignment
  error             the grader, or the course's own code, failed on this submission: no score is recorded
                    (the gradebook marks it for manual grading), the detail says why, the exit code is 1

Deadlines (course.toml, autograde/deadlines.py): each row also says when the submission came
(`submitted_at`, UTC, from nbgrader's timestamp.txt or the instructor's timestamps.csv), its `lateness`
(no_deadline, on_time, in_grace, late, no_timestamp, bad_timestamp) and `hours_late`; the total row adds
`raw_score`, `penalty` and `final_score` (raw_score - penalty; nbgrader's own late_submission_penalty in
the gradebook is the same). A submission of an assignment with a due date but without a readable
timestamp, or with one in the future, is listed at the end and makes the exit code 1.

Resubmissions: given nbgrader's exchange inbound/ folder (STUDENT+ASSIGNMENT+TIMESTAMP[+RANDOM]/, every
submission of every student), the course file's rule picks one per student (`latest`, or `latest_on_time`);
the grader only reads there, so every earlier submission stays. The course's own submitted folder
(nbgrader_config.py's, `collected/` in the classroom, which formgrader compares with the gradebook) then
gets the submission graded where `nbgrader collect` had put another (align_collected). A copy the grader
replaces, there or in WORK/submitted/, is moved to WORK/superseded/STUDENT/ASSIGNMENT/N/ first.
"""

import contextlib
import csv
import datetime as dt
import hashlib
import html
import os
import re
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from autograde import REPO, WORK, assignments, cache_dir, deadlines, grading_sources, pipeline, scan
from autograde.assignment import identify, load_assignment, source_notebook
from autograde.course import Course
from autograde.executor import MEMORY_BYTES, NOTEBOOK_SECONDS
from autograde.explain import explain
from autograde.judges import modules as judge_modules
from autograde.notebook_io import graded_part, read_json_notebook, released_notebook
from autograde.outcomes import audit_verdict
from autograde.records import RunRecord

STUDENT_ID = re.compile(r"[^A-Za-z0-9_.@+-]")
STATUS_ORDER = ["error", "corrupt", "missing", "wrong_assignment", "flagged", "crash", "timeout", "tampered", "ok"]
MAX_COPY_BYTES = 100 * 2**20  # a student's other files copied with the notebook (data, not checkpoints)
DETAIL_LIMIT = 5  # skipped files and notebooks named in a detail, at most
CSV_COLUMNS = [
    "student",
    "assignment",
    "part",
    "grade_ids",
    "score",
    "max_score",
    "autograded_score",
    "status",
    "submitted_at",
    "lateness",
    "hours_late",
    "raw_score",
    "penalty",
    "final_score",
    "detail",
]
TIMESTAMPS_CSV = "timestamps.csv"  # beside plain submissions: student,submitted_at (deadlines.read_timestamps_csv)


@dataclass
class Submission:
    student: str
    source: Path = None  # where it came from (file or folder)
    name: str = ""  # the student's name there (before renaming to a safe id)
    from_inbound: bool = False  # one of the student's submissions in nbgrader's exchange inbound/
    notebook: Path = None  # the chosen notebook inside it
    folder: Path = None  # folder whose other files go with the notebook
    status: str = "ok"
    detail: str = ""
    findings: list = field(default_factory=list)
    submitted_at: dt.datetime = None  # aware UTC, or None (no readable timestamp)
    timestamp_file: Path = None  # nbgrader's timestamp.txt it came from (copied as it is)
    timestamp_why: str = ""  # why there is none
    lateness: deadlines.Lateness = field(default_factory=deadlines.Lateness)


@dataclass
class Result:
    student: str
    status: str
    detail: str
    score: float
    autograded: float
    max_score: float
    rows: list
    seconds: float = 0.0
    execute_s: float = 0.0  # of which: the kernel running the notebook (start-up included)
    skipped: int = 0  # the course's measuring cells grading did not run
    lateness: deadlines.Lateness = field(default_factory=deadlines.Lateness)
    raw_score: float = None  # the score before the late penalty (None: not graded)
    penalty: float = None
    final_score: float = None


def worst(statuses):
    statuses = list(statuses) or ["ok"]
    return min(statuses, key=STATUS_ORDER.index)


def _student_id(name, taken):
    sid = STUDENT_ID.sub("_", name).lstrip(".") or "student"
    base, n = sid, 2
    while sid in taken:
        sid, n = f"{base}-{n}", n + 1
    taken.add(sid)
    return sid


def inbound_attempts(root, assignment_name):
    """{student: [entry, ...]} when `root` is nbgrader's exchange inbound/ (STUDENT+ASSIGNMENT+TIMESTAMP[+X]
    folders, this assignment's only), else None."""
    attempts = {}
    for entry in Path(root).iterdir():
        parts = entry.name.split("+")
        if entry.is_dir() and len(parts) in (3, 4) and parts[1] == assignment_name and parts[0]:
            attempts.setdefault(parts[0], []).append(entry)
    return attempts or None


def _choose_attempts(attempts, rule):
    """(entries to grade, {entry: note}) for inbound_attempts: one attempt per student by the rule."""
    chosen, notes = [], {}
    for student, entries in sorted(attempts.items()):
        entries.sort(key=lambda e: e.name)
        timed = [(deadlines.read_timestamp_file(e / "timestamp.txt")[0], e) for e in entries]
        pick, note = deadlines.choose(rule, timed) if len(entries) > 1 else (entries[0], "")
        chosen.append((student, pick))
        if note:
            notes[pick] = note
    return chosen, notes


def discover(root, assignment, released=None, rule=None, stamps=None, now=None):
    """Submissions found under `root`, one per student (file stem or sub-folder name; in nbgrader's
    exchange inbound/, the submission the course file's resubmission rule picks among the student's).
    rule: the assignment's deadlines.Rule; stamps: {student: aware datetime} given by the instructor."""
    root = Path(root)
    if not root.is_dir():
        raise ValueError(f"submissions folder {root} does not exist")
    rule = rule or deadlines.Rule(assignment.name)
    stamps = stamps or {}
    if (root / "submitted").is_dir() and not any(p.suffix == ".ipynb" for p in root.iterdir()):
        root = root / "submitted"  # an nbgrader course folder
    known = {n: load_assignment(n) for n in assignments()}
    wanted = known[assignment.name]
    taken, found = set(), []
    attempts = inbound_attempts(root, assignment.name)
    inbound = attempts is not None
    if inbound:
        entries, attempt_notes = _choose_attempts(attempts, rule)
    else:
        entries = [(e.stem if e.is_file() else e.name, e) for e in sorted(root.iterdir(), key=lambda p: p.name)]
        attempt_notes = {}
    for name, entry in entries:
        if entry.name.startswith(".") or (entry.is_file() and entry.suffix != ".ipynb"):
            continue
        sub = Submission(_student_id(name, taken), source=entry, name=name, from_inbound=inbound)
        if sub.student != name:
            sub.detail = f"student id {name!r} renamed {sub.student!r}; "
        if entry in attempt_notes:
            sub.detail += attempt_notes[entry] + "; "
        found.append(sub)
        if entry.is_symlink():
            sub.status, sub.detail = "missing", sub.detail + "the submission is a symbolic link, not a file"
            continue
        if entry.is_file():
            sub.notebook = entry
            continue
        folder = entry / assignment.name if (entry / assignment.name).is_dir() else entry
        sub.folder = folder
        notebooks = sorted(
            p
            for p in folder.rglob("*.ipynb")
            if ".ipynb_checkpoints" not in p.parts and p.is_file() and not p.is_symlink()
        )
        exact = [p for p in notebooks if p.name == f"{assignment.notebook}.ipynb"]
        if exact:
            sub.notebook = min(exact, key=lambda p: len(p.parts))
        elif len(notebooks) == 1:
            sub.notebook = notebooks[0]
            sub.detail += f"using {notebooks[0].name} (the only notebook); "
        elif notebooks:
            matching = []
            for p in notebooks:
                try:
                    if assignment.name in identify(read_json_notebook(p), {assignment.name: wanted}):
                        matching.append(p)
                except ValueError:
                    pass
            if len(matching) == 1:
                sub.notebook = matching[0]
                sub.detail += f"using {matching[0].name} (the notebook of this assignment); "
            else:
                sub.status = "missing"
                sub.detail += (
                    f"{len(notebooks)} notebooks and none is named {assignment.notebook}.ipynb: "
                    f"{', '.join(p.name for p in notebooks[:DETAIL_LIMIT])}"
                )
        else:
            sub.status, sub.detail = "missing", sub.detail + f"no .ipynb file in the submission folder {entry}"
    for sub in found:
        _timestamp(sub, name_in_stamps=sub.name, stamps=stamps)
        sub.lateness = deadlines.assess(rule, sub.submitted_at, now=now, why_missing=sub.timestamp_why)
        if sub.lateness.detail and sub.lateness.status != "no_deadline":
            sub.detail += ("; " if sub.detail and not sub.detail.endswith("; ") else "") + sub.lateness.detail + "; "
        if sub.status != "ok":
            sub.detail = sub.detail.rstrip("; ")
    # pre-checks that need no kernel
    released = released if released is not None else released_notebook(assignment)
    for sub in found:
        if sub.status != "ok":
            continue
        try:
            nb = read_json_notebook(sub.notebook)
        except ValueError as exc:
            sub.status, sub.detail = "corrupt", sub.detail + f"{sub.notebook.name}: {exc}"
            continue
        ids = {c.get("metadata", {}).get("nbgrader", {}).get("grade_id") for c in nb.cells} - {None}
        if ids and not identify(nb, {assignment.name: wanted}):
            others = identify(nb, {k: v for k, v in known.items() if k != assignment.name})
            what = f"assignment {others[0]}" if others else "another notebook (unknown grade ids)"
            sub.status = "wrong_assignment"
            sub.detail += f"{sub.notebook.name} is {what}, not {assignment.name}"
            continue
        sub.findings = scan.scan(nb, released)
    return found


def _timestamp(sub, name_in_stamps, stamps):
    """When the submission came: the instructor's timestamps (CSV) first, else nbgrader's timestamp.txt."""
    if name_in_stamps in stamps:
        sub.submitted_at = stamps[name_in_stamps]
        return
    folder = sub.folder
    path = folder / "timestamp.txt" if folder is not None else None
    if path is None or not path.exists():
        sub.timestamp_why = (
            f"no timestamp.txt in {folder} and no row in {TIMESTAMPS_CSV}"
            if folder is not None
            else f"a plain file, and no row for {name_in_stamps!r} in {TIMESTAMPS_CSV}"
        )
        return
    sub.submitted_at, sub.timestamp_why = deadlines.read_timestamp_file(path)
    if sub.submitted_at is not None:
        sub.timestamp_file = path


def _write_timestamp(sub, dest):
    """nbgrader's timestamp.txt in the grader's copy: the student's own file as it is, or the instructor's
    time in nbgrader's format; none for a timestamp that is missing, unreadable or in the future."""
    if sub.submitted_at is None or sub.lateness.status == "bad_timestamp":
        return
    if sub.timestamp_file is not None:
        shutil.copyfile(sub.timestamp_file, dest / "timestamp.txt")
    else:
        (dest / "timestamp.txt").write_text(deadlines.utc(sub.submitted_at).strftime(deadlines.NBGRADER_FORMAT))


def _source_digest(sub):
    h = hashlib.sha256(sub.notebook.read_bytes())
    if sub.submitted_at is not None:
        h.update(sub.submitted_at.isoformat().encode())
    return h.hexdigest()


def _keep(course, assignment, student, folder):
    """Move `folder` to WORK/superseded/STUDENT/ASSIGNMENT/N/ (N counting up); return where it went."""
    keep = course.work / "superseded" / student / assignment.name
    keep.mkdir(parents=True, exist_ok=True)
    n = 1 + max([int(p.name) for p in keep.iterdir() if p.name.isdigit()], default=0)
    shutil.move(str(folder), str(keep / str(n)))
    return keep / str(n)


def align_collected(course, assignment, subs, out=sys.stdout):
    """After grading from nbgrader's inbound/: make the course's own submitted folder (nbgrader_config.py's
    CourseDirectory.submitted_directory, `collected/` in the classroom; formgrader compares it with the
    gradebook) hold the submission that was graded, where `nbgrader collect` took another (it takes the
    latest). What it held is moved to WORK/superseded/ first. Returns the students changed."""
    from autograde.course import load_course_config

    configured = load_course_config().CourseDirectory.get("submitted_directory", "submitted")
    root = (REPO / configured).resolve()
    if root == course.path("submitted", "x", assignment.name).parent.parent.resolve() or not root.is_dir():
        return []
    changed = []
    for sub in subs:
        if not sub.from_inbound or sub.status != "ok" or sub.source is None:
            continue
        target = root / sub.name / assignment.name
        stamp = sub.source / "timestamp.txt"
        have = target / "timestamp.txt"
        if have.exists() and stamp.exists() and have.read_bytes() == stamp.read_bytes():
            continue
        if target.exists():
            moved = _keep(course, assignment, sub.student, target)
            print(
                f"{root.name}/{sub.name}/{assignment.name}: now holds the submission graded ({sub.source.name}); "
                f"the one it held (nbgrader collect's) is in {moved}",
                file=out,
            )
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copytree(sub.source, target, symlinks=True)
        changed.append(sub.student)
    return changed


def _supersede(course, assignment, sub, dest):
    """Before the grader's copy of a submission in WORK/submitted/ is replaced by a different one (a
    resubmission, another timestamp), move it to WORK/superseded/STUDENT/ASSIGNMENT/N/: nothing is lost."""
    marker = course.records / sub.student / assignment.name / "source.sha256"
    digest = _source_digest(sub)
    if dest.exists() and marker.exists() and marker.read_text().strip() != digest:
        _keep(course, assignment, sub.student, dest)
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.write_text(digest + "\n")


def _copy_files(sub, dest):
    """Copy the submission's other regular files (no symlinks: they could point at solutions/) into
    nbgrader's submitted/ folder; the notebook itself goes there through pipeline.submit, timestamp.txt
    through _write_timestamp."""
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    skipped, total = [], 0
    if sub.folder is not None:
        for path in sorted(sub.folder.rglob("*")):
            rel = path.relative_to(sub.folder)
            if path.is_symlink():
                skipped.append(f"{rel} (symbolic link)")
                continue
            if (
                not path.is_file()
                or path.suffix == ".ipynb"
                or ".ipynb_checkpoints" in rel.parts
                or rel.name.startswith(".")
                or str(rel) == "timestamp.txt"
            ):
                continue
            total += path.stat().st_size
            if total > MAX_COPY_BYTES:
                skipped.append(f"{rel} (over {MAX_COPY_BYTES // 2**20} MB in all)")
                continue
            target = dest / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target, follow_symlinks=False)
    return skipped


# --------------------------------------------------------------------------------------- gradebook
def _set_ungraded(course, assignment, student, *, auto_score, needs_manual_grade):
    """Put the same grade into every grade cell of a submission that was not autograded."""
    with course.gradebook() as gb:
        gb.update_or_create_student(student)
        gb.update_or_create_submission(assignment.name, student)
        nb = gb.find_submission_notebook(assignment.notebook, assignment.name, student)
        for grade in nb.grades:
            grade.auto_score = auto_score
            grade.manual_score = None
            grade.needs_manual_grade = needs_manual_grade
        nb.late_submission_penalty = None
        gb.db.commit()


def _set_submission_time(course, assignment, sub):
    """The submission's timestamp in the gradebook (nbgrader reads timestamp.txt when there is one; this
    clears a stale one left by an earlier run when there is none)."""
    stamp = sub.submitted_at if sub.submitted_at is not None and sub.lateness.status != "bad_timestamp" else None
    with course.gradebook() as gb:
        gb.update_or_create_student(sub.student)
        gb.update_or_create_submission(
            assignment.name,
            sub.student,
            timestamp=(deadlines.utc(stamp).replace(tzinfo=None) if stamp is not None else None),
        )


def _zero_submission(course, assignment, student):
    """The student's own failure (no notebook, corrupt, another assignment): an explicit 0."""
    _set_ungraded(course, assignment, student, auto_score=0, needs_manual_grade=False)


def _hold_for_manual_grading(course, assignment, student):
    """A submission the grader could not grade (not the student's fault): no score at all, and every grade
    cell waits for an instructor in formgrader, instead of a 0 that looks like the student's."""
    _set_ungraded(course, assignment, student, auto_score=None, needs_manual_grade=True)


def _flag_path(course, assignment, student):
    return course.work / "flagged" / assignment.name / student


def _set_flag(course, assignment, student, zeroed):
    """Zero (manual score) a flagged submission in the gradebook; remember it, so that a rerun that no
    longer flags the student removes exactly the zeros this tool set (and no instructor's grade)."""
    marker = _flag_path(course, assignment, student)
    if not zeroed and not marker.exists():
        return
    with course.gradebook() as gb:
        nb = gb.find_submission_notebook(assignment.notebook, assignment.name, student)
        for grade in nb.grades:
            grade.manual_score = 0.0 if zeroed else None
        gb.db.commit()
    if zeroed:
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.write_text("zeroed by python -m autograde class: flagged for review\n")
    else:
        marker.unlink()


def check_gradebook(course, assignment, results):
    """Problems (strings) where the gradebook disagrees with the results; [] when consistent."""
    from nbgrader.api import MissingEntry

    problems = []
    with course.gradebook() as gb:
        for r in results:
            try:
                nb = gb.find_submission_notebook(assignment.notebook, assignment.name, r.student)
            except MissingEntry:
                problems.append(f"{r.student}: no submission in the gradebook")
                continue
            score = sum(float(g.score or 0) for g in nb.grades)
            if abs(score - r.score) > 1e-9:
                problems.append(f"{r.student}: gradebook score {score:g} but grades.csv says {r.score:g}")
            final = max(0.0, score - float(nb.late_submission_penalty or 0))
            if r.final_score is not None and abs(final - r.final_score) > 1e-6:
                problems.append(
                    f"{r.student}: gradebook score after its late_submission_penalty "
                    f"{nb.late_submission_penalty} is {final:g} but grades.csv's final_score is "
                    f"{r.final_score:g}"
                )
            ids = {g.name for g in nb.grades}
            expected = {t.grade_id for t in assignment.tests}
            if ids != expected:
                problems.append(f"{r.student}: gradebook grade cells {sorted(ids)} != {sorted(expected)}")
    return problems


# ----------------------------------------------------------------------------------------- grading
def _rows_for(assignment, sub, status, detail, grades=None, results=None, record=None):
    """CSV rows, one per part. A submission with status `error` gets no score (None), not a 0."""
    rows, notebook_status = [], status
    for part in assignment.parts:
        score = autograded = 0.0
        statuses, notes = [], []
        for test in part.tests:
            s, a, _ = (grades or {}).get(test.grade_id, (0.0, 0.0, test.points))
            score += s
            autograded += a
            out = (results or {}).get(test.grade_id)
            if out is None:
                continue
            stop_kind = ((record.stop if record else None) or {}).get("kind", "crash")
            statuses.append(
                {"crash": "crash", "timeout": "timeout", "not_run": stop_kind}.get(out.kind)
                or ("tampered" if out.ename == "GraderIntegrityError" else "ok")
            )
            if not out.passed:
                notes.append(f"{test.grade_id}: {explain(test, out).summary}".replace("\n    ", " | "))
        part_status = notebook_status if notebook_status != "ok" else worst(statuses)
        ungraded = notebook_status == "error"
        rows.append(
            {
                "part": f"{part.label}: {part.title}" if part.title else part.label,
                "grade_ids": " ".join(part.grade_ids),
                "score": None if ungraded else score,
                "max_score": part.points,
                "autograded_score": None if ungraded else autograded,
                "status": part_status,
                "detail": detail if notebook_status != "ok" else "; ".join(notes),
            }
        )
    return rows


def grade_one(course, assignment, sub, keep_flagged=False):
    t0 = time.monotonic()
    if sub.status != "ok":
        _set_submission_time(course, assignment, sub)
        _zero_submission(course, assignment, sub.student)
        _write_note_feedback(course, assignment, sub.student, sub.status, sub.detail)
        rows = _rows_for(assignment, sub, sub.status, sub.detail)
        return _result(sub, sub.status, sub.detail, rows, t0)
    dest = course.path("submitted", sub.student, assignment.name)
    _supersede(course, assignment, sub, dest)
    skipped = _copy_files(sub, dest)
    _write_timestamp(sub, dest)
    _set_submission_time(course, assignment, sub)
    notes = [sub.detail.rstrip("; ")] if sub.detail else []
    if skipped:
        notes.append("not copied: " + ", ".join(skipped[:DETAIL_LIMIT]))
    if _flag_path(course, assignment, sub.student).exists():
        _set_flag(course, assignment, sub.student, zeroed=False)
    nb = nbformat.read(str(sub.notebook), as_version=4)
    released = released_notebook(assignment, course)
    notes += pipeline.submit(course, assignment, sub.student, nb, released)
    graded = pipeline.grade(course, assignment, sub.student, released)
    record, results = graded.record, graded.results
    failure = graded.reason if not graded.ok else graded.course_failure
    if failure:
        _hold_for_manual_grading(course, assignment, sub.student)
        _write_note_feedback(course, assignment, sub.student, "error", failure)
        detail = "; ".join(notes + [failure])
        return _result(sub, "error", detail, _rows_for(assignment, sub, "error", detail), t0)
    notes += graded.locked_notes
    status = "ok"
    stop = record.stop
    if stop:
        notes.append(stop["message"])
    for e in record.events:
        if e["kind"] in ("timeout", "output") and (not stop or e["message"] != stop["message"]):
            notes.append(e["message"])
    review = []
    if sub.findings:
        notes.append("flagged for review: " + scan.describe(sub.findings))
        review.append("contains code that tampers with the grader (" + scan.describe(sub.findings, limit=3) + ")")
        if not keep_flagged:
            status = "flagged"
    audited, what = audit_verdict(record)
    if audited:
        notes.append(f"{audited} (the guard's audit hook): {what}")
        review.append(
            f"{'tampered with the grader' if audited == 'tampered' else 'did what tampering needs'} "
            f"while it ran ({what})"
        )
        status = audited if audited == "tampered" or status == "ok" else status
    _set_flag(course, assignment, sub.student, zeroed=not keep_flagged and status in ("flagged", "tampered"))
    grades = pipeline.scores(course, assignment, sub.student)
    rows = _rows_for(assignment, sub, status, "; ".join(notes), grades, results, record)
    if status in ("flagged", "tampered") and review:
        record.review = "This submission " + "; it ".join(review) + ". Its score is 0 until an instructor reviews it."
        course.save_run_record(record)  # the feedback reads it
    ok_fb, fb_log = course.feedback(assignment.name, sub.student)
    if not ok_fb:
        notes.append("feedback failed: " + pipeline.failure_reason(fb_log, RunRecord()))
    r = _result(sub, status, "; ".join(dict.fromkeys(n for n in notes if n)), rows, t0)
    r.execute_s = float(record.seconds)
    r.skipped = len(record.skipped)
    return r


def _result(sub, status, detail, rows, t0):
    total_status = worst([status] + [r["status"] for r in rows])
    score = sum(x["score"] or 0 for x in rows)
    raw = None if rows and all(x["score"] is None for x in rows) else score
    penalty = None if raw is None else deadlines.penalty_points(raw, sub.lateness)
    return Result(
        student=sub.student,
        status=total_status,
        detail=detail,
        score=score,
        autograded=sum(x["autograded_score"] or 0 for x in rows),
        max_score=sum(x["max_score"] for x in rows),
        rows=rows,
        seconds=time.monotonic() - t0,
        lateness=sub.lateness,
        raw_score=raw,
        penalty=penalty,
        final_score=None if raw is None else round(raw - penalty, 6),
    )


def _write_note_feedback(course, assignment, student, status, detail):
    folder = course.path("feedback", student, assignment.name)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{assignment.notebook}.html").write_text(
        f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(assignment.name)}</title></head>"
        f"<body><h1>{html.escape(assignment.name)}: not graded</h1><p>Status: <b>{html.escape(status)}</b></p>"
        f"<p>{html.escape(detail)}</p><p>Score: 0 / {assignment.points:g}</p></body></html>"
    )


def _number(x):
    return "" if x is None else f"{x:g}"


def _when(r):
    late = r.lateness
    return {
        "submitted_at": ""
        if late.submitted_at is None
        else deadlines.utc(late.submitted_at).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "lateness": late.status,
        "hours_late": _number(late.hours_late),
    }


def write_csv(path, assignment, results):
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=CSV_COLUMNS)
        w.writeheader()
        for r in results:
            for row in r.rows:
                w.writerow(
                    {
                        "student": r.student,
                        "assignment": assignment.name,
                        **row,
                        "score": _number(row["score"]),
                        "max_score": _number(row["max_score"]),
                        "autograded_score": _number(row["autograded_score"]),
                        **_when(r),
                    }
                )
            ungraded = r.raw_score is None
            w.writerow(
                {
                    "student": r.student,
                    "assignment": assignment.name,
                    "part": "total",
                    "grade_ids": " ".join(t.grade_id for t in assignment.tests),
                    "score": "" if ungraded else _number(r.score),
                    "max_score": _number(r.max_score),
                    "autograded_score": "" if ungraded else _number(r.autograded),
                    "status": r.status,
                    **_when(r),
                    "raw_score": _number(r.raw_score),
                    "penalty": _number(r.penalty),
                    "final_score": _number(r.final_score),
                    "detail": r.detail,
                }
            )
    return path


_WORKER = None
# Worker processes start fresh (spawn), never forked: by the time the pool starts, this process has run the
# preflight's kernel (a ZeroMQ context, asyncio loops, their threads), and a process forked from that inherits
# them half-alive, which ZeroMQ does not support. With fork, 3 of about 20 class runs with --jobs 2 sat idle for
# 120 s after a submission's last cell (docs/classroom.md); that fork caused it is the likeliest reading, not a
# proof. tests/test_autograde_units.py checks that a worker inherits no ZeroMQ context.
START_METHOD = "spawn"


def _init_worker(state, warm=None):
    """Pool initializer: the course, the assignment and the flag policy, sent once to each fresh worker; and,
    given an assignment's name, what its judges need loaded before the worker takes a submission."""
    global _WORKER
    _WORKER = state
    if warm:
        from autograde.executor import _warm_judges

        _warm_judges(warm)


def _ready():
    return True


def worker_pool(jobs, state, warm=None):
    """A pool of `jobs` fresh worker processes, each holding `state` (course, assignment, keep_flagged).

    warm: an assignment's name: every worker starts at once and loads what that notebook's judges need (torch,
    transformers' Llama and the course's pair for 04: about 3.5 s of one core, measured) before it takes a
    submission, so that the loading overlaps the grader's own set-up (the preflight, prepare) instead of
    competing with the first kernels for the cores."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    pool = ProcessPoolExecutor(
        jobs, mp_context=multiprocessing.get_context(START_METHOD), initializer=_init_worker, initargs=(state, warm)
    )
    if warm:
        for _ in range(jobs):  # a pool starts a worker for each task that no idle worker can take
            pool.submit(_ready)
    return pool


def _grade_task(sub):
    """Grade one submission (in this process or a pool worker); never raises."""
    course, assignment, keep_flagged = _WORKER
    t0 = time.monotonic()
    try:
        return grade_one(course, assignment, sub, keep_flagged=keep_flagged)
    except Exception as exc:  # noqa: BLE001 (one broken submission must not stop the class)
        detail = f"grader error: {type(exc).__name__}: {exc}"
        try:
            _hold_for_manual_grading(course, assignment, sub.student)
        except Exception:  # noqa: BLE001
            pass
        return _result(sub, "error", detail, _rows_for(assignment, sub, "error", detail), t0)


def _refuse_own_folder(submissions, course, assignment):
    """Grading copies each submission into the course's submitted/ folder after emptying its place there:
    submissions read from that very folder would be deleted before they are copied. Refuse instead."""
    own = course.path("submitted", "student", assignment.name).parent.parent.resolve()
    given = Path(submissions).resolve()
    for root in (given, given / "submitted"):
        if root == own or root.is_relative_to(own):
            raise ValueError(
                f"the submissions folder {submissions} is the grader's own submitted/ folder ({own}), "
                f"where grading writes: copy the submissions elsewhere (or grade with another --work "
                f"folder) so that none is overwritten"
            )


def _preflight_key(assignment, settings):
    """Hash of everything that decides whether the reference solution can be graded here: the solution,
    the course's package and data, the installed packages, this checkout's path and the run's settings."""
    from importlib.metadata import distributions

    h = hashlib.sha256()
    h.update(source_notebook(assignment.name).read_bytes())
    for folder in (REPO / "specdec", REPO / "data", REPO / "autograde"):
        for path in sorted(folder.rglob("*")):
            if (
                path.is_file()
                and "__pycache__" not in path.parts
                and path.suffix != ".pyc"
                and not path.is_relative_to(WORK)
            ):
                h.update(str(path.relative_to(REPO)).encode())
                h.update(path.read_bytes())
    h.update((REPO / "nbgrader_config.py").read_bytes())
    h.update("\n".join(sorted(f"{d.metadata['Name']}=={d.version}" for d in distributions())).encode())
    h.update(f"{REPO}|{sys.executable}|{sorted(settings.items())}".encode())
    return h.hexdigest()[:20]


def preflight(assignment, *, out=sys.stdout, **settings):
    """Grade the assignment's own solution once, in a throwaway course folder with the same settings, and
    raise RuntimeError naming the cause unless it scores full marks: an environment that cannot grade the
    reference answer must not grade students.  A pass is cached on _preflight_key; returns seconds spent."""
    t0 = time.monotonic()
    marker = cache_dir() / f"preflight-{assignment.name}-{_preflight_key(assignment, settings)}.ok"
    if marker.exists():
        print(f"preflight: the solution of {assignment.name} scored full marks here before (cached)", file=out)
        return 0.0
    work = Path(tempfile.mkdtemp(prefix="autograde-preflight-"))
    try:
        course = Course(work, **settings)
        course.prepare(assignment.name)
        released = released_notebook(assignment, course)
        solution = graded_part(nbformat.read(str(source_notebook(assignment.name)), as_version=4))
        pipeline.submit(course, assignment, "reference-solution", solution, released)
        graded = pipeline.grade(course, assignment, "reference-solution", released)
        problem = graded.reason if not graded.ok else graded.course_failure
        if not problem and graded.points < assignment.points:
            failed = [(assignment.test(g), o) for g, o in graded.results.items() if not o.passed]
            problem = f"it scores {graded.points:g}/{assignment.points:g}; " + "; ".join(
                f"{t.grade_id}: {explain(t, o).summary}" for t, o in failed[:3]
            ).replace("\n    ", " | ")
            errors = graded.record.locked_errors
            if errors:
                problem += "; " + "; ".join(
                    f"locked cell {e['grade_id']!r} raised {e['ename']}: {e['evalue']}" for e in errors[:3]
                )
        if problem:
            raise RuntimeError(
                f"preflight failed: the reference solution of {assignment.name} cannot be graded "
                f"in this environment ({problem}). No student was graded. Fix the environment "
                f"({grading_sources()}) and run again."
            )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.write_text(f"{assignment.name}: full marks, {time.strftime('%Y-%m-%d %H:%M:%S')}\n")
    seconds = time.monotonic() - t0
    print(f"preflight: the solution of {assignment.name} scores full marks here ({seconds:.0f} s)", file=out)
    return seconds


def grade_class(
    assignment_name,
    submissions,
    *,
    work=None,
    csv_path=None,
    cell_timeout=None,
    notebook_timeout=NOTEBOOK_SECONDS,
    memory_bytes=MEMORY_BYTES,
    sandboxed=True,
    quick=True,
    measure=False,
    keep_flagged=False,
    jobs=1,
    check_solution=True,
    course_file=None,
    timestamps=None,
    out=sys.stdout,
):
    """Grade every submission in `submissions`; returns (results, csv path, gradebook problems).

    course_file: deadlines and late policy (default course.toml); timestamps: a CSV of student,submitted_at
    (default: SUBMISSIONS/timestamps.csv when it exists). Bad input in either raises deadlines.PolicyError
    (a ValueError) naming the file and field, before anything is graded."""
    from autograde import sandbox

    if assignment_name not in assignments():
        raise ValueError(f"unknown assignment {assignment_name!r}; known: {assignments()}")
    policy = deadlines.load_policy(course_file, known=assignments())
    rule = policy.rule(assignment_name)
    stamps_path = Path(timestamps) if timestamps else Path(submissions) / TIMESTAMPS_CSV
    if timestamps and not stamps_path.exists():
        raise deadlines.PolicyError(f"the timestamps file {stamps_path} does not exist")
    stamps = deadlines.read_timestamps_csv(stamps_path) if stamps_path.exists() else {}
    if sandboxed:
        ok, why = sandbox.bwrap_status()
        if not ok:
            raise RuntimeError(f"cannot sandbox student code: {why} (or pass --no-sandbox for trusted code)")
    assignment = load_assignment(assignment_name)
    t_start = time.monotonic()
    settings = dict(
        sandboxed=sandboxed,
        cell_timeout=cell_timeout,
        notebook_timeout=notebook_timeout,
        memory_bytes=memory_bytes,
        quick=quick,
        measure=measure,
    )
    print(f"{assignment_name}: grading with {grading_sources()}", file=out, flush=True)
    threads = max(1, (os.cpu_count() or 1) // jobs)  # each kernel's share of the cores
    course = Course(work, course_file=policy.path, threads=threads, **settings)
    _refuse_own_folder(submissions, course, assignment)
    global _WORKER
    _WORKER = (course, assignment, keep_flagged)
    # with several submissions the workers start first, and load what the judges need while the preflight and
    # prepare run
    several = jobs > 1 and Path(submissions).is_dir() and sum(1 for _ in Path(submissions).iterdir()) > 1
    warm = assignment_name if several and judge_modules().get(assignment_name) else None
    with worker_pool(jobs, _WORKER, warm=warm) if several else contextlib.nullcontext() as pool:
        if check_solution:
            preflight(assignment, out=out, **settings)
        course.prepare(assignment_name)
        subs = discover(submissions, assignment, released_notebook(assignment, course), rule=rule, stamps=stamps)
        print(
            f"{assignment_name}: {len(subs)} submissions from {submissions}; work folder {course.work}"
            f"{f'; {jobs} in parallel' if jobs > 1 else ''}; {threads} torch thread(s) per notebook",
            file=out,
            flush=True,
        )
        print(
            f"deadline ({policy.path.name}): {rule.describe()}"
            + (f"; timestamps from {stamps_path}" if stamps else ""),
            file=out,
            flush=True,
        )
        unknown = sorted(set(stamps) - {s.name for s in subs})
        if unknown:
            print(f"{stamps_path}: no submission for {', '.join(unknown)}", file=out)
        results = []

        def report(r):
            results.append(r)
            line = (
                f"[{len(results)}/{len(subs)}] {r.student}: {r.score:g}/{r.max_score:g} {r.status} ({r.seconds:.1f} s)"
            )
            if r.status != "ok" or r.detail:
                line += f": {r.detail}"
            print(line, file=out, flush=True)

        if pool is not None and len(subs) > 1:
            for r in pool.map(_grade_task, subs):
                report(r)
        else:
            for sub in subs:
                report(_grade_task(sub))
        results.sort(key=lambda r: r.student)
        align_collected(course, assignment, subs, out=out)
        csv_path = write_csv(csv_path or course.work / f"grades_{assignment_name}.csv", assignment, results)
        problems = check_gradebook(course, assignment, results)
        wall = time.monotonic() - t_start
        print(f"grades: {csv_path}", file=out)
        print(f"feedback: {course.work / 'feedback'}/<student>/{assignment_name}/{assignment.notebook}.html", file=out)
        print(
            f"gradebook: {course.db_url} "
            + ("consistent with the grades" if not problems else "DISAGREES: " + "; ".join(problems)),
            file=out,
        )
        bad = [r for r in results if r.status != "ok"]
        if bad:
            print(f"{len(bad)} submission(s) need attention:", file=out)
            for r in bad:
                print(f"  {r.student}: {r.status}: {r.detail}", file=out)
        untimed = [r for r in results if r.lateness.needs_attention]
        if untimed:
            print(
                f"{len(untimed)} submission(s) without a usable timestamp (no penalty applied; lateness unknown):",
                file=out,
            )
            for r in untimed:
                print(f"  {r.student}: {r.lateness.status}: {r.lateness.detail}", file=out)
        late = [r for r in results if r.lateness.status in ("in_grace", "late")]
        if late:
            print(
                "late: "
                + "; ".join(
                    f"{r.student} {r.lateness.hours_late:g} h ({r.lateness.status}, penalty "
                    f"{_number(r.penalty) or '-'})"
                    for r in late
                ),
                file=out,
            )
        ran = [r for r in results if r.execute_s]
        if results:
            line = f"{len(results)} submissions in {wall:.0f} s ({wall / len(results):.1f} s each on average"
            if ran:
                ex = sum(r.execute_s for r in ran) / len(ran)
                line += (
                    f"; per executed notebook: {sum(r.seconds for r in ran) / len(ran):.1f} s, of which the kernel "
                    f"ran {ex:.1f} s"
                )
                skipped = max(r.skipped for r in ran)
                if skipped:
                    line += f"; {skipped} cells that only measure not run (--measure runs them)"
            print(line + ")", file=out)
        return results, csv_path, problems
