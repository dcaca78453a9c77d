"""Hardware and model tables from data/, each row with its source."""

import csv
import json
import numbers
from dataclasses import dataclass, replace
from pathlib import Path

from specdec import DATA_DIR


@dataclass(frozen=True)
class Hardware:
    """One GPU (or CPU) as the step model sees it: datasheet peaks, and what an engine attains of them.

    mbu, mfu: the attainable fractions of the peak bandwidth and FLOP/s (model bandwidth and FLOP/s utilisation),
    in (0, 1]; fixed_s: seconds every forward pass pays whatever its size (kernel launches, the engine's
    scheduler and sampler set-up). The defaults 1, 1 and 0 are the datasheet-peak model, the optimistic bound;
    `attainable` gives a copy with measured ones."""

    name: str
    memory_bytes: float
    bandwidth_bytes_per_s: float
    flops_per_s: float  # dense bf16 (fp16 where the vendor gives no bf16 figure)
    verified: bool
    source: str
    mbu: float = 1.0
    mfu: float = 1.0
    fixed_s: float = 0.0

    def __post_init__(self):
        for key in ("mbu", "mfu"):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
                raise ValueError(f"{key} must be a fraction in (0, 1], got {value!r}")
        if isinstance(self.fixed_s, bool) or not isinstance(self.fixed_s, (int, float)) or not self.fixed_s >= 0:
            raise ValueError(f"fixed_s must be >= 0 seconds, got {self.fixed_s!r}")

    @property
    def peak(self):
        """True for the datasheet-peak model (mbu = mfu = 1, no fixed cost)."""
        return self.mbu == 1 and self.mfu == 1 and self.fixed_s == 0

    def describe(self):
        """One line with units: 'H100 SXM: 3.35 TB/s, 989.4 TFLOP/s bf16, 80 GB' (and the attained fractions and
        fixed cost where they are not the peak model's)."""
        line = (
            f"{self.name}: {self.bandwidth_bytes_per_s / 1e12:.2f} TB/s, {self.flops_per_s / 1e12:.1f} TFLOP/s bf16, "
            f"{self.memory_bytes / 1e9:.0f} GB"
        )
        if not self.peak:
            line += (
                f"; attained {self.mbu * 100:.3g}% of the bandwidth, {self.mfu * 100:.3g}% of the FLOP/s, "
                f"{self.fixed_s * 1e3:.2f} ms fixed per forward"
            )
        return line


def attainable(hw, mbu=1.0, mfu=1.0, fixed_s=0.0, name=None):
    """A copy of `hw` (a Hardware) with attained fractions of its peaks and a fixed cost per forward pass."""
    if not isinstance(hw, Hardware):
        raise ValueError(f"hw must be a Hardware, got {type(hw).__name__}")
    return replace(hw, mbu=mbu, mfu=mfu, fixed_s=fixed_s, name=name or hw.name)


def fit_linear_step(
    hw, fixed_s, per_token_s, per_kv_token_s, streamed_bytes, flops_per_token, kv_bytes_per_token, name=None
):
    """The attained terms of `hw` from an engine's linear fit of its forward time,
    forward = fixed_s + per_token_s x batched tokens + per_kv_token_s x cached tokens read:

    mfu = flops_per_token / FLOP/s / per_token_s (each batched token's arithmetic),
    mbu = kv_bytes_per_token / bandwidth / per_kv_token_s (each cached token's KV read, a pure stream; at most 1),
    fixed = fixed_s - streamed_bytes / (bandwidth x mbu) (the fit's constant holds the weight read; what is left
    is paid per forward whatever it reads). Returns attainable(hw, mbu, mfu, fixed)."""
    for key, value in (
        ("fixed_s", fixed_s),
        ("per_token_s", per_token_s),
        ("per_kv_token_s", per_kv_token_s),
        ("streamed_bytes", streamed_bytes),
        ("flops_per_token", flops_per_token),
        ("kv_bytes_per_token", kv_bytes_per_token),
    ):
        if not value > 0:
            raise ValueError(f"{key} must be > 0, got {value!r}")
    mfu = min(1.0, flops_per_token / hw.flops_per_s / per_token_s)
    mbu = min(1.0, kv_bytes_per_token / hw.bandwidth_bytes_per_s / per_kv_token_s)
    fixed = fixed_s - streamed_bytes / (hw.bandwidth_bytes_per_s * mbu)
    if fixed < 0:
        raise ValueError(
            f"fixed_s {fixed_s} is shorter than the weight read at the fitted bandwidth: not a fit of this model"
        )
    return attainable(hw, mbu, mfu, fixed, name=name)


