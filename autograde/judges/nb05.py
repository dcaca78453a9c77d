"""Notebook 05's hidden tests as judges: every test cell (`estimate_alpha`, `round_terms`, `predicted_speedup` and
`ngram_propose`).

The rules and their wording are the notebook's hidden tests' (docs/contract.md lists them); counts, profiles, terms
and token sequences are drawn from the grader's generator; the references are the judge's own (numpy's polyfit for
the least-squares line, a backwards scan for the n-gram match).
"""

from __future__ import annotations

import numpy as np

from autograde.judge import Broken, Tensor, describe, nonfinite, number_of, tensor, value_errors, value_of


def _torch():
    import torch

    return torch


# ------------------------------------------------------------------------------------ A: estimate_alpha
ALPHA = "estimate_alpha"


def _counts(rng):
    """(accepted, drafted) per round: k from 0 to 8 (rounds that drafted nothing included), at least one tested."""
    while True:
        rounds = int(rng.integers(1, 40))
        drafted = rng.integers(0, 9, rounds).tolist()
        accepted = [int(rng.integers(0, k + 1)) for k in drafted]
        if sum(accepted) + sum(1 for n, k in zip(accepted, drafted) if n < k):
            return accepted, drafted


def _mle(acc, dra):
    s = sum(acc)
    return s / (s + sum(1 for n, k in zip(acc, dra) if n < k))


def test_estimate_alpha(probe, rng):
    cases = [_counts(rng) for _ in range(30)]
    rule = "rule: return alpha-hat as a plain Python float"
    for answer in probe.many(ALPHA, [(c, {}) for c in cases]):
        if type(value_of(answer, rule)) is not float:
            raise Broken(rule, describe(answer))


def test_estimate_alpha_formula(probe, rng):
    k1, k2 = (int(x) for x in rng.integers(1, 9, 2))
    n, k = int(rng.integers(1, 5)), int(rng.integers(5, 9))
    fixed = [
        (
            ([0, 0], [k1, k2]),
            0.0,
            "rule: formula: sum(n) / (sum(n) + rounds with n < k) when every round rejects its first draft",
        ),
        (
            ((k1, 0, n), (k1, 0, k)),
            (k1 + n) / (k1 + n + 1),
            "rule: formula: k may differ between rounds, and a round that drafted nothing carries no information "
            "(any sequences)",
        ),
    ]
    drawn = [_counts(rng) for _ in range(30)]
    known = []
    for alpha, kk in (
        (float(rng.uniform(0.85, 0.95)), 4),
        (float(rng.uniform(0.5, 0.7)), 8),
        (float(rng.uniform(0.2, 0.4)), 2),
    ):
        acc = np.minimum(rng.geometric(1 - alpha, 20000) - 1, kk).tolist()  # accepted before the first rejection
        known.append((alpha, (acc, [kk] * 20000)))
    answers = probe.many(
        ALPHA, [(args, {}) for args, _, _ in fixed] + [(c, {}) for c in drawn] + [(c, {}) for _, c in known]
    )
    for (_, want, rule), answer in zip(fixed, answers):
        if not abs(number_of(answer, rule) - want) < 1e-12:
            raise AssertionError(rule)
    rule = "rule: formula: sum(n) / (sum(n) + rounds with n < k) on other counts"
    for c, answer in zip(drawn, answers[len(fixed) :]):
        if not abs(number_of(answer, rule) - _mle(*c)) < 1e-12:  # the type is test_estimate_alpha's rule
            raise AssertionError(rule)
    rule = "rule: formula: the maximum-likelihood estimate recovers a known alpha from simulated rounds"
    for (alpha, _), answer in zip(known, answers[len(fixed) + len(drawn) :]):
        if not abs(number_of(answer, rule) - alpha) < 0.015:
            raise AssertionError(rule)


