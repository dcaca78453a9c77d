"""Notebook 01's hidden tests as judges: every test cell (`weight_bytes`, `ridge_point`, `kv_bytes_per_token` and
`decode_step_seconds`).

The rules and their wording are the notebook's hidden tests' (docs/contract.md lists them); the models and machines
are the course's tables (data/model_configs.json, data/hardware.csv) sent as plain numbers, beside made-up ones
drawn from the grader's generator; the references are the judge's own formulas.
"""

from __future__ import annotations

from autograde.judge import Broken, describe, number_of, value_errors, value_of
from autograde.judges import hardware, model_configs

REQUIRED_KEYS = (
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "vocab_size",
    "tie_word_embeddings",
)


def _configs():
    return model_configs()


def _hardware():
    return list(hardware().values())


def _params(c):
    h, hd = c["hidden_size"], c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"]
    layer = (
        2 * h * c["num_attention_heads"] * hd
        + 2 * h * c["num_key_value_heads"] * hd
        + 3 * h * c["intermediate_size"]
        + 2 * h
    )
    return c["vocab_size"] * h * (1 if c["tie_word_embeddings"] else 2) + c["num_hidden_layers"] * layer + h


def _made_up(rng, full=True):
    """A Llama-shaped model no table holds, with or without head_dim."""
    heads = int(rng.choice([4, 8, 16, 32]))
    c = {
        "hidden_size": heads * int(rng.choice([32, 64, 96, 128])),
        "num_hidden_layers": int(rng.integers(1, 100)),
        "num_attention_heads": heads,
        "num_key_value_heads": int(rng.choice([1, 2, 4])),
    }
    if full:
        c.update(
            {
                "intermediate_size": int(rng.integers(256, 9000)),
                "vocab_size": int(rng.integers(1000, 200000)),
                "tie_word_embeddings": bool(rng.random() < 0.5),
            }
        )
    if rng.random() < 0.5:
        c["head_dim"] = int(rng.choice([32, 64, 128, 256]))
    return c


# ------------------------------------------------------------------------------------ A: weight_bytes
WEIGHTS = "weight_bytes"


def test_weight_bytes(probe, rng):
    cfg = _configs()
    cases = [
        (cfg[name], bpp) for name in ("Llama-3.1-8B", "Llama-3.1-70B") for bpp in rng.permutation([1, 2, 4]).tolist()
    ]
    answers = probe.many(
        WEIGHTS,
        [((c,), {"bytes_per_param": b}) for c, b in cases] + [((cfg["Llama-3.1-8B"],), {"bytes_per_param": 0.5})],
    )
    plain = "rule: the total in bytes, a plain Python number"
    for (c, b), answer in zip(cases, answers):
        got = value_of(answer, plain)
        if type(got) not in (int, float):
            raise Broken(plain, describe(answer))
        want = _params(c) * b
        if not abs(got - want) <= 1e-9 * want:
            raise AssertionError(
                "rule: formula: other models (tied embeddings: no separate LM head) and other bytes_per_param"
            )
    got = value_of(answers[-1], plain)
    if type(got) not in (int, float):
        raise Broken(plain, describe(answers[-1]))
    if not abs(got - _params(cfg["Llama-3.1-8B"]) * 0.5) <= 1:
        raise AssertionError("rule: formula: a fractional bytes_per_param (int4, as the docstring lists)")


def test_weight_bytes_models(probe, rng):
    cfg = _configs()
    tied = [(cfg[name], int(b)) for name in ("Llama-3.2-1B", "Llama-3.2-3B") for b in (1, 2, 4)]
    made = [(_made_up(rng), 2) for _ in range(20)]
    answers = probe.many(WEIGHTS, [((c,), {"bytes_per_param": b}) for c, b in tied] + [((c,), {}) for c, _ in made])
    rule = "rule: formula: other models (tied embeddings: no separate LM head) and other bytes_per_param"
    for (c, b), answer in zip(tied, answers):
        want = _params(c) * b
        if not abs(number_of(answer, rule) - want) <= 1e-9 * want:  # the type is test_weight_bytes' rule
            raise AssertionError(rule)
    rule = (
        "rule: formula: other models, head_dim from the config when present (else hidden_size // num_attention_heads)"
    )
    for (c, b), answer in zip(made, answers[len(tied) :]):
        want = _params(c) * b
        if not abs(number_of(answer, rule) - want) <= 1e-9 * want:
            raise AssertionError(rule)


def test_weight_bytes_bad_input(probe, rng):
    cfg = dict(_configs()["Llama-3.1-8B"])
    gone = str(rng.choice(REQUIRED_KEYS))
    broken = {k: v for k, v in cfg.items() if k != gone}
    answers = probe.many(WEIGHTS, [((cfg,), {"bytes_per_param": -float(rng.choice([0.5, 1, 2, 4]))}), ((broken,), {})])
    value_errors(
        answers[:1],
        ["bytes_per_param"],
        "rule: bad input: bytes_per_param must be positive (ValueError)",
        "rule: bad input: the message names bytes_per_param",
    )
    value_errors(
        answers[1:],
        [("cfg", gone)],
        "rule: bad input: cfg must contain every required key (ValueError)",
        "rule: bad input: the message names cfg (or the missing key)",
    )


# ------------------------------------------------------------------------------------ B: ridge_point
RIDGE = "ridge_point"