def first_pass_tokens(first_draft_tokens, k):
    """The draft's first pass of a round, in tokens per sequence: `first_draft_tokens` itself, or
    `first_draft_tokens(k)` when it is a function of the draft length (`vllm_v1_first_pass`).
    Raises ValueError naming first_draft_tokens unless the tokens are an integer >= 1."""
    first = first_draft_tokens(k) if callable(first_draft_tokens) else first_draft_tokens
    if isinstance(first, bool) or not isinstance(first, numbers.Integral) or first < 1:
        raise ValueError(f"first_draft_tokens must be an integer >= 1 (or a function of k giving one), got {first!r}")
    return int(first)


def vllm_v1_first_pass(k):
    """vLLM V1's draft_model proposer: the draft's first pass of a round runs over k + 2 tokens per sequence
    (the tokens the last round accepted, at most k + 1, and the target's own), its other k - 1 passes over one."""
    return k + 2


def sampler_seconds(model, gpu, positions, sampler_passes):
    """The sampler's logits traffic: `sampler_passes` fp32 passes (4 bytes a logit) over the vocabulary-wide logits of
    `positions` sampled rows, at the GPU's attained bandwidth (mbu x bandwidth): 4 x passes x positions x vocab
    / (mbu x bandwidth), vocab = lm_head_bytes / (2 x hidden_size) (a bf16 LM head). 0 passes cost 0 seconds.
    Raises ValueError naming sampler_passes when it is < 0."""
    if isinstance(sampler_passes, bool) or not isinstance(sampler_passes, numbers.Real) or not sampler_passes >= 0:
        raise ValueError(f"sampler_passes must be >= 0, got {sampler_passes!r}")
    vocab = model["lm_head_bytes"] / (2 * model["hidden_size"])
    return float(4 * sampler_passes * positions * vocab / (gpu.mbu * gpu.bandwidth_bytes_per_s))


def load_hardware(path=None):
    """{name: Hardware} from data/hardware.csv (units converted to bytes, bytes/s and FLOP/s)."""
    path = Path(path) if path else DATA_DIR / "hardware.csv"
    table = {}
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            table[row["name"]] = Hardware(
                name=row["name"],
                memory_bytes=float(row["memory_gb"]) * 1e9,
                bandwidth_bytes_per_s=float(row["bandwidth_tb_s"]) * 1e12,
                flops_per_s=float(row["bf16_dense_tflops"]) * 1e12,
                verified=row["verified"] == "yes",
                source=row["source"],
            )
    return table


def load_model_configs(path=None):
    """{name: config dict with Hugging Face keys} from data/model_configs.json."""
    path = Path(path) if path else DATA_DIR / "model_configs.json"
    raw = json.loads(Path(path).read_text())
    return {name: cfg for name, cfg in raw.items() if not name.startswith("_")}


def load_moe_configs(path=None):
    """{name: config dict} of the mixture-of-experts targets of notebook 12, from data/moe_configs.json (field names
    normalised across families; its "_about" says how, and where each comes from)."""
    path = Path(path) if path else DATA_DIR / "moe_configs.json"
    raw = json.loads(Path(path).read_text())
    return {name: cfg for name, cfg in raw.items() if not name.startswith("_")}


MOE_KEYS = (
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "vocab_size",
    "tie_word_embeddings",
    "attention",
    "experts",
    "experts_per_token",
    "expert_intermediate_size",
    "shared_experts",
    "dense_layers",
    "dense_intermediate_size",
)


