"""Timing a decoder's rounds against the plain baseline, the measurements behind the speedup model's terms.

Used by notebooks 05 (section 3) and 09 (section 2). The model a round is priced by:

    speedup(k) = E(α, k) ÷ (k·c + c_round + v(k) + o)       every term in units of one plain decoding token

- a plain token costs ``token_seconds``: the baseline's whole loop per token (its forward, argmax, bookkeeping);
- c: the proposer's full cost per drafted token (its forward, its softmax or argmax, its bookkeeping);
- c_round: what the proposer costs once per round, however many tokens it drafts (the call, its set-up, a first
  forward that also feeds the token the target added);
- v(k): the target's forward over k + 1 tokens;
- o: what a round costs besides (the accept step, the cache rollback, the loop's own Python).

A generation of n tokens is not all steady rounds: the loop never drafts past what is still needed, so its last
rounds draft fewer than k tokens and the generation takes more rounds than n ÷ E(α, k). ``generation_speedup``
prices every round of such a generation under the same model (notebook 09's race compares with it).

``timed_decode`` runs the notebook's loop with the proposer's calls and the target's forwards timed; ``measure_rounds``
collects, per k, a round profile {rounds, drafted, propose_seconds, verify_seconds, total_seconds}, from which the
learner computes c, c_round, v(k) and o (notebook 05, Part B, ``round_terms``). The profile holds the **full**
rounds only (those that drafted k tokens): they are the rounds the model's terms price; a short last round has its
own, cheaper verify, and ``generation_speedup`` prices it once, as itself. Nothing here is graded.
"""

from __future__ import annotations

import math
import statistics
import time
from functools import lru_cache

import torch

from specdec.core.decoding import ForwardCounter, check_ids, new_cache
from specdec.measure.timing import note_spread

PROFILE_KEYS = ("rounds", "drafted", "propose_seconds", "verify_seconds", "total_seconds")


class TimedProposer:
    """A proposer whose propose() calls are timed (``seconds``, and ``each``: one entry per call); start() and
    advance() pass through."""

    def __init__(self, proposer):
        self.proposer, self.seconds, self.each = proposer, 0.0, []
        self.needs_hidden = getattr(proposer, "needs_hidden", False)

    def start(self, tokens, hidden=None):
        return self.proposer.start(tokens, hidden)

    def propose(self, tokens, k, temperature, generator=None):
        t0 = time.perf_counter()
        out = self.proposer.propose(tokens, k, temperature, generator)
        self.each.append(time.perf_counter() - t0)
        self.seconds += self.each[-1]
        return out

    def advance(self, tokens, hidden=None):
        return self.proposer.advance(tokens, hidden)


def timed_decode(loop, target, proposer, input_ids, max_new_tokens, k):
    """``loop(target, proposer, input_ids, max_new_tokens, k=k)`` (the notebook's speculative_decode) with its parts
    timed. Returns (tokens, stats): the loop's stats plus "propose_seconds" (the proposer's propose calls) and
    "verify_seconds" (the target's forwards after the prefill), both inside the loop's "seconds", and per round
    (one propose call and one target forward each, in the order of stats["per_round"]) "propose_each" and
    "verify_each"."""
    timed = TimedProposer(proposer)
    with ForwardCounter(target) as forwards:
        tokens, stats = loop(target, timed, input_ids, max_new_tokens, k=k)
    prefill = 1 if input_ids.shape[1] > 1 else 0  # the loop's first target forward: the prompt
    verify_each = list(forwards.each[prefill:])
    if not len(timed.each) == len(verify_each) == stats["rounds"]:
        raise ValueError(
            f"loop: expected one propose call and one target forward per round, got {len(timed.each)} "
            f"calls and {len(verify_each)} forwards in {stats['rounds']} rounds"
        )
    return tokens, dict(
        stats,
        propose_seconds=timed.seconds,
        verify_seconds=sum(verify_each),
        propose_each=list(timed.each),
        verify_each=verify_each,
    )


