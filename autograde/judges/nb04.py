"""Notebook 04's hidden tests as judges: every test cell (`verify` and `speculative_generate`).

The rules and their wording are the notebook's hidden tests' (docs/contract.md lists them); the inputs are drawn
from the grader's generator: the probabilities, drafts and seeds of `verify`'s rounds, the prompts, k, lengths,
temperatures and the random model pairs of `speculative_generate`. The kernel gets plain data and recipes
(``autograde.judge.Build``); the judge builds its own copy of every model (the course's pair from data/models,
the random pairs from the same recipes) and computes every reference and statistic here, on the raw answers.
"""

from __future__ import annotations

import functools
import math
import threading

import numpy as np

from autograde.judge import (
    Broken,
    Tensor,
    build,
    copy_of,
    counted,
    describe,
    double,
    generator,
    kind_of,
    named,
    noisy,
    rows,
    seeds,
    sharp,
    tensor,
    tiny_llama as tiny,
    value_errors,
    value_of,
)

VERIFY, GENERATE = "verify", "speculative_generate"
# chi-square critical values at significance 1e-6 (df = cells - 1): a correct answer fails one in a million
_CRIT = {1: 23.928, 2: 27.631, 3: 30.665, 4: 33.377, 5: 35.888}


_LOCK = threading.Lock()


def _pair():
    """The judge's own copy of the course's pair (data/models), and its tokenizer (loaded once per process)."""
    with _LOCK:
        return _load_pair()


@functools.lru_cache(maxsize=1)
def _load_pair():
    import torch

    from specdec.core.models import load_pair

    torch.set_num_threads(1)
    return load_pair()


def warm():
    """Load what the judges need (torch, the pair, scipy's chi-square) while the kernel starts and runs the
    notebook, so that the first judged cell does not wait for it."""
    _pair()
    import scipy.stats  # noqa: F401

    from specdec.core.decoding import greedy_generate  # noqa: F401


def _names():
    target, draft, _ = _pair()
    return {"target": target, "draft": draft}


def _torch():
    import torch

    return torch


# ------------------------------------------------------------------------------------------ verify
def _round(answer, rule="rule: new_tokens is a 1-D LongTensor of n_accepted + 1 tokens"):
    """(ids, n) from verify's answer, or the rule's failure."""
    got = value_of(answer, rule)
    if not (isinstance(got, tuple) and len(got) == 2):
        raise Broken("rule: new_tokens is a 1-D LongTensor", describe(answer))
    new, n = got
    if not (isinstance(new, Tensor) and new.kind == "torch" and new.dtype == "int64" and len(new.shape) == 1):
        raise Broken("rule: new_tokens is a 1-D LongTensor", "returned new_tokens as " + kind_of(new))
    if type(n) is not int:
        raise Broken("rule: n_accepted is a plain int in [0, k]", "returned n_accepted as " + kind_of(n))
    return list(new.values), n


def _probs(rng, rows, V, sharpness, floor=0.0):
    x = rng.random((rows, V)) ** sharpness + floor
    return x / x.sum(axis=-1, keepdims=True)


def _t(x, dtype="float32"):
    torch = _torch()
    return torch.tensor(np.asarray(x), dtype=getattr(torch, dtype))


def _one_hot(ids, V):
    return _t(np.eye(V)[ids])


def test_verify_greedy_by_hand(probe, rng):
    calls, want = [], []
    for trial in range(200):
        V, k = int(rng.integers(3, 9)), int(rng.integers(1, 8))
        a = [int(x) for x in rng.integers(0, V, k + 1)]  # target argmaxes
        d = [a[i] if rng.random() < 0.6 else int(rng.integers(0, V)) for i in range(k)]  # draft argmaxes
        n = next((i for i in range(k) if d[i] != a[i]), k)
        gen = generator(int(rng.integers(0, 2**31))) if trial % 2 else None
        calls.append(((tensor(_one_hot(a, V)), tensor(_one_hot(d, V)), tensor(_t(d, "int64")), gen), {}))
        want.append((d[:n] + [a[n]], n))
    for answer, (ids, n) in zip(probe.many(VERIFY, calls), want):
        got_ids, got_n = _round(answer)
        if got_n != n:
            raise AssertionError(
                "rule: greedy (one-hot) rounds: accept while the argmaxes agree (n_accepted a plain int)"
            )
        if got_ids != ids:
            raise AssertionError("rule: greedy (one-hot) rounds: the accepted drafts, then the target's argmax")


