"""Layer-slice benchmark: time a few decoder layers of a real Llama shape, scale to the whole model.

A 70B model does not fit on a laptop, but one of its decoder layers does, and every layer of a
Llama model has the same shape. So we build `--layers` layers of the real configuration with random
weights (transformers' LlamaModel with num_hidden_layers=N, fed with embeddings directly), fill a
static KV cache with `--context` tokens, and time one forward over `width` new tokens for each
batch × width point of a grid: width 1 is a decode step, width k+1 a verify step.

How the slice becomes a full-model step time (column `full_seconds`):

    full_seconds = num_hidden_layers / layers_timed * slice_seconds + head_seconds

- slice_seconds: median of `--repeats` timed forwards of the N-layer slice (after `--warmup` untimed
  ones). It includes the rotary embedding, mask and final RMSNorm, which the full model runs once per
  step, not once per layer: a small overcount when N < num_hidden_layers.
- head_seconds: the LM head matmul (batch*width rows × hidden → vocab), timed separately on a slice
  of `--head-fraction` of the vocabulary columns and divided by that fraction (the work is linear
  in the columns). The embedding lookup reads one row per token and is neither timed nor counted.

Sizes: one layer of Llama 3.1 8B is 218 M parameters (0.87 GB in fp32, 0.44 GB in bf16); one layer of
the 70B model is 856 M (3.4 GB fp32, 1.7 GB bf16). On a CPU, one 8B layer is the sensible slice.

Bytes and FLOPs in each row are counted from the modules that were built (parameter sizes, the k/v
projection widths), so a model can be compared with a roofline: bytes ÷ bandwidth and FLOPs ÷ FLOP/s.
The CSV starts with `# key: value` provenance lines (device, dtype, versions, date, command line,
CPU count, load average, measured bandwidth and matmul FLOP/s of the device); `read_timings` reads
both parts back.

    python -m specdec.measure.bench --model Llama-3.1-8B --layers 1 --dtype float32 --device cpu \\
        --batches 1 4 --widths 1 5 --context 1024 --repeats 5 --out data/timings/cpu_example.csv

On a busy CPU add `--threads 1`: with more threads than free cores, every parallel operation waits for
its threads to be scheduled (tens of ms each), which swamps what is being measured.

A run whose 1-minute load average (at its start or its end) exceeds the number of CPU cores measured a
machine busy with other work: `write_csv` refuses to write it unless asked with `allow_busy=True`
(`--allow-busy`), and then the file says `reliable: no (...)`. Every file written says `reliable: ...`.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import json
import os
import platform
import shlex
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from specdec.measure.timing import time_once
from specdec.tables import load_model_configs

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}

# Hugging Face config keys that shape a Llama decoder layer; everything else keeps LlamaConfig's default
SHAPE_KEYS = (
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "vocab_size",
    "tie_word_embeddings",
)

# the slice never looks up token ids (it is fed embeddings), so its own embedding table is tiny
SLICE_VOCAB = 16

# one random block tiled over every weight and cache tensor: the values do not change the timing,
# and tiling is far faster than drawing hundreds of millions of random numbers
_BLOCK_ELEMS = 1 << 20

COLUMNS = (
    "batch",
    "width",
    "kind",
    "context",
    "slice_seconds",
    "slice_seconds_min",
    "head_seconds",
    "full_seconds",
    "slice_weight_bytes",
    "slice_kv_bytes",
    "slice_flops",
    "full_weight_bytes",
    "full_kv_bytes",
    "full_flops",
    "full_bytes",
    "achieved_bandwidth_bytes_per_s",
    "achieved_flops_per_s",
)


# ----------------------------------------------------------------------------------------------
# building the slice


def resolve_device(device=None):
    """'cuda' when a CUDA GPU is there and no device was asked for, else 'cpu'; checks the request."""
    if device in (None, "", "auto"):
        return "cuda" if torch.cuda.is_available() else "cpu"
    device = str(device)
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(f"device {device!r} was asked for but torch sees no CUDA GPU; use --device cpu")
    if not (device == "cpu" or device.startswith("cuda")):
        raise ValueError(f"device must be 'cpu' or 'cuda[:n]', got {device!r}")
    return device


def resolve_dtype(dtype, device):
    """A torch dtype from a name ('float32', 'bfloat16', 'float16'); default bf16 on GPU, fp32 on CPU."""
    if dtype in (None, "", "auto"):
        dtype = "float32" if device == "cpu" else "bfloat16"
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {sorted(DTYPES)}, got {dtype!r}")
    return DTYPES[dtype]


def dtype_name(dtype):
    return str(dtype).replace("torch.", "")


def slice_config(cfg, layers, max_positions=8192):
    """A transformers LlamaConfig with the shape of `cfg` (Hugging Face keys) but only `layers` layers."""
    from transformers import LlamaConfig

    if not isinstance(cfg, dict):
        raise ValueError(f"cfg must be a dict of Hugging Face config keys, got {type(cfg).__name__}")
    missing = [key for key in SHAPE_KEYS if key not in cfg and key != "head_dim"]
    if missing:
        raise ValueError(f"cfg is missing keys {missing}")
    if not (isinstance(layers, int) and 1 <= layers <= cfg["num_hidden_layers"]):
        raise ValueError(f"layers must be an int in 1..{cfg['num_hidden_layers']} (the model's layers), got {layers!r}")
    shape = {key: cfg[key] for key in SHAPE_KEYS if key in cfg}
    shape.update(
        num_hidden_layers=layers,
        vocab_size=SLICE_VOCAB,
        tie_word_embeddings=False,
        max_position_embeddings=max(max_positions, 8192),
    )
    return LlamaConfig(**shape, attn_implementation="sdpa")


def _random_block(dtype, device, seed):
    gen = torch.Generator().manual_seed(seed)
    return torch.empty(_BLOCK_ELEMS).uniform_(-0.03, 0.03, generator=gen).to(device=device, dtype=dtype)


def _fill_(tensor, block):
    """Copy `block` over `tensor` (tiled) in place; returns the tensor."""
    flat = tensor.view(-1)
    for start in range(0, flat.numel(), block.numel()):
        stop = min(start + block.numel(), flat.numel())
        flat[start:stop].copy_(block[: stop - start])
    return tensor


def build_slice(cfg, layers=1, dtype=torch.float32, device="cpu", seed=0, max_positions=8192):
    """`layers` Llama decoder layers of the shape `cfg`, random weights, eval mode, on `device`.

    Returns a transformers LlamaModel (embedding of SLICE_VOCAB rows, the layers, the final RMSNorm).
    """
    from transformers.models.llama.modeling_llama import LlamaModel, LlamaRotaryEmbedding

    config = slice_config(cfg, layers, max_positions)
    with torch.device("meta"):  # no memory, no slow default initialisation
        model = LlamaModel(config)
    model = model.to(dtype).to_empty(device=device)  # allocate once, directly in the dtype asked for
    block = _random_block(dtype, device, seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if param.dim() == 1:  # RMSNorm weights
                param.fill_(1.0)
            else:
                _fill_(param, block)
    model.rotary_emb = LlamaRotaryEmbedding(config=config).to(device)  # its buffers were left empty
    return model.eval()


# ----------------------------------------------------------------------------------------------
# counting bytes and FLOPs from the built modules


def _attention_widths(model):
    attn = model.layers[0].self_attn
    return attn.q_proj.out_features, attn.k_proj.out_features  # heads*head_dim, kv_heads*head_dim


def slice_counts(model, batch, width, context):
    """Bytes read and FLOPs done by one forward of the slice over `width` new tokens per sequence.

    weight bytes: every parameter of the decoder layers (read once per step, whatever the batch);
    kv bytes: keys and values of context + width positions per layer and sequence (the static cache
    the attention reads, new tokens included); flops: 2 per weight per token for the matmuls plus
    QK^T and PV over context + width positions.
    """
    layers = len(model.layers)
    layer_params = [p for p in model.layers.parameters()]
    weight_bytes = sum(p.numel() * p.element_size() for p in layer_params)
    matmul_params = sum(p.numel() for p in layer_params if p.dim() == 2)
    elem = layer_params[0].element_size()
    q_width, kv_width = _attention_widths(model)
    positions = context + width
    kv_bytes = layers * batch * positions * 2 * kv_width * elem
    tokens = batch * width
    flops = 2 * matmul_params * tokens + layers * 2 * 2 * tokens * positions * q_width
    return {"weight_bytes": weight_bytes, "kv_bytes": kv_bytes, "flops": flops}


def head_counts(hidden_size, vocab_size, batch, width, elem_bytes):
    """Bytes and FLOPs of the LM head over batch*width tokens (logits for every verified position)."""
    return {
        "weight_bytes": hidden_size * vocab_size * elem_bytes,
        "flops": 2 * hidden_size * vocab_size * batch * width,
    }


def scale_to_full(slice_seconds, layers_timed, num_hidden_layers, head_seconds=0.0):
    """Full-model step seconds from a slice: num_hidden_layers / layers_timed * slice + LM head."""
    if not layers_timed >= 1:
        raise ValueError(f"layers_timed must be >= 1, got {layers_timed}")
    if not num_hidden_layers >= layers_timed:
        raise ValueError(f"num_hidden_layers must be >= layers_timed ({layers_timed}), got {num_hidden_layers}")
    if not (slice_seconds >= 0 and head_seconds >= 0):
        raise ValueError(f"slice_seconds and head_seconds must be >= 0, got {slice_seconds}, {head_seconds}")
    return num_hidden_layers / layers_timed * slice_seconds + head_seconds


# ----------------------------------------------------------------------------------------------
# timing


def _samples(fn, repeats, warmup, device):
    for _ in range(warmup):
        fn()
    return [time_once(fn, device) for _ in range(repeats)]


def filled_cache(model, batch, width, context, block):
    """A StaticCache holding `context` random positions per layer, with room for `width` more."""
    from transformers import StaticCache

    cache = StaticCache(config=model.config, max_cache_len=context + width)
    if context == 0:
        return cache
    attn = model.layers[0].self_attn
    n_kv = attn.k_proj.out_features // attn.head_dim
    param = next(model.parameters())
    for i in range(len(model.layers)):
        k = _fill_(torch.empty(batch, n_kv, context, attn.head_dim, dtype=param.dtype, device=param.device), block)
        cache.update(k, k.clone(), i)
    return cache


def slice_step(model, batch, width, context, block=None):
    """A callable running one forward of the slice over `width` new tokens per sequence at `context`
    cached tokens, and rewinding the cache afterwards, so every call sees exactly `context` tokens."""
    param = next(model.parameters())
    device = param.device
    block = block if block is not None else _random_block(param.dtype, device, 1)
    with torch.inference_mode():
        cache = filled_cache(model, batch, width, context, block)
        x = _fill_(torch.empty(batch, width, model.config.hidden_size, dtype=param.dtype, device=device), block)
        positions = torch.arange(context, context + width, device=device).unsqueeze(0)  # (1, width)

    def step():
        with torch.inference_mode():
            model(inputs_embeds=x, position_ids=positions, cache=cache, use_cache=True)  # (B, width, hidden)
            cache.crop(-width)  # drop the new tokens again: the next call sees `context`

    step.cache = cache
    return step


def time_slice(model, batch, width, context, repeats=5, warmup=2, block=None):
    """Seconds of one forward over `width` new tokens per sequence at `context` cached tokens.

    Returns the list of `repeats` timings (after `warmup` untimed calls).
    """
    step = slice_step(model, batch, width, context, block)
    samples = _samples(step, repeats, warmup, str(next(model.parameters()).device))
    seen = int(step.cache.get_seq_length())
    if context > 0 and seen != context:
        raise RuntimeError(f"the KV cache was not rewound: {seen} tokens cached, expected {context}")
    return samples


def time_head(
    hidden_size, vocab_size, batch, width, dtype, device, fraction=1.0, repeats=5, warmup=2, block=None, weight=None
):
    """Seconds of the LM head matmul for batch*width tokens, timed on `fraction` of the vocabulary
    columns and divided by `fraction`. Returns (median seconds scaled to the full vocabulary, weight)."""
    if not 0 < fraction <= 1:
        raise ValueError(f"fraction must be in (0, 1], got {fraction}")
    block = block if block is not None else _random_block(dtype, device, 2)
    columns = max(1, round(vocab_size * fraction))
    if weight is None:
        weight = _fill_(torch.empty(columns, hidden_size, dtype=dtype, device=device), block)
    x = _fill_(torch.empty(batch * width, hidden_size, dtype=dtype, device=device), block)
    with torch.inference_mode():
        samples = _samples(lambda: F.linear(x, weight), repeats, warmup, str(device))  # (B*width, columns)
    return statistics.median(samples) * vocab_size / weight.shape[0], weight


# ----------------------------------------------------------------------------------------------
# calibration: what this device can do, measured the way notebook 01 does it


def measure_bandwidth(device="cpu", nbytes=None, repeats=7):
    """Bytes/s of a large tensor copy (a copy reads and writes every byte): 256 MiB on CPU, 1 GiB on GPU."""
    nbytes = nbytes or (2**30 if str(device).startswith("cuda") else 256 * 2**20)
    src = torch.ones(nbytes // 4, device=device)
    dst = torch.empty_like(src)
    seconds = statistics.median(_samples(lambda: dst.copy_(src), repeats, 2, str(device)))
    return 2 * nbytes / seconds


def measure_matmul_flops(device="cpu", dtype=torch.float32, n=None, repeats=5):
    """FLOP/s of an n×n matmul in `dtype` (n = 2048 on CPU, 8192 on GPU)."""
    n = n or (8192 if str(device).startswith("cuda") else 2048)
    block = _random_block(dtype, device, 3)
    a = _fill_(torch.empty(n, n, dtype=dtype, device=device), block)
    seconds = statistics.median(_samples(lambda: a @ a, repeats, 2, str(device)))
    return 2 * n**3 / seconds


# ----------------------------------------------------------------------------------------------
# provenance


def device_name(device):
    if str(device).startswith("cuda"):
        return torch.cuda.get_device_name(torch.device(device))
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def provenance(device, dtype, argv=None):
    """The facts a timing needs to be read honestly: what ran, where, when, with what."""
    import transformers

    meta = {
        "benchmark": "specdec.measure.bench (layer slice, scaled to the full model)",
        "device": str(device),
        "device_name": device_name(device),
        "dtype": dtype_name(dtype),
        "torch_version": torch.__version__,
        "transformers_version": transformers.__version__,
        "python_version": platform.python_version(),
        "platform": platform.platform(),
        "host_cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "date_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "command": "python -m specdec.measure.bench "
        + " ".join(shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:])),
    }
    if str(device).startswith("cuda"):
        meta["cuda_version"] = torch.version.cuda
    if hasattr(os, "getloadavg"):
        meta["load_average_1min_start"] = round(os.getloadavg()[0], 2)
    return meta


# ----------------------------------------------------------------------------------------------
# the grid


def run(
    cfg,
    model_name,
    layers=1,
    dtype=None,
    device=None,
    batches=(1,),
    widths=(1, 5),
    context=1024,
    repeats=5,
    warmup=2,
    head_fraction=None,
    calibrate=True,
    note="",
    argv=None,
    progress=True,
    threads=None,
):
    """Time the slice over batches × widths; returns (meta dict, list of row dicts).

    cfg: Hugging Face config dict of the full model (its num_hidden_layers is what we scale to).
    head_fraction: share of the vocabulary timed for the LM head; default 1 on GPU, 1/8 on CPU.
    threads: CPU threads torch may use during the run (default: leave torch's setting alone).
    """
    if threads is not None and not (isinstance(threads, int) and threads >= 1):
        raise ValueError(f"threads must be an int >= 1, got {threads!r}")
    previous_threads = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        return _run(
            cfg,
            model_name,
            layers,
            dtype,
            device,
            batches,
            widths,
            context,
            repeats,
            warmup,
            head_fraction,
            calibrate,
            note,
            argv,
            progress,
        )
    finally:
        torch.set_num_threads(previous_threads)


def _run(
    cfg,
    model_name,
    layers,
    dtype,
    device,
    batches,
    widths,
    context,
    repeats,
    warmup,
    head_fraction,
    calibrate,
    note,
    argv,
    progress,
):
    device = resolve_device(device)
    dtype = resolve_dtype(dtype, device)
    batches, widths = [int(b) for b in batches], [int(w) for w in widths]
    if not batches or min(batches) < 1:
        raise ValueError(f"batches must be ints >= 1, got {batches}")
    if not widths or min(widths) < 1:
        raise ValueError(f"widths must be ints >= 1, got {widths}")
    if not (isinstance(context, int) and context >= 0):
        raise ValueError(f"context must be an int >= 0 (cached tokens), got {context!r}")
    if not (isinstance(repeats, int) and repeats >= 1):
        raise ValueError(f"repeats must be an int >= 1, got {repeats!r}")
    if head_fraction is None:
        head_fraction = 1.0 if device.startswith("cuda") else 0.125
    if not 0 < head_fraction <= 1:
        raise ValueError(f"head_fraction must be in (0, 1], got {head_fraction}")

    t_start = time.perf_counter()
    meta = provenance(device, dtype, argv)
    meta.update(
        model=model_name,
        model_config=json.dumps({k: cfg[k] for k in SHAPE_KEYS if k in cfg}),
        layers_timed=layers,
        num_hidden_layers=cfg["num_hidden_layers"],
        context=context,
        repeats=repeats,
        warmup=warmup,
        head_fraction=head_fraction,
        attention="sdpa, transformers StaticCache",
        weights="random (uniform block, tiled)",
        scaling="full_seconds = num_hidden_layers / layers_timed * slice_seconds + head_seconds; "
        "head_seconds = LM head matmul timed on head_fraction of the vocabulary / head_fraction; "
        "embedding lookup not timed",
        note=note,
    )
    if calibrate:
        meta["measured_bandwidth_bytes_per_s"] = f"{measure_bandwidth(device):.4g}"
        meta["measured_flops_per_s"] = f"{measure_matmul_flops(device, dtype):.4g}"

    model = build_slice(cfg, layers, dtype, device, max_positions=context + max(widths))
    block = _random_block(dtype, device, 1)
    hidden, vocab = cfg["hidden_size"], cfg["vocab_size"]
    elem = torch.empty((), dtype=dtype).element_size()
    head_weight = None
    grid = [(b, w) for b in batches for w in widths]
    bar = grid
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(grid, desc=f"{model_name} x{layers} layer(s) on {device}", leave=False)
    rows = []
    for batch, width in bar:
        samples = time_slice(model, batch, width, context, repeats, warmup, block)
        head_s, head_weight = time_head(
            hidden, vocab, batch, width, dtype, device, head_fraction, repeats, warmup, block, head_weight
        )
        sl = slice_counts(model, batch, width, context)
        head = head_counts(hidden, vocab, batch, width, elem)
        scale = cfg["num_hidden_layers"] / layers
        norm_bytes = model.norm.weight.numel() * elem
        full_weight = scale * sl["weight_bytes"] + norm_bytes + head["weight_bytes"]
        full_kv = scale * sl["kv_bytes"]
        full_flops = scale * sl["flops"] + head["flops"]
        slice_s = statistics.median(samples)
        full_s = scale_to_full(slice_s, layers, cfg["num_hidden_layers"], head_s)
        rows.append(
            {
                "batch": batch,
                "width": width,
                "kind": "decode" if width == 1 else "verify",
                "context": context,
                "slice_seconds": slice_s,
                "slice_seconds_min": min(samples),
                "head_seconds": head_s,
                "full_seconds": full_s,
                "slice_weight_bytes": sl["weight_bytes"],
                "slice_kv_bytes": sl["kv_bytes"],
                "slice_flops": sl["flops"],
                "full_weight_bytes": round(full_weight),
                "full_kv_bytes": round(full_kv),
                "full_flops": round(full_flops),
                "full_bytes": round(full_weight + full_kv),
                "achieved_bandwidth_bytes_per_s": (full_weight + full_kv) / full_s,
                "achieved_flops_per_s": full_flops / full_s,
            }
        )
    if hasattr(os, "getloadavg"):
        meta["load_average_1min_end"] = round(os.getloadavg()[0], 2)
    meta["elapsed_seconds"] = round(time.perf_counter() - t_start, 1)
    return meta, rows


# ----------------------------------------------------------------------------------------------
# CSV with provenance


class BusyMachineError(RuntimeError):
    """The machine was busy with other work during the run: its timings measure the contention."""


def load_verdict(meta):
    """(reliable, reason) from a run's recorded load averages and core count.

    A run is reliable when neither its start nor its end 1-minute load average exceeds the number of cores
    (`host_cpu_count`). Without a recorded load (no os.getloadavg) it cannot be checked: reliable, said so.
    """
    cores = meta.get("host_cpu_count") or os.cpu_count() or 1
    loads = [float(meta[key]) for key in ("load_average_1min_start", "load_average_1min_end") if key in meta]
    if not loads:
        return True, "load average not available on this system"
    worst = max(loads)
    if worst > cores:
        return False, f"load average {worst:.2f} exceeds the {cores} CPU cores: other work shared the machine"
    return True, f"load average at most {worst:.2f} on {cores} CPU cores"


def write_csv(path, meta, rows, allow_busy=False):
    """`# key: value` provenance lines, then a CSV header and one row per grid point.

    Refuses (BusyMachineError) a run whose load average exceeded the core count, unless `allow_busy`, in
    which case the file is marked `reliable: no (...)`.
    """
    reliable, reason = load_verdict(meta)
    if not reliable and not allow_busy:
        raise BusyMachineError(
            f"not writing {path}: {reason}. Re-run on a quiet machine, or pass "
            f"allow_busy=True (--allow-busy) to keep it marked as unreliable."
        )
    meta = {**meta, "reliable": f"{'yes' if reliable else 'no'} ({reason})"}
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        for key, value in meta.items():
            f.write(f"# {key}: {str(value).replace(chr(10), ' ')}\n")
        writer = csv.DictWriter(f, fieldnames=list(COLUMNS))
        writer.writeheader()
        for row in rows:
            writer.writerow({k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in row.items()})
    return path


def _number(text):
    try:
        return int(text)
    except ValueError:
        try:
            return float(text)
        except ValueError:
            return text


def read_timings(path):
    """(meta dict, rows as dicts with numbers converted) from a CSV written by write_csv."""
    meta, lines = {}, []
    with open(path, newline="") as f:
        for line in f:
            if line.startswith("#"):
                key, _, value = line[1:].strip().partition(":")
                meta[key.strip()] = _number(value.strip())
            elif line.strip():
                lines.append(line)
    rows = [{k: _number(v) for k, v in row.items()} for row in csv.DictReader(lines)]
    return meta, rows


# ----------------------------------------------------------------------------------------------
# command line


def parse_args(argv=None):
    models = sorted(load_model_configs())
    p = argparse.ArgumentParser(
        prog="python -m specdec.measure.bench",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--model",
        default="Llama-3.1-8B",
        help=f"a model of data/model_configs.json ({', '.join(models)}); default Llama-3.1-8B",
    )
    p.add_argument(
        "--config",
        default=None,
        help="a JSON file of Hugging Face config keys to use instead of --model (e.g. a tiny test shape)",
    )
    p.add_argument("--layers", type=int, default=1, help="decoder layers to build and time (default 1)")
    p.add_argument("--dtype", default=None, choices=sorted(DTYPES), help="default bfloat16 on GPU, float32 on CPU")
    p.add_argument("--device", default=None, help="cpu or cuda[:n]; default cuda if available")
    p.add_argument("--batches", type=int, nargs="+", default=[1, 4, 16], help="batch sizes B (default 1 4 16)")
    p.add_argument(
        "--widths",
        type=int,
        nargs="+",
        default=[1, 2, 5, 8],
        help="new tokens per sequence: 1 = decode, k+1 = verify (default 1 2 5 8)",
    )
    p.add_argument("--context", type=int, default=1024, help="tokens already in the KV cache (default 1024)")
    p.add_argument("--repeats", type=int, default=5, help="timed repeats per point, median kept (default 5)")
    p.add_argument("--warmup", type=int, default=2, help="untimed calls first (default 2)")
    p.add_argument(
        "--head-fraction",
        type=float,
        default=None,
        help="share of the vocabulary timed for the LM head (default 1 on GPU, 0.125 on CPU)",
    )
    p.add_argument(
        "--no-calibrate", action="store_true", help="skip measuring the device's copy bandwidth and matmul FLOP/s"
    )
    p.add_argument(
        "--threads",
        type=int,
        default=None,
        help="CPU threads for torch (default: torch's own choice); 1 gives steadier timings on a busy machine",
    )
    p.add_argument("--note", default="", help="free text stored with the results (e.g. 'shared machine, busy')")
    p.add_argument("--out", default=None, help="CSV to write; without it the rows are printed")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument(
        "--allow-busy",
        action="store_true",
        help="write the CSV even when the load average exceeded the core count (marked reliable: no)",
    )
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    if args.config:
        cfg = json.loads(Path(args.config).read_text())
        name = Path(args.config).stem
    else:
        configs = load_model_configs()
        if args.model not in configs:
            raise SystemExit(f"--model must be one of {sorted(configs)}, got {args.model!r}")
        cfg, name = configs[args.model], args.model
    meta, rows = run(
        cfg,
        name,
        layers=args.layers,
        dtype=args.dtype,
        device=args.device,
        batches=args.batches,
        widths=args.widths,
        context=args.context,
        repeats=args.repeats,
        warmup=args.warmup,
        head_fraction=args.head_fraction,
        calibrate=not args.no_calibrate,
        note=args.note,
        argv=argv if argv is not None else sys.argv[1:],
        progress=not args.quiet,
        threads=args.threads,
    )
    for row in rows:
        print(
            f"{name} B={row['batch']:3d} width={row['width']:3d}: slice {row['slice_seconds'] * 1e3:9.2f} ms, "
            f"full model {row['full_seconds'] * 1e3:9.1f} ms, "
            f"{row['achieved_bandwidth_bytes_per_s'] / 1e9:8.1f} GB/s achieved"
        )
    if args.out:
        try:
            print("wrote", write_csv(args.out, meta, rows, allow_busy=args.allow_busy))
        except BusyMachineError as e:
            raise SystemExit(str(e))
    return meta, rows


if __name__ == "__main__":
    main()
