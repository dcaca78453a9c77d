"""Notebook 09's hidden tests as judges: every test cell (`choose_path`, Part A; `rule_k`, Part C; `tree_mask`,
`verify_tree_greedy` and tree decoding, Part D; `verify_tree_sampled`, Part E).

The rules and their wording are the notebook's hidden tests' (docs/contract.md lists them); the inputs are drawn
from the grader's generator instead of a seed written into the test cell. `rule_k`'s reference is the course's
own `predicted_speedup` (the given cell restating notebook 05's, ``given_names``); tree decoding's is the judge's own
greedy decoding of its own copy of the target; the sampled rule's are chi-square tests the judge computes on the raw
tokens of rounds whose trees it drew itself.
"""

from __future__ import annotations

import numpy as np

from autograde.judge import (
    Broken,
    Tensor,
    answered,
    build,
    call,
    describe,
    generator,
    named,
    nonfinite,
    random_heads,
    rows,
    seeds,
    tensor,
    tiny_llama,
    value_errors,
    value_of,
)

ASSIGNMENT = "09_speculation_that_pays"


def warm():
    """The course's own copies of the given cells' functions (rule_k's reference), the course's pair (tree
    decoding's reference) and scipy's chi-square, loaded ahead."""
    _given()
    _target()
    import scipy.stats  # noqa: F401


def _target():
    from autograde.judges.nb04 import _pair

    return _pair()[0]


def _given():
    from autograde.judges import given_names

    return given_names(ASSIGNMENT)


def _torch():
    import torch

    return torch


def _E(a, k):
    return k + 1.0 if a == 1 else (1 - a ** (k + 1)) / (1 - a)


# ------------------------------------------------------------------------------------ A: choose_path
PATH = "choose_path"


def _rate(r, alphas):
    """Tokens per second: the geometric mean of the domains' speedups (plain decoding: 1) over the step."""
    sp = [
        max([1.0] + [_E(a, k) / (k * r["c"] + r["c_round"] + r["v"][k] + r["o"]) for k in r["v"]])
        for a in alphas.values()
    ]
    return float(np.prod(sp)) ** (1 / len(sp)) / r["step"]


def _rows(rng, n, ks, steps, widths):
    return [
        {
            "path": f"p{i}",
            "width": int(rng.choice(widths)),
            "step": float(rng.choice(steps)) if isinstance(steps, list) else float(rng.uniform(*steps)),
            "c": float(rng.uniform(0, 0.3)),
            "c_round": float(rng.uniform(-0.05, 0.2)),
            "o": float(rng.uniform(0, 0.3)),
            "v": {k: float(rng.uniform(0.9, 1 + 0.4 * k)) for k in ks},
        }
        for i in range(n)
    ]


def _chosen(answer, rows, rule):
    """The index of the row that came back (rows carry distinct paths, so equality names it), or Broken(rule)."""
    got = value_of(answer, rule)
    for i, r in enumerate(rows):
        if got == r:
            return i
    raise Broken(rule, describe(answer) if not isinstance(got, dict) else "a dict that is none of the rows")


def test_choose_path(probe, rng):
    cases = []
    for _ in range(300):
        ks = sorted(set(int(k) for k in rng.choice([1, 2, 3, 4, 6, 8], size=int(rng.integers(1, 5)))))
        rows = _rows(rng, int(rng.integers(1, 7)), ks, (0.001, 0.02), [4096, 8192, 16384])
        cases.append((rows, {"d": float(rng.choice([0.0, 1.0, rng.uniform(0, 1)]))}, 1.0))
    s_plain, s_spec = float(rng.uniform(0.006, 0.0075)), float(rng.uniform(0.0078, 0.009))
    fast_plain = {"path": "x", "width": 8, "step": s_plain, "c": 0.0, "c_round": 0.0, "o": 0.0, "v": {1: 3.0}}
    slow_spec = {"path": "y", "width": 8, "step": s_spec, "c": 0.0, "c_round": 0.0, "o": 0.0, "v": {1: 1.9}}
    answers = probe.many(PATH, [(case, {}) for case in cases] + [(([slow_spec, fast_plain], {"d": 0.95}, 1.0), {})])
    itself = "rule: return the row itself (one of rows)"
    for (rows, alphas, _), answer in zip(cases, answers):
        got = rows[_chosen(answer, rows, itself)]
        widest = [r for r in rows if r["width"] == max(x["width"] for x in rows)]
        if not any(got is r for r in widest):
            raise AssertionError("rule: the candidates are the affordable rows at the widest width among them")
        if not abs(_rate(got, alphas) - max(_rate(r, alphas) for r in widest)) < 1e-9 * _rate(got, alphas):
            raise AssertionError(
                "rule: the most tokens per second: the best E(alpha, k) / (k c + c_round + v(k) + o), "
                "or 1, divided by the step"
            )
    plain = "rule: a row where no k is above 1 decodes plainly: its speedup counts as 1"
    if _chosen(answers[-1], [slow_spec, fast_plain], plain) != 1:
        raise AssertionError(plain)


