"""Unit tests of specdec.measure.bench, the layer-slice benchmark, on tiny shapes so they run in seconds."""

import json
import subprocess
import sys

import pytest
import torch

from specdec import DATA_DIR
from specdec.measure import bench

# a Llama-shaped model small enough to build and time in milliseconds
TINY = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 6,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "vocab_size": 1000,
    "tie_word_embeddings": False,
}
# parameters of one TINY decoder layer: q, o (64x64), k, v (64x32), gate, up, down (64x128), two norms (64)
TINY_LAYER_PARAMS = 2 * 64 * 64 + 2 * 64 * 32 + 3 * 64 * 128 + 2 * 64

PROVENANCE = (
    "device",
    "device_name",
    "dtype",
    "torch_version",
    "transformers_version",
    "date_utc",
    "command",
    "host_cpu_count",
    "model",
    "layers_timed",
    "num_hidden_layers",
    "context",
    "scaling",
    "note",
)


def test_scale_to_full_multiplies_by_the_layer_ratio_and_adds_the_head():
    assert bench.scale_to_full(0.010, 1, 32, head_seconds=0.004) == pytest.approx(32 * 0.010 + 0.004)
    assert bench.scale_to_full(0.030, 2, 80) == pytest.approx(40 * 0.030)
    assert bench.scale_to_full(0.5, 4, 4, 0.0) == pytest.approx(0.5)


@pytest.mark.parametrize(
    "args,name",
    [((0.01, 0, 32), "layers_timed"), ((0.01, 4, 2), "num_hidden_layers"), ((-1.0, 1, 32), "slice_seconds")],
)
def test_scale_to_full_rejects_bad_input(args, name):
    with pytest.raises(ValueError, match=name):
        bench.scale_to_full(*args)


def test_slice_has_the_real_layer_shape_and_counts_its_bytes_and_flops():
    model = bench.build_slice(TINY, layers=2)
    assert len(model.layers) == 2
    attn = model.layers[0].self_attn
    assert (attn.q_proj.out_features, attn.k_proj.out_features) == (64, 32)
    assert model.layers[0].mlp.gate_proj.out_features == 128
    counts = bench.slice_counts(model, batch=3, width=5, context=100)
    assert counts["weight_bytes"] == 2 * TINY_LAYER_PARAMS * 4  # fp32
    assert counts["kv_bytes"] == 2 * 3 * (100 + 5) * 2 * 32 * 4  # layers, B, positions, K and V
    matmul_params = TINY_LAYER_PARAMS - 2 * 64
    assert counts["flops"] == 2 * (2 * matmul_params * 15 + 2 * 2 * 15 * 105 * 64)


def test_weights_are_finite_and_the_forward_pass_works():
    model = bench.build_slice(TINY, layers=1)
    assert all(torch.isfinite(p).all() for p in model.parameters())
    assert torch.isfinite(model.rotary_emb.inv_freq).all()
    samples = bench.time_slice(model, batch=2, width=3, context=8, repeats=2, warmup=1)
    assert len(samples) == 2 and all(s > 0 for s in samples)


def test_head_counts_and_head_timing_scale_to_the_full_vocabulary():
    assert bench.head_counts(4096, 128256, 2, 5, 2) == {
        "weight_bytes": 4096 * 128256 * 2,
        "flops": 2 * 4096 * 128256 * 10,
    }
    seconds, weight = bench.time_head(64, 1000, 1, 1, torch.float32, "cpu", fraction=0.25, repeats=2, warmup=1)
    assert weight.shape == (250, 64) and seconds > 0
    with pytest.raises(ValueError, match="fraction"):
        bench.time_head(64, 1000, 1, 1, torch.float32, "cpu", fraction=0)


