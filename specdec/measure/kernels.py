"""Kernel paths: the ways this torch build can run the padded target on this CPU, measured (the choice between
them is notebook 09's graded `choose_path`, restated in 10).

Whether speculation pays on a CPU depends less on the model than on the matrix kernels: a verify of k + 1 tokens
costs about one decode step only if the kernel reads each weight once for all k + 1 rows. Which kernels do that
depends on the instruction set (``torch.backends.cpu.get_cpu_capability()``): bf16 kernels with AVX-512 BF16 or
AMX do; on a CPU with only AVX2 they convert and re-read, and a 5-token verify costs several steps. So the course
measures every path this build offers and chooses by the tokens per second the speedup model predicts,
never by the CPU's name.

A path is a way to run the model's weights:
  ``bf16``          parameters in bfloat16 (oneDNN / MKL kernels)
  ``fp32``          parameters in float32
  ``int8-<engine>`` the decoder layers' Linear modules quantised to int8 with dynamic activation quantisation
                    (``torch.ao.quantization.quantize_dynamic``), run by one quantised engine of this build:
                    ``fbgemm`` and ``onednn`` on x86, ``qnnpack`` on ARM. The LM head and embeddings stay fp32
                    (the drafters of notebook 09 share them). An int8 model is a different target: its logits
                    differ from the fp32 model's, so its speculative output is compared with its own greedy output.

``torch.ao.quantization.quantize_dynamic`` is deprecated in torch 2.13 in favour of torchao's ``quantize_``. Measured
on a 16384 × 4096 matrix (2 threads): torchao 0.18's eager ``Int8DynamicActivationInt8WeightConfig`` took 4.9 ms
(AVX-512) and 10.7 ms (AVX2 cap) for one row where fbgemm took 2.2 and 1.4 ms; its weight-only config 57-75 ms.
So the deprecated API is what works here, pinned by the pinned torch; ``path_names`` says so if it ever disappears.
"""

from __future__ import annotations

import contextlib
import copy
import platform
import warnings

import torch

from specdec.core.decoding import forward_step
from specdec.measure.timing import interleaved_medians, median_seconds

# environment variables that cap an AVX-512 machine to AVX2 behaviour (read when torch loads: set them before)
AVX2_CAP = {"ONEDNN_MAX_CPU_ISA": "AVX2", "MKL_ENABLE_INSTRUCTIONS": "AVX2", "ATEN_CPU_CAPABILITY": "avx2"}


def cpu_name() -> str:
    """The CPU's model name (/proc/cpuinfo), else what the platform module knows."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def cpu_capability() -> str:
    """torch's name for the vector instruction set its CPU kernels use here: 'AVX512', 'AVX2', 'DEFAULT', ..."""
    return torch.backends.cpu.get_cpu_capability()


def int8_engines() -> list[str]:
    """the quantised engines worth measuring on this machine: fbgemm and onednn on x86, qnnpack on ARM.

    ('x86' is a dispatcher between fbgemm and onednn, so it is not a path of its own; qnnpack runs on x86 too but
    is ARM's engine: one 16384 x 4096 row took 19 ms there against fbgemm's 1.4-2.2 ms.)
    """
    if not hasattr(torch.ao.quantization, "quantize_dynamic"):
        return []
    supported = set(torch.backends.quantized.supported_engines)
    arm = platform.machine().lower() in ("arm64", "aarch64")
    wanted = ("qnnpack",) if arm else ("fbgemm", "onednn")
    return [e for e in wanted if e in supported]


def path_names() -> list[str]:
    """every path this torch build offers on this machine."""
    return ["bf16", "fp32"] + [f"int8-{e}" for e in int8_engines()]


@contextlib.contextmanager
def _engine(name):
    previous = torch.backends.quantized.engine
    torch.backends.quantized.engine = name
    try:
        yield
    finally:
        torch.backends.quantized.engine = previous


def _check_path(path):
    if path not in path_names():
        raise ValueError(f"path must be one of {path_names()} on this machine, got {path!r}")


def convert(model, path: str, inplace: bool = False):
    """`model` (fp32, a LlamaForCausalLM) running on `path`: a copy, unless `inplace`.

    An int8 model is packed for its engine when it is quantised, and the packed weights choose the kernel
    whatever ``torch.backends.quantized.engine`` says later (measured: a onednn-packed layer runs at onednn's
    speed with the global engine set to fbgemm), so models of different engines can run side by side.
    """
    from specdec.core.models import with_dtype

    _check_path(path)
    model = model if inplace else copy.deepcopy(model)
    if path == "fp32":
        return model.float()
    if path == "bf16":
        return with_dtype(model, torch.bfloat16)
    with _engine(path.split("-", 1)[1]), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.ao's deprecation notice (see the module text)
        model.model.layers = torch.ao.quantization.quantize_dynamic(
            model.model.layers, {torch.nn.Linear}, dtype=torch.qint8
        )
    return model


