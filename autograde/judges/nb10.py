"""Notebook 10's hidden tests as judges: every test cell (`batched_accept` and `rollback`, part B; `run_seconds`,
part C; `crossing`, part D; `serving_metrics` and `gate_k`, part E).

The rules and their wording are the notebook's hidden tests' (docs/contract.md lists them); the curves are drawn
from the grader's generator instead of a seed written into the test cell.
"""

from __future__ import annotations

import math

import numpy as np

from autograde.judge import (
    Broken,
    Tensor,
    answered,
    build,
    call,
    cost,
    cost_of,
    describe,
    double,
    item,
    named,
    ndarray,
    noisy,
    nonfinite,
    number_of,
    tensor,
    tiny_llama,
    value_errors,
    value_of,
    watched,
)

ASSIGNMENT = "10_batches_and_servers"


def warm():
    """The course's own copies of the given cells' functions (gate_k's reference), torch, and transformers' Llama
    (the end-to-end check builds its own models: 2.1 s of first import, measured, otherwise paid in test_rollback)
    loaded ahead."""
    _given()
    from specdec.core.decoding import greedy_generate, tiny_llama

    greedy_generate(tiny_llama(vocab_size=8, hidden_size=8, num_hidden_layers=1, seed=0), _t([[1]]), 1)


def _given():
    from autograde.judges import given_names

    return given_names(ASSIGNMENT)


def _torch():
    import torch

    return torch


def _t(x, dtype="int64"):
    torch = _torch()
    return torch.tensor(np.asarray(x).tolist(), dtype=getattr(torch, dtype))


def _long_vector(v, n):
    """The values of a torch int64 tensor of shape (n,) that came back, or None."""
    if isinstance(v, Tensor) and v.kind == "torch" and v.dtype == "int64" and v.shape == (n,):
        return v.values
    return None


def _ids_of(v, n):
    """Any tensor or sequence of n integers that came back, as a list of ints (the cells that do not grade the
    types read the values as the notebook's int() did), or None."""
    values = v.values if isinstance(v, Tensor) else v
    if isinstance(values, (list, tuple)) and len(values) == n and all(type(x) is int for x in values):
        return list(values)
    return None


def _pair(answer, rule):
    got = value_of(answer, rule)
    if not (isinstance(got, (tuple, list)) and len(got) == 2):
        raise Broken(rule, describe(answer))
    return got


# ------------------------------------------------------------------------------------ B: batched_accept
ACCEPT = "batched_accept"


def _leading(d, t):
    n = 0
    while n < len(d) and d[n] == t[n]:
        n += 1
    return n


def _accept_cases(rng):
    """(target_argmax, drafts) as arrays: drawn batches of 1 to 16 rows, k from 1 to 12, over vocabularies of 2 to
    4 tokens (long runs of matches), then a row that mismatches at its first draft."""
    cases = []
    for B, k, V in (
        (1, 1, 3),
        (int(rng.integers(2, 5)), 2, 2),
        (int(rng.integers(5, 9)), int(rng.integers(3, 7)), 4),
        (int(rng.integers(10, 17)), 8, 3),
        (2, int(rng.integers(9, 13)), 2),
    ):
        for _ in range(16):
            cases.append((rng.integers(0, V, (B, k + 1)), rng.integers(0, V, (B, k))))
    t = rng.integers(0, 9, (1, 5))
    d = t[:, :4].copy()
    d[0, 0] = (t[0, 0] + 1) % 9
    cases.append((t, d))
    return cases


def _accepted(probe, rng):
    """[(answer, target_argmax, drafts)]: the drawn cases as int64 tensors, and one pair sent as int32."""
    cases = _accept_cases(rng)
    calls = [((tensor(_t(t)), tensor(_t(d))), {}) for t, d in cases]
    t32 = rng.integers(0, 9, (1, 3))
    calls.append(((tensor(_t(t32, "int32")), tensor(_t(t32[:, :2], "int32"))), {}))
    cases.append((t32, t32[:, :2]))
    return [(answer, t, d) for answer, (t, d) in zip(probe.many(ACCEPT, calls), cases)]


def test_batched_accept(probe, rng):
    shape = "rule: return two LongTensors of shape (B,)"
    rule = "rule: n_accepted counts the leading matches of each row, stopping at the first mismatch (other B and k)"
    for answer, t, d in _accepted(probe, rng):
        got = _pair(answer, shape)
        n, nxt = (_long_vector(v, len(d)) for v in got)
        if n is None or nxt is None:
            raise Broken(shape, describe(answer))
        if n != [_leading(list(db), list(tb)) for db, tb in zip(d.tolist(), t.tolist())]:
            raise AssertionError(rule)