def test_choose_path_budget_and_domains(probe, rng):
    cases = []
    for _ in range(400):
        ks = sorted(set(int(k) for k in rng.choice([1, 2, 4, 8], size=int(rng.integers(1, 4)))))
        rows = _rows(rng, int(rng.integers(2, 7)), ks, [0.005, 0.01, 0.015, 0.02], [4096, 8192, 16384])
        alphas = {f"d{j}": float(rng.uniform(0, 1)) for j in range(int(rng.integers(1, 4)))}
        cases.append((rows, alphas, float(rng.choice([0.004, 0.01, 0.015, 0.03]))))
    split = [
        {"path": "even", "width": 8, "step": 0.01, "c": 0.0, "c_round": 0.0, "o": 0.0, "v": {1: 0.2, 8: 10.0}},
        {"path": "lopsided", "width": 8, "step": 0.01, "c": 0.0, "c_round": 0.0, "o": 0.0, "v": {8: 0.45}},
    ]
    same = {
        "width": 8,
        "step": 0.01,
        "c": float(rng.uniform(0.05, 0.15)),
        "c_round": 0.05,
        "o": 0.1,
        "v": {4: float(rng.uniform(1.1, 1.3))},
    }
    twins = [dict(same, path="first"), dict(same, path="second")]
    extra = [(split, {"a": 0.0, "b": 1.0}, 0.02), (twins, {"d": float(rng.uniform(0.6, 0.8))}, 0.02)]
    answers = probe.many(PATH, [(case, {}) for case in cases + extra])
    mean_rule = (
        "rule: tokens per second from the geometric mean of the domains' speedups (other rows, alphas and budgets)"
    )
    for (rows, alphas, budget), answer in zip(cases, answers):
        fits = [r for r in rows if r["step"] <= budget]
        if not fits:
            shortest = "rule: when no row fits the budget, the row with the shortest step (the first on a tie)"
            if rows[_chosen(answer, rows, shortest)] is not min(rows, key=lambda r: r["step"]):
                raise AssertionError(shortest)
            continue
        over = "rule: rows whose step is over the budget are not candidates (a step equal to the budget is one)"
        got = rows[_chosen(answer, rows, over)]
        if not any(got is r for r in fits):
            raise AssertionError(over)
        widest = [r for r in fits if r["width"] == max(x["width"] for x in fits)]
        if not any(got is r for r in widest):
            raise AssertionError("rule: the widest width among the rows within the budget (other rows and budgets)")
        if not abs(_rate(got, alphas) - max(_rate(r, alphas) for r in widest)) < 1e-9 * _rate(got, alphas):
            raise AssertionError(mean_rule)
    if _chosen(answers[-2], split, mean_rule) != 0:
        raise AssertionError(mean_rule)
    tie = "rule: the first of equal rows on a tie"
    if _chosen(answers[-1], twins, tie) != 0:
        raise AssertionError(tie)


def test_choose_path_bad_input(probe, rng):
    row = {
        "path": "bf16",
        "width": int(rng.choice([4096, 40960])),
        "step": float(rng.uniform(0.005, 0.02)),
        "c": float(rng.uniform(0.01, 0.1)),
        "c_round": float(rng.uniform(0.0, 0.05)),
        "o": float(rng.uniform(0.01, 0.1)),
        "v": {2: float(rng.uniform(1.0, 1.1)), 4: float(rng.uniform(1.1, 1.3))},
    }
    rows, al, b = [row], {"code": float(rng.uniform(0.3, 0.9))}, float(rng.uniform(0.005, 0.05))

    def no(key):
        return {x: y for x, y in row.items() if x != key}

    bad = [
        (([], al, b), "rows"),
        ((row, al, b), "rows"),
        (([dict(row, step=0.0)], al, b), "rows"),
        (([dict(row, c=-0.1)], al, b), "rows"),
        (([dict(row, v={})], al, b), "rows"),
        (([dict(row, v={0: 1.0})], al, b), "rows"),
        (([dict(row, v={2: 0.0})], al, b), "rows"),
        (([{"step": 0.01, "v": {2: 1.0}}], al, b), "rows"),
        (([no("width")], al, b), "rows"),
        (([dict(row, width=0)], al, b), "rows"),
        (([dict(row, width=4096.0)], al, b), "rows"),
        (([no("c_round")], al, b), "rows"),
        (([no("o")], al, b), "rows"),
        (([dict(row, o=nonfinite("nan"))], al, b), "rows"),
        (([dict(row, c_round=-(2 * 4 * row["c"] + 2 * 1.3 + row["o"]))], al, b), "rows"),
        ((rows, {}, b), "alphas"),
        ((rows, {"code": float(rng.uniform(1.01, 2))}, b), "alphas"),
        ((rows, {"code": -float(rng.uniform(0.01, 1))}, b), "alphas"),
        ((rows, [0.6], b), "alphas"),
        ((rows, al, -b), "budget"),
        ((rows, al, 0.0), "budget"),
        ((rows, al, str(b)), "budget"),
    ]
    order = rng.permutation(len(bad)).tolist()
    answered(probe.many(PATH, [((rows, al, b), {})]))
    value_errors(
        probe.many(PATH, [(bad[i][0], {}) for i in order]),
        [bad[i][1] for i in order],
        "rule: bad input (rows empty or malformed, a round costing 0 or less, alphas empty or outside [0, 1], "
        "budget <= 0) must raise ValueError",
        "rule: bad input: the ValueError message names the argument",
    )


# ------------------------------------------------------------------------------------ C: rule_k
RULE = "rule_k"


def _speedup(a, k, terms):
    return _given()["predicted_speedup"](a, k, terms)


def test_rule_k(probe, rng):
    cases = []
    for _ in range(200):
        ks_all = sorted(set(int(k) for k in rng.choice([1, 2, 3, 4, 5, 6, 8, 12], size=int(rng.integers(1, 7)))))
        terms = {
            "c": float(rng.uniform(0, 0.3)),
            "c_round": float(rng.uniform(0, 0.3)),
            "o": float(rng.uniform(0, 0.3)),
            "v": {k: float(rng.uniform(0.9, 1 + 0.3 * k)) for k in ks_all},
        }
        sub = [k for k in ks_all if rng.uniform() < 0.7] or ks_all[:1]
        cases.append((float(rng.uniform(0.5, 1)), terms, list(reversed(sub))))
    s = float(rng.choice([2.0, 4.0, 8.0]))  # the same speedup s at every k (a power of 2: exactly s)
    tie = {"c": 0.0, "c_round": 0.0, "o": 0.0, "v": {k: (k + 1) / s for k in (2, 3, 4, 8)}}
    order = tuple(int(k) for k in rng.permutation([8, 4, 3, 2]))
    answers = probe.many(RULE, [(case, {}) for case in cases] + [((1.0, tie, order), {})])
    for (a, terms, sub), answer in zip(cases, answers):
        got = value_of(answer, "rule: return a plain int")
        if type(got) is not int:
            raise Broken("rule: return a plain int", describe(answer))
        best = max(sub, key=lambda k: _speedup(a, k, terms))
        if _speedup(a, best, terms) > 1:
            if got not in sub:
                raise AssertionError("rule: only the k of ks count (a subset of terms['v'])")
            if not abs(_speedup(a, got, terms) - _speedup(a, best, terms)) < 1e-12:
                raise AssertionError("rule: the k of ks with the highest predicted_speedup (other alpha, terms and ks)")
    rule = "rule: the smallest k on a tie, whatever the order of ks"
    if value_of(answers[-1], rule) != 2:
        raise Broken(rule, describe(answers[-1]) if answers[-1][0] != "value" else "")


