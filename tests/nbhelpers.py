"""Shared helpers for the notebook tests: find notebooks, run them the way nbgrader does."""
import time
from pathlib import Path

import nbformat
from nbgrader.validator import Validator
from traitlets.config import Config

from autograde import NOTEBOOKS, SOLUTIONS, assignments

ASSIGNMENTS = assignments()
NOTEBOOK_SECONDS = 180      # the course's promise: each notebook runs on a 2-core CPU in under 3 minutes


def solution_path(name):
    return SOLUTIONS / name / f"{name}.ipynb"


def learner_path(name):
    return NOTEBOOKS / name / f"{name}.ipynb"


def graded_code_cells(nb):
    return [c for c in nb.cells if c.cell_type == "code" and c.metadata.get("nbgrader", {}).get("grade")]


class RecordingValidator(Validator):
    """nbgrader's Validator that also keeps the executed notebook, so one run answers both
    "do the graded tests pass?" and "did any cell raise?"."""

    executed = None

    def _preprocess(self, nb):
        self.executed = super()._preprocess(nb)
        return self.executed


def validate(path, cell_timeout=NOTEBOOK_SECONDS):
    """(Validator results, executed notebook, wall seconds) for one notebook."""
    validator = RecordingValidator(config=Config({"Execute": {"timeout": cell_timeout}}))
    t0 = time.perf_counter()
    results = validator.validate(str(path))
    return results, validator.executed, time.perf_counter() - t0


def error_outputs(nb):
    """[(cell index, 'Ename: evalue')] for every cell whose outputs hold an error."""
    found = []
    for i, cell in enumerate(nb.cells):
        for out in cell.get("outputs", []):
            if out.output_type == "error":
                found.append((i, f"{out.ename}: {out.evalue}"))
    return found


def solution_namespace(name):
    """Execute only the setup cell (tag 'setup'), the locked given cells and the solution cells; return the names.

    Solution cells define functions, so this is the cheap way to call the graded functions directly.
    """
    nb = nbformat.read(str(solution_path(name)), as_version=4)
    namespace = {"__name__": f"solution_{name}"}
    for cell in nb.cells:
        meta = cell.metadata
        grading = meta.get("nbgrader", {})
        given = grading.get("locked") and not grading.get("grade")    # locked cells restating earlier answers
        if cell.cell_type == "code" and ("setup" in meta.get("tags", []) or grading.get("solution") or given):
            exec(compile(cell.source, f"{name}:{meta.get('nbgrader', {}).get('grade_id', 'setup')}", "exec"), namespace)
    return namespace


def without_solution_markers(source):
    """A solution cell's source with its `### BEGIN SOLUTION` / `### END SOLUTION` lines dropped."""
    return "\n".join(line for line in source.splitlines()
                     if line.strip() not in ("### BEGIN SOLUTION", "### END SOLUTION"))


def read(path):
    return nbformat.read(str(Path(path)), as_version=4)