def test_batched_accept_next_tokens(probe, rng):
    rule = "rule: next_tokens is the target's argmax after the accepted prefix (the bonus when all k agree)"
    for answer, t, d in _accepted(probe, rng):
        nxt = _ids_of(_pair(answer, rule)[1], len(d))
        want = [tb[_leading(list(db), list(tb))] for db, tb in zip(d.tolist(), t.tolist())]
        if nxt != want:
            raise Broken(rule, describe(answer) if nxt is None else "")


def test_batched_accept_bad_input(probe, rng):
    B, k = int(rng.integers(2, 5)), int(rng.integers(1, 5))

    def z(*shape, dtype="int64"):
        return tensor(_t(np.zeros(shape, dtype=int), dtype))

    bad = [
        ((z(B + 1, k + 1), z(B, k)), "target_argmax"),
        ((z(B, k + 1, dtype="float32"), z(B, k)), "target_argmax"),
        ((z(B, k + 1, 1), z(B, k)), "target_argmax"),
        ((z(B, k + 2), z(B, k)), "target_argmax"),
        (([[1] * (k + 1)] * B, z(B, k)), "target_argmax"),
        ((z(B, 1), z(B, 0)), "drafts"),
        ((z(B, k + 1), z(B, k, dtype="float32")), "drafts"),
        ((z(B, k + 1), [[1] * k] * B), "drafts"),
        ((z(B, k + 1), z(k)), "drafts"),
    ]
    order = rng.permutation(len(bad)).tolist()
    answered(probe.many(ACCEPT, [((z(B, k + 1), z(B, k)), {})]))
    value_errors(
        probe.many(ACCEPT, [(bad[i][0], {}) for i in order]),
        [bad[i][1] for i in order],
        "rule: bad input (wrong number of dimensions, shapes that do not match, float tensors, k < 1) must "
        "raise ValueError",
        "rule: bad input: the ValueError message names the argument",
    )


# ------------------------------------------------------------------------------------ B: rollback
ROLLBACK = "rollback"


def _rollback_cases(rng):
    """(mask, lengths, n_accepted, k) as arrays: masks with earlier zeros, the verify's k + 1 slots all ones."""
    cases = []
    for B, k, extra in (
        (1, 1, 0),
        (int(rng.integers(2, 5)), 2, 6),
        (5, int(rng.integers(3, 6)), 0),
        (int(rng.integers(6, 10)), 6, int(rng.integers(15, 30))),
        (4, int(rng.integers(8, 12)), 2),
    ):
        T = k + 1 + extra
        for _ in range(8):
            mask = (rng.random((B, T)) < 0.7).astype(int)
            mask[:, T - (k + 1) :] = 1
            cases.append((mask, mask.sum(axis=1), rng.integers(0, k + 1, B), k))
    return cases


def _rolled(probe, rng, watch=False):
    cases = _rollback_cases(rng)
    wrap = watched if watch else (lambda x: x)
    calls = [((wrap(tensor(_t(m))), wrap(tensor(_t(ln))), tensor(_t(n)), k), {}) for m, ln, n, k in cases]
    return [(answer,) + case for answer, case in zip(probe.many(ROLLBACK, calls), cases)]


def test_rollback(probe, rng):
    kept = "rule: the inputs stay as they were (new tensors returned)"
    shape = "rule: new_mask keeps the shape (B, T), new_lengths (B,)"
    before = "rule: slots before the verify's k + 1 keep their values (earlier zeros stay zeros)"
    last = "rule: the last k - n_accepted slots of each row become 0, the others stay (other B, k and T)"
    for answer, mask, lengths, n, k in _rolled(probe, rng, watch=True):
        after = answer.after or []
        if [getattr(x, "values", None) for x in after] != [mask.tolist(), lengths.tolist()]:
            raise AssertionError(kept)
        got = _pair(answer, shape)
        B, T = mask.shape
        if not (
            isinstance(got[0], Tensor)
            and got[0].shape == (B, T)
            and isinstance(got[1], Tensor)
            and got[1].shape == (B,)
        ):
            raise Broken(shape, describe(answer))
        rows = got[0].values
        if [r[: T - (k + 1)] for r in rows] != mask[:, : T - (k + 1)].tolist():
            raise AssertionError(before)
        if [r[T - (k + 1) :] for r in rows] != [[1] * (int(nb) + 1) + [0] * (k - int(nb)) for nb in n]:
            raise AssertionError(last)
    if _accept_is_right(probe, rng):  # else the loop's failure would be batched_accept's slip, its own cells'
        _end_to_end(probe, rng)


