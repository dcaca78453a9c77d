"""Notebook 11's hidden tests as judges (first: `acceptance_from_counters`, its three test cells).

The rules and their wording are the notebook's hidden tests' (docs/contract.md lists them); the inputs are drawn
from the grader's generator instead of a seed written into the test cell.
"""
from __future__ import annotations

import re

from autograde.judge import Raised

FN = "acceptance_from_counters"
KEYS = {"alpha", "tau", "acceptance_rate", "position_rates"}


def _plain_float(x):
    return type(x) is float


def _value(answer, rule):
    kind, value = answer
    if kind != "value":
        raise AssertionError(f"{rule} (your function raised {value.type}: {value.message[:200]})")
    return value


def _reference(c):
    d, t, a, per = c["drafts"], c["draft_tokens"], c["accepted_tokens"], c["accepted_per_position"]
    return {"alpha": a / (a + d - per[-1]), "tau": 1 + a / d, "acceptance_rate": a / t,
            "position_rates": [p / d for p in per]}


def _simulated(rng, alpha, k):
    n = int(rng.integers(15000, 25001))                # the notebook's hidden block used 20000: a drawn count
    accepted = rng.geometric(1 - alpha, n) - 1
    accepted = [min(int(x), k) for x in accepted]
    per = [sum(x > i for x in accepted) for i in range(k)]
    return {"drafts": n, "draft_tokens": n * k, "accepted_tokens": sum(accepted), "accepted_per_position": per}


def test_acceptance_from_counters(probe, rng):
    for alpha_true in sorted(float(a) for a in rng.uniform(0.05, 0.95, 5)):
        k = int(rng.integers(1, 9))
        c = _simulated(rng, alpha_true, k)
        got = _value(probe(FN, c), "rule: alpha = A / (A + D - a_{k-1}), the maximum-likelihood estimate of notebook 05")
        if not (isinstance(got, dict) and set(got) == KEYS and all(_plain_float(got[key]) for key in KEYS - {"position_rates"})
                and isinstance(got["position_rates"], list) and all(_plain_float(r) for r in got["position_rates"])):
            raise AssertionError("rule: plain floats and a list of plain floats")
        want = _reference(c)
        if abs(got["alpha"] - want["alpha"]) > 1e-12:
            raise AssertionError("rule: alpha = A / (A + D - a_{k-1}), the maximum-likelihood estimate of notebook 05")
        if abs(got["alpha"] - alpha_true) > 0.02:
            raise AssertionError("rule: alpha-hat recovers the alpha of simulated rounds")
        if abs(got["tau"] - want["tau"]) > 1e-12:
            raise AssertionError("rule: tau = 1 + A / D")
        if abs(got["acceptance_rate"] - want["acceptance_rate"]) > 1e-12:
            raise AssertionError("rule: acceptance rate = A / draft tokens")
        if len(got["position_rates"]) != k or any(abs(r - w) > 1e-12 for r, w in zip(got["position_rates"], want["position_rates"])):
            raise AssertionError("rule: position rates a_i / D")


def test_acceptance_from_counters_edges(probe, rng):
    for _ in range(30):
        k = int(rng.integers(1, 7))
        per = sorted((int(x) for x in rng.integers(0, 60, k)), reverse=True)
        d = per[0] + int(rng.integers(1, 30))
        t = int(rng.integers(d, d * k + 1))
        c = {"drafts": d, "draft_tokens": t, "accepted_tokens": sum(per), "accepted_per_position": per}
        rule = ("rule: rounds that drafted fewer than k (draft tokens < D k) count as rejections; the rate divides by "
                "the draft tokens")
        got, want = _value(probe(FN, c), rule), _reference(c)
        try:
            ok = abs(float(got["alpha"]) - want["alpha"]) < 1e-12 and abs(float(got["acceptance_rate"]) - want["acceptance_rate"]) < 1e-12
        except (TypeError, KeyError, ValueError):
            ok = False
        if not ok:
            raise AssertionError(rule)


def test_acceptance_from_counters_bad_input(probe, rng):
    d = int(rng.integers(3, 9))
    per = [d - 1, d - 2, 0]
    ok = {"drafts": d, "draft_tokens": 3 * d, "accepted_tokens": sum(per), "accepted_per_position": per}
    no_tokens = {key: v for key, v in ok.items() if key != "draft_tokens"}
    bads = [None, [d, 3 * d, sum(per)], no_tokens, dict(ok, accepted_per_position=[]),
            dict(ok, drafts=per[0] - 1), dict(ok, draft_tokens=d - 1), dict(ok, draft_tokens=3 * d + 1),
            dict(ok, drafts=-d), dict(ok, drafts=d + 0.5), dict(ok, accepted_per_position=[per[0], float(per[1]), 0]),
            dict(ok, drafts=True), dict(ok, accepted_tokens=sum(per) + 1), dict(ok, accepted_per_position=[per[1], per[0], 0])]
    for bad in bads:
        kind, value = probe(FN, bad)
        if kind != "raised" or not isinstance(value, Raised) or not value.is_a("ValueError"):
            raise AssertionError("rule: bad input (not the four keys, counts that are not integers >= 0, D < 1, k < 1, "
                                 "increasing positions or a_0 > D, A not their sum, draft tokens outside [D, D k]) must "
                                 "raise ValueError")
        if not re.search(r"\bcounters\b", value.message):
            raise AssertionError("rule: bad input: the ValueError message names counters")


JUDGES = {"test_acceptance_from_counters": test_acceptance_from_counters,
          "test_acceptance_from_counters_edges": test_acceptance_from_counters_edges,
          "test_acceptance_from_counters_bad_input": test_acceptance_from_counters_bad_input}