def test_run_gives_one_row_per_grid_point_and_the_full_model_arithmetic():
    meta, rows = bench.run(
        TINY,
        "tiny",
        layers=2,
        batches=[1, 2],
        widths=[1, 3, 4],
        context=16,
        repeats=2,
        warmup=1,
        head_fraction=0.5,
        calibrate=False,
        progress=False,
    )
    assert [(r["batch"], r["width"]) for r in rows] == [(b, w) for b in (1, 2) for w in (1, 3, 4)]
    assert [r["kind"] for r in rows[:3]] == ["decode", "verify", "verify"]
    for r in rows:
        assert r["full_seconds"] == pytest.approx(3 * r["slice_seconds"] + r["head_seconds"])  # 6 layers / 2 timed
        assert r["full_weight_bytes"] == 6 * TINY_LAYER_PARAMS * 4 + 64 * 4 + 64 * 1000 * 4  # layers, norm, head
        assert r["full_kv_bytes"] == 3 * r["slice_kv_bytes"]
        assert r["full_bytes"] == r["full_weight_bytes"] + r["full_kv_bytes"]
        assert r["achieved_bandwidth_bytes_per_s"] == pytest.approx(r["full_bytes"] / r["full_seconds"])
    assert meta["layers_timed"] == 2 and meta["num_hidden_layers"] == 6 and meta["dtype"] == "float32"


@pytest.mark.parametrize(
    "kwargs,name",
    [
        ({"layers": 0}, "layers"),
        ({"layers": 7}, "layers"),
        ({"widths": [0]}, "widths"),
        ({"batches": []}, "batches"),
        ({"context": -1}, "context"),
        ({"dtype": "int8"}, "dtype"),
        ({"head_fraction": 1.5}, "head_fraction"),
        ({"threads": 0}, "threads"),
    ],
)
def test_run_rejects_bad_input(kwargs, name):
    args = dict(layers=1, batches=[1], widths=[1], context=4, repeats=1, warmup=0, calibrate=False, progress=False)
    with pytest.raises(ValueError, match=name):
        bench.run(TINY, "tiny", **{**args, **kwargs})


def test_run_restores_the_thread_count():
    before = torch.get_num_threads()
    meta, _ = bench.run(
        TINY,
        "tiny",
        layers=1,
        batches=[1],
        widths=[1],
        context=4,
        repeats=1,
        warmup=0,
        calibrate=False,
        progress=False,
        threads=1,
    )
    assert meta["torch_threads"] == 1 and torch.get_num_threads() == before


def test_asking_for_a_gpu_that_is_not_there_is_an_error():
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    with pytest.raises(ValueError, match="device"):
        bench.resolve_device("cuda")
    assert bench.resolve_device(None) == "cpu"


def test_cli_writes_a_csv_with_provenance_and_one_row_per_grid_point(tmp_path, monkeypatch):
    monkeypatch.setattr(
        bench.os, "getloadavg", lambda: (0.5, 0.5, 0.5)
    )  # a quiet machine: the load guard is tested below
    config = tmp_path / "tiny.json"
    config.write_text(json.dumps(TINY))
    out = tmp_path / "timings" / "cpu_tiny.csv"
    bench.main(
        [
            "--config",
            str(config),
            "--layers",
            "2",
            "--batches",
            "1",
            "3",
            "--widths",
            "1",
            "5",
            "--context",
            "12",
            "--repeats",
            "2",
            "--warmup",
            "1",
            "--note",
            "unit test",
            "--quiet",
            "--out",
            str(out),
        ]
    )
    meta, rows = bench.read_timings(out)
    for key in PROVENANCE + ("measured_bandwidth_bytes_per_s", "measured_flops_per_s"):
        assert key in meta, f"provenance lacks {key}"
    assert meta["torch_version"] == torch.__version__
    assert meta["model"] == "tiny" and meta["note"] == "unit test" and meta["host_cpu_count"] >= 1
    assert "--layers 2" in meta["command"]
    assert meta["measured_bandwidth_bytes_per_s"] > 0 and meta["measured_flops_per_s"] > 0
    assert len(rows) == 4 and set(rows[0]) == set(bench.COLUMNS)
    assert all(isinstance(r["full_seconds"], float) and r["full_seconds"] > 0 for r in rows)


