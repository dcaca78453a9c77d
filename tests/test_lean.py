"""specdec.core.lean (the lean forward of notebook 09), specdec.measure.rounds (plain decoding and round timings) and
specdec.measure.profiling (a round's time by term): the same tokens as transformers, caches that roll back like
DynamicCache, and attributions that add up."""

import copy
import random

import pytest
import torch

from specdec.core.decoding import ForwardCounter, forward_step, greedy_generate, heldout_prompts, new_cache, tiny_llama
from specdec.core.lean import LeanCache, LeanLlama
from specdec.core.models import heldout_texts, padded_target
from specdec.measure import kernels
from specdec.measure.profiling import TERMS, attribute, profile_rounds, step_parts, time_step_parts
from specdec.measure.rounds import measure_rounds, plain_decode, timed_decode

pytestmark = pytest.mark.usefixtures("one_thread")


def _prompts(tokenizer, n=2, tokens=24):
    return [
        p
        for d in ("code", "prose", "json")
        for p in heldout_prompts(tokenizer, heldout_texts(d), n, prompt_tokens=tokens, seed=4)
    ]


@pytest.mark.parametrize("which", ["target", "draft"])
def test_lean_logits_and_greedy_tokens_equal_transformers_on_the_shipped_pair(pair, which):
    target, draft, tokenizer = pair
    model = target if which == "target" else draft
    lean = LeanLlama(model)
    for prompt in _prompts(tokenizer):
        with torch.no_grad():
            want = model(prompt).logits[0]
            got = lean(prompt).logits[0]
        assert torch.allclose(got, want, atol=1e-5, rtol=1e-5), (which, (got - want).abs().max())
        assert greedy_generate(lean, prompt, 20).tolist() == greedy_generate(model, prompt, 20).tolist()


@pytest.mark.parametrize("path", kernels.path_names())
def test_lean_decodes_every_kernel_path_as_transformers_does(pair, path):
    """bf16 (its norms in fp32 as transformers does), fp32 and the int8 modules, which the lean forward calls as they
    are: greedy tokens equal transformers' on the same converted, padded weights."""
    target, _, tokenizer = pair
    big = kernels.convert(padded_target(target, 1024), path, inplace=True)
    lean = LeanLlama(big)
    assert (lean.layers[0].qkv is None) == path.startswith("int8")
    for prompt in _prompts(tokenizer, n=1):
        assert plain_decode(lean, prompt, 16)[0].tolist() == plain_decode(big, prompt, 16)[0].tolist(), path


def test_lean_cache_rolls_back_like_dynamic_cache_and_positions_follow(pair):
    """After a verify of 5 tokens, cropping 3 and feeding 2 new ones gives the logits of feeding the kept
    sequence from scratch (the crop only sets the length; the next step overwrites what lay beyond)."""
    target, _, tokenizer = pair
    lean = LeanLlama(target)
    prompt = _prompts(tokenizer, n=1)[0]
    cache = new_cache(lean)
    assert isinstance(cache, LeanCache) and cache.get_seq_length() == 0
    lean(prompt, cache=cache)
    extra = torch.tensor([[5, 6, 7, 8, 9]])
    lean(extra, cache=cache)
    assert cache.get_seq_length() == prompt.shape[1] + 5
    cache.crop(-3)
    assert cache.get_seq_length() == prompt.shape[1] + 2
    last = lean(torch.tensor([[11, 12]]), cache=cache).logits[0]
    whole = torch.cat([prompt, torch.tensor([[5, 6, 11, 12]])], dim=1)
    with torch.no_grad():
        want = target(whole).logits[0, -2:]
    assert torch.allclose(last, want, atol=1e-5, rtol=1e-5)
    cache.crop(4)
    assert cache.get_seq_length() == 4
    with pytest.raises(ValueError, match="max_length"):
        cache.crop(-10)


