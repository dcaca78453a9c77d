"""Notebook 12's hidden tests as judges (`expected_experts`, `moe_step_seconds`, `moe_speedup` and
`pays_most_and_stops`), and the reference model they price with: the step of a mixture-of-experts or quantised
target, notebook 07's per-operator roofline extended (tests/test_moe_model.py holds the model itself to simulated
routing, to 07's dense step and to what it must show).

The rules and their wording are the notebook's hidden tests' (docs/contract.md lists them); targets, GPUs, batches,
contexts, bits per weight, alpha, k and c are drawn from the grader's generator; a target travels as the plain
dict the notebook's `moe_spec` makes, a GPU as a row of the notebook's `hardware` (or `attainable(row, ...)`).

The model, per forward pass of `batch` sequences with `tokens` new tokens each (M = batch * tokens routed tokens):
- each MoE layer reads the distinct experts its M tokens route to: under uniform top-r routing over E experts,
  E (1 - (1 - r / E)^M) on average (`expected_experts`); a skewed router with per-expert inclusion probabilities
  p_e (summing to r) reads sum_e (1 - (1 - p_e)^M) (`expected_experts_skewed`), never more than the uniform one;
- the shared experts (`shared_experts` per MoE layer) are read by every pass, at the experts' bits, and used by every
  token; the other weights (attention projections, routers, dense layers, LM head) are read once per pass whatever M
  is, as in 07;
- the weight bytes follow their bits per weight (`expert_bits`, `dense_bits`); the KV cache keeps its own
  (`kv_bits`); a quantised weight costs `dequant_flops` FLOPs per weight read to expand;
- FLOPs: 2 per active weight per token (every token multiplies by its r experts, the shared ones and the dense
  weights); attention as 07 (4 heads x head_dim FLOPs per cached token and layer; multi-head latent attention with
  its up-projections absorbed: 2 heads (2 kv_lora_rank + rope) per cached token and layer, the cache
  kv_lora_rank + rope values per token and layer);
- each class is a roofline, max(bytes / bandwidth, FLOPs / FLOP/s), and the classes add up (07's kernels run one
  after another); n GPUs of a TPGroup split bytes and FLOPs n ways, with no all-reduce or expert-parallel
  exchange counted (a lower bound on their step).
"""

from __future__ import annotations

import math

from autograde.judge import Broken, call, describe, item, named, number_of, own_numbers, value_errors, value_of
from autograde.judges import hardware, model_configs

DEQUANT_FLOPS = 2.0  # per quantised weight read: a scale multiply and an add (int4/fp4 groups with a scale)


def expected_experts(E, r, M):
    """Distinct experts M routed tokens read in one layer under uniform top-r routing over E experts."""
    return E * (1.0 - (1.0 - r / E) ** M)


def expected_experts_skewed(p, M):
    """The same under a skewed router: p[e] the probability that a token routes to expert e (sum(p) = r)."""
    return float(sum(1.0 - (1.0 - pe) ** M for pe in p))


def zipf_inclusion(E, r, s):
    """Inclusion probabilities of a router whose expert loads fall off as 1 / rank^s (s = 0: uniform), scaled to sum
    to r and capped at 1 (a token picks r distinct experts), the cap's excess spread over the rest."""
    w = [1.0 / (i + 1) ** s for i in range(E)]
    p = [r * x / sum(w) for x in w]
    for _ in range(E):
        over = sum(max(0.0, x - 1.0) for x in p)
        if over <= 1e-15:
            break
        free = [i for i, x in enumerate(p) if x < 1.0]
        p = [min(x, 1.0) for x in p]
        room = sum(p[i] for i in free)
        p = [x + over * x / room if i in free else x for i, x in enumerate(p)]
    return p