def convert_linear(layer, path: str, inplace: bool = False):
    """One ``nn.Linear`` on `path` (``convert`` works on a model's decoder layers: the layer is held where it looks)."""
    holder = torch.nn.Module()
    holder.model = torch.nn.Module()
    holder.model.layers = torch.nn.ModuleList([layer])
    return convert(holder, path, inplace=inplace).model.layers[0]


def weight_megabytes(model) -> float:
    """MB of weights a forward reads: parameters plus packed int8 weights (1 byte each, plus scales)."""
    total = sum(p.numel() * p.element_size() for p in model.parameters())
    for module in model.modules():
        if hasattr(module, "_packed_params") and callable(getattr(module, "weight", None)):
            w = module.weight()
            total += w.numel() * w.element_size()
    return total / 1e6


def measure_paths(
    target,
    draft,
    widths,
    ks=(1, 2, 4, 8),
    paths=None,
    context=64,
    repeats=5,
    warmup=1,
    max_step=None,
    padded=None,
    progress=None,
    forward=None,
):
    """Time every path and padded width: a decode step and a (k+1)-token verify of the padded target, and a draft step.

    target, draft: the fp32 pair. widths: MLP widths to pad the target to (``padded_target``). For each path
    the draft is timed on that path too, and the fastest draft serves every row (a draft's numerics do not
    change what the target accepts as exact). Returns (rows, draft_steps): rows is a list of dicts
    {path, width, mb, step (seconds), v {k: verify ÷ step}, c (fastest draft step ÷ step), draft_path};
    draft_steps is {path: seconds}. Times are interleaved medians within a row; rows are timed one after the
    other (each padded model is built, timed and freed: the widest fp32 one is a gigabyte).
    max_step: seconds; a path's wider widths are skipped once one of its rows steps slower than this (a step
    grows with the bytes), so no time goes into models too slow to use.
    forward: a wrapper every timed model runs through, target and drafts alike (notebook 09 passes
    ``specdec.core.lean.LeanLlama``, the forward its race runs); None times transformers' forward.
    """
    from specdec.core.models import padded_target

    paths = list(paths) if paths is not None else path_names()
    for p in paths:
        _check_path(p)
    if not widths or any(not isinstance(w, int) for w in widths):
        raise ValueError(f"widths must be a list of ints, got {widths!r}")
    ks = sorted(set(ks))
    padded = padded or padded_target
    wrap = forward or (lambda m: m)
    drafts = {p: wrap(convert(draft, p)) for p in paths}
    draft_steps = {}
    for p in paths:
        draft_steps[p] = median_seconds(forward_step(drafts[p], 1, context), repeats=repeats + 2, warmup=warmup + 1)
    draft_path = min(draft_steps, key=draft_steps.get)
    grid = [(p, w) for p in paths for w in sorted(widths)]
    if progress is not None:
        grid = progress(grid)
    rows, too_slow = [], set()
    for p, w in grid:
        if p in too_slow:
            continue
        model = convert(padded(target, w), p, inplace=True)
        mb = weight_megabytes(model)
        model = wrap(model)
        timed = interleaved_medians(
            {kk: forward_step(model, kk + 1 if kk else 1, context) for kk in [0] + ks}, repeats=repeats, warmup=warmup
        )
        step = timed[0]
        rows.append(
            {
                "path": p,
                "width": w,
                "mb": mb,
                "step": step,
                "v": {kk: timed[kk] / step for kk in ks},
                "c": draft_steps[draft_path] / step,
                "draft_path": draft_path,
            }
        )
        del model
        if max_step is not None and step > max_step:
            too_slow.add(p)
    return rows, draft_steps


def row_best_k(alpha, row, predict):
    """(k, predicted speedup) maximising predict(alpha, k, row) for one row of ``measure_paths``.

    `predict` is the speedup model: notebook 05's ``predicted_speedup(alpha, k, terms)`` in 09, whose rows carry
    the round terms (c, c_round, v, o), so it is passed in, not restated here."""
    k = max(row["v"], key=lambda kk: predict(alpha, kk, row))
    return k, predict(alpha, k, row)


