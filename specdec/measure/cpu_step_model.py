"""Notebook 10's CPU step model: notebook 07's per-operator model with its terms measured instead of computed.

A forward of a model at batch B with t new tokens per sequence (M = B·t tokens) is, on a CPU as on a GPU, a chain
of kernels that run one after another, so their times add:

    forward(B, t) = rest(M) + layers · (Σ weight GEMMs of one layer at M rows + activation at M rows) + LM head(M)

The GEMM times are micro-benchmarks on the model's **own modules** (the padded target's real shapes, on its kernel
path) over a grid of M; between grid points they are interpolated (a soft knee, not a sharp ridge). The MLP is
also timed whole (gate and up GEMMs, SiLU, the product, the down GEMM, on fresh intermediate tensors as in a real
forward): what it takes beyond its three GEMMs is its **activation** term, the traffic of M x width intermediate
values that a GEMM micro-benchmark on a warm input does not see. `rest` is everything else a forward does
(launching dozens of operators, norms, rotary embeddings, attention over a short cache, masks): it is measured at
two anchors, a decode step at batch 1 (the **fixed cost** of a forward) and a prefill, each minus its measured
kernels, and interpolated linearly in M between them. None of these is a speculative run.

A static batch runs until its slowest sequence has all its tokens. `expected_batch_rounds` takes the rounds each
sequence needed in an acceptance run (measured, per sequence) and returns the expected maximum over B of them.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

import numpy as np


def interpolate(xs, ys, x):
    """Piecewise-linear y(x) through the points (xs ascending); beyond the ends, extended from the nearest two."""
    xs, ys = list(xs), list(ys)
    if len(xs) != len(ys) or len(xs) < 2 or any(b <= a for a, b in zip(xs, xs[1:])):
        raise ValueError("xs must be at least two ascending points, one y each")
    i = min(max(bisect.bisect_right(xs, x) - 1, 0), len(xs) - 2)
    x0, x1, y0, y1 = xs[i], xs[i + 1], ys[i], ys[i + 1]
    return float(y0 + (y1 - y0) * (x - x0) / (x1 - x0))


@dataclass
class CpuStepModel:
    """Measured terms of one model's forward on this CPU (seconds), and the forward time they add up to.

    grid: the M values (tokens per forward) the micro-benchmarks ran at.  gemm: {name: seconds per grid point} for
    the weight GEMMs of ONE layer (q, k, v, o, gate, up, down).  mlp: seconds per grid point of one layer's MLP
    timed whole.  lm_head: seconds per grid point.  layers: decoder layers.  rest_at: {M: seconds} of everything
    else a forward does, at the anchors.
    """

    name: str
    layers: int
    grid: list
    gemm: dict
    mlp: list
    lm_head: list
    rest_at: dict = field(default_factory=dict)

    def _curve(self, values, m):
        return interpolate(self.grid, values, m)

    def kernels(self, m):
        """{"gemm", "activation", "lm_head"}: the measured kernel terms of one forward over m tokens, seconds."""
        gemm = {key: self._curve(values, m) for key, values in self.gemm.items()}
        mlp_gemms = gemm["gate"] + gemm["up"] + gemm["down"]
        return {
            "gemm": self.layers * sum(gemm.values()),
            "activation": self.layers * max(0.0, self._curve(self.mlp, m) - mlp_gemms),
            "lm_head": self._curve(self.lm_head, m),
        }

    def rest(self, m):
        anchors = sorted(self.rest_at)
        if len(anchors) < 2:
            raise ValueError(f"{self.name}: rest needs two anchors, has {anchors}")
        return max(0.0, interpolate(anchors, [self.rest_at[a] for a in anchors], m))

    def terms(self, batch, tokens):
        """The forward's terms at batch `batch` with `tokens` new tokens per sequence: rest + kernels (seconds)."""
        m = batch * tokens
        return {"rest": self.rest(m), **self.kernels(m)}

    def seconds(self, batch, tokens):
        return float(sum(self.terms(batch, tokens).values()))

    def anchor(self, m, measured_forward_s):
        """Record a measured forward over m tokens: its rest is the forward minus its measured kernels."""
        self.rest_at[m] = measured_forward_s - sum(self.kernels(m).values())
        return self.rest_at[m]


def rounds_per_sequence(per_round, max_new_tokens):
    """Rounds each sequence needed to emit `max_new_tokens`, from a run's per-round accepted counts.

    per_round: list of (B,) accepted-draft counts (one per round, as batched_speculative_generate's stats).
    A round emits accepted + 1 tokens per sequence. Returns a list of B ints; ValueError if a sequence never got
    there (the run was too short).
    """
    n = np.stack([np.asarray(r) for r in per_round]).astype(int)  # (rounds, B)
    done = np.cumsum(n + 1, axis=0) >= max_new_tokens
    if not done[-1].all():
        raise ValueError("per_round: some sequence did not reach max_new_tokens in this run")
    return [int(i) + 1 for i in done.argmax(axis=0)]


