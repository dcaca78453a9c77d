"""Notebook 06's hidden tests as judges: every test cell (`roofline_step_seconds`, `spec_tokens_per_second`,
`memory_needed_bytes` and `max_concurrent_sequences`).

The rules and their wording are the notebook's hidden tests' (docs/contract.md lists them); the machines are the
course's table (a row by name) and made-up ones built in the kernel as `Hardware(...)`, the models the course's
configs (sent as plain dicts) and made-up ones, the rest drawn from the grader's generator; the references are the
judge's own formulas on the same numbers.
"""

from __future__ import annotations

import math

from autograde.judge import Broken, Tensor, call, describe, item, named, number_of, value_errors, value_of
from autograde.judges import hardware, model_configs

PAIRS = [
    ("Llama-3.1-70B", "Llama-3.1-8B"),
    ("Llama-3.1-70B", "Llama-3.2-1B"),
    ("Llama-3.1-70B", "Llama-3.2-3B"),
    ("Llama-3.1-8B", "Llama-3.2-1B"),
    ("Llama-3.1-8B", "Llama-3.2-3B"),
    ("Llama-3.2-3B", "Llama-3.2-1B"),
]


def _configs():
    return model_configs()


def _machines(rng, fast=True):
    """[(recipe, bandwidth, flops, memory)]: the table's rows by name, and made-up machines built in the kernel."""
    out = [
        (item(named("hardware"), name), hw.bandwidth_bytes_per_s, hw.flops_per_s, hw.memory_bytes)
        for name, hw in hardware().items()
    ]
    made = [("made-up, little compute", 40e9, float(rng.uniform(1.5e12, 2.5e12)), float(rng.uniform(6e12, 1e13)))]
    if fast:
        made.append(("made-up, fast", 192e9, float(rng.uniform(6e12, 1e13)), float(rng.uniform(1.5e15, 3e15))))
    out += [(call("Hardware", name, mem, bw, fl, False, "test"), bw, fl, mem) for name, mem, bw, fl in made]
    return out


def _params(c):
    h, hd = c["hidden_size"], c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"]
    layer = (
        2 * h * c["num_attention_heads"] * hd
        + 2 * h * c["num_key_value_heads"] * hd
        + 3 * h * c["intermediate_size"]
        + 2 * h
    )
    return c["vocab_size"] * h * (1 if c["tie_word_embeddings"] else 2) + c["num_hidden_layers"] * layer + h


def _kv(c):
    hd = c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"]
    return 2 * c["num_hidden_layers"] * c["num_key_value_heads"] * hd * 2


def _step(c, bw, fl, n, t, b=2):
    p = _params(c)
    return max(p * b / (n * bw), 2 * p * t / (n * fl))


def _index(answer, rule):
    """An int that came back (a plain int or an integer NumPy or torch scalar, as operator.index reads it)."""
    got = value_of(answer, rule)
    if type(got) is int:
        return got
    if isinstance(got, Tensor) and got.shape == () and "int" in got.dtype and type(got.values) is int:
        return got.values
    raise Broken(rule, describe(answer))


# ------------------------------------------------------------------------------------ A: roofline_step_seconds
STEP = "roofline_step_seconds"


def test_roofline_step_seconds(probe, rng):
    cfg, machines = _configs(), _machines(rng)
    cases = []
    for _ in range(80):
        c = cfg[str(rng.choice(list(cfg)))]
        g = machines[int(rng.integers(len(machines)))]
        n, t, b = (
            int(rng.choice([1, 2, 4, 8, 16])),
            int(rng.choice([1, 2, 5, 9, 64, 300, 2000, 50000])),
            float(rng.choice([0.5, 1, 2, 4])),
        )
        cases.append((c, g, n, t, b))
    answers = probe.many(
        STEP, [((c, g[0]), {"n_gpus": n, "tokens": t, "bytes_per_param": b}) for c, g, n, t, b in cases]
    )
    rule = (
        "rule: other hardware: max(weight_bytes(cfg, bytes_per_param) / (n_gpus x bandwidth), 2 x params x tokens "
        "/ (n_gpus x FLOP/s))"
    )
    for (c, g, n, t, b), answer in zip(cases, answers):
        want = _step(c, g[1], g[2], n, t, b)
        if not abs(number_of(answer, rule) - want) <= 1e-9 * want:
            raise AssertionError(rule)