def _accept_is_right(probe, rng):
    """Whether the learner's batched_accept, which the given batched loop calls beside rollback, gives the
    reference's n_accepted and next tokens on drawn cases."""
    cases = _accept_cases(rng)
    answers = probe.many(ACCEPT, [((tensor(_t(t)), tensor(_t(d))), {}) for t, d in cases])
    for (kind, got), (t, d) in zip(answers, cases):
        if kind != "value" or not (isinstance(got, (tuple, list)) and len(got) == 2):
            return False
        n = [_leading(d[b], t[b]) for b in range(len(t))]
        if _ids_of(got[0], len(t)) != n or _ids_of(got[1], len(t)) != [int(t[b][n[b]]) for b in range(len(t))]:
            return False
    return True


def _end_to_end(probe, rng):
    """The given batched loop with the student's batched_accept and rollback, on float64 models drawn here: each
    sequence's output against the judge's own plain greedy decoding of its own copy of the target."""
    from specdec.core.decoding import greedy_generate

    rule = "rule: end to end: every sequence's greedy output equals its own plain greedy decoding"
    cases = []
    for B, k, new in (
        (int(rng.integers(3, 6)), 3, int(rng.integers(12, 17))),
        (3, 1, 10),
        (int(rng.integers(4, 7)), int(rng.integers(4, 7)), 16),
    ):
        s = int(rng.integers(0, 10**6))
        t = double(tiny_llama(vocab_size=48, hidden_size=32, num_hidden_layers=2, seed=s))
        cases.append((t, noisy(t, 0.5, s + 1), rng.integers(0, 48, (B, 6)), new, k))
    answers = probe.many(
        "batched_speculative_generate", [((t, d, tensor(_t(p)), new, k), {}) for t, d, p, new, k in cases]
    )
    for answer, (t, _, p, new, _) in zip(answers, cases):
        got = value_of(answer, rule)
        out = got[0] if isinstance(got, (tuple, list)) and got else None
        if not (isinstance(out, Tensor) and out.shape == (len(p), new)):
            raise Broken(rule, describe(answer))
        model, prompts = build(t, {}), _t(p)
        for b in range(len(p)):
            if out.values[b] != greedy_generate(model, prompts[b : b + 1], new)[0, 6:].tolist():
                raise AssertionError(rule)


def test_rollback_lengths(probe, rng):
    rule = "rule: new_lengths = lengths - (k - n_accepted)"
    for answer, mask, lengths, n, k in _rolled(probe, rng):
        got = _pair(answer, rule)
        if _ids_of(got[1], len(mask)) != (lengths - (k - n)).tolist():
            raise Broken(rule, describe(answer) if _ids_of(got[1], len(mask)) is None else "")


def test_rollback_bad_input(probe, rng):
    B, k = int(rng.integers(2, 5)), int(rng.integers(2, 5))
    T = k + 1 + int(rng.integers(0, 4))
    ones, full, n_ok = tensor(_t(np.ones((B, T), dtype=int))), tensor(_t([T] * B)), tensor(_t([1] * B))
    bad = [
        ((ones, full, n_ok, k + 0.5), "k"),
        ((ones, full, n_ok, True), "k"),
        ((ones, full, n_ok, 0), "k"),
        ((tensor(_t(np.ones(T, dtype=int))), full, n_ok, k), "mask"),
        ((tensor(_t(np.ones((B, k), dtype=int))), tensor(_t([k] * B)), n_ok, k), "mask"),
        ((ones, tensor(_t([T] * (B + 1))), n_ok, k), "lengths"),
        ((ones, full, tensor(_t([1] * (B - 1))), k), "n_accepted"),
        ((ones, full, tensor(_t([-1] + [1] * (B - 1))), k), "n_accepted"),
        ((ones, full, tensor(_t([k + 1] + [1] * (B - 1))), k), "n_accepted"),
    ]
    order = rng.permutation(len(bad)).tolist()
    answered(probe.many(ROLLBACK, [((ones, full, n_ok, k), {})]))
    value_errors(
        probe.many(ROLLBACK, [(bad[i][0], {}) for i in order]),
        [bad[i][1] for i in order],
        "rule: bad input (k not an integer >= 1, mask too narrow or not 2-D, shapes that differ, n_accepted "
        "outside 0..k) must raise ValueError",
        "rule: bad input: the ValueError message names the argument",
    )