def test_rule_k_off(probe, rng):
    cases = []
    for _ in range(200):
        ks_all = sorted(set(int(k) for k in rng.choice([1, 2, 4, 8], size=int(rng.integers(1, 5)))))
        terms = {
            "c": float(rng.uniform(0, 0.5)),
            "c_round": float(rng.uniform(0, 1)),
            "o": float(rng.uniform(0, 1)),
            "v": {k: float(rng.uniform(0.9, 2 + 0.3 * k)) for k in ks_all},
        }
        cases.append((float(rng.uniform(0, 1)), terms, ks_all))
    v = float(rng.choice([0.25, 0.5, 0.75, 1.0]))  # v + (1 - v) is exactly 1 in binary
    even = {"c": 0.0, "c_round": 0.0, "o": 1.0 - v, "v": {1: v, 4: v}}  # alpha 0: exactly 1.0x at every k
    answers = probe.many(RULE, [(case, {}) for case in cases] + [((0.0, even, [1, 4]), {})])
    off = "rule: 0 where no prediction is above 1 (other alpha and terms)"
    for (a, terms, ks), answer in zip(cases, answers):
        if max(_speedup(a, k, terms) for k in ks) <= 1:
            if value_of(answer, off) != 0:
                raise Broken(off, describe(answer))
        elif value_of(answer, off) not in ks:
            raise AssertionError("rule: the k of ks with the highest predicted_speedup (other alpha, terms and ks)")
    exactly = "rule: a prediction of exactly 1 does not pay: 0"
    if value_of(answers[-1], exactly) != 0:
        raise Broken(exactly, describe(answers[-1]))


def test_rule_k_bad_input(probe, rng):
    terms = {
        "c": float(rng.uniform(0.01, 0.1)),
        "c_round": float(rng.uniform(0.05, 0.2)),
        "o": float(rng.uniform(0.1, 0.3)),
        "v": {
            1: 1.0,
            2: float(rng.uniform(1.0, 1.1)),
            4: float(rng.uniform(1.1, 1.3)),
            8: float(rng.uniform(1.3, 1.8)),
        },
    }
    a = float(rng.uniform(0.3, 0.9))
    bad = [
        ((a, terms, []), "ks"),
        ((a, terms, [0]), "ks"),
        ((a, terms, [2.0]), "ks"),
        ((a, terms, [True]), "ks"),
        ((a, terms, [3]), "ks"),
        ((a, terms, 4), "ks"),
        ((a, terms, [1, 16]), "ks"),
        ((float(rng.uniform(1.01, 2)), terms, [1, 2]), "alpha"),
        ((-float(rng.uniform(0.01, 1)), terms, [1, 2]), "alpha"),
        ((a, [terms["c"], terms["o"]], [1, 2]), "terms"),
        ((a, {"c": terms["c"]}, [1, 2]), "terms"),
    ]
    order = rng.permutation(len(bad)).tolist()
    answered(probe.many(RULE, [((a, terms, [1, 2, 4]), {})]))
    value_errors(
        probe.many(RULE, [(bad[i][0], {}) for i in order]),
        [bad[i][1] for i in order],
        "rule: bad input (ks empty, not integers >= 1 or not measured in terms, alpha outside [0, 1], terms "
        "malformed) must raise ValueError",
        "rule: bad input: the ValueError message names the argument",
    )


# ------------------------------------------------------------------------------------ D: tree_mask
MASK = "tree_mask"


def _tree(rng, n_max=14):
    N = int(rng.integers(1, n_max))
    return [int(rng.integers(-1, i)) if i > 0 else -1 for i in range(N)]


def _ref_tree(par, L):
    """(mask rows as lists of bools, positions): node i sees the sequence, its ancestors and itself."""
    N, mask, depth = len(par), [], []
    for i, a in enumerate(par):
        depth.append(1 if a < 0 else depth[a] + 1)
        row, j = [True] * L + [False] * N, i
        while j >= 0:
            row[L + j] = True
            j = par[j]
        mask.append(row)
    return mask, [d + L - 1 for d in depth]


def _forms(par):
    """The same parents as a list, a tuple and a LongTensor (the function takes all three)."""
    torch = _torch()
    return [par, tuple(par), tensor(torch.tensor(par, dtype=torch.long))]


def _masked(probe, rng):
    """[(answer, parents, prefix_len)]: drawn trees in each form, chains, and a star."""
    cases = []
    for _ in range(40):
        par, L = _tree(rng), int(rng.integers(1, 30))
        cases += [(form, par, L) for form in _forms(par)]
    chains = [(list(range(-1, n - 1)), int(rng.integers(1, 9))) for n in (1, 2, int(rng.integers(3, 9)))]
    star = ([-1] * int(rng.integers(2, 8)), 1)
    cases += [(par, par, L) for par, L in chains + [star]]
    answers = probe.many(MASK, [((form, L), {}) for form, _, L in cases])
    return [(answer, par, L) for answer, (_, par, L) in zip(answers, cases)]


