"""Notebook 03's hidden tests as judges: every test cell (`expected_tokens`, `simulate_tokens_per_round`, `speedup`
and `best_k`).

The rules and their wording are the notebook's hidden tests' (docs/contract.md lists them); alpha, k, c and the
simulations' seeds are drawn from the grader's generator; the references are the judge's own (the series summed
term by term, the exact mean and variance of the tokens a round emits).
"""

from __future__ import annotations

import math

from autograde.judge import Broken, describe, nonfinite, number_of, value_errors, value_of


def _series(a, k):
    return float(sum(a**i for i in range(k + 1)))  # the series itself: no division


def _plain_float(answer, rule):
    got = value_of(answer, rule)
    if type(got) is not float:
        raise Broken(rule, describe(answer))
    return got


# ------------------------------------------------------------------------------------ A: expected_tokens
TOKENS = "expected_tokens"


def test_expected_tokens(probe, rng):
    cases = [(float(rng.uniform(0.0, 0.995)), int(rng.integers(1, 33))) for _ in range(20)]
    for answer in probe.many(TOKENS, [(c, {}) for c in cases]):
        _plain_float(answer, "rule: return a plain Python float")


def test_expected_tokens_formula(probe, rng):
    cases = [(float(rng.uniform(0.0, 0.995)), int(rng.integers(1, 33))) for _ in range(200)]
    a = float(rng.uniform(0.3, 0.8))
    k = int(rng.integers(2, 8))
    grows = [(a, k), (a + 0.1, k), (a + 0.1, k + 1)]
    answers = probe.many(TOKENS, [(c, {}) for c in cases + grows])
    rule = "rule: formula: (1 - alpha^(k+1)) / (1 - alpha) at other alpha and k"
    for (a_, k_), answer in zip(cases, answers):
        want = _series(a_, k_)
        if not abs(number_of(answer, rule) - want) <= 1e-9 * want:  # the type is test_expected_tokens' rule
            raise AssertionError(rule)
    rule = "rule: formula: (1 - alpha^(k+1)) / (1 - alpha) grows with alpha and with k"
    low, mid, high = (number_of(answer, rule) for answer in answers[len(cases) :])
    if not low < mid < high:
        raise AssertionError(rule)


def test_expected_tokens_edges(probe, rng):
    ks = [1, 2] + sorted(int(k) for k in rng.choice(range(3, 200), 3, replace=False))
    cases = []
    for k in ks:
        cases += [
            ((1.0, k), float(k + 1), "rule: alpha = 1: exactly k + 1 tokens, a plain float"),
            ((1, k), float(k + 1), "rule: alpha = 1 (the int 1): exactly k + 1 tokens, a plain float"),
            ((0.0, k), 1.0, "rule: alpha = 0: exactly 1 token, a plain float"),
            ((0, k), 1.0, "rule: alpha = 0 (the int 0): exactly 1 token, a plain float"),
        ]
    answers = probe.many(TOKENS, [(args, {}) for args, _, _ in cases] + [((1 - 1e-6, 4), {})])
    for (_, want, rule), answer in zip(cases, answers):
        if _plain_float(answer, rule) != want:
            raise AssertionError(rule)
    rule = "rule: formula: just below alpha = 1 the closed form approaches k + 1"
    if not abs(number_of(answers[-1], rule) - 5.0) <= 1e-4:
        raise AssertionError(rule)


def test_expected_tokens_bad_input(probe, rng):
    alphas = [
        (-float(rng.uniform(0.01, 1)), 4),
        (1.0000001, 4),
        (float(rng.uniform(1.01, 3)), 2),
        (nonfinite("nan"), 3),
    ]
    ks = [(0.8, 0), (0.8, -int(rng.integers(1, 9))), (0.8, float(rng.integers(1, 8)) + 0.5), (0.8, 4.0), (0.8, True)]
    answers = probe.many(TOKENS, [(args, {}) for args in alphas + ks])
    value_errors(
        answers[: len(alphas)],
        ["alpha"] * len(alphas),
        "rule: bad input: alpha outside [0, 1] must raise ValueError",
        "rule: bad input: the message names alpha",
    )
    value_errors(
        answers[len(alphas) :],
        ["k"] * len(ks),
        "rule: bad input: k that is not an integer >= 1 must raise ValueError",
        "rule: bad input: the message names k",
    )


