"""Notebook 11's hidden tests as judges: every test cell (`read_spec_counters`, `acceptance_from_counters`,
`trace_from_stream` and `vllm_gate_config`).

The rules and their wording are the notebook's hidden tests' (docs/contract.md lists them); the inputs are drawn
from the grader's generator instead of a seed written into the test cell.
"""

from __future__ import annotations

from autograde.judge import answered, value_errors, value_of

FN = "acceptance_from_counters"
KEYS = {"alpha", "tau", "acceptance_rate", "position_rates"}


def _plain_float(x):
    return type(x) is float


def _reference(c):
    d, t, a, per = c["drafts"], c["draft_tokens"], c["accepted_tokens"], c["accepted_per_position"]
    return {
        "alpha": a / (a + d - per[-1]),
        "tau": 1 + a / d,
        "acceptance_rate": a / t,
        "position_rates": [p / d for p in per],
    }


def _simulated(rng, alpha, k):
    n = int(rng.integers(15000, 25001))  # the notebook's hidden block used 20000: a drawn count
    accepted = rng.geometric(1 - alpha, n) - 1
    accepted = [min(int(x), k) for x in accepted]
    per = [sum(x > i for x in accepted) for i in range(k)]
    return {"drafts": n, "draft_tokens": n * k, "accepted_tokens": sum(accepted), "accepted_per_position": per}


def test_acceptance_from_counters(probe, rng):
    cases = []
    for alpha_true in sorted(float(a) for a in rng.uniform(0.05, 0.95, 5)):
        k = int(rng.integers(1, 9))
        cases.append((alpha_true, k, _simulated(rng, alpha_true, k)))
    for (alpha_true, k, c), answer in zip(cases, probe.many(FN, [((c,), {}) for _, _, c in cases])):
        got = value_of(answer, "rule: alpha = A / (A + D - a_{k-1}), the maximum-likelihood estimate of notebook 05")
        if not (
            isinstance(got, dict)
            and set(got) == KEYS
            and all(_plain_float(got[key]) for key in KEYS - {"position_rates"})
            and isinstance(got["position_rates"], list)
            and all(_plain_float(r) for r in got["position_rates"])
        ):
            raise AssertionError("rule: plain floats and a list of plain floats")
        want = _reference(c)
        if not abs(got["alpha"] - want["alpha"]) <= 1e-12:
            raise AssertionError("rule: alpha = A / (A + D - a_{k-1}), the maximum-likelihood estimate of notebook 05")
        if not abs(got["alpha"] - alpha_true) <= 0.02:
            raise AssertionError("rule: alpha-hat recovers the alpha of simulated rounds")
        if not abs(got["tau"] - want["tau"]) <= 1e-12:
            raise AssertionError("rule: tau = 1 + A / D")
        if not abs(got["acceptance_rate"] - want["acceptance_rate"]) <= 1e-12:
            raise AssertionError("rule: acceptance rate = A / draft tokens")
        if len(got["position_rates"]) != k or any(
            not abs(r - w) <= 1e-12 for r, w in zip(got["position_rates"], want["position_rates"])
        ):
            raise AssertionError("rule: position rates a_i / D")


def test_acceptance_from_counters_edges(probe, rng):
    cases = []
    for _ in range(30):
        k = int(rng.integers(1, 7))
        per = sorted((int(x) for x in rng.integers(0, 60, k)), reverse=True)
        d = per[0] + int(rng.integers(1, 30))
        t = int(rng.integers(d, d * k + 1))
        cases.append({"drafts": d, "draft_tokens": t, "accepted_tokens": sum(per), "accepted_per_position": per})
    rule = (
        "rule: rounds that drafted fewer than k (draft tokens < D k) count as rejections; the rate divides by "
        "the draft tokens"
    )
    for c, answer in zip(cases, probe.many(FN, [((c,), {}) for c in cases])):
        got, want = value_of(answer, rule), _reference(c)
        try:
            ok = (
                abs(float(got["alpha"]) - want["alpha"]) < 1e-12
                and abs(float(got["acceptance_rate"]) - want["acceptance_rate"]) < 1e-12
            )
        except (TypeError, KeyError, ValueError):
            ok = False
        if not ok:
            raise AssertionError(rule)


