"""Unit tests of specdec.core.decoding: the plain decoder and the plumbing the notebooks build on."""

import pytest
import torch

from specdec.core.decoding import (
    ForwardCounter,
    count_params,
    feed,
    forward_step,
    greedy_generate,
    heldout_prompts,
    new_cache,
    plain_generate,
    probs_from_logits,
    sample,
    tiny_llama,
)
from specdec.measure.timing import median_seconds


@pytest.fixture(scope="module")
def model():
    return tiny_llama(vocab_size=97, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, seed=3)


def test_probs_from_logits_is_one_hot_at_temperature_zero_and_softmax_otherwise():
    logits = torch.tensor([[1.0, 3.0, 2.0], [5.0, 5.0, 0.0]])
    assert probs_from_logits(logits, 0.0).tolist() == [[0, 1, 0], [1, 0, 0]]  # ties: first index, like argmax
    assert torch.allclose(probs_from_logits(logits, 2.0), torch.softmax(logits / 2.0, dim=-1))
    with pytest.raises(ValueError, match="temperature"):
        probs_from_logits(logits, -1.0)


def test_sample_returns_the_certain_token_and_respects_the_generator():
    assert sample(torch.tensor([[0.0, 0.0, 1.0]])).tolist() == [2]
    probs = torch.full((5, 7), 1 / 7)
    a = sample(probs, torch.Generator().manual_seed(1))
    b = sample(probs, torch.Generator().manual_seed(1))
    assert a.shape == (5,) and a.tolist() == b.tolist()


def test_feed_runs_only_uncached_tokens_and_resumes_after_a_crop(model):
    ids = torch.randint(0, 97, (1, 10), generator=torch.Generator().manual_seed(0))
    full = model(ids).logits[0]
    cache = new_cache(model)
    assert feed(model, cache, ids[:, :6]).shape == (6, 97)
    got = feed(model, cache, ids)  # the last 4 only
    assert got.shape == (4, 97) and cache.get_seq_length() == 10
    assert torch.allclose(got, full[6:], atol=1e-5)
    cache.crop(-3)
    assert cache.get_seq_length() == 7
    assert torch.allclose(feed(model, cache, ids), full[7:], atol=1e-5)
    with pytest.raises(ValueError, match="nothing to feed"):
        feed(model, cache, ids)


def test_greedy_generate_matches_uncached_argmax_decoding(model):
    ids = torch.tensor([[5, 17, 3]])
    out = greedy_generate(model, ids, 8)
    assert out.shape == (1, 11) and out[:, :3].tolist() == ids.tolist()
    seq = ids
    for _ in range(8):
        seq = torch.cat([seq, model(seq).logits[:, -1].argmax(-1, keepdim=True)], dim=1)
    assert out.tolist() == seq.tolist()


def test_plain_generate_samples_reproducibly_and_checks_its_arguments(model):
    ids = torch.tensor([[1, 2]])
    a = plain_generate(model, ids, 6, temperature=1.0, generator=torch.Generator().manual_seed(4))
    b = plain_generate(model, ids, 6, temperature=1.0, generator=torch.Generator().manual_seed(4))
    assert a.tolist() == b.tolist() and a.shape == (1, 8)
    with pytest.raises(ValueError, match="max_new_tokens"):
        plain_generate(model, ids, 0)
    with pytest.raises(ValueError, match="input_ids"):
        plain_generate(model, ids[0], 3)


def test_forward_counter_counts_calls_and_tokens(model):
    with ForwardCounter(model) as calls:
        greedy_generate(model, torch.tensor([[1, 2, 3, 4]]), 5)
    assert calls.calls == 5 and calls.tokens == 4 + 4  # prefill of 4, then 4 single tokens
    assert calls.seconds > 0
    greedy_generate(model, torch.tensor([[1]]), 2)
    assert calls.calls == 5, "the hook is removed on exit"


def test_tiny_llama_is_reproducible_and_sized_as_asked():
    a = tiny_llama(vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, seed=7)
    b = tiny_llama(vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, seed=7)
    assert all(torch.equal(x, y) for x, y in zip(a.parameters(), b.parameters()))
    assert count_params(a) == 2 * 50 * 16 + (4 * 16 * 16 + 3 * 16 * 64 + 2 * 16) + 16
    assert not a.training


def test_a_forward_step_times_as_a_positive_number_and_checks_its_width(model):
    assert median_seconds(forward_step(model, 3, context=8), repeats=2, warmup=1) > 0
    with pytest.raises(ValueError, match="width"):
        forward_step(model, 0)


class _ToyTokenizer:
    def __call__(self, text):
        return {"input_ids": [ord(ch) % 50 for ch in text]}


def test_heldout_prompts_cuts_seeded_windows():
    texts = ["abcdefghijklmnopqrstuvwxyz" * 3, "short"]
    a = heldout_prompts(_ToyTokenizer(), texts, 4, prompt_tokens=10, seed=1)
    b = heldout_prompts(_ToyTokenizer(), texts, 4, prompt_tokens=10, seed=1)
    assert len(a) == 4 and all(p.shape == (1, 10) and p.dtype == torch.long for p in a)
    assert [p.tolist() for p in a] == [p.tolist() for p in b]
    with pytest.raises(ValueError, match="prompt_tokens"):
        heldout_prompts(_ToyTokenizer(), ["short"], 1, prompt_tokens=10)


def test_sample_follows_the_distribution_and_never_draws_a_zero():
    probs = torch.tensor([0.5, 0.0, 0.3, 0.2, 0.0])
    draws = sample(probs.expand(20000, 5), torch.Generator().manual_seed(0))
    freq = torch.bincount(draws, minlength=5).float() / 20000
    assert freq[1] == 0 and freq[4] == 0
    assert (freq - probs).abs().max() < 0.02
    assert sample(probs).dim() == 0


def test_forward_step_keeps_the_context_length(model):
    step = forward_step(model, 4, context=6)
    step()
    step()  # would fail on a cache that grew past what crop removes
    with pytest.raises(ValueError, match="context"):
        forward_step(model, 1, context=0)


def test_forward_step_runs_a_batch_and_keeps_every_row_at_its_context(model):
    """batch B: B rows of `width` tokens after `context` each; the cache is back at `context` after every call."""
    from specdec.core.lean import LeanLlama
    from specdec.core.moe_twin import moe_twin

    for m, batch in (
        (model, 3),
        (moe_twin(model, 4, 2, 2 * model.config.intermediate_size, max_len=32), 3),
        (model, 1),
    ):
        seen = []
        original = m.forward

        def spy(input_ids, *args, **kwargs):
            seen.append((tuple(input_ids.shape), kwargs["cache"].get_seq_length()))
            return original(input_ids, *args, **kwargs)

        m.forward = spy
        try:
            step = forward_step(m, 4, context=6, batch=batch)
            step()
            step()
        finally:
            del m.forward
        assert seen == [((batch, 6), 0), ((batch, 4), 6), ((batch, 4), 6)], seen  # (rows, width), cached before
    for bad in (0, 1.5, True):
        with pytest.raises(ValueError, match="batch"):
            forward_step(model, 1, context=4, batch=bad)
    with pytest.raises(ValueError, match="batch must be 1 for LeanLlama"):  # its cache holds one sequence
        forward_step(LeanLlama(model, max_len=16), 1, context=4, batch=2)
