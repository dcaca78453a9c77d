"""Notebook 10's hidden tests as judges, so far the cells of `run_seconds` (part C), `crossing` (part D) and
`serving_metrics` (part E); the other test cells of 10 still grade in the kernel (the per-cell switch) until the
notebook moves over whole.

The rules and their wording are the notebook's hidden tests' (docs/contract.md lists them); the curves are drawn
from the grader's generator instead of a seed written into the test cell.
"""
from __future__ import annotations

import math

import numpy as np

from autograde.judge import Broken, cost, cost_of, describe, ndarray, nonfinite, value_errors, value_of

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


# ------------------------------------------------------------------------------------ C: run_seconds
RUN = "run_seconds"


def _shape(rng):
    return (int(rng.choice([1, 2, 3, 8, 32])), int(rng.choice([2, 5, 32, 100])), int(rng.choice([1, 2, 16, 64])))


def _pair_of_times(answer, rule, strict=False):
    """(plain, speculative) as floats; strict: a tuple of two plain floats, test_run_seconds_plain's rule (the other
    cells take any two numbers, so a slip in the types costs that cell alone)."""
    got = value_of(answer, rule)
    if strict and not (isinstance(got, tuple) and len(got) == 2 and all(type(x) is float for x in got)):
        raise Broken(rule, describe(answer))
    try:
        return float(got[0]), float(got[1])
    except (TypeError, ValueError, IndexError, KeyError):
        raise Broken(rule, describe(answer)) from None


def test_run_seconds_plain(probe, rng):
    cases = []
    for _ in range(60):
        a, b, c2, d0 = (float(x) for x in (rng.uniform(1e-4, 0.05), rng.uniform(1e-6, 1e-3), rng.uniform(0, 1e-7),
                                           rng.uniform(0, 0.02)))
        tgt, drf = cost(a, d0, b, c2), cost(a / 7, 0.0, 2e-5)          # B and t enter the target's cost apart
        (B, P, N), k, R = _shape(rng), int(rng.choice([1, 2, 4, 8])), int(rng.integers(1, 40))
        cases.append(((B, tgt, drf, R, P, N, k), cost_of(tgt)(B, P) + (N - 1) * cost_of(tgt)(B, 1)))
    for (_, want), answer in zip(cases, probe.many(RUN, [(args, {}) for args, _ in cases])):
        got = _pair_of_times(answer, "rule: return (plain, speculative), two plain floats", strict=True)
        if not abs(got[0] - want) < 1e-12:
            raise AssertionError("rule: plain = target_s(B, P) + (N - 1) target_s(B, 1) (other batches, prompts, "
                                 "lengths and machines)")


def test_run_seconds_speculative(probe, rng):
    cases = []
    for _ in range(60):
        a, b, d0 = (float(x) for x in (rng.uniform(1e-4, 0.05), rng.uniform(1e-6, 1e-3), rng.uniform(0, 0.02)))
        e0, e1 = float(rng.uniform(1e-5, 5e-3)), float(rng.uniform(1e-7, 1e-4))
        tgt = cost(a, d0, b)
        drf = cost(e0, 3e-4, e1, 0.0, 1e-3)                               # the 2-token step priced apart
        twice = cost(2 * e0, 2 * 3e-4, 2 * e1, 0.0, 2 * 1e-3)             # the same draft at twice the cost
        (B, P, N), k, R = _shape(rng), int(rng.choice([2, 3, 4, 8])), int(rng.integers(1, 40))
        cases.append((B, P, N, k, R, tgt, drf, twice))
    calls = []
    for B, P, N, k, R, tgt, drf, twice in cases:
        calls += [((B, tgt, drf, R, P, N, k), {}), ((B, tgt, twice, R, P, N, k), {}), ((B, tgt, drf, R, P, N, 1), {})]
    answers = probe.many(RUN, calls)
    rule = ("rule: speculative = target_s(B, P - 1) + draft_s(B, P - 1) + R (draft_s(B, 2) + (k - 1) draft_s(B, 1) + "
            "target_s(B, k + 1)) (other B, P, R and k)")
    for j, (B, P, N, k, R, tgt, drf, _) in enumerate(cases):
        t, d = cost_of(tgt), cost_of(drf)
        got, other, one = (_pair_of_times(answers[3 * j + i], rule) for i in range(3))
        want = t(B, P - 1) + d(B, P - 1) + R * (d(B, 2) + (k - 1) * d(B, 1) + t(B, k + 1))
        if not abs(got[1] - want) < 1e-12 * max(1.0, want):
            raise AssertionError(rule)
        if not abs(other[0] - got[0]) < 1e-15:
            raise AssertionError("rule: the draft's forwards enter only the speculative run")
        want1 = t(B, P - 1) + d(B, P - 1) + R * (d(B, 2) + t(B, 2))
        if not abs(one[1] - want1) < 1e-12 * max(1.0, want1):
            raise AssertionError("rule: k = 1: a round is one draft forward over 2 tokens and a verify over 2")


