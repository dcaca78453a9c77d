"""What happened to each graded test cell in a run, from trusted facts only (autograde.explain says it in
words), and what the guard's audit records say about the run."""

import re
from dataclasses import dataclass

from autograde.assignment import RULE_PREFIX, is_test_cell, nbgrader_meta
from autograde.guard_kernel import BY_TEST

TEST_LINE = re.compile(r"autograde: test cell line (\d+)")
UNDEFINED = re.compile(r"name '(\w+)' is not defined")
KINDS = ("passed", "failed", "timeout", "not_run", "crash", "missing")  # Outcome.kind; autograde.explain has each
REBOUND_NAMES_SHOWN = 8  # of what a student's cell rebound, named in the outcome (as the guard's message)
# exception names the feedback may repeat (anything else is reported as "an exception")
KNOWN_ERRORS = frozenset(
    """AssertionError NotImplementedError NameError ValueError TypeError ZeroDivisionError
KeyError IndexError AttributeError RecursionError MemoryError OverflowError RuntimeError ImportError
ModuleNotFoundError KeyboardInterrupt SystemExit UnboundLocalError SyntaxError IndentationError
StopIteration FileNotFoundError PermissionError OSError GraderIntegrityError CellTimeoutError""".split()
)


@dataclass
class Outcome:
    """What happened to one graded test cell, from trusted facts only.

    kind: one of KINDS: passed | failed | timeout | not_run | crash | missing
    line: the test-cell line where it failed (1-based) if known; region: 'visible' or 'hidden'.
    """

    grade_id: str
    kind: str
    ename: str = ""
    line: int = 0
    region: str = ""
    evalue: str = ""  # the kernel's message: student-influenced, never shown in feedback
    note: str = ""  # the grader's own explanation (timeouts, crashes)
    rebound: str = ""  # what a student's cell rebound that a locked cell defines (the guard says)
    rule: str = ""  # the label of the hidden rule that failed (from the test's own source)
    came_back: str = ""  # a judged test: what the student's function gave back (the grader's words)
    by_test: bool = False  # the test's own code raised on what came back (the guard says; wording only)

    @property
    def passed(self):
        return self.kind == "passed"


def _error_outputs(cell):
    return [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]


