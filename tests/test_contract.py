"""The graded functions of docs/contract.md exist in each finished notebook with their exact names and
arguments, and reject bad input with a ValueError that names the argument."""

import inspect

import pytest
import torch
from nbhelpers import ASSIGNMENTS, parse_contract, solution_namespace

from specdec.tables import load_hardware

LLAMA_8B = {
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "vocab_size": 128256,
    "tie_word_embeddings": False,
}

# notebooks 07, 08 and 10: a model is notebook 07's model_spec (bf16, from the HF config), a GPU a
# specdec.tables.Hardware
SPEC_8B = {
    "name": "Llama-3.1-8B",
    "weight_bytes": 16_060_522_496.0,
    "layer_bytes": 13_959_176_192.0,
    "lm_head_bytes": 1_050_673_152.0,
    "kv_bytes_per_token": 131_072.0,
    "attention_flops_per_cached_token": 524_288.0,
    "layers": 32,
    "hidden_size": 4096,
}
SPEC_1B = {
    "name": "Llama-3.2-1B",
    "weight_bytes": 2_471_628_800.0,
    "layer_bytes": 1_946_292_224.0,
    "lm_head_bytes": 525_336_576.0,
    "kv_bytes_per_token": 32_768.0,
    "attention_flops_per_cached_token": 131_072.0,
    "layers": 16,
    "hidden_size": 2048,
}
H100 = load_hardware()["H100 SXM"]

# notebook prefix -> {function: parameters as "name" or "name=default"}, read from docs/contract.md
CONTRACT = {
    name[:2]: {
        fn: sig.split(",") if sig else []
        for part in parts.values()
        for fn, sig in part["entries"].items()
        if sig is not None
    }
    for name, parts in parse_contract().items()
}

