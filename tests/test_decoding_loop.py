"""The one decoding loop (issue: notebook 05 wrote its round loop three times).

The loop restates notebook 04's graded answer, so it cannot live in the package: it is one locked given cell of
notebook 05, `given_decoding_loop`, which 09 restates (`given_from`, written by `make release`; the copy's text is
checked by tests/test_given_cells.py). These tests prove the loop equivalent to notebook 04's solution on the
shipped pair: the same tokens and the same per-round counts, greedy and sampled from the same generator.
"""

import random

import nbformat
import pytest
import torch
from nbhelpers import learner_path, solution_path, without_solution_markers

USERS = ("05_acceptance_in_practice", "09_speculation_that_pays")


def _cell(path, grade_id):
    nb = nbformat.read(str(path), as_version=4)
    found = [c.source for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id]
    assert len(found) == 1, f"{path.name}: expected one cell {grade_id!r}, found {len(found)}"
    return found[0]


def _solution_body(path, grade_id):
    return without_solution_markers(_cell(path, grade_id))


def test_the_loop_is_one_given_cell_of_05_that_09_restates():
    """05 holds the loop as its own locked given cell; 09 restates it through `given_from` (the text of the copy
    is checked by tests/test_given_cells.py)."""
    nb = nbformat.read(str(solution_path(USERS[0])), as_version=4)
    cell = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "given_decoding_loop"][0]
    meta = cell.metadata["nbgrader"]
    assert meta["locked"] and not meta["solution"] and not meta["grade"], meta
    assert "def speculative_decode(" in cell.source and "class DraftModelProposer" in cell.source
    nb09 = nbformat.read(str(solution_path(USERS[1])), as_version=4)
    restated = [
        c.metadata.get("given_from")
        for c in nb09.cells
        if c.metadata.get("nbgrader", {}).get("grade_id") == "given_decoding_loop"
    ][0]
    assert restated == [f"{USERS[0]}:{n}" for n in ("DraftModelProposer", "speculative_decode", "speculative_generate")]
    for path in (learner_path(USERS[0]), learner_path(USERS[1])):
        assert "def speculative_decode(" in _cell(path, "given_decoding_loop")


@pytest.fixture(scope="module")
def loop_and_reference(pair):
    """(namespace with the loop cell, notebook 04's solution speculative_generate, the pair, the tokenizer)."""
    import specdec.core.decoding as dec

    base = {name: getattr(dec, name) for name in ("feed", "new_cache", "probs_from_logits", "sample")}
    base.update(torch=torch, F=torch.nn.functional, time=__import__("time"))
    s04 = solution_path("04_speculative_decoder")
    reference = dict(base)
    exec(_solution_body(s04, "verify"), reference)
    exec(_solution_body(s04, "speculative_generate"), reference)
    ours = dict(base, verify=reference["verify"])
    exec(_cell(solution_path(USERS[0]), "given_decoding_loop"), ours)
    target, draft, tokenizer = pair
    return ours, reference["speculative_generate"], target, draft, tokenizer


@pytest.mark.parametrize("temperature", [0.0, 0.8, 1.0])
def test_the_loop_equals_notebook_04s_solution_on_the_shipped_pair(loop_and_reference, temperature):
    from specdec.core.decoding import heldout_prompts
    from specdec.core.models import heldout_texts

    ours, reference, target, draft, tokenizer = loop_and_reference
    rng = random.Random(int(temperature * 10))
    for domain in ("code", "prose", "json"):
        for j, prompt in enumerate(
            heldout_prompts(tokenizer, heldout_texts(domain), 2, prompt_tokens=rng.randrange(1, 30), seed=len(domain))
        ):
            k, n_new = rng.randrange(1, 7), rng.randrange(1, 25)
            want, want_stats = reference(
                target, draft, prompt, n_new, k=k, temperature=temperature, generator=torch.Generator().manual_seed(j)
            )
            got, stats = ours["speculative_generate"](
                target, draft, prompt, n_new, k=k, temperature=temperature, generator=torch.Generator().manual_seed(j)
            )
            assert got.tolist() == want.tolist(), (domain, j, k, temperature)
            assert stats.pop("seconds") >= 0
            assert stats == want_stats, (domain, j, k, temperature)


def test_a_proposer_that_wants_hidden_states_gets_every_position_the_cache_holds(loop_and_reference):
    """The interface promise: after start/advance the proposer has seen the target's states for 0..L-2."""
    ours, _, target, draft, _ = loop_and_reference

    class Recorder(ours["DraftModelProposer"]):
        needs_hidden = True

        def start(self, tokens, hidden=None):
            super().start(tokens)
            self.seen = [hidden]
            assert hidden.shape[0] == tokens.shape[1] - 1

        def advance(self, tokens, hidden=None):
            super().advance(tokens)
            self.seen.append(hidden)
            assert sum(h.shape[0] for h in self.seen) == tokens.shape[1] - 1

    prompt = torch.arange(10, 22).view(1, -1)
    rec = Recorder(draft)
    out, _ = ours["speculative_decode"](target, rec, prompt, 15, k=3)
    with torch.no_grad():
        full = target(out, output_hidden_states=True).hidden_states[-1][0]
    seen = torch.cat(rec.seen)
    assert torch.allclose(seen, full[: seen.shape[0]], atol=1e-4)