def test_verify_greedy_by_hand_accept(probe, rng):
    """A draft with p(x) >= q(x) is always accepted; the bonus then comes from p[k] (here one-hot)."""
    calls, want = [], []
    for _ in range(40):
        V = int(rng.integers(3, 9))
        x, b = int(rng.integers(0, V)), int(rng.integers(0, V))
        p0, q0 = _probs(rng, 2, V, float(rng.uniform(1, 3)), 0.02)
        if p0[x] < q0[x]:
            p0, q0 = q0, p0  # p(x) >= q(x)
        pt, qt = _t(np.stack([p0, np.eye(V)[b]])), _t([q0])
        if float(pt[0, x]) < float(qt[0, x]):  # float32 rounding: skip
            continue
        calls.append(((tensor(pt), tensor(qt), tensor(_t([x], "int64")), generator(int(rng.integers(0, 2**31)))), {}))
        want.append([x, b])
    for answer, ids in zip(probe.many(VERIFY, calls), want):
        got_ids, n = _round(answer)
        if n != 1 or got_ids != ids:
            raise AssertionError("rule: accept with probability min(1, p/q) (here 1), then a bonus token from p[k]")


def test_verify_edge_cases(probe, rng):
    calls, cases = [], []
    for _ in range(100):  # alpha = 0: p on one set of tokens, q on the rest
        V = int(rng.integers(3, 9))
        cut = int(rng.integers(1, V))
        order = rng.permutation(V)
        on_p, on_q = sorted(int(i) for i in order[:cut]), sorted(int(i) for i in order[cut:])
        p0, q0 = np.zeros(V), np.zeros(V)
        p0[on_p], q0[on_q] = rng.random(len(on_p)) + 0.1, rng.random(len(on_q)) + 0.1
        p = np.stack([p0 / p0.sum(), _probs(rng, 1, V, 1.0, 0.01)[0]])
        x = int(rng.choice(on_q))
        calls.append(
            (
                (
                    tensor(_t(p)),
                    tensor(_t([q0 / q0.sum()])),
                    tensor(_t([x], "int64")),
                    generator(int(rng.integers(0, 2**31))),
                ),
                {},
            )
        )
        cases.append(("disjoint", on_p))
    for j in range(300):
        V, k = int(rng.integers(3, 9)), int(rng.integers(1, 8))
        p, q = _probs(rng, k + 1, V, float(rng.uniform(1, 4))), _probs(rng, k, V, float(rng.uniform(1, 3)))
        if j % 3 == 0:
            p[:k] = q  # alpha = 1
        d = [int(rng.choice(V, p=q[i] / q[i].sum())) for i in range(k)]
        seed = int(rng.integers(0, 2**31))
        args = (tensor(_t(p)), tensor(_t(q)), tensor(_t(d, "int64")), generator(seed))
        calls += [(args, {}), (args, {})]  # the same seed twice
        cases.append(("random", (_t(p), _t(q), d, j % 3 == 0)))
    answers = probe.many(VERIFY, calls)
    i = 0
    for kind, case in cases:
        if kind == "disjoint":
            ids, n = _round(answers[i])
            i += 1
            if not (n == 0 and len(ids) == 1 and ids[0] in case):
                raise AssertionError(
                    "rule: p(x) = 0 never accepts x; the correction comes from the residual max(0, p - q)"
                )
            continue
        (ids, n), (again, n2) = _round(answers[i]), _round(answers[i + 1])
        i += 2
        p, q, d, same = case
        k = len(d)
        if not 0 <= n <= k:
            raise AssertionError("rule: n_accepted is a plain int in [0, k]")
        if len(ids) != n + 1:
            raise AssertionError("rule: new_tokens is a 1-D LongTensor of n_accepted + 1 tokens")
        if ids[:n] != d[:n]:
            raise AssertionError("rule: new_tokens starts with the n_accepted accepted drafts")
        if again != ids or n2 != n:
            raise AssertionError("rule: every random draw comes from generator (same seed, same result)")
        t = ids[n]
        if same and n != k:
            raise AssertionError("rule: p == q accepts every draft (min(1, p/q) = 1)")
        if not 0 <= t < p.shape[1]:
            raise AssertionError("rule: a correction is sampled from the residual max(0, p - q)")
        if n < k and not float(p[n, t]) > float(q[n, t]):
            raise AssertionError("rule: a correction is sampled from the residual max(0, p - q)")
        if n == k and not float(p[k, t]) > 0:
            raise AssertionError("rule: the bonus token is sampled from p[k]")


