"""Notebook 08's hidden tests as judges: every test cell (`round_cost_ratio`, `break_even_alpha`,
`speedup_from_times`, `check_claim`, `should_speculate`, `best_k_for_batch` and `deployment_plan`).

The rules and their wording are the notebook's hidden tests' (docs/contract.md lists them). Machines and models
travel as in notebook 07's judges (autograde.judges.nb07: a recipe for the kernel beside the judge's own copy), and
the references are those judges' own step model (`ref_step`, `ref_speedup`), which the hidden tests took from the
locked given cells restating notebook 07. A first draft pass given as a function of k travels as
`vllm_v1_first_pass` by name (a lambda cannot cross the boundary).
"""

from __future__ import annotations

import math

from autograde.judge import Broken, answered, describe, named, number_of, own_numbers, value_errors, value_of
from autograde.judges.nb07 import H100, _is_group, attained, group, hw, model, plain, ref_fits, ref_speedup, scaled

NAMES = ("H100 SXM", "H200 SXM", "A100 80GB SXM", "L4")
VLLM = named("vllm_v1_first_pass")
TERMS_RULE = (
    "rule: the round's own terms and the step's (first_draft_tokens, c_round, sampler_passes, c_step) passed "
    "on to spec_speedup"
)


def _e(a, k):
    return sum(a**i for i in range(k + 1))


def _made_up():
    return plain(
        {
            "name": "made-up 14B",
            "weight_bytes": 29.0e9,
            "layer_bytes": 26.2e9,
            "lm_head_bytes": 1.3e9,
            "kv_bytes_per_token": 196_608.0,
            "attention_flops_per_cached_token": 983_040.0,
            "layers": 48,
            "hidden_size": 5120,
        }
    )


def _made_up_draft():
    return plain(
        {
            "name": "made-up 0.5B",
            "weight_bytes": 1.0e9,
            "layer_bytes": 0.72e9,
            "lm_head_bytes": 0.28e9,
            "kv_bytes_per_token": 12_288.0,
            "attention_flops_per_cached_token": 86_016.0,
            "layers": 24,
            "hidden_size": 896,
        }
    )


NONE = (None, None)


def _pairs(with_none=True):
    l8, l70 = model("Llama-3.1-8B"), model("Llama-3.1-70B")
    out = [(l8, model("Llama-3.2-1B")), (l70, l8), (l70, model("Llama-3.2-1B")), (l8, model("Llama-3.2-3B"))]
    if with_none:
        out += [(l70, NONE), (l8, NONE)]
    out += [(l8, scaled("Llama-3.1-8B", 0.05)), (_made_up(), _made_up_draft())]
    return out + ([(_made_up(), NONE)] if with_none else [])


def _systems(own_draft=True):
    out = [hw(n) for n in NAMES] + [group(hw(n), k) for n in NAMES for k in (1, 4, 8)]
    if own_draft:
        out += [group(hw("H100 SXM"), 8, draft_n=1), group(hw("A100 80GB SXM"), 4, draft_n=1, per_layer=2e-5)]
    return out


def _ratio(b, L, k, t, d, g, first=1, c_round=0.0, passes=0, c_step=0.0):
    """The round over the plain step: at alpha 0 the speedup is plain / round."""
    return 1.0 / ref_speedup(b, L, 0.0, k, t, d, g, first, c_round, passes, c_step)


# ------------------------------------------------------------------------------------ A: round_cost_ratio
RATIO = "round_cost_ratio"


def _drawn(rng, systems, pairs, n, batches, contexts, k_hi):
    cases = []
    for g in systems:
        for _ in range(n):
            t, d = pairs[int(rng.integers(len(pairs)))]
            b, L, k = int(rng.choice(batches)), int(rng.choice(contexts)), int(rng.integers(1, k_hi + 1))
            if ref_fits(t[1], d[1], g[1], b, L):
                cases.append((b, L, k, t, d, g))
    return cases


