"""The bandwidth-bound target of notebook 09 (specdec.core.models.padded_target) and the early-exit draft."""

import pytest
import torch

from specdec.core.decoding import count_params, greedy_generate, heldout_prompts
from specdec.core.models import early_exit_draft, heldout_texts, padded_target


@pytest.mark.parametrize("domain", ["code", "prose", "json"])
def test_padded_logits_equal_the_shipped_targets_on_heldout_text(pair, domain):
    target, _, tokenizer = pair
    wide = padded_target(target, 4 * target.config.intermediate_size)
    ids = heldout_prompts(tokenizer, heldout_texts(domain), 1, prompt_tokens=96, seed=5)[0]
    with torch.no_grad():
        want, got = target(ids).logits, wide(ids).logits
    assert torch.allclose(got, want, rtol=0, atol=1e-5), (got - want).abs().max()
    assert greedy_generate(wide, ids[:, :24], 16).tolist() == greedy_generate(target, ids[:, :24], 16).tolist()


def test_padding_adds_exactly_the_mlp_weights_and_leaves_the_target_alone(pair):
    target, _, _ = pair
    before = {k: v.clone() for k, v in target.state_dict().items()}
    c = target.config
    wide = padded_target(target, 2048, dtype=torch.bfloat16)
    added = 3 * c.hidden_size * (2048 - c.intermediate_size) * c.num_hidden_layers
    assert count_params(wide) == count_params(target) + added
    assert next(wide.parameters()).dtype == torch.bfloat16
    assert all(torch.equal(before[k], v) for k, v in target.state_dict().items())
    assert target.config.intermediate_size == c.intermediate_size


def test_padded_target_rejects_a_narrower_width(pair):
    with pytest.raises(ValueError, match="intermediate_size"):
        padded_target(pair[0], 100)


def test_early_exit_draft_is_the_targets_first_layers(pair):
    target, _, _ = pair
    draft = early_exit_draft(target, 2)
    assert draft.config.num_hidden_layers == 2
    assert count_params(draft) < count_params(target)
    assert draft.model.layers[1] is target.model.layers[1] and draft.lm_head is target.lm_head
    ids = torch.arange(3, 40).view(1, -1)
    with torch.no_grad():
        h = target(ids, output_hidden_states=True).hidden_states[2]  # after 2 layers, before the norm
        want = target.lm_head(target.model.norm(h))
        assert torch.allclose(draft(ids).logits, want, atol=1e-5)
    with pytest.raises(ValueError, match="n_layers"):
        early_exit_draft(target, target.config.num_hidden_layers)


def test_with_dtype_converts_weights_and_keeps_rope_frequencies_fp32(pair):
    import copy

    from specdec.core.models import with_dtype

    model = with_dtype(copy.deepcopy(pair[1]), torch.bfloat16)
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
    assert model.model.rotary_emb.inv_freq.dtype == torch.float32
    assert torch.equal(model.model.rotary_emb.inv_freq, pair[1].model.rotary_emb.inv_freq)


def test_keep_cache_positions_equals_feeding_the_path_alone(pair):
    from specdec.core.decoding import keep_cache_positions, new_cache

    target = pair[0]
    ids = torch.arange(5, 25).view(1, -1)
    path = [0, 1, 2, 5, 9]
    full, path_only = new_cache(target), new_cache(target)
    with torch.no_grad():
        target(ids, cache=full, use_cache=True)
        target(ids[:, path], cache=path_only, use_cache=True, position_ids=torch.tensor([path]))
    before = [(layer.keys.clone(), layer.values.clone()) for layer in full.layers]
    keep_cache_positions(full, path)
    assert full.get_seq_length() == 5
    for layer, (keys, values) in zip(full.layers, before):  # a pure selection: bit-exact
        assert torch.equal(layer.keys, keys[:, :, path]) and torch.equal(layer.values, values[:, :, path])
    # Layer 0's keys and values depend only on each token and its position, so they match the path fed alone
    # (a 20-row and a 5-row matmul may round differently, hence a tolerance, not bit equality).
    for got, want in (
        (full.layers[0].keys, path_only.layers[0].keys),
        (full.layers[0].values, path_only.layers[0].values),
    ):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="positions"):
        keep_cache_positions(full, [0, 7])
    with pytest.raises(ValueError, match="positions"):
        keep_cache_positions(full, [2, 1])