def moe_spec(cfg, expert_bits=None, dense_bits=16.0, kv_bits=16.0, dequant_flops=None):
    """A config of data/moe_configs.json as the step model sees it: parameter counts by what reads them, bits per
    weight, KV bytes per token and attention FLOPs per cached token. expert_bits: default the checkpoint's own
    (cfg["expert_weight_bits"]). dequant_flops: per quantised weight read (default DEQUANT_FLOPS below 16 bits)."""
    from specdec.tables import moe_parameter_counts

    n = moe_parameter_counts(cfg)
    layers, moe_layers = cfg["num_hidden_layers"], cfg["num_hidden_layers"] - cfg["dense_layers"]
    heads = cfg["num_attention_heads"]
    if cfg["attention"] == "mla":
        kv_values = cfg["kv_lora_rank"] + cfg["qk_rope_head_dim"]
        attn_flops = 2.0 * heads * (2 * cfg["kv_lora_rank"] + cfg["qk_rope_head_dim"]) * layers
    else:
        hd = cfg.get("head_dim") or cfg["hidden_size"] // heads
        kv_values = 2 * cfg["num_key_value_heads"] * hd
        attn_flops = 4.0 * heads * hd * layers
    dense = layers * n["attention"] + cfg["dense_layers"] * n["dense_mlp"] + moe_layers * n["router"]
    return {
        "dense_params": float(dense),
        "lm_head_params": n["lm_head"] or n["embedding"],
        "expert_params": n["expert"],
        "moe_layers": moe_layers,
        "experts": cfg["experts"],
        "experts_per_token": cfg["experts_per_token"],
        "shared_experts": cfg["shared_experts"],
        "expert_bits": float(cfg.get("expert_weight_bits", 16) if expert_bits is None else expert_bits),
        "dense_bits": float(dense_bits),
        "kv_bits": float(kv_bits),
        "kv_bytes_per_token": kv_values * layers * kv_bits / 8,
        "attention_flops_per_cached_token": attn_flops,
        "dequant_flops": dequant_flops,
    }


def dense_as_moe(cfg_dense, bits=16.0, kv_bits=16.0, dequant_flops=None):
    """A dense model of data/model_configs.json in moe_spec's terms (one expert, always read), for its quantised
    twin: the same step model with E = r = 1."""
    h, layers = cfg_dense["hidden_size"], cfg_dense["num_hidden_layers"]
    hd = cfg_dense.get("head_dim") or h // cfg_dense["num_attention_heads"]
    attention = 2 * h * cfg_dense["num_attention_heads"] * hd + 2 * h * cfg_dense["num_key_value_heads"] * hd
    return {
        "dense_params": float(layers * attention),
        "lm_head_params": float(cfg_dense["vocab_size"] * h),
        "expert_params": float(3 * h * cfg_dense["intermediate_size"]),
        "moe_layers": layers,
        "experts": 1,
        "experts_per_token": 1,
        "shared_experts": 0,
        "expert_bits": float(bits),
        "dense_bits": float(bits),
        "kv_bits": float(kv_bits),
        "kv_bytes_per_token": 2 * cfg_dense["num_key_value_heads"] * hd * layers * kv_bits / 8,
        "attention_flops_per_cached_token": 4.0 * cfg_dense["num_attention_heads"] * hd * layers,
        "dequant_flops": dequant_flops,
    }


def _dequant(bits, spec):
    if bits >= 16:
        return 0.0
    return DEQUANT_FLOPS if spec["dequant_flops"] is None else spec["dequant_flops"]


def moe_terms(spec, gpu, batch, context, tokens=1, distinct=None):
    """One forward pass's seconds by class: {"fixed", "dense", "experts", "attention"}. distinct: the experts a MoE
    layer reads (default expected_experts(E, r, batch x tokens); a judge passes the learner's own value instead)."""
    n = getattr(gpu, "n_gpus", 1)
    bw, fl = gpu.bandwidth_bytes_per_s * gpu.mbu * n, gpu.flops_per_s * gpu.mfu * n
    M = batch * tokens
    if distinct is None:
        distinct = expected_experts(spec["experts"], spec["experts_per_token"], M)
    read = spec["moe_layers"] * (distinct + spec["shared_experts"]) * spec["expert_params"]
    dense_w = spec["dense_params"] + spec["lm_head_params"]
    dense = max(
        dense_w * spec["dense_bits"] / 8 / bw, (2 * M * dense_w + _dequant(spec["dense_bits"], spec) * dense_w) / fl
    )
    active = spec["moe_layers"] * (spec["experts_per_token"] + spec["shared_experts"]) * spec["expert_params"]
    experts = max(
        read * spec["expert_bits"] / 8 / bw, (2 * M * active + _dequant(spec["expert_bits"], spec) * read) / fl
    )
    attention = max(
        batch * context * spec["kv_bytes_per_token"] / bw, M * context * spec["attention_flops_per_cached_token"] / fl
    )
    return {
        "fixed": float(gpu.fixed_s),
        "dense": float(dense),
        "experts": float(experts),
        "attention": float(attention),
    }


