"""specdec.core.trees: the best tree per node budget, its tau, its draft forwards and a round's price at batch."""

import itertools

import numpy as np
import pytest
import torch

from specdec.core.trees import (
    best_round,
    best_tree,
    depths,
    draft_ranks,
    draft_widths,
    is_chain,
    rank_profile,
    round_seconds,
    tree_tau,
)


def expected_tokens(alpha, k):
    return sum(alpha**i for i in range(k + 1))


def all_trees(n, n_ranks):
    # every (parents, ranks) with n nodes, distinct (parent, rank) pairs: the brute-force reference
    for parents in itertools.product(*[range(-1, i) for i in range(n)]):
        for ranks in itertools.product(range(n_ranks), repeat=n):
            if len(set(zip(parents, ranks))) == n:
                yield list(parents), list(ranks)


def test_a_chain_of_top_one_nodes_gives_notebook_03s_expected_tokens():
    for a0, k in ((0.7, 4), (0.3, 1), (0.9, 8)):
        assert tree_tau([a0, 0.05], list(range(-1, k - 1)), [0] * k) == pytest.approx(expected_tokens(a0, k))


@pytest.mark.parametrize("a", [[0.6, 0.15, 0.05], [0.3, 0.25, 0.2], [0.9, 0.02, 0.01]])
def test_best_tree_is_the_best_of_every_tree_with_that_many_nodes(a):
    for n in range(1, 5):
        parents, ranks, probs = best_tree(a, n)
        brute = max(tree_tau(a, p, r) for p, r in all_trees(n, len(a)))
        assert tree_tau(a, parents, ranks) == pytest.approx(brute), (a, n)
        assert 1 + sum(probs) == pytest.approx(tree_tau(a, parents, ranks))


def test_best_tree_grows_a_chain_when_the_top_choice_dominates_and_branches_when_it_does_not():
    assert is_chain(best_tree([0.9, 0.05], 4)[0])
    parents, ranks, _ = best_tree([0.4, 0.35, 0.1], 2)
    assert parents == [-1, -1] and ranks == [0, 1] and not is_chain(parents)
    assert best_tree([0.5], 0) == ([], [], [])


def test_depths_widths_and_chains():
    parents = [-1, -1, 0, 2, 0]
    assert depths(parents) == [1, 1, 2, 3, 2]
    assert draft_widths(parents) == [1, 1, 1]  # root; node 0 (depth 1); node 2 (depth 2)
    assert draft_widths([-1, 0, 1]) == [1, 1, 1] and draft_widths([]) == []
    assert is_chain([-1, 0, 1]) and not is_chain([-1, -1]) and is_chain([])


def test_round_seconds_adds_a_draft_forward_per_level_and_one_verify():
    calls = []

    def target(b, t):
        calls.append(("t", b, t))
        return 10.0 * t

    def draft(b, t):
        calls.append(("d", b, t))
        return 1.0 * t

    assert round_seconds([-1, -1, 0, 2, 0], target, draft, 3) == pytest.approx((2 + 1 + 1) + 10.0 * 6)
    assert calls == [("d", 3, 2), ("d", 3, 1), ("d", 3, 1), ("t", 3, 6)]
    assert round_seconds([-1], target, draft, 1, first_extra=0, overhead=0.5) == pytest.approx(1 + 20 + 0.5)


def test_overheads_enter_the_round_and_the_plain_step():
    a = [0.6, 0.2]
    base = best_round(a, lambda b, t: 1.0, lambda b, t: 0.1, 2, [1])
    more = best_round(a, lambda b, t: 1.0, lambda b, t: 0.1, 2, [1], round_overhead=0.3, step_overhead=0.2)
    assert more["chain"]["seconds"] == pytest.approx(base["chain"]["seconds"] + 0.3)
    assert more["plain"]["seconds"] == pytest.approx(1.2)
    assert more["plain"]["rate"] == pytest.approx(2 / 1.2)


def test_best_round_prefers_a_tree_when_verify_is_free_and_a_chain_or_less_when_tokens_cost():
    a = [0.55, 0.2, 0.08, 0.04]
    free = best_round(a, lambda b, t: 1.0, lambda b, t: 0.01, 1, range(0, 9))
    assert free["tree"]["N"] == 8 and not free["tree"]["is_chain"]
    assert free["tree"]["rate"] >= free["chain"]["rate"] > free["plain"]["rate"]
    # a verify whose cost grows with every token (compute-bound): small trees, which are chains
    costly = best_round(a, lambda b, t: 1.0 * t, lambda b, t: 0.01 * t, 64, range(0, 9))
    assert costly["tree"]["N"] <= 2 and costly["tree"]["is_chain"]
    assert costly["tree"]["rate"] == pytest.approx(costly["chain"]["rate"])


def test_rank_profile_and_draft_ranks():
    logits = torch.tensor([[3.0, 2.0, 1.0], [0.0, 5.0, 1.0], [1.0, 0.0, 2.0]])
    ranks = draft_ranks(torch.tensor([0, 2, 1]), logits)
    assert ranks.tolist() == [0, 1, 2]
    assert rank_profile(ranks, 4).tolist() == pytest.approx([1 / 3, 1 / 3, 1 / 3, 0.0])
    assert rank_profile(np.zeros(5, int), 2).tolist() == [1.0, 0.0]


@pytest.mark.parametrize(
    "call, word",
    [
        (lambda: best_tree([0.5, 0.6], 2), "rank profile"),
        (lambda: best_tree([-0.1], 2), "rank profile"),
        (lambda: best_tree([0.5], -1), "n_nodes"),
        (lambda: tree_tau([0.5], [0], [0]), "parents"),
        (lambda: tree_tau([0.5], [-1], [1]), "ranks"),
        (lambda: tree_tau([0.5], [-1, 0], [0]), "ranks"),
        (lambda: rank_profile([], 3), "empty"),
        (lambda: best_round([0.5], lambda b, t: 1, lambda b, t: 1, 1, [0]), "budgets"),
    ],
)
def test_bad_input_names_what_is_wrong(call, word):
    with pytest.raises(ValueError, match=word):
        call()