@torch.no_grad()
def plain_decode(model, input_ids, max_new_tokens):
    """The fastest plain greedy decoding in the course: KV cache, argmax, one preallocated token buffer.

    Returns (tokens (1, T + max_new_tokens), seconds): `seconds` is the time of the max_new_tokens one-token
    forwards (and their argmax) after a prefill of the first T - 1 prompt tokens, the same span the speculative
    loop's ``stats["seconds"]`` covers (its first verify forward carries the last prompt token)."""
    check_ids(input_ids, max_new_tokens)
    T = input_ids.shape[1]
    buf = torch.empty(1, T + max_new_tokens, dtype=torch.long)
    buf[:, :T] = input_ids
    cache = new_cache(model)
    if T > 1:
        model(input_ids[:, :-1], cache=cache, use_cache=True, logits_to_keep=1)
    t0 = time.perf_counter()
    for i in range(max_new_tokens):
        logits = model(buf[:, T - 1 + i : T + i], cache=cache, use_cache=True, logits_to_keep=1).logits[0, -1]
        buf[0, T + i] = logits.argmax()
    return buf, time.perf_counter() - t0


def measure_rounds(decode, plain, prompts, ks, max_new_tokens, repeats=3, warmup=1, progress=None):
    """Decode-only timings of speculative rounds and plain tokens on `prompts`, interleaved, medians of `repeats`.

    decode(prompt, k) -> (tokens, stats) with stats["seconds"] and stats["rounds"] (the notebook's loop);
    plain(prompt) -> (tokens, seconds) (``plain_decode``). First `warmup` untimed passes of plain decoding and
    every k over the first prompt (a kernel's first call at a new shape packs weights and allocates). One repeat
    takes the prompts one by one and runs plain decoding and then every k on each, so that a drift of the machine's
    speed hits plain and speculative decoding alike: their timings of one prompt lie a fraction of a second apart.

    `prompts` may be a dict of named prompt lists, e.g. {"calibration": [...], "test": [...]}, and `decode` a dict
    of decoders with the same names (or one decoder for all): the lists are then measured in one run, their prompts
    taken in turn, and the result is {name: result} with each list's own result below, computed from its own
    prompts only. Two uses of one machine state: a prediction fed by one list's measurements, the race of another.
    progress: a tqdm-like wrapper (``progress(iterable, desc=..., total=...)``) for a bar per repeat, or None.

    Where decode's stats carry "propose_seconds" and "verify_seconds" (``timed_decode``), "profile" holds
    {k: {rounds, drafted, propose_seconds, verify_seconds, total_seconds}} summed over the prompts, the median of
    the repeats (of an even count, the mean of the two middle ones, as for the plain time). Where they also carry
    "propose_each" and "verify_each" (per round), the profile holds the full rounds only (those that drafted k
    tokens), each with its own propose and verify seconds and the rest of a round (the loop's time outside both,
    per round, over all the rounds of that generation); the short last rounds are left to ``generation_speedup``,
    which prices them as themselves. A k with no full round raises ValueError. Returns
    {"token_seconds": median seconds per plain token, "round_seconds": {k: median seconds per round}, "rounds":
    {k: rounds per repeat}, "spread": {name: (min, median, max) of the repeats' seconds}, "plain_seconds": median
    plain decode seconds over all prompts, "decode_seconds": {k: median speculative decode seconds over all
    prompts}, "per_round": {k: [(drafted, accepted) per round]} of the last repeat}."""
    ks = list(ks)
    named = isinstance(prompts, dict)
    groups = {name: list(p) for name, p in prompts.items()} if named else {None: list(prompts)}
    if not groups or any(not p for p in groups.values()):
        raise ValueError(f"prompts is empty: {prompts!r}" if named else "prompts is empty")
    if isinstance(decode, dict):
        if not named or set(decode) != set(groups):
            raise ValueError(
                f"decode: a dict of decoders needs one per named prompt list {sorted(groups, key=str)}, "
                f"got {sorted(decode, key=str)}"
            )
        decoders = decode
    else:
        decoders = dict.fromkeys(groups, decode)
    if not ks or any(not isinstance(k, int) or k < 1 for k in ks):
        raise ValueError(f"ks must be ints >= 1, got {ks!r}")
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    if not isinstance(warmup, int) or warmup < 0:
        raise ValueError(f"warmup must be an int >= 0, got {warmup!r}")
    for _ in range(warmup):
        for name, p in groups.items():
            plain(p[0])
            for k in ks:
                decoders[name](p[0], k)
    order = [(name, p[i]) for i in range(max(map(len, groups.values()))) for name, p in groups.items() if i < len(p)]
    plain_s = {name: [] for name in groups}
    spec_s = {name: {k: [] for k in ks} for name in groups}
    parts = {name: {k: [] for k in ks} for name in groups}
    per_round = {name: {} for name in groups}
    rounds = {name: {} for name in groups}  # every round of a repeat, short ones included (greedy: fixed)
    for r in range(repeats):
        plain_r = dict.fromkeys(groups, 0.0)
        part_r = {name: {k: dict.fromkeys(PROFILE_KEYS, 0) for k in ks} for name in groups}
        spec_r = {name: dict.fromkeys(ks, 0.0) for name in groups}
        counts = {name: {k: [] for k in ks} for name in groups}
        steps = progress(order, desc=f"repeat {r + 1} of {repeats}", total=len(order)) if progress else order
        for name, pr in steps:
            plain_r[name] += plain(pr)[1]
            for k in ks:
                _, stats = decoders[name](pr, k)
                part = part_r[name][k]
                counts[name][k] += stats["per_round"]
                spec_r[name][k] += stats["seconds"]
                for key, value in _round_parts(stats, k).items():
                    part[key] += value
        for name in groups:
            for k in ks:
                if part_r[name][k]["rounds"] == 0:
                    raise ValueError(
                        f"k = {k}: no round drafted k tokens in {max_new_tokens} new tokens "
                        f"(the profile prices full rounds): generate more tokens or drop this k"
                    )
        for name in groups:
            plain_s[name].append(plain_r[name])
            for k in ks:
                spec_s[name][k].append(spec_r[name][k])
                parts[name][k].append(part_r[name][k])
                rounds[name][k] = len(counts[name][k])
            per_round[name] = counts[name]
    out = {
        name: _summary(plain_s[name], spec_s[name], parts[name], per_round[name], rounds[name], max_new_tokens * len(p))
        for name, p in groups.items()
    }
    return out if named else out[None]