def test_lean_refuses_what_it_cannot_run(pair):
    target, _, _ = pair
    lean = LeanLlama(target, max_len=8)
    with pytest.raises(ValueError, match="input_ids"):
        lean(torch.zeros(1, 9, dtype=torch.long))
    with pytest.raises(ValueError, match="cache"):
        lean(torch.zeros(1, 2, dtype=torch.long), cache=object())
    gpt = copy.deepcopy(target)
    gpt.config.model_type = "gpt2"
    with pytest.raises(ValueError, match="model"):
        LeanLlama(gpt)


def test_the_lean_model_is_a_module_whose_forwards_hooks_see(pair):
    target, _, tokenizer = pair
    lean = LeanLlama(target)
    with ForwardCounter(lean) as calls:
        plain_decode(lean, _prompts(tokenizer, n=1)[0], 5)
    assert calls.calls == 6 and calls.tokens == 23 + 5  # a prefill of T - 1 tokens, then one per token
    step = forward_step(lean, 3, context=16)
    step()
    step()  # the cache is cropped back between calls


@pytest.mark.parametrize("path", ["fp32", "int8-fbgemm"])
def test_step_parts_read_every_matrix_once_and_leave_the_cache_as_it_was(pair, path):
    """The products of one step read every matrix of the model once (fused or as int8 modules: the same MB as the
    model's weights less the embedding and the norms); a step rolls its cache back, so it gives the same logits
    each call; the split's parts add up to the step; a context the cache cannot hold is refused."""
    target, _, _ = pair
    big = kernels.convert(padded_target(target, 1024), path, inplace=True)
    lean = LeanLlama(big, max_len=64)
    step, products, megabytes = step_parts(lean, context=8)
    assert list(megabytes) == ["q/k/v", "o", "gate/up", "down", "lm head"]
    emb = big.model.embed_tokens.weight
    norms = sum(p.numel() * p.element_size() for name, p in big.named_parameters() if "norm" in name) / 1e6
    tied = big.lm_head.weight.data_ptr() == emb.data_ptr()  # counted once in the model, read twice by a step
    want = kernels.weight_megabytes(big) - norms - (0 if tied else emb.numel() * emb.element_size() / 1e6)
    assert sum(megabytes.values()) == pytest.approx(want, rel=1e-6)
    seconds = products()
    assert set(seconds) == set(megabytes) and all(s > 0 for s in seconds.values())
    logits = []
    hook = lean.register_forward_hook(lambda m, a, out: logits.append(out.logits.clone()))
    step()
    step()
    hook.remove()
    assert len(logits) == 2 and torch.equal(logits[0], logits[1])
    split, mb = time_step_parts(lean, repeats=3, warmup=1, context=8)
    assert mb == megabytes
    assert set(split) == {"step", "products", "outside", *mb} and split["step"] > 0 and split["products"] > 0
    assert split["outside"] == pytest.approx(split["step"] - split["products"])
    for bad in (0, 64, 2.0):
        with pytest.raises(ValueError, match="context"):
            step_parts(lean, context=bad)
    with pytest.raises(ValueError, match="repeats"):
        time_step_parts(lean, repeats=0)


def test_timed_decode_times_propose_and_the_forwards_after_the_prefill(pair):
    """The parts timed by timed_decode lie inside the loop's own seconds, and the prefill forward is not counted."""
    import nbformat
    from nbhelpers import solution_path

    import specdec.core.decoding as dec

    ns = {name: getattr(dec, name) for name in ("feed", "new_cache", "probs_from_logits", "sample")}
    ns.update(torch=torch, F=torch.nn.functional, time=__import__("time"), verify=None)
    nb = nbformat.read(str(solution_path("05_acceptance_in_practice")), as_version=4)
    exec(
        next(c.source for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "given_decoding_loop"), ns
    )
    target, draft, tokenizer = pair
    prompt = _prompts(tokenizer, n=1)[0]
    tokens, stats = timed_decode(ns["speculative_decode"], target, ns["DraftModelProposer"](draft), prompt, 12, 3)
    assert tokens.tolist() == greedy_generate(target, prompt, 12).tolist()
    assert 0 < stats["propose_seconds"] and 0 < stats["verify_seconds"]
    assert stats["propose_seconds"] + stats["verify_seconds"] <= stats["seconds"]
    assert not target._forward_hooks and not target._forward_pre_hooks