def format_table(rows, alphas=None, predict=None, chosen=None, note=None):
    """The table the choice came from, one line per path and width, as text; with `alphas` and `predict`, each
    domain's best k, its predicted speedup and the tokens per second it decodes at (plain decoding's 1 ÷ step where
    no k is predicted above 1, marked "plain"); `note(row)` may add a word at the end of a line."""
    ks = sorted(rows[0]["v"]) if rows else []
    head = f"{'path':12s} {'width':>6s} {'MB':>6s} {'step ms':>8s} " + " ".join(
        f"{'v(' + str(k) + ')':>6s}" for k in ks
    )
    head += f" {'c':>6s}" + "".join(f" {d + ': k, x, tok/s':>22s}" for d in (alphas or {}))
    lines = [head]
    for r in rows:
        line = (
            f"{r['path']:12s} {r['width']:6d} {r['mb']:6.0f} {r['step'] * 1e3:8.2f} "
            + " ".join(f"{r['v'][k]:6.2f}" for k in ks)
            + f" {r['c']:6.3f}"
        )
        for a in (alphas or {}).values():
            k, s = row_best_k(a, r, predict)
            line += f" {k:4d}, {s:4.2f}x, {max(s, 1.0) / r['step']:5.0f}" + ("*" if s <= 1 else " ")
        if chosen is r:
            line += "  <- chosen"
        elif note is not None and note(r):
            line += "  " + note(r)
        lines.append(line)
    if alphas and any(row_best_k(a, r, predict)[1] <= 1 for r in rows for a in alphas.values()):
        lines.append("* no k pays: the row decodes plainly, 1 / step tokens per second")
    return "\n".join(lines)


def square_twin_products(model, path: str, repeats: int = 9, warmup: int = 2, seed: int = 0):
    """The padded MLP's matrix products beside square matrices of the same bytes: what the MLP's shape costs.

    `model` is a ``specdec.core.lean.LeanLlama`` of the padded target on `path`. Its MLP matrices are skinny (gate
    and up: width × hidden, down: hidden × width, with the shipped model's hidden size); each gets a square twin
    of the same number of weights on the same path (random values: a product's time does not depend on them).
    Every repeat runs one row through every layer's MLP matrices, then through their twins (each reads other
    weights, so both stream from memory), and the medians are returned: {"padded": s, "square": s, "mb": MB of
    weights each set reads}. The twins' MB differ from the padded ones' by the rounding of the side only.
    """
    import math
    import statistics
    import time

    _check_path(path)
    gen = torch.Generator().manual_seed(seed)

    def weight(op):  # a fused matrix, an nn.Linear, or a torch.ao int8 module
        return op if isinstance(op, torch.Tensor) else op.weight() if callable(op.weight) else op.weight

    def twin(op):
        w = weight(op)
        side = round(math.sqrt(w.numel()))
        layer = torch.nn.Linear(side, side, bias=False)
        with torch.no_grad():
            layer.weight.copy_(torch.randn(side, side, generator=gen) * 0.02)
        if not callable(getattr(op, "weight", None)):  # a float matrix: run as a tensor
            return layer.weight.detach().to(w.dtype).contiguous()
        return convert_linear(layer, path, inplace=True)

    padded = []
    for L in model.layers:
        padded += [L.gate_up] if L.gate_up is not None else [L.gate, L.up]
        padded.append(L.down)
    square = [twin(op) for op in padded]
    dtype = model.dtype

    def mb(op):
        return (
            weight(op).numel() * weight(op).element_size() / 1e6
            if not callable(getattr(op, "weight", None))
            else weight_megabytes(op)
        )

    def inputs(ops):
        return [torch.randn(1, weight(op).shape[1], generator=gen).to(dtype) for op in ops]

    sets = {"padded": (padded, inputs(padded)), "square": (square, inputs(square))}

    @torch.no_grad()
    def run(ops, xs):
        t0 = time.perf_counter()
        for op, x in zip(ops, xs):
            op(x) if isinstance(op, torch.nn.Module) else torch.nn.functional.linear(x, op)
        return time.perf_counter() - t0

    for _ in range(warmup):
        for ops, xs in sets.values():
            run(ops, xs)
    times = {name: [] for name in sets}
    for _ in range(repeats):
        for name, (ops, xs) in sets.items():
            times[name].append(run(ops, xs))
    out = {name: statistics.median(ts) for name, ts in times.items()}
    out["mb"] = {name: sum(mb(op) for op in ops) for name, (ops, _) in sets.items()}
    return out