def test_acceptance_from_counters_bad_input(probe, rng):
    d = int(rng.integers(3, 9))
    per = [d - 1, d - 2, 0]
    ok = {"drafts": d, "draft_tokens": 3 * d, "accepted_tokens": sum(per), "accepted_per_position": per}
    no_tokens = {key: v for key, v in ok.items() if key != "draft_tokens"}
    bads = [
        None,
        [d, 3 * d, sum(per)],
        no_tokens,
        dict(ok, accepted_per_position=[]),
        dict(ok, drafts=per[0] - 1),
        dict(ok, draft_tokens=d - 1),
        dict(ok, draft_tokens=3 * d + 1),
        dict(ok, drafts=-d),
        dict(ok, drafts=d + 0.5),
        dict(ok, accepted_per_position=[per[0], float(per[1]), 0]),
        dict(ok, drafts=True),
        dict(ok, accepted_tokens=sum(per) + 1),
        dict(ok, accepted_per_position=[per[1], per[0], 0]),
    ]
    answered(probe.many(FN, [((ok,), {})]))
    value_errors(
        probe.many(FN, [((bad,), {}) for bad in bads]),
        ["counters"] * len(bads),
        "rule: bad input (not the four keys, counts that are not integers >= 0, D < 1, k < 1, increasing "
        "positions or a_0 > D, A not their sum, draft tokens outside [D, D k]) must raise ValueError",
        "rule: bad input: the ValueError message names counters",
    )


PARSER = "read_spec_counters"
COUNTERS = (("drafts", "num_drafts"), ("draft_tokens", "num_draft_tokens"), ("accepted_tokens", "num_accepted_tokens"))


def _dump(rng, trial):
    """A Prometheus text dump of speculative counters, shuffled, and the counts it holds."""
    k = int(rng.integers(1, 9))
    prefix = ("vllm:", "llamacpp:", "")[trial % 3]
    suffix = "_total" if trial % 4 else ""
    want = {"drafts": 0, "draft_tokens": 0, "accepted_tokens": 0, "accepted_per_position": [0] * k}
    lines = ["# HELP something else", "process_cpu_seconds_total 12.5", ""]
    for e in range(int(rng.integers(1, 4))):
        per = sorted((int(x) for x in rng.integers(0, 500, k)), reverse=True)
        d = per[0] + int(rng.integers(0, 50))
        labels = f'engine="{e}",model_name="/models/t, \\"x\\""'
        vals = {"drafts": d, "draft_tokens": d * k, "accepted_tokens": sum(per)}
        for key, name in COUNTERS:
            fmt = ("{:d}", "{:.1f}", "{:.6e}")[int(rng.integers(0, 3))]
            lines.append(
                f"{prefix}spec_decode_{name}{suffix}{{{labels}}} "
                + fmt.format(vals[key] if fmt == "{:d}" else float(vals[key]))
            )
            lines.append(f"{prefix}spec_decode_{name}_created{{{labels}}} 1.7e+09")
            want[key] += vals[key]
        for i in rng.permutation(k).tolist():
            lines.append(
                f"{prefix}spec_decode_num_accepted_tokens_per_pos{suffix}"
                f'{{{labels},position="{i}"}} {per[i]}.0 1700000000000'
            )
            want["accepted_per_position"][i] += per[i]
    return "\n".join(lines[j] for j in rng.permutation(len(lines)).tolist()), want


def test_read_spec_counters(probe, rng):
    dumps = [_dump(rng, trial) for trial in range(40)]
    for (text, want), answer in zip(dumps, probe.many(PARSER, [((text,), {}) for text, _ in dumps])):
        got = value_of(
            answer, "rule: a dict of plain ints: drafts, draft_tokens, accepted_tokens, accepted_per_position"
        )
        if not (
            isinstance(got, dict)
            and set(got) == set(want)
            and all(type(got[key]) is int for key, _ in COUNTERS)
            and isinstance(got["accepted_per_position"], list)
            and all(type(x) is int for x in got["accepted_per_position"])
        ):
            raise AssertionError(
                "rule: a dict of plain ints: drafts, draft_tokens, accepted_tokens, accepted_per_position"
            )
        if any(got[key] != want[key] for key, _ in COUNTERS):
            raise AssertionError("rule: the three totals, prefix and _total ignored, series added up")
        if got["accepted_per_position"] != want["accepted_per_position"]:
            raise AssertionError(
                "rule: accepted_per_position: positions 0 .. k - 1 in order, series of one position added up"
            )
    prefix = ("llamacpp:", "vllm:", "")[int(rng.integers(0, 3))]
    none_yet = "".join(f"{prefix}spec_decode_{name}_total 0\n" for _, name in COUNTERS)
    got = value_of(probe(PARSER, none_yet), "rule: no per-position series gives an empty list")
    if got != {"drafts": 0, "draft_tokens": 0, "accepted_tokens": 0, "accepted_per_position": []}:
        raise AssertionError("rule: no per-position series gives an empty list")