# (notebook, function, args, kwargs, the argument the message must name)
BAD_INPUT = [
    ("01", "weight_bytes", (LLAMA_8B,), {"bytes_per_param": 0}, "bytes_per_param"),
    ("01", "weight_bytes", ({"hidden_size": 8},), {}, "cfg"),
    ("01", "kv_bytes_per_token", (LLAMA_8B,), {"bytes_per_elem": -1}, "bytes_per_elem"),
    ("01", "decode_step_seconds", (1e9, 0.0), {}, "bandwidth"),
    ("01", "decode_step_seconds", (-1.0, 1e12), {}, "weight_bytes"),
    ("01", "decode_step_seconds", (1e9, 1e12), {"kv_bytes": -1.0}, "kv_bytes"),
    ("01", "ridge_point", (0.0, 1e12), {}, "flops"),
    ("01", "ridge_point", (1e12, -1.0), {}, "bandwidth"),
    ("02", "width_where_cost_grows", (0.0, 2), {}, "ridge"),
    ("02", "width_where_cost_grows", (295.0, 0), {}, "bytes_per_param"),
    ("02", "predicted_cost_ratio", (0, 10.0, 4), {}, "width"),
    ("02", "predicted_cost_ratio", (5, 10.0, 4), {"batch": 0}, "batch"),
    ("03", "expected_tokens", (1.5, 4), {}, "alpha"),
    ("03", "expected_tokens", (-0.1, 4), {}, "alpha"),
    ("03", "expected_tokens", (0.8, 0), {}, "k"),
    ("03", "speedup", (0.8, 4, -0.1), {}, "c"),
    ("03", "best_k", (0.8, 0.05), {"k_max": 0}, "k_max"),
    ("04", "verify", (torch.full((2, 4), 0.25), torch.full((2, 4), 0.25), torch.tensor([0, 1])), {}, r"\bp\b"),
    ("04", "verify", (torch.full((3, 4), 0.25), torch.full((2, 4), 0.25), torch.tensor([0])), {}, "draft_tokens"),
    ("04", "speculative_generate", (None, None, torch.tensor([[1, 2, 3]]), 5), {"k": 0}, r"\bk\b"),
    ("04", "speculative_generate", (None, None, torch.tensor([[1, 2, 3]]), 0), {}, "max_new_tokens"),
    ("04", "speculative_generate", (None, None, torch.tensor([1, 2, 3]), 5), {}, "input_ids"),
    ("05", "estimate_alpha", ([5], [4]), {}, "accepted"),
    ("05", "estimate_alpha", ([1, 2], [4]), {}, "drafted"),
    ("05", "estimate_alpha", ([], []), {}, "drafted"),
    ("05", "round_terms", ({}, 0.01), {}, r"\bprofile\b"),
    (
        "05",
        "round_terms",
        ({2: {"rounds": 1, "drafted": 2, "propose_seconds": 0.0, "verify_seconds": 0.0, "total_seconds": 0.0}}, 0.0),
        {},
        r"\btoken_seconds\b",
    ),
    ("05", "predicted_speedup", (0.8, 3, {"c": 0.2, "c_round": 0.05, "o": 0.2, "v": {4: 1.2}}), {}, r"\bk\b"),
    ("05", "predicted_speedup", (1.5, 4, {"c": 0.2, "c_round": 0.05, "o": 0.2, "v": {4: 1.2}}), {}, r"\balpha\b"),
    ("05", "ngram_propose", (torch.tensor([1, 2, 1]), 0, 4), {}, r"\bn\b"),
    ("05", "ngram_propose", (torch.tensor([1, 2, 1]), 2, 0), {}, r"\bk\b"),
    ("05", "ngram_propose", (torch.tensor([[1, 2, 1]]), 2, 3), {}, "tokens"),
    ("07", "compute_bound_batch", (-1.0, 4), {}, "ridge"),
    ("07", "fit_step_line", ([(1, 1, 0, 1e-3), (2, 1, 10, 2e-3)],), {}, r"\btimings\b"),
    (
        "07",
        "line_speedup",
        ({"fixed_s": 1e-3, "per_token_s": 0.0, "per_kv_token_s": 0.0}, 1, 0, 9.0, 3),
        {},
        r"\btau\b",
    ),
    (
        "07",
        "line_crossover",
        ({"fixed_s": 1e-3, "per_token_s": 0.0, "per_kv_token_s": 0.0}, 0, 2.0, 3, []),
        {},
        r"\bbatches\b",
    ),
    ("07", "compute_bound_batch", (295.0, 0), {}, r"\bk\b"),
    ("07", "step_seconds", (SPEC_8B, H100, 0, 0), {}, r"\bbatch\b"),
    ("07", "step_seconds", (SPEC_8B, H100, 1, -1), {}, r"\bcontext\b"),
    ("07", "step_seconds", (SPEC_8B, H100, 1, 0), {"tokens": 0}, r"\btokens\b"),
    ("07", "step_seconds", ({"weight_bytes": 1e9}, H100, 1, 0), {}, r"\bmodel\b"),
    ("07", "step_terms", (dict(SPEC_8B, layer_bytes=-1.0), H100, 1, 0), {}, r"\bmodel\b"),
    ("07", "step_terms", (SPEC_8B, H100, 1, 0), {"tokens": 1.5}, r"\btokens\b"),
    ("07", "spec_speedup", (0, 0, 0.8, 4, SPEC_8B, SPEC_1B, H100), {}, r"\bbatch\b"),
    ("07", "spec_speedup", (1, 0, 1.2, 4, SPEC_8B, SPEC_1B, H100), {}, r"\balpha\b"),
    ("07", "spec_speedup", (256, 4096, 0.8, 4, SPEC_8B, SPEC_1B, H100), {}, r"\bbatch\b.*\bcontext\b"),
    ("07", "spec_speedup", (1, 0, 0.8, 4, SPEC_8B, SPEC_1B, H100), {"c_step": -1e-3}, r"\bc_step\b"),
    ("07", "break_even_batch", (10**6, 0.8, 4, SPEC_8B, SPEC_1B, H100), {}, r"\bcontext\b"),
    ("08", "round_cost_ratio", (256, 4096, 4, SPEC_8B, SPEC_1B, H100), {}, r"\bbatch\b.*\bcontext\b"),
    ("08", "round_cost_ratio", (1, 0, 0, SPEC_8B, SPEC_1B, H100), {}, r"\bk\b"),
    ("08", "round_cost_ratio", (1, 0, 4, SPEC_8B, SPEC_1B, H100), {"c_step": -1e-3}, r"\bc_step\b"),
    ("08", "break_even_alpha", (0, 1.5), {}, r"\bk\b"),
    ("08", "break_even_alpha", (4, 6.0), {}, "cost_ratio"),
    ("08", "speedup_from_times", (0.8, 4, 0.0, 1.0), {}, "plain_step_s"),
    ("08", "check_claim", (0.6, 4, 8.5e-3, (18e-3, 15e-3)), {}, "round_s_range"),
    ("08", "should_speculate", (1, 0, -0.5, 4, SPEC_8B, SPEC_1B, H100), {}, r"\balpha\b"),
    ("08", "should_speculate", (256, 4096, 0.8, 4, SPEC_8B, SPEC_1B, H100), {}, r"\bbatch\b.*\bcontext\b"),
    ("08", "best_k_for_batch", (1, 0, 0.8, SPEC_8B, SPEC_1B, H100), {"k_max": 0}, "k_max"),
    ("08", "deployment_plan", (H100, SPEC_8B, SPEC_1B, {"x": 0.5}, {(256, 4096): 1.0}), {}, r"\bstates\b"),
    ("08", "deployment_plan", (H100, SPEC_8B, SPEC_1B, {}, {(1, 0): 1.0}), {}, r"\balphas\b"),
    (
        "10",
        "batched_accept",
        (torch.zeros(2, 4, dtype=torch.long), torch.zeros(2, 2, dtype=torch.long)),
        {},
        r"\btarget_argmax\b",
    ),
    ("10", "batched_accept", (torch.zeros(2, 3, dtype=torch.long), torch.zeros(2, 2)), {}, r"\bdrafts\b"),
    (
        "10",
        "rollback",
        (torch.ones(2, 4, dtype=torch.long), torch.tensor([4, 4]), torch.tensor([1, 3]), 2),
        {},
        r"\bn_accepted\b",
    ),
    (
        "10",
        "rollback",
        (torch.ones(2, 2, dtype=torch.long), torch.tensor([2, 2]), torch.tensor([1, 1]), 2),
        {},
        r"\bmask\b",
    ),
    (
        "10",
        "rollback",
        (torch.ones(2, 4, dtype=torch.long), torch.tensor([4]), torch.tensor([1, 1]), 2),
        {},
        r"\blengths\b",
    ),
    ("09", "choose_path", ([], {"code": 0.6}, 0.015), {}, r"\brows\b"),
    ("09", "choose_path", ([{"step": 0.01, "c": 0.05, "v": {4: 1.2}}], {"code": 0.6}, 0.015), {}, r"\brows\b"),
    (
        "09",
        "choose_path",
        ([{"width": 8, "step": 0.01, "c": 0.05, "c_round": 0.0, "o": 0.1, "v": {4: 1.2}}], {"code": 1.2}, 0.015),
        {},
        r"\balphas\b",
    ),
    (
        "09",
        "choose_path",
        ([{"width": 8, "step": 0.01, "c": 0.05, "c_round": 0.0, "o": 0.1, "v": {4: 1.2}}], {"code": 0.6}, 0),
        {},
        r"\bbudget\b",
    ),
    ("09", "rule_k", (0.8, {"c": 0.05, "c_round": 0.1, "o": 0.2, "v": {4: 1.2}}, [2]), {}, r"\bks\b"),
    ("09", "rule_k", (1.5, {"c": 0.05, "c_round": 0.1, "o": 0.2, "v": {4: 1.2}}, [4]), {}, r"\balpha\b"),
    ("10", "run_seconds", (4, lambda b, t: 0.01, lambda b, t: 0.001, 5, 1, 16, 4), {}, r"\bprompt_tokens\b"),
    ("10", "run_seconds", (4, 0.01, lambda b, t: 0.001, 5, 32, 16, 4), {}, r"\btarget_s\b"),
    ("10", "crossing", ({1: 1.5, 2: -1.0},), {}, r"\bpoints\b"),
    (
        "10",
        "serving_metrics",
        ({"arrival": [0.0], "first_token": [1.0], "finish": [2.0], "output_tokens": [1]},),
        {},
        r"\btrace\b",
    ),
    (
        "10",
        "serving_metrics",
        ({"arrival": [0.0], "first_token": [1.0], "finish": [2.0], "output_tokens": [3]},),
        {"tpot_slo": 0},
        r"\btpot_slo\b",
    ),
    ("10", "gate_k", ([], 0.8, SPEC_8B, SPEC_1B, H100), {}, r"\bcontexts\b"),
    ("10", "gate_k", ([100, 200], 0.8, SPEC_8B, SPEC_1B, H100), {"k_max": 0}, r"\bk_max\b"),
    ("11", "read_spec_counters", (b"vllm:spec_decode_num_drafts_total 1",), {}, r"\btext\b"),
    (
        "11",
        "acceptance_from_counters",
        ({"drafts": 0, "draft_tokens": 0, "accepted_tokens": 0, "accepted_per_position": [0]},),
        {},
        r"\bcounters\b",
    ),
    ("11", "trace_from_stream", ([{"sent": 0.0, "chunks": [[0.1, 1]]}],), {}, r"\brequests\b"),
    ("11", "vllm_gate_config", ({2: 3}, 8), {}, r"\bdecision\b"),
    ("11", "vllm_gate_config", ({1: 3}, 0), {}, r"\bmax_num_seqs\b"),
]


