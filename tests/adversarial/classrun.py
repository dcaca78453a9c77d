"""Run the real grading tool on a folder of submissions and read its grades CSV."""

import csv
import subprocess
import sys
from pathlib import Path

from autograde import tool_env


def class_run(assignment, subs, work, *extra, env=None):
    """`python -m autograde class ASSIGNMENT SUBS --work WORK EXTRA...` from `/`; returns (the finished process,
    {student: {part: CSV row}}), the rows empty when no CSV was written."""
    done = subprocess.run(
        [sys.executable, "-m", "autograde", "class", assignment, str(subs), "--work", str(work), *extra],
        capture_output=True,
        text=True,
        env=env or tool_env(),
        cwd="/",
    )
    rows = {}
    csv_path = Path(work) / f"grades_{assignment}.csv"
    if csv_path.exists():
        with open(csv_path, newline="") as fh:
            for row in csv.DictReader(fh):
                rows.setdefault(row["student"], {})[row["part"]] = row
    return done, rows


def write_report(path, expect, rows):
    """A markdown table, one line per case: what it does, its total score and status (docs/grading.md quotes it)."""
    lines = ["| case | what it does | score | status |", "|---|---|---|---|"]
    for student, exp in expect.items():
        total = rows[student]["total"]
        lines.append(f"| {student} | {exp.what} | {total['score']}/{total['max_score']} | {total['status']} |")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    return path.read_text()