def test_estimate_alpha_bad_input(probe, rng):
    k = int(rng.integers(2, 9))
    bad = [
        (([1, 2], [k]), ("accepted", "drafted")),
        (([-1], [k]), ("accepted",)),
        (([k + 1], [k]), ("accepted",)),
        (([0], [-int(rng.integers(1, 5))]), ("drafted", "accepted")),
        (([], []), ("drafted",)),
        (([0, 0], [0, 0]), ("drafted",)),
    ]
    order = rng.permutation(len(bad)).tolist()
    value_errors(
        probe.many(ALPHA, [(bad[i][0], {}) for i in order]),
        [bad[i][1] for i in order],
        "rule: bad input: lengths differ, a negative count, accepted > drafted, or nothing tested (ValueError)",
        "rule: bad input: the message names the argument (accepted or drafted)",
    )


# ------------------------------------------------------------------------------------ B: round_terms
TERMS = "round_terms"


def _profile(rng):
    """A drawn profile of 1 to 5 draft lengths, and its token seconds."""
    while True:
        t = float(rng.uniform(1e-4, 0.05))
        prof = {}
        for k in rng.choice(range(1, 13), int(rng.integers(1, 6)), replace=False).tolist():
            rounds = int(rng.integers(1, 60))
            drafted = int(rng.integers(0, k * rounds + 1))
            p_s = drafted * t * float(rng.uniform(0, 0.5)) + rounds * t * float(rng.uniform(0, 0.2))
            v_s = rounds * t * float(rng.uniform(0.8, 2.5))
            prof[int(k)] = {
                "rounds": rounds,
                "drafted": drafted,
                "propose_seconds": p_s,
                "verify_seconds": v_s,
                "total_seconds": p_s + v_s + rounds * t * float(rng.uniform(0, 0.6)),
            }
        if sum(p["drafted"] for p in prof.values()):
            return prof, t


def _terms(prof, t):
    """(c, c_round, o, v): numpy's least-squares line through the per-k points, or c pooled where they coincide."""
    xs = [p["drafted"] / p["rounds"] for p in prof.values()]
    ys = [p["propose_seconds"] / p["rounds"] / t for p in prof.values()]
    if len(set(xs)) == 1:
        c, c_round = (
            sum(p["propose_seconds"] for p in prof.values()) / sum(p["drafted"] for p in prof.values()) / t,
            0.0,
        )
    else:
        c, c_round = (float(z) for z in np.polyfit(xs, ys, 1))
    o = (
        sum(p["total_seconds"] - p["propose_seconds"] - p["verify_seconds"] for p in prof.values())
        / sum(p["rounds"] for p in prof.values())
        / t
    )
    return c, c_round, o, {k: p["verify_seconds"] / p["rounds"] / t for k, p in prof.items()}


def test_round_terms(probe, rng):
    cases = [_profile(rng) for _ in range(60)]
    rule = "rule: c, c_round, o and every v(k) are plain floats"
    for answer in probe.many(TERMS, [(c, {}) for c in cases]):
        got = value_of(answer, rule)
        if not (
            isinstance(got, dict)
            and all(type(got.get(key)) is float for key in ("c", "c_round", "o"))
            and isinstance(got.get("v"), dict)
            and all(type(k) is int and type(v) is float for k, v in got["v"].items())
        ):
            raise Broken(rule, describe(answer))


def _read_terms(answer, rule):
    got = value_of(answer, rule)
    try:
        return float(got["c"]), float(got["c_round"]), float(got["o"]), {k: float(v) for k, v in got["v"].items()}
    except (TypeError, KeyError, ValueError, AttributeError):
        raise Broken(rule, describe(answer)) from None