def _round_parts(stats, k):
    """One generation's contribution to the profile at k: every round (stats without per-round times), or the full
    rounds with their own propose and verify seconds and the rest of a round, per round, over the generation."""
    propose, verify = stats.get("propose_seconds", 0.0), stats.get("verify_seconds", 0.0)
    if "propose_each" not in stats:
        return {
            "rounds": stats["rounds"],
            "drafted": stats["drafted"],
            "propose_seconds": propose,
            "verify_seconds": verify,
            "total_seconds": stats["seconds"],
        }
    full = [i for i, (drafted, _) in enumerate(stats["per_round"]) if drafted == k]
    rest = max(0.0, stats["seconds"] - propose - verify) / stats["rounds"]  # the loop's own time per round
    p_full = sum(stats["propose_each"][i] for i in full)
    v_full = sum(stats["verify_each"][i] for i in full)
    return {
        "rounds": len(full),
        "drafted": k * len(full),
        "propose_seconds": p_full,
        "verify_seconds": v_full,
        "total_seconds": p_full + v_full + rest * len(full),
    }


def _summary(plain_s, spec_s, parts, per_round, rounds, n_tokens):
    """measure_rounds' result for one list of prompts from its repeats' seconds and round profiles."""
    note_spread(plain_s)  # to an open Steadiness block (specdec.measure.timing)
    for s in spec_s.values():
        note_spread(s)
    med = statistics.median
    spread = {"plain": (min(plain_s), med(plain_s), max(plain_s))}
    spread.update({k: (min(s), med(s), max(s)) for k, s in spec_s.items()})
    profile = {k: _median_profile(p) for k, p in parts.items()}
    return {
        "token_seconds": med(plain_s) / n_tokens,
        "profile": profile,
        "round_seconds": {k: med(s) / rounds[k] for k, s in spec_s.items()},
        "rounds": rounds,
        "per_round": per_round,
        "spread": spread,
        "plain_seconds": med(plain_s),
        "decode_seconds": {k: med(s) for k, s in spec_s.items()},
    }


