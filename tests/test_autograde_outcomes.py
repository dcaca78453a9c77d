"""Outcomes of graded test cells (autograde/outcomes.py), what is said about them (autograde/explain.py) and the rule
labels of hidden tests, without a kernel: a failing hidden assertion tells the learner which rule broke, never the
hidden inputs or expected values."""

import builtins

import nbformat
import pytest

from autograde import executor, guard_kernel
from autograde.assignment import Assignment, Part, TestCell
from autograde.explain import explain
from autograde.outcomes import KINDS, Outcome, outcomes
from autograde.records import RunRecord

SOURCE = '''"""f: the identity on integers; ValueError naming x for a negative x."""
assert f(1) == 1, f"f(1) should be 1, got {f(1)}"
### BEGIN HIDDEN TESTS
SECRET = [12345, 67890]
for x in SECRET:
    got = f(x)
    assert got == x, "rule: other inputs: f is the identity"
try:
    f(-SECRET[0])
except ValueError as e:
    assert re.search(r"\\bx\\b", str(e)), "rule: bad input: the message names x"
else:
    raise AssertionError("rule: bad input: a negative x must raise ValueError")
### END HIDDEN TESTS
'''
TEST = TestCell("test_f", 2.0, SOURCE)
ASSIGNMENT = Assignment("99_x", "99_x", [Part("Part A", "f", [TEST], ["f"])], ["f"])


def _executed(ename, evalue, line):
    cell = nbformat.v4.new_code_cell(SOURCE)
    cell.metadata["nbgrader"] = {"grade": True, "grade_id": "test_f", "locked": True, "points": 2, "solution": False}
    cell.outputs = [
        nbformat.v4.new_output(
            "error", ename=ename, evalue=evalue, traceback=[f"autograde: test cell line {line}", f"{ename}: {evalue}"]
        )
    ]
    nb = nbformat.v4.new_notebook()
    nb.cells = [cell]
    return nb


def test_the_rules_of_a_test_are_its_hidden_labels():
    assert TEST.rules == [
        "other inputs: f is the identity",
        "bad input: the message names x",
        "bad input: a negative x must raise ValueError",
    ]


def test_a_failing_hidden_assert_names_its_rule():
    out = outcomes(_executed("AssertionError", "rule: other inputs: f is the identity", 7), ASSIGNMENT, RunRecord())[
        "test_f"
    ]
    assert (out.region, out.rule) == ("hidden", "other inputs: f is the identity")
    assert "check this rule: other inputs: f is the identity" in explain(TEST, out).summary


def test_an_exception_inside_the_answer_is_labelled_by_the_statement_that_checks_it():
    out = outcomes(_executed("TypeError", "unsupported operand", 6), ASSIGNMENT, RunRecord())["test_f"]
    assert out.rule == "other inputs: f is the identity"
    out = outcomes(_executed("TypeError", "bad operand", 9), ASSIGNMENT, RunRecord())["test_f"]
    assert out.rule == "bad input: a negative x must raise ValueError"


def test_a_message_the_students_code_wrote_is_never_repeated():
    """A student's function may raise AssertionError("rule: <the hidden input>"): only the test's own labels
    are shown, so the label comes from the failing line instead."""
    out = outcomes(_executed("AssertionError", "rule: 12345", 6), ASSIGNMENT, RunRecord())["test_f"]
    assert out.rule == "other inputs: f is the identity"
    text = explain(TEST, out).summary
    assert "12345" not in text and "SECRET" not in text and "67890" not in text


def test_a_visible_failure_shows_the_visible_line_and_no_rule():
    out = outcomes(_executed("AssertionError", "f(1) should be 1, got 2", 2), ASSIGNMENT, RunRecord())["test_f"]
    assert (out.region, out.rule) == ("visible", "")
    assert "assert f(1) == 1" in explain(TEST, out).summary


def _guard_failure(student):
    """The guard's failure of test_f after a locked cell bound `limits` and the student's cell ran, in-process."""
    locked = guard_kernel.LockedBindings(packages=("specdec",))
    ns = {"__builtins__": builtins}
    before = locked.before_locked_cell(ns)
    exec("limits = [1, 2, 3]", ns)
    locked.after_locked_cell("limits = [1, 2, 3]", ns, before, "setup")
    exec(student, ns)
    return guard_kernel.run_test_cell("pass", ns, locked)