def _chi2_ok(counts, probs):
    total = sum(counts)
    stat = sum((c - total * pr) ** 2 / (total * pr) for c, pr in zip(counts, probs))
    return stat < _CRIT[len(probs) - 1]


def _sampled_rounds(probe, rng, V, k, n_draws=4000):
    """n_draws rounds of verify on one drawn (p, q), drafts drawn here from q: the first output token follows
    p[0], the next (after an accepted first draft) p[1], and the first draft is accepted with probability alpha."""
    p = _probs(rng, k + 1, V, float(rng.uniform(1, 3)), 0.02)
    q = _probs(rng, k, V, float(rng.uniform(1, 4)), 0.02)
    pt, qt = _t(p), _t(q)
    p64, q64 = pt.double().numpy(), qt.double().numpy()
    p64, q64 = p64 / p64.sum(-1, keepdims=True), q64 / q64.sum(-1, keepdims=True)
    drafts = np.stack([rng.choice(V, n_draws, p=q64[i]) for i in range(k)], axis=1)  # (n_draws, k), row i ~ q[i]
    draws = [int(x) for x in rng.integers(0, 2**31, n_draws)]
    first, second, n_first = [0] * V, [0] * V, 0
    for answer in probe.map(VERIFY, n_draws, (tensor(pt), tensor(qt), rows(tensor(_t(drafts, "int64"))), seeds(draws))):
        ids, n = _round(answer)
        if not (len(ids) == n + 1 and all(0 <= t < V for t in ids)):
            raise AssertionError("rule: sampling: the first output token is distributed as p[0] (other p, q and k)")
        first[ids[0]] += 1
        if n >= 1:
            n_first += 1
            second[ids[1]] += 1
    alpha = float(np.minimum(p64[0], q64[0]).sum())
    if not _chi2_ok(first, p64[0]):
        raise AssertionError("rule: sampling: the first output token is distributed as p[0] (other p, q and k)")
    if n_first and not _chi2_ok(second, p64[1]):
        raise AssertionError("rule: sampling: after an accepted first draft, the next token is distributed as p[1]")
    if not abs(n_first / n_draws - alpha) < 5 * (alpha * (1 - alpha) / n_draws) ** 0.5:
        raise AssertionError("rule: sampling: the first draft is accepted with probability alpha = sum(min(p, q))")


def test_verify_distribution(probe, rng):
    _sampled_rounds(probe, rng, V=int(rng.integers(4, 7)), k=1)


def test_verify_distribution_several_drafts(probe, rng):
    for k in (2, 3):
        _sampled_rounds(probe, rng, V=int(rng.integers(3, 6)), k=k)