def test_run_seconds_bad_input(probe, rng):
    t_ex = cost(float(rng.uniform(0.005, 0.02)), 0.0, float(rng.uniform(5e-4, 2e-3)))
    d_ex = cost(float(rng.uniform(5e-4, 2e-3)), 0.0, float(rng.uniform(5e-5, 2e-4)))
    B, R, P, N, k = int(rng.integers(1, 9)), int(rng.integers(1, 9)), int(rng.integers(2, 64)), int(rng.integers(1, 64)), \
        int(rng.integers(1, 9))

    def args(**changed):
        given = {**dict(batch=B, target_s=t_ex, draft_s=d_ex, rounds=R, prompt_tokens=P, new_tokens=N, k=k), **changed}
        return tuple(given[name] for name in ("batch", "target_s", "draft_s", "rounds", "prompt_tokens", "new_tokens",
                                              "k"))

    bad = [(args(batch=0), "batch"), (args(batch=float(B)), "batch"), (args(batch=True), "batch"),
           (args(target_s=float(rng.uniform(0.001, 0.1))), "target_s"), (args(draft_s=None), "draft_s"),
           (args(rounds=0), "rounds"), (args(rounds=R + 0.5), "rounds"), (args(prompt_tokens=1), "prompt_tokens"),
           (args(prompt_tokens=float(P)), "prompt_tokens"), (args(new_tokens=0), "new_tokens"),
           (args(k=-int(rng.integers(1, 5))), "k"), (args(k=float(k)), "k")]
    order = rng.permutation(len(bad)).tolist()
    answers = probe.many(RUN, [(bad[i][0], {}) for i in order])
    value_errors(answers, [bad[i][1] for i in order],
                 "rule: bad input (batch, rounds, new_tokens or k not an integer >= 1, prompt_tokens < 2, a cost that "
                 "is not callable) must raise ValueError", "rule: bad input: the ValueError message names the argument")


# ------------------------------------------------------------------------------------ E: serving_metrics
METRICS = "serving_metrics"
METRIC_KEYS = {"ttft_p50", "ttft_p99", "tpot_p50", "tpot_p99", "throughput", "goodput"}


def _served(rng, n_req):
    """A drawn trace of n_req requests, its columns sent as a list, a NumPy array, a tuple and an integer array
    (the function takes sequences of any kind), and (arrival, first, finish, tokens) as arrays for the reference."""
    arr = np.sort(rng.uniform(0, 100, n_req))
    fst = arr + rng.exponential(1.5, n_req)
    out = rng.integers(2, 400, n_req)
    fin = fst + (out - 1) * rng.uniform(0.005, 0.08, n_req)
    trace = {"arrival": [float(x) for x in arr], "first_token": ndarray(fst), "finish": tuple(float(x) for x in fin),
             "output_tokens": ndarray(out)}
    return trace, (arr, fst, fin, out)


def _traces_served(probe, rng):
    """(answer, columns, ttft_slo, tpot_slo) for drawn traces of 1 to about 1,000 requests, asked in one probe."""
    cases = []
    for n_req in (1, 3, int(rng.integers(5, 20)), int(rng.integers(80, 130)), int(rng.integers(800, 1200))):
        for _ in range(4):
            trace, columns = _served(rng, n_req)
            cases.append((trace, columns, float(rng.uniform(0.5, 3)), float(rng.uniform(0.01, 0.07))))
    answers = probe.many(METRICS, [((trace,), {"ttft_slo": s1, "tpot_slo": s2}) for trace, _, s1, s2 in cases])
    return [(answer, columns, s1, s2) for (_, columns, s1, s2), answer in zip(cases, answers)]


def _metric(answer, key, rule):
    got = value_of(answer, rule)
    try:
        return float(got[key])
    except (TypeError, KeyError, ValueError, IndexError):
        raise Broken(rule, describe(answer)) from None


def test_serving_metrics(probe, rng):
    shape = "rule: a dict of the six keys, plain floats"
    for answer, (arr, fst, fin, out), _, _ in _traces_served(probe, rng):
        got = value_of(answer, shape)
        if not (isinstance(got, dict) and set(got) == METRIC_KEYS and all(type(v) is float for v in got.values())):
            raise Broken(shape, describe(answer))
        ttft, tpot = fst - arr, (fin - fst) / (out - 1)
        if not (abs(got["ttft_p50"] - np.percentile(ttft, 50)) < 1e-9 and abs(got["ttft_p99"] - np.percentile(ttft, 99)) < 1e-9):
            raise AssertionError("rule: TTFT = first token - arrival, percentiles with numpy's default (linear) method")
        if not (abs(got["tpot_p50"] - np.percentile(tpot, 50)) < 1e-12 and abs(got["tpot_p99"] - np.percentile(tpot, 99)) < 1e-12):
            raise AssertionError("rule: TPOT = (finish - first token) / (output tokens - 1), percentiles with numpy's "
                                 "default (linear) method")


