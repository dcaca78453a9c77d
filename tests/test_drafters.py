"""Medusa heads and the EAGLE feature draft (specdec.core.drafters): files, loaders, proposers, exactness."""

import json
import shutil

import pytest
import torch

from specdec.core.decoding import greedy_generate, heldout_prompts, new_cache, tiny_llama
from specdec.core.drafters import (
    EagleProposer,
    MedusaProposer,
    PlainLMProposer,
    greedy_tau,
    last_hidden,
    load_eagle,
    load_medusa,
    trainable_params,
)
from specdec.core.models import DOMAINS, ModelFilesError, default_path, heldout_texts, padded_target
from specdec.training import cards, train

pytestmark = pytest.mark.usefixtures("one_thread")
NEW_TOKENS = 24


@pytest.fixture(scope="module")
def prompts(pair):
    _, _, tokenizer = pair
    return {d: heldout_prompts(tokenizer, heldout_texts(d), 1, prompt_tokens=24, seed=1)[0] for d in DOMAINS}


@pytest.fixture(scope="module")
def bf16_target(pair):
    return padded_target(pair[0], 2048, torch.bfloat16)


@torch.no_grad()
def reference_greedy(target, proposer, prompt, new_tokens, k):
    """greedy speculative decoding with a proposer, written out: prefill the target on all tokens but the
    last, then per round propose, verify the last token + drafts in one cached forward, accept the longest
    prefix that matches the target's argmax plus one target token, crop the target's cache to the kept
    positions and hand the proposer their hidden states. Returns (tokens (1, T + new_tokens), rounds)."""
    cache = new_cache(target)
    tokens = prompt
    hidden = None
    if prompt.shape[1] > 1:
        out = target(prompt[:, :-1], cache=cache, use_cache=True, output_hidden_states=True)
        hidden = out.hidden_states[-1][0]  # (T-1, H)
    proposer.start(tokens, hidden if proposer.needs_hidden else None)
    rounds = 0
    while tokens.shape[1] < prompt.shape[1] + new_tokens:
        drafts, q = proposer.propose(tokens, k, 0.0)
        assert q.dtype == torch.float32 and q.shape == (len(drafts), target.config.vocab_size)
        assert torch.equal(drafts, q.argmax(-1)) and torch.equal(q.sum(-1), torch.ones(len(drafts)))
        block = torch.cat([tokens[:, -1:], drafts.view(1, -1)], dim=1)  # (1, 1 + k')
        out = target(block, cache=cache, use_cache=True, output_hidden_states=True)
        top = out.logits[0].argmax(-1)  # (1 + k',)
        accepted = int((drafts == top[:-1]).long().cumprod(0).sum().item())
        new = torch.cat([drafts[:accepted], top[accepted : accepted + 1]]).view(1, -1)
        rejected = len(drafts) - accepted
        if rejected:
            cache.crop(-rejected)
        tokens = torch.cat([tokens, new], dim=1)
        kept = out.hidden_states[-1][0, : accepted + 1]  # (a + 1, H)
        proposer.advance(tokens, kept if proposer.needs_hidden else None)
        rounds += 1
    return tokens[:, : prompt.shape[1] + new_tokens], rounds


def test_shipped_drafters_load_and_are_small(pair):
    target, _, _ = pair
    size = sum(f.stat().st_size for name in ("medusa", "eagle") for f in (default_path() / name).rglob("*"))
    assert size <= 5e6, size
    heads, eagle = load_medusa(target), load_eagle(target)
    assert heads.lm_head is target.lm_head and eagle.lm_head is target.lm_head
    assert eagle.embed is target.get_input_embeddings()
    assert not any(p is target.lm_head.weight for p in heads.parameters())
    assert 0 < trainable_params(heads) < 1e6 and 0 < trainable_params(eagle) < 2e6
    report = json.loads((default_path() / "drafters.json").read_text())
    assert report["added_params"]["medusa"] == trainable_params(heads)
    assert report["added_params"]["eagle"] == trainable_params(eagle)
    sha = cards.file_sha256(default_path() / "target" / "model.safetensors")
    for name in ("medusa", "eagle"):
        assert json.loads((default_path() / name / "config.json").read_text())["trained_for"]["target_sha256"] == sha