def moe_step(spec, gpu, batch, context, tokens=1, distinct=None):
    return sum(moe_terms(spec, gpu, batch, context, tokens, distinct).values())


def verify_ratio(spec, gpu, batch, context, k):
    """v(k): a verify pass over k + 1 tokens per sequence against one plain step, same batch and context."""
    return moe_step(spec, gpu, batch, context, k + 1) / moe_step(spec, gpu, batch, context)


def speedup(spec, gpu, batch, context, alpha, k, c, steps=None):
    """Tokens per second against plain decoding: expected tokens per round x plain step / (k draft steps of c plain
    steps each + the verify pass). steps: (plain, verify) seconds (default the model's; a judge passes the learner's
    own moe_step_seconds instead)."""
    e = sum(alpha**i for i in range(k + 1))
    plain, verify = steps or (moe_step(spec, gpu, batch, context), moe_step(spec, gpu, batch, context, k + 1))
    return e * plain / (k * c * plain + verify)


def best_and_last_batch(spec, gpu, context, alpha, k, c, batches):
    """(the batch of `batches` where speculation pays most, on a tie the first (speedups within a relative 1e-9, the
    notebook's rule), the largest where it still pays (speedup >= 1) or None)."""
    s = [speedup(spec, gpu, b, context, alpha, k, c) for b in batches]
    best = next(b for b, x in zip(batches, s) if x >= max(s) * (1 - 1e-9))
    paying = [b for b, x in zip(batches, s) if x >= 1.0]
    return best, (max(paying) if paying else None)


def stops_paying(spec, gpu, context, alpha, k, c, limit=1 << 16):
    """The first batch (1 .. limit) past the speedup's peak where speculation no longer pays (speedup < 1): the
    peak found on powers of two, the crossing by bisection on whole batches. 1 where it never pays; None where it
    still pays at `limit`."""
    grid = [2**i for i in range(int(math.log2(limit)) + 1)]
    s = [speedup(spec, gpu, b, context, alpha, k, c) for b in grid]
    peak = max(range(len(s)), key=lambda i: (s[i], -i))
    if s[peak] < 1.0:
        return 1
    after = next((i for i in range(peak, len(grid)) if s[i] < 1.0), None)
    if after is None:
        return None
    lo, hi = grid[after - 1], grid[after]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if speedup(spec, gpu, mid, context, alpha, k, c) >= 1.0:
            lo = mid
        else:
            hi = mid
    return hi


# ------------------------------------------------------------------------------------ inputs
def _moe():
    from specdec.tables import load_moe_configs

    return load_moe_configs()


def _spec(rng, quantised=False):
    """A target as the notebook's moe_spec makes it: a published one or one drawn around it, bits drawn where asked."""
    cfgs = _moe()
    name = str(rng.choice(sorted(cfgs)))
    cfg = dict(cfgs[name])
    if rng.random() < 0.5:  # another MoE: experts, routing width and expert size drawn
        E = int(rng.choice([4, 8, 16, 32, 64, 128, 256]))
        cfg.update(
            experts=E,
            experts_per_token=int(rng.integers(1, min(E, 9) + 1)),
            expert_intermediate_size=int(rng.integers(256, 8192)),
            shared_experts=int(rng.integers(0, 2)),
        )
    bits = lambda: float(rng.choice([4.25, 4.5, 8.0, 16.0]))  # noqa: E731
    spec = moe_spec(  # not quantised: every weight at 16 bits (a checkpoint's own 4-bit experts are the bits cell's)
        cfg,
        expert_bits=bits() if quantised else 16.0,
        dense_bits=bits() if quantised else 16.0,
        kv_bits=float(rng.choice([8.0, 16.0])) if quantised else 16.0,
        dequant_flops=float(rng.uniform(1.0, 4.0)),
    )
    spec["name"] = name
    return spec


def _twin(rng, bits):
    """A dense model of the course's table in moe_spec's terms (E = r = 1), at `bits` per weight."""
    name = str(rng.choice(sorted(model_configs())))
    spec = dense_as_moe(model_configs()[name], bits, dequant_flops=float(rng.uniform(1.0, 4.0)))
    spec["name"] = f"{name} ({bits:g}-bit)"
    return spec


