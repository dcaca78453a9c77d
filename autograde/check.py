"""`python -m autograde check 04` (or PATH.ipynb): a learner grades their own notebook with the course's tests
(an assignment number or name means the learner's copy in the workspace, my-work/).

The notebook runs exactly as it will for the instructor (nbgrader autograde with the hidden tests,
the guarded kernel, in the sandbox when bubblewrap is installed), in a temporary course folder; nothing
in the learner's folder is changed.  Prints points per part and, for each part that lost points, the
test that failed, the visible line where it failed (hidden tests stay hidden) and a hint.
"""

import hashlib
import shutil
import sys
import tempfile
import time
from pathlib import Path

from autograde import REPO, assignments, cache_dir, grading_sources, pipeline, sandbox, scan
from autograde.assignment import identify, load_assignment, points_text, source_notebook
from autograde.course import Course
from autograde.explain import calls_between, explain, upstream_failures
from autograde.notebook_io import read_json_notebook, released_notebook
from autograde.outcomes import audit_verdict
from autograde.workspace import resolve_notebook

STUDENT = "learner"


def _prepared_gradebook(course, name):
    """Copy a cached gradebook holding this assignment's source, or build (and cache) it."""
    import nbgrader

    key = hashlib.sha256(
        source_notebook(name).read_bytes() + (REPO / "nbgrader_config.py").read_bytes() + nbgrader.__version__.encode()
    ).hexdigest()[:16]
    cached = cache_dir() / f"{name}-{key}.db"
    target = course.work / "gradebook.db"
    if cached.exists():
        shutil.copyfile(cached, target)
        return
    course.prepare(name)
    try:
        cached.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(target, cached)
    except OSError:
        pass


def _text(source):
    return "".join(source) if isinstance(source, list) else str(source)


def check(path, *, sandboxed=None, cell_timeout=None, notebook_timeout=600, quick=True, measure=False, out=sys.stdout):
    """Grade one notebook; print the report; return (points, max points) or None if it could not be graded."""
    t0 = time.monotonic()
    try:
        path = resolve_notebook(path)  # an assignment (04) means the learner's copy in the workspace
    except LookupError as exc:
        print(f"cannot grade {path}: {exc}", file=out)
        return None
    path = Path(path).expanduser().resolve()
    try:
        nb = read_json_notebook(path)
    except (OSError, ValueError) as exc:
        print(f"cannot grade {path}: {exc}", file=out)
        return None
    known = {n: load_assignment(n) for n in assignments()}
    matches = identify(nb, known) or [n for n in known if n == path.stem]
    if not matches:
        print(f"cannot grade {path.name}: it is not one of this course's notebooks ({', '.join(known)})", file=out)
        return None
    assignment = known[matches[0]]
    explicit = sandboxed is not None
    if sandboxed is None:
        sandboxed = sandbox.bwrap_status()[0]
    work = Path(tempfile.mkdtemp(prefix="autograde-check-"))
    try:
        course = Course(
            work,
            sandboxed=sandboxed,
            cell_timeout=cell_timeout,
            notebook_timeout=notebook_timeout,
            quick=quick,
            measure=measure,
        )
        _prepared_gradebook(course, assignment.name)
        released = released_notebook(assignment)
        findings = scan.scan(nb, released)
        pipeline.submit(course, assignment, STUDENT, nb, released)
        how = (
            "sandboxed"
            if sandboxed
            else ("not sandboxed" if explicit else "not sandboxed: bubblewrap is not installed; it is your own code")
        )
        print(f"checking {path} against {assignment.name} ({how}; {grading_sources()}) ...", file=out, flush=True)
        graded = pipeline.grade(course, assignment, STUDENT, released)
        if not graded.ok:
            print(f"could not grade the notebook: {graded.reason}", file=out)
            return None
        if graded.course_failure:
            advice = (
                "The cell is the course's, though it may call your functions: if they are not much slower "
                "than they need to be, run the check again on a quieter machine (or with a longer "
                "--cell-timeout)"
                if graded.record.course_timeouts
                else "Your code is not the cause: set up the course again (make lab, or make test) and check again"
            )
            print(f"could not grade the notebook: {graded.course_failure}. {advice}.", file=out)
            return None
        record, results = graded.record, graded.results
        scores = {gid: score for gid, (score, _, _) in graded.scores.items()}
        timeout_s = course.config.Execute.get("timeout", 30)
        total = 0.0
        calls = calls_between(
            [_text(c.get("source", "")) for c in nb.get("cells", []) if c.get("cell_type") == "code"],
            [f for part in assignment.parts for f in part.functions],
        )
        for part in assignment.parts:
            got = sum(scores.get(t.grade_id, 0.0) for t in part.tests)
            total += got
            title = f"{part.label} ({points_text(part.points)}): {part.title}" if part.title else part.label
            print(f"{title} {'.' * max(3, 60 - len(title))} {got:g}/{part.points:g}", file=out)
            hints = set()  # every failing test with its rule; a hint said once per part
            for test in part.tests:
                outcome = results[test.grade_id]
                if outcome.passed:
                    continue
                upstream = upstream_failures(test, part, assignment.parts, calls, results)
                said = explain(test, outcome, part, timeout_s=timeout_s, parts=assignment.parts, upstream=upstream)
                print(f"  x {test.grade_id} ({test.what}){said.where}", file=out)
                if said.hint not in hints:
                    hints.add(said.hint)
                    print(f"    hint: {said.hint}", file=out)
        stop = record.stop
        if stop:
            print(f"note: {stop['message']}", file=out)
        for e in record.events:
            if e["kind"] == "timeout" and (not stop or e["message"] != stop["message"]):
                print(f"note: {e['message']}", file=out)
        if record.skipped:
            print(
                f"note: {len(record.skipped)} cells that only measure this machine were not run (timings are "
                f"never graded; your graded functions must not need what they set); --measure runs them",
                file=out,
            )
        if findings:
            print(
                f"warning: the instructor's grader will flag this notebook for review and give it 0 until "
                f"then, because of {scan.describe(findings)}; answers need none of this",
                file=out,
            )
        audited, what = audit_verdict(record)
        if audited:
            print(
                f"warning: the instructor's grader will mark this notebook {audited} and give it 0 until an "
                f"instructor reviews it: while it ran, your code {what}; answers need none of this",
                file=out,
            )
        wall = time.monotonic() - t0
        run_s = record.seconds
        print(
            f"total: {total:g}/{points_text(assignment.points)} "
            f"({wall:.1f} s: notebook {run_s:.1f} s, grader {wall - run_s:.1f} s)",
            file=out,
        )
        return total, assignment.points
    finally:
        shutil.rmtree(work, ignore_errors=True)