def _median_profile(parts):
    """The median of a k's repeats in the sense statistics.median takes plain decoding's: the repeat whose total is
    the median, and for an even count the mean of the two middle repeats, field by field (a mean keeps propose +
    verify within the total). The profile's seconds and the plain token's time then come from the same statistic:
    the faster middle repeat alone would price rounds a half-spread cheaper than the token time it is divided by."""
    ranked = sorted(parts, key=lambda q: q["total_seconds"])
    mid = ranked[(len(ranked) - 1) // 2 : len(ranked) // 2 + 1]  # one repeat, or the two middle ones
    out = {key: sum(q[key] for q in mid) / len(mid) for key in PROFILE_KEYS}
    out["rounds"], out["drafted"] = mid[0]["rounds"], mid[0]["drafted"]  # greedy: the same in every repeat
    return out


def generation_speedup(alpha, k, terms, n):
    """Predicted speedup of one generation of `n` new tokens at draft length `k`, greedy or sampled, each draft
    accepted with probability `alpha` independently: the model above applied round by round, where a round with m
    tokens still to go drafts k' = min(k, m) (the notebook loop's rule), costs k'·c + c_round + v(k') + o plain
    tokens and emits j + 1 tokens with probability α^j (1 − α) for j < k' (k' + 1 with α^k'). v(k') between the
    draft lengths measured is interpolated linearly. terms = {"c": float, "c_round": float, "v": {k: float}, "o":
    float} (notebook 05's ``round_terms``). As n grows this tends to E(α, k) ÷ (k·c + c_round + v(k) + o); at n = 1
    it is 1 ÷ (c + c_round + v(1) + o)."""
    if not isinstance(alpha, (int, float)) or isinstance(alpha, bool) or not 0 <= alpha <= 1:
        raise ValueError(f"alpha must be a number in [0, 1], got {alpha!r}")
    for name, value in (("k", k), ("n", n)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{name} must be an int >= 1, got {value!r}")
    if (
        not isinstance(terms, dict)
        or not {"c", "c_round", "v", "o"} <= set(terms)
        or not isinstance(terms["v"], dict)
        or not terms["v"]
    ):
        raise ValueError(
            f"terms must be {{'c': float, 'c_round': float, 'v': {{k: float}}, 'o': float}}, got {terms!r}"
        )
    measured = sorted(terms["v"])
    if k > measured[-1]:
        raise ValueError(f"terms['v'] is measured up to k = {measured[-1]}, not k = {k}")
    c, per_round = float(terms["c"]), float(terms["c_round"]) + float(terms["o"])

    def v(m):  # linear between the measured draft lengths, flat below the first
        if m <= measured[0]:
            return float(terms["v"][measured[0]])
        hi = next(x for x in measured if x >= m)
        lo = max(x for x in measured if x < hi)
        return terms["v"][lo] + (terms["v"][hi] - terms["v"][lo]) * (m - lo) / (hi - lo)

    @lru_cache(maxsize=None)
    def cost(m):  # expected plain tokens of time to emit the m tokens still to go
        if m <= 0:
            return 0.0
        kr = min(k, m)
        chances = [alpha**j * (1 - alpha) for j in range(kr)] + [alpha**kr]
        return kr * c + v(kr) + per_round + sum(p * cost(m - j - 1) for j, p in enumerate(chances))

    for m in range(1, n):  # bottom up: no recursion deeper than k
        cost(m)
    total = cost(n)
    if not math.isfinite(total) or total <= 0:
        raise ValueError(f"terms give a round no positive cost: {terms!r}")
    return n / total


def generation_tokens_per_round(alpha, k, n):
    """Expected tokens per round over one generation of `n` tokens at draft length `k` (the short last rounds
    included): ``generation_speedup`` with every round priced one, so n ÷ the expected rounds. Below E(α, k)."""
    return generation_speedup(alpha, k, {"c": 0.0, "c_round": 0.0, "v": {k: 1.0}, "o": 0.0}, n)