# ------------------------------------------------------------------------------------ B: simulate_tokens_per_round
SIMULATE = "simulate_tokens_per_round"


def _moments(a, k):
    probs = [a**n * (1 - a) for n in range(k)] + [a**k]  # P(N = n), n = 0..k
    mean = sum((n + 1) * p for n, p in enumerate(probs))
    var = sum((n + 1) ** 2 * p for n, p in enumerate(probs)) - mean**2
    return mean, var


def test_simulate_tokens_per_round(probe, rng):
    n = 20_000
    cases = [
        (float(rng.uniform(0.05, 0.97)), int(rng.integers(1, 13)), n, int(rng.integers(0, 10**6))) for _ in range(12)
    ]
    # three seeds, and the rule fails only when all three estimates are equal: two honest estimates of 2,000 rounds
    # each are equal about once in 250 draws (the sum's standard deviation is about 70 tokens), three about once in
    # 50,000
    s1, s2, s3 = (int(x) for x in rng.choice(10**6, 3, replace=False))
    k = int(rng.integers(2, 9))
    seeds = [(0.6, 5, 2_000, s) for s in (s1, s2, s3)]
    edges = [(1.0, k, 500, s1), (0.0, k, 500, s1)]
    answers = probe.many(SIMULATE, [(c[:3], {"seed": c[3]}) for c in cases + seeds + edges])
    for (a, k_, n_, _), answer in zip(cases, answers):
        got = _plain_float(answer, "rule: return a plain Python float")
        mean, var = _moments(a, k_)
        if not abs(got - mean) <= 5 * math.sqrt(max(var, 0.0) / n_) + 1e-12:
            raise AssertionError(
                "rule: simulation: the mean tokens per round (accepted prefix + 1) at other alpha and "
                "k, within 5 standard errors"
            )
    rule = "rule: simulation: random rounds drawn with np.random.default_rng(seed) (other seeds, other estimates)"
    if len({number_of(answer, rule) for answer in answers[len(cases) : len(cases) + len(seeds)]}) == 1:
        raise AssertionError(rule)
    rule = "rule: simulation: at alpha 1 every draft is accepted (k + 1 tokens per round)"
    if number_of(answers[-2], rule) != k + 1:
        raise AssertionError(rule)
    rule = "rule: simulation: at alpha 0 no draft is accepted (1 token per round)"
    if number_of(answers[-1], rule) != 1.0:
        raise AssertionError(rule)


def test_simulate_tokens_per_round_bad_input(probe, rng):
    n = int(rng.integers(10, 1000))
    bad = [
        ((float(rng.uniform(1.01, 2)), 4, n), "alpha"),
        ((-float(rng.uniform(0.01, 1)), 4, n), "alpha"),
        ((0.5, 0, n), "k"),
        ((0.5, 4, 0), "n_rounds"),
        ((0.5, 4, -n), "n_rounds"),
    ]
    order = rng.permutation(len(bad)).tolist()
    value_errors(
        probe.many(SIMULATE, [(bad[i][0], {}) for i in order]),
        [bad[i][1] for i in order],
        "rule: bad input: alpha outside [0, 1], k < 1 or n_rounds < 1 must raise ValueError",
        "rule: bad input: the message names the argument (alpha, k or n_rounds)",
    )


# ------------------------------------------------------------------------------------ C: speedup
SPEEDUP = "speedup"


def test_speedup(probe, rng):
    cases = [
        (
            float(rng.uniform(0, 0.995)),
            int(rng.integers(1, 25)),
            0.0 if rng.random() < 0.2 else float(rng.uniform(0, 1.5)),
        )
        for _ in range(200)
    ]
    answers = probe.many(SPEEDUP, [(c, {}) for c in cases])
    for (a, k, c), answer in zip(cases, answers):
        got = _plain_float(answer, "rule: return a plain Python float")
        want = _series(a, k) / (k * c + 1)
        if not abs(got - want) <= 1e-9 * want:
            raise AssertionError("rule: formula: expected_tokens(alpha, k) / (k c + 1) at other alpha, k and c")
    c = float(rng.uniform(0.05, 0.5))
    ks = [1, int(rng.integers(2, 6)), int(rng.integers(6, 12))]
    edges = (
        [((1.0, k, 0.0), float(k + 1), 0.0) for k in ks]
        + [((0.0, k, c), 1 / (k * c + 1), 1e-12) for k in ks]
        + [((0.0, k, 0.0), 1.0, 0.0) for k in ks]
    )
    rule = "rule: formula: expected_tokens(alpha, k) / (k c + 1) at the edges of alpha and c"
    for (_, want, tol), answer in zip(edges, probe.many(SPEEDUP, [(args, {}) for args, _, _ in edges])):
        if not abs(number_of(answer, rule) - want) <= tol:
            raise AssertionError(rule)


