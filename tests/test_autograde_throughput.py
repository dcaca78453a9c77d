"""Opt-in (AUTOGRADE_THROUGHPUT=1): 20 submissions of notebook 01 through `python -m autograde class`;
grading may cost at most 15 s per submission beyond the notebook's own run time."""

import os

import pytest
from adversarial.throughput import measure

pytestmark = [pytest.mark.notebooks, pytest.mark.slow]


@pytest.mark.skipif(not os.environ.get("AUTOGRADE_THROUGHPUT"), reason="opt-in: set AUTOGRADE_THROUGHPUT=1")
@pytest.mark.timeout(3600)
def test_grading_costs_at_most_15_s_per_submission_beyond_the_notebook():
    result = measure(n=int(os.environ.get("AUTOGRADE_THROUGHPUT_N", "20")), jobs=1, plain_runs=3)
    assert result["ok"] == result["n"], result
    assert result["overhead_s"] <= 15, result
