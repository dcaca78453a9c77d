"""What to tell a person about a test cell's outcome: one ladder of the cases, for the three places that say it.

summary  the trusted sentence under the test in the feedback and the grades CSV (no kernel text, no
         hidden source: safe to show a learner);
hint     what `python -m autograde check` advises the learner to do (it may quote the visible check's
         own message: the learner runs their own notebook);
where    where the test stopped, as `check` prints it after the test's name.
"""

import re
from dataclasses import dataclass

from autograde.assignment import points_text
from autograde.outcomes import KINDS

HIDDEN_INPUTS = "they call your code on inputs that are not shown: other models, hardware, random values, bad input"


@dataclass(frozen=True)
class Explanation:
    summary: str
    hint: str  # "" for a passed test
    where: str = ""  # "" when there is nothing to add to the test's name


def _called_elsewhere(test, part, parts):
    """[(function, part label)] of other parts' functions that the test's source names (calls, or its docstring
    says it runs), in the parts' order."""
    out = []
    for other in parts:
        if other is part:
            continue
        out += [(f, other.label) for f in other.functions if re.search(rf"\b{re.escape(f)}\b", test.source)]
    return out


def functions_of(test, part):
    """The functions of `part` that `test` checks: those its docstring opens with ("moe_speedup: ...") or its grade
    id names (test_moe_speedup_bad_input), else every function of the part."""
    if part is None:
        return []
    opens = [f for f in part.functions if re.match(rf"\s*{re.escape(f)}\b", test.what)]
    named = [f for f in part.functions if re.match(rf"test_{re.escape(f)}(_|$)", test.grade_id)]
    return opens or named or list(part.functions)