def moe_parameter_counts(cfg, counts_embedding=True):
    """Parameters of a mixture-of-experts config of data/moe_configs.json, by part, as plain floats.

    Per layer: attention (grouped-query: q, k, v, o projections; multi-head latent attention (DeepSeek-V3): the
    low-rank q and kv projections and o); a dense layer's gated MLP (3 h f) or an MoE layer's router (h E), its E
    routed experts and its shared experts (3 h f_e each). The embedding and LM head are vocab x hidden each (one
    table when tied). Norms and biases are left out (under 0.1 % here). Returns {"attention", "expert", "router",
    "dense_mlp", "embedding", "lm_head", "total", "active"}: the first four per layer, "total" every parameter,
    "active" what one token's forward uses (its top-r experts and the shared ones), with the input embedding
    table counted only where `counts_embedding` (publishers differ). Raises ValueError naming a missing key."""
    missing = [key for key in MOE_KEYS if key not in cfg]
    if missing:
        raise ValueError(f"cfg: a mixture-of-experts config needs {missing}")
    h, heads, layers = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_hidden_layers"]
    if cfg["attention"] == "mla":
        qk = cfg["qk_nope_head_dim"] + cfg["qk_rope_head_dim"]
        q = h * cfg["q_lora_rank"] + cfg["q_lora_rank"] * heads * qk if cfg.get("q_lora_rank") else h * heads * qk
        kv = h * (cfg["kv_lora_rank"] + cfg["qk_rope_head_dim"]) + cfg["kv_lora_rank"] * heads * (
            cfg["qk_nope_head_dim"] + cfg["v_head_dim"]
        )
        attention = q + kv + heads * cfg["v_head_dim"] * h
    elif cfg["attention"] == "gqa":
        hd = cfg.get("head_dim") or h // heads
        attention = 2 * h * heads * hd + 2 * h * cfg["num_key_value_heads"] * hd
    else:
        raise ValueError(f"cfg: attention must be 'gqa' or 'mla', got {cfg['attention']!r}")
    expert, router = 3 * h * cfg["expert_intermediate_size"], h * cfg["experts"]
    dense_mlp = 3 * h * cfg["dense_intermediate_size"]
    moe_layers, dense_layers = layers - cfg["dense_layers"], cfg["dense_layers"]
    table = cfg["vocab_size"] * h
    lm_head = 0 if cfg["tie_word_embeddings"] else table
    body = layers * attention + dense_layers * dense_mlp + moe_layers * router
    total = body + moe_layers * (cfg["experts"] + cfg["shared_experts"]) * expert + table + lm_head
    # the LM head is always read (a tied model's one table is its LM head); the input table only looked up
    heads_read = table if not lm_head else lm_head + (table if counts_embedding else 0)
    active = body + moe_layers * (cfg["experts_per_token"] + cfg["shared_experts"]) * expert + heads_read
    return {
        key: float(value)
        for key, value in (
            ("attention", attention),
            ("expert", expert),
            ("router", router),
            ("dense_mlp", dense_mlp),
            ("embedding", table),
            ("lm_head", lm_head),
            ("total", total),
            ("active", active),
        )
    }


@dataclass(frozen=True)
class TPGroup:
    """n GPUs of one kind under tensor parallelism (Megatron-LM, arXiv 1909.08053): each GPU holds 1/n of every
    weight matrix and of every sequence's KV heads, and the n partial results of each layer's attention and MLP
    are summed by an all-reduce (two per layer). The draft may run on fewer GPUs (vLLM V0's
    `draft_tensor_parallel_size`; vLLM V1 requires a draft model's size to equal the target's, so fewer is a
    what-if there). Memory, bandwidth and FLOP/s are per GPU; `memory_bytes` is the group's total."""

    gpu: Hardware
    n_gpus: int
    draft_n_gpus: int
    link_bytes_per_s: float  # interconnect bandwidth per GPU, one direction
    allreduce_latency_s: float  # the fixed time of one small all-reduce
    fixed_s_per_layer: float = 0.0  # launch and framework time per layer of a forward, not hidden by the kernels

    @property
    def name(self):
        draft = "" if self.draft_n_gpus == self.n_gpus else f" (draft on {self.draft_n_gpus})"
        return f"{self.n_gpus} x {self.gpu.name}{draft}"

    @property
    def memory_bytes(self):
        return self.n_gpus * self.gpu.memory_bytes

    @property
    def bandwidth_bytes_per_s(self):
        return self.gpu.bandwidth_bytes_per_s

    @property
    def flops_per_s(self):
        return self.gpu.flops_per_s

    @property
    def verified(self):
        return self.gpu.verified

    @property
    def mbu(self):
        return self.gpu.mbu

    @property
    def mfu(self):
        return self.gpu.mfu

    @property
    def fixed_s(self):
        """The fixed cost of every forward pass (the GPU's), on top of fixed_s_per_layer x layers."""
        return self.gpu.fixed_s

    def draft_group(self):
        """The GPUs the draft runs on: draft_n_gpus of the same kind, with the same link, latency and fixed cost."""
        return replace(self, n_gpus=self.draft_n_gpus)

    def describe(self):
        return (
            f"{self.name}: per GPU {self.gpu.describe().split(': ', 1)[1]}; "
            f"link {self.link_bytes_per_s / 1e9:.0f} GB/s, "
            f"all-reduce latency {self.allreduce_latency_s * 1e6:.0f} us"
        )