def _outcome_of(failure):
    """The outcome the grader gives a test cell whose kernel sent this failure: its error content goes into the
    notebook (ename, evalue, traceback) and, through the executor, into the run record."""
    content = guard_kernel.error_content(failure)
    names = executor.guard_rebound(content)
    record = RunRecord(rebound=[{"cell": 0, "names": names}] if names else [])
    return outcomes(_executed(content["ename"], content["evalue"], failure[2]), ASSIGNMENT, record)["test_f"]


def test_the_rebound_verdict_does_not_depend_on_the_guards_wording(monkeypatch):
    """The guard's message is for people: reworded, the outcome (and what the learner is told) is the same,
    because the verdict comes from the structured field the guard sends beside it."""
    plain = _outcome_of(_guard_failure("limits = [9]"))
    assert (plain.kind, plain.ename, plain.rebound) == ("failed", "GraderIntegrityError", "limits"), plain
    monkeypatch.setattr(
        guard_kernel.LockedBindings, "message", lambda self, changed, when: "Something else entirely, in other words."
    )
    reworded = _outcome_of(_guard_failure("limits = [9]"))
    assert reworded.evalue == "Something else entirely, in other words."
    assert {**vars(reworded), "evalue": ""} == {**vars(plain), "evalue": ""}
    assert explain(TEST, reworded) == explain(TEST, plain)


def test_the_guards_message_alone_is_not_a_rebound_verdict():
    """The guard's own wording, without its structured field (any kernel could print it), names nothing."""
    message = guard_kernel.LOCKED.message(["limits"], "Before this test")
    out = outcomes(_executed("GraderIntegrityError", message, 0), ASSIGNMENT, RunRecord())["test_f"]
    assert (out.kind, out.ename, out.rebound) == ("failed", "GraderIntegrityError", "")
    record = RunRecord(rebound=[{"cell": 0, "names": ["limits"]}])
    assert outcomes(_executed("AssertionError", "x", 2), ASSIGNMENT, record)["test_f"].rebound == ""


@pytest.mark.parametrize("kind", KINDS)
def test_every_outcome_kind_has_an_explanation(kind):
    said = explain(
        TEST, Outcome("test_f", kind, note="the notebook stopped at cell 3"), ASSIGNMENT.parts[0], timeout_s=30
    )
    assert said.summary.startswith("passed" if kind == "passed" else ("not run" if kind == "not_run" else "failed"))
    assert bool(said.hint) == (kind != "passed"), said


FAILURES = {  # every cause a failed test can have, as outcomes() reports it
    "visible assertion": dict(ename="AssertionError", line=2, region="visible"),
    "hidden rule": dict(ename="AssertionError", line=7, region="hidden", rule="other inputs: f is the identity"),
    "hidden, no rule": dict(ename="TypeError", line=5, region="hidden"),
    "not implemented": dict(ename="NotImplementedError", line=2, region="visible"),
    "undefined name": dict(ename="NameError", line=2, region="visible"),
    "rebound": dict(ename="GraderIntegrityError", rebound="limits"),
    "integrity": dict(ename="GraderIntegrityError", note="the grader received no signed verdict"),
    "other exception": dict(ename="Exception"),
}


@pytest.mark.parametrize("cause", FAILURES)
def test_every_cause_of_a_failure_has_a_summary_without_the_kernels_text_and_a_hint(cause):
    out = Outcome("test_f", "failed", evalue="SECRET kernel text", **FAILURES[cause])
    said = explain(TEST, out, ASSIGNMENT.parts[0], points=0.0, timeout_s=30)
    assert said.summary.startswith("failed (0/2 points): ") and said.hint, said
    assert "SECRET" not in said.summary and "12345" not in said.summary


def test_check_and_the_feedback_say_the_same_cases():
    """The feedback's sentence, the hint and where `check` says the test stopped come from one explanation."""
    out = outcomes(_executed("AssertionError", "rule: other inputs: f is the identity", 7), ASSIGNMENT, RunRecord())[
        "test_f"
    ]
    said = explain(TEST, out, ASSIGNMENT.parts[0])
    assert said.where == " in the hidden tests: rule: other inputs: f is the identity"
    assert said.summary.endswith("which check this rule: other inputs: f is the identity")
    assert said.hint.startswith("f() breaks a rule that Part A states")
    with pytest.raises(ValueError, match="no explanation"):
        explain(TEST, Outcome("test_f", "exploded"))


