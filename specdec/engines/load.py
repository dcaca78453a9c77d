"""A bounded Poisson load on an OpenAI-compatible server on this machine (notebook 11), through OpenAI's own
Python client, streaming.

``poisson_load(url, prompts, rate, n_requests, max_tokens)`` sends ``n_requests`` completions whose arrival times
are a Poisson process of ``rate`` requests per second (exponential gaps, a fixed seed), each from its own thread,
and records for every request the time it was sent and the time of every streamed chunk with the number of tokens
that chunk carried. Nothing else is computed here: the notebook turns the record into TTFT, TPOT and goodput.

Bounded in count (``n_requests``) and in time (``time_limit`` for the whole load; a request still running then is
cut and marked ``"error"``), and only ever aimed at 127.0.0.1 (any other host raises ValueError).
"""
from __future__ import annotations

import threading
import time
from urllib.parse import urlparse

import numpy as np

LOOPBACK = {"127.0.0.1", "localhost", "::1"}


def arrival_times(rate: float, n_requests: int, seed: int = 0) -> np.ndarray:
    """Seconds after the start at which each request is sent: a Poisson process (exponential gaps, mean 1 / rate),
    the first request at 0."""
    if not rate > 0:
        raise ValueError(f"rate must be > 0 requests per second, got {rate}")
    if int(n_requests) != n_requests or n_requests < 1:
        raise ValueError(f"n_requests must be an integer >= 1, got {n_requests}")
    gaps = np.random.default_rng(seed).exponential(1.0 / rate, int(n_requests))
    return np.concatenate([[0.0], np.cumsum(gaps[1:])])


def _client(url, timeout):
    from openai import OpenAI

    host = urlparse(url).hostname
    if host not in LOOPBACK:
        raise ValueError(f"url must point at this machine (127.0.0.1), got {url!r}")
    return OpenAI(base_url=url.rstrip("/") + "/v1", api_key="not-needed", timeout=timeout, max_retries=0)


def _record(sent, error=None):
    return {"sent": sent, "chunks": [], "draft_n": 0, "draft_n_accepted": 0, "error": error}


def stream_one(client, prompt_ids, max_tokens, t0, deadline, extra=None):
    """One streamed completion: {"sent": s, "chunks": [[s, n_tokens], ...], "draft_n", "draft_n_accepted", "error"},
    times in seconds after t0. llama-server reports the tokens generated so far with every chunk
    (timings_per_token), so a chunk's token count is exact even where one chunk carries several tokens."""
    rec = _record(time.perf_counter() - t0)
    body = {"ignore_eos": True, "cache_prompt": False, "timings_per_token": True, "top_k": 1, **(extra or {})}
    done = 0
    try:
        stream = client.completions.create(model="course", prompt=[int(t) for t in prompt_ids], max_tokens=max_tokens,
                                           temperature=0.0, stream=True, extra_body=body)
        for chunk in stream:
            now = time.perf_counter() - t0
            timings = (chunk.model_extra or {}).get("timings") or {}
            total = int(timings.get("predicted_n", done + (1 if chunk.choices and chunk.choices[0].text else 0)))
            rec["chunks"].append([now, total - done])
            done = max(done, total)
            rec["draft_n"] = int(timings.get("draft_n", rec["draft_n"]))
            rec["draft_n_accepted"] = int(timings.get("draft_n_accepted", rec["draft_n_accepted"]))
            if time.perf_counter() > deadline:
                stream.close()
                rec["error"] = "cut at the load's time limit"
                break
    except Exception as e:                      # a failed request is recorded, never retried
        rec["error"] = f"{type(e).__name__}: {e}"
    return rec


def poisson_load(url, prompts, rate, n_requests, max_tokens, seed=0, time_limit=60.0, extra=None):
    """Send n_requests streamed completions at Poisson arrival times; returns one record per request, in arrival
    order (see stream_one). prompts: token-id lists, used in turn."""
    if not prompts:
        raise ValueError("prompts must hold at least one prompt")
    if not time_limit > 0:
        raise ValueError(f"time_limit must be > 0 seconds, got {time_limit}")
    client = _client(url, timeout=time_limit)
    offsets = arrival_times(rate, n_requests, seed)
    records = [None] * len(offsets)
    t0 = time.perf_counter()
    deadline = t0 + time_limit

    def run(i):
        wait = t0 + offsets[i] - time.perf_counter()
        if wait > 0:
            time.sleep(wait)
        if time.perf_counter() > deadline:
            records[i] = _record(time.perf_counter() - t0, "not sent: the load's time limit had passed")
            return
        records[i] = stream_one(client, prompts[i % len(prompts)], max_tokens, t0, deadline, extra)

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(len(offsets))]
    for th in threads:
        th.start()
    for th in threads:
        th.join(max(0.0, deadline - time.perf_counter()) + 5.0)
    client.close()
    return [r if r is not None else _record(float(offsets[i]), "no answer within the load's time limit")
            for i, r in enumerate(records)]