def test_speedup_bad_input(probe, rng):
    bad = [
        ((0.8, 4, -float(rng.uniform(0.01, 1))), "c"),
        ((0.8, 4, nonfinite("nan")), "c"),
        ((float(rng.uniform(1.01, 2)), 4, 0.1), "alpha"),
        ((0.8, 0, 0.1), "k"),
    ]
    order = rng.permutation(len(bad)).tolist()
    value_errors(
        probe.many(SPEEDUP, [(bad[i][0], {}) for i in order]),
        [bad[i][1] for i in order],
        "rule: bad input: c < 0, alpha outside [0, 1] or k < 1 must raise ValueError",
        "rule: bad input: the message names the argument (c, alpha or k)",
    )


# ------------------------------------------------------------------------------------ D: best_k
BEST = "best_k"


def test_best_k(probe, rng):
    cases = [(float(rng.uniform(0, 0.99)), float(rng.uniform(0, 1)), int(rng.integers(1, 25))) for _ in range(150)]
    answers = probe.many(BEST, [(c[:2], {"k_max": c[2]}) for c in cases])
    for (a, c, km), answer in zip(cases, answers):
        values = [_series(a, k) / (k * c + 1) for k in range(1, km + 1)]
        top = max(values)
        got = value_of(answer, "rule: return a plain Python int in 1 .. k_max")
        if not (type(got) is int and 1 <= got <= km):
            raise Broken("rule: return a plain Python int in 1 .. k_max", describe(answer))
        if not values[got - 1] >= top * (1 - 1e-9):
            raise AssertionError("rule: the k with the highest speedup(alpha, k, c)")
        first = next(i + 1 for i, v in enumerate(values) if v >= top * (1 - 1e-9))
        if not (got == first or values[first - 1] < top * (1 - 1e-12)):
            raise AssertionError("rule: on a tie, the smallest such k")
    km = int(rng.integers(6, 20))
    edges = [
        ((0.0, 0.0), {}, 1, "rule: on a tie, the smallest such k"),
        ((0.0, float(rng.uniform(0.1, 0.5))), {}, 1, "rule: the k with the highest speedup(alpha, k, c)"),
        ((1.0, 0.0), {"k_max": km}, km, "rule: the k in 1 .. k_max (k_max included) with the highest speedup"),
        (
            (float(rng.uniform(0.8, 0.95)), 0.0),
            {"k_max": 5},
            5,
            "rule: the k in 1 .. k_max (k_max included) with the highest speedup",
        ),
        (
            (float(rng.uniform(0.3, 0.7)), float(rng.uniform(0.05, 0.2))),
            {"k_max": 1},
            1,
            "rule: the k in 1 .. k_max (k_max included) with the highest speedup",
        ),
    ]
    for (_, _, want, rule), answer in zip(edges, probe.many(BEST, [(args, kw) for args, kw, _, _ in edges])):
        if value_of(answer, rule) != want:
            raise Broken(rule, describe(answer) if answer[0] != "value" else "")


def test_best_k_bad_input(probe, rng):
    kms = [{"k_max": 0}, {"k_max": -int(rng.integers(1, 9))}, {"k_max": float(rng.integers(1, 8)) + 0.5}]
    others = [((float(rng.uniform(1.01, 2)), 0.05), "alpha"), ((0.8, -float(rng.uniform(0.01, 2))), "c")]
    answers = probe.many(BEST, [((0.8, 0.05), kw) for kw in kms] + [(args, {}) for args, _ in others])
    value_errors(
        answers[: len(kms)],
        ["k_max"] * len(kms),
        "rule: bad input: k_max that is not an integer >= 1 must raise ValueError",
        "rule: bad input: the message names k_max",
    )
    value_errors(
        answers[len(kms) :],
        [name for _, name in others],
        "rule: bad input: alpha outside [0, 1] or c < 0 must raise ValueError",
        "rule: bad input: the message names the argument (alpha or c)",
    )


JUDGES = {name: fn for name, fn in globals().items() if name.startswith("test_") and callable(fn)}