def test_plain_decode_is_greedy_decoding_and_times_the_decoding_only(pair):
    target, _, tokenizer = pair
    for prompt in _prompts(tokenizer, n=1):
        tokens, seconds = plain_decode(target, prompt, 12)
        assert tokens.tolist() == greedy_generate(target, prompt, 12).tolist()
        assert seconds > 0
    one = torch.tensor([[3]])
    assert plain_decode(target, one, 4)[0].tolist() == greedy_generate(target, one, 4).tolist()
    with pytest.raises(ValueError, match="max_new_tokens"):
        plain_decode(target, one, 0)


def test_measure_rounds_interleaves_and_takes_medians():
    """A fake decoder whose seconds are known: the medians, per-round times, spread and counts come out of it."""
    order = []

    def decode(prompt, k):
        order.append(("spec", k))
        return None, {"seconds": 0.01 * k, "rounds": 5, "drafted": 5 * k, "per_round": [(k, 1)] * 5}

    def plain(prompt):
        order.append(("plain", None))
        return None, 0.02

    got = measure_rounds(decode, plain, ["a", "b"], [1, 4], max_new_tokens=10, repeats=3)
    # one untimed warm-up pass over the first prompt, then each repeat: prompt by prompt, plain then every k
    assert order[:3] == [("plain", None), ("spec", 1), ("spec", 4)]
    assert order[3:9] == [("plain", None), ("spec", 1), ("spec", 4)] * 2
    assert len(order) == 3 + 3 * 6
    assert got["token_seconds"] == pytest.approx(0.04 / 20)
    assert got["round_seconds"][4] == pytest.approx(0.08 / 10, rel=1e-6)
    assert got["rounds"] == {1: 10, 4: 10} and got["per_round"][4] == [(4, 1)] * 10
    assert got["spread"]["plain"] == pytest.approx((0.04, 0.04, 0.04))
    assert got["profile"][4] == {
        "rounds": 10,
        "drafted": 40,
        "propose_seconds": 0.0,
        "verify_seconds": 0.0,
        "total_seconds": pytest.approx(0.08),
    }
    with pytest.raises(ValueError, match="ks"):
        measure_rounds(decode, plain, ["a"], [0], 10)
    with pytest.raises(ValueError, match="warmup"):
        measure_rounds(decode, plain, ["a"], [1], 10, warmup=-1)
    with pytest.raises(ValueError, match="prompts"):
        measure_rounds(decode, plain, [], [1], 10)


