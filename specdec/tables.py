"""Hardware and model tables from data/, each row with its source."""
import csv
import json
from dataclasses import dataclass
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
