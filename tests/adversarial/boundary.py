"""Submissions aimed at the probe/judge boundary (issue 77), for assignment 01, each beside a correct one.

A judge calls the student's function through a probe in the student's kernel (autograde/judge.py). These
functions behave on the notebook's own visible checks and misbehave only on inputs the notebook never uses
(a pair of the hardware table is answered; a judge's drawn pair is not), so that the test isolates the
probe's own limits:

- ``stall``: prints a dot every half second and never returns, catching every interrupt;
- ``flood``: prints a megabyte at a time, without end (an interrupt stops it);
- ``hang``: never returns and prints nothing (an interrupt stops it);
- ``silent``: never returns and prints nothing, catching every interrupt;
- ``disk``: a cell of its own (no probe) writes 2,000 files of 1 MB into its folder: the kernel is stopped.

Each must cost its own judged cell and nothing else: the rest of the notebook is graded, the class goes on,
the grades file is written.
"""

from pathlib import Path

import nbformat

from adversarial.cases import (
    A,
    Expect,
    correct_trimmed,
    insert_after,
    released,
    solution_answers,
    trimmed,
    with_answers,
)

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


DISK = """block = b"x" * 2**20
for j in range(2000):   # 2,000 files of 1 MB: each under the file-size limit, all of them far over the folder's
    with open(f"junk_{j}.bin", "wb") as fh:
        fh.write(block)
"""


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
    if only is None or "disk" in only:  # a student's own cell, not a probe: the folder on the host is capped
        d = dest / "disk"
        d.mkdir(parents=True)
        nbformat.write(insert_after(correct_trimmed(), "test_weight_bytes_bad_input", DISK), str(d / f"{A}.ipynb"))
        expect["disk"] = Expect(3, "crash", what="a cell writes 2,000 MB of files into its folder")
    d = dest / "correct"
    d.mkdir(parents=True)
    nbformat.write(correct_trimmed(), str(d / f"{A}.ipynb"))
    expect["correct"] = Expect(FULL, "ok", what="the solution, graded beside them")
    return expect
