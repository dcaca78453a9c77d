"""A JupyterHub classroom for the course on one machine: real Unix users, nbgrader's exchange, formgrader.

    python -m classroom up --students 30        (make classroom)       as root
    python -m classroom down                    (make classroom-down)  as root

See docs/classroom.md for the instructor's runbook.
"""

from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
COURSE_ID = "speculative-decoding"  # nbgrader_config.py says the same
# the classroom's Python environment, readable and runnable by every user (the repo's .venv is not:
# its interpreter lives under /root/.pyenv): a copy of that interpreter and the .venv's packages
PREFIX = Path("/opt/specdec-classroom")
# the classroom's state: the exchange, the instructor's course folder, the hub's database and secrets
ROOT = Path("/srv/specdec-classroom")


class ClassroomError(Exception):
    """A problem the instructor must fix; the message says what and how."""


def log(msg):
    print(f"classroom: {msg}", flush=True)
