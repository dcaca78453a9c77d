"""Notebook 10: batched speculation is exact (its given cells restating 07's and 08's answers are written from
those solutions by `make release`: tests/test_given_cells.py).

- batched greedy speculation (the notebook's loop with its graded batched_accept and rollback) gives every
  sequence exactly its own plain greedy decoding, on the shipped pair and on random pairs, in rounds where the
  sequences accept different counts, with one target forward per round for the whole batch;
- the server simulation's traces are well formed, and the policies behave as the notebook says at the
  extremes (speculation lowers TPOT at low load; the gate is never worse than both fixed policies);
- its prefill is one forward over the admitted prompts (weight GEMMs over their summed tokens, causal attention
  within each prompt, the LM head at each prompt's last token), and a held draft prefills the same prompts on
  its own GPUs: at an idle server a request's TTFT is exactly that prefill.
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

    from specdec.core.decoding import tiny_llama

    target = tiny_llama(vocab_size=vocab, hidden_size=48, num_hidden_layers=2, seed=seed).double()
    draft = copy.deepcopy(target)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in draft.parameters():
            p.add_(torch.randn(p.shape, generator=g) * 0.4 * p.std())
    return target, draft


def _check_exact(ns, target, draft, prompts, new, k, count=True):
    from specdec.core.decoding import ForwardCounter, greedy_generate

    with ForwardCounter(target) as calls:
        got, stats = ns["batched_speculative_generate"](target, draft, prompts, new, k)
    P = prompts.shape[1]
    for b in range(prompts.shape[0]):
        want = greedy_generate(target, prompts[b : b + 1], new)[0, P:]
        assert torch.equal(got[b], want), f"sequence {b} differs from its own greedy decoding"
    if count:  # (a draft that is the target itself would be counted too)
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
    from specdec.core.decoding import heldout_prompts
    from specdec.core.models import heldout_texts

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
    from specdec.core.decoding import greedy_generate

    target, _ = _noisy_pair(6)
    prompts = torch.randint(0, 64, (4, 6), generator=torch.Generator().manual_seed(6))
    got = ns["batched_greedy"](target, prompts, 10)
    for b in range(4):
        assert torch.equal(got[b], greedy_generate(target, prompts[b : b + 1], 10)[0, 6:])


def _simulator(ns):
    """The notebook's prefill_seconds and simulate_server (an ordinary cell), executed in the solution namespace."""
    cell = next(c.source for c in _cells(NAME) if c.cell_type == "code" and "\ndef simulate_server(" in c.source)
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


def _prefill_reference(m, g, lengths):
    """The prefill from the model's description alone: GEMMs and all-reduces over the summed tokens, causal
    attention per prompt (p^2 / 2 query-key products, half the prompt's KV read), the LM head once per prompt."""
    from specdec.tables import TPGroup

    n = g.n_gpus if isinstance(g, TPGroup) else 1
    bw, fl, M = g.bandwidth_bytes_per_s * n, g.flops_per_s * n, sum(lengths)
    gemm = max(m["layer_bytes"] / bw, M * m["layer_bytes"] / fl)
    attention = sum(
        max(p / 2 * m["kv_bytes_per_token"] / bw, p * p / 2 * m["attention_flops_per_cached_token"] / fl)
        for p in lengths
    )
    lm_head = max(m["lm_head_bytes"] / bw, len(lengths) * m["lm_head_bytes"] / fl)
    reduce = (
        0.0
        if n == 1
        else 2 * m["layers"] * (g.allreduce_latency_s + 2 * (n - 1) / n * M * m["hidden_size"] * 2 / g.link_bytes_per_s)
    )
    fixed = g.fixed_s_per_layer * m["layers"] if isinstance(g, TPGroup) else 0.0
    return fixed + gemm + attention + lm_head + reduce


def test_prefill_is_one_forward_over_the_admitted_prompts(ns):
    _simulator(ns)
    prefill, spec = ns["prefill_seconds"], ns["model_spec"]
    l8, l1, l70, h100 = spec("Llama-3.1-8B"), spec("Llama-3.2-1B"), spec("Llama-3.1-70B"), ns["h100"]
    assert prefill(l8, h100, []) == 0.0
    setups = [
        (l8, h100),
        (l1, h100),
        (l70, ns["gpus"](h100, 8)),
        (l70, ns["gpus"](h100, 4, draft_n=1, fixed_s_per_layer=1e-5)),
    ]
    for m, g in setups:
        for lengths in ([1], [144] * 16, [32, 256, 97], [4096], [2048, 6144]):
            want = _prefill_reference(m, g, lengths)
            assert abs(prefill(m, g, lengths) - want) <= 1e-9 * want, (m["name"], g.name, lengths)
    together, alone = prefill(l8, h100, [144] * 16), sum(prefill(l8, h100, [144]) for _ in range(16))
    assert together < 0.5 * alone, "short prompts share one weight read when prefilled together"
    assert abs(prefill(l8, h100, [4096] * 2) - 2 * prefill(l8, h100, [4096])) <= 0.01 * prefill(l8, h100, [4096]), (
        "a long prompt is compute-bound alone: company saves (almost) nothing"
    )


