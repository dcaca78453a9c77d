"""A bounded Poisson load on an OpenAI-compatible server on this machine (notebook 11), through OpenAI's own
Python client, streaming.

``poisson_load(url, prompts, rate, n_requests, max_tokens)`` sends ``n_requests`` completions whose arrival times
are a Poisson process of ``rate`` requests per second (exponential gaps, a fixed seed), each from its own thread,
and records for every request the time it was sent and the time of every streamed chunk with the number of tokens
that chunk carried. Nothing else is computed here: the notebook turns the record into TTFT, TPOT and goodput.

``busy_costs`` measures what a request costs with 1, 2, ... slots busy, ``service_rate`` and ``load_rates`` set the
rates of a load from it, ``simulate_slots`` simulates the same slots fed with those costs, ``token_times_by_busy``
and ``server_tpot`` take a load apart where the simulation misses.

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
    return {"sent": sent, "chunks": [], "draft_n": 0, "draft_n_accepted": 0, "server": {}, "error": error}


def stream_one(client, prompt_ids, max_tokens, t0, deadline, extra=None):
    """One streamed completion: {"sent": s, "chunks": [[s, n_tokens], ...], "draft_n", "draft_n_accepted", "server",
    "error"}, times in seconds after t0. llama-server reports the tokens generated so far with every chunk
    (timings_per_token), so a chunk's token count is exact even where one chunk carries several tokens; "server"
    keeps the last timings it sent (its own clock: "predicted_ms" from the first generated token to the last,
    "predicted_n", "prompt_ms"), what the request cost inside the server, HTTP and streaming left out."""
    rec = _record(time.perf_counter() - t0)
    body = {"ignore_eos": True, "cache_prompt": False, "timings_per_token": True, "top_k": 1, **(extra or {})}
    done = 0
    try:
        stream = client.completions.create(
            model="course",
            prompt=[int(t) for t in prompt_ids],
            max_tokens=max_tokens,
            temperature=0.0,
            stream=True,
            extra_body=body,
        )
        for chunk in stream:
            now = time.perf_counter() - t0
            timings = (chunk.model_extra or {}).get("timings") or {}
            total = int(timings.get("predicted_n", done + (1 if chunk.choices and chunk.choices[0].text else 0)))
            rec["chunks"].append([now, total - done])
            done = max(done, total)
            rec["draft_n"] = int(timings.get("draft_n", rec["draft_n"]))
            rec["draft_n_accepted"] = int(timings.get("draft_n_accepted", rec["draft_n_accepted"]))
            if timings:
                rec["server"] = dict(timings)
            if time.perf_counter() > deadline:
                stream.close()
                rec["error"] = "cut at the load's time limit"
                break
    except Exception as e:  # a failed request is recorded, never retried
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
    return [
        r if r is not None else _record(float(offsets[i]), "no answer within the load's time limit")
        for i, r in enumerate(records)
    ]


def service_rate(burst_seconds, slots):
    """Requests per second a server with `slots` slots completes when every slot is busy: `slots` requests sent
    together took `burst_seconds` (the median latency of such a burst, measured), so slots / burst_seconds."""
    if isinstance(slots, bool) or not isinstance(slots, int) or slots < 1:
        raise ValueError(f"slots must be an integer >= 1, got {slots!r}")
    if not burst_seconds > 0:
        raise ValueError(f"burst_seconds must be > 0, got {burst_seconds!r}")
    return slots / burst_seconds


def load_rates(rate, fractions):
    """The arrival rates of a load test: each fraction of a measured service rate `rate` (requests per second),
    in increasing order; a fraction above 1 is past saturation."""
    if not rate > 0:
        raise ValueError(f"rate must be > 0 requests per second, got {rate!r}")
    fractions = list(fractions)
    if not fractions or any(not f > 0 for f in fractions) or fractions != sorted(set(fractions)):
        raise ValueError(f"fractions must be increasing numbers > 0, got {fractions!r}")
    return tuple(float(rate * f) for f in fractions)


def _token_chunks(record):
    # [(seconds, tokens)] of the chunks carrying a token, for a request that finished with 2 tokens or more; else None
    times = [(float(t), int(n)) for t, n in record.get("chunks", []) if n > 0]
    if record.get("error") is not None or sum(n for _, n in times) < 2:
        return None
    return times


def token_times_by_busy(records, slots):
    """What a token cost under a load, by how many requests were decoding at the time: the residual a slot
    simulation fed with bursts (every request starting together) cannot see.

    records: poisson_load's records (failed ones and those with fewer than 2 tokens are left out). Every gap
    between two token-carrying chunks of a request is one observation: its seconds and the tokens its later chunk
    carried, counted at the number of requests decoding (between their first and last token) at the gap's middle,
    at most `slots`; a gap in which another request got its first token also ran that request's prefill.
    Returns {busy: {"seconds", "tokens", "prefill_seconds", "prefill_tokens"}} (the last two: the gaps with a
    prefill inside), busy from 1 to slots where observed."""
    if isinstance(slots, bool) or not isinstance(slots, int) or slots < 1:
        raise ValueError(f"slots must be an integer >= 1, got {slots!r}")
    decoding = [times for times in map(_token_chunks, records) if times is not None and len(times) >= 2]
    spans = [(times[0][0], times[-1][0]) for times in decoding]
    out = {}
    for i, times in enumerate(decoding):
        for (t0, _), (t1, n) in zip(times, times[1:]):
            mid = (t0 + t1) / 2
            busy = max(1, min(slots, sum(1 for first, last in spans if first <= mid <= last)))
            prefill = any(t0 < first <= t1 for j, (first, _) in enumerate(spans) if j != i)
            row = out.setdefault(busy, {"seconds": 0.0, "tokens": 0, "prefill_seconds": 0.0, "prefill_tokens": 0})
            row["seconds"] += t1 - t0
            row["tokens"] += n
            if prefill:
                row["prefill_seconds"] += t1 - t0
                row["prefill_tokens"] += n
    return dict(sorted(out.items()))


def _decoded(record):
    # (first token time, last token time, tokens) of a finished request, or None
    times = _token_chunks(record)
    return None if times is None else (times[0][0], times[-1][0], sum(n for _, n in times))


def busy_costs(url, prompts, busy_levels, bursts, max_tokens, time_limit=60.0):
    """What a request costs with 1, 2, ... slots busy: for each level B, `bursts` bursts of B requests sent together,
    the prompts moving on with each burst (burst j takes prompts j·B, j·B + 1, ..., cycling), so that every level
    sees every kind of prompt. Returns ({B: {"tpot", "ttft": medians over the bursts' requests, "latency": median
    over the bursts of their median arrival-to-last-token seconds}}, failed requests)."""
    if isinstance(bursts, bool) or not isinstance(bursts, int) or bursts < 1:
        raise ValueError(f"bursts must be an integer >= 1, got {bursts!r}")
    import statistics

    out, failed = {}, 0
    for B in busy_levels:
        tpot, ttft, latency = [], [], []
        for j in range(bursts):
            batch = [prompts[(j * B + i) % len(prompts)] for i in range(B)]
            recs = poisson_load(
                url, batch, rate=1e6, n_requests=B, max_tokens=max_tokens, seed=0, time_limit=time_limit
            )
            done = [(r["sent"], d) for r in recs if (d := _decoded(r)) is not None]
            failed += len(recs) - len(done)
            tpot += [(last - first) / (n - 1) for _, (first, last, n) in done]
            ttft += [first - sent for sent, (first, _, _) in done]
            if done:
                latency.append(statistics.median(last - sent for sent, (_, last, _) in done))
        if not tpot:
            raise RuntimeError(f"no request finished with {B} slots busy ({failed} failed)")
        out[B] = {
            "tpot": statistics.median(tpot),
            "ttft": statistics.median(ttft),
            "latency": statistics.median(latency),
        }
    return out, failed


def server_tpot(records):
    """Each finished request's TPOT on the server's own clock (llama-server's timings: predicted_ms from its first
    generated token to its last, over predicted_n - 1), HTTP and streaming left out."""
    return [
        r["server"]["predicted_ms"] / 1e3 / (r["server"]["predicted_n"] - 1)
        for r in records
        if r.get("error") is None and r.get("server", {}).get("predicted_n", 0) >= 2
    ]


def simulate_slots(arrivals, output_tokens, slots, tpot_by_busy, first_token_s):
    """Continuous batching on `slots` slots with measured times -> a trace for notebook 10's serving_metrics
    (notebook 11's load beside its simulation).

    Each iteration admits waiting requests into free slots (each admission costs `first_token_s`, during which
    nobody decodes), then every busy slot gains one token in the time measured for that many busy slots.

    arrivals: sorted arrival times (s); output_tokens: tokens per request (>= 2); tpot_by_busy: {busy slots:
    seconds per token per sequence}, measured (linear in between, the end values beyond); first_token_s: the
    measured time from admission to the first token.
    """
    busy_points = sorted(tpot_by_busy)

    def per_token(busy):
        return float(np.interp(busy, busy_points, [tpot_by_busy[b] for b in busy_points]))

    n = len(arrivals)
    first, finish, left = np.full(n, np.nan), np.full(n, np.nan), {}
    t, nxt, queue = 0.0, 0, []
    while nxt < n or queue or left:
        while nxt < n and arrivals[nxt] <= t:
            queue.append(nxt)
            nxt += 1
        if not queue and not left:
            t = arrivals[nxt]
            continue
        admitted = [queue.pop(0) for _ in range(min(len(queue), slots - len(left)))]
        if admitted:
            t += first_token_s  # the new prompts' prefill: nobody decodes meanwhile
            for i in admitted:
                first[i], left[i] = t, output_tokens[i] - 1
            continue
        t += per_token(len(left))  # one token for every busy slot
        for i in list(left):
            left[i] -= 1
            if left[i] == 0:
                finish[i] = t
                del left[i]
    return {
        "arrival": list(arrivals),
        "first_token": list(first),
        "finish": list(finish),
        "output_tokens": list(output_tokens),
    }