def test_an_exception_in_a_hidden_rule_is_named_by_type_in_the_hint_and_never_by_its_message():
    out = outcomes(_executed("ValueError", "bad x=12345", 6), ASSIGNMENT, RunRecord())["test_f"]
    said = explain(TEST, out, ASSIGNMENT.parts[0])
    assert "other inputs: f is the identity" in said.hint and "raised ValueError" in said.hint
    assert "12345" not in said.hint and "12345" not in said.summary


def test_a_part_without_code_of_its_own_names_the_parts_its_test_runs():
    """09's Part E only checks that Parts C and D decode exactly: an unwritten Part C is not Part E's to write."""
    source = '"""g decodes exactly."""\nassert g(f(1)) == 1\n'
    test_c = TestCell("test_c", 2.0, source)
    parts = [
        Part("Part A", "f", [TEST], ["f"]),
        Part("Part B", "g", [], ["g", "h"]),
        Part("Part C", "exact", [test_c], []),
    ]
    out = Outcome("test_c", "failed", ename="NotImplementedError", line=2, region="visible")
    hint = explain(test_c, out, parts[2], parts=parts).hint
    assert "Part C has no code of its own" in hint and "f() (Part A)" in hint and "g() (Part B)" in hint
    assert "h()" not in hint and "solution cell of Part C" not in hint
    # a part with code of its own still points at its own solution cell
    assert (
        "solution cell of Part A"
        in explain(TEST, Outcome("test_f", "failed", ename="NotImplementedError"), parts[0], parts=parts).hint
    )


def test_a_judged_failure_says_what_came_back_not_what_the_tests_own_code_raised():
    """A test a judge decides outside the kernel: the rule and what the learner's function gave back come from the
    grader's record (autograde.judge.describe), so a function that returns None where the rule wants a number is
    told so, not "your code raised TypeError" (which the test's own arithmetic on None would have raised)."""
    from autograde.judge import Broken, describe

    exc = Broken("rule: other inputs: f is the identity", describe(("value", None)))
    record = RunRecord(judged=[{"cell": 0, "rule": str(exc)[len("rule: ") :], "came_back": exc.came_back}])
    out = outcomes(_executed("AssertionError", str(exc), 3), ASSIGNMENT, record)["test_f"]
    assert (out.region, out.rule, out.came_back) == ("hidden", "other inputs: f is the identity", "returned None")
    hint = explain(TEST, out).hint
    assert "your function returned None" in hint and "raised" not in hint, hint
    # the same failure decided in the kernel, where the test's own code raised on the None, says "raised"
    out = outcomes(_executed("TypeError", "unsupported operand", 6), ASSIGNMENT, RunRecord())["test_f"]
    assert "your code raised TypeError" in explain(TEST, out).hint
    # a visible failure is the visible line's, whatever the record says of a judge
    out = outcomes(_executed("AssertionError", "f(1) should be 1, got 2", 2), ASSIGNMENT, record)["test_f"]
    assert out.region == "visible" and not out.came_back


@pytest.mark.parametrize(
    "answer, said",
    [
        (("value", None), "returned None"),
        (("value", 3.5), "returned a float"),
        (("value", {"a": 1}), "returned a dict of 1 keys"),
    ],
)
def test_what_came_back_is_described_by_its_kind_never_its_values(answer, said):
    from autograde.judge import Raised, Tensor, describe

    assert describe(answer) == said
    assert describe(("raised", Raised("TypeError", ("Exception",), "secret 12345"))) == "raised TypeError"
    assert (
        describe(("value", Tensor("torch", "int64", (1, 3), [[7, 8, 9]])))
        == "returned a torch int64 tensor of shape (1, 3)"
    )


G_SOURCE = '''"""g: the identity."""
assert g(0) == 0
### BEGIN HIDDEN TESTS
assert abs(float(g(3)) - 3.0) < 1e-12, "rule: other inputs: g is the identity"
### END HIDDEN TESTS
'''


def _hint_when(student):
    """The guard runs G_SOURCE in-process after the student's cell; its error content goes into the notebook as the
    kernel sends it; (outcome, hint)."""
    locked = guard_kernel.LockedBindings(packages=("specdec",))
    ns = {"__builtins__": builtins}
    exec(compile(student, "<student>", "exec"), ns)
    failure = guard_kernel.run_test_cell(G_SOURCE, ns, locked)
    content = guard_kernel.error_content(failure)
    cell = nbformat.v4.new_code_cell(G_SOURCE)
    cell.metadata["nbgrader"] = {"grade": True, "grade_id": "test_g", "locked": True, "points": 1, "solution": False}
    cell.outputs = [
        nbformat.v4.new_output(
            "error", ename=content["ename"], evalue=content["evalue"], traceback=content["traceback"]
        )
    ]
    nb = nbformat.v4.new_notebook()
    nb.cells = [cell]
    test = TestCell("test_g", 1.0, G_SOURCE)
    out = outcomes(nb, Assignment("99_g", "99_g", [Part("Part A", "g", [test], ["g"])], ["g"]), RunRecord())["test_g"]
    return failure, out, explain(test, out).hint