@pytest.mark.parametrize("setup", ["8B + 1B, 1 x H100", "70B + 1B, 4 x H100, draft on 1"])
def test_an_idle_server_answers_after_the_prefill_of_target_and_held_draft(ns, setup):
    simulate = _simulator(ns)
    spec, h100 = ns["model_spec"], ns["h100"]
    target, draft, gpu = (
        (spec("Llama-3.1-8B"), spec("Llama-3.2-1B"), h100)
        if setup.startswith("8B")
        else (spec("Llama-3.1-70B"), spec("Llama-3.2-1B"), ns["gpus"](h100, 4, draft_n=1))
    )
    prompts, outputs = np.array([40, 900, 3000, 6000, 128]), np.array([30, 64, 2, 100, 50])
    for policy in ("off", "fixed", "gated"):
        trace, _ = simulate(0.01, prompts, outputs, target, draft, gpu, policy, 0.8, 4, seed=2)
        gaps = np.diff(trace["arrival"])
        assert (trace["finish"][:-1] < trace["arrival"][1:]).all() and gaps.min() > 0, (
            "each request finds the server idle"
        )
        for i, p in enumerate(prompts):
            want = ns["prefill_seconds"](target, gpu, [p])
            if policy != "off":
                want += ns["prefill_seconds"](draft, ns["draft_gpus"](gpu), [p])
            ttft = trace["first_token"][i] - trace["arrival"][i]
            assert abs(ttft - want) <= 1e-9 * want, (policy, int(p), ttft, want)


def test_a_chain_priced_as_a_tree_round_is_notebook_07s_spec_speedup(ns):
    """specdec.core.trees prices a round the way notebook 07 does: with H100 step_seconds and a chain of k top-1 nodes,
    its throughput over plain decoding equals spec_speedup at alpha = a[0] (the section on trees at batch)."""
    from specdec.core.trees import best_round, round_seconds, tree_tau

    l8, l1, h100 = ns["model_spec"]("Llama-3.1-8B"), ns["model_spec"]("Llama-3.2-1B"), ns["h100"]
    a = [0.62, 0.2, 0.06]
    for batch, k, context in ((1, 4, 1024), (32, 2, 512), (128, 3, 2048)):

        def target_s(B, t):
            return ns["step_seconds"](l8, h100, B, context, t)

        def draft_s(B, t):
            return ns["step_seconds"](l1, ns["draft_gpus"](h100), B, context, t)

        chain = list(range(-1, k - 1))
        priced = tree_tau(a, chain, [0] * k) * target_s(batch, 1) / round_seconds(chain, target_s, draft_s, batch, 0)
        assert priced == pytest.approx(ns["spec_speedup"](batch, context, a[0], k, l8, l1, h100), rel=1e-9)
        best = best_round(a, target_s, draft_s, batch, range(0, 9), first_extra=0)
        assert best["tree"]["rate"] >= best["chain"]["rate"] > 0


def test_the_simulator_pays_the_rounds_own_terms(ns):
    """simulate_server(..., terms=...): c_round once per speculative round (the plain steps of policy off do not pay
    it), the sampler in every forward, vLLM's first pass in the draft's first step; without terms, the bare round."""
    from specdec.tables import vllm_v1_first_pass

    simulate = _simulator(ns)
    l8, l1, h100 = ns["model_spec"]("Llama-3.1-8B"), ns["model_spec"]("Llama-3.2-1B"), ns["h100"]
    prompts, outputs = np.array([500]), np.array([101])  # one request on an idle server: one sequence

    def run(policy, **terms):
        return simulate(0.01, prompts, outputs, l8, l1, h100, policy, 0.8, 4, seed=3, terms=terms or None)[0]["finish"][
            0
        ]

    base = run("fixed")
    assert run("fixed", first_draft_tokens=1, c_round=0.0, sampler_passes=0) == base
    rounds = (run("fixed", c_round=1e-3) - base) / 1e-3
    assert abs(rounds - round(rounds)) < 1e-6 and 100 / 5 <= round(rounds) <= 100, rounds
    assert run("off", c_round=1e-3) == run("off"), "plain decoding pays no round cost"
    assert run("off", sampler_passes=3) > run("off"), "the sampler runs in every forward, plain steps too"
    assert run("fixed", sampler_passes=3) > base
    assert run("fixed", first_draft_tokens=vllm_v1_first_pass) >= base


