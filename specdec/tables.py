"""Hardware and model tables from data/, each row with its source."""
import csv
import json
from dataclasses import dataclass, replace
from pathlib import Path

from specdec import DATA_DIR


@dataclass(frozen=True)
class Hardware:
    name: str
    memory_bytes: float
    bandwidth_bytes_per_s: float
    flops_per_s: float  # dense bf16 (fp16 where the vendor gives no bf16 figure)
    verified: bool
    source: str

    def describe(self):
        """One line with units: 'H100 SXM: 3.35 TB/s, 989.4 TFLOP/s bf16, 80 GB'."""
        return (f"{self.name}: {self.bandwidth_bytes_per_s / 1e12:.2f} TB/s, {self.flops_per_s / 1e12:.1f} TFLOP/s bf16, "
                f"{self.memory_bytes / 1e9:.0f} GB")


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
    link_bytes_per_s: float        # interconnect bandwidth per GPU, one direction
    allreduce_latency_s: float     # the fixed time of one small all-reduce
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

    def draft_group(self):
        """The GPUs the draft runs on: draft_n_gpus of the same kind, with the same link, latency and fixed cost."""
        return replace(self, n_gpus=self.draft_n_gpus)

    def describe(self):
        return (f"{self.name}: per GPU {self.gpu.describe().split(': ', 1)[1]}; link {self.link_bytes_per_s / 1e9:.0f} GB/s, "
                f"all-reduce latency {self.allreduce_latency_s * 1e6:.0f} us")
