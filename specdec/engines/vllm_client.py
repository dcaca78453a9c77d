"""Drive vLLM (its own environment, ``make engines``) from notebook 11: ``with VllmWorker() as vllm: ...``.

The worker (specdec/engines/vllm_bench.py) runs in vLLM's Python as a child process in its own process group, on this
machine only; every answer is awaited with a time limit, and leaving the block (an error or an interrupted cell
included) ends the whole group; an ``atexit`` hook ends any still running when Python exits, and the worker gets
SIGTERM if the Python that started it is killed outright. A worker that fails gives one RuntimeError with the end
of its log, never a hang.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import tempfile
import time

from specdec import REPO
from specdec.engines.install import status, vllm_python
from specdec.engines.processes import end, log_tail, start


class VllmWorker:
    """One vLLM worker process; ``engine(...)`` builds an engine, ``sweep(...)`` runs a batch sweep on it."""

    def __init__(self, start_timeout=180.0, threads=2):
        self.start_timeout, self.threads = start_timeout, threads
        self.proc, self.log_path = None, None

    def log_tail(self, n=3000):
        return log_tail(self.log_path, n)

    def __enter__(self):
        if not status()["vllm"]:
            raise FileNotFoundError(
                f"vLLM's environment is missing ({vllm_python().parent.parent}): run `make engines`"
            )
        fd, self.log_path = tempfile.mkstemp(prefix="vllm-worker-", suffix=".log")
        env = dict(
            os.environ,
            PYTHONPATH=str(REPO),
            OMP_NUM_THREADS=str(self.threads),
            TQDM_DISABLE="1",
            VLLM_LOGGING_LEVEL="WARNING",
            VLLM_NO_USAGE_STATS="1",
            DO_NOT_TRACK="1",
            HF_HUB_OFFLINE="1",
        )
        with os.fdopen(fd, "w") as log:
            self.proc = start(
                [str(vllm_python()), "-m", "specdec.engines.vllm_bench"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                text=True,
                env=env,
                cwd=str(REPO),
            )
        try:
            self._read(self.start_timeout)
        except BaseException:
            self.close()
            raise
        return self

    def _read(self, timeout):
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the vLLM worker exited with code {self.proc.returncode}:\n{self.log_tail()}")
            ready, _, _ = select.select([self.proc.stdout], [], [], 0.5)
            if ready:
                line = self.proc.stdout.readline()
                if line:
                    return json.loads(line)
            if time.monotonic() > deadline:
                raise RuntimeError(f"the vLLM worker gave no answer within {timeout:.0f} s:\n{self.log_tail()}")

    def ask(self, request, timeout=300.0):
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        answer = self._read(timeout)
        if "error" in answer:
            raise RuntimeError(f"vLLM: {answer['error']}")
        return answer["ok"]

    def engine(self, name, target, draft=None, k=3, schedule=None, max_num_seqs=16, **extra):
        """Build an engine kept under `name` (see specdec/engines/vllm_bench.py); returns its start-up seconds and
        versions."""
        return self.ask(
            {
                "op": "engine",
                "name": name,
                "target": str(target),
                "draft": draft and str(draft),
                "k": int(k),
                "schedule": schedule,
                "max_num_seqs": int(max_num_seqs),
                "threads": self.threads,
                **extra,
            }
        )

    def sweep(self, engines, prompts, batches, new_tokens, repeats=1, timeout=300.0, prefill=False):
        """{engine: {str(B): {"seconds", "tokens", "metrics_before", "metrics_after"}}}, the engines interleaved;
        with `prefill`, also "prefill_seconds": each repeat's one-token generation of the same batch (see
        specdec/engines/vllm_bench.py). Each run's repeats are told to an open Steadiness block
        (specdec.measure.timing.note_spread)."""
        from specdec.measure.timing import note_spread

        out = self.ask(
            {
                "op": "sweep",
                "engines": list(engines),
                "prompts": [[int(t) for t in p] for p in prompts],
                "batches": [int(b) for b in batches],
                "new_tokens": int(new_tokens),
                "repeats": int(repeats),
                "prefill": bool(prefill),
            },
            timeout,
        )
        for runs in out.values():
            for run in runs.values():
                note_spread(run["seconds"])
                if prefill:
                    note_spread(run["prefill_seconds"])
        return out

    def drop(self, name):
        return self.ask({"op": "drop", "name": name})

    def close(self):
        if self.proc is not None and self.proc.poll() is None:
            try:
                self.proc.stdin.write(json.dumps({"op": "exit"}) + "\n")
                self.proc.stdin.flush()
                self.proc.wait(10)
            except (OSError, subprocess.TimeoutExpired, ValueError):
                pass
        if self.proc is not None:
            end(self.proc)

    def __exit__(self, *exc):
        self.close()
        return False


class UnusableMeasurement(ValueError):
    """A decoded-token time that came out impossible: not positive, or with repeats whose spread reaches zero."""


def repeat_decode_seconds(run, new_tokens):
    """Each repeat's seconds per decoded token after the first, its long generation paired with the one-token
    generation that ran right after it (the sweep takes them in turn): [(seconds[i] - prefill_seconds[i]) /
    (new_tokens - 1)]. The spread of these is the noise of a decode-only time; whole-run seconds understate it,
    since taking the prefill away leaves the same absolute noise on a smaller number."""
    if isinstance(new_tokens, bool) or not isinstance(new_tokens, int) or new_tokens < 2:
        raise ValueError(
            f"new_tokens must be an integer >= 2 to leave a decoded token after the first, got {new_tokens!r}"
        )
    if not run.get("prefill_seconds"):
        raise ValueError("run has no prefill_seconds: sweep it with prefill=True")
    if len(run["prefill_seconds"]) != len(run["seconds"]):
        raise ValueError(f"run holds {len(run['seconds'])} seconds but {len(run['prefill_seconds'])} prefill_seconds")
    return [(s - p) / (new_tokens - 1) for s, p in zip(run["seconds"], run["prefill_seconds"])]


def decode_seconds(run, new_tokens):
    """Seconds per decoded token after the first, from a sweep run with prefill: (median seconds of the
    `new_tokens`-token generation - median seconds of the one-token generation) / (new_tokens - 1). The prefill
    (every prompt token of the batch through the model) is the same work with and without speculation, and at a
    large batch it outweighs a short generation's decoding; a step's price must leave it out.

    Raises UnusableMeasurement (a ValueError) where noise made the time impossible: the median difference not
    positive, or a repeat whose own difference is not (the spread reaches zero, so the median is noise too)."""
    import statistics

    per_repeat = repeat_decode_seconds(run, new_tokens)
    value = (statistics.median(run["seconds"]) - statistics.median(run["prefill_seconds"])) / (new_tokens - 1)
    if not value > 0 or not min(per_repeat) > 0:
        raise UnusableMeasurement(
            f"a decoded token took {value * 1e3:.2f} ms "
            f"(repeats {', '.join(f'{x * 1e3:.2f}' for x in per_repeat)} ms): "
            f"the one-token runs ({', '.join(f'{x:.3f}' for x in run['prefill_seconds'])} s) were as slow as the "
            f"{new_tokens}-token ones ({', '.join(f'{x:.3f}' for x in run['seconds'])} s)"
        )
    return value


def priced_sweep(worker, engines, prompts, batches, new_tokens, repeats=1, retries=2, timeout=300.0):
    """A sweep with prefill, priced per decoded token, that never stops on an impossible measurement.

    Returns (sweep, per_step, unusable): sweep as VllmWorker.sweep returns it; per_step {engine: {B: seconds per
    decoded token}} for the usable batches; unusable {B: why}. A batch where any engine's decode_seconds raises
    UnusableMeasurement is swept again on its own (all the engines, taking turns as before, its runs replacing the
    first ones), at most `retries` times; a batch still unusable then is left out of per_step, with the reason."""
    if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
        raise ValueError(f"retries must be an integer >= 0, got {retries!r}")
    engines, batches = list(engines), [int(b) for b in batches]
    out = worker.sweep(engines, prompts, batches, new_tokens, repeats, timeout=timeout, prefill=True)

    def price():
        # ({engine: {B: seconds per decoded token}} of the usable batches, {B: why} of the others), in one pass
        steps, why = {e: {} for e in engines}, {}
        for B in batches:
            for e in engines:
                try:
                    steps[e][B] = decode_seconds(out[e][str(B)], new_tokens)
                except UnusableMeasurement as err:
                    why[B] = f"{e}: {err}"
                    break
        return {e: {B: t for B, t in by_b.items() if B not in why} for e, by_b in steps.items()}, why

    per_step, why = price()
    for _ in range(retries):
        if not why:
            break
        again = worker.sweep(engines, prompts, sorted(why), new_tokens, repeats, timeout=timeout, prefill=True)
        for e in engines:
            out[e].update(again[e])
        per_step, why = price()
    unusable = {B: f"measured {retries + 1} times, still unusable ({reason})" for B, reason in why.items()}
    return out, per_step, unusable


def repeat_ratios(runs, other, new_tokens, batch):
    """Each repeat's decode-only speedup of engine `other` over "plain" at `batch` in one sweep (runs: {engine:
    {str(B): run}}): plain's seconds per decoded token over other's, repeat by repeat (they ran in turn)."""
    plain = repeat_decode_seconds(runs["plain"][str(batch)], new_tokens)
    return [p / s for p, s in zip(plain, repeat_decode_seconds(runs[other][str(batch)], new_tokens))]


def interval(ratios):
    """(median - MAD, median + MAD) of repeated ratios, MAD the median absolute deviation from the median: the noise
    band of a ratio that one stalled repeat of three does not widen (a decode-only time subtracts two runs, so one
    slow one-token run can put a single repeat's ratio several times off)."""
    import statistics

    ratios = list(ratios)
    if not ratios:
        raise ValueError("ratios must hold at least one ratio")
    med = statistics.median(ratios)
    mad = statistics.median(abs(x - med) for x in ratios)
    return med - mad, med + mad