def test_a_hint_never_says_the_learners_code_raised_what_the_tests_own_code_raised():
    """g returns None where the rule wants a number: the TypeError is the test's own `float(None)`, and the hint
    says so; where g's own code raises, the hint says g raised it. The guard tells them apart by the frames after
    the test cell's (none of the student's), and says it beside the line in the traceback."""
    failure, out, hint = _hint_when("def g(x):\n    return None if x == 3 else x\n")
    assert failure[0] == "TypeError" and failure.by_test, failure
    assert (out.region, out.rule, out.by_test) == ("hidden", "other inputs: g is the identity", True), out
    assert "the test's own check raised TypeError on what your function gave back" in hint, hint
    assert "your code raised" not in hint, hint
    failure, out, hint = _hint_when("def g(x):\n    return x + 'a' if x == 3 else x\n")
    assert failure[0] == "TypeError" and not failure.by_test and not out.by_test, failure
    assert "On that input your code raised TypeError" in hint, hint
    failure, out, hint = _hint_when("import math\ndef g(x):\n    return math.sqrt(-x) if x == 3 else x\n")
    assert failure[0] == "ValueError" and not failure.by_test, failure  # raised in a C function g called
    failure, out, hint = _hint_when("def g(x):\n    return 'three' if x == 3 else x\n")
    assert failure[0] == "ValueError" and failure.by_test and "own check raised ValueError" in hint, hint


# ------------------------------------------------------------------------------------- one slip, one function named
def _two_parts():
    """Part A: step(); Part B: speedup() and best(), each tested by its own cell (issue 78's shape: 12's B and C)."""
    step = TestCell("test_step_bits", 1.0, '"""step: bits per weight."""\n')
    speed = TestCell("test_speedup", 1.0, '"""speedup: the formula."""\n')
    best = TestCell("test_best_bad_input", 1.0, '"""best: bad input."""\n')
    return [Part("Part A", "", [step], ["step"]), Part("Part B", "", [speed, best], ["speedup", "best"])]


def test_a_hint_names_only_the_function_its_test_checks():
    from autograde.explain import functions_of

    a, b = _two_parts()
    failed = Outcome("test_speedup", "failed", "AssertionError", region="hidden", rule="formula")
    hint = explain(b.tests[0], failed, b, parts=[a, b]).hint
    assert hint.startswith("speedup() breaks a rule") and "best()" not in hint, hint
    assert functions_of(b.tests[1], b) == ["best"]  # from the grade id when the docstring does not say
    assert functions_of(TestCell("test_other", 1.0, '"""both at once."""\n'), b) == ["speedup", "best"]


def test_a_hint_names_the_failing_upstream_function_the_learners_code_calls_first():
    from autograde.explain import calls_between, upstream_failures

    a, b = _two_parts()
    own = [
        "def step(x):\n    return 2 * x\n",
        "def speedup(x):\n    return helper(step(x))\n\ndef best(xs):\n    return max(xs, key=speedup)\n",
        "def broken(:\n",  # a cell that does not parse is skipped
    ]
    calls = calls_between(own, ["step", "speedup", "best"])
    assert calls == {"step": [], "speedup": ["step"], "best": []}  # speedup passed as a key is not a call
    results = {
        "test_step_bits": Outcome("test_step_bits", "failed", "AssertionError", region="hidden", rule="bits"),
        "test_speedup": Outcome("test_speedup", "failed", "AssertionError", region="hidden", rule="formula"),
        "test_best_bad_input": Outcome("test_best_bad_input", "passed"),
    }
    up = upstream_failures(b.tests[0], b, [a, b], calls, results)
    assert up == [("step", "Part A", "test_step_bits", "bits")]
    hint = explain(b.tests[0], results["test_speedup"], b, parts=[a, b], upstream=up).hint
    assert hint.startswith("first fix step() (Part A) fails test_step_bits (rule: bits): your speedup() calls it"), hint
    results["test_step_bits"] = Outcome("test_step_bits", "passed")
    assert upstream_failures(b.tests[0], b, [a, b], calls, results) == []  # a passing upstream is not named