FN = "crossing"
BATCHES = (1, 2, 3, 4, 5, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 256)


def _through_one(a, b, sa, sb):
    """The reference: ln(speedup) linear in ln B between the neighbours a < b where it falls through 1."""
    fa, fb = math.log(sa), math.log(sb)
    return math.exp(math.log(a) + (math.log(b) - math.log(a)) * fa / (fa - fb))


def _batches(rng, n):
    return sorted(int(b) for b in rng.choice(BATCHES, size=n, replace=False))


def test_crossing(probe, rng):
    cases = []  # (points, want) of curves that fall through 1 once
    for _ in range(80):
        bs = _batches(rng, int(rng.integers(2, 8)))
        i = int(rng.integers(0, len(bs) - 1))  # the curve falls through 1 between bs[i] and bs[i + 1]
        s = [float(rng.uniform(1.01, 4.0)) for _ in bs[: i + 1]] + [float(rng.uniform(0.2, 0.999)) for _ in bs[i + 1 :]]
        cases.append((dict(reversed(list(zip(bs, s)))), _through_one(bs[i], bs[i + 1], s[i], s[i + 1])))
    exact = []  # a speedup of exactly 1 at a batch
    for _ in range(3):
        a, b, c = _batches(rng, 3)
        exact.append(({a: float(rng.uniform(1.05, 3.0)), b: 1.0, c: float(rng.uniform(0.2, 0.95))}, float(b)))
    answers = probe.many(FN, [((points,), {}) for points, _ in cases + exact])
    for (points, want), answer in zip(cases, answers):
        got = value_of(answer, "rule: return a plain float")
        if type(got) is not float:
            raise Broken("rule: return a plain float", describe(answer))
        if not abs(got - want) < 1e-9 * want:
            raise AssertionError(
                "rule: ln(speedup) interpolated linearly in ln B between the neighbours where it "
                "falls through 1, batches in increasing order"
            )
    rule = "rule: a speedup of exactly 1 at a batch: the crossover is that batch"
    for (points, want), answer in zip(exact, answers[len(cases) :]):
        got = value_of(answer, rule)
        if type(got) is not float or not abs(got - want) < 1e-12 * want:
            raise Broken(rule, describe(answer) if type(got) is not float else "")


