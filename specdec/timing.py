"""Timing that survives a noisy 2-core machine: warm up, repeat, interleave, take medians."""
import statistics
import time

import torch


def _sync(device):
    if device is not None and str(device).startswith("cuda"):
        torch.cuda.synchronize()


def time_once(fn, device=None):
    """Seconds for one call of fn() (synchronising a CUDA device before and after)."""
    _sync(device)
    t0 = time.perf_counter()
    fn()
    _sync(device)
    return time.perf_counter() - t0


def median_seconds(fn, repeats=7, warmup=2, device=None):
    """Median seconds of fn() over `repeats` calls after `warmup` untimed calls."""
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    for _ in range(warmup):
        fn()
    return statistics.median(time_once(fn, device) for _ in range(repeats))


def interleaved_medians(fns, repeats=7, warmup=2, device=None):
    """{name: median seconds} for a dict of callables, timed round-robin so drift hits all alike."""
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    samples = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            samples[name].append(time_once(fn, device))
    return {name: statistics.median(s) for name, s in samples.items()}