def test_verify_bad_input(probe, rng):
    k = int(rng.integers(1, 5))
    V = int(rng.integers(k + 1, k + 6))

    def u(*shape):
        return tensor(_t(np.full(shape, 1.0 / shape[-1])))

    ids = tensor(_t(list(range(k)), "int64"))
    cases = [
        ((u(k + 1, V + 1), u(k, V), ids), ("p", "q")),  # V differs
        ((u(k + 1), u(k, V), ids), ("p",)),  # p 1-D
        ((u(k + 1, V), u(V), ids), ("q",)),  # q 1-D
        ((u(k, V), u(k, V), ids), ("p",)),  # p with k rows
        ((u(k + 1, V), u(k, V), tensor(_t(list(range(k + 1)), "int64"))), ("draft_tokens",)),
        ((u(k + 1, V), u(k, V), tensor(_t([list(range(k))], "int64"))), ("draft_tokens",)),
        ((u(k + 1, V), u(k, V), tensor(_t([V + int(rng.integers(0, 5))] * k, "int64"))), ("draft_tokens",)),
        ((u(k + 1, V), u(k, V), tensor(_t([-1 - int(rng.integers(0, 5))] * k, "int64"))), ("draft_tokens",)),
    ]
    order = rng.permutation(len(cases)).tolist()
    value_errors(
        probe.many(VERIFY, [(cases[j][0], {}) for j in order]),
        [cases[j][1] for j in order],
        "rule: bad input: q not (k, V), p not (k+1, V), or draft_tokens not k ids in [0, V) must raise ValueError",
        "rule: bad input: the message names the argument (p, q or draft_tokens)",
    )


# ------------------------------------------------------------------------------------------ speculative_generate
def _tokens(answer, rule, length):
    """The generated ids (a list) from speculative_generate's answer, with its stats."""
    got = value_of(answer, rule)
    if not (
        isinstance(got, tuple)
        and len(got) == 2
        and isinstance(got[0], Tensor)
        and got[0].kind == "torch"
        and got[0].dtype == "int64"
        and got[0].shape == (1, length)
        and isinstance(got[1], dict)
    ):
        raise Broken(
            "rule: returns the prompt followed by exactly max_new_tokens new tokens",
            describe(answer) + f" (the prompt and the new tokens make shape (1, {length}))",
        )
    return got[0].values[0], got[1]


def _same_or_tie(model, want, got, gap=1e-4):
    """equal, or first different where the model's top two logits tie within `gap` (float rounding)."""
    torch = _torch()
    if got == want:
        return True
    if len(got) != len(want):
        return False
    i = next(j for j, (a, b) in enumerate(zip(want, got)) if a != b)
    if i == 0:  # the prompt itself differs: no logit decides it
        return False
    with torch.no_grad():
        top2 = model(torch.tensor([want[:i]])).logits[0, -1].topk(2).values
    return float(top2[0] - top2[1]) < gap


def _greedy(probe, cases, rule):
    """cases: (target recipe, draft recipe, prompt tensor, max_new_tokens, k); answers checked against the judge's
    own greedy decoding of its own copy of the target."""
    from specdec.core.decoding import greedy_generate

    # a recipe repeated across the calls is built once on each side: in the kernel by the probe's memo, here below
    targets = {repr(t): build(t, _names()) for t, *_ in cases}
    answers = probe.many(
        GENERATE, [((t, counted(d, "draft"), tensor(prompt), n), {"k": k}) for t, d, prompt, n, k in cases]
    )
    for answer, (t, d, prompt, n, k) in zip(answers, cases):
        got, _ = _tokens(answer, rule, prompt.shape[1] + n)
        model = targets[repr(t)]
        want = greedy_generate(model, prompt, n)[0].tolist()
        if not _same_or_tie(model, want, got):
            raise AssertionError(rule)
        if n >= 2:  # one new token needs no draft (its round may propose none)
            _speculated(answer)