def test_module_runs_from_the_command_line():
    done = subprocess.run(
        [sys.executable, "-m", "specdec.measure.bench", "--help"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    for option in (
        "--model",
        "--layers",
        "--dtype",
        "--device",
        "--batches",
        "--widths",
        "--context",
        "--repeats",
        "--out",
    ):
        assert option in done.stdout, f"--help does not mention {option}"


def test_shipped_timing_files_have_provenance_and_are_cpu_runs():
    files = sorted((DATA_DIR / "timings").glob("*.csv"))
    assert files, "data/timings/ holds no timing file"
    for path in files:
        meta, rows = bench.read_timings(path)
        for key in PROVENANCE + ("measured_bandwidth_bytes_per_s", "measured_flops_per_s"):
            assert key in meta, f"{path.name}: provenance lacks {key}"
        assert rows and set(rows[0]) == set(bench.COLUMNS), path.name
        if meta["device"] == "cpu":
            assert path.name.startswith("cpu_"), f"{path.name}: CPU runs are named cpu_*.csv"
        assert str(meta.get("reliable", "")).startswith("yes"), (
            f"{path.name}: a shipped run must have been measured on a quiet machine (load average <= cores)"
        )


def _fake_load(monkeypatch, load, cores=2):
    monkeypatch.setattr(bench.os, "getloadavg", lambda: (load, load, load))
    monkeypatch.setattr(bench.os, "cpu_count", lambda: cores)


def test_a_run_on_a_busy_machine_is_refused_or_marked_unreliable(tmp_path, monkeypatch):
    _fake_load(monkeypatch, 8.04, cores=2)  # the first CPU run: load 8 on 2 cores
    meta, rows = bench.run(
        TINY, "tiny", layers=1, batches=[1], widths=[1], context=4, repeats=1, warmup=0, calibrate=False, progress=False
    )
    assert meta["load_average_1min_start"] == 8.04 and meta["host_cpu_count"] == 2
    assert bench.load_verdict(meta)[0] is False
    out = tmp_path / "busy.csv"
    with pytest.raises(bench.BusyMachineError, match="load average"):
        bench.write_csv(out, meta, rows)
    assert not out.exists()
    bench.write_csv(out, meta, rows, allow_busy=True)
    written, _ = bench.read_timings(out)
    assert str(written["reliable"]).startswith("no")


def test_a_run_on_a_quiet_machine_is_written_and_marked_reliable(tmp_path, monkeypatch):
    _fake_load(monkeypatch, 0.4, cores=2)
    meta, rows = bench.run(
        TINY, "tiny", layers=1, batches=[1], widths=[1], context=4, repeats=1, warmup=0, calibrate=False, progress=False
    )
    written, _ = bench.read_timings(bench.write_csv(tmp_path / "quiet.csv", meta, rows))
    assert str(written["reliable"]).startswith("yes")


def test_the_load_rule_is_load_above_the_core_count():
    assert bench.load_verdict({"host_cpu_count": 2, "load_average_1min_start": 2.0})[0] is True
    assert (
        bench.load_verdict({"host_cpu_count": 2, "load_average_1min_start": 0.5, "load_average_1min_end": 2.5})[0]
        is False
    )
    assert bench.load_verdict({"host_cpu_count": 4})[0] is True  # nothing recorded: cannot tell


def test_cli_refuses_to_write_a_busy_run(tmp_path, monkeypatch):
    _fake_load(monkeypatch, 9.0, cores=2)
    config = tmp_path / "tiny.json"
    config.write_text(json.dumps(TINY))
    out = tmp_path / "busy.csv"
    args = [
        "--config",
        str(config),
        "--layers",
        "1",
        "--batches",
        "1",
        "--widths",
        "1",
        "--context",
        "4",
        "--repeats",
        "1",
        "--warmup",
        "0",
        "--no-calibrate",
        "--quiet",
        "--out",
        str(out),
    ]
    with pytest.raises(SystemExit, match="load average"):
        bench.main(args)
    assert not out.exists()
    bench.main(args + ["--allow-busy"])
    assert str(bench.read_timings(out)[0]["reliable"]).startswith("no")