def test_round_cost_ratio(probe, rng):
    cases = _drawn(
        rng, _systems(own_draft=False), _pairs(), 12, [1, 8, 32, 64, 128, 256, 512], [0, 64, 256, 1024, 4096, 16384], 10
    )
    free = [
        (1, L, k, t, NONE, g)
        for t, g, L, k in (
            (model("Llama-3.1-8B"), H100(), 0, 3),
            (model("Llama-3.1-8B"), hw("L4"), int(rng.integers(1, 4096)), 5),
            (_made_up(), hw("H200 SXM"), 700, int(rng.integers(1, 9))),
        )
    ]
    terms = []
    for g in (attained(H100(), 0.85, 0.7, 2e-3), group(attained(H100(), 0.9, 0.75, 1e-3), 8)):
        t, d = (
            (model("Llama-3.1-70B"), model("Llama-3.1-8B"))
            if _is_group(g[1])
            else (model("Llama-3.1-8B"), model("Llama-3.2-1B"))
        )
        for b, L, k in ((1, 512, 4), (64, 1024, 3), (256, 1274, 4), (32, 0, 7)):
            if not ref_fits(t[1], d[1], g[1], b, L):
                continue
            for sent, ref in (
                ((1, 0.0, 0), (1, 0.0, 0)),
                ((k + 2, 0.0, 0), (k + 2, 0.0, 0)),
                ((VLLM, 0.0, 0), (k + 2, 0.0, 0)),
                ((1, 2e-3, 0), (1, 2e-3, 0)),
                ((1, 0.0, 3), (1, 0.0, 3)),
                ((VLLM, 1e-3, 3), (k + 2, 1e-3, 3)),
                ((1, 0.0, 0, 1.2e-3), (1, 0.0, 0, 1.2e-3)),
                ((VLLM, 1e-3, 3, 2e-3), (k + 2, 1e-3, 3, 2e-3)),
            ):
                terms.append(((b, L, k, t, d, g), sent, ref))
    answers = probe.many(
        RATIO,
        [((b, L, k, t[0], d[0], g[0]), {}) for b, L, k, t, d, g in cases + free]
        + [((b, L, k, t[0], d[0], g[0]) + sent, {}) for (b, L, k, t, d, g), sent, _ in terms],
    )
    for (b, L, k, t, d, g), answer in zip(cases, answers):
        got = value_of(answer, "rule: return a plain float")
        if type(got) is not float:
            raise Broken("rule: return a plain float", describe(answer))
        want = _ratio(b, L, k, t[1], d[1], g[1])
        if not abs(got - want) <= 1e-9 * got:
            raise AssertionError("rule: other hardware, models, batch, context and k ((k x draft + verify) / plain)")
        a = float(rng.uniform(0, 1))
        if not abs(ref_speedup(b, L, a, k, t[1], d[1], g[1]) - _e(a, k) / got) <= 1e-9 * got:
            raise AssertionError("rule: speedup = E[T] / cost ratio")
    rule = "rule: a free drafter at batch 1 on one GPU costs exactly one step"
    for answer in answers[len(cases) : len(cases) + len(free)]:
        if value_of(answer, rule) != 1.0:
            raise Broken(rule, describe(answer))
    rule = (
        "rule: the round's own terms as in spec_speedup (first pass, c_round, the sampler in every forward, c_step in "
        "the round and in the plain step)"
    )
    for ((b, L, k, t, d, g), _, ref), answer in zip(terms, answers[len(cases) + len(free) :]):
        want = _ratio(b, L, k, t[1], d[1], g[1], *ref)
        if not abs(number_of(answer, rule) - want) <= 1e-9 * want:
            raise AssertionError(rule)


def test_round_cost_ratio_draft_gpus(probe, rng):
    l70, l8, l1 = model("Llama-3.1-70B"), model("Llama-3.1-8B"), model("Llama-3.2-1B")
    g = group(H100(), 8, draft_n=1)
    cases = [
        (b, L, k, t, d, g) for t, d, b, L, k in ((l70, l1, 1, 1024, 4), (l70, l8, 64, 4096, 3), (l70, l8, 16, 0, 6))
    ]
    cases += _drawn(
        rng,
        [g, group(hw("A100 80GB SXM"), 4, draft_n=1, per_layer=2e-5)],
        _pairs(with_none=False),
        12,
        [1, 8, 32, 64, 128, 256, 512],
        [0, 64, 256, 1024, 4096, 16384],
        10,
    )
    rule = "rule: the draft runs on draft_gpus(gpu) (its own TP size)"
    for (b, L, k, t, d, g_), answer in zip(
        cases, probe.many(RATIO, [((b, L, k, t[0], d[0], g_[0]), {}) for b, L, k, t, d, g_ in cases])
    ):
        want = _ratio(b, L, k, t[1], d[1], g_[1])
        if not abs(number_of(answer, rule) - want) <= 1e-9 * want:
            raise AssertionError(rule)


def test_round_cost_ratio_bad_input(probe, rng):
    h100, l8, l1, l70 = H100(), model("Llama-3.1-8B"), model("Llama-3.2-1B"), model("Llama-3.1-70B")
    h8 = group(h100, 8)
    cases = [
        ((64, 32768, 4, l8[0], l1[0], h100[0]), ("batch",)),
        ((64, 32768, 4, l8[0], l1[0], h100[0]), ("context",)),
        ((300, 8192, 2, l70[0], l8[0], h8[0]), ("context",)),
        ((0, 0, 4, l8[0], l1[0], h100[0]), ("batch",)),
        ((1, -int(rng.integers(1, 99)), 4, l8[0], l1[0], h100[0]), ("context",)),
        ((1, 0, 0, l8[0], l1[0], h100[0]), ("k",)),
        ((1, 0, 2.5, l8[0], l1[0], h100[0]), ("k",)),
    ]
    kwargs = [
        ({"first_draft_tokens": 0}, "first_draft_tokens"),
        ({"c_round": -float(rng.uniform(1e-4, 1e-2))}, "c_round"),
        ({"sampler_passes": -int(rng.integers(1, 4))}, "sampler_passes"),
        ({"c_step": -float(rng.uniform(1e-4, 1e-2))}, "c_step"),
    ]
    answers = probe.many(
        RATIO, [(args, {}) for args, _ in cases] + [((1, 0, 4, l8[0], l1[0], h100[0]), kw) for kw, _ in kwargs]
    )
    value_errors(
        answers[: len(cases)],
        [names for _, names in cases],
        "rule: bad input (a state that does not fit, batch < 1, context < 0, k not an integer >= 1) must raise "
        "ValueError",
        "rule: bad input: the ValueError message names the argument",
    )
    value_errors(
        answers[len(cases) :],
        [name for _, name in kwargs],
        "rule: bad input (first_draft_tokens not an integer >= 1, c_round, sampler_passes or c_step < 0) must "
        "raise ValueError",
        "rule: bad input: the ValueError message names the argument",
    )


