"""Grading leaves out the course's cells that only measure (tagged `measures`): each speed notebook's solution,
graded as a student's submission, still scores full marks, every tagged cell is left out and no cell that runs
raises (so nothing that runs needs what a skipped cell would have set)."""

import nbformat
import pytest

from autograde import assignments, pipeline
from autograde.assignment import is_measuring_cell, load_assignment, source_notebook
from autograde.course import Course
from autograde.notebook_io import released_notebook

pytestmark = pytest.mark.notebooks


def _measuring():
    out = []
    for name in assignments():
        if any(is_measuring_cell(c) for c in nbformat.read(str(source_notebook(name)), as_version=4).cells):
            out.append(name)
    return out


def test_the_speed_notebooks_tag_their_measuring_cells():
    assert {
        "05_acceptance_in_practice",
        "06_h100_configs_real_timings",
        "09_speculation_that_pays",
        "10_batches_and_servers",
        "11_real_engines",
    } <= set(_measuring())


@pytest.mark.parametrize("name", _measuring())
def test_the_solution_scores_full_marks_with_its_measuring_cells_left_out(name, tmp_path):
    a = load_assignment(name)
    course = Course(tmp_path / "work", sandboxed=False)
    course.prepare(name)
    released = released_notebook(a, course)
    solution = nbformat.read(str(source_notebook(name)), as_version=4)  # whole, as a student submits it
    pipeline.submit(course, a, "reference", solution, released)
    graded = pipeline.grade(course, a, "reference", released)
    assert graded.ok, graded.reason
    assert not graded.course_failure, graded.course_failure
    assert graded.points == a.points, {g: o.kind for g, o in graded.results.items() if not o.passed}
    tagged = sum(is_measuring_cell(c) for c in released.cells)
    assert len(graded.record.skipped) == tagged > 0, (len(graded.record.skipped), tagged)
    executed = nbformat.read(str(course.path("autograded", "reference", name) / f"{a.notebook}.ipynb"), as_version=4)
    raised = [
        i for i, c in enumerate(executed.cells) if any(o.get("output_type") == "error" for o in c.get("outputs", []))
    ]
    assert not raised, f"{name}: cells {raised} raised with the measuring cells left out"
