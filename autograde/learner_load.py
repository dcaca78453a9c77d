"""What a learner notebook asks of the learner, counted: words to read, code lines to read and run, points to earn.

Counted in the learner copies (notebooks/), as the learner gets them:

- **words**: the words of the markdown cells;
- **visible code lines**: the non-blank lines of every code cell the learner sees unfolded: solution stubs, test
  cells (their visible part), the cells that measure or plot. A given cell that restates earlier answers counts
  only if it is not folded (`jupyter.source_hidden`, written by `make release`: autograde/given.py);
- **points**: the points of the graded test cells.

The course's rule (issue "the measuring is the learner's work"): at most `MAX_LINES_PER_POINT` visible code lines
per point in every notebook. The README's minutes come from `minutes`, a stated estimate of a learner's time:
reading at `WORDS_PER_MINUTE`, code read and run at `LINES_PER_MINUTE`, `MINUTES_PER_POINT` of work per point, and
the notebook's Run All time, rounded to the nearest 5 minutes. `python -m autograde load` prints the table;
tests/test_learner_load.py checks the rule and the README against it.
"""

import re

import nbformat

from autograde import NOTEBOOKS, REPO, assignments
from autograde.assignment import is_test_cell, nbgrader_meta
from autograde.given import is_folded

MAX_LINES_PER_POINT = 60
WORDS_PER_MINUTE = 200  # careful reading of technical prose with formulas
LINES_PER_MINUTE = 40  # code read and run, not written
MINUTES_PER_POINT = 2.5  # writing and checking a graded function: a 3-point part in about 8 minutes

__all__ = ["MAX_LINES_PER_POINT", "count", "minutes", "table", "readme_rows", "report"]


def _lines(source):
    return sum(1 for line in source.splitlines() if line.strip())


def count(name, folder=NOTEBOOKS):
    """{"words", "code_lines", "folded_lines", "visible_lines", "points", "code_cells"} of a learner notebook."""
    path = folder / name / f"{name}.ipynb"
    if not path.is_file():
        raise ValueError(f"name: no learner notebook {path} (run make release)")
    nb = nbformat.read(str(path), as_version=4)
    out = {"words": 0, "code_lines": 0, "folded_lines": 0, "visible_lines": 0, "points": 0.0, "code_cells": 0}
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            out["words"] += len(cell.source.split())
            continue
        if cell.cell_type != "code":
            continue
        if is_test_cell(cell):
            out["points"] += float(nbgrader_meta(cell).get("points", 0))
        n = _lines(cell.source)
        out["code_cells"] += 1
        out["code_lines"] += n
        out["folded_lines" if is_folded(cell) else "visible_lines"] += n
    return out


def minutes(load, run_seconds):
    """The estimate of a learner's minutes for a notebook of this `load` (count's dict) whose Run All takes
    `run_seconds`, rounded to the nearest 5 minutes (at least 5)."""
    if not run_seconds >= 0:
        raise ValueError(f"run_seconds must be >= 0, got {run_seconds!r}")
    raw = (
        load["words"] / WORDS_PER_MINUTE
        + load["visible_lines"] / LINES_PER_MINUTE
        + MINUTES_PER_POINT * load["points"]
        + run_seconds / 60
    )
    return max(5, 5 * round(raw / 5))


def table(names=None, folder=NOTEBOOKS):
    """{name: count(name) with "lines_per_point"} for every assignment (or those named)."""
    rows = {}
    for name in names or assignments():
        load = count(name, folder)
        load["lines_per_point"] = load["visible_lines"] / load["points"] if load["points"] else float("inf")
        rows[name] = load
    return rows


README_ROW = re.compile(r"^\| `(\d\d_\w+)` \| (\d+) \| (\d+) \|")


def readme_rows(text=None):
    """{name: (minutes, Run All seconds)} of the README's notebook table."""
    text = (REPO / "README.md").read_text() if text is None else text
    return {m.group(1): (int(m.group(2)), int(m.group(3))) for m in map(README_ROW.match, text.splitlines()) if m}


def report():
    """The table as text: the counts, lines per point against the rule, and the minutes estimated against the
    README's."""
    readme = readme_rows()
    lines = [
        f"{'notebook':32s} {'words':>6s} {'visible':>8s} {'folded':>7s} {'points':>6s} {'lines/pt':>8s} "
        f"{'minutes':>7s} {'README':>6s}"
    ]
    for name, load in table().items():
        said, run_s = readme.get(name, (None, 0))
        flag = "" if load["lines_per_point"] <= MAX_LINES_PER_POINT else f"  over {MAX_LINES_PER_POINT}"
        lines.append(
            f"{name:32s} {load['words']:6d} {load['visible_lines']:8d} {load['folded_lines']:7d} "
            f"{load['points']:6g} {load['lines_per_point']:8.1f} {minutes(load, run_s):7d} "
            f"{'-' if said is None else said:>6}{flag}"
        )
    return "\n".join(lines)
