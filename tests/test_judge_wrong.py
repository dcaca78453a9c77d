"""The judges of 04 and 11 against the course's wrong and correct-but-different implementations
(tests/test_wrong_implementations.py's cases): every wrong answer fails at least one judge of its part, and every
correct answer written differently passes them all. The judges run here in-process on the same probe code the
kernel runs (``autograde.judge.LocalProbe``), so this is what the grader would decide."""
import numpy as np
import pytest

from autograde.judge import LocalProbe
from autograde.judges import nb04, nb11

import test_wrong_implementations as W

JUDGES = {"04": nb04.JUDGES, "11": nb11.JUDGES}


def _cells(prefix, part):
    return [grade_id for grade_id, _ in W.part_test_cells(prefix, part)]


def _failures(case, seed=3):
    ns = W.namespace(case.prefix, {case.part: case.text()})
    probe, failed = LocalProbe(ns), []
    cells = sorted(_cells(case.prefix, case.part), key=lambda g: g != case.first)
    for grade_id in cells:
        try:
            JUDGES[case.prefix][grade_id](probe, np.random.default_rng([seed, len(failed)]))
        except AssertionError as exc:
            failed.append((grade_id, str(exc)))
            break
    return failed


def test_every_test_cell_of_04_and_11_has_a_judge():
    for prefix, judges in JUDGES.items():
        cells = {g for part in W.parts(prefix) for g in _cells(prefix, part)}
        assert cells == set(judges), (prefix, cells ^ set(judges))


WRONG = [c for c in W.WRONG if c.prefix in JUDGES]
CORRECT = [c for c in W.CORRECT if c.prefix in JUDGES]


@pytest.mark.parametrize("case", WRONG, ids=[W._id(c) for c in WRONG])
def test_a_wrong_implementation_fails_a_judge(case):
    failed = _failures(case)
    assert failed, f"{case.prefix} {case.part}: {case.what}: every judge passed"
    assert failed[0][1].startswith("rule: "), failed


@pytest.mark.parametrize("case", CORRECT, ids=[W._id(c) for c in CORRECT])
def test_a_correct_implementation_written_differently_passes_every_judge(case):
    assert not _failures(case), case.what