def _torch_values(x):
    return x.values if isinstance(x, Tensor) and x.kind == "torch" else None


def _mask_pos(answer, rule):
    got = value_of(answer, rule)
    if not (isinstance(got, (tuple, list)) and len(got) == 2):
        raise Broken(rule, describe(answer))
    return _torch_values(got[0]), _torch_values(got[1])


STAR = "rule: siblings do not attend to each other; children of the root sit at prefix_len"


def _tree_part(probe, rng, part, chain, other):
    """tree_mask's `part` (0: the mask, 1: the positions) on every case of `_masked` against the reference: the
    drawn trees under `other`, the three chains under `chain`, the star (the last case) under STAR."""
    answers = _masked(probe, rng)
    for j, (answer, par, L) in enumerate(answers):
        rule = other if j < len(answers) - 4 else STAR if j == len(answers) - 1 else chain
        got = _mask_pos(answer, rule)[part]
        if got != _ref_tree(par, L)[part]:
            raise Broken(rule, describe(answer) if got is None else "")


def test_tree_mask(probe, rng):
    _tree_part(
        probe,
        rng,
        0,
        "rule: a chain of nodes gives the causal (lower-triangular) mask",
        "rule: node i attends to the sequence, its ancestors and itself (other trees and prefix lengths)",
    )


def test_tree_mask_positions(probe, rng):
    _tree_part(
        probe,
        rng,
        1,
        "rule: position of node i is prefix_len - 1 + depth(i) (a chain)",
        "rule: position_ids is a LongTensor, prefix_len - 1 + depth(i) (other trees)",
    )


SEES = "rule: every node attends somewhere and sits past the sequence's last token (position_ids >= prefix_len - 1)"


def _plausible_mask(mask, positions, L):
    """The values the contract fixes whatever the tree: each row has a True, each position is past the sequence.
    Loose on purpose (an off-by-one position passes): the exact values are the other two cells' rules, so a slip
    there costs those cells only; an answer of zeros of the right shape fails here."""
    return all(any(row) for row in mask) and all(pos >= L - 1 for pos in positions)


def test_tree_mask_types(probe, rng):
    shape = "rule: mask is a bool tensor of shape (N, prefix_len + N)"
    longs = "rule: position_ids is a LongTensor, prefix_len - 1 + depth(i) (other trees)"
    for answer, par, L in _masked(probe, rng):
        got = value_of(answer, shape)
        m, p = (got[0], got[1]) if isinstance(got, (tuple, list)) and len(got) == 2 else (None, None)
        N = len(par)
        if not (isinstance(m, Tensor) and m.kind == "torch" and m.dtype == "bool" and m.shape == (N, L + N)):
            raise Broken(shape, describe(answer))
        if not (isinstance(p, Tensor) and p.kind == "torch" and p.dtype == "int64" and p.shape == (N,)):
            raise Broken(longs, describe(answer))
        if not _plausible_mask(m.values, p.values, L):
            raise AssertionError(SEES)
    empty = "rule: an empty tree gives a (0, prefix_len) mask and no positions"
    L = int(rng.integers(1, 9))
    got = value_of(probe(MASK, [], L), empty)
    if not (
        isinstance(got, (tuple, list))
        and len(got) == 2
        and isinstance(got[0], Tensor)
        and got[0].shape == (0, L)
        and isinstance(got[1], Tensor)
        and got[1].shape == (0,)
    ):
        raise AssertionError(empty)


def test_tree_mask_bad_input(probe, rng):
    L = int(rng.integers(1, 9))
    bad = [
        (([-1, 2, 0], L), "parents"),
        (([0], L), "parents"),
        (([-2], L), "parents"),
        (([-1, 0, int(rng.integers(3, 9))], L), "parents"),
        (([-1, 0], 0), "prefix_len"),
        (([-1], -int(rng.integers(1, 9))), "prefix_len"),
        (([-1], L + 0.5), "prefix_len"),
    ]
    order = rng.permutation(len(bad)).tolist()
    answered(probe.many(MASK, [(([-1, 0, 0], L), {})]))
    value_errors(
        probe.many(MASK, [(bad[i][0], {}) for i in order]),
        [bad[i][1] for i in order],
        "rule: bad input: a parent outside [-1, i) or prefix_len that is not an int >= 1 (ValueError)",
        "rule: bad input: the message names the argument (parents or prefix_len)",
    )


# ------------------------------------------------------------------------------------ D: verify_tree_greedy
WALK = "verify_tree_greedy"


def _walk(par, tok, nxt):
    """The greedy walk from the root: at each node the first child whose token is the target's choice."""
    path, node = [], -1
    while True:
        kids = [i for i in range(len(par)) if par[i] == node and tok[i] == nxt[node + 1]]
        if not kids:
            return path, nxt[node + 1]
        path.append(kids[0])
        node = kids[0]


def _walked(probe, rng):
    """[(answer, parents, tokens, target_next)] for drawn trees over 3 tokens, as lists and as LongTensors."""
    torch = _torch()
    cases = []
    for _ in range(200):
        N = int(rng.integers(1, 12))
        par = [int(rng.integers(-1, i)) if i > 0 else -1 for i in range(N)]
        tok, nxt = rng.integers(0, 3, N).tolist(), rng.integers(0, 3, N + 1).tolist()
        cases.append(((par, tok, nxt), par, tok, nxt))
        cases.append((tuple(tensor(torch.tensor(x, dtype=torch.long)) for x in (par, tok, nxt)), par, tok, nxt))
    answers = probe.many(WALK, [(args, {}) for args, *_ in cases])
    return [(answer,) + tuple(case[1:]) for answer, case in zip(answers, cases)]


