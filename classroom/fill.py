"""Learner notebooks filled from the solutions, as three kinds of students would submit them (the
end-to-end test and the 30-user measurement use them)."""

import copy

import nbformat

from classroom import REPO

KINDS = ("correct", "partial", "blank")


def _read(folder, assignment):
    return nbformat.read(str(REPO / folder / assignment / f"{assignment}.ipynb"), as_version=4)


def filled_notebook(assignment, kind, partial_part):
    """The learner notebook with the solution code of solutions/: in every solution cell (correct), only
    in the cell whose grade_id is `partial_part` (partial), in none (blank)."""
    solution = _read("solutions", assignment)
    answers = {
        c.metadata["nbgrader"]["grade_id"]: c.source
        for c in solution.cells
        if c.metadata.get("nbgrader", {}).get("solution")
    }
    nb = copy.deepcopy(_read("notebooks", assignment))
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        if meta.get("solution") and (kind == "correct" or (kind == "partial" and meta["grade_id"] == partial_part)):
            # the solution without nbgrader's markers, as a learner would type it
            cell.source = "\n".join(
                line
                for line in answers[meta["grade_id"]].splitlines()
                if "### BEGIN SOLUTION" not in line and "### END SOLUTION" not in line
            )
    return nb


def expected_points(assignment, kind, partial_part):
    """Points such a submission earns: the test cells that follow each answered solution cell."""
    total, answered = 0.0, False
    for cell in _read("notebooks", assignment).cells:
        meta = cell.metadata.get("nbgrader", {})
        if meta.get("solution"):
            answered = kind == "correct" or (kind == "partial" and meta["grade_id"] == partial_part)
        elif meta.get("grade") and answered:
            total += meta["points"]
    return total


def max_points(assignment):
    return sum(
        c.metadata["nbgrader"]["points"]
        for c in _read("notebooks", assignment).cells
        if c.metadata.get("nbgrader", {}).get("grade")
    )
