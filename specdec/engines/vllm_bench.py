"""vLLM's side of notebook 11, run in vLLM's own environment (``make engines``), never in the course's.

``python -m specdec.engines.vllm_bench`` is a worker that imports vLLM once (the import alone takes seconds to tens of
seconds on a 2-core CPU) and then answers one JSON request per line on standard input with one JSON line on
standard output:

- ``{"op": "engine", "name": str, "target": dir, "draft": dir or null, "k": int, "schedule": [[start, end, k], ...]
  or null, "max_num_seqs": int, "threads": int}`` builds an engine and keeps it under that name: the target alone,
  or the target with the draft as vLLM's ``draft_model`` speculator, gated by vLLM's
  ``num_speculative_tokens_per_batch_size`` where a schedule is given. Answers the start-up seconds and versions.
- ``{"op": "sweep", "engines": [name, ...], "prompts": [[ids], ...], "batches": [B, ...], "new_tokens": int,
  "repeats": int}``: for each batch B, the first B prompts (in turn) generated together, greedy, ``new_tokens`` each
  (end-of-text ignored), ``repeats`` times, the engines taking turns within each repeat (one warm-up each first).
  Answers per engine and batch every repeat's wall seconds, the token ids of the first repeat, and the
  speculative-decoding lines of vLLM's Prometheus registry before and after that batch, as its /metrics would
  print them (the registry is one for the process: sweep one speculative engine at a time to read them). With
  ``"prefill": true``, each repeat also generates one token of the same batch with every engine, in turn, and
  answers those seconds as "prefill_seconds" (the prompts' prefill and the first token: what a longer generation
  spends before it decodes; the counters then include those runs' drafts too).
- ``{"op": "drop", "name": str}`` frees an engine; ``{"op": "exit"}`` ends the worker.

Imports vLLM and the standard library only. specdec/engines/vllm_client.py drives it from the notebook.
"""

from __future__ import annotations

import gc
import json
import os
import sys
import time


def metrics_text():
    """The speculative-decoding lines of vLLM's Prometheus registry, as its /metrics would print them."""
    from prometheus_client import REGISTRY, generate_latest

    return "\n".join(line for line in generate_latest(REGISTRY).decode().splitlines() if "spec_decode" in line)


class Worker:
    def __init__(self):
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # one process: nothing left behind
        os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")
        import torch
        import vllm

        self.torch, self.vllm, self.engines = torch, vllm, {}

    def engine(self, req):
        from vllm import LLM

        self.torch.set_num_threads(int(req.get("threads", 2)))
        spec = None
        if req.get("draft"):
            spec = {"method": "draft_model", "model": req["draft"], "num_speculative_tokens": int(req["k"])}
            if req.get("schedule"):
                spec["num_speculative_tokens_per_batch_size"] = [tuple(int(x) for x in e) for e in req["schedule"]]
        t0 = time.perf_counter()
        self.engines[req["name"]] = LLM(
            model=req["target"],
            tokenizer=req["target"],
            dtype=req.get("dtype", "float32"),
            enforce_eager=True,
            max_model_len=int(req.get("max_model_len", 512)),
            max_num_seqs=int(req["max_num_seqs"]),
            speculative_config=spec,
            seed=0,
            disable_log_stats=False,
            enable_prefix_caching=False,
            kv_cache_memory_bytes=int(req.get("kv_cache_bytes", 128 << 20)),
        )
        return {
            "startup_s": time.perf_counter() - t0,
            "vllm": self.vllm.__version__,
            "torch": self.torch.__version__,
            "threads": self.torch.get_num_threads(),
            "spec": spec,
        }

    def sweep(self, req):
        """Every engine named in req["engines"] at every batch, the engines taking turns within each repeat."""
        from vllm import SamplingParams

        params = SamplingParams(temperature=0.0, max_tokens=int(req["new_tokens"]), ignore_eos=True)
        prompts = [{"prompt_token_ids": [int(t) for t in p]} for p in req["prompts"]]
        names = list(req["engines"])
        for name in names:
            self.engines[name].generate(prompts[:1], params, use_tqdm=False)  # warm-up
        out = {name: {} for name in names}
        one = SamplingParams(temperature=0.0, max_tokens=1, ignore_eos=True)
        prefill = bool(req.get("prefill", False))
        for B in req["batches"]:
            batch = [prompts[i % len(prompts)] for i in range(int(B))]
            before = metrics_text()
            for name in names:
                out[name][str(B)] = {"seconds": [], "tokens": None, "metrics_before": before}
                if prefill:
                    out[name][str(B)]["prefill_seconds"] = []
            for _ in range(int(req.get("repeats", 1))):
                for name in names:
                    t = time.perf_counter()
                    outs = self.engines[name].generate(batch, params, use_tqdm=False)
                    out[name][str(B)]["seconds"].append(time.perf_counter() - t)
                    if out[name][str(B)]["tokens"] is None:
                        out[name][str(B)]["tokens"] = [list(o.outputs[0].token_ids) for o in outs]
                for name in names if prefill else ():
                    t = time.perf_counter()
                    self.engines[name].generate(batch, one, use_tqdm=False)
                    out[name][str(B)]["prefill_seconds"].append(time.perf_counter() - t)
            after = metrics_text()
            for name in names:
                out[name][str(B)]["metrics_after"] = after
        return out

    def drop(self, req):
        self.engines.pop(req["name"], None)
        gc.collect()
        return {}


def main():
    reply = sys.stdout
    sys.stdout = sys.stderr  # vLLM's own prints must not mix with the answers
    worker = Worker()
    print(json.dumps({"ready": True}), file=reply, flush=True)
    for line in sys.stdin:
        req = json.loads(line)
        if req.get("op") == "exit":
            break
        try:
            ans = {"ok": getattr(worker, req["op"])(req)}
        except Exception as e:  # the notebook shows it in one line
            ans = {"error": f"{type(e).__name__}: {e}"}
        print(json.dumps(ans), file=reply, flush=True)
    sys.stderr.flush()
    os._exit(0)  # vLLM's own teardown takes seconds and holds nothing this worker needs to keep


if __name__ == "__main__":
    sys.exit(main())