def test_serving_metrics_rates(probe, rng):
    throughput = "rule: throughput = output tokens / (last finish - first arrival)"
    goodput = "rule: goodput = requests meeting both SLO bounds / (last finish - first arrival)"
    for answer, (arr, fst, fin, out), s1, s2 in _traces_served(probe, rng):
        ttft, tpot, span = fst - arr, (fin - fst) / (out - 1), fin.max() - arr.min()
        if not abs(_metric(answer, "throughput", throughput) - out.sum() / span) < 1e-9 * max(1.0, out.sum() / span):
            raise AssertionError(throughput)
        want = ((ttft <= s1) & (tpot <= s2)).sum() / span
        if not abs(_metric(answer, "goodput", goodput) - want) < 1e-12 * max(1.0, want):
            raise AssertionError(goodput)
    # requests exactly at a bound: the bounds are the TTFT and TPOT of drawn requests; every time a multiple of
    # 1/1024 s and every output_tokens - 1 a power of 2, so TTFT and TPOT are exact however they are computed
    exact = "rule: a request exactly at a bound meets it (TTFT <= ttft_slo, TPOT <= tpot_slo)"
    n = int(rng.integers(3, 8))
    arr = np.sort(rng.integers(0, 40, n)) / 8
    fst = arr + rng.integers(4, 24, n) / 8
    steps = 2 ** rng.integers(1, 6, n)
    out = steps + 1
    fin = fst + steps * (rng.integers(20, 80, n) / 1024)
    ttft, tpot = fst - arr, (fin - fst) / (out - 1)
    i, j = (int(x) for x in rng.choice(n, 2, replace=False))
    s1, s2 = float(ttft[i]), float(tpot[j])
    trace = {"arrival": ndarray(arr), "first_token": ndarray(fst), "finish": ndarray(fin), "output_tokens": ndarray(out)}
    answer = probe(METRICS, trace, ttft_slo=s1, tpot_slo=s2)
    want = ((ttft <= s1) & (tpot <= s2)).sum() / (fin.max() - arr.min())
    if not abs(_metric(answer, "goodput", exact) - want) < 1e-12 * max(1.0, want):
        raise AssertionError(exact)


def test_serving_metrics_bad_input(probe, rng):
    a, f = float(rng.uniform(0, 5)), float(rng.uniform(5, 10))
    e = f + float(rng.uniform(0.5, 5))
    n = int(rng.integers(2, 50))
    example = {"arrival": [a, a + 1.0], "first_token": [f, f + 1.5], "finish": [e, e + 1.0], "output_tokens": [n, n + 3]}
    bad = [(({"arrival": [a], "first_token": [f], "finish": [e]},), "trace"),
           (([a, a + 1.0],), "trace"),
           (({"arrival": [], "first_token": [], "finish": [], "output_tokens": []},), "trace"),
           (({"arrival": [a, a + 1.0], "first_token": [f], "finish": [e, e + 1.0], "output_tokens": [n, n]},), "trace"),
           (({"arrival": [f], "first_token": [a], "finish": [e], "output_tokens": [n]},), "trace"),
           (({"arrival": [a], "first_token": [e], "finish": [f], "output_tokens": [n]},), "trace"),
           (({"arrival": [a], "first_token": [f], "finish": [e], "output_tokens": [n + 0.5]},), "trace"),
           (({"arrival": [a], "first_token": [f], "finish": [e], "output_tokens": [1]},), "trace"),
           ((example, 0.0, 0.05), "ttft_slo"),
           ((example, 2.0, -float(rng.uniform(0, 1))), "tpot_slo")]
    order = rng.permutation(len(bad)).tolist()
    answers = probe.many(METRICS, [(bad[i][0], {}) for i in order])
    value_errors(answers, [bad[i][1] for i in order],
                 "rule: bad input (a malformed or empty trace, times out of order, output_tokens < 2, an SLO bound <= "
                 "0) must raise ValueError", "rule: bad input: the ValueError message names the argument")


JUDGES = {"test_run_seconds_plain": test_run_seconds_plain, "test_run_seconds_speculative": test_run_seconds_speculative,
          "test_run_seconds_bad_input": test_run_seconds_bad_input, "test_crossing": test_crossing, "test_crossing_none_and_bad_input": test_crossing_none_and_bad_input,
          "test_serving_metrics": test_serving_metrics, "test_serving_metrics_rates": test_serving_metrics_rates,
          "test_serving_metrics_bad_input": test_serving_metrics_bad_input}