def _plain_walk(answer, rule):
    """(path as a list, bonus) when the answer is plain Python values, else Broken(rule)."""
    got = value_of(answer, rule)
    if not (
        isinstance(got, (tuple, list))
        and len(got) == 2
        and isinstance(got[0], (list, tuple))
        and type(got[1]) is int
        and all(type(i) is int for i in got[0])
    ):
        raise Broken(rule, describe(answer))
    return list(got[0]), got[1]


def test_verify_tree_greedy(probe, rng):
    rule = "rule: the greedy walk from the root, longest matching path and the choice after it (other trees)"
    for answer, par, tok, nxt in _walked(probe, rng):
        got = value_of(answer, rule)
        try:
            walked = (list(got[0]), got[1])
        except (TypeError, IndexError, KeyError):
            raise Broken(rule, describe(answer)) from None
        if walked != _walk(par, tok, nxt):
            raise AssertionError(rule)


def test_verify_tree_greedy_edges(probe, rng):
    a, b, c = (int(x) for x in rng.choice(10, 3, replace=False))  # three different tokens
    t = int(rng.integers(0, 10))
    cases = [
        (
            ([-1, -1], [a, b], [c, t, t]),
            ([], c),
            "rule: no child of the root matches: an empty path and the target's choice after the root",
        ),
        (
            ([-1, -1, 1], [a, a, b], [a, c, b, t]),
            ([0], c),
            "rule: when several children match, the one with the smallest index",
        ),
        (([], [], [t]), ([], t), "rule: an empty tree is a plain step: ([], target_next[0])"),
    ]
    for (args, want, rule), answer in zip(cases, probe.many(WALK, [(args, {}) for args, _, _ in cases])):
        got = value_of(answer, rule)
        try:
            ok = (list(got[0]), got[1]) == want
        except (TypeError, IndexError, KeyError):
            ok = False
        if not ok:
            raise Broken(rule, describe(answer))


CHAIN = "rule: path is a chain of the tree from the root and bonus one of target_next's ids"


def test_verify_tree_greedy_types(probe, rng):
    rule = "rule: path holds plain ints and bonus is a plain int"
    for answer, par, _, nxt in _walked(probe, rng):
        path, bonus = _plain_walk(answer, rule)
        # Loose on purpose: which chain and which id are test_verify_tree_greedy's rules; `([], 0)` fails here.
        if not (bonus in nxt and all(0 <= i < len(par) and par[i] == a for i, a in zip(path, [-1] + path))):
            raise AssertionError(CHAIN)


def test_verify_tree_greedy_bad_input(probe, rng):
    a, b = (int(x) for x in rng.integers(0, 50, 2))
    bad = [
        (([-1, 0], [a, b], [1, 2]), "target_next"),
        (([-1, 0], [a, b], [1, 2, 3, 4]), "target_next"),
        (([-1, 1], [a, b], [1, 2, 3]), "parents"),
        (([-1, 0, 3], [a, b, a], [1, 2, 3, 4]), "parents"),
        (([-1], [], [1, 2]), "tokens"),
        (([-1, 0], [a, b, a], [1, 2, 3]), "tokens"),
    ]
    order = rng.permutation(len(bad)).tolist()
    answered(probe.many(WALK, [(([-1, 0], [a, b], [1, 2, 3]), {})]))
    value_errors(
        probe.many(WALK, [(bad[i][0], {}) for i in order]),
        [bad[i][1] for i in order],
        "rule: bad input: tokens not N long, target_next not N + 1 long, or a parent outside [-1, i) (ValueError)",
        "rule: bad input: the message names the argument (parents, tokens or target_next)",
    )


# ------------------------------------------------------------------------------------ D: tree decoding
TREE = "tree_generate"


def _same_or_tie(model, want, got, gap=1e-4):
    """equal, or first different where the model's top two logits tie within `gap` (float rounding)."""
    torch = _torch()
    if got == want:
        return True
    if len(got) != len(want):
        return False
    i = next(j for j, (a, b) in enumerate(zip(want, got)) if a != b)
    with torch.no_grad():
        top2 = model(torch.tensor([want[:i]])).logits[0, -1].topk(2).values
    return float(top2[0] - top2[1]) < gap


def _trees(probe, cases, rule):
    """cases: (target recipe, heads recipe, prompt (1, T) tensor, new tokens, parents, ranks); each output against
    the judge's own greedy decoding of its own copy of the target."""
    from specdec.core.decoding import greedy_generate

    names = {"target": _target()}
    answers = probe.many(TREE, [((t, h, tensor(prompt), n, par, rk), {}) for t, h, prompt, n, par, rk in cases])
    for answer, (t, _, prompt, n, _, _) in zip(answers, cases):
        got = value_of(answer, rule)
        out = got[0] if isinstance(got, (tuple, list)) and got else None
        if not (isinstance(out, Tensor) and out.kind == "torch" and out.shape == (1, prompt.shape[1] + n)):
            raise Broken(
                rule, describe(answer) + f" (the prompt and the new tokens make shape (1, {prompt.shape[1] + n}))"
            )
        model = build(t, names)
        if not _same_or_tie(model, greedy_generate(model, prompt, n)[0].tolist(), out.values[0]):
            raise AssertionError(rule)


def test_tree_generate_greedy(probe, rng):
    from autograde.judges.nb04 import _pair
    from specdec.core.decoding import heldout_prompts
    from specdec.core.models import heldout_texts

    shapes = [
        ([-1, 0, 1], [0, 0, 0]),
        ([-1, -1, -1], [0, 1, 2]),
        ([-1, -1, 0, 1, 2, 2], [0, 1, 0, 0, 0, 1]),
        ([-1, -1, 0, 0, 2], [0, 1, 0, 1, 0]),
    ]
    cases = []
    for j in rng.permutation(len(shapes))[:3].tolist():
        domain = str(rng.choice(["code", "json", "prose"]))
        prompt = heldout_prompts(
            _pair()[2],
            heldout_texts(domain),
            1,
            prompt_tokens=int(rng.integers(6, 16)),
            seed=int(rng.integers(0, 10**6)),
        )[0]
        cases.append(
            (named("target"), call("load_medusa", named("target")), prompt, int(rng.integers(12, 21)), *shapes[j])
        )
    _trees(probe, cases, "rule: exact: tree decoding equals greedy decoding (other trees and prompts)")


