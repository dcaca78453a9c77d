"""Notebook 10: batched speculation is exact (its given cells restating 07's and 08's answers are written from
those solutions by `make release`: tests/test_given_cells.py).

- batched greedy speculation (the notebook's loop with its graded batched_accept and rollback) gives every
  sequence exactly its own plain greedy decoding, on the shipped pair and on random pairs, in rounds where the
  sequences accept different counts, with one target forward per round for the whole batch;
- the server simulation's traces are well formed, and the policies behave as the notebook says at the
  extremes (speculation lowers TPOT at low load; the gate is never worse than both fixed policies).
"""
import nbformat
import numpy as np
import pytest
import torch

from nbhelpers import solution_namespace, solution_path

pytestmark = pytest.mark.usefixtures("one_thread")
NAME = "10_batches_and_servers"


def _cells(name):
    return nbformat.read(str(solution_path(name)), as_version=4).cells


@pytest.fixture(scope="module")
def ns():
    return solution_namespace(NAME)


def _noisy_pair(seed, vocab=64):
    import copy
    from specdec.decoding import tiny_llama
    target = tiny_llama(vocab_size=vocab, hidden_size=48, num_hidden_layers=2, seed=seed).double()
    draft = copy.deepcopy(target)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in draft.parameters():
            p.add_(torch.randn(p.shape, generator=g) * 0.4 * p.std())
    return target, draft


def _check_exact(ns, target, draft, prompts, new, k, count=True):
    from specdec.decoding import ForwardCounter, greedy_generate
    with ForwardCounter(target) as calls:
        got, stats = ns["batched_speculative_generate"](target, draft, prompts, new, k)
    P = prompts.shape[1]
    for b in range(prompts.shape[0]):
        want = greedy_generate(target, prompts[b:b + 1], new)[0, P:]
        assert torch.equal(got[b], want), f"sequence {b} differs from its own greedy decoding"
    if count:     # (a draft that is the target itself would be counted too)
        assert calls.calls == stats["rounds"] + 1, "one target forward per round (plus the prefill)"
    return stats


def _ragged_rounds(stats):
    return sum(len(set(n.tolist())) > 1 for n in stats["per_round"])


@pytest.mark.parametrize("seed,batch,k", [(0, 5, 3), (1, 4, 1), (2, 6, 5), (3, 3, 2)])
def test_batched_speculation_equals_greedy_on_random_pairs(ns, seed, batch, k):
    target, draft = _noisy_pair(seed)
    prompts = torch.randint(0, 64, (batch, 7), generator=torch.Generator().manual_seed(seed))
    stats = _check_exact(ns, target, draft, prompts, 18, k)
    if k > 1:
        assert _ragged_rounds(stats) > 0, "the test should include rounds where sequences accept different counts"


def test_batched_speculation_equals_greedy_on_the_shipped_pair(ns, pair):
    from specdec.decoding import heldout_prompts
    from specdec.models import heldout_texts
    target, draft, tokenizer = pair
    prompts = torch.cat(heldout_prompts(tokenizer, heldout_texts("code"), 4, prompt_tokens=24, seed=3))
    stats = _check_exact(ns, target, draft, prompts, 20, 4)
    assert _ragged_rounds(stats) > 0


def test_a_draft_equal_to_the_target_accepts_everything(ns):
    target, _ = _noisy_pair(5)
    prompts = torch.randint(0, 64, (3, 5), generator=torch.Generator().manual_seed(5))
    stats = _check_exact(ns, target, target, prompts, 12, 3, count=False)
    assert all(n.tolist() == [3, 3, 3] for n in stats["per_round"])


def test_batched_greedy_equals_per_sequence_greedy(ns):
    from specdec.decoding import greedy_generate
    target, _ = _noisy_pair(6)
    prompts = torch.randint(0, 64, (4, 6), generator=torch.Generator().manual_seed(6))
    got = ns["batched_greedy"](target, prompts, 10)
    for b in range(4):
        assert torch.equal(got[b], greedy_generate(target, prompts[b:b + 1], 10)[0, 6:])


def _simulator(ns):
    """The notebook's simulate_server (an ordinary cell), executed in the solution namespace."""
    cell = next(c.source for c in _cells(NAME) if c.cell_type == "code" and c.source.startswith("def simulate_server"))
    exec(compile(cell, f"{NAME}:simulate_server", "exec"), ns)
    return ns["simulate_server"]


def test_simulated_traces_are_well_formed_and_policies_behave(ns):
    simulate = _simulator(ns)
    l8, l1, h100 = ns["model_spec"]("Llama-3.1-8B"), ns["model_spec"]("Llama-3.2-1B"), ns["h100"]
    rng = np.random.default_rng(0)
    prompts, outputs = rng.integers(32, 257, 300), rng.integers(64, 257, 300)
    tpot = {}
    for policy in ("off", "fixed", "gated"):
        trace, mean_k = simulate(2.0, prompts, outputs, l8, l1, h100, policy, 0.8, 4, seed=1)
        assert not np.isnan(trace["finish"]).any() and not np.isnan(trace["first_token"]).any()
        assert (trace["first_token"] >= trace["arrival"]).all() and (trace["finish"] >= trace["first_token"]).all()
        tpot[policy] = ns["serving_metrics"](trace)["tpot_p50"]
        assert mean_k == {"off": 0.0, "fixed": 4.0}.get(policy, mean_k)
    assert tpot["fixed"] < tpot["off"] and tpot["gated"] < tpot["off"], tpot