def test_crossing_none_and_bad_input(probe, rng):
    bs = _batches(rng, 5)  # below, above, below, above, below: the first fall counts
    s = [
        float(rng.uniform(0.3, 0.95)),
        float(rng.uniform(1.05, 3.0)),
        float(rng.uniform(0.3, 0.95)),
        float(rng.uniform(1.05, 3.0)),
        float(rng.uniform(0.3, 0.95)),
    ]
    first = dict(zip(bs, s))
    never = []  # curves that never fall through 1
    for n in (3, 2, 1, 1, 4):
        never.append(_batches(rng, n))
    nones = [
        dict(zip(never[0], sorted((float(x) for x in rng.uniform(0.2, 0.99, 3)), reverse=True))),  # below 1
        {never[1][0]: 1.0, never[1][1]: float(rng.uniform(0.2, 0.99))},  # from exactly 1, never above it
        {never[2][0]: float(rng.uniform(1.05, 4.0))},
        {never[3][0]: float(rng.uniform(0.2, 0.99))},  # one batch
        dict(zip(never[4], [float(rng.uniform(1.5, 4.0)), 1.4, 1.2, 1.0 + float(rng.uniform(1e-4, 1e-2))])),
    ]
    b = int(rng.choice(BATCHES[1:]))
    s_hi, s_lo = float(rng.uniform(1.05, 3.0)), float(rng.uniform(0.2, 0.95))
    bads = [
        [s_hi, s_lo],
        {},
        {1.0: s_hi, b: s_lo},
        {True: s_hi, b: s_lo},
        {1: s_hi, b: 0.0},
        {1: s_hi, b: -s_lo},
        {1: nonfinite("nan"), b: s_lo},
        {1: nonfinite("inf"), b: s_lo},
        {1: str(s_hi), b: s_lo},
        {0: s_hi, b: s_lo},
        {-b: s_hi, 1: s_lo},
        (s_hi, s_lo),
    ]
    answers = probe.many(FN, [((points,), {}) for points in [first] + nones + bads])
    got = value_of(
        answers[0],
        "rule: the first neighbours where the curve falls through 1 count (a curve that rises "
        "above 1 again and falls again)",
    )
    want = _through_one(bs[1], bs[2], s[1], s[2])
    if not (type(got) in (int, float) and abs(float(got) - want) < 1e-9 * want):
        raise Broken(
            "rule: the first neighbours where the curve falls through 1 count (a curve that rises above 1 "
            "again and falls again)",
            describe(answers[0]) if type(got) not in (int, float) else "",
        )
    for answer in answers[1 : 1 + len(nones)]:
        if (
            value_of(
                answer,
                "rule: None when the curve never falls through 1 (it stays above 1, never rises above "
                "it, or has one batch)",
            )
            is not None
        ):
            raise Broken(
                "rule: None when the curve never falls through 1 (it stays above 1, never rises above it, "
                "or has one batch)",
                describe(answer),
            )
    value_errors(
        answers[1 + len(nones) :],
        ["points"] * len(bads),
        "rule: bad input (not a non-empty dict, a batch not an integer >= 1, a speedup not a finite number "
        "> 0) must raise ValueError",
        "rule: bad input: the ValueError message names the argument",
    )


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
        a, b, c2, d0 = (
            float(x)
            for x in (rng.uniform(1e-4, 0.05), rng.uniform(1e-6, 1e-3), rng.uniform(0, 1e-7), rng.uniform(0, 0.02))
        )
        tgt, drf = cost(a, d0, b, c2), cost(a / 7, 0.0, 2e-5)  # B and t enter the target's cost apart
        (B, P, N), k, R = _shape(rng), int(rng.choice([1, 2, 4, 8])), int(rng.integers(1, 40))
        cases.append(((B, tgt, drf, R, P, N, k), cost_of(tgt)(B, P) + (N - 1) * cost_of(tgt)(B, 1)))
    for (_, want), answer in zip(cases, probe.many(RUN, [(args, {}) for args, _ in cases])):
        got = _pair_of_times(answer, "rule: return (plain, speculative), two plain floats", strict=True)
        if not abs(got[0] - want) < 1e-12:
            raise AssertionError(
                "rule: plain = target_s(B, P) + (N - 1) target_s(B, 1) (other batches, prompts, lengths and machines)"
            )


