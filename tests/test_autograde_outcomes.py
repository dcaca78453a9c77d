"""Outcomes of graded test cells (autograde/outcomes.py) and the rule labels of hidden tests, without a kernel:
a failing hidden assertion tells the learner which rule broke, never the hidden inputs or expected values."""
import nbformat

from autograde.assignment import Assignment, Part, TestCell
from autograde.outcomes import outcomes, summary
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
    cell.metadata["nbgrader"] = {"grade": True, "grade_id": "test_f", "locked": True, "points": 2,
                                 "solution": False}
    cell.outputs = [nbformat.v4.new_output("error", ename=ename, evalue=evalue,
                                           traceback=[f"autograde: test cell line {line}", f"{ename}: {evalue}"])]
    nb = nbformat.v4.new_notebook()
    nb.cells = [cell]
    return nb


def test_the_rules_of_a_test_are_its_hidden_labels():
    assert TEST.rules == ["other inputs: f is the identity", "bad input: the message names x",
                          "bad input: a negative x must raise ValueError"]


def test_a_failing_hidden_assert_names_its_rule():
    out = outcomes(_executed("AssertionError", "rule: other inputs: f is the identity", 7), ASSIGNMENT, RunRecord())["test_f"]
    assert (out.region, out.rule) == ("hidden", "other inputs: f is the identity")
    assert "check this rule: other inputs: f is the identity" in summary(TEST, out)


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
    text = summary(TEST, out)
    assert "12345" not in text and "SECRET" not in text and "67890" not in text


def test_a_visible_failure_shows_the_visible_line_and_no_rule():
    out = outcomes(_executed("AssertionError", "f(1) should be 1, got 2", 2), ASSIGNMENT, RunRecord())["test_f"]
    assert (out.region, out.rule) == ("visible", "")
    assert "assert f(1) == 1" in summary(TEST, out)