# ------------------------------------------------------------------------------------ B: break_even_alpha
ALPHA = "break_even_alpha"


def _alpha(k, cr):
    if cr <= 1:
        return 0.0
    lo, hi = 0.0, 1.0
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if _e(mid, k) >= cr else (mid, hi)
    return hi


def test_break_even_alpha(probe, rng):
    drawn = []
    for _ in range(80):
        k = int(rng.integers(1, 17))
        drawn.append((k, float(rng.uniform(1.0, k + 1.0))))
    models = []
    for b, L, k, t, d, g in _drawn(rng, _systems(), _pairs(), 5, [1, 32, 128, 200, 256], [0, 100, 512, 2048], 8):
        cr = _ratio(b, L, k, t[1], d[1], g[1])
        if 1 < cr <= k + 1 - 1e-6:  # a ratio <= 1: the next cell; at k + 1 (a free drafter when even the
            models.append((k, cr))  # verify is compute-bound): test_break_even_alpha_top's, to 1e-7
    small = [(k, cr) for k in (1, 4, 9) for cr in (0.5, 1.0)]
    answers = probe.many(ALPHA, [(c, {}) for c in drawn + models + small + [(1, 1.5)]])
    plain_rule = "rule: return a plain float"
    for (k, cr), answer in zip(drawn, answers):
        got = value_of(answer, plain_rule)
        if type(got) is not float:
            raise Broken(plain_rule, describe(answer))
        if not abs(got - _alpha(k, cr)) <= 2e-9:
            raise AssertionError("rule: other k and cost ratios (accurate to 1e-9)")
        if not _e(got, k) >= cr - 1e-7:
            raise AssertionError("rule: E[T] at the returned alpha reaches the cost ratio")
    rule = "rule: cost ratios of the step model on other hardware"
    for (k, cr), answer in zip(models, answers[len(drawn) :]):
        if not abs(number_of(answer, rule) - _alpha(k, cr)) <= 2e-9:
            raise AssertionError(rule)
    for answer in answers[len(drawn) + len(models) : -1]:
        if type(value_of(answer, plain_rule)) is not float:
            raise Broken(plain_rule, describe(answer))
    rule = "rule: k 1: E = 1 + alpha"
    if not abs(number_of(answers[-1], rule) - 0.5) <= 2e-9:
        raise AssertionError(rule)


def test_break_even_alpha_zero(probe, rng):
    rule = "rule: a cost ratio <= 1 needs alpha 0.0"
    cases = [
        (k, cr) for k in (1, 4, int(rng.integers(5, 17))) for cr in (0.5, 1.0, 0.01, float(rng.uniform(0.02, 1.0)))
    ]
    for answer in probe.many(ALPHA, [(c, {}) for c in cases]):
        if number_of(answer, rule) != 0.0:
            raise AssertionError(rule)


def test_break_even_alpha_top(probe, rng):
    rule = "rule: only alpha 1 reaches k + 1"
    for answer in probe.many(ALPHA, [((k, k + 1.0), {}) for k in (1, 4, 9, int(rng.integers(10, 17)))]):
        if not abs(number_of(answer, rule) - 1.0) <= 1e-7:
            raise AssertionError(rule)


def test_break_even_alpha_bad_input(probe, rng):
    k = int(rng.integers(2, 9))
    bad = [
        ((0, 1.5), "k"),
        ((-int(rng.integers(1, 5)), 1.5), "k"),
        ((2.5, 1.5), "k"),
        ((1, 2.0000001), "cost_ratio"),
        ((k, k + 1.5), "cost_ratio"),
        ((4, -float(rng.uniform(0.1, 2))), "cost_ratio"),
        ((4, 0.0), "cost_ratio"),
    ]
    order = rng.permutation(len(bad)).tolist()
    value_errors(
        probe.many(ALPHA, [(bad[i][0], {}) for i in order]),
        [bad[i][1] for i in order],
        "rule: bad input (k not an integer >= 1, cost_ratio <= 0 or above k + 1) must raise ValueError",
        "rule: bad input: the ValueError message names the argument",
    )


# ----------------------------------------------------------------------------------- C: speedup_from_times, check_claim
TIMES, CLAIM = "speedup_from_times", "check_claim"


