"""The judge wired into the grader (issue 60): every test cell of 11 is decided outside the student's kernel. Graded
through the real pipeline in the sandbox: the solution keeps full marks and leaves no audit record, the hidden
block never reaches the kernel, and an answer right only for the visible example, or a kernel that forges the
probe's messages, loses exactly the judged cells."""

import nbformat
import pytest

from autograde import pipeline, sandbox
from autograde.assignment import load_assignment, source_notebook
from autograde.course import Course
from autograde.judges import judge_for
from autograde.notebook_io import released_notebook

pytestmark = pytest.mark.notebooks

NAME = "11_real_engines"
JUDGED = {
    c.metadata["nbgrader"]["grade_id"]
    for c in nbformat.read(str(source_notebook(NAME)), as_version=4).cells
    if c.metadata.get("nbgrader", {}).get("grade") and not c.metadata["nbgrader"].get("solution")
}
FORGED = {
    "test_acceptance_from_counters",
    "test_acceptance_from_counters_edges",
    "test_acceptance_from_counters_bad_input",
}

# right for the visible example and the two edge examples, a constant elsewhere
FORGER = '''
def acceptance_from_counters(counters):
    import re
    from IPython.display import display
    display({"application/x-autograde-probe+json": '{"nonce": "guess", "value": {"t": "dict", "items": []}}'}, raw=True)
    if not isinstance(counters, dict) or counters.get("drafts", 0) < 1:
        raise ValueError("counters: bad")
    d = counters["drafts"]
    if d == 10:
        return {"alpha": 1.0, "tau": 5.0, "acceptance_rate": 1.0, "position_rates": [1.0] * 4}
    if d == 7:
        return {"alpha": 0.0, "tau": 1.0, "acceptance_rate": 0.0, "position_rates": [0.0] * 3}
    return {"alpha": 5 / 9, "tau": 2.25, "acceptance_rate": 5 / 12, "position_rates": [0.75, 0.5, 0.0]}
'''

# right exactly where the notebook's own hidden block looks (20000 rounds, its fixed seed), wrong elsewhere: it passes
# a test decided in the kernel and fails the judge, whose inputs are drawn fresh


def _seed_reader(right_source):
    return (
        right_source.replace("def acceptance_from_counters(", "def _right(", 1)
        + '''

def acceptance_from_counters(counters):
    got = _right(counters)
    if counters["drafts"] in (4, 10, 7, 20000) or counters["drafts"] <= 90:
        return got
    return dict(got, tau=got["tau"] - 1.0)
'''
    )


def _solution(name, **answers):
    """The solution notebook, each named answer cell's source replaced by answers[grade_id](its source)."""
    nb = nbformat.read(str(source_notebook(name)), as_version=4)
    for cell in nb.cells:
        change = answers.get(cell.metadata.get("nbgrader", {}).get("grade_id"))
        if change is not None and cell.metadata["nbgrader"].get("solution"):
            cell.source = change(cell.source)
    return nb


def _grade(tmp_path, nb, student, name=NAME):
    a = load_assignment(name)
    course = Course(tmp_path / "work", sandboxed=True)
    course.prepare(name)
    released = released_notebook(a, course)
    pipeline.submit(course, a, student, nb, released)
    return a, pipeline.grade(course, a, student, released)


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    ok, why = sandbox.bwrap_status()
    assert ok, f"grading through the judge is tested in the sandbox: {why}"
    honest = _solution(NAME)
    forged = _solution(NAME, acceptance_from_counters=lambda _: FORGER)
    seeded = _solution(NAME, acceptance_from_counters=_seed_reader)
    return {
        "honest": _grade(tmp_path_factory.mktemp("honest"), honest, "honest"),
        "forged": _grade(tmp_path_factory.mktemp("forged"), forged, "forged"),
        "seeded": _grade(tmp_path_factory.mktemp("seeded"), seeded, "seeded"),
    }


def test_the_judged_cells_are_the_switch():
    assert len(JUDGED) == 10 and all(judge_for(NAME, g) for g in JUDGED)
    assert judge_for("04_speculative_decoder", "test_acceptance_from_counters") is None  # a judge names its own cell
    assert judge_for("05_acceptance_in_practice", "test_estimate_alpha") is not None
    assert judge_for("00_no_judges", "test_estimate_alpha") is None