def test_run_seconds_speculative(probe, rng):
    cases = []
    for _ in range(60):
        a, b, d0 = (float(x) for x in (rng.uniform(1e-4, 0.05), rng.uniform(1e-6, 1e-3), rng.uniform(0, 0.02)))
        e0, e1 = float(rng.uniform(1e-5, 5e-3)), float(rng.uniform(1e-7, 1e-4))
        tgt = cost(a, d0, b)
        drf = cost(e0, 3e-4, e1, 0.0, 1e-3)  # the 2-token step priced apart
        twice = cost(2 * e0, 2 * 3e-4, 2 * e1, 0.0, 2 * 1e-3)  # the same draft at twice the cost
        (B, P, N), k, R = _shape(rng), int(rng.choice([2, 3, 4, 8])), int(rng.integers(1, 40))
        cases.append((B, P, N, k, R, tgt, drf, twice))
    calls = []
    for B, P, N, k, R, tgt, drf, twice in cases:
        calls += [((B, tgt, drf, R, P, N, k), {}), ((B, tgt, twice, R, P, N, k), {}), ((B, tgt, drf, R, P, N, 1), {})]
    answers = probe.many(RUN, calls)
    rule = (
        "rule: speculative = target_s(B, P - 1) + draft_s(B, P - 1) + R (draft_s(B, 2) + (k - 1) draft_s(B, 1) + "
        "target_s(B, k + 1)) (other B, P, R and k)"
    )
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
    B, R, P, N, k = (
        int(rng.integers(1, 9)),
        int(rng.integers(1, 9)),
        int(rng.integers(2, 64)),
        int(rng.integers(1, 64)),
        int(rng.integers(1, 9)),
    )

    def args(**changed):
        given = {**dict(batch=B, target_s=t_ex, draft_s=d_ex, rounds=R, prompt_tokens=P, new_tokens=N, k=k), **changed}
        return tuple(
            given[name] for name in ("batch", "target_s", "draft_s", "rounds", "prompt_tokens", "new_tokens", "k")
        )

    bad = [
        (args(batch=0), "batch"),
        (args(batch=float(B)), "batch"),
        (args(batch=True), "batch"),
        (args(target_s=float(rng.uniform(0.001, 0.1))), "target_s"),
        (args(draft_s=None), "draft_s"),
        (args(rounds=0), "rounds"),
        (args(rounds=R + 0.5), "rounds"),
        (args(prompt_tokens=1), "prompt_tokens"),
        (args(prompt_tokens=float(P)), "prompt_tokens"),
        (args(new_tokens=0), "new_tokens"),
        (args(k=-int(rng.integers(1, 5))), "k"),
        (args(k=float(k)), "k"),
    ]
    order = rng.permutation(len(bad)).tolist()
    answered(probe.many(RUN, [(args(), {})]))
    answers = probe.many(RUN, [(bad[i][0], {}) for i in order])
    value_errors(
        answers,
        [bad[i][1] for i in order],
        "rule: bad input (batch, rounds, new_tokens or k not an integer >= 1, prompt_tokens < 2, a cost that "
        "is not callable) must raise ValueError",
        "rule: bad input: the ValueError message names the argument",
    )


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
    trace = {
        "arrival": [float(x) for x in arr],
        "first_token": ndarray(fst),
        "finish": tuple(float(x) for x in fin),
        "output_tokens": ndarray(out),
    }
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
        if not (
            abs(got["ttft_p50"] - np.percentile(ttft, 50)) < 1e-9
            and abs(got["ttft_p99"] - np.percentile(ttft, 99)) < 1e-9
        ):
            raise AssertionError("rule: TTFT = first token - arrival, percentiles with numpy's default (linear) method")
        if not (
            abs(got["tpot_p50"] - np.percentile(tpot, 50)) < 1e-12
            and abs(got["tpot_p99"] - np.percentile(tpot, 99)) < 1e-12
        ):
            raise AssertionError(
                "rule: TPOT = (finish - first token) / (output tokens - 1), percentiles with numpy's "
                "default (linear) method"
            )


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
    trace = {
        "arrival": ndarray(arr),
        "first_token": ndarray(fst),
        "finish": ndarray(fin),
        "output_tokens": ndarray(out),
    }
    answer = probe(METRICS, trace, ttft_slo=s1, tpot_slo=s2)
    want = ((ttft <= s1) & (tpot <= s2)).sum() / (fin.max() - arr.min())
    if not abs(_metric(answer, "goodput", exact) - want) < 1e-12 * max(1.0, want):
        raise AssertionError(exact)


def test_serving_metrics_bad_input(probe, rng):
    a, f = float(rng.uniform(0, 5)), float(rng.uniform(5, 10))
    e = f + float(rng.uniform(0.5, 5))
    n = int(rng.integers(2, 50))
    example = {
        "arrival": [a, a + 1.0],
        "first_token": [f, f + 1.5],
        "finish": [e, e + 1.0],
        "output_tokens": [n, n + 3],
    }
    bad = [
        (({"arrival": [a], "first_token": [f], "finish": [e]},), "trace"),
        (([a, a + 1.0],), "trace"),
        (({"arrival": [], "first_token": [], "finish": [], "output_tokens": []},), "trace"),
        (({"arrival": [a, a + 1.0], "first_token": [f], "finish": [e, e + 1.0], "output_tokens": [n, n]},), "trace"),
        (({"arrival": [f], "first_token": [a], "finish": [e], "output_tokens": [n]},), "trace"),
        (({"arrival": [a], "first_token": [e], "finish": [f], "output_tokens": [n]},), "trace"),
        (({"arrival": [a], "first_token": [f], "finish": [e], "output_tokens": [n + 0.5]},), "trace"),
        (({"arrival": [a], "first_token": [f], "finish": [e], "output_tokens": [1]},), "trace"),
        ((example, 0.0, 0.05), "ttft_slo"),
        ((example, 2.0, -float(rng.uniform(0, 1))), "tpot_slo"),
    ]
    order = rng.permutation(len(bad)).tolist()
    answered(probe.many(METRICS, [((example,), {})]))
    answers = probe.many(METRICS, [(bad[i][0], {}) for i in order])
    value_errors(
        answers,
        [bad[i][1] for i in order],
        "rule: bad input (a malformed or empty trace, times out of order, output_tokens < 2, an SLO bound <= "
        "0) must raise ValueError",
        "rule: bad input: the ValueError message names the argument",
    )