def test_roofline_step_seconds_type(probe, rng):
    cfg, machines = _configs(), _machines(rng, fast=False)
    shapes = [(1, 1, 2), (8, 5, 1), (2, 50000, 0.5), (4, 300, 4), (16, 2000, 1)]
    calls = [
        ((c, g[0]), {"n_gpus": n, "tokens": t, "bytes_per_param": b})
        for c in cfg.values()
        for g in machines
        for n, t, b in shapes
    ]
    rule = "rule: the larger of the two times, a plain Python float"
    for answer in probe.many(STEP, calls):
        if type(value_of(answer, rule)) is not float:
            raise Broken(rule, describe(answer))


def test_roofline_step_seconds_models(probe, rng):
    machines = _machines(rng)
    cases = []
    for _ in range(20):  # models the learner never saw
        heads = int(rng.choice([8, 16, 32]))
        c = {
            "hidden_size": heads * 64,
            "intermediate_size": int(rng.integers(1000, 30000)),
            "num_hidden_layers": int(rng.integers(2, 90)),
            "num_attention_heads": heads,
            "num_key_value_heads": int(rng.choice([1, 2, 8])),
            "vocab_size": int(rng.integers(30000, 200000)),
            "tie_word_embeddings": bool(rng.random() < 0.5),
        }
        cases.append((c, machines[int(rng.integers(len(machines)))], int(rng.choice([1, 7, 400, 9000]))))
    answers = probe.many(STEP, [((c, g[0]), {"tokens": t}) for c, g, t in cases])
    rule = "rule: other models: max(memory time, compute time) with parameters = weight_bytes(cfg, 1)"
    for (c, g, t), answer in zip(cases, answers):
        want = _step(c, g[1], g[2], 1, t)
        if not abs(number_of(answer, rule) - want) <= 1e-9 * want:
            raise AssertionError(rule)


def test_roofline_step_seconds_bad_input(probe, rng):
    cfg = _configs()["Llama-3.1-70B"]
    h100 = named("h100")
    bad = [
        ({"n_gpus": -int(rng.integers(1, 9))}, "n_gpus"),
        ({"n_gpus": 0}, "n_gpus"),
        ({"tokens": 0}, "tokens"),
        ({"tokens": -int(rng.integers(1, 9))}, "tokens"),
        ({"bytes_per_param": 0}, "bytes_per_param"),
        ({"bytes_per_param": -float(rng.choice([0.5, 1, 2]))}, "bytes_per_param"),
    ]
    order = rng.permutation(len(bad)).tolist()
    value_errors(
        probe.many(STEP, [((cfg, h100), bad[i][0]) for i in order]),
        [bad[i][1] for i in order],
        "rule: bad input: n_gpus or tokens below 1, bytes_per_param not positive (ValueError)",
        "rule: bad input: the message names the argument (n_gpus, tokens or bytes_per_param)",
    )


# ------------------------------------------------------------------------------------ B: spec_tokens_per_second
TPS = "spec_tokens_per_second"


def _tps(tc, dc, bw, fl, n, a, k, floor):
    tokens = k + 1 if a == 1 else (1 - a ** (k + 1)) / (1 - a)
    return tokens / (k * max(_step(dc, bw, fl, n, 1), floor) + _step(tc, bw, fl, n, k + 1))