SPECULATES = "rule: it speculates: the draft proposes tokens that the target verifies (not plain decoding)"


def _speculated(answer):
    """The draft model was run during the call (its forwards, counted): a decoder that never drafts, however right
    its output, is plain decoding. Its statistics are test_speculative_generate_stats_forwards' to check."""
    if answer.observed.get("draft", 0) + answer.observed.get("draft.model", 0) < 1:
        raise Broken(SPECULATES, "never ran the draft model")


def _prompt(rng, domain, length):
    from specdec.core.decoding import heldout_prompts
    from specdec.core.models import heldout_texts

    return heldout_prompts(
        _pair()[2], heldout_texts(domain), 1, prompt_tokens=length, seed=int(rng.integers(0, 10**6))
    )[0]


def _random_models(rng):
    s = int(rng.integers(0, 10**6))
    big = tiny(vocab_size=300, hidden_size=64, num_hidden_layers=3, num_attention_heads=4, seed=s)
    small = tiny(vocab_size=300, hidden_size=32, num_hidden_layers=1, num_attention_heads=2, seed=s + 1)
    return big, small, noisy(big, 0.3, s + 2)


def _ids(rng, T, V=300):
    return _t(rng.integers(0, V, (1, T)), "int64")


def test_speculative_generate_greedy(probe, rng):
    cases = []
    for j, domain in enumerate(rng.permutation(["prose", "json", "code", "prose", "json"]).tolist()):
        cases.append(
            (
                named("target"),
                named("draft"),
                _prompt(rng, domain, int(rng.integers(8, 25))),
                int(rng.integers(12, 25)),
                int(rng.integers(1, 9)),
            )
        )
    _greedy(
        probe, cases, "rule: exact: at temperature 0 the output is the target's greedy output (other prompts and k)"
    )


def test_speculative_generate_greedy_pairs(probe, rng):
    big, small, copy = _random_models(rng)
    cases = [
        (big, d, _ids(rng, int(rng.integers(2, 12))), int(rng.integers(20, 31)), int(rng.integers(2, 9)))
        for d in (small, copy)
        for _ in range(2)
    ]
    _greedy(
        probe,
        cases,
        "rule: exact: at temperature 0 the output is the target's greedy output (other model "
        "pairs, prompt lengths and k)",
    )


def test_speculative_generate_greedy_short(probe, rng):
    big, small, copy = _random_models(rng)
    cases = []
    for d in (small, copy):
        cases.append((big, d, _ids(rng, 1), int(rng.integers(10, 20)), int(rng.integers(2, 6))))  # nothing to prefill
        k = int(rng.integers(2, 7))
        cases.append((big, d, _ids(rng, int(rng.integers(2, 10))), int(rng.integers(1, k)), k))  # fewer than k
    cases.append((named("target"), named("draft"), _prompt(rng, "code", 12)[:, :1], int(rng.integers(4, 10)), 4))
    _greedy(
        probe,
        cases,
        "rule: exact: at temperature 0 the output is the target's greedy output (other model "
        "pairs, prompt lengths and k)",
    )


def _check_stats(stats, k):
    keys = ("rounds", "drafted", "accepted")
    if not (all(type(stats.get(key)) is int for key in keys) and isinstance(stats.get("per_round"), list)):
        raise AssertionError("rule: stats: per_round holds one (drafted, accepted) pair per round")
    r, d, a, per = stats["rounds"], stats["drafted"], stats["accepted"], stats["per_round"]
    if len(per) != r or not all(
        isinstance(x, (tuple, list)) and len(x) == 2 and all(type(v) is int for v in x) for x in per
    ):
        raise AssertionError("rule: stats: per_round holds one (drafted, accepted) pair per round")
    if sum(x[0] for x in per) != d or sum(x[1] for x in per) != a:
        raise AssertionError("rule: stats: per_round adds up to drafted and accepted")
    if not all(0 <= acc <= dr <= k for dr, acc in per):
        raise AssertionError("rule: stats: each round drafts at most k tokens and accepts at most what it drafted")
    return r, d, a