def outcomes(executed_nb, assignment, record):
    """{grade_id: Outcome} for every test of `assignment` in an executed notebook.

    `record` is the grader's RunRecord (autograde.records, written by autograde.executor.SandboxedExecute): which
    cells timed out, were not run, or were running when the kernel died.  It, not the notebook's outputs, is trusted
    for those facts.
    """
    cells = {nbgrader_meta(c).get("grade_id"): (i, c) for i, c in enumerate(executed_nb.cells) if is_test_cell(c)}
    timeouts = {e["cell"] for e in record.events if e["kind"] == "timeout"}
    # the grader's own verdict (no signed pass from the kernel's guard): trusted, unlike the kernel's messages
    unsigned = {e["cell"]: e["message"] for e in record.events if e["kind"] == "tampered"}
    stop = record.stop or {}
    # what the guard says a student's cell rebound (its structured field, never its message's wording)
    rebound_at = {r["cell"]: r["names"] for r in record.rebound}
    # what a judge outside the kernel decided (autograde.judge): the rule and what came back, in the grader's words
    judged_at = {j["cell"]: j for j in record.judged}
    # what the cells grading did not run (they only measure) would have set: the grader's list, so a NameError for
    # one of these names is explained, whatever the message says otherwise
    skipped_set = {name: s["cell"] for s in record.skipped for name in s.get("names", [])}
    result = {}
    for test in assignment.tests:
        if test.grade_id not in cells:
            result[test.grade_id] = Outcome(
                test.grade_id, "missing", note="the test cell was not in the graded notebook"
            )
            continue
        index, cell = cells[test.grade_id]
        errors = _error_outputs(cell)
        if stop and index > stop.get("cell", 10**9):
            result[test.grade_id] = Outcome(test.grade_id, "not_run", note=stop.get("message", ""))
            continue
        if stop and index == stop.get("cell") and stop.get("kind") == "crash":
            result[test.grade_id] = Outcome(test.grade_id, "crash", note=stop.get("message", ""))
            continue
        if index in timeouts or (stop and index == stop.get("cell") and stop.get("kind") == "timeout"):
            result[test.grade_id] = Outcome(
                test.grade_id,
                "timeout",
                ename="KeyboardInterrupt",
                note="the test did not finish within the time limit",
            )
            continue
        if index in unsigned:
            result[test.grade_id] = Outcome(test.grade_id, "failed", ename="GraderIntegrityError", note=unsigned[index])
            continue
        if not errors:
            result[test.grade_id] = Outcome(test.grade_id, "passed")
            continue
        err = errors[0]
        ename = err.get("ename", "")
        line, by_test = 0, False
        for text in err.get("traceback", []):
            m = TEST_LINE.search(text)
            if m:
                line, by_test = int(m.group(1)), BY_TEST in text
                break
        region = ""
        if line:
            region = "visible" if line <= test.visible_lines else "hidden"
        evalue = str(err.get("evalue", ""))
        rebound = ""
        if ename == "GraderIntegrityError":
            rebound = ", ".join(rebound_at.get(index, [])[:REBOUND_NAMES_SHOWN])
        rule = ""
        if region == "hidden" and not rebound:
            # the message is the kernel's (student-influenced): it is used only when it is one of the test's
            # own labels; else the label of the statement that failed, read from the test's source
            said = evalue[len(RULE_PREFIX) :].strip() if evalue.startswith(RULE_PREFIX) else ""
            rule = said if said in test.rules else test.rule_at(line)
        verdict, came_back = judged_at.get(index), ""
        if verdict is not None and region != "visible":
            # the visible part passed and the judge failed the cell: its rule and what came back are the grader's
            region, rule, came_back = "hidden", verdict.get("rule", "") or rule, verdict.get("came_back", "")
            ename = "AssertionError"
        note = ""
        undefined = UNDEFINED.search(evalue) if ename == "NameError" else None
        if undefined and undefined.group(1) in skipped_set:
            note = (
                f"{undefined.group(1)} is set in cell {skipped_set[undefined.group(1)]}, a cell that only measures "
                f"this machine and that grading does not run; define what your code needs in your own cells, "
                f"or take it as an argument"
            )
        result[test.grade_id] = Outcome(
            test.grade_id,
            "failed",
            ename=ename if ename in KNOWN_ERRORS else "Exception",
            line=line,
            region=region,
            evalue=evalue[:500],
            note=note,
            rebound=rebound,
            rule=rule,
            came_back=came_back,
            by_test=by_test and not came_back,
        )
    return result


def audit_verdict(record):
    """('tampered' | 'flagged' | '', description) from the guard's audit records of one run.

    tampered: the student's code did what no answer needs (walked the interpreter's objects, installed a
    trace, profile or audit hook, swapped a function's code, used ctypes, replaced a module or the grader's
    own code); flagged: it did what honest debugging code can do but a cheat needs (read frames, ran code it
    compiled itself), for an instructor to review."""
    events = record.audit
    if not events:
        return "", ""
    seen = {}
    for e in events:
        key = (e.get("what", ""), e.get("cell"))
        if key not in seen:
            seen[key] = e
    parts = [
        f"{what} (cell {cell}{', refused' if e.get('refused') else ''}"
        f"{', while a test ran' if e.get('during_test') else ''})"
        for (what, cell), e in seen.items()
    ]
    verdict = "tampered" if any(e.get("severity") == "tamper" for e in events) else "flagged"
    more = f" and {len(parts) - 4} more" if len(parts) > 4 else ""
    return verdict, "; ".join(parts[:4]) + more