def calls_between(sources, functions):
    """{function: the other `functions` it calls}, read from the code cells' `sources` (the learner's own code: a
    cell that does not parse is skipped), for the functions defined at a cell's top level."""
    import ast

    wanted, out = set(functions), {}
    for source in sources:
        try:
            tree = ast.parse(source)
        except (SyntaxError, ValueError):
            continue
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in wanted:
                called = {n.func.id for n in ast.walk(node) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
                out[node.name] = sorted((called & wanted) - {node.name})
    return out


def upstream_failures(test, part, parts, calls, results):
    """[(function, part label, grade id, rule)]: the functions of other parts that the test's functions call, in the
    learner's own code (`calls`, from calls_between; followed through), and whose own tests fail in `results`
    ({grade_id: Outcome}), the furthest upstream first, each with its first failing test and that test's rule."""
    owner = {f: p for p in parts for f in p.functions}
    seen, order, todo = set(), [], list(functions_of(test, part))
    while todo:
        f = todo.pop(0)
        for g in calls.get(f, []):
            if g not in seen and owner.get(g) is not None and owner[g] is not part:
                seen.add(g)
                order.append(g)
                todo.append(g)
    found = []
    for g in reversed(order):
        p = owner[g]
        failing = [t for t in p.tests if g in functions_of(t, p) and not results[t.grade_id].passed]
        if failing:
            found.append((g, p.label, failing[0].grade_id, results[failing[0].grade_id].rule))
    return found


def explain(test, outcome, part=None, *, points=None, timeout_s=None, parts=(), upstream=()):
    """The Explanation of `outcome` (autograde.outcomes.Outcome) of `test` (autograde.assignment.TestCell).

    part: the test's Part (its functions, label and worked example make the hint concrete); points: the
    test's score, shown in the summary when given; timeout_s: the cell time limit the hint names; parts: every
    Part of the assignment (a part without code of its own names the earlier parts its test calls); upstream:
    upstream_failures(...), the failing functions of other parts that the test's own functions call, which the hint
    names first. Raises ValueError for a kind that autograde.outcomes.KINDS does not list."""
    pts = f" ({points:g}/{points_text(test.points)})" if points is not None else ""
    fns = ", ".join(f"{f}()" for f in functions_of(test, part)) or "your code"
    label = part.label if part else "this part"
    example = f"\n          Worked example: {part.example}" if part and part.example else ""
    kind = outcome.kind
    if kind not in KINDS:
        raise ValueError(f"no explanation for the outcome kind {kind!r} (autograde.outcomes.KINDS: {KINDS})")
    if kind == "passed":
        return Explanation(f"passed{pts}", "")
    if kind == "timeout":
        limit = f"{timeout_s} s" if timeout_s is not None else "the time limit"
        return Explanation(
            f"failed{pts}: the test did not finish within the time limit (an infinite loop?)",
            f"the test did not finish within {limit}: look for an infinite loop in {fns}.",
            ": time limit",
        )
    if kind in ("crash", "not_run"):
        hint = (
            f"the notebook stopped before this test ({outcome.note}). Restart the kernel, run all cells, "
            f"and fix the cell that stops it."
        )
        if kind == "crash":
            return Explanation(f"failed{pts}: the kernel died while this test ran", hint, ": not run")
        return Explanation(f"not run{pts}: the notebook stopped before this test ({outcome.note})", hint, ": not run")
    if kind == "missing":
        return Explanation(
            f"failed{pts}: {outcome.note}",
            f"{outcome.note}: keep every test cell of the notebook as the course gave it.",
        )

    # kind == "failed". Where it failed, from the trusted line number (the summary and `check` say it) ...
    if outcome.region == "visible":
        at = f"{outcome.ename} at line {outcome.line} of the visible test:\n    {test.line(outcome.line)}"
        where = f" at line {outcome.line} of the visible test:\n      {test.line(outcome.line)}"
    elif outcome.region == "hidden" and outcome.rule:
        at = f"{outcome.ename} in the hidden tests, which check this rule: {outcome.rule}"
        where = f" in the hidden tests: rule: {outcome.rule}"
    elif outcome.region == "hidden":
        at, where = f"{outcome.ename} in the hidden tests ({HIDDEN_INPUTS})", " in the hidden tests"
    else:
        at, where = outcome.note or outcome.ename, ""
    summary = f"failed{pts}: {at}"
    # ... and why, with what to do about it: one case per cause
    if outcome.rebound:  # the guard's verdict (only with GraderIntegrityError)
        summary = (
            f"failed{pts}: your code rebound or changed {outcome.rebound}, which the course's locked cells "
            f"define and the tests rely on; the course's version was put back and this test counts as "
            f"failed (give your own helpers new names)"
        )
        hint = (
            f"your code rebound or changed {outcome.rebound}, which the course's locked cells (setup, given "
            f"answers) define and the tests rely on. Give your own helpers new names and leave the given "
            f"ones as they are; the course's version was put back and this test counted as failed."
        )
    elif outcome.ename == "GraderIntegrityError":
        hint = (
            outcome.note or "the test ran with Python's builtins or hooks modified: remove the code that changes them."
        )
    elif outcome.ename == "NotImplementedError":
        elsewhere = _called_elsewhere(test, part, parts) if part and not part.functions else []
        if elsewhere:
            named = ", ".join(f"{f}() ({where})" for f, where in elsewhere)
            hint = (
                f"{label} has no code of its own to write: its test runs your {named}, and one of them "
                f"still raises NotImplementedError. Write those first."
            )
        else:
            hint = f"write {fns} in the solution cell of {label}: it still raises NotImplementedError.{example}"
    elif outcome.ename == "NameError" and outcome.note:
        hint = outcome.note + "."
    elif outcome.ename == "NameError":
        hint = (
            f"a name the test needs is not defined ({outcome.evalue}). Keep the function names and "
            f"signatures as given, and make sure every cell above runs without an error."
        )
    elif outcome.region == "hidden" and outcome.rule:
        # the exception's type only: its message is the student's code's, and could carry the hidden inputs
        raised = ""
        if outcome.ename not in ("AssertionError", "Exception"):
            raised = (
                f" On that input the test's own check raised {outcome.ename} on what your function gave back: "
                f"look at what it returns there (its type, None)."
                if outcome.by_test
                else f" On that input your code raised {outcome.ename} (where the rule wants an answer)."
            )
        if outcome.came_back:  # a judge outside the kernel saw what came back: say that, nothing else
            raised = f" On an input drawn for this run, your function {outcome.came_back}."
        hint = (
            f"{fns} breaks a rule that {label} states and the hidden tests check on other inputs: "
            f"{outcome.rule}.{raised} Read the part's text and docstring for that rule."
        )
    elif outcome.region == "hidden":
        hint = (
            f"{fns} passes the visible checks but not the hidden ones, which use other inputs. Make it "
            f"work for every valid input (not only the worked example), return plain Python numbers, and "
            f"raise ValueError naming the argument on bad input, as {label} asks."
        )
    elif outcome.ename == "AssertionError":
        hint = f"the visible check failed: {outcome.evalue or '(no message)'}{example}"
    else:
        hint = f"{fns} raised {outcome.ename}: {outcome.evalue}{example}"
    if upstream:
        first = "; ".join(
            f"{g}() ({label}) fails {grade_id}" + (f" (rule: {rule})" if rule else "")
            for g, label, grade_id, rule in upstream
        )
        hint = f"first fix {first}: your {fns} calls it. Then: {hint}"
    return Explanation(summary, hint, where)