def test_round_terms_formula(probe, rng):
    line_rule = (
        "rule: formula: c and c_round are the slope and intercept of the least-squares line through "
        "(drafted / rounds, propose seconds / rounds / token_seconds), one point per k"
    )
    cases = [_profile(rng) for _ in range(60)]
    answers = probe.many(TERMS, [(c, {}) for c in cases])
    for (prof, t), answer in zip(cases, answers):
        c, c_round, o, v = _read_terms(answer, line_rule)  # the types are test_round_terms' rule
        want_c, want_cr, want_o, want_v = _terms(prof, t)
        scale = max(1.0, abs(want_c), abs(want_cr))
        if not (abs(c - want_c) < 1e-7 * scale and abs(c_round - want_cr) < 1e-7 * scale):
            raise AssertionError(line_rule)
        if set(v) != set(prof) or not all(abs(v[k] - want_v[k]) < 1e-9 * max(1, v[k]) for k in prof):
            raise AssertionError("rule: formula: v(k) = verify_seconds / rounds / token_seconds, for each k")
        if not abs(o - want_o) < 1e-9 * max(1, want_o):
            raise AssertionError(
                "rule: formula: o pools every k: (total - propose - verify) / total rounds / token_seconds"
            )
    # a proposer that costs exactly c_round a round plus c a drafted token, in t-second plain tokens, at three k
    c_true, cr_true, t = float(rng.uniform(0.05, 0.3)), float(rng.uniform(0.01, 0.1)), float(rng.uniform(1e-3, 1e-2))
    line = {
        k: {
            "rounds": r,
            "drafted": d,
            "propose_seconds": (cr_true * r + c_true * d) * t,
            "verify_seconds": t * r,
            "total_seconds": (cr_true * r + c_true * d + 1.02 * r) * t,
        }
        for k, r, d in ((1, 30, 30), (3, 20, 55), (6, 12, 61))
    }
    k, r = int(rng.integers(1, 9)), int(rng.integers(2, 20))
    one = {
        k: {
            "rounds": r,
            "drafted": k * r,
            "propose_seconds": 0.1 * k * r * t,
            "verify_seconds": r * t,
            "total_seconds": (0.1 * k + 1.2) * r * t,
        }
    }
    same = {
        2: {"rounds": 10, "drafted": 20, "propose_seconds": 0.04, "verify_seconds": 0.1, "total_seconds": 0.15},
        4: {"rounds": 5, "drafted": 10, "propose_seconds": 0.03, "verify_seconds": 0.06, "total_seconds": 0.1},
    }
    got_line, got_one, got_same = probe.many(TERMS, [((line, t), {}), ((one, t), {}), ((same, 0.01), {})])
    rule = (
        "rule: formula: c and c_round recover a proposer's cost per drafted token and per round from three draft "
        "lengths"
    )
    c, c_round, _, _ = _read_terms(got_line, rule)
    if not (abs(c - c_true) < 1e-9 and abs(c_round - cr_true) < 1e-9):
        raise AssertionError(rule)
    rule = "rule: formula: one k (or every k at the same drafted tokens per round) gives no line: c pooled, c_round 0"
    c, c_round, o, v = _read_terms(got_one, rule)
    if not (abs(c - 0.1) < 1e-9 and c_round == 0 and abs(o - 0.2) < 1e-9 and abs(v.get(k, -1) - 1.0) < 1e-9):
        raise AssertionError(rule)
    c, c_round, _, _ = _read_terms(got_same, rule)
    if not (abs(c - 0.7 / 3) < 1e-9 and c_round == 0):
        raise AssertionError(rule)


def test_round_terms_bad_input(probe, rng):
    t = float(rng.uniform(1e-3, 0.05))
    entry = {"rounds": 2, "drafted": 2, "propose_seconds": 0.5 * t, "verify_seconds": 2 * t, "total_seconds": 4 * t}
    ok = {1: entry}
    bad = [
        ((ok, -t), ("token_seconds",)),
        ((ok, nonfinite("nan")), ("token_seconds",)),
        ((ok, True), ("token_seconds",)),
        ((ok, 0.0), ("token_seconds",)),
        (({}, t), ("profile",)),
        (({0: entry}, t), ("profile",)),
        (({1.5: entry}, t), ("profile",)),
        (({1: {"rounds": 2}}, t), ("profile",)),
        (({1: dict(entry, rounds=0)}, t), ("profile",)),
        (({1: dict(entry, drafted=-1)}, t), ("profile",)),
        (({1: dict(entry, drafted=0)}, t), ("profile",)),
        (({1: dict(entry, verify_seconds=-t)}, t), ("profile",)),
        (({1: dict(entry, total_seconds=nonfinite("inf"))}, t), ("profile",)),
        (({1: dict(entry, total_seconds=2 * t)}, t), ("profile",)),
    ]
    order = rng.permutation(len(bad)).tolist()
    value_errors(
        probe.many(TERMS, [(bad[i][0], {}) for i in order]),
        [bad[i][1] for i in order],
        "rule: bad input: token_seconds not > 0, an empty or malformed profile, bad counts or times, parts above "
        "the total (ValueError)",
        "rule: bad input: the message names the argument (profile or token_seconds)",
    )