def test_speculative_generate_stats(probe, rng):
    V = _pair()[0].config.vocab_size
    k = int(rng.integers(2, 6))
    prompt = _prompt(rng, "json", int(rng.integers(10, 20)))
    n = int(rng.integers(20, 36))
    ids, stats = _tokens(
        probe(GENERATE, named("target"), named("draft"), tensor(prompt), n, k=k),
        "rule: returns a (1, T + max_new_tokens) LongTensor of token ids",
        prompt.shape[1] + n,
    )
    _check_stats(stats, k)
    prompt = _prompt(rng, "prose", int(rng.integers(8, 16)))
    T, n, k = prompt.shape[1], int(rng.integers(15, 26)), int(rng.integers(2, 6))
    temps = sorted(float(x) for x in rng.uniform(0.5, 1.6, 3))
    calls = []
    for temp in temps:
        seed = int(rng.integers(0, 2**31))
        same = (
            (named("target"), named("draft"), tensor(prompt), n),
            {"k": k, "temperature": temp, "generator": generator(seed)},
        )
        twin = (
            (named("target"), copy_of(named("target")), tensor(prompt), n + 4),
            {"k": 4, "temperature": temp, "generator": generator(seed + 1)},
        )
        calls += [same, same, twin]
    answers = probe.many(GENERATE, calls)
    for j in range(len(temps)):
        rule = "rule: returns a (1, T + max_new_tokens) LongTensor of token ids"
        (out1, st1), (out2, st2) = (_tokens(answers[3 * j + i], rule, T + n) for i in (0, 1))
        if out1 != out2 or st1.get("accepted") != st2.get("accepted"):
            raise AssertionError("rule: all sampling from generator (same seed, same output)")
        if not all(0 <= t < V for t in out1) or out1[:T] != prompt[0].tolist():
            raise AssertionError(rule)
        r, _, a = _check_stats(st1, k)
        if not 0 <= a + r - n <= k:
            raise AssertionError(
                "rule: stats: each round emits accepted + 1 tokens (rounds, accepted at temperature > 0)"
            )
        _, st = _tokens(answers[3 * j + 2], rule, T + n + 4)
        _, d, a = _check_stats(st, 4)
        if d < 1 or a < 0.9 * d:  # nothing drafted is nothing accepted
            raise AssertionError(
                "rule: temperature applies to both models: a draft equal to the target is accepted at any temperature"
            )


def test_speculative_generate_stats_forwards(probe, rng):
    torch = _torch()
    target = _pair()[0]
    for _ in range(3):
        k, n_new = int(rng.integers(2, 8)), int(rng.integers(20, 41))
        prompt = _prompt(rng, "code", int(rng.integers(8, 16)))
        T = prompt.shape[1]
        answer = probe(
            GENERATE,
            counted(named("target"), "target"),
            counted(copy_of(named("target")), "draft"),
            tensor(prompt),
            n_new,
            k=k,
        )
        seen = probe.observed
        if answer[0] == "raised" and "generate() is not called" in answer[1].message:
            raise AssertionError(
                "rule: one target forward per round, k draft forwards per round (your own loop, not model.generate())"
            )
        ids, stats = _tokens(
            answer, "rule: returns the prompt followed by exactly max_new_tokens new tokens", T + n_new
        )
        try:  # per_round is test_speculative_generate_stats' rule: a slip there costs that cell alone
            r, d, a = (int(stats[key]) for key in ("rounds", "drafted", "accepted"))
        except (TypeError, KeyError, ValueError):
            raise AssertionError(
                "rule: stats: they count work done: a target forward per round, a draft forward per drafted token"
            ) from None
        if r > math.ceil(n_new / (k + 1)) + 2:
            raise AssertionError("rule: a draft equal to the target is accepted: a round emits k + 1 tokens")
        if a < d - 2 * k:
            raise AssertionError("rule: a draft equal to the target is accepted: nearly every draft passes")
        if seen.get("target", 10**9) > r + 2:
            raise AssertionError("rule: one target forward per round (plus one to prefill the prompt)")
        if seen.get("draft", 10**9) > (k + 1) * r + 2:
            raise AssertionError("rule: k draft forwards per round")
        if seen.get("target.model", 0) < r or seen.get("draft.model", 0) < d:
            raise AssertionError(
                "rule: stats: they count work done: a target forward per round, a draft forward per drafted token"
            )
        with torch.no_grad():
            first = int(target(prompt).logits[0, -1].argmax())
        if ids[: T + 1] != prompt[0].tolist() + [first]:
            raise AssertionError(
                "rule: the prompt, then tokens from the target (the first new token is the target's argmax)"
            )
    _rounds_match_the_draft(probe, rng)


