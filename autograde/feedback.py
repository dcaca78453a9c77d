"""Feedback that shows a learner their own work and the visible tests, and nothing else.

nbgrader's feedback renders the autograded notebook with its outputs.  Those outputs were produced by
the student's kernel after it had run hidden tests (their source passes through the kernel, their
assertion messages carry reference values), so anything in them may quote hidden material.  This
preprocessor therefore removes every output and puts under each graded test cell one line written by
the grader from trusted facts only: points, and where a test failed (a line of the visible test, or
"in the hidden tests").  ClearHiddenTests (run after it) removes the hidden block from the test source.
"""

from nbconvert.preprocessors import Preprocessor
from nbformat.notebooknode import NotebookNode
from nbformat.v4 import new_markdown_cell
from traitlets import Bool, Unicode

from autograde.assignment import is_test_cell, load_assignment, nbgrader_meta
from autograde.explain import explain
from autograde.outcomes import outcomes
from autograde.records import RunRecord, read_run_record

NOTE = (
    "**Autograder feedback.** The outputs of your cells are not reproduced here (run your notebook to "
    "see them). Under each graded test you find its result: where a visible check failed, the line that "
    "failed; where a hidden test failed, only that fact, since hidden tests call your code on inputs you "
    "have not seen."
)


class SanitizeFeedback(Preprocessor):
    enabled = Bool(True)
    record_dir = Unicode("", help="where autograde.executor saved the run records").tag(config=True)

    def preprocess(self, nb, resources):
        info = resources.get("nbgrader", {})
        record = (
            read_run_record(self.record_dir, info.get("student"), info.get("assignment"), info.get("notebook"))
            if self.record_dir
            else RunRecord()
        )
        try:
            assignment = load_assignment(info.get("assignment"))
        except (ValueError, OSError, TypeError):
            assignment = None
        results = outcomes(nb, assignment, record) if assignment is not None else {}
        for cell in nb.cells:
            if cell.cell_type != "code":
                continue
            cell.execution_count = None
            if is_test_cell(cell) and assignment is not None:
                gid = nbgrader_meta(cell).get("grade_id")
                test, outcome = assignment.test(gid), results.get(gid)
                text = explain(test, outcome).summary if test and outcome else "graded"
                cell.outputs = [NotebookNode(output_type="stream", name="stdout", text=f"autograder: {text}\n")]
            else:
                cell.outputs = []
        nb.cells.insert(0, new_markdown_cell(NOTE))
        if record.review:
            nb.cells.insert(0, new_markdown_cell(f"**Flagged for review.** {record.review}"))
        return nb, resources