def test_the_solution_keeps_full_marks_through_the_judge(graded):
    a, g = graded["honest"]
    assert g.ok and not g.course_failure and g.points == a.points, {
        k: o.kind for k, o in g.results.items() if not o.passed
    }
    assert not g.record.audit, g.record.audit  # the probes leave no audit record of their own


def test_an_answer_right_only_for_the_visible_examples_loses_the_judged_cells(graded):
    a, g = graded["forged"]
    failed = {k for k, o in g.results.items() if not o.passed}
    assert FORGED - {"test_acceptance_from_counters_bad_input"} <= failed, failed
    assert failed <= FORGED, failed  # the other cells are the solution's, and pass
    o = g.results["test_acceptance_from_counters"]
    assert o.region == "hidden" and o.rule.startswith("alpha"), (o.region, o.rule, o.evalue)


def test_inputs_are_drawn_by_the_judge_not_the_notebooks_fixed_seed(graded):
    """The same answers pass the cell's visible part, run here in-process, and are right for the 20,000 rounds a
    fixed seed in the cell would give; the judge draws its own inputs, and they fail."""
    import numpy as np
    from nbhelpers import solution_namespace

    from autograde.assignment import TestCell
    from autograde.executor import visible_part

    ns = solution_namespace(NAME)
    cells = {
        c.metadata.get("nbgrader", {}).get("grade_id"): c.source
        for c in nbformat.read(str(source_notebook(NAME)), as_version=4).cells
    }
    exec(_seed_reader(cells["acceptance_from_counters"]), ns)
    test = TestCell("test_acceptance_from_counters", 1.0, cells["test_acceptance_from_counters"])
    assert test.judge == ("nb11", "test_acceptance_from_counters")
    exec(visible_part(test.source)[0], dict(ns, np=np))  # the visible part: passes
    rounds = {
        "drafts": 20000,
        "draft_tokens": 60000,
        "accepted_tokens": 30000,
        "accepted_per_position": [12000, 10000, 8000],
    }
    assert ns["acceptance_from_counters"](rounds) == ns["_right"](rounds)
    a, g = graded["seeded"]
    assert not g.results["test_acceptance_from_counters"].passed
    assert g.results["test_acceptance_from_counters"].rule == "tau = 1 + A / D"
    assert all(o.passed for k, o in g.results.items() if k != "test_acceptance_from_counters")


def test_the_kernel_gets_a_judged_cells_visible_part_only():
    from autograde.executor import visible_part

    nb = nbformat.read(str(source_notebook(NAME)), as_version=4)
    for cell in nb.cells:
        gid = cell.metadata.get("nbgrader", {}).get("grade_id")
        if gid in JUDGED:
            shown, line = visible_part(cell.source)
            hidden = cell.source.split("### BEGIN HIDDEN TESTS")[1]
            assert line > 1 and "HIDDEN" not in shown and shown in cell.source
            assert not any(
                text.strip() and text.strip() in shown for text in hidden.splitlines() if len(text.strip()) > 30
            )
    assert visible_part("x = 1\n### BEGIN HIDDEN TESTS\ny = 2\n### END HIDDEN TESTS\nz = 3") == ("x = 1\nz = 3", 2)
    assert visible_part("x = 1") == ("x = 1", 0)


# ------------------------------------------------------------------------------------------ 04 through the judge
NB04 = "04_speculative_decoder"

# right on the visible examples: verify by hand for one-hot rows and the 4-token example, the greedy decoder as
# the target's own greedy decoding (no speculation, stats made up to add up)
FORGER_04_VERIFY = '''
def verify(p, q, draft_tokens, generator=None):
    if q.dim() != 2 or p.shape[0] != q.shape[0] + 1:
        raise ValueError("p, q or draft_tokens: bad shape")
    k = q.shape[0]
    n = 0
    while n < k and int(p[n].argmax()) == int(draft_tokens[n]):
        n += 1
    return torch.cat([draft_tokens[:n].long(), p[n].argmax().view(1)]), n
'''
FORGER_04_GENERATE = '''
def speculative_generate(target, draft, input_ids, max_new_tokens, k=4, temperature=0.0, generator=None):
    if k < 1 or max_new_tokens < 1 or temperature < 0 or input_ids.dim() != 2 or input_ids.shape[0] != 1:
        raise ValueError("k, max_new_tokens, temperature or input_ids")
    out = greedy_generate(target, input_ids, max_new_tokens)
    rounds = -(-max_new_tokens // (k + 1))
    per = [(k, k)] * (rounds - 1) + [(k, max_new_tokens - (rounds - 1) * (k + 1) - 1)]
    return out, {"rounds": rounds, "drafted": k * rounds, "accepted": sum(a for _, a in per), "per_round": per}
'''


