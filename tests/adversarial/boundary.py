"""Submissions aimed at the probe/judge boundary (issue 77), for assignment 01, each beside a correct one.

A judge calls the student's function through a probe in the student's kernel (autograde/judge.py). These
functions behave on the notebook's own visible checks and misbehave only on inputs the notebook never uses
(a pair of the hardware table is answered; a judge's drawn pair is not), so that the test isolates the
probe's own limits:

- ``stall``: prints a dot every half second and never returns, catching every interrupt;
- ``flood``: prints a megabyte at a time, without end (an interrupt stops it);
- ``hang``: never returns and prints nothing (an interrupt stops it);
- ``silent``: never returns and prints nothing, catching every interrupt.

Each must cost its own judged cell and nothing else: the rest of the notebook is graded, the class goes on,
the grades file is written.
"""

from pathlib import Path

import nbformat

from adversarial.cases import A, Expect, correct_trimmed, released, solution_answers, trimmed, with_answers

FULL = 9.0

IN_PROBE = '''import time as _time

_SEEN = {(hw.flops_per_s, hw.bandwidth_bytes_per_s) for hw in hardware.values()} | {(989.4e12, 3.35e12)}


def _in_probe(flops, bandwidth):
    return (flops, bandwidth) not in _SEEN
'''

CHECKS = '''    if not flops > 0:
        raise ValueError("flops must be positive")
    if not bandwidth > 0:
        raise ValueError("bandwidth must be positive")
'''

RIDGE = {
    "stall": CHECKS
    + '''    while _in_probe(flops, bandwidth):
        try:
            print(".", end="", flush=True)
            _time.sleep(0.5)
        except BaseException:
            pass
    return flops / bandwidth
''',
    "flood": CHECKS
    + '''    while _in_probe(flops, bandwidth):
        print("x" * 1_000_000, flush=True)
    return flops / bandwidth
''',
    "hang": CHECKS
    + '''    while _in_probe(flops, bandwidth):
        _time.sleep(0.5)
    return flops / bandwidth
''',
    "silent": CHECKS
    + '''    while _in_probe(flops, bandwidth):
        try:
            _time.sleep(0.5)
        except BaseException:
            pass
    return flops / bandwidth
''',
}


def build(dest, only=None):
    """One folder per student under `dest` (those of `only`, and the correct one); returns {student: Expect}."""
    dest = Path(dest)
    expect = {}
    for student, body in RIDGE.items():
        if only is not None and student not in only:
            continue
        answers = solution_answers()
        answers["ridge_point"] = IN_PROBE + "\n\ndef ridge_point(flops, bandwidth):\n" + body
        d = dest / student
        d.mkdir(parents=True)
        nbformat.write(with_answers(trimmed(released()), answers), str(d / f"{A}.ipynb"))
        expect[student] = Expect(FULL - 1, "timeout", what=f"ridge_point {student}s when a probe calls it")
    d = dest / "correct"
    d.mkdir(parents=True)
    nbformat.write(correct_trimmed(), str(d / f"{A}.ipynb"))
    expect["correct"] = Expect(FULL, "ok", what="the solution, graded beside them")
    return expect
