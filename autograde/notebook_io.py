"""Notebook files: a submitted notebook read with a one-line reason when it is not one, the released learner
notebook of an assignment, and the graded part of a notebook."""

import json
from pathlib import Path

import nbformat

from autograde import NOTEBOOKS
from autograde.assignment import is_test_cell


def read_json_notebook(path):
    """nbformat notebook from a file, or raise ValueError with a one-line reason."""
    try:
        text = Path(path).read_bytes().decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError("the file is not UTF-8 text") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"the file is not valid JSON ({exc.msg} at line {exc.lineno})") from None
    if not isinstance(data, dict) or "cells" not in data:
        raise ValueError("the JSON is not a notebook (no 'cells')")
    try:
        nb = nbformat.reads(text, as_version=4)
        nbformat.validate(nb)
    except Exception as exc:  # noqa: BLE001 (nbformat raises several types)
        raise ValueError(
            f"the notebook does not follow the notebook format ({str(exc).splitlines()[0][:120]})"
        ) from None
    return nb


def released_notebook(assignment, course=None):
    """The learner notebook of an assignment: the fresh release in a course's work folder if there is one
    (the class run releases before grading), else the committed one in notebooks/."""
    path = NOTEBOOKS / assignment.name / f"{assignment.notebook}.ipynb"
    if course is not None:
        fresh = course.work / "release" / assignment.name / f"{assignment.notebook}.ipynb"
        if fresh.exists():
            path = fresh
    return nbformat.read(str(path), as_version=4)


def graded_part(nb):
    """A copy of notebook `nb` cut after its last graded test cell (the cells after it only measure)."""
    import copy

    last = max(i for i, c in enumerate(nb.cells) if is_test_cell(c))
    nb = copy.deepcopy(nb)
    nb.cells = nb.cells[: last + 1]
    return nb