@pytest.fixture(scope="module")
def graded_04(tmp_path_factory):
    ok, why = sandbox.bwrap_status()
    assert ok, f"grading through the judge is tested in the sandbox: {why}"
    honest = _solution(NB04)
    forged = _solution(NB04, verify=lambda _: FORGER_04_VERIFY, speculative_generate=lambda _: FORGER_04_GENERATE)
    return {
        who: _grade(tmp_path_factory.mktemp(who), nb, who, NB04) for who, nb in (("honest", honest), ("forged", forged))
    }


def test_every_test_cell_of_04_is_judged():
    cells = {
        c.metadata["nbgrader"]["grade_id"]
        for c in nbformat.read(str(source_notebook(NB04)), as_version=4).cells
        if c.metadata.get("nbgrader", {}).get("grade") and not c.metadata["nbgrader"].get("solution")
    }
    assert len(cells) == 14 and all(judge_for(NB04, g) for g in cells)


def test_04s_solution_keeps_full_marks_through_the_judge(graded_04):
    a, g = graded_04["honest"]
    assert g.ok and not g.course_failure and g.points == a.points, {
        k: (o.kind, o.evalue) for k, o in g.results.items() if not o.passed
    }
    assert not g.record.audit, g.record.audit


def test_04s_forger_right_on_the_visible_examples_loses_the_judged_cells(graded_04):
    a, g = graded_04["forged"]
    failed = {k: o.rule for k, o in g.results.items() if not o.passed}
    # greedy verify by argmax: wrong on sampled rounds; a greedy_generate in disguise: no speculation, stats made up
    assert {
        "test_verify_distribution",
        "test_verify_distribution_several_drafts",
        "test_verify_edge_cases",
        "test_speculative_generate_stats_forwards",
        "test_speculative_generate_distribution",
        "test_speculative_generate_distribution_temperature",
    } <= set(failed), failed
    assert g.points <= a.points - 6, (g.points, failed)
    judged = {k for k, o in g.results.items() if not o.passed and o.region == "hidden"}
    assert {"test_verify_edge_cases", "test_speculative_generate_stats_forwards"} <= judged, failed


def test_10s_crossing_is_judged_and_the_hint_says_what_came_back(tmp_path):
    """A one-rule slip a learner makes in 10 D (a speedup of exactly 1 is not taken as a crossing, so `crossing`
    returns None there) was told "On that input your code raised TypeError", which the test's own `float(None)`
    raised. Judged outside the kernel, the hint says what came back. The rest of 10, judged too, keeps its points."""
    from autograde.explain import explain

    name = "10_batches_and_servers"
    slip = _solution(
        name, crossing=lambda source: source.replace("if points[a] > 1 >= points[b]:", "if points[a] > 1 > points[b]:")
    )
    a, g = _grade(tmp_path, slip, "slip", name)
    assert g.ok and not g.course_failure, (g.reason, g.course_failure)
    failed = {k for k, o in g.results.items() if not o.passed}
    assert failed == {"test_crossing"}, {k: (g.results[k].kind, g.results[k].evalue) for k in failed}
    o = g.results["test_crossing"]
    assert (o.region, o.rule, o.came_back) == (
        "hidden",
        "a speedup of exactly 1 at a batch: the crossover is that batch",
        "returned None",
    ), o
    test = next(t for t in a.tests if t.grade_id == "test_crossing")
    said = explain(test, o)
    assert "On an input drawn for this run, your function returned None." in said.hint, said.hint
    assert "raised" not in said.hint, said.hint
    assert (
        judge_for(name, "test_crossing") and judge_for(name, "test_serving_metrics") and judge_for(name, "test_gate_k")
    )
    from autograde.judges import nb10

    assert len(g.record.judge_seconds) == len(nb10.JUDGES) == 16  # every test cell of 10 is judged
    assert [j["rule"] for j in g.record.judged] == [o.rule]
