"""specdec.core.moe_twin (notebook 12's mixture-of-experts twin of the course's target): the same tokens as the dense
target, a cost that follows the routing (distinct experts per pass, separate weights per expert), batches that
decode as their rows do alone, and bad input named."""

import pytest
import torch

from specdec.core.decoding import greedy_generate, heldout_prompts
from specdec.core.lean import LeanCache
from specdec.core.models import heldout_texts
from specdec.core.moe_twin import moe_twin

pytestmark = pytest.mark.usefixtures("one_thread")


def _prompts(tokenizer, n=2, tokens=24):
    return [
        p
        for d in ("code", "prose", "json")
        for p in heldout_prompts(tokenizer, heldout_texts(d), n, prompt_tokens=tokens, seed=5)
    ]


@pytest.mark.parametrize("experts, per_token", [(8, 2), (16, 4), (4, 1), (1, 1)])
def test_the_twins_greedy_tokens_equal_the_dense_targets(pair, experts, per_token):
    target, _, tokenizer = pair
    twin = moe_twin(target, experts, per_token, 1024, seed=experts)
    routed = set()
    for prompt in _prompts(tokenizer):
        with torch.no_grad():
            want, got = target(prompt).logits[0], twin(prompt).logits[0]
        assert torch.allclose(got, want, atol=1e-4, rtol=1e-4), (experts, per_token, (got - want).abs().max())
        assert greedy_generate(twin, prompt, 24).tolist() == greedy_generate(target, prompt, 24).tolist()
        twin(prompt)
        routed.add(tuple(twin.experts_read))
    # a prompt of 24 tokens reads more than one token's experts (and never more than there are)
    assert all(per_token <= n <= experts for reads in routed for n in reads), routed
    if experts > per_token:
        assert any(n > per_token for reads in routed for n in reads), routed


def test_a_pass_reads_the_distinct_experts_its_tokens_chose(pair):
    target, _, _ = pair
    twin = moe_twin(target, 8, 2, 768, seed=1)
    cache = twin.new_cache()
    twin(torch.arange(10, 30).view(1, -1), cache=cache)
    twin(torch.tensor([[7]]), cache=cache)
    assert twin.experts_read == [2] * 4  # one token: its r experts in every layer
    h = torch.randn(40, 256)
    for L in twin.layers:  # the count is the router's distinct choices
        read_before = list(twin.experts_read)
        twin.experts_read = []
        twin._moe(h, L)
        want = len(set(torch.topk(torch.nn.functional.linear(h, L.router), 2, dim=-1).indices.reshape(-1).tolist()))
        assert twin.experts_read == [want], (twin.experts_read, want)
        twin.experts_read = read_before
    # each expert is its own weights (reading two reads twice the bytes), holding the target's MLP zero-padded
    ptrs = {t.data_ptr() for L in twin.layers for pair_ in L.experts for t in pair_}
    assert len(ptrs) == 2 * 8 * 4
    gate_up, down = twin.layers[0].experts[3]
    assert torch.equal(gate_up[:688], target.model.layers[0].mlp.gate_proj.weight)
    assert torch.equal(gate_up[768 : 768 + 688], target.model.layers[0].mlp.up_proj.weight)
    assert not gate_up[688:768].any() and not down[:, 688:].any()
    assert twin.expert_megabytes() == pytest.approx(3 * 256 * 768 * 4 / 1e6)


def test_a_verify_pass_and_a_batch_give_the_logits_of_their_tokens_one_by_one(pair):
    target, _, tokenizer = pair
    twin = moe_twin(target, 8, 2, 768, seed=2)
    prompts = _prompts(tokenizer, n=1, tokens=16)[:2]
    ids = torch.cat(prompts)  # (2, 16)
    batched = twin(ids).logits
    for b in range(2):
        alone = twin(ids[b : b + 1]).logits[0]
        assert torch.allclose(batched[b], alone, atol=1e-4, rtol=1e-4)
    cache = twin.new_cache()
    twin(prompts[0][:, :10], cache=cache)
    verify = twin(prompts[0][:, 10:], cache=cache).logits[0]  # six tokens at once, after 10 cached
    cache.crop(10)
    assert cache.get_seq_length() == 10
    one = torch.cat([twin(prompts[0][:, i : i + 1], cache=cache).logits[0] for i in range(10, 16)])
    assert torch.allclose(verify, one, atol=1e-4, rtol=1e-4), (verify - one).abs().max()


def test_bf16_twin_decodes_as_its_dense_twin(pair):
    """In bf16 the twin and the dense target of the same code (one expert) are the same model up to rounding: their
    greedy tokens agree on held-out prompts (the rounding differs, as a real MoE's does from its dense twin's)."""
    target, _, tokenizer = pair
    twin = moe_twin(target, 8, 2, 1024, dtype=torch.bfloat16, seed=3)
    dense = moe_twin(target, 1, 1, 2048, dtype=torch.bfloat16)
    same = [
        greedy_generate(twin, p, 16).tolist() == greedy_generate(dense, p, 16).tolist() for p in _prompts(tokenizer)
    ]
    assert sum(same) >= len(same) - 1, same
    assert twin.lm_head.dtype == torch.bfloat16 and twin.layers[1].experts[5][1].dtype == torch.bfloat16


def test_bad_input_is_named(pair):
    target, _, _ = pair
    for kwargs, name in [
        (dict(experts=0, per_token=1, width=1024), "experts"),
        (dict(experts=8, per_token=3, width=1024), "per_token"),
        (dict(experts=2, per_token=4, width=1024), "per_token"),
        (dict(experts=8, per_token=2, width=100), "width"),
        (dict(experts=8.0, per_token=2, width=1024), "experts"),
    ]:
        with pytest.raises(ValueError, match=name):
            moe_twin(target, **kwargs)
    twin = moe_twin(target, 2, 1, 688)
    with pytest.raises(ValueError, match="batch"):
        twin.new_cache(0)
    with pytest.raises(ValueError, match="LeanCache for batch 2"):
        twin(torch.zeros(2, 3, dtype=torch.long), cache=twin.new_cache(1))
    assert isinstance(twin.new_cache(3), LeanCache) and twin.new_cache(3).keys[0].shape[0] == 3