def test_speedup_from_times(probe, rng):
    cases = [
        (
            float(rng.uniform(0, 1)),
            int(rng.integers(1, 13)),
            float(10 ** rng.uniform(-4, -1)),
            float(10 ** rng.uniform(-4, -1)),
        )
        for _ in range(100)
    ]
    edges = [
        ((1.0, 4, 1.0, 1.0), 5.0, "rule: alpha 1 gives k + 1 tokens per round"),
        ((0.0, 4, 1.0, 2.0), 0.5, "rule: alpha 0 gives one token per round"),
    ]
    answers = probe.many(TIMES, [(c, {}) for c in cases] + [(args, {}) for args, _, _ in edges])
    rule = "rule: other alpha, k and times (E[T] x plain / round)"
    for (a, k, p, r), answer in zip(cases, answers):
        got, want = value_of(answer, rule), _e(a, k) * p / r
        if not (type(got) is float and abs(got - want) <= 1e-9 * want):
            raise Broken(rule, describe(answer) if type(got) is not float else "")
    for (_, want, rule), answer in zip(edges, answers[len(cases) :]):
        if value_of(answer, rule) != want:
            raise Broken(rule, describe(answer))


def test_speedup_from_times_bad_input(probe, rng):
    p, r = float(rng.uniform(1e-3, 1e-2)), float(rng.uniform(1e-3, 1e-2))
    bad = [
        ((0.8, 4, 0.0, r), "plain_step_s"),
        ((0.8, 4, -p, r), "plain_step_s"),
        ((0.8, 4, p, -r), "round_s"),
        ((float(rng.uniform(1.01, 2)), 4, p, r), "alpha"),
        ((0.8, 0, p, r), "k"),
    ]
    answered(probe.many(TIMES, [((0.8, 4, p, r), {})]))
    order = rng.permutation(len(bad)).tolist()
    value_errors(
        probe.many(TIMES, [(bad[i][0], {}) for i in order]),
        [bad[i][1] for i in order],
        "rule: bad input (times <= 0, alpha or k out of range) must raise ValueError",
        "rule: bad input: the ValueError message names the argument",
    )


def test_check_claim(probe, rng):
    cases = [
        (0.6, 4, 8.5e-3, (15e-3, 18e-3), 0.05),
        (0.6, 4, 8.47e-3, (16.0e-3, 22.1e-3), 0.05),
        (0.7, 3, 5e-3, (9e-3, 9e-3), 0.1),
    ]
    for _ in range(40):
        k = int(rng.integers(1, 9))
        p = float(rng.uniform(2e-3, 20e-3))
        lo = p * float(rng.uniform(1.0, 2.5))
        cases.append(
            (
                float(rng.uniform(0, 1)),
                k,
                p,
                (lo, lo * float(rng.uniform(1.0, 1.6))),
                float(rng.choice([0.02, 0.05, 0.1])),
            )
        )
    cases += [
        (0.9, 2, 4e-3, (10e-3, 14e-3), 0.05),
        (0.5, 1, 5e-3, (8e-3, 12e-3), 0.05),
        (0.8, 4, 2e-3, (12e-3, 16e-3), 0.1),
    ]
    answers = probe.many(CLAIM, [((a, k, p, rr), {"tolerance": tol}) for a, k, p, rr, tol in cases])
    none_rule = "rule: a round costing more than k + 1 plain steps: its break-even alpha is None (no alpha pays)"
    asked = {}

    def own(name, i):
        """Case i's two values by the learner's own break_even_alpha or speedup_from_times, which check_claim calls
        (asked for every case at the first need): a slip there is that function's cells', not this one's."""
        if name not in asked:
            calls = [((k, r / p) if name == ALPHA else (a, k, p, r), {}) for a, k, p, rr, _ in cases for r in rr]
            values = own_numbers(probe.many(name, calls))
            asked[name] = [values[2 * j : 2 * j + 2] for j in range(len(cases))]
        return asked[name][i]

    def close(got, want, tol, absolute=False):
        return all(w is not None and abs(g - w) <= (tol if absolute else tol * abs(w)) for g, w in zip(got, want))

    for i, ((a, k, p, rr, tol), answer) in enumerate(zip(cases, answers)):
        got = value_of(answer, "rule: cost ratios = round / plain step")
        try:
            alphas, speedups, ratios_got = (
                list(got["break_even_alphas"]),
                [float(x) for x in got["speedups"]],
                [float(x) for x in got["cost_ratios"]],
            )
        except (TypeError, KeyError, ValueError):
            raise Broken("rule: cost ratios = round / plain step", describe(answer)) from None
        for g, r in zip(alphas, rr):
            if r / p > k + 1 and g is not None:
                raise AssertionError(none_rule)
        if max(rr) / p > k + 1:
            if not all(abs(g - _e(a, k) * p / r) <= 1e-9 * g for g, r in zip(speedups, rr)):
                if not close(speedups, own(TIMES, i), 1e-9):
                    raise AssertionError(none_rule)
            continue
        ratios = tuple(r / p for r in rr)
        speeds = tuple(_e(a, k) / x for x in ratios)
        if not all(abs(g - w) <= 1e-9 * w for g, w in zip(ratios_got, ratios)):
            raise AssertionError("rule: cost ratios = round / plain step")
        try:
            values = [float(g) for g in alphas]
        except (TypeError, ValueError):
            raise AssertionError("rule: break-even alphas from break_even_alpha") from None
        if not close(values, [_alpha(k, w) for w in ratios], 1e-6, True) and not close(
            values, own(ALPHA, i), 1e-6, True
        ):
            raise AssertionError("rule: break-even alphas from break_even_alpha")
        if not close(speedups, speeds, 1e-9):
            if not close(speedups, own(TIMES, i), 1e-9):
                raise AssertionError("rule: speedups from speedup_from_times")
            speeds = own(TIMES, i)  # roughly break-even on the learner's own speedups
        want = min(speeds) <= 1 + tol and max(speeds) >= 1 - tol
        if not (type(got.get("roughly_break_even")) is bool and got["roughly_break_even"] == want):
            raise AssertionError("rule: roughly break-even when the speedup range overlaps 1 +- tolerance")