def _tps_cases(rng, floored):
    cfg, machines = _configs(), _machines(rng, fast=False)
    cases = []
    for i in range(50):
        t, d = PAIRS[int(rng.integers(len(PAIRS)))]
        g, n = machines[int(rng.integers(len(machines)))], int(rng.choice([1, 2, 4, 8]))
        a = [0.0, 1.0][i] if i < 2 else round(float(rng.random()), 3)
        floor = float(rng.uniform(1e-6, 3e-3)) if floored else 0.0
        cases.append((cfg[t], cfg[d], g, n, a, int(rng.integers(1, 13)), floor))
    return cases


def test_spec_tokens_per_second(probe, rng):
    cases = _tps_cases(rng, floored=True)
    answers = probe.many(TPS, [((tc, dc, g[0], n, a, k), {"draft_step_floor_s": f}) for tc, dc, g, n, a, k, f in cases])
    rule = (
        "rule: other pairs and hardware: expected_tokens(alpha, k) / (k draft steps + one verify step over k + 1 "
        "tokens)"
    )
    for (tc, dc, g, n, a, k, f), answer in zip(cases, answers):
        want = _tps(tc, dc, g[1], g[2], n, a, k, f)
        if not abs(number_of(answer, rule) - want) <= 1e-9 * want:
            raise AssertionError(rule)


def test_spec_tokens_per_second_type(probe, rng):
    cfg, machines = _configs(), _machines(rng, fast=False)
    shapes = [(1, 0.0, 1, 0.0), (8, 1.0, 4, 1e-3), (2, float(rng.uniform(0.1, 0.9)), 7, 5e-4), (4, 0.9, 12, 0.0)]
    calls = [
        ((cfg[t], cfg[d], g[0], n, a, k), {"draft_step_floor_s": f})
        for t, d in (PAIRS[0], PAIRS[3])
        for g in machines
        for n, a, k, f in shapes
    ]
    rule = "rule: tokens / round time, a plain Python float"
    for answer in probe.many(TPS, calls):
        if type(value_of(answer, rule)) is not float:
            raise Broken(rule, describe(answer))


def test_spec_tokens_per_second_no_floor(probe, rng):
    cases = _tps_cases(rng, floored=False)
    answers = probe.many(TPS, [((tc, dc, g[0], n, a, k), {}) for tc, dc, g, n, a, k, _ in cases])
    rule = "rule: draft step: max(roofline_step_seconds(draft_cfg, gpu, n_gpus), draft_step_floor_s) (no floor)"
    for (tc, dc, g, n, a, k, _), answer in zip(cases, answers):
        want = _tps(tc, dc, g[1], g[2], n, a, k, 0.0)
        if not abs(number_of(answer, rule) - want) <= 1e-9 * want:
            raise AssertionError(rule)


def test_spec_tokens_per_second_bad_input(probe, rng):
    cfg = _configs()
    base = (cfg["Llama-3.1-70B"], cfg["Llama-3.1-8B"], named("h100"), 8)
    bad = [
        ((-float(rng.uniform(0.01, 1)), 4), {}, "alpha"),
        ((float(rng.uniform(1.01, 2)), 4), {}, "alpha"),
        ((0.8, 0), {}, "k"),
        ((0.8, -int(rng.integers(1, 9))), {}, "k"),
        ((0.8, 4), {"draft_step_floor_s": -float(rng.uniform(1e-4, 1e-2))}, "draft_step_floor_s"),
    ]
    order = rng.permutation(len(bad)).tolist()
    answers = probe.many(TPS, [(base + bad[i][0], bad[i][1]) for i in order] + [((*base[:3], 0, 0.8, 4), {})])
    value_errors(
        answers[:-1],
        [bad[i][2] for i in order],
        "rule: bad input: alpha outside [0, 1], k < 1 or draft_step_floor_s < 0 (ValueError)",
        "rule: bad input: the message names the argument (alpha, k or draft_step_floor_s)",
    )
    value_errors(
        answers[-1:],
        ["n_gpus"],
        "rule: bad input: n_gpus < 1 (ValueError)",
        "rule: bad input: the message names n_gpus",
    )


