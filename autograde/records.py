"""Run records: what the sandboxed executor saw while it ran one notebook, one JSON file per student,
assignment and notebook under a course's runs/ folder; the outcomes, the feedback and the graders read them."""

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path

from autograde import write_atomic


@dataclass
class RunRecord:
    """What happened while the sandboxed executor ran one notebook (autograde.executor.SandboxedExecute
    writes it; autograde.grade_class adds `review`).  The grader's own observations, trusted where the
    notebook's outputs are not: which cells timed out, crashed or were not run.  Every field has a default,
    so an empty record (no run, or an unreadable file) is RunRecord()."""

    student: str = ""
    assignment: str = ""
    notebook: str = ""
    events: list = field(default_factory=list)  # {kind: error|timeout|crash|output|tampered, cell, message}
    stop: dict | None = None  # the event that stopped the run ({kind, cell, message}), or None
    sandbox: bool = False  # the kernel ran in bubblewrap
    cgroups: list = field(default_factory=list)  # cgroup controllers that bounded the sandbox
    output_bytes: int = 0  # output kept, all cells
    exit_code: int | None = None  # of a kernel that died, when it could be read
    seconds: float = 0.0  # wall time of the run, kernel start-up included
    threads: int = 0  # torch / OpenMP / MKL threads the kernel was held to
    # locked cells (setup, given answers) that raised: {cell, grade_id, ename, evalue, after_student_code}
    locked_errors: list = field(default_factory=list)
    # the guard's audit records: {severity: tamper|flag, what, cell, while_cell, during_test, refused}
    audit: list = field(default_factory=list)
    # test cells the guard failed because code outside the locked cells had rebound or changed what those cells
    # define: {cell, names}, from the guard's structured field (autograde.guard_kernel.Failure.rebound)
    rebound: list = field(default_factory=list)
    review: str = ""  # why the submission waits for an instructor's review
    # cells of the course's own code (as released, not a test, not changed by the student) that ran past their
    # time limit: {cell, seconds}. The course's failure, never the student's points (autograde.pipeline)
    course_timeouts: list = field(default_factory=list)
    # cells of the course's own code, tagged `measures` and unchanged, that grading did not run: {cell, names}
    # (names: what the cell would have set, for the hint when a student's code needs one of them)
    skipped: list = field(default_factory=list)
    # test cells a judge decided outside the kernel (autograde.judge) and failed: {cell, rule, came_back}; the
    # rule the judge found broken and what the student's function gave back (its type and shape, or the type of
    # what it raised), in the grader's own words
    judged: list = field(default_factory=list)
    # seconds each judge took, probes and references together, and of them waiting on the kernel:
    # {cell, seconds, in_kernel}
    judge_seconds: list = field(default_factory=list)

    def to_dict(self):
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data):
        """A record from its JSON object; keys it does not know are ignored."""
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


def run_record_path(folder, student, assignment, notebook):
    return Path(folder) / str(student) / str(assignment) / f"{notebook}.json"


def write_run_record(folder, record):
    """Save one RunRecord as JSON; return its path."""
    path = run_record_path(folder, record.student, record.assignment, record.notebook)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, json.dumps(record.to_dict()).encode())
    return path


def read_run_record(folder, student, assignment, notebook):
    """The RunRecord of the last execution of this notebook; an empty RunRecord() if there is none."""
    try:
        data = json.loads(run_record_path(folder, student, assignment, notebook).read_text())
    except (OSError, ValueError):
        return RunRecord()
    return RunRecord.from_dict(data) if isinstance(data, dict) else RunRecord()