def _gpu(rng):
    """(kernel recipe, judge's copy) of a row of the hardware table, at attained fractions half of the time."""
    from specdec.tables import attainable

    name = str(rng.choice(sorted(hardware())))
    row = item(named("hardware"), name)
    if rng.random() < 0.5:
        return row, hardware()[name]
    mbu, mfu, fixed = float(rng.uniform(0.5, 1.0)), float(rng.uniform(0.3, 1.0)), float(rng.uniform(0, 2e-3))
    return call("attainable", row, mbu, mfu, fixed), attainable(hardware()[name], mbu, mfu, fixed)


def _close(got, want, rel=1e-9):
    return abs(got - want) <= rel * abs(want) + 1e-300


# ------------------------------------------------------------------------------------ A: expected_experts
EXPERTS = "expected_experts"


def test_expected_experts(probe, rng):
    cases = []
    for _ in range(200):
        E = int(rng.integers(1, 300))
        cases.append((E, int(rng.integers(1, E + 1)), int(rng.integers(0, 5000))))
    for (E, r, M), answer in zip(cases, probe.many(EXPERTS, [(c, {}) for c in cases])):
        got = value_of(answer, "rule: return a plain Python float")
        if type(got) is not float:
            raise Broken("rule: return a plain Python float", describe(answer))
        if not abs(got - expected_experts(E, r, M)) <= 1e-9 * E:
            raise AssertionError("rule: formula: E (1 - (1 - r/E)^M) at other E, r and M")


