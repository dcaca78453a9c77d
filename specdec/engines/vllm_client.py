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
from pathlib import Path

from specdec.engines.install import status, vllm_python
from specdec.engines.processes import end, log_tail, start

from specdec import REPO


class VllmWorker:
    """One vLLM worker process; ``engine(...)`` builds an engine, ``sweep(...)`` runs a batch sweep on it."""

    def __init__(self, start_timeout=180.0, threads=2):
        self.start_timeout, self.threads = start_timeout, threads
        self.proc, self.log_path = None, None

    def log_tail(self, n=3000):
        return log_tail(self.log_path, n)

    def __enter__(self):
        if not status()["vllm"]:
            raise FileNotFoundError(f"vLLM's environment is missing ({vllm_python().parent.parent}): run `make engines`")
        fd, self.log_path = tempfile.mkstemp(prefix="vllm-worker-", suffix=".log")
        env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS=str(self.threads), TQDM_DISABLE="1",
                   VLLM_LOGGING_LEVEL="WARNING", VLLM_NO_USAGE_STATS="1", DO_NOT_TRACK="1", HF_HUB_OFFLINE="1")
        with os.fdopen(fd, "w") as log:
            self.proc = start([str(vllm_python()), "-m", "specdec.engines.vllm_bench"], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=log, text=True, env=env, cwd=str(REPO))
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
        """Build an engine kept under `name` (see specdec/engines/vllm_bench.py); returns its start-up seconds and versions."""
        return self.ask({"op": "engine", "name": name, "target": str(target), "draft": draft and str(draft),
                         "k": int(k), "schedule": schedule, "max_num_seqs": int(max_num_seqs), "threads": self.threads,
                         **extra})

    def sweep(self, engines, prompts, batches, new_tokens, repeats=1, timeout=300.0, prefill=False):
        """{engine: {str(B): {"seconds", "tokens", "metrics_before", "metrics_after"}}}, the engines interleaved;
        with `prefill`, also "prefill_seconds": each repeat's one-token generation of the same batch (see
        specdec/engines/vllm_bench.py). Each run's repeats are told to an open Steadiness block (specdec.measure.timing.note_spread)."""
        from specdec.measure.timing import note_spread
        out = self.ask({"op": "sweep", "engines": list(engines), "prompts": [[int(t) for t in p] for p in prompts],
                        "batches": [int(b) for b in batches], "new_tokens": int(new_tokens),
                        "repeats": int(repeats), "prefill": bool(prefill)}, timeout)
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


def decode_seconds(run, new_tokens):
    """Seconds per decoded token after the first, from a sweep run with prefill: (median seconds of the
    `new_tokens`-token generation - median seconds of the one-token generation) / (new_tokens - 1). The prefill
    (every prompt token of the batch through the model) is the same work with and without speculation, and at a
    large batch it outweighs a short generation's decoding; a step's price must leave it out."""
    import statistics

    if new_tokens < 2:
        raise ValueError(f"new_tokens must be >= 2 to leave a decoded token after the first, got {new_tokens!r}")
    if not run.get("prefill_seconds"):
        raise ValueError("run has no prefill_seconds: sweep it with prefill=True")
    return (statistics.median(run["seconds"]) - statistics.median(run["prefill_seconds"])) / (new_tokens - 1)
