"""Notebook 12's reference model (issue 62, first piece): the step of a mixture-of-experts or quantised target, as
notebook 07's per-operator roofline extended, written for the judges of 12's graded cells. Not yet a judge module:
notebook 12 is not in solutions/ yet, so autograde.judges.modules() does not name it and nothing grades with it;
tests/test_moe_model.py holds the model to what it must show.

The model, per forward pass of `batch` sequences with `tokens` new tokens each (M = batch * tokens routed tokens):
- each MoE layer reads the distinct experts its M tokens route to: under uniform top-r routing over E experts,
  E (1 - (1 - r / E)^M) on average (`expected_experts`); a skewed router with per-expert inclusion probabilities
  p_e (summing to r) reads sum_e (1 - (1 - p_e)^M) (`expected_experts_skewed`), never more than the uniform one;
- the other weights (attention projections, routers, dense layers, shared experts, LM head) are read once per pass
  whatever M is, as in 07;
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

DEQUANT_FLOPS = 2.0          # per quantised weight read: a scale multiply and an add (int4/fp4 groups with a scale)


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
    dense = layers * n["attention"] + cfg["dense_layers"] * n["dense_mlp"] + moe_layers * n["router"] \
        + moe_layers * cfg["shared_experts"] * n["expert"]
    return {"dense_params": float(dense), "lm_head_params": n["lm_head"] or n["embedding"],
            "expert_params": n["expert"], "moe_layers": moe_layers, "experts": cfg["experts"],
            "experts_per_token": cfg["experts_per_token"], "hidden_size": cfg["hidden_size"],
            "expert_bits": float(cfg.get("expert_weight_bits", 16) if expert_bits is None else expert_bits),
            "dense_bits": float(dense_bits), "kv_bits": float(kv_bits),
            "kv_bytes_per_token": kv_values * layers * kv_bits / 8, "attention_flops_per_cached_token": attn_flops,
            "dequant_flops": dequant_flops}


def dense_as_moe(cfg_dense, bits=16.0, kv_bits=16.0, dequant_flops=None):
    """A dense model of data/model_configs.json in moe_spec's terms (one expert, always read), for its quantised
    twin: the same step model with E = r = 1."""
    h, layers = cfg_dense["hidden_size"], cfg_dense["num_hidden_layers"]
    hd = cfg_dense.get("head_dim") or h // cfg_dense["num_attention_heads"]
    attention = 2 * h * cfg_dense["num_attention_heads"] * hd + 2 * h * cfg_dense["num_key_value_heads"] * hd
    return {"dense_params": float(layers * attention), "lm_head_params": float(cfg_dense["vocab_size"] * h),
            "expert_params": float(3 * h * cfg_dense["intermediate_size"]), "moe_layers": layers, "experts": 1,
            "experts_per_token": 1, "hidden_size": h, "expert_bits": float(bits), "dense_bits": float(bits),
            "kv_bits": float(kv_bits), "kv_bytes_per_token": 2 * cfg_dense["num_key_value_heads"] * hd * layers * kv_bits / 8,
            "attention_flops_per_cached_token": 4.0 * cfg_dense["num_attention_heads"] * hd * layers,
            "dequant_flops": dequant_flops}


def _dequant(bits, spec):
    if bits >= 16:
        return 0.0
    return DEQUANT_FLOPS if spec["dequant_flops"] is None else spec["dequant_flops"]


def moe_terms(spec, gpu, batch, context, tokens=1):
    """One forward pass's seconds by class: {"fixed", "dense", "experts", "attention"}."""
    n = getattr(gpu, "n_gpus", 1)
    bw, fl = gpu.bandwidth_bytes_per_s * gpu.mbu * n, gpu.flops_per_s * gpu.mfu * n
    M = batch * tokens
    read = spec["moe_layers"] * expected_experts(spec["experts"], spec["experts_per_token"], M) * spec["expert_params"]
    dense_w = spec["dense_params"] + spec["lm_head_params"]
    dense = max(dense_w * spec["dense_bits"] / 8 / bw,
                (2 * M * dense_w + _dequant(spec["dense_bits"], spec) * dense_w) / fl)
    active = spec["moe_layers"] * spec["experts_per_token"] * spec["expert_params"]
    experts = max(read * spec["expert_bits"] / 8 / bw, (2 * M * active + _dequant(spec["expert_bits"], spec) * read) / fl)
    attention = max(batch * context * spec["kv_bytes_per_token"] / bw,
                    M * context * spec["attention_flops_per_cached_token"] / fl)
    return {"fixed": float(gpu.fixed_s), "dense": float(dense), "experts": float(experts),
            "attention": float(attention)}


def moe_step(spec, gpu, batch, context, tokens=1):
    return sum(moe_terms(spec, gpu, batch, context, tokens).values())


def verify_ratio(spec, gpu, batch, context, k):
    """v(k): a verify pass over k + 1 tokens per sequence against one plain step, same batch and context."""
    return moe_step(spec, gpu, batch, context, k + 1) / moe_step(spec, gpu, batch, context)


def speedup(spec, gpu, batch, context, alpha, k, c):
    """Tokens per second against plain decoding: expected tokens per round x plain step / (k draft steps of c plain
    steps each + the verify pass)."""
    e = sum(alpha ** i for i in range(k + 1))
    plain = moe_step(spec, gpu, batch, context)
    return e * plain / (k * c * plain + moe_step(spec, gpu, batch, context, k + 1))


def best_and_last_batch(spec, gpu, context, alpha, k, c, batches):
    """(the batch of `batches` where speculation pays most, the largest where it still pays (speedup >= 1) or
    None)."""
    s = [speedup(spec, gpu, b, context, alpha, k, c) for b in batches]
    best = batches[max(range(len(s)), key=lambda i: (s[i], -i))]
    paying = [b for b, x in zip(batches, s) if x >= 1.0]
    return best, (max(paying) if paying else None)


def stops_paying(spec, gpu, context, alpha, k, c, limit=1 << 16):
    """The first batch (1 .. limit) past the speedup's peak where speculation no longer pays (speedup < 1): the
    peak found on powers of two, the crossing by bisection on whole batches. 1 where it never pays; None where it
    still pays at `limit`."""
    grid = [2 ** i for i in range(int(math.log2(limit)) + 1)]
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