def test_measure_rounds_of_named_lists_takes_their_prompts_in_turn_and_keeps_them_apart():
    """{"calibration": [...], "test": [...]} with a decoder each: one run, the prompts alternating between the lists
    (then the longer list's rest), and each list's result computed from its own prompts only."""
    order = []

    def decoder(name, cost):
        def decode(prompt, k):
            order.append((name, prompt, k))
            return None, {"seconds": cost * k, "rounds": 2, "drafted": 2 * k, "per_round": [(k, k)] * 2}

        return decode

    def plain(prompt):
        order.append(("plain", prompt, None))
        return None, 0.5 if prompt.startswith("c") else 0.25

    got = measure_rounds(
        {"calibration": decoder("cal", 1.0), "test": decoder("test", 2.0)},
        plain,
        {"calibration": ["c1", "c2"], "test": ["t1", "t2", "t3"]},
        [1, 2],
        max_new_tokens=4,
        repeats=1,
        warmup=0,
    )
    assert [p for p, _, k in ((o[1], o[0], o[2]) for o in order) if k is None] == ["c1", "t1", "c2", "t2", "t3"]
    assert order[:3] == [("plain", "c1", None), ("cal", "c1", 1), ("cal", "c1", 2)]
    assert order[3:6] == [("plain", "t1", None), ("test", "t1", 1), ("test", "t1", 2)]
    assert set(got) == {"calibration", "test"}
    assert got["calibration"]["plain_seconds"] == pytest.approx(1.0) and got["test"]["plain_seconds"] == pytest.approx(
        0.75
    )
    assert got["calibration"]["token_seconds"] == pytest.approx(1.0 / 8)
    assert got["test"]["decode_seconds"] == {1: pytest.approx(6.0), 2: pytest.approx(12.0)}
    assert got["test"]["rounds"] == {1: 6, 2: 6} and got["calibration"]["rounds"] == {1: 4, 2: 4}
    one = measure_rounds(decoder("x", 1.0), plain, {"a": ["c1"], "b": ["t1"]}, [1], 4, repeats=1, warmup=0)
    assert one["a"]["plain_seconds"] == pytest.approx(0.5) and one["b"]["plain_seconds"] == pytest.approx(0.25)
    with pytest.raises(ValueError, match="one per named prompt list"):
        measure_rounds({"a": decoder("x", 1.0)}, plain, {"a": ["c1"], "b": ["t1"]}, [1], 4)
    with pytest.raises(ValueError, match="one per named prompt list"):
        measure_rounds({"a": decoder("x", 1.0)}, plain, ["c1"], [1], 4)
    with pytest.raises(ValueError, match="prompts is empty"):
        measure_rounds(decoder("x", 1.0), plain, {"a": ["c1"], "b": []}, [1], 4)


def test_measure_rounds_profiles_the_median_repeat_as_it_times_plain_decoding():
    """Two repeats: the profile is the mean of the two, as statistics.median takes the plain time's (the faster one
    alone would price rounds below the token time they are divided by); three: the median repeat, whole."""
    times = iter([0.05, 0.03])

    def decode(prompt, k):
        s = next(times)
        return None, {
            "seconds": s,
            "rounds": 2,
            "drafted": 2,
            "per_round": [(1, 1)] * 2,
            "propose_seconds": s / 2,
            "verify_seconds": s / 4,
        }

    got = measure_rounds(decode, lambda pr: (None, 0.01), ["a"], [1], max_new_tokens=4, repeats=2, warmup=0)
    assert got["profile"][1]["total_seconds"] == pytest.approx(0.04)
    assert got["profile"][1]["propose_seconds"] == pytest.approx(0.02)
    assert got["profile"][1]["rounds"] == 2 and type(got["profile"][1]["rounds"]) is int
    times = iter([0.05, 0.02, 0.03])
    got = measure_rounds(decode, lambda pr: (None, 0.01), ["a"], [1], max_new_tokens=4, repeats=3, warmup=0)
    assert got["profile"][1]["total_seconds"] == pytest.approx(0.03)
    assert got["profile"][1]["verify_seconds"] == pytest.approx(0.03 / 4)


class _Event:
    def __init__(self, name, start, end, parent=None):
        self.name, self.cpu_parent = name, parent
        self.time_range = type("R", (), {"start": start, "end": end})()


def test_attribute_sums_top_level_operators_by_term_inside_the_window():
    """Times in microseconds; the window is the last `seconds` ending with the last operator."""
    inner = _Event("aten::mm", 110, 150)
    events = [
        _Event("target forward", 0, 90),  # before the window: the prefill
        _Event("target forward", 100, 200),
        inner,
        _Event("draft forward", 210, 260),
        _Event("aten::softmax", 260, 270),
        _Event("aten::argmax", 270, 275),
        _Event("aten::cat", 280, 290),
        _Event("aten::slice", 290, 292),
    ]
    inner.cpu_parent = events[1]
    got = attribute(events, 200e-6)  # the window is [92, 292] us
    assert set(got) == set(TERMS)
    assert got["target forward"] == pytest.approx(100e-6)
    assert got["draft forwards"] == pytest.approx(50e-6)
    assert got["softmax / sampling"] == pytest.approx(15e-6)
    assert got["cache / tokens"] == pytest.approx(12e-6)
    assert got["rest"] == pytest.approx(200e-6 - 177e-6)
    assert sum(got.values()) == pytest.approx(200e-6)
    with pytest.raises(ValueError, match="seconds"):
        attribute(events, 0)