@pytest.mark.parametrize("kind", ["medusa", "eagle", "draft"])
def test_greedy_with_each_proposer_equals_target_greedy_fp32(pair, prompts, kind):
    target, draft, _ = pair
    make = {
        "medusa": lambda: MedusaProposer(load_medusa(target)),
        "eagle": lambda: EagleProposer(load_eagle(target)),
        "draft": lambda: PlainLMProposer(draft),
    }[kind]
    total_rounds = 0
    for domain, prompt in prompts.items():
        expected = greedy_generate(target, prompt, NEW_TOKENS)
        got, rounds = reference_greedy(target, make(), prompt, NEW_TOKENS, k=3)
        assert torch.equal(got, expected), domain
        total_rounds += rounds
    assert total_rounds < 3 * NEW_TOKENS  # some drafts were accepted


@pytest.fixture(scope="module")
def padded_fp32_target(pair):
    return padded_target(pair[0], 2048)


@pytest.mark.parametrize("kind", ["medusa", "eagle"])
def test_greedy_with_each_proposer_equals_greedy_of_a_padded_target(padded_fp32_target, prompts, kind):
    """exact in fp32 on the padded target (its logits are the shipped target's); bf16 is checked for what it
    promises below, not for bit equality: a (k+1)-token verify and a 1-token step round differently in bf16 on
    CPUs without native bf16 kernels, so greedy speculative and greedy plain may part at a near-tie."""
    target = padded_fp32_target
    drafter = load_medusa(target) if kind == "medusa" else load_eagle(target)
    proposer = MedusaProposer if kind == "medusa" else EagleProposer
    for domain, prompt in prompts.items():
        expected = greedy_generate(target, prompt, NEW_TOKENS)
        got, _ = reference_greedy(target, proposer(drafter), prompt, NEW_TOKENS, k=4)
        assert torch.equal(got, expected), domain


@pytest.mark.parametrize("kind", ["medusa", "eagle"])
def test_drafters_bind_to_a_bf16_padded_target_and_decode(bf16_target, prompts, kind):
    target = bf16_target
    drafter = load_medusa(target) if kind == "medusa" else load_eagle(target)
    assert next(drafter.parameters()).dtype == torch.bfloat16
    proposer = MedusaProposer if kind == "medusa" else EagleProposer
    rounds = 0
    for prompt in prompts.values():
        got, r = reference_greedy(target, proposer(drafter), prompt, NEW_TOKENS, k=4)
        assert got.shape == (1, prompt.shape[1] + NEW_TOKENS) and torch.equal(got[:, : prompt.shape[1]], prompt)
        rounds += r
    assert rounds < len(prompts) * NEW_TOKENS  # drafts were accepted: the bf16 heads still guess


def test_medusa_proposals_at_temperature_zero_are_the_heads_argmax(pair, prompts):
    target, _, _ = pair
    heads = load_medusa(target)
    prompt = prompts["code"]
    hidden = last_hidden(target, prompt[:, :-1])  # (T-1, H)
    proposer = MedusaProposer(heads)
    proposer.start(prompt, hidden)
    logits = heads.head_logits(hidden[-1])  # (n, V)
    assert logits.shape == (heads.n_heads, target.config.vocab_size)
    drafts, q = proposer.propose(prompt, 2, 0.0)
    assert torch.equal(drafts, logits[:2].argmax(-1)) and q.shape == (2, target.config.vocab_size)
    drafts, _ = proposer.propose(prompt, heads.n_heads + 3, 0.0)  # capped at n_heads
    assert torch.equal(drafts, logits.argmax(-1))
    drafts, q = proposer.propose(prompt, 0, 0.0)
    assert drafts.shape == (0,) and q.shape == (0, target.config.vocab_size)
    tokens, logits_tree = proposer.topk_tree(2)
    assert tokens.shape == (heads.n_heads, 2) and torch.equal(tokens[:, 0], logits.argmax(-1))
    assert torch.equal(logits_tree, logits)
    # sampled: q is the softmax at the temperature, and a seeded generator reproduces the drafts
    d1, q1 = proposer.propose(prompt, 3, 0.8, torch.Generator().manual_seed(5))
    d2, _ = proposer.propose(prompt, 3, 0.8, torch.Generator().manual_seed(5))
    assert torch.equal(d1, d2) and torch.allclose(q1, torch.softmax(logits[:3].float() / 0.8, -1))


