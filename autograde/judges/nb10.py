"""Notebook 10's hidden tests as judges, first the cells of `crossing` (part D); the other test cells of 10 still
grade in the kernel (the per-cell switch) until the notebook moves over whole.

The rules and their wording are the notebook's hidden tests' (docs/contract.md lists them); the curves are drawn
from the grader's generator instead of a seed written into the test cell.
"""
from __future__ import annotations

import math

from autograde.judge import Broken, describe, nonfinite, value_errors, value_of

FN = "crossing"
BATCHES = (1, 2, 3, 4, 5, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 256)


def _through_one(a, b, sa, sb):
    """The reference: ln(speedup) linear in ln B between the neighbours a < b where it falls through 1."""
    fa, fb = math.log(sa), math.log(sb)
    return math.exp(math.log(a) + (math.log(b) - math.log(a)) * fa / (fa - fb))


def _batches(rng, n):
    return sorted(int(b) for b in rng.choice(BATCHES, size=n, replace=False))


def test_crossing(probe, rng):
    cases = []                                           # (points, want) of curves that fall through 1 once
    for _ in range(80):
        bs = _batches(rng, int(rng.integers(2, 8)))
        i = int(rng.integers(0, len(bs) - 1))            # the curve falls through 1 between bs[i] and bs[i + 1]
        s = [float(rng.uniform(1.01, 4.0)) for _ in bs[:i + 1]] + [float(rng.uniform(0.2, 0.999)) for _ in bs[i + 1:]]
        cases.append((dict(reversed(list(zip(bs, s)))), _through_one(bs[i], bs[i + 1], s[i], s[i + 1])))
    exact = []                                           # a speedup of exactly 1 at a batch
    for _ in range(3):
        a, b, c = _batches(rng, 3)
        exact.append(({a: float(rng.uniform(1.05, 3.0)), b: 1.0, c: float(rng.uniform(0.2, 0.95))}, float(b)))
    answers = probe.many(FN, [((points,), {}) for points, _ in cases + exact])
    for (points, want), answer in zip(cases, answers):
        got = value_of(answer, "rule: return a plain float")
        if type(got) is not float:
            raise Broken("rule: return a plain float", describe(answer))
        if not abs(got - want) < 1e-9 * want:
            raise AssertionError("rule: ln(speedup) interpolated linearly in ln B between the neighbours where it "
                                 "falls through 1, batches in increasing order")
    rule = "rule: a speedup of exactly 1 at a batch: the crossover is that batch"
    for (points, want), answer in zip(exact, answers[len(cases):]):
        got = value_of(answer, rule)
        if type(got) is not float or not abs(got - want) < 1e-12 * want:
            raise Broken(rule, describe(answer) if type(got) is not float else "")


def test_crossing_none_and_bad_input(probe, rng):
    bs = _batches(rng, 5)                                # below, above, below, above, below: the first fall counts
    s = [float(rng.uniform(0.3, 0.95)), float(rng.uniform(1.05, 3.0)), float(rng.uniform(0.3, 0.95)),
         float(rng.uniform(1.05, 3.0)), float(rng.uniform(0.3, 0.95))]
    first = dict(zip(bs, s))
    never = []                                           # curves that never fall through 1
    for n in (3, 2, 1, 1, 4):
        never.append(_batches(rng, n))
    nones = [dict(zip(never[0], sorted((float(x) for x in rng.uniform(0.2, 0.99, 3)), reverse=True))),  # below 1
             {never[1][0]: 1.0, never[1][1]: float(rng.uniform(0.2, 0.99))},        # from exactly 1, never above it
             {never[2][0]: float(rng.uniform(1.05, 4.0))}, {never[3][0]: float(rng.uniform(0.2, 0.99))},  # one batch
             dict(zip(never[4], [float(rng.uniform(1.5, 4.0)), 1.4, 1.2, 1.0 + float(rng.uniform(1e-4, 1e-2))]))]
    b = int(rng.choice(BATCHES[1:]))
    s_hi, s_lo = float(rng.uniform(1.05, 3.0)), float(rng.uniform(0.2, 0.95))
    bads = [[s_hi, s_lo], {}, {1.0: s_hi, b: s_lo}, {True: s_hi, b: s_lo}, {1: s_hi, b: 0.0}, {1: s_hi, b: -s_lo},
            {1: nonfinite("nan"), b: s_lo}, {1: nonfinite("inf"), b: s_lo}, {1: str(s_hi), b: s_lo},
            {0: s_hi, b: s_lo}, {-b: s_hi, 1: s_lo}, (s_hi, s_lo)]
    answers = probe.many(FN, [((points,), {}) for points in [first] + nones + bads])
    got = value_of(answers[0], "rule: the first neighbours where the curve falls through 1 count (a curve that rises "
                               "above 1 again and falls again)")
    want = _through_one(bs[1], bs[2], s[1], s[2])
    if not (type(got) in (int, float) and abs(float(got) - want) < 1e-9 * want):
        raise Broken("rule: the first neighbours where the curve falls through 1 count (a curve that rises above 1 "
                     "again and falls again)", describe(answers[0]) if type(got) not in (int, float) else "")
    for answer in answers[1:1 + len(nones)]:
        if value_of(answer, "rule: None when the curve never falls through 1 (it stays above 1, never rises above "
                            "it, or has one batch)") is not None:
            raise Broken("rule: None when the curve never falls through 1 (it stays above 1, never rises above it, "
                         "or has one batch)", describe(answer))
    value_errors(answers[1 + len(nones):], ["points"] * len(bads),
                 "rule: bad input (not a non-empty dict, a batch not an integer >= 1, a speedup not a finite number "
                 "> 0) must raise ValueError", "rule: bad input: the ValueError message names the argument")


JUDGES = {"test_crossing": test_crossing, "test_crossing_none_and_bad_input": test_crossing_none_and_bad_input}