# ------------------------------------------------------------------------------------ E: gate_k
GATE = "gate_k"
L8, L1, L70 = (call("model_spec", name) for name in ("Llama-3.1-8B", "Llama-3.2-1B", "Llama-3.1-70B"))
H100, A100, H200 = named("h100"), item(named("hardware"), "A100 80GB SXM"), item(named("hardware"), "H200 SXM")


def _made_up(rng):
    """A model no table holds: the shape of a 20B, its sizes drawn."""
    w = float(rng.uniform(3.0e10, 5.0e10))
    return {
        "name": "made-up 20B",
        "weight_bytes": w,
        "layer_bytes": 0.9 * w,
        "lm_head_bytes": float(rng.uniform(1e9, 3e9)),
        "kv_bytes_per_token": float(rng.uniform(1.0e5, 2.5e5)),
        "attention_flops_per_cached_token": float(rng.uniform(3e5, 9e5)),
        "layers": 48,
        "hidden_size": 6144,
    }


def _setups(rng):
    """(target, draft, gpu) recipes: one GPU, tensor-parallel groups, a draft on one GPU, no draft, a made-up target."""
    return [
        (L8, L1, H100),
        (L70, L8, call("gpus", H100, 8)),
        (L8, None, A100),
        (L70, L1, call("gpus", H200, 4)),
        (L70, L1, call("gpus", H100, 4, draft_n=1)),
        (_made_up(rng), L1, call("gpus", A100, 2)),
    ]


def _gated(probe, rng):
    """[(answer, fits, want)] for drawn states on every setup: short, medium and long contexts (the gate on, off, or
    out of memory); want is the judge's best_k_for_batch at (B, mean context) from the course's own copy."""
    names = _given()
    cases = []
    for tgt, drf, g in _setups(rng):
        own = [build(x, names) if x is not None else None for x in (tgt, drf, g)]
        for longest in (64, 512, 6000):
            for _ in range(5):
                B = int(rng.integers(1, 600))
                ctx = rng.integers(0, longest, B)
                a, km = float(rng.uniform(0.3, 0.95)), int(rng.integers(1, 9))
                mean = float(ctx.mean())
                fits = names["fits_in_memory"](own[0], own[1], own[2], B, mean)
                want = names["best_k_for_batch"](B, mean, a, *own, km) if fits else 0
                cases.append(((ctx.tolist(), a, tgt, drf, g), {"k_max": km}, fits, want))
    answers = probe.many(GATE, [(args, kwargs) for args, kwargs, _, _ in cases])
    return [(answer, fits, want) for answer, (_, _, fits, want) in zip(answers, cases)]