def test_check_claim_bad_input(probe, rng):
    p = float(rng.uniform(2e-3, 2e-2))
    bad = [
        ((0.6, 4, p, (2 * p, 1.5 * p)), "round_s_range"),
        ((0.6, 4, p, (0.0, 2 * p)), "round_s_range"),
        ((0.6, 4, 0.0, (1.5 * p, 2 * p)), "plain_step_s"),
    ]
    answered(probe.many(CLAIM, [((0.6, 4, p, (1.5 * p, 2 * p)), {})]))
    order = rng.permutation(len(bad)).tolist()
    value_errors(
        probe.many(CLAIM, [(bad[i][0], {}) for i in order]),
        [bad[i][1] for i in order],
        "rule: bad input (round_s_range not (shortest, longest) > 0, plain_step_s <= 0) must raise ValueError",
        "rule: bad input: the ValueError message names the argument",
    )


# ------------------------------------------------------------------------------------ D: should_speculate, best_k
SHOULD, BEST = "should_speculate", "best_k_for_batch"


def test_should_speculate(probe, rng):
    cases = []
    for b, L, k, t, d, g in _drawn(
        rng, _systems(), _pairs(), 12, [1, 16, 64, 128, 256, 512], [0, 128, 256, 1024, 8192], 8
    ):
        a = float(rng.uniform(0, 1))
        s = ref_speedup(b, L, a, k, t[1], d[1], g[1])
        if not abs(s - 1) < 1e-9:
            cases.append(((b, L, a, k, t, d, g), s))
    h100, l8, l1 = H100(), model("Llama-3.1-8B"), model("Llama-3.2-1B")
    g = attained(h100, 0.85, 0.7, 2e-3)
    terms = []
    for b, L in ((1, 0), (64, 512), (128, 1024), (192, 1274), (256, 1274), (256, 256)):
        for sent, ref in (
            ((VLLM, 0.0, 0), (6, 0.0, 0)),
            ((1, 3e-3, 0), (1, 3e-3, 0)),
            ((1, 0.0, 3), (1, 0.0, 3)),
            ((VLLM, 1e-3, 3), (6, 1e-3, 3)),
            ((1, 0.0, 0, 1.2e-3), (1, 0.0, 0, 1.2e-3)),
            ((VLLM, 0.0, 0, 1.2e-3), (6, 0.0, 0, 1.2e-3)),
        ):
            terms.append(((b, L), sent, ref_speedup(b, L, 0.8, 4, l8[1], l1[1], g[1], *ref)))
    bad = [
        ((256, 4096, 0.8, 4, l8[0], l1[0], h100[0]), "context"),
        ((0, 0, 0.8, 4, l8[0], l1[0], h100[0]), "batch"),
        ((1, 0, -float(rng.uniform(0.1, 1)), 4, l8[0], l1[0], h100[0]), "alpha"),
    ]
    answers = probe.many(
        SHOULD,
        [((b, L, a, k, t[0], d[0], g_[0]), {}) for (b, L, a, k, t, d, g_), _ in cases]
        + [((1, 0, 0.0, 4, l8[0], None, h100[0]), {})]
        + [((b, L, 0.8, 4, l8[0], l1[0], g[0]) + sent, {}) for (b, L), sent, _ in terms]
        + [(args, {}) for args, _ in bad],
    )
    rule = "rule: other hardware, models, states, alpha and k: True exactly where the speedup is above 1"
    for (_, s), answer in zip(cases, answers):
        got = value_of(answer, "rule: return a plain bool")
        if type(got) is not bool:
            raise Broken("rule: return a plain bool", describe(answer))
        if got != (s > 1):
            raise AssertionError(rule)
    n = len(cases)
    if value_of(answers[n], "rule: a tie (speedup exactly 1) is not worth it") is not False:
        raise Broken("rule: a tie (speedup exactly 1) is not worth it", describe(answers[n]))
    for (_, _, s), answer in zip(terms, answers[n + 1 :]):
        if value_of(answer, TERMS_RULE) != (s > 1):
            raise Broken(TERMS_RULE, describe(answer) if answer[0] != "value" else "")
    value_errors(
        answers[n + 1 + len(terms) :],
        [name for _, name in bad],
        "rule: bad input (a state that does not fit, batch < 1, alpha outside [0, 1]) must raise ValueError",
        "rule: bad input: the ValueError message names the argument",
    )


