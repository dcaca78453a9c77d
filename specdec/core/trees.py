"""Token trees priced at batch (notebook 10): which tree a node budget buys, what it yields, what a round costs.

A tree is the course's convention (docs/contract.md, notebook 09): `parents[i]` in [-1, i), -1 for a child of the
root. Here each node also has a `rank`: node i is the ranks[i]-th most likely token (0 = the top one) of the
draft's distribution at its parent.

The acceptance model is the one notebook 03 uses for a chain, extended to ranks: at every position the target's
greedy token is the draft's rank-r choice with probability a[r] (the **rank profile**), independently of the
position. Under greedy verification a node is accepted when its whole path is, so a node's probability is the
product of a[rank] along its path, siblings exclude each other (the target picks one token), and a round yields

    tau = 1 + sum over nodes of P(node accepted)

tokens (the 1 is the target's own token after the accepted path). A chain of k top-1 nodes gives
1 + a0 + a0^2 + ... + a0^k = E(a0, k), notebook 03's expected tokens with alpha = a0.
"""

from __future__ import annotations

import heapq
import numbers

import numpy as np


def _check_profile(a):
    a = np.asarray(a, dtype=float)
    if a.ndim != 1 or len(a) == 0 or not np.all(np.isfinite(a)) or np.any(a < 0) or a.sum() > 1 + 1e-9:
        raise ValueError(
            f"rank profile a must be a non-empty 1-D list of probabilities summing to at most 1, got {a!r}"
        )
    return a


def _check_tree(parents, ranks=None):
    parents = list(parents)
    for i, p in enumerate(parents):
        if not isinstance(p, numbers.Integral) or not -1 <= p < i:
            raise ValueError(f"parents[{i}] = {p!r}: a parent must be an int in [-1, {i})")
    if ranks is not None:
        ranks = list(ranks)
        if len(ranks) != len(parents):
            raise ValueError(f"ranks has {len(ranks)} entries for {len(parents)} parents")
        if any(not isinstance(r, numbers.Integral) or r < 0 for r in ranks):
            raise ValueError(f"ranks must be ints >= 0, got {ranks!r}")
    return parents, ranks


def rank_profile(ranks_of_target_tokens, n_ranks=8):
    """a[r] = share of positions where the target's token was the draft's rank-r choice, r < n_ranks.

    ranks_of_target_tokens: the draft's rank (0 = its argmax) of the target's greedy token, one per position."""
    r = np.asarray(ranks_of_target_tokens).ravel()
    if r.size == 0:
        raise ValueError("ranks_of_target_tokens is empty: measure at least one position")
    if n_ranks < 1:
        raise ValueError(f"n_ranks must be >= 1, got {n_ranks}")
    return np.array([(r == k).mean() for k in range(n_ranks)])


def draft_ranks(target_ids, draft_logits):
    """The draft's rank of each target token: target_ids (T,), draft_logits (T, V) at the same positions."""
    picked = draft_logits.gather(-1, target_ids.view(-1, 1))
    return (draft_logits > picked).sum(-1).view(-1).cpu().numpy()


def best_tree(a, n_nodes):
    """The tree of `n_nodes` nodes with the highest tau under rank profile `a`: (parents, ranks, node_probs).

    A node's probability never exceeds its parent's (a product of factors <= 1), so the n_nodes most probable
    candidates always form a tree: grown one node at a time from the most probable frontier candidate (every rank
    under every node already in the tree), as EAGLE-2 grows its trees from the draft's confidence and Sequoia
    chooses its shapes. Ties go to the candidate found first (lower rank, earlier parent)."""
    a = _check_profile(a)
    if not isinstance(n_nodes, numbers.Integral) or n_nodes < 0:
        raise ValueError(f"n_nodes must be an int >= 0, got {n_nodes!r}")
    parents, ranks, probs = [], [], []
    frontier, order = [], 0
    for r, ar in enumerate(a):
        heapq.heappush(frontier, (-ar, order, -1, r))
        order += 1
    while len(parents) < n_nodes and frontier:
        neg, _, parent, r = heapq.heappop(frontier)
        node, prob = len(parents), -neg
        parents.append(parent)
        ranks.append(r)
        probs.append(prob)
        for rr, ar in enumerate(a):
            heapq.heappush(frontier, (-prob * ar, order, node, rr))
            order += 1
    return parents, ranks, probs


