"""Where a decoding round's time goes: ``torch.profiler`` over whole generations, each operator attributed to a term.

Used by notebook 09 (section 2). ``profile_rounds(run, target, draft)`` runs ``run()`` (one or more generations)
under ``torch.profiler`` with the two models' forwards marked (a ``record_function`` range opened by a forward
pre-hook and closed by a forward hook, named ``target forward`` and ``draft forward``), then attributes every
top-level operator to one term:

- ``target forward``, ``draft forwards``: everything inside those ranges (the models' own operators and the cache
  update inside them);
- ``softmax / sampling``: probabilities and token choice outside the forwards (softmax, one-hot, argmax, cumsum,
  searchsorted, random draws, the acceptance test's comparisons);
- ``cache / tokens``: growing, cutting and copying tensors outside the forwards (cat, slice, index_select, copy,
  stack, new buffers): the KV cache's crop and the token bookkeeping;
- ``rest``: wall time not inside any operator: the Python between operations.

The profiler itself adds about a microsecond per operator, so the absolute figures are a little above an
unprofiled run's; the notebook reads the split from here and feeds its model from wall-clock timings.
"""

from __future__ import annotations

import os
import statistics
import time

import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile, record_function

from specdec.measure.kernels import weight_megabytes
from specdec.measure.timing import note_spread

# kineto (the profiler's backend) writes "USDT: profiler_start / profiler_stop" to stderr on every profile, into
# the notebook's output; level 6 keeps it quiet. It reads the variable when the first profile starts.
os.environ.setdefault("KINETO_LOG_LEVEL", "6")

TERMS = ("target forward", "draft forwards", "softmax / sampling", "cache / tokens", "rest")

# operator names (without "aten::") outside the forwards, by term; anything else outside them counts as sampling
_CACHE_OPS = {
    "cat",
    "slice",
    "narrow",
    "index_select",
    "copy_",
    "clone",
    "stack",
    "empty",
    "empty_like",
    "empty_strided",
    "zeros",
    "zeros_like",
    "new_empty",
    "new_zeros",
    "as_strided",
    "select",
    "view",
    "reshape",
    "unsqueeze",
    "squeeze",
    "expand",
    "contiguous",
    "index_put_",
    "fill_",
    "resize_",
    "lift_fresh",
    "alias",
    "detach",
    "_unsafe_view",
    "t",
    "transpose",
}
_RANGES = {"target forward": "target forward", "draft forward": "draft forwards"}


def _mark(module, name):
    """Forward hooks that open and close a record_function range around every forward of `module`."""
    open_ranges = []

    def pre(mod, args, kwargs):
        rf = record_function(name)
        rf.__enter__()
        open_ranges.append(rf)

    def post(mod, args, kwargs, output):
        if open_ranges:
            open_ranges.pop().__exit__(None, None, None)

    return [
        module.register_forward_pre_hook(pre, with_kwargs=True),
        module.register_forward_hook(post, with_kwargs=True),
    ]


def _term(event):
    """The term of a top-level profiler event."""
    if event.name in _RANGES:
        return _RANGES[event.name]
    name = event.name.split("::", 1)[-1]
    return "cache / tokens" if name in _CACHE_OPS else "softmax / sampling"


def attribute(events, seconds):
    """{term: seconds} from a profiler's events (``prof.events()``) over the last `seconds` of the profiled block.

    The window is the `seconds` that end with the last operator (a decoding loop's span after its prefill:
    ``stats["seconds"]``, or ``plain_decode``'s seconds). Top-level events (no CPU parent) that start inside it are
    summed by term; what the window holds outside every top-level event is ``rest``."""
    if not seconds > 0:
        raise ValueError(f"seconds must be > 0, got {seconds}")
    top = [e for e in events if e.cpu_parent is None]
    out = dict.fromkeys(TERMS, 0.0)
    if not top:
        out["rest"] = seconds
        return out
    end = max(e.time_range.end for e in top)
    start = end - seconds * 1e6  # profiler times are microseconds
    inside = 0.0
    for event in top:
        if event.time_range.start < start:
            continue
        duration = (event.time_range.end - event.time_range.start) / 1e6
        out[_term(event)] += duration
        inside += duration
    out["rest"] = max(0.0, seconds - inside)
    return out