def _rounds_match_the_draft(probe, rng):
    """With a draft that often disagrees (a noisy copy, both in float64 so that no rounding breaks a tie), each
    round's (drafted, accepted) is what the draft's own greedy tokens give against the output: while k + 1 or
    more tokens are still to come, a round drafts k and accepts the longest prefix of the draft's greedy
    continuation that the output then holds. The judge computes that with its own copy of the draft, so made-up
    statistics, or plain decoding that reports rounds it never ran, do not match."""
    torch = _torch()
    big, _, copy = _random_models(rng)
    t, d = double(big), double(copy)
    draft = build(d, {})
    k, n = int(rng.integers(2, 6)), int(rng.integers(24, 36))
    prompt = _ids(rng, int(rng.integers(3, 10)))
    T = prompt.shape[1]
    rule = "rule: stats: they count work done: a target forward per round, a draft forward per drafted token"
    ids, stats = _tokens(
        probe(GENERATE, t, counted(d, "draft"), tensor(prompt), n, k=k),
        "rule: returns the prompt followed by exactly max_new_tokens new tokens",
        T + n,
    )
    per = stats.get("per_round")
    if not (isinstance(per, list) and all(isinstance(x, (list, tuple)) and len(x) == 2 for x in per)):
        raise AssertionError(rule)
    at, mismatched, checked = 0, 0, 0
    for drafted, accepted in per:
        if n - at < k + 1:
            break
        with torch.no_grad():
            seq = torch.tensor([ids[: T + at]])
            for _ in range(k):
                seq = torch.cat([seq, draft(seq).logits[:, -1].argmax(-1, keepdim=True)], dim=1)
        proposed, emitted = seq[0, T + at :].tolist(), ids[T + at : T + at + k]
        agree = next((i for i, (a, b) in enumerate(zip(proposed, emitted)) if a != b), k)
        mismatched += (drafted, accepted) != (k, agree)
        checked += 1
        at += (accepted if type(accepted) is int and 0 <= accepted <= k else 0) + 1
    if checked == 0 or mismatched:
        raise Broken(rule, f"reported {mismatched} of {checked} rounds unlike the draft's own proposals")


MODE_MAX = 0.8  # the most probable pair of first tokens in the two-token test: at most this likely