def test_tree_generate_greedy_models(probe, rng):
    torch = _torch()
    s = int(rng.integers(0, 10**6))
    model = tiny_llama(vocab_size=200, hidden_size=48, num_hidden_layers=2, num_attention_heads=4, seed=s)
    cases = []
    for T, n_new, (par, rk) in (
        (1, int(rng.integers(8, 14)), ([-1, 0], [0, 0])),
        (int(rng.integers(3, 8)), int(rng.integers(14, 22)), ([-1, -1, 0, 1, 2], [0, 1, 0, 1, 0])),
        (int(rng.integers(6, 10)), 3, ([-1, 0, 1, 2], [0, 0, 0, 0])),
    ):
        prompt = torch.tensor(rng.integers(0, 200, (1, T)).tolist(), dtype=torch.long)
        cases.append((model, random_heads(model, 4, s + T), prompt, n_new, par, rk))
    _trees(probe, cases, "rule: exact: tree decoding equals greedy decoding (other models, prompt lengths and trees)")


# ------------------------------------------------------------------------------------ E: verify_tree_sampled
SAMPLED = "verify_tree_sampled"
# rounds of the sampled rule's distribution tests, chosen by their power against the wrong implementations of
# tests/test_wrong_implementations.py (each detected at p < 1e-11 or below in 24 of 24 draws; docs/grading.md)
ROUNDS = {"chain": 1500, "trees": 1000, "siblings": 2000, "empty": 600}


def _walk_of(answer, rule):
    """(path, next_token) from an answer, read as the notebook's exact_plain did (plain ints), else Broken(rule)."""
    got = value_of(answer, rule)
    if not (
        isinstance(got, (tuple, list))
        and len(got) == 2
        and isinstance(got[0], (list, tuple))
        and type(got[1]) is int
        and all(type(i) is int for i in got[0])
    ):
        raise Broken(rule, describe(answer))
    return list(got[0]), got[1]


def _relabel(rng, rows_):
    """The same distributions over a vocabulary relabelled by a drawn permutation (columns permuted)."""
    perm = rng.permutation(len(rows_[0]))
    return [[r[i] for i in perm] for r in rows_], perm


def test_verify_tree_sampled(probe, rng):
    torch = _torch()
    V = int(rng.integers(3, 7))
    t = int(rng.integers(0, V))
    one_hot = [[1.0 if i == t else 0.0 for i in range(V)]]
    (p0, q0), perm = _relabel(rng, [[0.0, 0.3, 0.7], [0.6, 0.3, 0.1]])  # label j of the worked rows is perm^-1
    inv = {int(old): new for new, old in enumerate(perm)}
    uniform = [[1 / 3] * 3] * 3
    cases = [
        (
            ([], [], tensor(torch.tensor(one_hot)), tensor(torch.full((1, V), 1 / V))),
            ([], t),
            "rule: an empty tree is a plain sampling step: ([], a token drawn from p[0])",
        ),
        (
            (
                [-1, -1, -1],
                [inv[0], inv[1], inv[1]],
                tensor(torch.tensor([p0] + uniform)),
                tensor(torch.tensor([q0] + uniform)),
            ),
            ([], inv[2]),
            "rule: after a rejection the next child is tried against the residual, not against p",
        ),
    ]
    for (args, want, rule), answer in zip(cases, probe.many(SAMPLED, [(args, {}) for args, _, _ in cases])):
        got = value_of(answer, rule)
        try:
            ok = (list(got[0]), got[1]) == want
        except (TypeError, IndexError, KeyError):
            ok = False
        if not ok:
            raise Broken(rule, describe(answer) if answer[0] != "value" else "")


def test_verify_tree_sampled_greedy(probe, rng):
    torch = _torch()
    cases = []
    for _ in range(150):
        N, V = int(rng.integers(0, 10)), int(rng.integers(2, 5))
        par = [int(rng.integers(-1, i)) if i > 0 else -1 for i in range(N)]
        tok, choice = rng.integers(0, V, N).tolist(), rng.integers(0, V, N + 1).tolist()
        q = rng.random((N + 1, V)) + 0.05
        q = torch.tensor((q / q.sum(-1, keepdims=True)).tolist(), dtype=torch.float32)
        p = torch.nn.functional.one_hot(torch.tensor(choice), V).float()
        seed = int(rng.integers(0, 2**31))
        for form in (
            (par, tok),
            (tensor(torch.tensor(par, dtype=torch.long)), tensor(torch.tensor(tok, dtype=torch.long))),
        ):
            cases.append(((*form, tensor(p), tensor(q), generator(seed)), _walk(par, tok, choice)))
    greedy = "rule: with one-hot rows of p (temperature 0) the walk is the greedy walk of Part D (other trees)"
    plain = "rule: path holds plain ints and next_token is a plain int"
    for (_, want), answer in zip(cases, probe.many(SAMPLED, [(args, {}) for args, _ in cases])):
        got = value_of(answer, greedy)
        try:
            walked = (list(got[0]), got[1])
        except (TypeError, IndexError, KeyError):
            raise Broken(greedy, describe(answer)) from None
        if walked != want:
            raise AssertionError(greedy)
        _walk_of(answer, plain)


def _pvalue(counts, expected):
    """chi-square p-value, the rarest cells merged until every expected count is at least 5."""
    from scipy.stats import chisquare

    obs, exp = [float(c) for c in counts], [float(e) for e in expected]
    while len(exp) > 1 and min(exp) < 5:
        i = int(np.argmin(exp))
        e, o = exp.pop(i), obs.pop(i)
        j = int(np.argmin(exp))
        exp[j], obs[j] = exp[j] + e, obs[j] + o
    return chisquare(obs, np.array(exp) * (sum(obs) / sum(exp))).pvalue


