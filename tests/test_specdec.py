"""Unit tests of the helper package: tables, timing, plotting."""

import math
import time

import matplotlib
import pytest

import specdec
from specdec.measure.timing import interleaved_medians, median_seconds
from specdec.plotting import new_axes, roofline
from specdec.tables import load_hardware, load_model_configs, load_moe_configs, moe_parameter_counts


def test_hardware_table_has_the_course_gpus_with_units_and_sources():
    hw = load_hardware()
    assert {"H100 SXM", "H200 SXM", "A100 80GB SXM", "L4"} <= set(hw)
    h100 = hw["H100 SXM"]
    assert h100.bandwidth_bytes_per_s == 3.35e12
    assert h100.flops_per_s == pytest.approx(989.4e12)
    assert h100.memory_bytes == 80e9
    assert round(h100.flops_per_s / h100.bandwidth_bytes_per_s) == 295
    for row in hw.values():
        assert row.source.strip(), f"{row.name} has no source"
    assert not hw["L4"].verified, "L4 figures come from secondary sources and must say so"


def test_model_table_has_llama_configs_with_hf_keys():
    cfgs = load_model_configs()
    assert set(cfgs) == {"Llama-3.1-8B", "Llama-3.1-70B", "Llama-3.2-1B", "Llama-3.2-3B"}
    for name, cfg in cfgs.items():
        for key in (
            "hidden_size",
            "intermediate_size",
            "num_hidden_layers",
            "num_attention_heads",
            "num_key_value_heads",
            "vocab_size",
            "tie_word_embeddings",
            "head_dim",
        ):
            assert key in cfg, f"{name} lacks {key}"
    assert cfgs["Llama-3.2-1B"]["tie_word_embeddings"] is True
    assert cfgs["Llama-3.1-70B"]["num_hidden_layers"] == 80


def test_tables_read_another_file(tmp_path):
    path = tmp_path / "hw.csv"
    path.write_text("name,memory_gb,bandwidth_tb_s,bf16_dense_tflops,verified,source\nX,1,0.5,10,no,made up\n")
    x = load_hardware(path)["X"]
    assert (x.memory_bytes, x.bandwidth_bytes_per_s, x.flops_per_s, x.verified) == (1e9, 0.5e12, 10e12, False)


def test_median_seconds_measures_a_sleep_and_counts_calls():
    calls = []
    t = median_seconds(lambda: (calls.append(1), time.sleep(0.01)), repeats=3, warmup=2)
    assert len(calls) == 5
    assert 0.009 < t < 0.2


def test_interleaved_medians_times_each_callable_round_robin():
    order = []
    out = interleaved_medians({"a": lambda: order.append("a"), "b": lambda: order.append("b")}, repeats=3, warmup=1)
    assert order == ["a", "b"] * 4
    assert set(out) == {"a", "b"} and all(v >= 0 for v in out.values())


@pytest.mark.parametrize("fn", [median_seconds, lambda f, repeats: interleaved_medians({"f": f}, repeats=repeats)])
def test_timing_rejects_zero_repeats(fn):
    with pytest.raises(ValueError, match="repeats"):
        fn(lambda: None, repeats=0)


def test_roofline_returns_the_ridge_and_uses_log_axes():
    matplotlib.use("Agg")
    fig, ax = new_axes("t")
    ridge = roofline(ax, 100e9, 10e9, label="cpu")
    assert math.isclose(ridge, 10.0)
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    x, y = ax.lines[0].get_data()
    assert max(y) == pytest.approx(100e9) and y[0] == pytest.approx(x[0] * 10e9)


def test_data_dir_points_at_the_repository_data():
    assert (specdec.DATA_DIR / "hardware.csv").is_file()


def test_moe_configs_reproduce_the_publishers_parameter_counts():
    """The transcription check of data/moe_configs.json: every model's fields give the publisher's own total and
    active parameter counts within 2 % (they are rounded to 2-3 digits); with the other embedding convention the
    active count of a model whose publisher leaves the embedding out misses by more than that."""
    cfgs = load_moe_configs()
    assert set(cfgs) == {"Mixtral-8x7B", "Qwen3-30B-A3B", "DeepSeek-V3", "gpt-oss-120b"}
    for name, cfg in cfgs.items():
        assert cfg["source"].strip() and cfg["config"].startswith("https://huggingface.co/"), name
        got = moe_parameter_counts(cfg, cfg["active_counts_embedding"])
        for key in ("total", "active"):
            want = cfg[f"published_{key}_params"]
            assert abs(got[key] / want - 1) < 0.02, (name, key, got[key], want)
        assert got["active"] < got["total"] / 3, name  # a token reads a small share of an MoE's weights
    oss = cfgs["gpt-oss-120b"]
    assert moe_parameter_counts(oss, True)["active"] / oss["published_active_params"] - 1 > 0.05
    # DeepSeek-V3: 3 dense layers, 58 MoE layers of 256 routed experts and one shared, 8 routed per token
    ds = moe_parameter_counts(cfgs["DeepSeek-V3"])
    assert ds["total"] - ds["active"] == 58 * (256 - 8) * ds["expert"]


def test_moe_parameter_counts_refuse_an_incomplete_config():
    cfg = dict(load_moe_configs()["Mixtral-8x7B"])
    del cfg["experts_per_token"]
    with pytest.raises(ValueError, match="experts_per_token"):
        moe_parameter_counts(cfg)
    with pytest.raises(ValueError, match="attention"):
        moe_parameter_counts(dict(load_moe_configs()["Mixtral-8x7B"], attention="dense"))