# ------------------------------------------------------------------------------------ C: memory_needed_bytes
MEMORY = "memory_needed_bytes"


def test_memory_needed_bytes(probe, rng):
    cfg = _configs()
    names = list(cfg)
    cases = []
    for _ in range(60):
        t = cfg[str(rng.choice(names))]
        d = None if rng.random() < 0.2 else cfg[str(rng.choice(names))]
        cases.append((t, d, int(rng.choice([1, 3, 16, 64, 256])), int(rng.choice([0, 1, 777, 4096, 32768, 131072]))))
    rule = (
        "rule: other models, batches and contexts: weights of both models + KV of both for batch x context tokens, "
        "bf16 (draft_cfg None: target only)"
    )
    for (t, d, batch, context), answer in zip(cases, probe.many(MEMORY, [(c, {}) for c in cases])):
        want = sum(2 * _params(c) + batch * context * _kv(c) for c in ([t] if d is None else [t, d]))
        if _index(answer, rule) != want:
            raise AssertionError(rule)


def test_memory_needed_bytes_type(probe, rng):
    cfg = _configs()
    calls = [
        ((t, d, b, c), {})
        for t in cfg.values()
        for d in [None] + list(cfg.values())
        for b, c in ((1, 0), (int(rng.integers(2, 9)), int(rng.integers(1, 1000))), (256, 131072))
    ]
    rule = "rule: return an int"
    for answer in probe.many(MEMORY, calls):
        if type(value_of(answer, rule)) is not int:
            raise Broken(rule, describe(answer))


def test_memory_needed_bytes_bad_input(probe, rng):
    cfg = _configs()
    bad = [
        ((-int(rng.integers(1, 9)), 1024), "batch"),
        ((0, 1024), "batch"),
        ((1, -1), "context"),
        ((int(rng.integers(2, 9)), -int(rng.integers(2, 5000))), "context"),
    ]
    order = rng.permutation(len(bad)).tolist()
    value_errors(
        probe.many(MEMORY, [((cfg["Llama-3.1-70B"], cfg["Llama-3.1-8B"]) + bad[i][0], {}) for i in order]),
        [bad[i][1] for i in order],
        "rule: bad input: batch < 1 or context < 0 (ValueError)",
        "rule: bad input: the message names the argument (batch or context)",
    )


# ------------------------------------------------------------------------------------ D: max_concurrent_sequences
SEQS = "max_concurrent_sequences"
FITS = (
    "rule: the largest whole B >= 0 with weights + B x context x KV per token <= (1 - reserve_fraction) x n_gpus x "
    "memory (0 when none fits)"
)


def _fits(answer, want_ratio):
    got = _index(answer, FITS)
    want = max(0, math.floor(want_ratio))
    near = abs(want_ratio - round(want_ratio)) < 1e-9 and want_ratio > 0.5  # float rounding at an exact fit
    if not (got == want or (near and got in (round(want_ratio) - 1, round(want_ratio)))):
        raise AssertionError(FITS)


def _served(rng, round_down):
    """Drawn deployments whose ratio falls where floor and round agree (round_down False) or not."""
    cfg, gpus = _configs(), list(hardware().values())
    names, cases = list(cfg), []
    while len(cases) < 60:
        g, n = gpus[int(rng.integers(len(gpus)))], int(rng.choice([1, 2, 4, 8]))
        t = cfg[str(rng.choice(names))]
        d = None if rng.random() < 0.2 else cfg[str(rng.choice(names))]
        context, reserve = int(rng.choice([512, 2048, 8192, 32768, 131072])), float(rng.choice([0.0, 0.05, 0.1, 0.25]))
        w = 2 * _params(t) + (0 if d is None else 2 * _params(d))
        kv = _kv(t) + (0 if d is None else _kv(d))
        ratio = ((1 - reserve) * n * g.memory_bytes - w) / (context * kv)
        if (ratio >= 1 and ratio % 1 < 0.5) != round_down:
            cases.append(((g.memory_bytes, n, w, kv, context), reserve, ratio))
    return cases