def tree_tau(a, parents, ranks):
    """Expected tokens per round of a tree under rank profile `a` (greedy verification): 1 + sum of node probs."""
    a = _check_profile(a)
    parents, ranks = _check_tree(parents, ranks)
    if any(r >= len(a) for r in ranks):
        raise ValueError(f"ranks must be < len(a) = {len(a)}, got {ranks!r}")
    prob = []
    for p, r in zip(parents, ranks):
        prob.append((1.0 if p < 0 else prob[p]) * a[r])
    return 1.0 + float(sum(prob))


def depths(parents):
    """Depth of each node: 1 for a child of the root, else its parent's depth + 1."""
    parents, _ = _check_tree(parents)
    out = []
    for p in parents:
        out.append(1 if p < 0 else out[p] + 1)
    return out


def draft_widths(parents):
    """Tokens of each draft forward that grows the tree, one forward per level: [1 (the root)] + the nodes of each
    depth 1 .. D-1 that have children. A chain of k nodes gives [1] * k; an empty tree []."""
    parents, _ = _check_tree(parents)
    if not parents:
        return []
    d = depths(parents)
    has_child = {p for p in parents if p >= 0}
    return [1] + [sum(1 for i in has_child if d[i] == level) for level in range(1, max(d))]


def is_chain(parents):
    """True when no node (the root included) has two children."""
    parents, _ = _check_tree(parents)
    return len(set(parents)) == len(parents)


def round_seconds(parents, target_seconds, draft_seconds, batch, first_extra=1, overhead=0.0):
    """One tree round at batch `batch`: a draft forward per level over B x width tokens, then one target forward
    over B x (N + 1) tokens (the root and every node, under a tree mask). target_seconds(B, t) and
    draft_seconds(B, t) give a forward's time with t new tokens per sequence. first_extra tokens join the first
    draft forward (the loop of notebook 10 feeds the previous round's last draft with the root: 1). overhead:
    seconds a round spends outside its forwards (the loop's own bookkeeping), added once."""
    widths = draft_widths(parents)
    if widths:
        widths[0] += first_extra
    draft = sum(draft_seconds(batch, w) for w in widths)
    return draft + target_seconds(batch, len(parents) + 1) + overhead


def best_round(a, target_seconds, draft_seconds, batch, budgets, first_extra=1, round_overhead=0.0, step_overhead=0.0):
    """Over node budgets N in `budgets` (0 = plain decoding), the best tree and the best chain by tokens per second
    at batch `batch`: {"tree": {...}, "chain": {...}, "plain": {...}}, each {"N", "tau", "seconds", "rate"}
    (rate = batch x tau / seconds, tokens per second), "tree" also with "parents", "ranks" and "is_chain".
    round_overhead and step_overhead: seconds outside the forwards, per round and per plain step."""
    a = _check_profile(a)
    plain_s = target_seconds(batch, 1) + step_overhead
    plain = {"N": 0, "tau": 1.0, "seconds": plain_s, "rate": batch / plain_s}
    best = {"tree": None, "chain": None}
    for n in sorted(set(budgets)):
        if n < 1:
            continue
        parents, ranks, _ = best_tree(a, n)
        tree = {
            "N": n,
            "tau": tree_tau(a, parents, ranks),
            "parents": parents,
            "ranks": ranks,
            "is_chain": is_chain(parents),
        }
        chain_par = list(range(-1, n - 1))
        chain = {"N": n, "tau": tree_tau(a, chain_par, [0] * n)}
        for kind, row, par in (("tree", tree, parents), ("chain", chain, chain_par)):
            row["seconds"] = round_seconds(par, target_seconds, draft_seconds, batch, first_extra, round_overhead)
            row["rate"] = batch * row["tau"] / row["seconds"]
            if best[kind] is None or row["rate"] > best[kind]["rate"]:
                best[kind] = row
    if best["tree"] is None:
        raise ValueError(f"budgets must hold at least one node budget >= 1, got {budgets!r}")
    return {**best, "plain": plain}


__all__ = [
    "rank_profile",
    "draft_ranks",
    "best_tree",
    "tree_tau",
    "depths",
    "draft_widths",
    "is_chain",
    "round_seconds",
    "best_round",
]
