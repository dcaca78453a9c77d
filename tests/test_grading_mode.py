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


def test_plain_nbgrader_autograde_runs_the_judges(tmp_path):
    """Issue 77: graded by plain `nbgrader autograde` (what formgrader's Autograde button runs), a judged cell was
    decided by its visible part alone: a submission of 01 whose functions return the visible examples' constants
    scored 8 of 9 (measured, with nbgrader's own Execute). The course's nbgrader_config.py now puts the course's
    executor in nbgrader's autograde step: in a copy of the course laid out as that config says, the same
    submission scores 0 and the solution 9."""
    import os
    import shutil
    import subprocess
    import sys

    from adversarial.cases import HARDCODED, A, released, solution_answers, trimmed, with_answers
    from nbgrader.api import Gradebook

    from autograde import REPO

    root = tmp_path / "course"
    (root / "solutions").mkdir(parents=True)
    (root / "autograde" / "work").mkdir(parents=True)  # where the config keeps the gradebook
    shutil.copytree(REPO / "solutions" / A, root / "solutions" / A)
    shutil.copy(REPO / "nbgrader_config.py", root / "nbgrader_config.py")
    bin_dir = os.path.dirname(sys.executable)  # nbgrader's database commands run alembic from there
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "SPECDEC_QUICK": "1",
        "PATH": bin_dir + os.pathsep + os.environ["PATH"],
    }

    def nbgrader(*args):
        done = subprocess.run(
            [sys.executable, "-m", "nbgrader", *args], cwd=root, env=env, capture_output=True, text=True, timeout=600
        )
        assert done.returncode == 0, f"nbgrader {' '.join(args)}:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
        return done

    nbgrader("db", "assignment", "add", A)
    nbgrader("generate_assignment", A, "--force")
    scores = {}
    for student, answers in (("constant", HARDCODED), ("reference", solution_answers())):
        nbgrader("db", "student", "add", student)
        sub = root / "autograde" / "work" / "submitted" / student / A
        sub.mkdir(parents=True)
        nbformat.write(with_answers(trimmed(released()), answers), str(sub / f"{A}.ipynb"))
        (sub / "timestamp.txt").write_text("2026-12-07 12:00:00.000000 UTC")
        nbgrader("autograde", A, "--student", student, "--force")
        with Gradebook(f"sqlite:///{root / 'autograde' / 'work' / 'gradebook.db'}") as gb:
            nb = gb.find_submission_notebook(A, A, student)
            scores[student] = (nb.score, nb.max_score)
    assert scores == {"constant": (0, 9), "reference": (9, 9)}, scores
