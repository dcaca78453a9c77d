"""specdec/measure/cpu_step_model.py: notebook 10's CPU step model adds measured terms, anchors its rest on two measured
forwards, and takes a static batch's rounds as the expected maximum over its sequences."""

import itertools

import numpy as np
import pytest

from specdec.core.decoding import tiny_llama
from specdec.measure.cpu_step_model import (
    CpuStepModel,
    expected_batch_rounds,
    interpolate,
    measure_kernels,
    rounds_per_sequence,
)


def test_interpolate_is_piecewise_linear_and_extends_past_the_ends():
    xs, ys = [1, 2, 4], [10.0, 20.0, 30.0]
    assert interpolate(xs, ys, 1) == 10.0 and interpolate(xs, ys, 3) == 25.0 and interpolate(xs, ys, 4) == 30.0
    assert interpolate(xs, ys, 8) == 50.0  # beyond the last point: the last segment's slope
    assert interpolate(xs, ys, 0) == 0.0  # before the first: the first segment's slope
    with pytest.raises(ValueError):
        interpolate([1, 1], [0.0, 1.0], 1)


def _model():
    grid = [1, 10, 100]
    gemm = {
        "q": [0.5, 0.5, 0.5],
        "k": [0.0] * 3,
        "v": [0.0] * 3,
        "o": [0.0] * 3,
        "gate": [0.25, 0.5, 3.0],
        "up": [0.25, 0.5, 3.0],
        "down": [0.5, 1.0, 5.0],
    }
    # the MLP timed whole takes 0.1, 0.2, 1.1 s more than its three GEMMs: its activation term
    return CpuStepModel(name="m", layers=3, grid=grid, gemm=gemm, mlp=[1.1, 2.2, 12.1], lm_head=[0.2, 0.2, 2.0])


def test_the_forward_is_the_sum_of_its_terms_with_the_rest_anchored_on_measured_forwards():
    m = _model()
    k1 = m.kernels(1)
    assert k1 == pytest.approx({"gemm": 3 * 1.5, "activation": 3 * 0.1, "lm_head": 0.2})
    rest_1 = m.anchor(1, 10.0)  # a measured forward of 10 s over one token
    rest_100 = m.anchor(100, 60.0)
    assert rest_1 == pytest.approx(10.0 - 5.0) and rest_100 == pytest.approx(60.0 - (3 * 11.5 + 3 * 1.1 + 2.0))
    # at the anchors the model returns the measured forwards exactly; between them the rest is linear in M
    assert m.seconds(1, 1) == pytest.approx(10.0) and m.seconds(10, 10) == pytest.approx(60.0)
    mid = m.terms(5, 2)  # M = 10
    assert mid["rest"] == pytest.approx(rest_1 + (rest_100 - rest_1) * 9 / 99)
    assert m.seconds(5, 2) == pytest.approx(sum(mid.values()))
    assert m.terms(2, 5) == m.terms(5, 2)  # the terms depend on the tokens M = B x t


def test_rest_needs_two_anchors():
    m = _model()
    m.anchor(1, 10.0)
    with pytest.raises(ValueError, match="two anchors"):
        m.seconds(1, 1)


def test_rounds_per_sequence_counts_until_each_sequence_has_its_tokens():
    per_round = [np.array([4, 0]), np.array([0, 1]), np.array([2, 0])]  # tokens per round: (5, 1), (1, 2), (3, 1)
    assert rounds_per_sequence(per_round, 4) == [1, 3]
    assert rounds_per_sequence(per_round, 3) == [1, 2]
    with pytest.raises(ValueError, match="did not reach"):
        rounds_per_sequence(per_round, 5)


def test_expected_batch_rounds_is_the_expected_maximum_of_the_batch():
    rounds = [2, 2, 3, 5]
    assert expected_batch_rounds(rounds, 1) == pytest.approx(np.mean(rounds))
    for batch in (2, 3):  # brute force over every draw with replacement
        draws = list(itertools.product(rounds, repeat=batch))
        assert expected_batch_rounds(rounds, batch) == pytest.approx(np.mean([max(d) for d in draws]))
    values = [expected_batch_rounds(rounds, b) for b in (1, 2, 4, 8, 64)]
    assert values == sorted(values) and values[-1] <= 5 and values[-1] > 4.9
    with pytest.raises(ValueError):
        expected_batch_rounds([], 2)