def test_expected_experts_distinct(probe, rng):
    rule = "rule: distinct experts: fewer than r M once tokens share experts, never more than E"
    cases = []
    for _ in range(100):
        E = int(rng.integers(8, 300))
        r = int(rng.integers(1, max(2, E // 4)))
        cases.append((E, r, int(rng.integers(2, 4 * E // r + 2))))
    for (E, r, M), answer in zip(cases, probe.many(EXPERTS, [(c, {}) for c in cases])):
        if not abs(number_of(answer, rule) - expected_experts(E, r, M)) <= 1e-9 * E:
            raise AssertionError(rule)


def test_expected_experts_edges(probe, rng):
    E = int(rng.integers(2, 300))
    r = int(rng.integers(1, E))
    cases = [
        ((E, r, 0), 0.0, 0.0, "rule: M = 0: no expert read (0.0)"),
        ((E, E, int(rng.integers(1, 50))), float(E), 0.0, "rule: r = E: all E experts for any M >= 1"),
        ((E, r, 1), float(r), 1e-9 * E, "rule: M = 1: one token reads its r experts"),
        ((E, r, 10**7), float(E), 1e-6 * E, "rule: a large M approaches E"),
    ]
    for (_, want, tol, rule), answer in zip(cases, probe.many(EXPERTS, [(c[0], {}) for c in cases])):
        got = value_of(answer, rule)
        if type(got) is not float:
            raise Broken(rule, describe(answer))
        if not abs(got - want) <= tol:
            raise AssertionError(rule)


def test_expected_experts_bad_input(probe, rng):
    E = int(rng.integers(2, 100))
    bad = [
        ((0, 1, 1), "E"),
        ((-E, 1, 1), "E"),
        ((E + 0.5, 1, 1), "E"),
        ((E, 0, 1), "r"),
        ((E, E + 1, 1), "r"),
        ((E, 1.5, 1), "r"),
        ((E, 1, -1), "M"),
        ((E, 1, 2.5), "M"),
        ((E, 1, True), "M"),
    ]
    order = rng.permutation(len(bad)).tolist()
    value_errors(
        probe.many(EXPERTS, [(bad[i][0], {}) for i in order]),
        [bad[i][1] for i in order],
        "rule: bad input: E < 1, r outside 1 .. E, M < 0 or non-integers must raise ValueError",
        "rule: bad input: the message names the argument (E, r or M)",
    )


# ------------------------------------------------------------------------------------ B: moe_step_seconds
STEP = "moe_step_seconds"
SHARED_RULE = (
    "rule: shared experts: every pass reads them and every token multiplies by them, besides its routed experts"
)


def _steps(probe, rng, n, rule, quantised=False, tokens=None, batches=(1, 512), contexts=(0, 8192)):
    cases = []
    for _ in range(n):
        recipe, gpu = _gpu(rng)
        spec = _spec(rng, quantised)
        t = int(rng.integers(1, 9)) if tokens is None else tokens(rng)
        cases.append((spec, recipe, gpu, int(rng.integers(*batches)), float(rng.integers(*contexts)), t))
    answers = probe.many(STEP, [((s, r, b, L), {"tokens": t}) for s, r, _, b, L, t in cases])
    got = []
    for answer in answers:
        got.append(value_of(answer, rule))
        if type(got[-1]) is not float:
            raise Broken("rule: return a plain Python float", describe(answer))
    off = [j for j, (spec, _, gpu, b, L, t) in enumerate(cases) if not _close(got[j], moe_step(spec, gpu, b, L, t))]
    # Part A's slip is Part A's: where the reference disagrees, the step priced with the learner's own
    # expected_experts (which moe_step_seconds calls) also passes
    own = own_numbers(
        probe.many(
            EXPERTS, [((cases[j][0]["experts"], cases[j][0]["experts_per_token"], _m(cases[j])), {}) for j in off]
        )
    )
    for j, distinct in zip(off, own):
        spec, _, gpu, b, L, t = cases[j]
        if distinct is not None and _close(got[j], moe_step(spec, gpu, b, L, t, distinct)):
            continue
        if spec["shared_experts"] and _close(got[j], moe_step(dict(spec, shared_experts=0), gpu, b, L, t)):
            raise AssertionError(SHARED_RULE)
        raise AssertionError(rule)


def _m(case):
    """The routed tokens of a step case (spec, recipe, gpu, batch, context, tokens): batch x tokens."""
    return case[3] * case[5]


def test_moe_step_seconds(probe, rng):
    _steps(
        probe,
        rng,
        60,
        "rule: formula: fixed + dense + experts + attention rooflines at other targets, GPUs, batches and contexts",
    )


def test_moe_step_seconds_verify(probe, rng):
    _steps(
        probe,
        rng,
        60,
        "rule: experts: a pass reads expected_experts(experts, experts_per_token, batch x tokens) "
        "experts per MoE layer",
        tokens=lambda g: int(g.integers(2, 9)),
        batches=(1, 9),
        contexts=(0, 512),
    )


def test_moe_step_seconds_bits(probe, rng):
    _steps(
        probe,
        rng,
        80,
        "rule: bits: weights read at expert_bits and dense_bits, the KV cache at kv_bits, "
        "dequant_flops per weight read below 16 bits",
        quantised=True,
    )


def test_moe_step_seconds_bad_input(probe, rng):
    recipe, _ = _gpu(rng)
    spec = _spec(rng)
    gone = str(rng.choice(["experts", "kv_bits", "expert_params"]))
    short = {k: v for k, v in spec.items() if k != gone}
    flat = call("Hardware", "flat", 80e9, 0.0, 1e15, True, "")
    bad = [
        ((short, recipe, 1, 0), {}, "spec"),
        (([1, 2], recipe, 1, 0), {}, "spec"),
        ((spec, flat, 1, 0), {}, "gpu"),
        ((spec, recipe, 0, 0), {}, "batch"),
        ((spec, recipe, 2.5, 0), {}, "batch"),
        ((spec, recipe, 1, -float(rng.integers(1, 100))), {}, "context"),
        ((spec, recipe, 1, 0), {"tokens": 0}, "tokens"),
        ((spec, recipe, 1, 0), {"tokens": True}, "tokens"),
    ]
    order = rng.permutation(len(bad)).tolist()
    value_errors(
        probe.many(STEP, [(bad[i][0], bad[i][1]) for i in order]),
        [bad[i][2] for i in order],
        "rule: bad input: a spec without SPEC_KEYS, a GPU without bandwidth, batch < 1, context < 0 or "
        "tokens < 1 must raise ValueError",
        "rule: bad input: the message names the argument (spec, gpu, batch, context or tokens)",
    )


# ---------------------------------------------------------------------------------- C: moe_speedup, pays_most_and_stops
SPEEDUP, PAYS = "moe_speedup", "pays_most_and_stops"


def test_moe_speedup(probe, rng):
    rule = "rule: formula: expected tokens x T(B, 1) / (k c T(B, 1) + T(B, k + 1)) at other inputs"
    cases = []
    for _ in range(60):
        recipe, gpu = _gpu(rng)
        a = float(rng.choice([0.0, 1.0])) if rng.random() < 0.1 else float(rng.uniform(0, 1))
        cases.append(
            (
                _spec(rng, rng.random() < 0.5),
                recipe,
                gpu,
                int(rng.integers(1, 600)),
                float(rng.integers(0, 8192)),
                a,
                int(rng.integers(1, 9)),
                float(rng.uniform(0, 0.5)),
            )
        )
    answers = probe.many(SPEEDUP, [((s, r, b, L, a, k, c), {}) for s, r, _, b, L, a, k, c in cases])
    got = []
    for answer in answers:
        got.append(value_of(answer, rule))
        if type(got[-1]) is not float:
            raise Broken("rule: return a plain Python float", describe(answer))
    off = [
        j
        for j, (spec, _, gpu, b, L, a, k, c) in enumerate(cases)
        if not _close(got[j], speedup(spec, gpu, b, L, a, k, c))
    ]
    # Part B's slip is Part B's: the learner's own moe_step_seconds (plain and verify), which moe_speedup calls
    steps = _own_steps(probe, [cases[j] for j in off])
    for j, own in zip(off, steps):
        spec, _, gpu, b, L, a, k, c = cases[j]
        if own is None or not _close(got[j], speedup(spec, gpu, b, L, a, k, c, own)):
            raise AssertionError(rule)


def _own_steps(probe, cases):
    """[(plain, verify) seconds of the learner's own moe_step_seconds, or None] for speedup cases (spec, recipe, gpu,
    batch, context, alpha, k, c)."""
    calls = []
    for s, r, _, b, L, _, k, _ in cases:
        calls += [((s, r, b, L), {}), ((s, r, b, L), {"tokens": k + 1})]
    own = own_numbers(probe.many(STEP, calls))
    pairs = zip(own[0::2], own[1::2])
    return [None if plain is None or verify is None else (plain, verify) for plain, verify in pairs]


def test_moe_speedup_bad_input(probe, rng):
    recipe, _ = _gpu(rng)
    spec = _spec(rng)
    ok = (spec, recipe, 4, 256.0)
    bad = [
        (ok + (1.0 + float(rng.uniform(0.01, 1)), 4, 0.05), "alpha"),
        (ok + (-0.1, 4, 0.05), "alpha"),
        (ok + (0.8, 0, 0.05), "k"),
        (ok + (0.8, 2.5, 0.05), "k"),
        (ok + (0.8, 4, -float(rng.uniform(0.01, 1))), "c"),
        ((spec, recipe, 0, 256.0, 0.8, 4, 0.05), "batch"),
    ]
    order = rng.permutation(len(bad)).tolist()
    value_errors(
        probe.many(SPEEDUP, [(bad[i][0], {}) for i in order]),
        [bad[i][1] for i in order],
        "rule: bad input: alpha outside [0, 1], k < 1, c < 0 or batch < 1 must raise ValueError",
        "rule: bad input: the message names the argument (alpha, k, c or batch)",
    )


def _pays(probe, rng, cases, best_rule, last_rule):
    """cases: (spec, recipe, gpu, L, a, k, c, batches); the answers against the judge's speedups, a near-tie on
    the best batch and a speedup within 1e-9 of 1 at the last one left to either answer."""
    answers = probe.many(PAYS, [((s, r, L, a, k, c, bs), {}) for s, r, _, L, a, k, c, bs in cases])
    kind = "rule: return plain Python ints (None where no batch pays)"
    got, off = [], []
    for (spec, _, gpu, L, a, k, c, bs), answer in zip(cases, answers):
        got.append(value_of(answer, kind))
        if not (
            isinstance(got[-1], (tuple, list))
            and len(got[-1]) == 2
            and type(got[-1][0]) is int
            and (got[-1][1] is None or type(got[-1][1]) is int)
        ):
            raise Broken(kind, describe(answer))
        if _broken(got[-1], {b: speedup(spec, gpu, b, L, a, k, c) for b in set(bs)}, best_rule, last_rule):
            off.append(len(got) - 1)
    # Part C's moe_speedup slip is that cell's: the learner's own speedups, which pays_most_and_stops calls, also pass
    calls = [(j, b) for j in off for b in sorted(set(cases[j][-1]))]
    own = own_numbers(probe.many(SPEEDUP, [(cases[j][:2] + (b,) + cases[j][3:7], {}) for j, b in calls]))
    for j in off:
        spec, _, gpu, L, a, k, c, bs = cases[j]
        mine = {b: x for (i, b), x in zip(calls, own) if i == j}
        broke = _broken(got[j], {b: speedup(spec, gpu, b, L, a, k, c) for b in set(bs)}, best_rule, last_rule)
        if None in mine.values() or _broken(got[j], mine, best_rule, last_rule):
            raise AssertionError(broke)


def _broken(got, speed, best_rule, last_rule):
    """The rule (best, last) an answer breaks against speedups {batch: speedup}, or None: a near-tie on the best
    batch and a speedup within 1e-9 of 1 at the last one left to either answer."""
    top = max(speed.values())
    near = sorted(b for b, s in speed.items() if s >= top * (1 - 1e-9))
    if got[0] not in near or (got[0] != near[0] and speed[near[0]] >= top * (1 - 1e-12)):
        return best_rule
    sure = [b for b, s in speed.items() if s >= 1 + 1e-9]
    maybe = [b for b, s in speed.items() if abs(s - 1) < 1e-9]
    want = max(sure) if sure else None
    if got[1] != want and got[1] not in maybe:
        return last_rule
    return None


def _batches(rng):
    bs = sorted({int(x) for x in rng.integers(1, 4096, int(rng.integers(3, 12)))} | {int(rng.integers(1, 9))})
    return [int(b) for b in rng.permutation(bs)]


def test_pays_most_and_stops(probe, rng):
    cases = []
    for _ in range(25):
        recipe, gpu = _gpu(rng)
        cases.append(
            (
                _spec(rng),
                recipe,
                gpu,
                float(rng.integers(0, 4096)),
                float(rng.uniform(0.3, 0.95)),
                int(rng.integers(1, 8)),
                float(rng.uniform(0, 0.3)),
                _batches(rng),
            )
        )
    _pays(
        probe,
        rng,
        cases,
        "rule: best: the batch with the highest moe_speedup (the smallest on a tie)",
        "rule: last: the largest batch whose speedup is >= 1, None where none pays",
    )
    # the boundary: a dense 16-bit twin at context 0, alpha 0 and c 0 verifies k + 1 tokens in exactly one plain
    # step's time while every pass is memory-bound (small batches), so every speedup is exactly 1: it pays
    recipe, _ = _gpu(rng)
    bs = [1, 2, int(rng.integers(3, 5))]
    got = value_of(
        probe(PAYS, _twin(rng, 16.0), recipe, 0.0, 0.0, int(rng.integers(1, 4)), 0.0, bs),
        "rule: last: the largest batch whose speedup is >= 1, None where none pays",
    )
    if not (isinstance(got, (tuple, list)) and len(got) == 2 and got[1] == max(bs)):
        raise AssertionError("rule: last: the largest batch whose speedup is >= 1, None where none pays")
    spec = _spec(rng)
    recipe, _ = _gpu(rng)
    bad = [[], [0, 4], [2.5], [True, 2]]
    value_errors(
        probe.many(PAYS, [((spec, recipe, 256.0, 0.8, 4, 0.05, b), {}) for b in bad]),
        ["batches"] * len(bad),
        "rule: bad input: empty batches or batches not integers >= 1 must raise ValueError",
        "rule: bad input: the message names batches",
    )


def test_pays_most_and_stops_quantised(probe, rng):
    cases = []
    for _ in range(12):
        recipe, gpu = _gpu(rng)
        bits = float(rng.choice([4.25, 4.5, 8.0]))
        L, a, k, c = (
            float(rng.integers(0, 2048)),
            float(rng.uniform(0.4, 0.9)),
            int(rng.integers(1, 7)),
            float(rng.uniform(0, 0.2)),
        )
        bs = [2**i for i in range(14)]
        cases += [
            (_twin(rng, bits), recipe, gpu, L, a, k, c, bs),
            (_twin(rng, 16.0), recipe, gpu, L, a, k, c, bs),
            (_spec(rng, True), recipe, gpu, L, a, k, c, bs),
        ]
    _pays(
        probe,
        rng,
        cases,
        "rule: quantised targets: the best batch of int4, int8 and bf16 twins",
        "rule: quantised targets: the last paying batch of int4, int8 and bf16 twins",
    )


JUDGES = {name: fn for name, fn in globals().items() if name.startswith("test_") and callable(fn)}