def test_profile_rounds_marks_both_models_and_adds_up_to_the_wall_clock():
    random.seed(0)
    target = tiny_llama(vocab_size=64, hidden_size=32, num_hidden_layers=2, seed=1)
    draft = tiny_llama(vocab_size=64, hidden_size=16, num_hidden_layers=1, seed=2)
    prompt = torch.randint(0, 64, (1, 8), generator=torch.Generator().manual_seed(0))

    def run():
        import time

        t_cache, d_cache = new_cache(target), new_cache(draft)
        target(prompt, cache=t_cache, use_cache=True)  # a prefill outside the timed span
        t0 = time.perf_counter()
        for _ in range(3):  # three "rounds": two drafts, one verify
            tokens = [draft(prompt[:, -1:], cache=d_cache, use_cache=True).logits[0, -1].argmax() for _ in range(2)]
            target(torch.stack(tokens).view(1, -1), cache=t_cache, use_cache=True)
            torch.cat([prompt, prompt], dim=1)
        return 3, time.perf_counter() - t0

    per_term, per_round, prof = profile_rounds(run, target, draft)
    assert per_term["target forward"] > 0 and per_term["draft forwards"] > 0 and per_term["cache / tokens"] > 0
    assert sum(per_term.values()) == pytest.approx(per_round, rel=1e-6)
    assert not target._forward_hooks and not target._forward_pre_hooks and not draft._forward_hooks
    with pytest.raises(ValueError, match="rounds"):
        profile_rounds(lambda: 3, target)