def test_read_spec_counters_bad_input(probe, rng):
    p = ("a:", "vllm:", "")[int(rng.integers(0, 3))]
    d = int(rng.integers(2, 9))
    good = (
        f"{p}spec_decode_num_drafts_total {d}\n{p}spec_decode_num_draft_tokens_total {3 * d}\n"
        f"{p}spec_decode_num_accepted_tokens_total {d + 1}\n"
    )
    drafts = f"drafts_total {d}"
    bads = [
        good.encode(),
        int(rng.integers(1, 100)),
        good.replace(drafts, f"drafts_total {d}.5"),
        good.replace(drafts, f"drafts_total -{d}"),
        good.replace(drafts, "drafts_total two"),
        good.replace(f"{p}spec_decode_num_accepted_tokens_total {d + 1}\n", ""),
        good + f'{p}spec_decode_num_accepted_tokens_per_pos_total{{position="0"}} 2\n'
        f'{p}spec_decode_num_accepted_tokens_per_pos_total{{position="2"}} 1\n',
        good + f'{p}spec_decode_num_accepted_tokens_per_pos_total{{position="1"}} 2\n',
        good + "{broken 1\n",
    ]
    answered(probe.many(PARSER, [((good,), {})]))
    value_errors(
        probe.many(PARSER, [((bad,), {}) for bad in bads]),
        ["text"] * len(bads),
        "rule: bad input (not a str, a line that is not a metric, a count that is not a whole number >= 0, a "
        "total missing, a gap in the positions) must raise ValueError",
        "rule: bad input: the ValueError message names text",
    )


GATE = "vllm_gate_config"


def _plain_ints(x):
    return type(x) is int or (type(x) is list and all(_plain_ints(v) for v in x))


def test_vllm_gate_config(probe, rng):
    cases = []
    for _ in range(200):
        m = int(rng.integers(1, 300))
        batches = sorted({1} | {int(b) for b in rng.integers(1, 400, int(rng.integers(0, 8)))})
        dec = {b: int(rng.choice([0, 0, 1, 2, 3, 4, 8])) for b in batches}
        order = [batches[j] for j in rng.permutation(len(batches))]
        cases.append((m, batches, dec, {b: dec[b] for b in order}))
    for (m, batches, dec, sent), answer in zip(cases, probe.many(GATE, [((sent, m), {}) for m, _, _, sent in cases])):
        got = value_of(answer, "rule: a dict of the two keys, plain ints")
        dense = {B: dec[max(b for b in batches if b <= B)] for B in range(1, m + 1)}
        if max(dense.values()) == 0:
            if got is not None:
                raise AssertionError("rule: None when every k that applies is 0")
            continue
        if not (
            isinstance(got, dict)
            and set(got) == {"num_speculative_tokens", "num_speculative_tokens_per_batch_size"}
            and type(got["num_speculative_tokens"]) is int
            and _plain_ints(got["num_speculative_tokens_per_batch_size"])
        ):
            raise AssertionError("rule: a dict of the two keys, plain ints")
        ranges = got["num_speculative_tokens_per_batch_size"]
        if not all(isinstance(r, list) and len(r) == 3 for r in ranges):
            raise AssertionError("rule: ranges are [start, end, k] lists")
        if not (
            ranges
            and ranges[0][0] == 1
            and ranges[-1][1] == m
            and ranges[-1][0] <= ranges[-1][1]
            and all(a[1] + 1 == b[0] and a[0] <= a[1] for a, b in zip(ranges, ranges[1:]))
        ):
            raise AssertionError("rule: ranges cover 1 .. max_num_seqs, sorted, without gaps or overlaps")
        if not all(dense[B] == k for s, e, k in ranges for B in range(s, e + 1)):
            raise AssertionError("rule: a batch takes the decision of the largest decided batch at or below it")
        if any(a[2] == b[2] for a, b in zip(ranges, ranges[1:])):
            raise AssertionError("rule: neighbouring ranges with the same k are merged")
        if got["num_speculative_tokens"] != max(dense.values()):
            raise AssertionError("rule: num_speculative_tokens is the largest k")


