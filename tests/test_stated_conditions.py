"""The conditions the notebooks attach to their claims hold: each claim below is recomputed from the course's own
code, so a take-away that names a condition names one that matters."""

import math
import re

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
    sigma = math.sqrt(0.1 * 0.9 / 20000)  # seeded: the same draws every run
    top2 = _first_token_share(ns09, lambda gen: [0, 1])
    assert top2 == pytest.approx(0.1 / 0.9, abs=4 * sigma)
    assert abs(top2 - 0.1) > 3 * sigma  # the difference is not noise
    iid = _first_token_share(
        ns09, lambda gen: torch.multinomial(torch.tensor([0.9, 0.1]), 2, True, generator=gen).tolist()
    )
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
        beside_small = q(torch.cat([x, 0.5 * x]))[:1]  # the neighbour does not widen the range
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


CLAIM = re.compile(r"\d[\d.,]*\s*(×|x\b)|break-even|crossover|pays up to|stops paying")
ACCEPTANCE = re.compile(r"α|acceptance|τ|\balpha\b")
BASIS = re.compile(r"peak|datasheet|roofline|fitted|measured|attain|your (CPU|machine)|printed|this machine", re.I)


def _take_away_bullets(name):
    """The bullets of a notebook's "What to take away" (its markdown from that heading on)."""
    from nbhelpers import read, solution_path

    cells = read(solution_path(name)).cells
    start = next(
        i for i, c in enumerate(cells) if c.cell_type == "markdown" and c.source.startswith("## What to take away")
    )
    text = "\n".join(c.source for c in cells[start:] if c.cell_type == "markdown")
    return [b.strip() for b in re.split(r"\n(?=- )", text) if b.strip().startswith("- ")]


@pytest.mark.parametrize(
    "name",
    [
        "06_h100_configs_real_timings",
        "07_batch_crossover",
        "08_break_even_acceptance",
        "09_speculation_that_pays",
        "10_batches_and_servers",
    ],
)
def test_every_take_away_that_states_a_speedup_or_crossover_names_its_acceptance_and_its_terms(name):
    """A take-away of 06-10 that states a speedup, a break-even or a crossover names the acceptance it holds under
    (α, an acceptance length, or the learner's measured acceptance) and the terms it was priced with (datasheet
    peaks, fitted or attained terms, or a measurement printed in the notebook)."""
    bullets = _take_away_bullets(name)
    assert bullets, f"{name} has no take-away bullets"
    claims = [b for b in bullets if CLAIM.search(b)]
    missing = [b[:120] for b in claims if not (ACCEPTANCE.search(b) and BASIS.search(b))]
    assert not missing, f"{name}: take-aways without their conditions: {missing}"


def test_the_take_away_check_catches_a_bare_claim():
    bare = "- Speculation pays up to batch 187 and gives 2.80× at batch 32."
    assert CLAIM.search(bare) and not (ACCEPTANCE.search(bare) and BASIS.search(bare))
    said = "- At α 0.8, k 4 on the datasheet peaks, speculation pays up to batch 187."
    assert ACCEPTANCE.search(said) and BASIS.search(said)


def _conclusions(name, heading):
    from nbhelpers import read, solution_path

    cells = read(solution_path(name)).cells
    start = next(i for i, c in enumerate(cells) if c.cell_type == "markdown" and heading in c.source)
    text = "\n".join(c.source for c in cells[start:] if c.cell_type == "markdown")
    return " ".join(text[text.index(heading) :].replace("**", "").split())


def test_the_h100_take_aways_name_the_head_the_calibration_the_prefill_model_and_memory():
    """07, 08, 10 and 12 state the conditions their H100 conclusions rest on: 07 the drafter's cost (both heads) and
    the split of the fitted constant; 08 the split's range and the gate's condition; 10 the prefill scheduled in the
    running batch's forward (vLLM V1); 12 the batches that fit in memory and the measured int4 step."""
    t07 = _conclusions("07_batch_crossover", "## What to take away")
    for phrase in (
        "simulator's head",
        "K sweep",
        "per draft step",
        "drafter's cost per step or the acceptance",
        "0.36–0.57",
        "extrapolation",
    ):
        assert phrase in t07, ("07", phrase)
    t08 = _conclusions("08_break_even_acceptance", "## What to take away")
    assert "0.36-0.57" in t08 and "on the step model it chose with" in t08
    t10 = _conclusions("10_batches_and_servers", "## What to take away")
    assert "in the running batch's forward as vLLM V1 schedules them" in t10
    t12 = _conclusions("12_moe_and_quantised", "### The conclusion, with its conditions")
    assert "at the batches that fit in memory" in t12 and "gpt-fast's measured int4 step" in t12
    assert "memory not counted" not in t12