def profile_rounds(run, target, draft=None):
    """Profile `run()` with the forwards of `target` (and `draft`, a module, where given) marked.

    `run()` decodes one sequence and returns (rounds, seconds): the rounds (or plain steps) it ran and the seconds of
    its decoding after the prefill (``stats["rounds"], stats["seconds"]`` of the course's loop; ``max_new_tokens``
    and ``plain_decode``'s seconds for plain decoding). Returns ({term: seconds per round}, seconds per round, the
    profiler, for a closer look: ``prof.key_averages().table(sort_by="self_cpu_time_total")``)."""
    hooks = _mark(target, "target forward") + ([] if draft is None else _mark(draft, "draft forward"))
    try:
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            result = run()
    finally:
        for h in hooks:
            h.remove()
    if not (
        isinstance(result, tuple)
        and len(result) == 2
        and isinstance(result[0], int)
        and result[0] >= 1
        and result[1] > 0
    ):
        raise ValueError(f"run must return (rounds >= 1, seconds > 0), got {result!r}")
    rounds, seconds = result
    terms = attribute(prof.events(), seconds)
    return {k: v / rounds for k, v in terms.items()}, seconds / rounds, prof


# a lean forward's decode step taken apart (notebook 09's "plain step" lines); moved from specdec.core.lean
def step_parts(model, context: int = 24):
    """One decode step of `model` (a specdec.core.lean.LeanLlama), and its matrix products alone: (step, products,
    megabytes).

    ``step()`` runs one decode step (a one-token forward on a cache holding `context` positions, rolled back
    after, so every call is the same step). ``products()`` runs the step's matrix products alone, layer by
    layer in the step's order, on one row of zeros, and returns {kind: seconds} for "q/k/v", "o", "gate/up",
    "down" and "lm head" (fused matrices where the forward fuses them, the int8 modules themselves where it
    does not). Each product reads other weights, so one call streams the model from memory as the step does.
    ``megabytes`` is {kind: MB of weights those products read}. The step minus the products is what the step
    spends outside them (norms, rotary, attention, the cache, Python)."""
    if not isinstance(context, int) or not 1 <= context < model.max_len:
        raise ValueError(f"context must be an int in [1, {model.max_len - 1}], got {context!r}")
    cache = model.new_cache()
    ids = torch.zeros(1, context, dtype=torch.long)
    model(ids, cache=cache, logits_to_keep=1)
    one = ids[:, :1]

    def step():
        model(one, cache=cache, logits_to_keep=1)
        cache.crop(context)

    h, a, z = (
        torch.zeros(1, n, dtype=model.dtype)
        for n in (model.config.hidden_size, model.heads * model.head_dim, model.config.intermediate_size)
    )
    ops = []  # (kind, matrix or module, input)
    for L in model.layers:
        ops += [("q/k/v", L.qkv, h)] if L.qkv is not None else [("q/k/v", m, h) for m in (L.q, L.k, L.v)]
        ops.append(("o", L.o, a))
        ops += [("gate/up", L.gate_up, h)] if L.gate_up is not None else [("gate/up", m, h) for m in (L.gate, L.up)]
        ops.append(("down", L.down, z))
    ops.append(("lm head", model.lm_head, h))
    kinds = list(dict.fromkeys(kind for kind, _, _ in ops))

    @torch.no_grad()
    def products():
        seconds = dict.fromkeys(kinds, 0.0)
        for kind, op, x in ops:
            t0 = time.perf_counter()
            F.linear(x, op) if isinstance(op, torch.Tensor) else op(x)
            seconds[kind] += time.perf_counter() - t0
        return seconds

    megabytes = dict.fromkeys(kinds, 0.0)
    for kind, op, _ in ops:
        megabytes[kind] += (
            op.numel() * op.element_size() / 1e6 if isinstance(op, torch.Tensor) else weight_megabytes(op)
        )
    return step, products, megabytes


def time_step_parts(model, repeats: int = 15, warmup: int = 3, context: int = 24):
    """Where one decode step of `model` goes: {"step": s, "products": s, kind: s for each kind of matrix product}
    (``step_parts``), each the median of `repeats` passes, the step and the products alone interleaved
    so drift hits both alike, and {kind: MB}. "outside" = step - products: the time outside the matrix products."""
    if not isinstance(repeats, int) or repeats < 1:
        raise ValueError(f"repeats must be an int >= 1, got {repeats!r}")
    step, products, megabytes = step_parts(model, context)
    for _ in range(warmup):
        step()
        products()
    steps, parts = [], []
    for _ in range(repeats):
        t0 = time.perf_counter()
        step()
        steps.append(time.perf_counter() - t0)
        parts.append(products())
    totals = [sum(p.values()) for p in parts]
    note_spread(steps)
    note_spread(totals)
    med = statistics.median
    out = {"step": med(steps), "products": med(totals)}
    out.update({kind: med(p[kind] for p in parts) for kind in megabytes})
    out["outside"] = out["step"] - out["products"]
    return out, megabytes
