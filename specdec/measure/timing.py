"""Timing that survives a noisy 2-core machine: warm up, repeat, interleave, take medians; and say when it did not.

``Steadiness`` (notebooks 02, 05, 09, 10 and 11: around each timing section) watches a block of timings: the share
of the CPU that other programs took meanwhile (``OtherLoad``), the 1-minute load average against the cores the
notebook uses, and the spread of every repeated timing made inside it (``interleaved_medians``,
``median_seconds`` and ``specdec.measure.rounds.measure_rounds`` report theirs). ``report()`` prints one line with
the spread and, when the machine was busy, one warning line; ``record()`` (specdec.measure.my_measurements) saves
every section's summary in my_measurements.json.
"""

import os
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
    samples = [time_once(fn, device) for _ in range(repeats)]
    note_spread(samples)
    return statistics.median(samples)


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
    for s in samples.values():
        note_spread(s)
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
        idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
        total = sum(fields[:8])  # user .. steal (guest is inside user)
        return total - idle, total, int(own[11]) + int(own[12])  # utime + stime of this process, in ticks


# a section whose typical timing's median repeat is over 1.5 x its fastest was not steady. Loose on purpose: on a quiet
# 2-core machine small timings are bimodal (05's race of the tiny pair: median repeats 1.29 x the fastest, with
# other programs at 0 % of the CPU); what other programs take is measured directly (OTHERS_BOUND)
SPREAD_BOUND = 0.5
OTHERS_BOUND = 0.10  # other programs took more than a tenth of the CPU
WATCHED = {}  # section -> summary of every Steadiness block this kernel ran (saved by record())
_ACTIVE = []  # the Steadiness blocks now open: repeated timings report their spread to them


def note_spread(samples):
    """Tell the open Steadiness blocks the spread of one repeated timing (its samples, seconds)."""
    if len(samples) >= 2 and _ACTIVE and min(samples) > 0:
        for watch in _ACTIVE:
            watch.spreads.append((min(samples), statistics.median(samples), max(samples)))


class Steadiness(OtherLoad):
    """`with Steadiness("the race", threads=2) as watch: ...` then `watch.report()`.

    threads: the cores the section's timings use (torch's threads); pids: a callable returning the ids of other
    processes whose CPU time is the section's own (an engine the notebook started), counted as its own. After the
    block: `share` (other programs' share of the CPU), `load` (the 1-minute load average at the end), `spreads`
    [(min, median, max)] of the repeated timings made inside it; `busy` is True when the share is above
    OTHERS_BOUND, the load above `threads` (with others using the CPU), or the typical timing's median repeat more
    than SPREAD_BOUND above its fastest (`typical_spread`; one slow repeat, `worst_spread`, is only reported)."""

    def __init__(self, section, threads=None, pids=None, spread_bound=SPREAD_BOUND):
        if not isinstance(section, str) or not section:
            raise ValueError(f"section must name the timing section, got {section!r}")
        import torch

        self.section, self.threads = section, int(threads or torch.get_num_threads())
        self.pids, self.spread_bound = pids, spread_bound
        self.spreads, self.load, self.seconds = [], None, 0.0

    def __enter__(self):
        super().__enter__()
        self._t0 = time.perf_counter()
        _ACTIVE.append(self)
        return self

    def start(self):
        """The same as entering a `with` block, for a cell whose timings are not indented under one: returns self."""
        return self.__enter__()

    def stop(self):
        """The same as leaving the `with` block: returns self (then `.report()`)."""
        self.__exit__(None, None, None)
        return self

    def __exit__(self, *exc):
        self.seconds = time.perf_counter() - self._t0
        if self in _ACTIVE:
            _ACTIVE.remove(self)
        super().__exit__(*exc)
        try:
            self.load = os.getloadavg()[0]
        except OSError:
            self.load = None
        WATCHED[self.section] = self.summary()
        return False

    def _read(self):
        base = super()._read()
        if base is None or self.pids is None:
            return base
        extra = 0
        for pid in self.pids() or ():
            try:
                with open(f"/proc/{pid}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                extra += int(fields[11]) + int(fields[12])
            except (OSError, ValueError, IndexError):
                continue
        busy, total, own = base
        return busy, total, own + extra

    @property
    def worst_spread(self):
        """The largest (slowest ÷ fastest − 1) of the section's repeated timings: one slow repeat is common."""
        return max((hi / lo - 1 for lo, _, hi in self.spreads), default=None)

    @property
    def typical_spread(self):
        """The median over the section's timings of (median repeat ÷ fastest − 1): what a busy machine raises."""
        return statistics.median(mid / lo - 1 for lo, mid, _ in self.spreads) if self.spreads else None

    @property
    def reasons(self):
        out = []
        if self.share is not None and self.share > OTHERS_BOUND:
            out.append(f"other programs took {self.share:.0%} of the CPU")
        if self.load is not None and self.load > self.threads + 0.5 and (self.share is None or self.share > 0.05):
            out.append(
                f"the load average was {self.load:.1f} on {os.cpu_count()} cores ({self.threads} for these timings)"
            )
        if self.typical_spread is not None and self.typical_spread > self.spread_bound:
            out.append(
                f"a typical timing's median repeat took {1 + self.typical_spread:.2f}x its fastest "
                f"(bound {1 + self.spread_bound:.2f}x)"
            )
        return out

    @property
    def busy(self):
        return bool(self.reasons)

    def summary(self):
        return {
            "seconds": self.seconds,
            "timings": len(self.spreads),
            "worst_spread": self.worst_spread,
            "typical_spread": self.typical_spread,
            "other_share": self.share,
            "load": self.load,
            "threads": self.threads,
            "busy": self.busy,
            "reasons": "; ".join(self.reasons),
        }

    def report(self):
        """Print the section's spread and, when the machine was busy, one warning line; returns busy."""
        spread = (
            f"{len(self.spreads)} repeated timings, their median repeats {1 + self.typical_spread:.2f}x the "
            f"fastest (typically), the slowest {1 + self.worst_spread:.2f}x"
            if self.spreads
            else "no repeated timings"
        )
        other = "" if self.share is None else f"; other programs {self.share:.0%} of the CPU"
        print(f"{self.section}: {spread}{other}")
        if self.busy:
            print(
                f"warning: the machine was busy during {self.section} ({'; '.join(self.reasons)}): "
                f"its timings are not trustworthy; rerun this cell on an idle machine"
            )
        return self.busy
