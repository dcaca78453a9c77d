"""The conditions the notebooks attach to their claims hold: each claim below is recomputed from the course's own
code, so a take-away that names a condition names one that matters."""
import math

import pytest
import torch

from nbhelpers import solution_namespace

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def ns09():
    return solution_namespace("09_speculation_that_pays")


def _first_token_share(ns, children, draws=20000, seed=0):
    """Share of rounds whose first emitted token is 0 when the root's two children come from `children(gen)`,
    verified by 09's verify_tree_sampled with p = [0.1, 0.9] and q = [0.9, 0.1] after the root."""
    p = torch.tensor([[0.1, 0.9], [0.5, 0.5], [0.5, 0.5]])
    q = torch.tensor([[0.9, 0.1], [0.5, 0.5], [0.5, 0.5]])
    gen = torch.Generator().manual_seed(seed)
    zeros = 0
    for _ in range(draws):
        tokens = children(gen)
        path, nxt = ns["verify_tree_sampled"]([-1, -1], tokens, p, q, gen)
        zeros += (tokens[path[0]] if path else nxt) == 0
    return zeros / draws


def test_deterministic_top_k_children_are_not_exact_and_independent_draws_are(ns09):
    """09's take-away: children drawn independently from q keep the target's p(0) = 0.1; the deterministic top-2
    children 0 then 1 under the same rule give token 0 with probability 0.1 / 0.9 = 0.111."""
    sigma = math.sqrt(0.1 * 0.9 / 20000)                                # seeded: the same draws every run
    top2 = _first_token_share(ns09, lambda gen: [0, 1])
    assert top2 == pytest.approx(0.1 / 0.9, abs=4 * sigma)
    assert abs(top2 - 0.1) > 3 * sigma                                   # the difference is not noise
    iid = _first_token_share(ns09, lambda gen: torch.multinomial(torch.tensor([0.9, 0.1]), 2, True, generator=gen).tolist())
    assert iid == pytest.approx(0.1, abs=4 * sigma)


def test_dynamic_int8_uses_one_activation_scale_per_forward():
    """09's int8 paragraph: quantize_dynamic quantises a forward's activations with one scale for all its rows, so
    a row's result depends on the rows beside it (a per-row scale would leave it unchanged)."""
    torch.manual_seed(0)
    lin = torch.nn.Sequential(torch.nn.Linear(256, 256))
    q = torch.ao.quantization.quantize_dynamic(lin, {torch.nn.Linear}, dtype=torch.qint8)
    x = torch.randn(1, 256)
    with torch.no_grad():
        alone = q(x)
        beside_small = q(torch.cat([x, 0.5 * x]))[:1]                    # the neighbour does not widen the range
        beside_large = q(torch.cat([x, 100 * torch.randn(1, 256)]))[:1]
    assert torch.allclose(alone, beside_small)
    assert (alone - beside_large).abs().max() > 0.1 * alone.abs().max()


def test_the_embedding_table_share_notebook_01_states():
    """01, Part D: the 8B's embedding table is 1.05 GB of its 16.06 GB in bf16, about 7 % above what a step reads."""
    ns = solution_namespace("01_decode_is_bandwidth_bound")
    cfg = ns["configs"]["Llama-3.1-8B"]
    table = cfg["vocab_size"] * cfg["hidden_size"] * 2
    total = ns["weight_bytes"](cfg)
    assert round(table / 1e9, 2) == 1.05 and round(total / 1e9, 2) == 16.06
    assert round(100 * table / (total - table)) == 7