def test_best_k_for_batch(probe, rng):
    cases = []
    for g in _systems():
        pairs = _pairs()
        for _ in range(8):
            t, d = pairs[int(rng.integers(len(pairs)))]
            b, L = int(rng.choice([1, 8, 64, 128, 256, 512])), int(rng.choice([0, 256, 2048, 8192]))
            a, km = float(rng.uniform(0, 1)), int(rng.integers(1, 13))
            if ref_fits(t[1], d[1], g[1], b, L):
                cases.append((b, L, a, t, d, g, km))
    h100, l8, l1 = H100(), model("Llama-3.1-8B"), model("Llama-3.2-1B")
    km = int(rng.integers(2, 9))
    edges = [
        ((1, 0, 0.0, l8[0], None, h100[0]), {}, 0, "rule: alpha 0 with a free drafter gives exactly 1x: off"),
        ((1, 0, 1.0, l8[0], None, h100[0]), {"k_max": km}, km, "rule: alpha 1 with a free drafter: the longest k"),
    ]
    g = attained(h100, 0.85, 0.7, 2e-3)
    terms = []
    for b, L, a in ((1, 0, 0.8), (16, 512, 0.7), (128, 1024, 0.8), (256, 1274, 0.9)):
        for sent, ref in (
            ((VLLM, 0.0, 0), ("vllm", 0.0, 0)),
            ((1, 3e-3, 0), (1, 3e-3, 0)),
            ((1, 0.0, 3), (1, 0.0, 3)),
            ((VLLM, 1e-3, 3), ("vllm", 1e-3, 3)),
            ((1, 0.0, 0, 1.2e-3), (1, 0.0, 0, 1.2e-3)),
            ((VLLM, 0.0, 0, 1.2e-3), ("vllm", 0.0, 0, 1.2e-3)),
        ):
            values = [
                ref_speedup(b, L, a, k, l8[1], l1[1], g[1], k + 2 if ref[0] == "vllm" else ref[0], *ref[1:])
                for k in range(1, 9)
            ]
            terms.append(
                ((b, L, a) + (l8[0], l1[0], g[0], 8) + sent, values.index(max(values)) + 1 if max(values) > 1 else 0)
            )
    answers = probe.many(
        BEST,
        [((b, L, a, t[0], d[0], g_[0]), {"k_max": km_}) for b, L, a, t, d, g_, km_ in cases]
        + [(args, kw) for args, kw, _, _ in edges]
        + [(args, {}) for args, _ in terms],
    )
    for (b, L, a, t, d, g_, km_), answer in zip(cases, answers):
        got = value_of(answer, "rule: return a plain int in 0..k_max")
        if not (type(got) is int and 0 <= got <= km_):
            raise Broken("rule: return a plain int in 0..k_max", describe(answer))
        values = [ref_speedup(b, L, a, k, t[1], d[1], g_[1]) for k in range(1, km_ + 1)]
        top = max(values)
        if top <= 1 - 1e-9 and got != 0:
            raise AssertionError("rule: 0 (off) when no k pays")
        if top > 1 + 1e-9:
            if not (got >= 1 and values[got - 1] >= top * (1 - 1e-9)):
                raise AssertionError("rule: other hardware, models, states and alpha: the k with the highest speedup")
            first = next(i + 1 for i, v in enumerate(values) if v >= top * (1 - 1e-9))
            if not (got == first or values[first - 1] < top * (1 - 1e-12)):
                raise AssertionError("rule: ties go to the smallest k")
    n = len(cases)
    for (_, _, want, rule), answer in zip(edges, answers[n : n + len(edges)]):
        if value_of(answer, rule) != want:
            raise Broken(rule, describe(answer) if answer[0] != "value" else "")
    for (_, want), answer in zip(terms, answers[n + len(edges) :]):
        if value_of(answer, TERMS_RULE) != want:
            raise Broken(TERMS_RULE, describe(answer) if answer[0] != "value" else "")


def test_best_k_for_batch_bad_input(probe, rng):
    h100, l8, l1 = H100(), model("Llama-3.1-8B"), model("Llama-3.2-1B")
    base = (l8[0], l1[0], h100[0])
    bad = [
        ((1, 0, 0.8) + base + (0,), "k_max"),
        ((1, 0, 0.8) + base + (1.5,), "k_max"),
        ((0, 0, 0.8) + base, "batch"),
        ((1, 0, float(rng.uniform(1.01, 3))) + base, "alpha"),
        ((int(rng.integers(256, 400)), 4096, 0.8) + base, "context"),
    ]
    answered(probe.many(BEST, [((1, 0, 0.8) + base, {})]))
    order = rng.permutation(len(bad)).tolist()
    value_errors(
        probe.many(BEST, [(bad[i][0], {}) for i in order]),
        [bad[i][1] for i in order],
        "rule: bad input (k_max not an integer >= 1, batch < 1, alpha outside [0, 1], a state that does not fit) "
        "must raise ValueError",
        "rule: bad input: the ValueError message names the argument",
    )