def expected_batch_rounds(rounds, batch):
    """Expected rounds a static batch of `batch` sequences runs: E[max of `batch` draws] from the empirical
    distribution of per-sequence rounds `rounds` (draws with replacement; exact, no sampling)."""
    if not rounds or batch < 1:
        raise ValueError("need measured rounds and batch >= 1")
    values = np.array(sorted(set(rounds)))
    cdf = np.array([np.mean(np.asarray(rounds) <= v) for v in values])
    below = np.concatenate([[0.0], cdf[:-1]])
    return float(np.sum(values * (cdf**batch - below**batch)))


def _layer_modules(model):
    """(the weight GEMM modules of one decoder layer {name: module}, its MLP, the LM head, layers, input dtype)
    of a Llama causal LM, or of a wrapper holding one as `.model` (OneThread)."""
    lm = model
    while not hasattr(lm, "lm_head") and hasattr(lm, "model"):
        lm = lm.model
    layer = lm.model.layers[0]
    attn, mlp = layer.self_attn, layer.mlp
    gemms = {
        "q": attn.q_proj,
        "k": attn.k_proj,
        "v": attn.v_proj,
        "o": attn.o_proj,
        "gate": mlp.gate_proj,
        "up": mlp.up_proj,
        "down": mlp.down_proj,
    }
    return gemms, mlp, lm.lm_head, len(lm.model.layers), lm.model.embed_tokens.weight.dtype


def measure_kernels(name, model, grid, repeats=5, threads=None, anchors=None):
    """CpuStepModel of `model` with its GEMMs, its MLP (whole) and its LM head timed on its own modules over `grid`
    (M values), medians of `repeats` after a warm-up; `threads` (e.g. 1 for a one-thread draft) while timing.

    anchors: {M: a callable running one whole forward over M tokens}; at each such M the forward is timed
    **interleaved** with the kernels (round-robin, so a slow spell of the machine hits them alike), and the
    model's rest at M is that forward minus the kernels.
    """
    import torch

    from specdec.measure.timing import interleaved_medians

    gemms, mlp, lm_head, layers, dtype = _layer_modules(model)
    hidden, inter = gemms["q"].in_features, gemms["down"].in_features
    anchors = dict(anchors or {})
    before = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    gen = torch.Generator().manual_seed(0)
    out = {"gemm": {key: [] for key in gemms}, "mlp": [], "lm_head": []}
    forwards = {}
    try:
        with torch.no_grad():
            for m in sorted(set(grid) | set(anchors)):
                x_h = torch.randn(1, m, hidden, generator=gen).to(dtype)
                x_i = torch.randn(1, m, inter, generator=gen).to(dtype)
                calls = {
                    key: (lambda module=module, x=(x_i if key == "down" else x_h): module(x))
                    for key, module in gemms.items()
                }
                calls["mlp"], calls["lm_head"] = (lambda: mlp(x_h)), (lambda: lm_head(x_h))
                if m in anchors:
                    calls["forward"] = anchors[m]
                med = interleaved_medians(calls, repeats=repeats, warmup=1)
                for key in gemms:
                    out["gemm"][key].append(med[key])
                out["mlp"].append(med["mlp"])
                out["lm_head"].append(med["lm_head"])
                if m in anchors:
                    forwards[m] = med["forward"]
    finally:
        torch.set_num_threads(before)
    terms = CpuStepModel(name=name, layers=layers, grid=sorted(set(grid) | set(anchors)), **out)
    for m, seconds in forwards.items():
        terms.anchor(m, seconds)
    return terms


def measure_bandwidth_and_flops(path, width, rows=256, repeats=5):
    """(bytes/s, throughput in notebook 07's units) on `path`: one matrix of 128 M weights, `width` rows of it.

    One row through it (a matrix-vector product, every byte read once, almost no arithmetic) measures bandwidth;
    `rows` rows measure matrix throughput, given as weight bytes x rows / s so that its ratio to the bandwidth
    reads as rows per weight read (the ridge, whatever the bytes per weight of the path).
    """
    import torch

    from specdec.measure.kernels import convert_linear, weight_megabytes
    from specdec.measure.timing import median_seconds

    gen = torch.Generator().manual_seed(0)
    layer = torch.nn.Linear(128 * 2**20 // width, width, bias=False)
    with torch.no_grad():
        layer.weight.copy_(torch.randn(layer.weight.shape, generator=gen) * 0.02)
    mat = convert_linear(layer, path, inplace=True)
    dtype = torch.bfloat16 if path == "bf16" else torch.float32
    x1, xr = torch.randn(1, layer.in_features).to(dtype), torch.randn(rows, layer.in_features).to(dtype)
    with torch.no_grad():
        t_vec = median_seconds(lambda: mat(x1), repeats=repeats)
        t_mat = median_seconds(lambda: mat(xr), repeats=repeats)
    weight_bytes = weight_megabytes(mat) * 1e6  # the bytes the path really reads
    return weight_bytes / t_vec, rows * weight_bytes / t_mat