def test_max_concurrent_sequences(probe, rng):
    cases = _served(rng, round_down=False)
    for (_, _, ratio), answer in zip(cases, probe.many(SEQS, [(a, {"reserve_fraction": r}) for a, r, _ in cases])):
        _fits(answer, ratio)


def test_max_concurrent_sequences_type(probe, rng):
    calls = [
        ((1000, 1, 100, 10, 30), 0.0),
        ((1000, 1, 100, 10, 31), 0.0),
        ((1000, 2, 100, 10, 30), 0.5),
        ((1000, 1, 1000, 10, 1), 0.0),
        ((1000, 1, 5000, 10, 1), 0.0),
        ((80e9, 8, 157_167_935_488, 458_752, int(rng.choice([4096, 8192]))), 0.1),
        ((24e9, 1, 141_107_412_992, 327_680, 512), 0.1),
        ((141e9, 4, 16_060_522_496, 131_072, 131072), 0.25),
    ]
    rule = "rule: return a plain Python int"
    for answer in probe.many(SEQS, [(a, {"reserve_fraction": r}) for a, r in calls]):
        if type(value_of(answer, rule)) is not int:
            raise Broken(rule, describe(answer))


def test_max_concurrent_sequences_whole(probe, rng):
    m, w, kv = int(rng.integers(10, 100)) * 100, int(rng.integers(1, 9)) * 10, int(rng.integers(1, 5)) * 10
    c_exact = (m - w) // kv // int(rng.integers(2, 5))  # a context that fits a whole number or not
    small = [
        ((m, 1, w, kv, c_exact), 0.0, (m - w) / (c_exact * kv)),
        ((m, 1, w, kv, c_exact + 1), 0.0, (m - w) / ((c_exact + 1) * kv)),
        ((m, 2, w, kv, c_exact), 0.5, (m - w) / (c_exact * kv)),
        ((m, 1, m, kv, 1), 0.0, 0.0),  # the weights fill the memory
        ((m, 1, 5 * m, kv, 1), 0.0, -4 * m / kv),
    ]  # the weights do not fit
    cases = small + _served(rng, round_down=True)
    for (_, _, ratio), answer in zip(cases, probe.many(SEQS, [(a, {"reserve_fraction": r}) for a, r, _ in cases])):
        _fits(answer, ratio)


def test_max_concurrent_sequences_bad_input(probe, rng):
    base = dict(
        gpu_memory_bytes=80e9,
        n_gpus=8,
        weight_bytes_total=141e9,
        kv_bytes_per_token_total=327_680,
        context=int(rng.choice([1024, 8192])),
    )
    bad = [
        ({"gpu_memory_bytes": 0}, "gpu_memory_bytes"),
        ({"n_gpus": 0}, "n_gpus"),
        ({"weight_bytes_total": -float(rng.integers(1, 100))}, "weight_bytes_total"),
        ({"kv_bytes_per_token_total": 0}, "kv_bytes_per_token_total"),
        ({"context": -int(rng.integers(1, 99))}, "context"),
        ({"reserve_fraction": 1.0}, "reserve_fraction"),
        ({"reserve_fraction": -float(rng.uniform(0.01, 1))}, "reserve_fraction"),
    ]
    order = rng.permutation(len(bad)).tolist()
    value_errors(
        probe.many(SEQS, [((), {**base, **bad[i][0]}) for i in order]),
        [bad[i][1] for i in order],
        "rule: bad input: an argument out of its stated range (ValueError)",
        "rule: bad input: the message names the argument that is out of range",
    )


JUDGES = {name: fn for name, fn in globals().items() if name.startswith("test_") and callable(fn)}