def _two_token_test(probe, rng, temperature, k, n_runs=600):
    """The first two new tokens of n_runs generations with a small random pair (8 tokens, sharp, a noisy copy as
    the draft), each run its own seed, against the target's exact joint distribution: chi-square p-value > 1e-6.
    A pair whose joint puts more than MODE_MAX on one pair of tokens is drawn again: against a near-certain target,
    greedy decoding would pass the test by chance (it did, once in a full test run)."""
    torch = _torch()
    from scipy.stats import chisquare

    V = 8
    for _ in range(50):
        s = int(rng.integers(0, 10**6))
        t = sharp(tiny(vocab_size=V, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, seed=s), 25.0)
        prompt = _t(rng.integers(0, V, (1, int(rng.integers(2, 6)))), "int64")
        model = build(t, {})
        with torch.no_grad():
            p1 = torch.softmax(model(prompt).logits[0, -1].double() / temperature, dim=-1)
            after = torch.cat([prompt.repeat(V, 1), torch.arange(V).view(V, 1)], dim=1)
            p2 = torch.softmax(model(after).logits[:, -1].double() / temperature, dim=-1)
        joint = (p1[:, None] * p2).flatten()
        if float(joint.max()) <= MODE_MAX:
            break
    else:
        raise RuntimeError("no random pair spread enough for the two-token test in 50 draws")
    d = noisy(t, 0.5, s + 100)
    T0 = prompt.shape[1]
    want = (joint * n_runs).numpy()
    draws = [int(x) for x in rng.integers(0, 2**31, n_runs)]
    counts = np.zeros(V * V)
    rule = (
        "rule: exact: at a temperature > 0 the new tokens are distributed as the target's own sampling (another "
        "temperature)"
    )
    answers = probe.map(
        GENERATE,
        n_runs,
        (t, counted(d, "draft"), tensor(prompt), 2),
        {"k": k, "temperature": temperature, "generator": seeds(draws)},
    )
    for answer in answers:
        ids, _ = _tokens(answer, rule, T0 + 2)
        if not all(0 <= x < V for x in ids[T0:]):
            raise AssertionError(rule)
        counts[ids[T0] * V + ids[T0 + 1]] += 1
    small = want < 5  # pool rare cells
    obs, exp = counts[~small], want[~small]
    if small.any():
        obs, exp = np.append(obs, counts[small].sum()), np.append(exp, want[small].sum())
    if not chisquare(obs, exp * obs.sum() / exp.sum()).pvalue > 1e-6:
        raise AssertionError(rule)
    _speculated(answers[0])


def test_speculative_generate_distribution(probe, rng):
    _two_token_test(probe, rng, temperature=1.0, k=int(rng.integers(2, 4)))


def test_speculative_generate_distribution_temperature(probe, rng):
    _two_token_test(probe, rng, temperature=float(rng.uniform(0.5, 0.9)), k=1)


def test_speculative_generate_bad_input(probe, rng):
    prompt = _prompt(rng, "prose", int(rng.integers(4, 12)))
    base = {"target": named("target"), "draft": named("draft"), "input_ids": tensor(prompt), "k": 2}
    cases = [
        ({"max_new_tokens": 0}, "max_new_tokens"),
        ({"max_new_tokens": -int(rng.integers(1, 9))}, "max_new_tokens"),
        ({"max_new_tokens": 5, "k": -int(rng.integers(0, 4))}, "k"),
        ({"max_new_tokens": 5, "temperature": -float(rng.uniform(0.01, 2))}, "temperature"),
        ({"max_new_tokens": 5, "input_ids": tensor(prompt[0])}, "input_ids"),
        ({"max_new_tokens": 5, "input_ids": tensor(prompt.repeat(2, 1))}, "input_ids"),
    ]
    order = rng.permutation(len(cases)).tolist()
    value_errors(
        probe.many(GENERATE, [((), dict(base, **cases[j][0])) for j in order]),
        [cases[j][1] for j in order],
        "rule: bad input: k < 1, max_new_tokens < 1, temperature < 0 or input_ids not (1, T) must raise ValueError",
        "rule: bad input: the message names the argument (k, max_new_tokens, temperature or input_ids)",
    )


# statistical tests the notebook's visible part runs for the learner and the judge runs again on inputs of its
# own: under grading the kernel runs only the judge's probes for these cells (executor._kernel_source)
for _fn in (
    test_verify_distribution,
    test_speculative_generate_distribution,
    test_speculative_generate_distribution_temperature,
):
    _fn.replaces_visible = True

JUDGES = {name: fn for name, fn in globals().items() if name.startswith("test_") and callable(fn)}