# ------------------------------------------------------------------------------------ C: predicted_speedup
SPEEDUP = "predicted_speedup"


def _drawn_terms(rng, ks):
    return {
        "c": float(rng.uniform(0, 0.5)),
        "c_round": float(rng.uniform(-0.05, 0.3)),
        "o": float(rng.uniform(-0.05, 0.6)),
        "v": {int(k): float(rng.uniform(0.8, 3.0)) for k in ks},
    }


def test_predicted_speedup(probe, rng):
    terms = _drawn_terms(rng, [2, 4])
    rule = "rule: return a plain float"
    for answer in probe.many(SPEEDUP, [((float(rng.uniform(0, 1)), k, terms), {}) for k in (2, 4, 2, 4)]):
        if type(value_of(answer, rule)) is not float:
            raise Broken(rule, describe(answer))


def test_predicted_speedup_formula(probe, rng):
    cases = []
    for _ in range(60):
        ks = rng.choice(range(1, 11), 3, replace=False).tolist()
        terms = _drawn_terms(rng, ks)
        cases.append((float(rng.choice([0.0, 1.0, rng.random()])), int(rng.choice(ks)), terms))
    a = float(rng.uniform(0, 1))
    free = (a, 2, {"c": 0.0, "c_round": 0.0, "o": 0.0, "v": {2: 1.0}})
    answers = probe.many(SPEEDUP, [(c, {}) for c in cases + [free]])
    rule = (
        "rule: formula: E(alpha, k) / (k c + c_round + v(k) + o), with c_round and o counted once per round (other "
        "terms, alpha and k)"
    )
    for (a_, k, t), answer in zip(cases, answers):
        e = float(k + 1) if a_ == 1 else (1 - a_ ** (k + 1)) / (1 - a_)
        want = e / (k * t["c"] + t["c_round"] + t["v"][k] + t["o"])
        if not abs(number_of(answer, rule) - want) < 1e-9 * want:  # the type is test_predicted_speedup's rule
            raise AssertionError(rule)
    rule = "rule: formula: a free draft, no overhead and v 1 give E(alpha, k)"
    if not abs(number_of(answers[-1], rule) - (1 + a + a * a)) < 1e-12:
        raise AssertionError(rule)


def test_predicted_speedup_bad_input(probe, rng):
    good = _drawn_terms(rng, [1, 4])
    bad = [
        ((float(rng.uniform(1.01, 2)), 4, good), ("alpha",)),
        ((-float(rng.uniform(0.01, 1)), 1, good), ("alpha",)),
        ((0.5, 4, {"c": 0.2, "v": {4: 1.4}}), ("terms",)),
        ((0.5, 4, {"c": 0.2, "o": 0.05, "v": {4: 1.4}}), ("terms",)),
        ((0.5, 4, {"c": -1.0, "c_round": 0.0, "o": 0.0, "v": {4: 1.0}}), ("terms",)),
        ((0.5, int(rng.choice([2, 3, 5, 8])), good), ("k",)),
    ]
    order = rng.permutation(len(bad)).tolist()
    value_errors(
        probe.many(SPEEDUP, [(bad[i][0], {}) for i in order]),
        [bad[i][1] for i in order],
        "rule: bad input: alpha outside [0, 1], k not measured, terms incomplete or a round costing <= 0 (ValueError)",
        "rule: bad input: the message names the argument (alpha, k or terms)",
    )


# ------------------------------------------------------------------------------------ D: ngram_propose
NGRAM = "ngram_propose"


