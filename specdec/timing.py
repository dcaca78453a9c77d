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


class OtherLoad:
    """Share of this machine's CPU time that other processes used while the block ran (Linux: /proc/stat minus
    this process's own time; None elsewhere). A benchmark on a shared 2-core machine is only as good as this is
    small: `with OtherLoad() as other: ...` then `other.share`."""

    def __enter__(self):
        self.share, self._start = None, self._read()
        return self

    def __exit__(self, *exc):
        end = self._read()
        if self._start and end:
            (busy0, total0, own0), (busy1, total1, own1) = self._start, end
            if total1 > total0:
                self.share = max(0.0, (busy1 - busy0) - (own1 - own0)) / (total1 - total0)
        return False

    @staticmethod
    def _read():
        try:
            with open("/proc/stat") as f:
                fields = [int(x) for x in f.readline().split()[1:]]
            with open("/proc/self/stat") as f:
                own = f.read().rsplit(")", 1)[1].split()
        except (OSError, ValueError, IndexError):
            return None
        idle = fields[3] + (fields[4] if len(fields) > 4 else 0)          # idle + iowait
        total = sum(fields[:8])                                         # user .. steal (guest is inside user)
        return total - idle, total, int(own[11]) + int(own[12])         # utime + stime of this process, in ticks