def test_ridge_point(probe, rng):
    machines = [(hw.flops_per_s, hw.bandwidth_bytes_per_s) for hw in _hardware()]
    drawn = [(float(10 ** rng.uniform(9, 16)), float(10 ** rng.uniform(9, 13))) for _ in range(20)]
    answers = probe.many(RIDGE, [(pair, {}) for pair in machines + drawn])
    for j, ((f, bw), answer) in enumerate(zip(machines + drawn, answers)):
        rule = (
            "rule: other hardware: FLOP/s / bandwidth (the ridge of another GPU)"
            if j < len(machines)
            else "rule: formula: FLOP/s / bandwidth for any positive pair"
        )
        if not abs(number_of(answer, rule) - f / bw) <= 1e-9 * f / bw:
            raise AssertionError(rule)


def test_ridge_point_bad_input(probe, rng):
    f, bw = float(10 ** rng.uniform(12, 16)), float(10 ** rng.uniform(11, 13))
    bad = [
        ((0, bw), "flops"),
        ((-f, bw), "flops"),
        ((f, 0), "bandwidth"),
        ((f, -float(rng.uniform(1, 10))), "bandwidth"),
    ]
    order = rng.permutation(len(bad)).tolist()
    value_errors(
        probe.many(RIDGE, [(bad[i][0], {}) for i in order]),
        [bad[i][1] for i in order],
        "rule: bad input: flops and bandwidth must be positive (ValueError)",
        "rule: bad input: the message names the argument (flops or bandwidth)",
    )


# ------------------------------------------------------------------------------------ C: kv_bytes_per_token
KV = "kv_bytes_per_token"


def _kv(c, b):
    hd = c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"]
    return 2 * c["num_hidden_layers"] * c["num_key_value_heads"] * hd * b


def test_kv_bytes_per_token(probe, rng):
    tables = [(c, b) for c in _configs().values() for b in (1, 2, 4)]
    made = [(_made_up(rng, full=False), 2) for _ in range(20)]
    answers = probe.many(KV, [((c, b), {}) for c, b in tables] + [((c,), {}) for c, _ in made])
    for j, ((c, b), answer) in enumerate(zip(tables + made, answers)):
        rule = (
            "rule: formula: 2 x layers x KV heads x head_dim x bytes_per_elem (other models and byte widths)"
            if j < len(tables)
            else "rule: formula: other models, head_dim defaulting as in Part A"
        )
        if not abs(number_of(answer, rule) - _kv(c, b)) < 1e-9:
            raise AssertionError(rule)


def test_kv_bytes_per_token_bad_input(probe, rng):
    cfg = _configs()["Llama-3.1-8B"]
    answers = probe.many(
        KV,
        [
            ((cfg,), {"bytes_per_elem": 0}),
            ((cfg,), {"bytes_per_elem": -int(rng.integers(1, 5))}),
            (({"hidden_size": int(rng.choice([2048, 4096, 8192]))},), {}),
        ],
    )
    value_errors(
        answers[:2],
        ["bytes_per_elem"] * 2,
        "rule: bad input: bytes_per_elem must be positive (ValueError)",
        "rule: bad input: the message names bytes_per_elem",
    )
    value_errors(
        answers[2:],
        [("cfg", "num_hidden_layers")],
        "rule: bad input: cfg must have the keys it uses (ValueError)",
        "rule: bad input: the message names cfg (or the missing key)",
    )


# ------------------------------------------------------------------------------------ D: decode_step_seconds
STEP = "decode_step_seconds"


def test_decode_step_seconds(probe, rng):
    drawn = []
    for _ in range(30):
        w, bw = float(10 ** rng.uniform(6, 12)), float(10 ** rng.uniform(9, 13))
        drawn.append((w, bw, 0.0 if rng.random() < 0.3 else float(10 ** rng.uniform(3, 11))))
    w8 = _params(_configs()["Llama-3.1-8B"]) * 2
    machines = [(w8, hw.bandwidth_bytes_per_s) for hw in _hardware()]
    answers = probe.many(STEP, [((w, bw), {"kv_bytes": kv}) for w, bw, kv in drawn] + [(m, {}) for m in machines])
    rule = "rule: formula: (weight bytes + KV bytes) / bandwidth, in seconds"
    for (w, bw, kv), answer in zip(drawn, answers):
        if not abs(number_of(answer, rule) - (w + kv) / bw) <= 1e-9 * (w + kv) / bw:
            raise AssertionError(rule)
    rule = "rule: other hardware: weight bytes / bandwidth (another GPU's bandwidth)"
    for (w, bw), answer in zip(machines, answers[len(drawn) :]):
        if not abs(number_of(answer, rule) - w / bw) <= 1e-9 * w / bw:
            raise AssertionError(rule)


def test_decode_step_seconds_bad_input(probe, rng):
    w, bw = float(10 ** rng.uniform(8, 11)), float(10 ** rng.uniform(11, 13))
    bad = [
        ({"weight_bytes": w, "bandwidth": 0}, "bandwidth"),
        ({"weight_bytes": w, "bandwidth": -bw}, "bandwidth"),
        ({"weight_bytes": -float(rng.integers(1, 100)), "bandwidth": bw}, "weight_bytes"),
        ({"weight_bytes": w, "bandwidth": bw, "kv_bytes": -float(rng.integers(1, 100))}, "kv_bytes"),
    ]
    order = rng.permutation(len(bad)).tolist()
    value_errors(
        probe.many(STEP, [((), bad[i][0]) for i in order]),
        [bad[i][1] for i in order],
        "rule: bad input: bandwidth must be positive and the byte counts non-negative (ValueError)",
        "rule: bad input: the message names the argument (bandwidth, weight_bytes or kv_bytes)",
    )


JUDGES = {name: fn for name, fn in globals().items() if name.startswith("test_") and callable(fn)}
