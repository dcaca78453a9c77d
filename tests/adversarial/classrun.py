"""Run the real grading tool on a folder of submissions and read its grades CSV."""
import csv
import subprocess
import sys
from pathlib import Path

from autograde import tool_env


def class_run(assignment, subs, work, *extra, env=None):
    """`python -m autograde class ASSIGNMENT SUBS --work WORK EXTRA...` from `/`; returns (the finished process,
    {student: {part: CSV row}}), the rows empty when no CSV was written."""
    done = subprocess.run([sys.executable, "-m", "autograde", "class", assignment, str(subs), "--work", str(work),
                           *extra], capture_output=True, text=True, env=env or tool_env(), cwd="/")
    rows = {}
    csv_path = Path(work) / f"grades_{assignment}.csv"
    if csv_path.exists():
        with open(csv_path, newline="") as fh:
            for row in csv.DictReader(fh):
                rows.setdefault(row["student"], {})[row["part"]] = row
    return done, rows