# ------------------------------------------------------------------------------------ E: deployment_plan
PLAN = "deployment_plan"
TRAFFIC = ["code", "chat", "creative", "json", "summary"]


def _ref_plan(g, t, d, alphas, states, km, first=1, *rest):
    total = sum(states.values())
    out = {}
    for name, a in alphas.items():
        ks, ss = {}, {}
        for b, L in states:
            vals = [
                ref_speedup(b, L, a, k, t, d, g, first(k) if callable(first) else first, *rest)
                for k in range(1, km + 1)
            ]
            top = max(vals)
            ks[(b, L)] = vals.index(top) + 1 if top > 1 else 0
            ss[(b, L)] = top if top > 1 else 1.0
        out[name] = (ks, ss, 1 / sum(w / total / ss[s] for s, w in states.items()))
    return out


def _fleet_cases(rng, per_system):
    cases = []
    for g in _systems():
        for _ in range(per_system):
            pairs = _pairs()
            t, d = pairs[int(rng.integers(len(pairs)))]
            candidates = [
                (b, L)
                for b in (1, 4, 16, 64, 128, 256, 512)
                for L in (0, 256, 1024, 4096, 16384)
                if ref_fits(t[1], d[1], g[1], b, L)
            ]
            if not candidates:
                continue
            picked = rng.choice(len(candidates), min(len(candidates), int(rng.integers(1, 7))), replace=False)
            states = {candidates[i]: float(rng.uniform(0.01, 1)) for i in picked.tolist()}
            alphas = {
                str(n): float(rng.uniform(0, 1)) for n in rng.choice(TRAFFIC, int(rng.integers(1, 5)), replace=False)
            }
            cases.append((g, t, d, alphas, states, int(rng.integers(1, 9))))
    return cases


def _plan_of(answer, rule):
    got = value_of(answer, rule)
    if not isinstance(got, dict):
        raise Broken(rule, describe(answer))
    return got


def test_deployment_plan(probe, rng):
    cases = _fleet_cases(rng, 3)
    h100, l8, l1 = H100(), model("Llama-3.1-8B"), model("Llama-3.2-1B")
    g = attained(h100, 0.85, 0.7, 2e-3)
    states = {(1, 0): 0.3, (64, 512): 0.3, (256, 1274): 0.4}
    alphas = {"code": 0.8, "chat": float(rng.uniform(0.4, 0.7))}
    terms = [
        ((VLLM, 0.0, 0), (lambda k: k + 2, 0.0, 0)),
        ((1, 3e-3, 0), (1, 3e-3, 0)),
        ((1, 0.0, 3), (1, 0.0, 3)),
        ((VLLM, 1e-3, 3), (lambda k: k + 2, 1e-3, 3)),
        ((1, 0.0, 0, 1.2e-3), (1, 0.0, 0, 1.2e-3)),
        ((VLLM, 0.0, 0, 1.2e-3), (lambda k: k + 2, 0.0, 0, 1.2e-3)),
    ]
    answers = probe.many(
        PLAN,
        [((g_[0], t[0], d[0], al, st), {"k_max": km}) for g_, t, d, al, st, km in cases]
        + [((g[0], l8[0], l1[0], alphas, states, 8) + sent, {}) for sent, _ in terms],
    )
    pending = []  # (case, traffic, state, k, speedup, reference's): where the reference's best k does not give it
    for i, ((g_, t, d, al, st, km), answer) in enumerate(zip(cases, answers)):
        got = _plan_of(answer, "rule: one entry per traffic type")
        if set(got) != set(al):
            raise AssertionError("rule: one entry per traffic type")
        for name, (ks, ss, _) in _ref_plan(g_[1], t[1], d[1], al, st, km).items():
            try:
                gk_all, gs_all = got[name]["k"], got[name]["speedup"]
                ok = set(gk_all) == set(st) and set(gs_all) == set(st)
            except (TypeError, KeyError):
                ok = False
            if not ok:
                raise AssertionError("rule: one entry per state (batch, context)")
            for s in st:
                gk, gs = gk_all[s], gs_all[s]
                if not (type(gk) is int and type(gs) is float):
                    raise AssertionError("rule: k a plain int, speedup a plain float")
                if not abs(gs - ss[s]) <= 1e-9 * ss[s] or (ss[s] <= 1 + 1e-9 and gk != 0):
                    pending.append((i, name, s, gk, gs, ss[s]))
    speed_rule = "rule: other hardware, models, contexts and alpha: the speedup of the best k per state (1.0 when off)"
    # best_k_for_batch's slip is its own cells': the speedup at the learner's own best k, which deployment_plan
    # calls, also passes
    own = _own_ks(probe, [(cases[i][:3], cases[i][3][name], s, cases[i][5], ()) for i, name, s, _, _, _ in pending])
    for (i, name, s, gk, gs, want), k in zip(pending, own):
        g_, t, d, al, st, km = cases[i]
        if k is not None and gk == k:
            mine = ref_speedup(s[0], s[1], al[name], k, t[1], d[1], g_[1]) if k else 1.0
            if abs(gs - mine) <= 1e-9 * mine:
                continue
        if not abs(gs - want) <= 1e-9 * want:
            raise AssertionError(speed_rule)
        raise AssertionError("rule: k 0 where nothing pays")
    for (sent, ref), answer in zip(terms, answers[len(cases) :]):
        got = _plan_of(answer, TERMS_RULE)
        for name, (ks, ss, _) in _ref_plan(g[1], l8[1], l1[1], alphas, states, 8, *ref).items():
            if _plan_is(got, name, ks, ss, states):
                continue
            own = dict(zip(states, _own_ks(probe, [((g, l8, l1), alphas[name], s, 8, sent) for s in states])))
            if None not in own.values():
                first, *rest = ref
                mine = {
                    s: ref_speedup(
                        *s, alphas[name], k, l8[1], l1[1], g[1], first(k) if callable(first) else first, *rest
                    )
                    if k
                    else 1.0
                    for s, k in own.items()
                }
                if _plan_is(got, name, own, mine, states):
                    continue
            raise AssertionError(TERMS_RULE)