def test_vllm_gate_config_bad_input(probe, rng):
    m = int(rng.integers(2, 64))
    k = int(rng.integers(1, 9))
    cases = (
        ({}, m, "decision"),
        ([(1, k)], m, "decision"),
        ({1: k, 0: 2}, m, "decision"),
        ({1: k, 2.0: 2}, m, "decision"),
        ({1: k + 0.5}, m, "decision"),
        ({1: True}, m, "decision"),
        ({m: k}, m + 1, "decision"),
        ({1: -k}, m, "decision"),
        ({1: k}, float(m), "max_num_seqs"),
        ({1: k}, -m, "max_num_seqs"),
        ({1: k}, 0, "max_num_seqs"),
        ({1: k}, True, "max_num_seqs"),
        (None, m, "decision"),
    )
    answered(probe.many(GATE, [(({1: k}, m), {})]))
    value_errors(
        probe.many(GATE, [((decision, max_num_seqs), {}) for decision, max_num_seqs, _ in cases]),
        [name for _, _, name in cases],
        "rule: bad input (decision empty, not a dict, a batch or k out of range, no batch 1; max_num_seqs not "
        "an integer >= 1) must raise ValueError",
        "rule: bad input: the ValueError message names the argument",
    )


TRACE = "trace_from_stream"
TRACE_KEYS = ("arrival", "first_token", "finish", "output_tokens")


def _streams(rng, n_req):
    """Requests as the load client records them (empty chunks before, between and after; chunks carrying several
    tokens; equal times; the final chunk a tuple; an extra key), and the trace they give."""
    reqs, want = [], {key: [] for key in TRACE_KEYS}
    for _ in range(n_req):
        sent = float(rng.uniform(0, 20))
        t, chunks, first, fin, total = sent, [], None, None, 0
        t += float(rng.exponential(0.1)) + 1e-3
        for _ in range(int(rng.integers(0, 3))):
            t += float(rng.exponential(0.05))
            chunks.append([t, 0])
        for _ in range(int(rng.integers(2, 30))):
            t += float(rng.choice([0.0, rng.exponential(0.03)]))
            n = int(rng.integers(1, 5)) if rng.random() < 0.3 else 1
            chunks.append([t, n])
            first = t if first is None else first
            fin, total = t, total + n
            if rng.random() < 0.1:
                t += 0.01
                chunks.append([t, 0])
        t += float(rng.exponential(0.02))
        chunks.append((t, 0))
        reqs.append({"sent": sent, "chunks": chunks, "draft_n": int(rng.integers(1, 9))})
        for key, v in zip(TRACE_KEYS, (sent, first, fin, total)):
            want[key].append(v)
    return reqs, want


def _metrics(trace):
    """Notebook 10's serving metrics (the judge's own reference), on the default SLOs."""
    import numpy as np

    arrival, first, finish, out = (np.asarray(trace[key], dtype=float) for key in TRACE_KEYS)
    ttft, tpot = first - arrival, (finish - first) / (out - 1)
    span = finish.max() - arrival.min()
    good = (ttft <= 2.0) & (tpot <= 0.05)
    return [
        float(np.percentile(ttft, 50)),
        float(np.percentile(ttft, 99)),
        float(np.percentile(tpot, 50)),
        float(np.percentile(tpot, 99)),
        float(out.sum() / span),
        float(good.sum() / span),
    ]


def _traces(probe, rng, strict=True):
    """Traces of drawn streams (1, 2, a few and many requests, ten draws each), asked in one probe: (got, want).
    strict: plain floats and plain ints, test_trace_from_stream's rule (the token test asks only for numbers, so a
    slip in the types costs that cell alone)."""
    drawn = [
        _streams(rng, n_req) for n_req in (1, 2, int(rng.integers(3, 12)), int(rng.integers(20, 60))) for _ in range(10)
    ]
    for (reqs, want), answer in zip(drawn, probe.many(TRACE, [((reqs,), {}) for reqs, _ in drawn])):
        yield _trace(answer, reqs, want, strict)


