"""Grading integrity on assignment 04, through the real tool (`python -m autograde class`, sandboxed):
submissions that rebind what a test trusts lose the parts they target, and correct answers written
differently from the solution keep full marks.  One class run, two at a time (tests/adversarial/cases04.py)."""

import pytest
from adversarial import cases04
from adversarial.classrun import class_run, write_report

from autograde import REPO, sandbox

pytestmark = [pytest.mark.notebooks, pytest.mark.timeout(900)]
REPORT = REPO / "tests" / "artifacts" / "integrity_report.md"


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    ok, why = sandbox.bwrap_status()
    assert ok, f"the integrity suite needs the sandbox: {why}"
    root = tmp_path_factory.mktemp("integrity")
    expect = cases04.build(root / "subs")
    done, rows = class_run(
        cases04.A, root / "subs", root / "work", "--jobs", "2", "--cell-timeout", "60", "--skip-preflight"
    )
    return {"expect": expect, "done": done, "rows": rows}


def test_the_class_run_grades_every_case(run):
    assert set(run["rows"]) == set(run["expect"]), run["done"].stdout[-3000:] + run["done"].stderr[-3000:]
    assert "consistent with the grades" in run["done"].stdout


@pytest.mark.parametrize("student", ["rebind_reference", "rebind_counter", "loop_verify", "static_cache_decoder"])
def test_case_gets_its_score_and_status(run, student):
    expect, parts = run["expect"][student], run["rows"][student]
    total = parts["total"]
    assert (float(total["score"]), total["status"]) == (expect.score, expect.status), (student, expect.what, parts)
    details = " ".join(row["detail"] for row in parts.values())
    assert all(d in details for d in expect.detail), (student, details)


def test_rebinding_costs_the_part_it_targets(run):
    for student in ("rebind_reference", "rebind_counter"):
        part_b = next(row for part, row in run["rows"][student].items() if part.startswith("Part B"))
        assert "test_speculative_generate_greedy: failed" in part_b["detail"], part_b
        assert "rebound or changed" in part_b["detail"] and "new names" in part_b["detail"], part_b


def test_write_report(run):
    """tests/artifacts/integrity_report.md: case -> score and status (docs/grading.md quotes it)."""
    text = write_report(REPORT, run["expect"], run["rows"])
    assert text.count("\n") == len(run["expect"]) + 2
