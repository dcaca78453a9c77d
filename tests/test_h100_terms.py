"""The H100 step model's attained terms (issue: the terms measured engines pay): fractions of the peaks and a fixed
cost per forward on `Hardware` and `TPGroup`, fitted to a published engine, with the datasheet-peak model kept as
the optimistic bound. Notebook 07's step_terms is run through its solution namespace."""
import csv
import json
import re

import pytest

from nbhelpers import solution_namespace, solution_path
from specdec import DATA_DIR
from specdec.tables import TPGroup, attainable, fit_linear_step, load_hardware


@pytest.fixture(scope="module")
def ns():
    return solution_namespace("07_batch_crossover")


@pytest.fixture(scope="module")
def published():
    with open(DATA_DIR / "published_timings.csv", newline="") as f:
        return {row["id"]: row for row in csv.DictReader(f)}


def _fit_cell():
    nb = json.loads(solution_path("07_batch_crossover").read_text())
    return next("".join(c["source"]) for c in nb["cells"] if "".join(c["source"]).startswith("# SpecDecode-Bench/simulator"))


def _fitted_h100(ns):
    scope = dict(ns, llama_8b=ns["model_spec"]("Llama-3.1-8B"))
    exec(compile(_fit_cell(), "07:fit", "exec"), scope)
    return scope["h100_vllm"], scope["FIT"]


def test_the_peak_model_is_unchanged_and_the_fitted_h100_meets_vllms_plain_step(ns, published):
    h100 = load_hardware()["H100 SXM"]
    llama_8b = ns["model_spec"]("Llama-3.1-8B")
    assert h100.peak and h100.mbu == 1 and h100.mfu == 1 and h100.fixed_s == 0
    assert ns["step_seconds"](llama_8b, h100, 1, 0) == pytest.approx(15_009_849_344 / 3.35e12, rel=1e-12), \
        "the datasheet-peak model still gives 4.481 ms"
    fitted, _ = _fitted_h100(ns)
    vllm = float(published["vllm-20780-8b-plain"]["result_ms_per_token"]) / 1e3
    step = ns["step_seconds"](llama_8b, fitted, 1, 0)
    assert abs(step / vllm - 1) <= 0.10, f"fitted plain step {step * 1e3:.3f} ms against vLLM's 7.07 ms"
    sglang = 1 / float(published["sglang-8b-baseline"]["result_tok_s"])
    assert abs(step / sglang - 1) <= 0.15, f"fitted plain step {step * 1e3:.3f} ms against SGLang's 6.3 ms"
    assert 0.6 < fitted.mfu < 0.8 and 0.95 < fitted.mbu <= 1 and 2e-3 < fitted.fixed_s < 3e-3, fitted


def test_the_fit_in_07_is_the_published_one(ns, published):
    """Every coefficient 07 fits from is in data/published_timings.csv's row, as published."""
    _, fit = _fitted_h100(ns)
    text = published["specdecode-bench-8b-h100"]["result_as_published"]
    numbers = {float(x) for x in re.findall(r"\d\.\d+e-\d+", text)}
    assert set(fit.values()) <= numbers, f"07's FIT {fit} is not the published row's {sorted(numbers)}"


def test_fit_linear_step_arithmetic_and_refusals():
    h100 = load_hardware()["H100 SXM"]
    # a made-up engine whose fit gives half the FLOP/s, half the bandwidth and a known fixed cost
    fitted = fit_linear_step(h100, fixed_s=5e-3, per_token_s=2e-5, per_kv_token_s=1e-7, streamed_bytes=6.7e9,
                             flops_per_token=9.894e9, kv_bytes_per_token=0.5 * 3.35e12 * 1e-7)
    assert fitted.mfu == pytest.approx(0.5) and fitted.mbu == pytest.approx(0.5)
    assert fitted.fixed_s == pytest.approx(5e-3 - 6.7e9 / (0.5 * 3.35e12))
    assert fitted.bandwidth_bytes_per_s == h100.bandwidth_bytes_per_s, "the peaks stay; the fractions carry the fit"
    with pytest.raises(ValueError, match="weight read"):
        fit_linear_step(h100, 1e-3, 2e-5, 1e-7, 6.7e9, 9.894e9, 1e4)
    with pytest.raises(ValueError, match="per_token_s"):
        fit_linear_step(h100, 5e-3, 0.0, 1e-7, 6.7e9, 9.894e9, 1e4)


def test_attained_terms_are_checked_and_carried_by_a_group():
    h100 = load_hardware()["H100 SXM"]
    for bad in ({"mbu": 0.0}, {"mbu": 1.2}, {"mfu": -0.1}, {"fixed_s": -1e-3}, {"mfu": True}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            attainable(h100, **{"mbu": 1.0, "mfu": 1.0, "fixed_s": 0.0, **bad})
    with pytest.raises(ValueError, match="hw"):
        attainable("H100", 0.5)
    g = TPGroup(attainable(h100, 0.85, 0.7, 1e-3), 4, 4, 450e9, 6e-6)
    assert (g.mbu, g.mfu, g.fixed_s) == (0.85, 0.7, 1e-3)
    assert "85% of the bandwidth" in attainable(h100, 0.85).describe() and "attained" not in h100.describe()


def test_the_attained_terms_reach_every_term_of_07s_step(ns):
    llama_8b = ns["model_spec"]("Llama-3.1-8B")
    h100 = load_hardware()["H100 SXM"]
    peak, slow = ns["step_terms"](llama_8b, h100, 256, 1274, 5), ns["step_terms"](llama_8b, attainable(h100, 0.5, 0.25, 1e-3), 256, 1274, 5)
    assert slow["attention"] == pytest.approx(2 * peak["attention"]), "KV read at half the bandwidth, once"
    assert slow["gemm"] == pytest.approx(4 * peak["gemm"]), "compute-bound GEMMs at a quarter of the FLOP/s"
    assert slow["fixed"] == pytest.approx(1e-3) and peak["fixed"] == 0.0


def test_the_expert_readings_rows_that_need_no_round_term(ns):
    """8B + 1B on one H100, batch 256, context 1,274, k 4: the datasheet-peak row (verify/plain 1.87; 1.21x,
    1.00x, 0.83x at alpha 0.8, 0.7, 0.6) and the row at 85 % of the bandwidth and 70 % of the FLOP/s (2.08;
    1.13x, 0.93x, 0.77x), within 1 %. (The rows with the draft's first pass and the sampler's traffic need the
    round's own terms.)"""
    h100 = load_hardware()["H100 SXM"]
    target, draft = ns["model_spec"]("Llama-3.1-8B"), ns["model_spec"]("Llama-3.2-1B")
    rows = {"peaks": (h100, 1.87, (1.21, 1.00, 0.83)), "85 % / 70 %": (attainable(h100, 0.85, 0.70), 2.08, (1.13, 0.93, 0.77))}
    for name, (gpu, ratio, speedups) in rows.items():
        got = ns["step_seconds"](target, gpu, 256, 1274, 5) / ns["step_seconds"](target, gpu, 256, 1274)
        assert got == pytest.approx(ratio, rel=0.01), f"{name}: verify / plain {got:.3f}"
        for alpha, want in zip((0.8, 0.7, 0.6), speedups):
            s = ns["spec_speedup"](256, 1274, alpha, 4, target, draft, gpu)
            assert s == pytest.approx(want, rel=0.01), f"{name}, alpha {alpha}: {s:.3f}x against {want}x"