def test_the_simulator_charges_its_step_overhead_once_per_iteration(ns):
    """simulate_server(..., terms={"c_step": S}): every server iteration pays S once, plain steps and rounds alike,
    so one request on an idle server finishes later by S x its iterations (the prefill's included)."""
    simulate = _simulator(ns)
    l8, l1, h100 = ns["model_spec"]("Llama-3.1-8B"), ns["model_spec"]("Llama-3.2-1B"), ns["h100"]
    prompts, outputs = np.array([500]), np.array([101])
    for policy in ("off", "fixed"):
        base = simulate(0.01, prompts, outputs, l8, l1, h100, policy, 0.8, 4, seed=3)[0]["finish"][0]
        late = simulate(0.01, prompts, outputs, l8, l1, h100, policy, 0.8, 4, seed=3, terms={"c_step": 1e-3})[0][
            "finish"
        ][0]
        iterations = (late - base) / 1e-3
        assert abs(iterations - round(iterations)) < 1e-6, iterations
        want = 101 if policy == "off" else None  # the prefill gives the first token, then 100 plain steps
        if want:
            assert round(iterations) == want
        else:
            assert 1 + 100 / 5 <= round(iterations) <= 101


def test_a_prefill_shares_the_running_batchs_forward_as_in_vllm_v1(ns):
    """10's server schedules as vLLM V1 does: an admitted prompt's tokens join the running batch's forward (one weight
    read and one fixed cost for all its tokens, not a second forward), and a held draft takes them in its first pass;
    only an idle server (or a draft whose steps the gate turned off) prefills in a forward of its own."""
    simulate = _simulator(ns)
    forward, prefill, step, terms = ns["forward_seconds"], ns["prefill_seconds"], ns["step_seconds"], ns["step_terms"]
    spec, h100 = ns["model_spec"], ns["h100"]
    l8, l1 = spec("Llama-3.1-8B"), spec("Llama-3.2-1B")
    slow = ns["attainable"](h100, 0.8, 0.7, 1e-3)
    for gpu in (h100, slow, ns["gpus"](h100, 4)):
        for B, L, t, prompts in ((8, 300, 1, [144, 60]), (64, 1024, 5, [3000]), (16, 200, 6, [32] * 5)):
            got = forward(l8, gpu, B, L, t, prompts)
            M = B * t + sum(prompts)
            weights = terms(l8, gpu, 1, 0, tokens=M)
            want = (
                weights["fixed"]
                + weights["gemm"]
                + weights["allreduce"]
                + terms(l8, gpu, B, L, t)["attention"]
                + sum(terms(l8, gpu, 1, p / 2, tokens=p)["attention"] for p in prompts)
                + terms(l8, gpu, B * t + len(prompts), 0)["lm_head"]
            )
            assert got == pytest.approx(want, rel=1e-12)
            apart = step(l8, gpu, B, L, t) + prefill(l8, gpu, prompts)
            assert got < apart - 0.9 * weights["fixed"], "one forward: the fixed cost is paid once, not twice"
        assert forward(l8, gpu, 8, 300, 1, ()) == step(l8, gpu, 8, 300, 1)
        assert forward(l8, gpu, 0, 0, 1, [144]) == prefill(l8, gpu, [144])
    # the simulator: record who prices the second request's prompt, which arrives while the first decodes
    calls = []

    def rec(name, f):
        def wrapped(model, gpu, *args):
            calls.append((name, model["name"], args))
            return f(model, gpu, *args)

        return wrapped

    ns["forward_seconds"], ns["prefill_seconds"] = rec("forward", forward), rec("prefill", prefill)
    try:
        arrivals = simulate(10.0, np.array([100, 777]), np.array([200, 50]), l8, l1, h100, "fixed", 0.8, 4, seed=5)[0]
    finally:
        ns["forward_seconds"], ns["prefill_seconds"] = forward, prefill
    assert arrivals["arrival"][1] < arrivals["finish"][0], "the second request arrives while the first decodes"
    second = [(name, model) for name, model, args in calls if 777 in list(args[-1] if args else [])]
    assert ("forward", l8["name"]) in second and ("forward", l1["name"]) in second, second
    assert not [c for c in second if c[0] == "prefill"], f"a second forward for a prompt that could share one: {second}"
