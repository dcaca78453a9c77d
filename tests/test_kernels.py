"""specdec.measure.kernels: the kernel paths of this torch build, converting a model to one, measuring and choosing."""

import os
import platform
import subprocess
import sys

import pytest
import torch

from specdec.core.decoding import greedy_generate, tiny_llama
from specdec.core.lean import LeanLlama
from specdec.core.models import padded_target
from specdec.measure import kernels

pytestmark = pytest.mark.usefixtures("one_thread")
X86 = platform.machine().lower() in ("x86_64", "amd64")


@pytest.fixture(scope="module")
def tiny():
    return tiny_llama(vocab_size=128, hidden_size=64, num_hidden_layers=2, seed=3)


def rule(alpha, k, row):
    # notebook 05's predicted_speedup: E(alpha, k) / (k c + c_round + v(k) + o)
    e = (1 - alpha ** (k + 1)) / (1 - alpha)
    return e / (k * row["c"] + row["c_round"] + row["v"][k] + row["o"])


def test_paths_of_this_build():
    names = kernels.path_names()
    assert names[:2] == ["bf16", "fp32"]
    if X86:
        assert {"int8-fbgemm", "int8-onednn"} <= set(names)
        assert "int8-qnnpack" not in names


@pytest.mark.parametrize("path", kernels.path_names())
def test_convert_runs_the_path_and_leaves_the_model_alone(tiny, path):
    before = {k: v.clone() for k, v in tiny.state_dict().items()}
    model = kernels.convert(tiny, path)
    assert all(torch.equal(before[k], v) for k, v in tiny.state_dict().items())
    ids = torch.randint(0, 128, (1, 12), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        ref, got = tiny(ids).logits, model(ids).logits.float()
    assert got.shape == ref.shape
    if path == "fp32":
        assert torch.equal(got, ref)
    else:  # a different target: close, not equal
        assert (got - ref).abs().max() < 0.1 * ref.abs().max()
    if path.startswith("int8-"):
        quantised = [
            m for m in model.model.layers.modules() if type(m).__name__ == "Linear" and hasattr(m, "_packed_params")
        ]
        assert quantised, "no decoder Linear was quantised"
        assert not hasattr(model.lm_head, "_packed_params"), "the LM head stays fp32 (the drafters share it)"
        assert kernels.weight_megabytes(model) < kernels.weight_megabytes(tiny)
    if path == "bf16":
        assert model.lm_head.weight.dtype == torch.bfloat16


def test_an_int8_target_decodes_like_itself(tiny):
    """speculation on a quantised target is checked against the quantised target's own greedy output."""
    model = kernels.convert(tiny, "int8-fbgemm" if X86 else kernels.path_names()[-1])
    prompt = torch.randint(0, 128, (1, 8), generator=torch.Generator().manual_seed(1))
    out = greedy_generate(model, prompt, 6)
    assert out.shape == (1, 14) and torch.equal(out[:, :8], prompt)


def test_convert_refuses_an_unknown_path(tiny):
    with pytest.raises(ValueError, match="path must be one of"):
        kernels.convert(tiny, "int4")


def test_measure_paths_rows_and_the_step_budget(tiny):
    draft = tiny_llama(vocab_size=128, hidden_size=32, num_hidden_layers=1, seed=4)
    rows, draft_steps = kernels.measure_paths(
        tiny, draft, [512, 1024], ks=(1, 2), paths=["fp32", "bf16"], context=8, repeats=1, warmup=0
    )
    assert [(r["path"], r["width"]) for r in rows] == [("fp32", 512), ("fp32", 1024), ("bf16", 512), ("bf16", 1024)]
    fastest = min(draft_steps, key=draft_steps.get)
    for r in rows:
        assert r["step"] > 0 and set(r["v"]) == {1, 2} and r["draft_path"] == fastest
        assert r["c"] == pytest.approx(draft_steps[fastest] / r["step"])
    assert rows[1]["mb"] > rows[0]["mb"]
    # a step budget below every step: each path keeps only its narrowest width
    rows, _ = kernels.measure_paths(
        tiny, draft, [1024, 512], ks=(1,), paths=["fp32", "bf16"], context=8, repeats=1, warmup=0, max_step=1e-9
    )
    assert [(r["path"], r["width"]) for r in rows] == [("fp32", 512), ("bf16", 512)]
    with pytest.raises(ValueError, match="widths"):
        kernels.measure_paths(tiny, draft, [], paths=["fp32"])
    # through the lean forward (the one 09's race runs): every timed model wrapped, the bytes still the model's
    wrapped = []
    rows, _ = kernels.measure_paths(
        tiny,
        draft,
        [512],
        ks=(1,),
        paths=["fp32"],
        context=8,
        repeats=1,
        warmup=0,
        forward=lambda m: wrapped.append(type(m).__name__) or LeanLlama(m),
    )
    assert wrapped == ["LlamaForCausalLM", "LlamaForCausalLM"] and rows[0]["step"] > 0
    assert rows[0]["mb"] == pytest.approx(kernels.weight_megabytes(kernels.convert(padded_target(tiny, 512), "fp32")))


def test_the_table_shows_each_rows_best_k_and_the_choice():
    """The choice itself is notebook 09's graded choose_path (restated in 10); the table prints what it chose from:
    each domain's best k, its predicted speedup and the tokens per second it decodes at (plain where none pays)."""
    terms = {"c_round": 0.02, "o": 0.05}
    cheap = {
        "path": "a",
        "width": 1,
        "mb": 1.0,
        "step": 0.01,
        "v": {2: 1.1, 4: 1.2},
        "c": 0.05,
        "draft_path": "a",
        **terms,
    }
    dear = {
        "path": "b",
        "width": 1,
        "mb": 1.0,
        "step": 0.02,
        "v": {2: 2.0, 4: 3.0},
        "c": 0.05,
        "draft_path": "a",
        **terms,
    }
    k, s = kernels.row_best_k(0.9, cheap, rule)
    assert k == 4 and s == pytest.approx(max(rule(0.9, kk, cheap) for kk in (2, 4)))
    table = kernels.format_table([dear, cheap], {"code": 0.6}, rule, cheap, note=lambda r: "dear" if r is dear else "")
    lines = table.splitlines()
    assert lines[2].endswith("<- chosen") and lines[1].endswith("dear") and "v(4)" in lines[0] and "tok/s" in lines[0]
    k, s = kernels.row_best_k(0.6, cheap, rule)
    assert s > 1 and f"{k:4d}, {s:4.2f}x, {s / 0.01:5.0f} " in lines[2]
    k, s = kernels.row_best_k(0.6, dear, rule)  # no k pays: plain decoding, 1 / step, marked
    assert s <= 1 and f"{s:4.2f}x, {1 / 0.02:5.0f}*" in lines[1] and lines[-1].startswith("* no k pays")


@pytest.mark.skipif(not X86, reason="the AVX2 cap is an x86 setting")
def test_the_avx2_cap_reaches_torch():
    """ATEN_CPU_CAPABILITY caps torch's own kernels; the oneDNN and MKL variables cap theirs (they are read when
    the libraries load, so a fresh process is needed). On an AVX-512 machine the capped process reports AVX2."""
    code = "import torch; print(torch.backends.cpu.get_cpu_capability())"
    env = {**os.environ, **kernels.AVX2_CAP}
    capped = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert capped.stdout.strip() in ("AVX2", "DEFAULT"), capped.stdout


def test_square_twins_read_the_same_bytes_as_the_padded_mlp(tiny):
    """09's square twin: every MLP matrix of the lean padded model beside a square matrix of its bytes, on its path."""
    for path in ("fp32", "bf16"):
        lean = LeanLlama(kernels.convert(padded_target(tiny, 1024), path))
        out = kernels.square_twin_products(lean, path, repeats=1, warmup=0)
        assert set(out) == {"padded", "square", "mb"} and out["padded"] > 0 and out["square"] > 0
        mlp_mb = sum(p.numel() * p.element_size() for L in tiny.model.layers for p in L.mlp.parameters()) / 1e6
        per_weight = 2 if path == "bf16" else 4
        assert out["mb"]["padded"] == pytest.approx(
            mlp_mb * 1024 / tiny.config.intermediate_size * per_weight / 4, rel=1e-6
        )
        assert out["mb"]["square"] == pytest.approx(out["mb"]["padded"], rel=0.01)
    with pytest.raises(ValueError, match="path must be one of"):
        kernels.square_twin_products(lean, "int4")