def test_gate_k_best_k(probe, rng):
    plain = "rule: return a plain int"
    rule = (
        "rule: other hardware (tensor parallelism, a draft on one GPU), models, batches and contexts: "
        "best_k_for_batch at (B, mean context)"
    )
    for answer, fits, want in _gated(probe, rng):
        if fits:
            got = value_of(answer, rule)
            if type(got) is not int:
                raise Broken(plain, describe(answer))
            if got != want:
                raise AssertionError(rule)
    names = _given()
    own = {name: build(x, names) for name, x in (("l8", L8), ("l1", L1), ("h100", H100))}
    lo, hi = int(rng.integers(50, 300)), int(rng.integers(3000, 4500))
    B = int(rng.integers(100, 257))  # 256 x 1,274 tokens fits on one H100 with the draft
    extra = [
        ((ndarray(np.array([lo, hi])), 0.7, L8, L1, H100), 2, (lo + hi) / 2, 0.7),
        (([1274] * B, 0.8, L8, L1, H100), B, 1274.0, 0.8),
    ]
    for (args, B, mean, a), answer in zip(extra, probe.many(GATE, [(args, {}) for args, *_ in extra])):
        want = names["best_k_for_batch"](B, mean, a, own["l8"], own["l1"], own["h100"])
        if value_of(answer, rule) != want or type(answer[1]) is not int:
            raise Broken(rule, describe(answer) if type(answer[1]) is not int else "")
    terms_rule = (
        "rule: the round's own terms and the step's (first_draft_tokens, c_round, sampler_passes, c_step) "
        "passed on to best_k_for_batch"
    )
    g = call(
        "attainable",
        H100,
        float(rng.uniform(0.8, 0.9)),
        float(rng.uniform(0.65, 0.75)),
        float(rng.uniform(1.5e-3, 2.5e-3)),
    )
    own_g, first = build(g, names), named("vllm_v1_first_pass")
    c_round, c_step = float(rng.uniform(2e-3, 4e-3)), float(rng.uniform(1e-3, 2e-3))
    terms = [
        (first, 0.0, 0),
        (1, c_round, 0),
        (1, 0.0, 3),
        (first, c_round / 3, 3),
        (1, 0.0, 0, c_step),
        (first, 0.0, 0, c_step),
    ]

    def best(B, mean, tt):
        return names["best_k_for_batch"](B, mean, 0.8, own["l8"], own["l1"], own_g, 8, *(build(x, names) for x in tt))

    calls = [
        ((ctx, 0.8, L8, L1, g, 8) + tt, {})
        for ctx in (
            [0] * 4,
            rng.integers(200, 600, 3).tolist(),
            [int(rng.integers(800, 1275))] * 200,
            list(range(0, 2000, 10)),
        )
        for tt in terms
    ]
    # for each set of terms, a state where they change the answer (over the bare round; c_step over the round's)
    pool = [
        (int(B), int(c))
        for B, c in zip(rng.integers(1, 300, 60), rng.integers(0, 4000, 60))
        if names["fits_in_memory"](own["l8"], own["l1"], own_g, int(B), float(c))
    ]
    for tt in terms:
        matters = [
            (B, c) for B, c in pool if best(B, float(c), tt) != best(B, float(c), tt[:3] if len(tt) == 4 else ())
        ]
        if matters:
            B, c = matters[int(rng.integers(len(matters)))]
            calls.append((([c] * B, 0.8, L8, L1, g, 8) + tt, {}))
    for ((ctx, *rest), _), answer in zip(calls, probe.many(GATE, calls)):
        if value_of(answer, terms_rule) != best(len(ctx), float(np.mean(ctx)), tuple(rest[5:])):
            raise Broken(terms_rule, describe(answer) if answer[0] != "value" else "")
    off = probe(GATE, [40000] * int(rng.integers(150, 300)), 0.9, L8, L1, H100)  # does not fit: test_gate_k's value
    if off[0] == "value" and type(off[1]) is not int:  # a raise is test_gate_k's to report
        raise Broken(plain, describe(off))


def test_gate_k(probe, rng):
    rule = "rule: 0 when the state does not fit in memory with the draft"
    on = "rule: only then, or where speculation does not pay: a state that fits and pays gets a k of 1 or more"
    for answer, fits, want in _gated(probe, rng):
        if not fits and value_of(answer, rule) != 0:
            raise Broken(rule, describe(answer))
        if fits and want >= 1 and not number_of(answer, on) >= 1:  # its value is test_gate_k_best_k's rule
            raise Broken(on, describe(answer))
    names = _given()
    l8, h100 = build(L8, names), build(H100, names)
    B = int(rng.integers(4, 16))
    only_without = [
        c
        for c in range(1000, 60000, 500)
        if names["fits_in_memory"](l8, None, h100, B, float(c))
        and not names["fits_in_memory"](l8, l8, h100, B, float(c))
    ]
    c = int(rng.choice(only_without))
    for answer in probe.many(
        GATE, [(([40000] * int(rng.integers(150, 300)), 0.9, L8, L1, H100), {}), (([c] * B, 0.8, L8, L8, H100), {})]
    ):
        if value_of(answer, rule) != 0:
            raise Broken(rule, describe(answer))
    kw = {"alpha": 0.8, "target": L8, "draft": L1, "gpu": H100}
    n = int(rng.integers(1, 500))
    bad = [
        (([],), {}, "contexts"),
        (([[n, n + 1], [n + 2, n + 3]],), {}, "contexts"),
        (([n, -1 - n],), {}, "contexts"),
        (([n],), {"alpha": float(rng.uniform(1.01, 2.0))}, "alpha"),
        (([n],), {"k_max": 0}, "k_max"),
        (([n],), {"k_max": 2.5}, "k_max"),
        (([40000] * 200,), {"alpha": -float(rng.uniform(0.01, 1))}, "alpha"),
    ]
    order = rng.permutation(len(bad)).tolist()
    value_errors(
        probe.many(GATE, [(bad[i][0], {**kw, **bad[i][1]}) for i in order]),
        [bad[i][2] for i in order],
        "rule: bad input (contexts empty or negative, alpha outside [0, 1], k_max not an integer >= 1) must "
        "raise ValueError",
        "rule: bad input: the ValueError message names the argument",
    )


JUDGES = {name: fn for name, fn in globals().items() if name.startswith("test_") and callable(fn)}