def _markov_pair(rng, V, root_p=None, root_q=None):
    """A toy target and draft that are Markov chains over V tokens: P[0] the target's distribution after the root,
    P[1 + x] the one after token x (Q likewise); drawn from the judge's generator."""
    torch = _torch()
    g = torch.Generator().manual_seed(int(rng.integers(0, 2**31)))
    P = torch.rand(V + 1, V, generator=g) ** 2 + 0.02
    Q = torch.rand(V + 1, V, generator=g) + 0.02
    if root_p is not None:
        P[0], Q[0] = torch.tensor(root_p), torch.tensor(root_q)
    return P / P.sum(-1, keepdim=True), Q / Q.sum(-1, keepdim=True)


def _residual(p_now, q_row):
    """p' after a rejection, as the notebook's rule says: normalise(max(p' - q, 0)), p' itself where that is all
    zero (float64 tensors)."""
    r = (p_now - q_row).clamp(min=0)
    return r / r.sum() if r.sum() > 0 else p_now


def _path_lengths(parents, P, Q):
    """Exact distribution of the accepted path's length: child j of a node is tried after j - 1 rejections and
    accepted with token x with probability min(p'(x), q(x)); a rejection leaves p' = normalise(max(p' - q, 0))."""
    torch = _torch()
    kids = {a: [i for i in range(len(parents)) if parents[i] == a] for a in range(-1, len(parents))}

    def walk(node, p_row, q_row):
        out = np.zeros(len(parents) + 1)
        left, p_now = 1.0, p_row.double()
        for c in kids[node]:
            both = torch.minimum(p_now, q_row.double())
            for x in range(len(both)):
                if both[x] > 0:
                    out[1:] += left * float(both[x]) * walk(c, P[1 + x], Q[1 + x])[:-1]
            left *= 1 - float(both.sum())
            p_now = _residual(p_now, q_row.double())
        out[0] += left
        return out

    return walk(-1, P[0], Q[0])


def _first_choice(p_row, q_row, m):
    """Exact joint distribution, for m children of the root whose tokens are drawn independently from q_row, of
    (the child accepted, m for none; the first token emitted), as an (m + 1, V) array: child j is tried after j
    rejections, each with a uniform draw of its own, against the residual chain (_path_lengths' rule)."""
    import itertools

    q = q_row.double()
    out = np.zeros((m + 1, len(q)))
    for toks in itertools.product(range(len(q)), repeat=m):
        w, left, p_now = float(q[list(toks)].prod()), 1.0, p_row.double()
        for j, x in enumerate(toks):
            accept = min(1.0, float(p_now[x] / q[x])) if q[x] > 0 else 0.0
            out[j, x] += w * left * accept
            left *= 1 - accept
            p_now = _residual(p_now, q)
        out[m] += w * left * p_now.numpy()
    return out


def _rounds(probe, rng, parents, P, Q, n, rule):
    """n rounds on trees the judge draws from Q, asked in one probe: counts of the first two emitted tokens
    (V * V,) and of the path lengths. A round that emits one token leaves the second to the next round: the judge
    draws it from the target."""
    torch = _torch()
    V, N = P.shape[1], len(parents)
    g = torch.Generator().manual_seed(int(rng.integers(0, 2**31)))
    tok = torch.zeros(n, N, dtype=torch.long)
    for i, a in enumerate(parents):  # node i from its parent's row of q, independently
        tok[:, i] = torch.multinomial(Q[0].expand(n, V) if a < 0 else Q[1 + tok[:, a]], 1, generator=g)[:, 0]
    p_all = torch.cat([P[0].expand(n, 1, V), P[1 + tok]], dim=1)  # (n, N + 1, V)
    q_all = torch.cat([Q[0].expand(n, 1, V), Q[1 + tok]], dim=1)
    answers = probe.map(
        SAMPLED,
        n,
        (
            parents,
            rows(tensor(tok)),
            rows(tensor(p_all)),
            rows(tensor(q_all)),
            seeds(rng.integers(0, 2**31, n).tolist()),
        ),
    )
    joint, lengths = np.zeros(V * V), np.zeros(N + 1)
    for t, answer in enumerate(answers):
        got = value_of(answer, rule)
        try:
            path, nxt = [int(j) for j in got[0]], int(got[1])
            out = [int(tok[t, j]) for j in path] + [nxt]
        except (TypeError, ValueError, IndexError, KeyError):
            raise Broken(rule, describe(answer)) from None
        if not (0 <= out[-1] < V and len(set(path)) == len(path)):
            raise AssertionError(rule)
        if len(out) == 1:
            out.append(int(torch.multinomial(P[1 + out[0]], 1, generator=g)))
        joint[out[0] * V + out[1]] += 1
        lengths[len(path)] += 1
    return joint, lengths


def test_verify_tree_sampled_distribution(probe, rng):
    lengths_rule = "rule: sampling: children are accepted as often as the residual chain says (path lengths)"
    joint_rule = "rule: sampling: the first two tokens follow the target (other trees and vocabularies)"
    root_p, root_q = [0.45, 0.45, 0.1, 0.0], [0.1, 0.3, 0.1, 0.5]
    P, Q = _markov_pair(rng, 4, root_p, root_q)
    n = ROUNDS["chain"]
    joint, lengths = _rounds(probe, rng, [-1, -1, 0], P, Q, n, lengths_rule)
    if not _pvalue(lengths, n * _path_lengths([-1, -1, 0], P, Q)) > 1e-6:
        raise AssertionError(lengths_rule)
    if not _pvalue(joint, n * (P[0][:, None] * P[1:]).flatten().numpy()) > 1e-6:  # the visible check, redrawn
        raise AssertionError(joint_rule)
    n = ROUNDS["trees"]
    for parents, (P, Q) in (
        ([-1, -1, -1, 0, 3], _markov_pair(rng, 4, root_p, root_q)),
        ([-1, 0, 0, 1, -1, 4], _markov_pair(rng, int(rng.integers(4, 6)))),
    ):
        joint, lengths = _rounds(probe, rng, parents, P, Q, n, joint_rule)
        if not _pvalue(joint, n * (P[0][:, None] * P[1:]).flatten().numpy()) > 1e-6:
            raise AssertionError(joint_rule)
        if not _pvalue(lengths, n * _path_lengths(parents, P, Q)) > 1e-6:
            raise AssertionError(lengths_rule)


