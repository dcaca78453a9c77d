"""Notebook 02's hidden tests as judges: every test cell (`width_where_cost_grows` and `predicted_cost_ratio`).

The rules and their wording are the notebook's hidden tests' (docs/contract.md lists them); the machines are the
course's table (data/hardware.csv) sent as plain numbers, beside ridges, byte widths, widths and batches drawn from
the grader's generator; the references are the judge's own formulas.
"""

from __future__ import annotations

from autograde.judge import Broken, describe, number_of, value_errors, value_of
from autograde.judges import hardware


def _ridges():
    return [hw.flops_per_s / hw.bandwidth_bytes_per_s for hw in hardware().values()]


# ------------------------------------------------------------------------------------ A: width_where_cost_grows
WIDTH = "width_where_cost_grows"


def test_width_where_cost_grows(probe, rng):
    gpus = [(r, 2) for r in _ridges()]
    cpus = [
        (x, 4)
        for x in (
            int(rng.integers(2, 6)),
            float(rng.uniform(5, 10)),
            int(rng.integers(10, 20)),
            float(rng.uniform(20, 60)),
        )
    ]
    answers = probe.many(WIDTH, [(pair, {}) for pair in gpus + cpus])
    plain = "rule: w* in tokens, a plain Python float"
    for j, ((r, b), answer) in enumerate(zip(gpus + cpus, answers)):
        got = value_of(answer, plain)
        if type(got) is not float:
            raise Broken(plain, describe(answer))
        if j < len(gpus) and not abs(got - r) <= 1e-9 * r:
            raise AssertionError(
                "rule: other hardware: w* = ridge x bytes_per_param / 2 (another GPU's ridge, other byte widths)"
            )
        if j >= len(gpus) and not abs(got - 2 * r) <= 1e-9 * r:
            raise AssertionError("rule: formula: w* = ridge x bytes_per_param / 2 (fp32: twice the ridge)")


def test_width_where_cost_grows_byte_widths(probe, rng):
    gpus = [(r, b) for r in _ridges() for b in (1, 0.5)]
    drawn = [
        (float(10 ** rng.uniform(-1, 3.5)), float(rng.choice([0.5, 1, 2, 4, 8, rng.uniform(0.1, 8)])))
        for _ in range(30)
    ]
    answers = probe.many(WIDTH, [(pair, {}) for pair in gpus + drawn])
    for j, ((r, b), answer) in enumerate(zip(gpus + drawn, answers)):
        rule = (
            "rule: other hardware: w* = ridge x bytes_per_param / 2 (another GPU's ridge, other byte widths)"
            if j < len(gpus)
            else "rule: formula: w* = ridge x bytes_per_param / 2 for any positive pair"
        )
        if not abs(number_of(answer, rule) - r * b / 2) <= 1e-9 * r * b / 2:  # the type is the cell above's rule
            raise AssertionError(rule)


def test_width_where_cost_grows_bad_input(probe, rng):
    r, b = float(rng.uniform(1, 500)), int(rng.choice([1, 2, 4]))
    bad = [((-r, b), "ridge"), ((0.0, b), "ridge"), ((r, 0), "bytes_per_param"), ((r, -b), "bytes_per_param")]
    order = rng.permutation(len(bad)).tolist()
    value_errors(
        probe.many(WIDTH, [(bad[i][0], {}) for i in order]),
        [bad[i][1] for i in order],
        "rule: bad input: ridge and bytes_per_param must be positive (ValueError)",
        "rule: bad input: the message names the argument (ridge or bytes_per_param)",
    )


# ------------------------------------------------------------------------------------ B: predicted_cost_ratio
RATIO = "predicted_cost_ratio"
OTHER = "rule: other hardware and batch: max(1, B w / w*) / max(1, B / w*), against a plain step at the same batch"
FORMULA = "rule: formula: max(1, B w / w*) / max(1, B / w*) for widths and batches that need not be integers"


