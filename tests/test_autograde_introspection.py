"""Grading integrity against introspection, through the real tool (`python -m autograde class`, sandboxed,
`--keep-flagged` so that the scores are the tests' own): a student's code that walks the interpreter's objects,
replaces the kernel's handler, swaps a function's code, plants a module, reads frames, installs a profile hook,
returns an equal-to-anything tensor, decodes nothing, or reads the test's text gets 0 on the part it targets and,
where the guard saw it, the status tampered or flagged; honest code that looks like it keeps full marks.
One class run of notebook 04, two at a time (tests/adversarial/introspection04.py)."""

import pytest
from adversarial import introspection04
from adversarial.classrun import class_run, write_report

from autograde import REPO, sandbox

pytestmark = [pytest.mark.notebooks, pytest.mark.timeout(900)]
REPORT = REPO / "tests" / "artifacts" / "introspection_report.md"


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    ok, why = sandbox.bwrap_status()
    assert ok, f"the introspection suite needs the sandbox: {why}"
    root = tmp_path_factory.mktemp("introspection")
    expect = introspection04.build(root / "subs")
    done, rows = class_run(
        introspection04.A,
        root / "subs",
        root / "work",
        "--jobs",
        "2",
        "--cell-timeout",
        "60",
        "--keep-flagged",
        "--skip-preflight",
    )
    return {"expect": expect, "done": done, "rows": rows}


def test_the_class_run_grades_every_case(run):
    assert set(run["rows"]) == set(run["expect"]), run["done"].stdout[-3000:] + run["done"].stderr[-3000:]
    assert "consistent with the grades" in run["done"].stdout


@pytest.mark.parametrize(
    "student",
    [
        "gc_walk",
        "dispatch_replaced",
        "code_swap",
        "module_stand_in",
        "frame_read",
        "profile_hook",
        "equal_anything",
        "zero_decoder",
        "request_read",
        "honest_debugging",
    ],
)
def test_case_gets_its_score_and_status(run, student):
    expect, parts = run["expect"][student], run["rows"][student]
    total = parts["total"]
    assert (float(total["score"]), total["status"]) == (expect.score, expect.status), (student, expect.what, parts)
    details = " ".join(row["detail"] for row in parts.values())
    assert all(d in details for d in expect.detail), (student, details)


def test_write_report(run):
    """tests/artifacts/introspection_report.md: case -> score and status (docs/grading.md quotes it)."""
    text = write_report(REPORT, run["expect"], run["rows"])
    assert text.count("\n") == len(run["expect"]) + 2