def test_verify_tree_sampled_distribution_draws(probe, rng):
    torch = _torch()
    # two children of the root: a uniform draw shared by siblings (child 2 accepted only if u < a2 after u >= a1)
    # would accept child 2 in 1.8 % of rounds instead of 6.8 % and send its share to the residual (first token
    # 0.33/0.26/0.41, not p); which child is accepted shows it about 3.5 times as strongly per round as the first
    # token alone, so the rounds are counted by both (child accepted or none, and the first token)
    own = "rule: sampling: every child is tried with a uniform draw of its own (the first token follows p)"
    (p0, q0), _ = _relabel(rng, [[0.28, 0.26, 0.46], [0.07, 0.52, 0.41]])
    p_s, q_s = torch.tensor([p0] + [[1 / 3] * 3] * 2), torch.tensor([q0] + [[1 / 3] * 3] * 2)
    n = ROUNDS["siblings"]
    g = torch.Generator().manual_seed(int(rng.integers(0, 2**31)))
    kids = torch.multinomial(q_s[0], 2 * n, replacement=True, generator=g).view(n, 2)
    chosen = np.zeros((3, 3))  # chosen[child accepted (2: none), first token]
    for t, answer in enumerate(
        probe.map(
            SAMPLED,
            n,
            ([-1, -1], rows(tensor(kids)), tensor(p_s), tensor(q_s), seeds(rng.integers(0, 2**31, n).tolist())),
        )
    ):
        got = value_of(answer, own)
        try:
            path = [int(j) for j in got[0]]
            chosen[path[0] if path else 2, ([int(kids[t, j]) for j in path] + [int(got[1])])[0]] += 1
        except (TypeError, ValueError, IndexError, KeyError):
            raise Broken(own, describe(answer)) from None
    if not (
        _pvalue(chosen.sum(axis=0), n * p_s[0].numpy()) > 1e-6  # the first token alone
        and _pvalue(chosen.flatten(), n * _first_choice(p_s[0], q_s[0], 2).flatten()) > 1e-6
    ):
        raise AssertionError(own)
    empty = "rule: an empty tree is a plain sampling step: ([], a token drawn from p[0])"
    p_one = [float(x) for x in rng.dirichlet([2.0] * 3)]
    p_one = torch.tensor([p_one]) / sum(p_one)
    first = np.zeros(3)
    n = ROUNDS["empty"]
    for answer in probe.map(
        SAMPLED,
        n,
        ([], [], tensor(p_one), tensor(torch.full((1, 3), 1 / 3)), seeds(rng.integers(0, 2**31, n).tolist())),
    ):
        got = value_of(answer, empty)
        try:
            first[int(got[1])] += 1
        except (TypeError, ValueError, IndexError, KeyError):
            raise Broken(empty, describe(answer)) from None
    if not _pvalue(first, n * p_one[0].double().numpy()) > 1e-6:
        raise AssertionError(empty)


def test_verify_tree_sampled_bad_input(probe, rng):
    torch = _torch()
    V = int(rng.integers(3, 7))
    p3, q3 = torch.full((3, V), 1 / V), torch.full((3, V), 1 / V)
    bad_sum, negative = p3.clone(), q3.clone()
    bad_sum[0] = torch.full((V,), 0.5)
    negative[0, 0], negative[0, 1] = negative[0, 0] + 0.25, negative[0, 1] - 0.25 - 1 / V
    negative[0, 2] += 1 / V
    a, b = (int(x) for x in rng.integers(0, V, 2))
    P, Q = tensor(p3), tensor(q3)
    bad = [
        (([-1, 1], [a, b], P, Q), "parents"),
        (([-1, 0], [a, V + int(rng.integers(0, 3))], P, Q), "tokens"),
        (([-1, 0], [a, b, a], P, Q), "tokens"),
        (([-1, 0], [a, b], tensor(p3[:2]), Q), "p"),
        (([-1, 0], [a, b], P, tensor(q3[:, : V - 1])), "q"),
        (([-1, 0], [a, b], tensor(bad_sum), Q), "p"),
        (([-1, 0], [a, b], P, tensor(negative)), "q"),
    ]
    order = rng.permutation(len(bad)).tolist()
    answered(probe.many(SAMPLED, [(([-1, 0], [a, b], P, Q), {})]))
    value_errors(
        probe.many(SAMPLED, [(bad[i][0], {}) for i in order]),
        [bad[i][1] for i in order],
        "rule: bad input: parents outside [-1, i), tokens not N ids in [0, V), p or q not (N + 1, V) rows of "
        "probabilities (ValueError)",
        "rule: bad input: the message names the argument (parents, tokens, p or q)",
    )


# statistical tests the notebook's visible part runs for the learner and the judge runs again on inputs of its
# own (the visible part's tree and the empty tree included): under grading the kernel runs only the judge's probes
# for these cells (executor.kernel_source), not 3,600 more rounds of the visible checks
for _fn in (test_verify_tree_sampled_distribution, test_verify_tree_sampled_distribution_draws):
    _fn.replaces_visible = True

JUDGES = {name: fn for name, fn in globals().items() if name.startswith("test_") and callable(fn)}
