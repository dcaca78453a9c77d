"""Run records: what the sandboxed executor saw while it ran one notebook, one JSON file per student,
assignment and notebook under a course's runs/ folder; the outcomes, the feedback and the graders read them."""
import json
from pathlib import Path

from autograde import write_atomic


def run_record_path(folder, student, assignment, notebook):
    return Path(folder) / str(student) / str(assignment) / f"{notebook}.json"


def write_run_record(folder, record):
    """Save one run record (autograde.executor.SandboxedExecute writes it; autograde.grade_class adds `review`)."""
    path = run_record_path(folder, record["student"], record["assignment"], record["notebook"])
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, json.dumps(record).encode())
    return path


def read_run_record(folder, student, assignment, notebook):
    """The run record of the last execution of this notebook, or {} if there is none."""
    try:
        return json.loads(run_record_path(folder, student, assignment, notebook).read_text())
    except (OSError, ValueError):
        return {}