def _number(x):
    return type(x) in (int, float)


def _trace(answer, reqs, want, strict):
    n_req = len(reqs)
    rule = (
        "rule: lists of plain floats (times) and plain ints (tokens)"
        if strict
        else "rule: output_tokens = the tokens of all chunks, summed (a chunk may carry several)"
    )
    got = value_of(answer, rule)
    if not (
        isinstance(got, dict)
        and set(got) == set(TRACE_KEYS)
        and all(type(got[key]) is list and len(got[key]) == n_req for key in TRACE_KEYS)
        and all((type(x) is float) if strict else _number(x) for key in TRACE_KEYS[:3] for x in got[key])
        and all((type(x) is int) if strict else _number(x) for x in got["output_tokens"])
    ):
        raise AssertionError(rule)
    return got, want


def test_trace_from_stream(probe, rng):
    for got, want in _traces(probe, rng):
        if got["arrival"] != want["arrival"]:
            raise AssertionError("rule: arrival = the time the request was sent")
        if got["first_token"] != want["first_token"]:
            raise AssertionError(
                "rule: first_token = the first chunk that carries a token (empty chunks before it do not count)"
            )
        if got["finish"] != want["finish"]:
            raise AssertionError(
                "rule: finish = the last chunk that carries a token (empty chunks after it do not count)"
            )


def test_trace_from_stream_tokens(probe, rng):
    for got, want in _traces(probe, rng, strict=False):
        if got["output_tokens"] != want["output_tokens"]:
            raise AssertionError("rule: output_tokens = the tokens of all chunks, summed (a chunk may carry several)")
        try:
            ok = all(abs(m - w) < 1e-9 for m, w in zip(_metrics(got), _metrics(want)))
        except (ValueError, ZeroDivisionError, FloatingPointError):
            ok = False
        if not ok:
            raise AssertionError("rule: notebook 10's metrics of the trace")


def test_trace_from_stream_bad_input(probe, rng):
    s = float(rng.uniform(0, 5))
    a, b = s + float(rng.uniform(0.01, 1)), s + float(rng.uniform(1.01, 2))
    good = {"sent": s, "chunks": [[a, 1], [b, 1]]}
    bads = [
        None,
        {"sent": s, "chunks": []},
        [{"chunks": [[a, 1], [b, 1]]}],
        [{"sent": s}],
        [[s, [[a, 1], [b, 1]]]],
        [{"sent": s, "chunks": [[a, 1, 2], [b, 1]]}],
        [{"sent": s, "chunks": [[a, 1.5], [b, 1]]}],
        [{"sent": s, "chunks": [[a, -1], [b, 3]]}],
        [{"sent": s, "chunks": [[b, 1], [a, 1]]}],
        [{"sent": b, "chunks": [[a, 1], [b + 1, 1]]}],
        [{"sent": s, "chunks": [[a, 1], [b, 0]]}],
        [{"sent": s, "chunks": [[a, True], [b, 1]]}],
        [good, {"sent": s, "chunks": [[a, 0], [b, 0]]}],
        [],
    ]
    answered(probe.many(TRACE, [(([good],), {})]))
    order = rng.permutation(len(bads)).tolist()
    value_errors(
        probe.many(TRACE, [((bads[j],), {}) for j in order]),
        ["requests"] * len(bads),
        "rule: bad input (not a non-empty list of requests, a malformed chunk, a token count that is not an "
        "integer >= 0, a chunk time going back, fewer than 2 tokens) must raise ValueError",
        "rule: bad input: the ValueError message names requests",
    )


JUDGES = {
    "test_read_spec_counters": test_read_spec_counters,
    "test_read_spec_counters_bad_input": test_read_spec_counters_bad_input,
    "test_acceptance_from_counters": test_acceptance_from_counters,
    "test_acceptance_from_counters_edges": test_acceptance_from_counters_edges,
    "test_acceptance_from_counters_bad_input": test_acceptance_from_counters_bad_input,
    "test_vllm_gate_config": test_vllm_gate_config,
    "test_vllm_gate_config_bad_input": test_vllm_gate_config_bad_input,
    "test_trace_from_stream": test_trace_from_stream,
    "test_trace_from_stream_bad_input": test_trace_from_stream_bad_input,
    "test_trace_from_stream_tokens": test_trace_from_stream_tokens,
}