def test_eagle_proposals_at_temperature_zero_are_its_argmax_fed_back(pair, prompts):
    target, _, _ = pair
    eagle = load_eagle(target)
    prompt = prompts["json"]
    hidden = last_hidden(target, prompt[:, :-1])
    proposer = EagleProposer(eagle)
    proposer.start(prompt, hidden)
    drafts, q = proposer.propose(prompt, 3, 0.0)
    # by hand, without a cache: the true states, then its own ĥ and drafts fed back
    h, ids, expected = hidden, prompt, []
    with torch.no_grad():
        for _ in range(3):
            h_hat = eagle(h[None], ids[:, 1:])[0, -1]
            token = eagle.logits(h_hat).argmax(-1)
            expected.append(token)
            h, ids = torch.cat([h, h_hat[None]]), torch.cat([ids, token.view(1, 1)], dim=1)
    assert torch.equal(drafts, torch.stack(expected)) and torch.equal(q.argmax(-1), drafts)
    again, _ = proposer.propose(prompt, 3, 0.0)  # its cache was cropped back to the true positions
    assert torch.equal(again, drafts)


def test_proposers_refuse_out_of_step_hidden_states(pair, prompts):
    target, _, _ = pair
    prompt = prompts["prose"]
    hidden = last_hidden(target, prompt[:, :-1])
    for proposer in (MedusaProposer(load_medusa(target)), EagleProposer(load_eagle(target))):
        with pytest.raises(ValueError, match="hidden"):
            proposer.start(prompt, hidden[:-1])
        proposer.start(prompt, hidden)
        longer = torch.cat([prompt, prompt[:, :2]], dim=1)
        with pytest.raises(ValueError, match="hidden states"):
            proposer.advance(longer, hidden[:1])
        with pytest.raises(ValueError, match="k must be"):
            proposer.propose(prompt, -1, 0.0)


def test_greedy_tau_counts_the_reference_loops_rounds(pair, prompts):
    target, _, _ = pair
    heads = load_medusa(target)
    prompt = prompts["json"]
    _, rounds = reference_greedy(target, MedusaProposer(heads), prompt, NEW_TOKENS, k=3)
    measured = greedy_tau(target, MedusaProposer(heads), prompt, NEW_TOKENS, 3)
    assert measured["tokens"] == NEW_TOKENS and abs(measured["rounds"] - rounds) <= 1
    assert measured["tau"] > 1


def test_missing_or_broken_drafter_files_raise_model_files_error(pair, tmp_path):
    target, _, _ = pair
    with pytest.raises(ModelFilesError, match="model.safetensors") as err:
        load_medusa(target, tmp_path / "nowhere")
    assert "python -m specdec.training.train drafters" in str(err.value)
    broken = tmp_path / "eagle"
    shutil.copytree(default_path() / "eagle", broken)
    (broken / "model.safetensors").write_bytes(b"not safetensors")
    with pytest.raises(ModelFilesError, match="do not load"):
        load_eagle(target, broken)
    with pytest.raises(ModelFilesError, match="not 'medusa'"):
        load_medusa(target, default_path() / "eagle")


def test_a_target_of_another_size_is_refused(pair):
    other = tiny_llama(vocab_size=4096, hidden_size=64)
    with pytest.raises(ValueError, match="hidden size 64"):
        load_medusa(other)
    with pytest.raises(ValueError, match="vocabulary 512"):
        load_eagle(tiny_llama(vocab_size=512, hidden_size=256, num_attention_heads=4))
    with pytest.warns(UserWarning, match="another target"):
        load_medusa(tiny_llama(vocab_size=4096, hidden_size=256, num_attention_heads=4))


def test_smoke_training_writes_loadable_drafters(pair, tmp_path):
    target, _, _ = pair
    out = tmp_path / "drafters"
    report = train.main(
        ["drafters", "--smoke", "--threads", "1", "--out", str(out), "--target-from", str(default_path())]
    )
    heads, eagle = load_medusa(target, out / "medusa"), load_eagle(target, out / "eagle")
    assert report["drafters"]["medusa"]["params"] == trainable_params(heads)
    assert report["drafters"]["eagle"]["params"] == trainable_params(eagle)
    assert set(report["eval"]) == {"medusa", "eagle", "draft", "early_exit_1", "early_exit_2"}
    for per_domain in report["eval"].values():
        assert set(per_domain) == set(DOMAINS) and all(r["tau"] >= 1 for r in per_domain.values())
    assert (out / "drafters_log.csv").read_text().startswith("model,step,train_loss,heldout_loss")
    assert json.loads((out / "drafters.json").read_text())["command"].startswith(
        "python -m specdec.training.train drafters"
    )
    card = cards.drafter_card(report)
    assert "Medusa heads" in card and "EAGLE feature draft" in card