def _plan_is(got, name, ks, ss, states):
    """Whether the plan `got` gives traffic `name` the draft lengths `ks` and the speedups `ss` of every state."""
    try:
        return got[name]["k"] == ks and all(abs(float(got[name]["speedup"][s]) - ss[s]) <= 1e-9 * ss[s] for s in states)
    except (TypeError, KeyError, ValueError):
        return False


def _own_ks(probe, asks):
    """The learner's own best_k_for_batch, which deployment_plan calls, as plain ints (None where it gave no whole
    number) for asks ((gpu, target, draft) pairs, alpha, (batch, context), k_max, the round's terms sent)."""
    answers = probe.many(
        BEST, [((s[0], s[1], a, t[0], d[0], g[0], km) + tuple(sent), {}) for (g, t, d), a, s, km, sent in asks]
    )
    return [int(x) if x is not None and math.isfinite(x) and x == int(x) else None for x in own_numbers(answers)]


def test_deployment_plan_fleet(probe, rng):
    cases = _fleet_cases(rng, 1)
    rule = "rule: fleet speedup = 1 / sum(share / speedup), shares normalised"
    answers = probe.many(PLAN, [((g[0], t[0], d[0], al, st), {"k_max": km}) for g, t, d, al, st, km in cases])
    for (_, _, _, al, st, _), answer in zip(cases, answers):
        got = _plan_of(answer, rule)
        total = sum(st.values())
        for name in al:  # the plan's own per-state speedups (the cell above checks them)
            try:
                fleet = 1 / sum(w / total / float(got[name]["speedup"][s]) for s, w in st.items())
                gf = got[name]["fleet_speedup"]
            except (TypeError, KeyError, ValueError, ZeroDivisionError):
                raise Broken(rule, describe(answer)) from None
            if not (type(gf) is float and abs(gf - fleet) <= 1e-9 * fleet):
                raise AssertionError(rule)


def test_deployment_plan_bad_input(probe, rng):
    h100, l8, l1, l70 = H100(), model("Llama-3.1-8B"), model("Llama-3.2-1B"), model("Llama-3.1-70B")
    base = (h100[0], l8[0], l1[0])
    a = float(rng.uniform(0.1, 0.9))
    bad = [
        (base + ({}, {(1, 0): 1.0}), "alphas"),
        (base + ({"x": float(rng.uniform(1.01, 2))}, {(1, 0): 1.0}), "alphas"),
        (base + ({"x": a}, {}), "states"),
        (base + ({"x": a}, {(1, 0): -0.5, (2, 0): 1.0}), "states"),
        (base + ({"x": a}, {(1, 0): 0.0}), "states"),
        (base + ({"x": a}, {(1, 0): 0.5, (256, 4096): 0.5}), "states"),
        (base + ({"x": a}, {(1, 0): 0.5, (256, 4096): 0.5}), "context"),
        ((group(h100, 8)[0], l70[0], l8[0], {"x": a}, {(512, 8192): 1.0}), "batch"),
    ]
    order = rng.permutation(len(bad)).tolist()
    value_errors(
        probe.many(PLAN, [(bad[i][0], {}) for i in order]),
        [bad[i][1] for i in order],
        "rule: bad input (alphas or states empty or out of range, a state that does not fit) must raise ValueError",
        "rule: bad input: the ValueError message names the argument",
    )


JUDGES = {name: fn for name, fn in globals().items() if name.startswith("test_") and callable(fn)}