def _ref(w, r, b, n=1):
    ws = r * b / 2
    return max(1.0, n * w / ws) / max(1.0, n / ws)


def test_predicted_cost_ratio(probe, rng):
    gpus = [(k + 1, r, 2) for r in _ridges() for k in range(1, 9)]
    r, b = float(rng.uniform(2, 50)), int(rng.choice([1, 2, 4]))
    exactly = [(r * b / 2, r, b)]  # a step exactly at w* still costs one weight read
    drawn = [
        (float(rng.uniform(1, 100)), float(10 ** rng.uniform(0, 3)), int(rng.choice([1, 2, 4]))) for _ in range(40)
    ]
    answers = probe.many(RATIO, [(args, {}) for args in gpus + exactly] + [(args, {"batch": 1}) for args in drawn])
    plain = "rule: the ratio, a plain Python float"
    for j, (args, answer) in enumerate(zip(gpus + exactly + drawn, answers)):
        rule = (
            OTHER
            if j < len(gpus)
            else ("rule: formula: max(1, B w / w*) / max(1, B / w*) (width exactly w*)" if j == len(gpus) else FORMULA)
        )
        got = value_of(answer, plain)
        if type(got) is not float:
            raise Broken(plain, describe(answer))
        want = _ref(*args)
        if not abs(got - want) <= 1e-9 * want:
            raise AssertionError(rule)


def test_predicted_cost_ratio_batch(probe, rng):
    gpus = [
        (k + 1, r, 2, n)
        for r in _ridges()
        for k in range(1, 9)
        for n in sorted({3, 16, 64, 512} | {int(x) for x in rng.integers(2, 600, 4)})
    ]
    w = int(rng.integers(2, 9))
    bound = [(w, float(rng.uniform(100, 400)), 2, int(rng.integers(2000, 5000)))]  # both steps compute-bound
    drawn = [
        (
            float(rng.uniform(1, 100)),
            float(10 ** rng.uniform(0, 3)),
            int(rng.choice([1, 2, 4])),
            float(rng.uniform(1, 300)),
        )
        for _ in range(40)
    ]
    cases = gpus + bound + drawn
    answers = probe.many(RATIO, [(c[:3], {"batch": c[3]}) for c in cases])
    for j, (c, answer) in enumerate(zip(cases, answers)):
        rule = (
            OTHER
            if j < len(gpus)
            else (
                "rule: formula: max(1, B w / w*) / max(1, B / w*) (both steps compute-bound)"
                if j == len(gpus)
                else FORMULA
            )
        )
        want = _ref(*c)
        if not abs(number_of(answer, rule) - want) <= 1e-9 * want:  # the type is the cell above's rule
            raise AssertionError(rule)


def test_predicted_cost_ratio_bad_input(probe, rng):
    w, r, b = int(rng.integers(2, 9)), float(rng.uniform(2, 400)), int(rng.choice([1, 2, 4]))
    bad = [
        ((w, r, b), {"batch": 0}, "batch"),
        ((w, r, b), {"batch": -int(rng.integers(1, 9))}, "batch"),
        ((float(rng.uniform(0.05, 0.95)), r, b), {}, "width"),
        ((0, r, b), {}, "width"),
        ((w, 0.0, b), {}, "ridge"),
        ((w, -r, b), {}, "ridge"),
        ((w, r, 0), {}, "bytes_per_param"),
    ]
    order = rng.permutation(len(bad)).tolist()
    value_errors(
        probe.many(RATIO, [(bad[i][0], bad[i][1]) for i in order]),
        [bad[i][2] for i in order],
        "rule: bad input: width or batch below 1, ridge or bytes_per_param not positive (ValueError)",
        "rule: bad input: the message names the argument (width, batch, ridge or bytes_per_param)",
    )


JUDGES = {name: fn for name, fn in globals().items() if name.startswith("test_") and callable(fn)}