def test_measure_kernels_times_the_models_own_modules():
    model = tiny_llama(vocab_size=64, hidden_size=32, num_hidden_layers=2, seed=0)
    terms = measure_kernels("tiny", model, [1, 4, 16], repeats=1)
    assert terms.layers == 2 and set(terms.gemm) == {"q", "k", "v", "o", "gate", "up", "down"}
    assert all(len(v) == 3 and all(t > 0 for t in v) for v in terms.gemm.values())
    assert len(terms.mlp) == 3 and len(terms.lm_head) == 3
    assert all(t["activation"] >= 0 for t in (terms.kernels(m) for m in (1, 4, 16)))


def test_other_load_sees_a_busy_neighbour():
    import subprocess
    import sys
    import time

    from specdec.measure.timing import OtherLoad

    with OtherLoad() as quiet:
        time.sleep(0.5)
    busy = subprocess.Popen([sys.executable, "-c", "import time\nt = time.time()\nwhile time.time() - t < 3: pass"])
    try:
        time.sleep(0.5)
        with OtherLoad() as loaded:
            time.sleep(1.0)
    finally:
        busy.wait()
    if quiet.share is None:
        pytest.skip("no /proc/stat on this system")
    assert loaded.share > quiet.share and loaded.share >= 0.3, (quiet.share, loaded.share)


def _burn(seconds):
    import subprocess
    import sys

    return subprocess.Popen(
        [sys.executable, "-c", f"import time\nt = time.time()\nwhile time.time() - t < {seconds}: pass"]
    )


def test_a_timing_section_next_to_a_cpu_burner_prints_its_warning_line(capsys):
    """A timing section (Steadiness around interleaved_medians, as the notebooks do) run while a CPU-burning
    process shares the cores says so in one warning line; the same section alone reports its spread only."""
    import time

    from specdec.measure.timing import WATCHED, Steadiness, interleaved_medians

    work = {"a": lambda: sum(range(20000)), "b": lambda: time.sleep(0.002)}
    with Steadiness("quiet section", threads=1) as quiet:
        interleaved_medians(work, repeats=5, warmup=1)
    if quiet.share is None:
        pytest.skip("no /proc/stat on this system")
    quiet.report()
    said = capsys.readouterr().out
    assert said.startswith("quiet section: 2 repeated timings, their median repeats") and "other programs" in said
    burners = [_burn(4), _burn(4)]  # both cores: whatever else the machine runs, this is busy
    try:
        time.sleep(0.3)
        with Steadiness("busy section", threads=1) as busy:
            interleaved_medians(work, repeats=5, warmup=1)
            time.sleep(1.0)
    finally:
        for b in burners:
            b.wait()
    assert busy.busy and busy.report()
    lines = capsys.readouterr().out.splitlines()
    warnings = [line for line in lines if line.startswith("warning: the machine was busy during busy section")]
    assert len(warnings) == 1, lines
    assert WATCHED["busy section"]["busy"] is True and "other programs took" in WATCHED["busy section"]["reasons"]


def test_a_spread_above_the_bound_is_a_busy_section_and_its_own_engine_is_not_another_program():

    from specdec.measure.timing import Steadiness, note_spread

    with Steadiness("one slow repeat", threads=1, spread_bound=0.15) as calm:
        note_spread([1.0, 1.02, 1.6])  # one slow repeat is common on a quiet machine: reported, not busy
        note_spread([2.0, 2.1, 2.2])
    assert calm.worst_spread == pytest.approx(0.6) and not any("median repeat" in r for r in calm.reasons)
    with Steadiness("spread", threads=1, spread_bound=0.15) as watch:
        note_spread([1.0, 1.3, 1.4])
        note_spread([2.0, 2.5, 2.6])
    assert watch.typical_spread == pytest.approx(0.275) and any("median repeat took 1.27x" in r for r in watch.reasons)
    note_spread([1.0, 5.0])  # outside any block: nobody listens
    assert len(watch.spreads) == 2
    burner = _burn(2)
    try:
        with Steadiness("engine", threads=1, pids=lambda: [burner.pid]) as own:
            import time

            time.sleep(1.0)
    finally:
        burner.wait()
    if own.share is None:
        pytest.skip("no /proc/stat on this system")
    assert own.share < 0.25, f"the section's own engine counted as another program: {own.share:.0%}"
    with pytest.raises(ValueError, match="section"):
        Steadiness("")


def test_record_saves_every_timing_sections_steadiness(tmp_path):
    import json

    from specdec.measure.my_measurements import record
    from specdec.measure.timing import Steadiness, note_spread

    with Steadiness("saved section", threads=1):
        note_spread([1.0, 1.05])
    path = record("99_x", {"a": 1.0}, folder=tmp_path)
    doc = json.loads(path.read_text())
    assert doc["steadiness"]["saved section"]["timings"] == 1
    assert doc["steadiness"]["saved section"]["worst_spread"] == pytest.approx(0.05)