def test_profiling_writes_nothing_to_stderr_in_a_fresh_process():
    # kineto prints "USDT ... profiler_start" on every profile unless KINETO_LOG_LEVEL quiets it at its first use;
    # in the notebook those lines land in the cell's output
    import os
    import subprocess
    import sys

    code = (
        "import torch\nfrom specdec.measure.profiling import profile_rounds\n"
        "m = torch.nn.Linear(4, 4)\n"
        "def run():\n    m(torch.ones(1, 4))\n    return 1, 1e-3\n"
        "profile_rounds(run, m)\nprofile_rounds(run, m)\nprint('done')\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "KINETO_LOG_LEVEL"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "done"
    assert out.stderr == "", out.stderr


TERMS_EXAMPLE = {"c": 0.08, "c_round": 0.05, "v": {1: 1.05, 2: 1.15, 4: 1.3, 8: 1.5}, "o": 0.02}


def _steady(alpha, k, t):
    return sum(alpha**j for j in range(k + 1)) / (k * t["c"] + t["c_round"] + t["v"][k] + t["o"])


@pytest.mark.parametrize("alpha, k", [(0.5, 2), (0.9, 8), (0.7, 4), (0.0, 4), (1.0, 8)])
def test_generation_speedup_follows_a_simulation_of_the_loops_rounds(alpha, k):
    from specdec.measure.rounds import generation_speedup

    n, t, rng = 20, TERMS_EXAMPLE, random.Random(7)

    def v(m):
        return {1: 1.05, 2: 1.15, 3: 1.225, 4: 1.3, 5: 1.35, 6: 1.4, 7: 1.45, 8: 1.5}[m]

    sims = []
    for _ in range(20000):  # the loop's rule: never draft past what is still needed
        made, cost = 0, 0.0
        while made < n:
            kr = min(k, n - made)
            j = 0
            while j < kr and rng.random() < alpha:
                j += 1
            cost += kr * t["c"] + t["c_round"] + v(kr) + t["o"]
            made += j + 1
        sims.append(cost)
    assert generation_speedup(alpha, k, t, n) == pytest.approx(n / (sum(sims) / len(sims)), rel=0.01)


def test_generation_speedup_limits_and_bad_input():
    from specdec.measure.rounds import generation_speedup

    t = TERMS_EXAMPLE
    assert generation_speedup(0.8, 4, t, 1) == pytest.approx(1 / (t["c"] + t["c_round"] + t["v"][1] + t["o"]))
    for alpha, k in [(0.6, 2), (0.9, 8)]:
        assert generation_speedup(alpha, k, t, 5000) == pytest.approx(_steady(alpha, k, t), rel=0.005)
        assert generation_speedup(alpha, k, t, 20) < _steady(alpha, k, t)  # the short last rounds cost
    from specdec.measure.rounds import generation_tokens_per_round

    assert generation_tokens_per_round(0.9, 8, 5000) == pytest.approx(sum(0.9**j for j in range(9)), rel=0.005)
    assert generation_tokens_per_round(0.9, 8, 20) < sum(0.9**j for j in range(9))
    assert generation_tokens_per_round(1.0, 4, 20) == pytest.approx(20 / 4)  # 5, 5, 5, 5 tokens
    for bad, match in [
        ((1.2, 4, t, 20), "alpha"),
        ((0.5, 0, t, 20), "k"),
        ((0.5, 4, t, 0), "n"),
        ((0.5, 16, t, 20), "k = 16"),
        ((0.5, 4, {"c": 0.1}, 20), "terms"),
        ((0.5, 4, {"c": 0.1, "v": {4: 1.0}, "o": 0.0}, 20), "c_round"),
        ((0.5, 4.0, t, 20), "k"),
    ]:
        with pytest.raises(ValueError, match=match):
            generation_speedup(*bad)


def test_measure_rounds_profiles_full_rounds_only_with_their_own_parts():
    """With per-round times (timed_decode's propose_each and verify_each) the profile at k holds the rounds that
    drafted k tokens, each with its own propose and verify seconds and the rest of a round (the loop's time outside
    both, per round); a short last round, whose verify is cheaper, stays out, and the race's rounds still count it."""

    def decode(prompt, k):
        per_round = [(k, 1), (k, 0), (1, 1)]  # two full rounds, then a short one
        propose, verify = [0.004 * k, 0.004 * k, 0.004], [0.010, 0.010, 0.006]
        rest = 0.003 * 3
        return None, {
            "seconds": sum(propose) + sum(verify) + rest,
            "rounds": 3,
            "drafted": 2 * k + 1,
            "per_round": per_round,
            "propose_seconds": sum(propose),
            "verify_seconds": sum(verify),
            "propose_each": propose,
            "verify_each": verify,
        }

    got = measure_rounds(decode, lambda pr: (None, 0.01), ["a", "b"], [2, 4], max_new_tokens=5, repeats=1, warmup=0)
    p = got["profile"][4]
    assert (p["rounds"], p["drafted"]) == (4, 16)
    assert p["propose_seconds"] == pytest.approx(4 * 0.016) and p["verify_seconds"] == pytest.approx(4 * 0.010)
    assert p["total_seconds"] == pytest.approx(4 * (0.016 + 0.010 + 0.003))
    assert got["rounds"][4] == 6, "the race's rounds: every round, the short ones included"
    assert got["round_seconds"][4] == pytest.approx(2 * (2 * 0.026 + 0.010 + 0.009) / 6)

    def no_full(prompt, k):
        return None, {
            "seconds": 0.01,
            "rounds": 1,
            "drafted": 1,
            "per_round": [(1, 1)],
            "propose_seconds": 0.002,
            "verify_seconds": 0.005,
            "propose_each": [0.002],
            "verify_each": [0.005],
        }

    with pytest.raises(ValueError, match="no round drafted k tokens"):
        measure_rounds(no_full, lambda pr: (None, 0.01), ["a"], [4], max_new_tokens=1, repeats=1, warmup=0)
