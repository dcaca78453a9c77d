"""What the guard's audit hook costs: each solution graded with the hook on and off, interleaved.

    python tests/adversarial/audit_cost.py [--repeats 3] [ASSIGNMENT ...]      (default: every assignment)

Grades the solution notebook like `python -m autograde check` does (sandboxed where bubblewrap is installed,
quick mode), alternating the hook on and off `repeats` times, and prints the kernel's run time (the run
record's seconds) per assignment: medians, the ratio on/off, and the points (both must be full marks).
Timings need a quiet machine; the ratio, not the seconds, is the result.
"""

import argparse
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from autograde import assignments, pipeline, sandbox  # noqa: E402
from autograde.assignment import load_assignment, source_notebook  # noqa: E402
from autograde.check import _prepared_gradebook  # noqa: E402
from autograde.course import Course  # noqa: E402
from autograde.notebook_io import released_notebook  # noqa: E402


def grade_once(name, audit):
    """(kernel seconds, points, max points) of the solution of `name`, with the audit hook on or off."""
    import nbformat

    work = Path(tempfile.mkdtemp(prefix="audit-cost-"))
    try:
        course = Course(work, sandboxed=sandbox.bwrap_status()[0], extra_config={"SandboxedExecute": {"audit": audit}})
        _prepared_gradebook(course, name)
        assignment, released = load_assignment(name), released_notebook(load_assignment(name))
        pipeline.submit(
            course, assignment, "solution", nbformat.read(str(source_notebook(name)), as_version=4), released
        )
        graded = pipeline.grade(course, assignment, "solution", released)
        if not graded.ok:
            raise RuntimeError(f"{name}: {graded.reason}")
        if graded.record.audit:
            raise RuntimeError(f"{name}: the audit hook recorded the solution: {graded.record.audit}")
        return float(graded.record.seconds), graded.points, assignment.points
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("assignments", nargs="*")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)
    names = args.assignments or list(assignments())
    print("| assignment | hook on (s) | hook off (s) | on / off | points on, off |")
    print("|---|---|---|---|---|")
    total = {True: 0.0, False: 0.0}
    for name in names:
        runs = {True: [], False: []}
        points = {}
        for i in range(args.repeats):
            for audit in (True, False) if i % 2 == 0 else (False, True):
                seconds, got, full = grade_once(name, audit)
                runs[audit].append(seconds)
                points[audit] = f"{got:g}/{full:g}"
        on, off = statistics.median(runs[True]), statistics.median(runs[False])
        total[True] += on
        total[False] += off
        print(f"| {name} | {on:.1f} | {off:.1f} | {on / off:.3f} | {points[True]}, {points[False]} |", flush=True)
    print(f"| all | {total[True]:.1f} | {total[False]:.1f} | {total[True] / total[False]:.3f} | |")


if __name__ == "__main__":
    main()