def _lookup(toks, n, k):
    L = len(toks)
    for j in range(L - n - 1, -1, -1):
        if toks[j : j + n] == toks[L - n :]:
            return toks[j + n : j + n + k]
    return []


def _sequences(rng):
    out = []
    for _ in range(300):
        L, V = int(rng.integers(1, 40)), int(rng.integers(2, 5))
        out.append((rng.integers(0, V, L).tolist(), int(rng.integers(1, 5)), int(rng.integers(1, 9))))
    return out


def _long(toks):
    torch = _torch()
    return tensor(torch.tensor(toks, dtype=torch.long))


def test_ngram_propose(probe, rng):
    rule = "rule: return a 1-D LongTensor"
    cases = _sequences(rng)
    for answer in probe.many(NGRAM, [((_long(t), n, k), {}) for t, n, k in cases]):
        got = value_of(answer, rule)
        if not (isinstance(got, Tensor) and got.kind == "torch" and got.dtype == "int64" and len(got.shape) == 1):
            raise Broken(rule, describe(answer))


def _ids(answer, rule):
    got = value_of(answer, rule)
    if not (isinstance(got, Tensor) and got.kind == "torch"):
        raise Broken(rule, describe(answer))
    return got.values


def test_ngram_propose_matches(probe, rng):
    V = int(rng.integers(5, 50))
    a, b, c, x, y, z = (int(t) for t in rng.choice(V + 10, 6, replace=False))
    seq = [a, b, c, z, a, b, c, x, y, a, b, c]  # the worked example's shape, other tokens
    r = int(rng.integers(0, V))
    fixed = [
        ((seq, 3, 10), [x, y, a, b, c], "rule: the up to k tokens that follow the match (fewer when fewer follow)"),
        ((seq, 1, 3), [x, y, a], "rule: the most recent earlier occurrence of the last n tokens (another n)"),
        (
            ([r] * 4, 2, 3),
            [r],
            "rule: the most recent earlier position j with j < len(tokens) - n and a token after "
            "it (a match may overlap the suffix)",
        ),
        (([r, r], 2, 3), [], "rule: a sequence of n tokens or fewer proposes an empty LongTensor"),
        (([], 1, 3), [], "rule: a sequence of n tokens or fewer proposes an empty LongTensor"),
    ]
    drawn = _sequences(rng)
    answers = probe.many(
        NGRAM, [((_long(t), n, k), {}) for (t, n, k), _, _ in fixed] + [((_long(t), n, k), {}) for t, n, k in drawn]
    )
    for (_, want, rule), answer in zip(fixed, answers):
        if _ids(answer, rule) != want:
            raise AssertionError(rule)
    rule = "rule: tokens[j + n : j + n + k] for the most recent earlier match j, or empty (other sequences, n and k)"
    for (t, n, k), answer in zip(drawn, answers[len(fixed) :]):  # the dtype is test_ngram_propose's rule
        if _ids(answer, rule) != _lookup(t, n, k):
            raise AssertionError(rule)


def test_ngram_propose_bad_input(probe, rng):
    torch = _torch()
    toks = rng.integers(0, 9, int(rng.integers(3, 12))).tolist()
    bad = [
        ((_long(toks), 2, 0), "k"),
        ((_long(toks), 2, -int(rng.integers(1, 5))), "k"),
        ((_long(toks), -int(rng.integers(1, 5)), 3), "n"),
        ((_long(toks), 0, 3), "n"),
        ((tensor(torch.tensor([toks], dtype=torch.long)), 2, 3), "tokens"),
    ]
    order = rng.permutation(len(bad)).tolist()
    value_errors(
        probe.many(NGRAM, [(bad[i][0], {}) for i in order]),
        [bad[i][1] for i in order],
        "rule: bad input: n < 1, k < 1 or tokens that is not 1-D (ValueError)",
        "rule: bad input: the message names the argument (n, k or tokens)",
    )


JUDGES = {name: fn for name, fn in globals().items() if name.startswith("test_") and callable(fn)}
