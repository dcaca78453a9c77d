"""The probe/judge boundary holds (issue 77): a function that stalls or floods when a judge's probe calls it costs
its own judged cell, and nothing else, graded by the real tool (`python -m autograde class`) beside a correct one.

tests/adversarial/boundary.py builds the submissions. Before issue 77, the probe waited up to the cell's timeout
for each message with no deadline for the whole call: a function printing a dot every few seconds held a class
run for ever, and 600 MB printed inside one probe grew the grader by 0.6 GB.
"""

import json
import time
from pathlib import Path

import pytest
from adversarial import boundary
from adversarial.classrun import class_run

from autograde import sandbox

pytestmark = [pytest.mark.notebooks, pytest.mark.timeout(900)]
CELL_TIMEOUT, NOTEBOOK_TIMEOUT = 20, 120
RIDGE_PART = "Part B: the ridge point"


def _graded(tmp_path, jobs, only=None):
    ok, why = sandbox.bwrap_status()
    assert ok, f"the boundary cases need the sandbox: {why}"
    expect = boundary.build(tmp_path / "subs", only=only)
    t0 = time.monotonic()
    done, rows = class_run(
        boundary.A,
        tmp_path / "subs",
        tmp_path / "work",
        "--cell-timeout",
        str(CELL_TIMEOUT),
        "--notebook-timeout",
        str(NOTEBOOK_TIMEOUT),
        "--jobs",
        str(jobs),
        "--skip-preflight",
    )
    return expect, done, rows, time.monotonic() - t0


@pytest.fixture(scope="module")
def two_at_a_time(tmp_path_factory):
    return _graded(tmp_path_factory.mktemp("boundary2"), jobs=2)


def test_the_class_finishes_and_writes_its_grades(two_at_a_time):
    expect, done, rows, seconds = two_at_a_time
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert set(rows) == set(expect), sorted(rows)
    # every submission within its notebook's limit, plus start-up: no probe holds the run
    assert seconds < len(expect) * (NOTEBOOK_TIMEOUT + 30) / 2, f"{seconds:.0f} s for {len(expect)} submissions"


@pytest.mark.parametrize("student", [*boundary.RIDGE, "disk", "correct"])
def test_a_stalling_or_flooding_function_costs_its_own_cell(two_at_a_time, student):
    expect, _, rows, _ = two_at_a_time
    total = rows[student]["total"]
    assert (float(total["score"]), total["status"]) == (expect[student].score, expect[student].status), total
    if student in boundary.RIDGE:
        ridge = rows[student][RIDGE_PART]
        assert float(ridge["score"]) == 1, ridge  # the judged cell lost; its bad-input cell still graded


def test_the_learner_reads_why(two_at_a_time, tmp_path):
    _, _, rows, _ = two_at_a_time
    assert "was still running after 20 s" in rows["stall"]["total"]["detail"], rows["stall"]["total"]
    assert "printed more than 8 MB" in rows["flood"]["total"]["detail"], rows["flood"]["total"]


def test_a_kernel_that_fills_its_folder_is_stopped(two_at_a_time):
    _, _, rows, _ = two_at_a_time
    assert "wrote more than 512 MB into its folder" in rows["disk"]["total"]["detail"], rows["disk"]["total"]


def test_a_deaf_kernel_is_started_again_and_the_notebook_goes_on(two_at_a_time):
    expect, done, rows, _ = two_at_a_time
    work = done.args[done.args.index("--work") + 1]
    for student in ("stall", "silent"):
        record = json.loads((Path(work) / "runs" / student / boundary.A / f"{boundary.A}.json").read_text())
        kinds = [e["kind"] for e in record["events"]]
        assert "restart" in kinds and record["stop"] is None, record["events"]


def test_one_at_a_time_too(tmp_path):
    expect, done, rows, seconds = _graded(tmp_path, jobs=1, only=("stall", "flood"))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    for student, e in expect.items():
        total = rows[student]["total"]
        assert (float(total["score"]), total["status"]) == (e.score, e.status), (student, total)
    assert seconds < len(expect) * (NOTEBOOK_TIMEOUT + 30), seconds