def notebook(prefix):
    return next((name for name in ASSIGNMENTS if name.startswith(prefix + "_")), None)


@pytest.fixture(scope="module")
def namespaces():
    cache = {}

    def get(prefix):
        if prefix not in cache:
            cache[prefix] = solution_namespace(notebook(prefix))
        return cache[prefix]

    return get


def _signature_spec(fn):
    spec = []
    for p in inspect.signature(fn).parameters.values():
        spec.append(p.name if p.default is inspect.Parameter.empty else f"{p.name}={p.default!r}")
    return spec


@pytest.mark.parametrize("prefix,fname", [(n, f) for n, fs in CONTRACT.items() for f in fs])
def test_contract_function_has_its_exact_name_and_arguments(prefix, fname, namespaces):
    if notebook(prefix) is None:
        pytest.skip(f"notebook {prefix} is not written yet")
    ns = namespaces(prefix)
    assert fname in ns and callable(ns[fname]), f"notebook {prefix} does not define {fname}()"
    assert _signature_spec(ns[fname]) == CONTRACT[prefix][fname], f"{fname}: signature differs from docs/contract.md"


@pytest.mark.parametrize(
    "prefix,fname,args,kwargs,argname", BAD_INPUT, ids=[f"{f}-{a}-{i}" for i, (_, f, _, _, a) in enumerate(BAD_INPUT)]
)
def test_bad_input_raises_value_error_naming_the_argument(prefix, fname, args, kwargs, argname, namespaces):
    if notebook(prefix) is None:
        pytest.skip(f"notebook {prefix} is not written yet")
    with pytest.raises(ValueError, match=argname):
        namespaces(prefix)[fname](*args, **kwargs)
