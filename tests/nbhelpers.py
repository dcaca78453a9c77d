"""Shared helpers for the notebook tests: find notebooks, run them the way nbgrader does, read the contract."""

import re
import time
from pathlib import Path

import nbformat
from nbgrader.validator import Validator
from traitlets.config import Config

from autograde import NOTEBOOKS, REPO, SOLUTIONS, assignments

ASSIGNMENTS = assignments()
NOTEBOOK_SECONDS = 180  # the course's promise: each notebook runs on a 2-core CPU in under 3 minutes


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


class SavedOutputsValidator(RecordingValidator):
    """nbgrader's Validator judging the outputs a notebook already holds (saved after a Run All), without
    executing it again: the same verdicts (a graded cell whose output is an error fails; a changed locked
    cell is reported) from one execution."""

    def _preprocess(self, nb):
        self.executed = nb
        return nb


# Solution notebooks executed in full mode earlier in this test run: {name: (saved notebook, Run All seconds)}.
# tests/test_browser.py fills it (Run All in JupyterLab, then File > Save); tests/test_notebooks.py judges
# those outputs instead of executing the notebook a second time, and executes it itself when it is absent.
EXECUTED = {}
MEASUREMENTS = {}  # name -> the my_measurements.json its browser run wrote (specdec/measure/my_measurements.py)
SESSION_START = time.time()  # a file older than this was not written by this test run


def judge(path):
    """(Validator results, the notebook) for a notebook whose outputs were saved by a run."""
    validator = SavedOutputsValidator()
    return validator.validate(str(path)), validator.executed


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
        given = grading.get("locked") and not grading.get("grade")  # locked cells restating earlier answers
        if cell.cell_type == "code" and ("setup" in meta.get("tags", []) or grading.get("solution") or given):
            exec(compile(cell.source, f"{name}:{meta.get('nbgrader', {}).get('grade_id', 'setup')}", "exec"), namespace)
    return namespace


def without_solution_markers(source):
    """A solution cell's source with its `### BEGIN SOLUTION` / `### END SOLUTION` lines dropped."""
    return "\n".join(
        line for line in source.splitlines() if line.strip() not in ("### BEGIN SOLUTION", "### END SOLUTION")
    )


def read(path):
    return nbformat.read(str(Path(path)), as_version=4)


# docs/contract.md, parsed (tests/test_contract_doc.py keeps it true; test_contract.py and the wrong
# implementations read its signatures and rule labels)
CONTRACT = REPO / "docs" / "contract.md"
ENTRY = re.compile(r"^#### `([A-Za-z_][A-Za-z0-9_]*)(?:\((.*)\))?`\s*$")
PART = re.compile(r"^### (Part [A-Za-z0-9]+) \((\d+(?:\.\d+)?) points?\)")
RULE_LINE = re.compile(r'^- `rule: ([^`]+)` *(?:—|--) *"(.+)"\s*$')
CELL_LINE = re.compile(r"^`(test_\w+)` \((\d+(?:\.\d+)?) points?\): (.+)$")  # a test cell: id, points, what it checks


def words(text):
    """Text with markdown emphasis and code marks dropped and whitespace collapsed, for quoting."""
    return " ".join(re.sub(r"[*`]", "", text).split())


def parse_contract(text=None):
    """{assignment: {part label: {"points": float, "entries": {name: signature or None}, "rules": {label: quote},
    "cells": {grade id: {"points": float, "what": str, "rules": [label, ...]}}}}}: a rule line belongs to the part
    and to the test cell whose line ("`test_x` (1 point): what it checks") comes before it."""
    text = CONTRACT.read_text() if text is None else text
    doc, assignment, part, cell = {}, None, None, None
    for line in text.splitlines():
        if line.startswith("## "):
            name = line[3:].strip()
            assignment, part, cell = (name, None, None) if re.fullmatch(r"\d\d_\w+", name) else (None, None, None)
            if assignment:
                doc.setdefault(assignment, {})
            continue
        m = PART.match(line)
        if m and assignment:
            part = doc[assignment].setdefault(
                m.group(1), {"points": float(m.group(2)), "entries": {}, "rules": {}, "cells": {}}
            )
            cell = None
            continue
        m = ENTRY.match(line)
        if m and part is not None:
            part["entries"][m.group(1)] = None if m.group(2) is None else m.group(2).replace(" ", "")
            cell = None
            continue
        m = CELL_LINE.match(line)
        if m and part is not None:
            cell = part["cells"].setdefault(
                m.group(1), {"points": float(m.group(2)), "what": m.group(3).strip(), "rules": []}
            )
            continue
        m = RULE_LINE.match(line)
        if m and part is not None:
            part["rules"][m.group(1).strip()] = m.group(2).strip()
            if cell is not None:
                cell["rules"].append(m.group(1).strip())
    return doc


def solution_cell(name, head):
    """The source of the first cell of notebook `name`'s solution that starts with `head`."""
    return next(c.source for c in read(solution_path(name)).cells if c.source.startswith(head))


def fitted_h100_of_07(ns):
    """Notebook 07's H100 fitted to vLLM and its FIT, from 07's fit cell run in 07's solution namespace `ns`."""
    scope = dict(ns, llama_8b=ns["model_spec"]("Llama-3.1-8B"))
    exec(compile(solution_cell("07_batch_crossover", "# SpecDecode-Bench/simulator"), "07:fit", "exec"), scope)
    return scope["h100_vllm"], scope["FIT"]
