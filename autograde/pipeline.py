"""The one grading path that `check` (a learner) and `class` (an instructor) share.

    submit()  repair the submission's nbgrader metadata (autograde.repair.normalize) and write it
              where nbgrader expects it: COURSE/submitted/STUDENT/ASSIGNMENT/NOTEBOOK.ipynb;
    grade()   run nbgrader's autograde with the sandboxed kernel, then read back what happened: the
              kernel's run record, the outcome of each test cell, and the scores in the gradebook.

Everything a caller needs comes back in one `Graded` record; nothing is kept in module state.
"""

from dataclasses import dataclass, field

import nbformat

from autograde.outcomes import outcomes
from autograde.records import RunRecord
from autograde.repair import normalize
from specdec.measure.my_measurements import FILE as INSIGHTS_FILE

REASON_CHARS = 300  # a grader failure is reported in one line of at most this length


@dataclass
class Graded:
    """What grading one submission gave."""

    student: str
    ok: bool  # nbgrader wrote an autograded notebook
    record: RunRecord = field(default_factory=RunRecord)  # the kernel's run record (events, stop, seconds ...)
    results: dict = field(default_factory=dict)  # {grade_id: autograde.outcomes.Outcome}
    scores: dict = field(default_factory=dict)  # {grade_id: (score, auto_score, max_score)}
    reason: str = ""  # why it could not be graded (ok is False)
    own_files: list = field(default_factory=list)  # files the student submitted besides the notebook

    @property
    def points(self):
        return sum(s for s, _, _ in self.scores.values())

    def _course_to_blame(self, error):
        """A locked cell's error is the course's when no cell of the student's had run before it and the
        student brought no files beside the notebook (which could shadow a module it imports)."""
        return not error["after_student_code"] and not self.own_files

    @property
    def course_failure(self):
        """Why the course's own code failed, not the student's: a locked cell (setup, given answers) raised
        before any cell the student wrote or changed had run, and the submission brought no files that
        could have changed what it imports; or a cell of the course's own code (as released) ran past its time
        limit. '' when there is no such failure."""
        for e in self.record.locked_errors:
            if self._course_to_blame(e):
                return (
                    f"the course's locked cell {e['grade_id']!r} raised {e['ename']}: {e['evalue']} before any "
                    f"of the student's code ran: the grading environment is broken, not the submission"
                )
        if self.record.course_timeouts:
            first = self.record.course_timeouts[0]
            return (
                f"the course's own cell {first['cell']} (as released, not changed by the student) ran past the "
                f"{first['seconds']} s cell limit and was stopped: what the course runs did not finish, so the "
                f"submission waits for an instructor instead of being scored"
            )
        return ""

    @property
    def locked_notes(self):
        """One note per locked cell that raised after the student's code (or with the student's files)."""
        return [
            f"the given cell {e['grade_id']!r} raised {e['ename']} "
            + (
                "after the student's code had run"
                if e["after_student_code"]
                else "with the student's own files beside the notebook (" + ", ".join(self.own_files[:3]) + ")"
            )
            for e in self.record.locked_errors
            if not self._course_to_blame(e)
        ]


def submit(course, assignment, student, nb, released):
    """Write notebook `nb` as `student`'s submission after repairing its metadata; return the repair notes.

    Other files of the submission, if any, are the caller's to copy into the same folder first.
    """
    dest = course.path("submitted", student, assignment.name)
    dest.mkdir(parents=True, exist_ok=True)
    notes = normalize(nb, released)
    nbformat.write(nb, str(dest / f"{assignment.notebook}.ipynb"))
    return notes


def scores(course, assignment, student):
    """{grade_id: (score, auto_score, max_score)} of one student's notebook in the gradebook."""
    with course.gradebook() as gb:
        nb = gb.find_submission_notebook(assignment.notebook, assignment.name, student)
        return {g.name: (float(g.score or 0), float(g.auto_score or 0), float(g.max_score)) for g in nb.grades}


def failure_reason(log, record):
    """One line: why nbgrader could not grade a submission (the grader's own event first, else its log)."""
    for event in reversed(record.events):
        if event["kind"] == "error":
            return event["message"][:REASON_CHARS]
    errors = [line for line in log.splitlines() if line.startswith("[ERROR]")]
    return (errors[0][len("[ERROR] ") :] if errors else "nbgrader failed")[:REASON_CHARS]


def grade(course, assignment, student, released):
    """Autograde `student`'s submitted notebook; return a Graded record.

    released: the learner notebook (its unchanged cells are the course's code, not the student's).
    """
    folder = course.path("submitted", student, assignment.name)
    # files that could shadow what the course imports: not the notebook, nbgrader's timestamp, or the
    # measurements a speed notebook saves beside itself (JSON, never imported)
    own = sorted(
        str(p.relative_to(folder))
        for p in folder.rglob("*")
        if p.is_file() and p.name not in (f"{assignment.notebook}.ipynb", "timestamp.txt", INSIGHTS_FILE)
    )
    course.know_course_cells(released)
    ok, log = course.autograde(assignment.name, student)
    record = course.run_record(assignment.name, student, assignment.notebook)
    graded = course.path("autograded", student, assignment.name) / f"{assignment.notebook}.ipynb"
    if not ok or not graded.exists():
        return Graded(student, False, record=record, reason=failure_reason(log, record), own_files=own)
    results = outcomes(nbformat.read(str(graded), as_version=4), assignment, record)
    return Graded(
        student, True, record=record, results=results, scores=scores(course, assignment, student), own_files=own
    )
