"""Every notebook: the solution runs and passes its own tests, the learner version earns nothing,
and notebooks/ is exactly what nbgrader releases from solutions/; notebook 11 leaves no engine running."""

import os
import time

import nbformat
import pytest
from nbhelpers import (
    ASSIGNMENTS,
    EXECUTED,
    MEASUREMENTS,
    NOTEBOOK_SECONDS,
    SESSION_START,
    error_outputs,
    graded_code_cells,
    judge,
    learner_path,
    read,
    solution_path,
    validate,
)

from autograde.release import release
from specdec.measure.my_measurements import FILE as INSIGHTS_FILE

pytestmark = pytest.mark.notebooks


def test_there_are_assignments():
    assert ASSIGNMENTS, "solutions/ holds no assignment"
    assert ASSIGNMENTS[0] == "01_decode_is_bandwidth_bound"


RAN_HERE = set()  # solutions this module executed itself


@pytest.mark.parametrize("name", ASSIGNMENTS)
def test_solution_executes_and_passes_every_graded_test(name):
    """In full mode, within the budget. Each solution executes once per test run: where the browser test ran
    it (Run All in JupyterLab, full mode) this judges the outputs it saved; otherwise it executes it here."""
    if name in EXECUTED:
        path, seconds = EXECUTED[name]
        results, executed = judge(path)
        how = "Run All in JupyterLab (tests/test_browser.py), outputs judged by nbgrader's Validator"
    else:
        results, executed, seconds = validate(solution_path(name))
        how = "executed by nbgrader's Validator"
        RAN_HERE.add(name)
    assert results == {}, f"{name}: nbgrader Validator reports {results} ({how})"
    assert error_outputs(executed) == [], f"{name}: cells raised errors ({how})"
    assert seconds < NOTEBOOK_SECONDS, f"{name} took {seconds:.0f} s, budget {NOTEBOOK_SECONDS} s ({how})"
    print(f"{name}: solution validated in {seconds:.1f} s, {how}")


@pytest.mark.parametrize("name", ASSIGNMENTS)
def test_untouched_learner_notebook_fails_every_graded_test(name, monkeypatch, tmp_path):
    monkeypatch.setenv("SPECDEC_QUICK", "1")  # smaller measurement sweeps: only the grading matters here
    nb = read(learner_path(name))
    graded = {c.source.strip() for c in graded_code_cells(nb)}
    assert graded, f"{name}: the learner notebook has no graded test cell"
    # run it to its last graded test cell: what follows (measurements, plots) cannot change a grade
    tests = {id(c) for c in graded_code_cells(nb)}
    last = max(i for i, c in enumerate(nb.cells) if id(c) in tests)
    nb.cells = nb.cells[: last + 1]
    short = tmp_path / f"{name}.ipynb"
    nbformat.write(nb, str(short))
    results, executed, _ = validate(short)
    assert "changed" not in results and "type_changed" not in results, results
    failed = {f["source"] for f in results.get("failed", [])}
    passing = graded - failed
    assert not passing, (
        f"{name}: {len(passing)} graded test(s) pass on the untouched learner notebook:\n"
        + "\n---\n".join(sorted(passing))
    )


def test_learner_notebooks_are_a_fresh_release_of_the_solutions(tmp_path):
    release(release_dir=str(tmp_path / "release"), db_url=f"sqlite:///{tmp_path / 'gradebook.db'}", given=False)
    for name in ASSIGNMENTS:
        fresh, committed = read(tmp_path / "release" / name / f"{name}.ipynb"), read(learner_path(name))
        assert len(fresh.cells) == len(committed.cells), f"{name}: cell count differs; run `make release`"
        for i, (a, b) in enumerate(zip(fresh.cells, committed.cells)):
            where = f"{name} cell {i}: notebooks/ is out of date; run `make release`"
            assert a.cell_type == b.cell_type, where
            assert a.source == b.source, where
            assert a.metadata.get("nbgrader") == b.metadata.get("nbgrader"), where
        extra = sorted(p.name for p in (learner_path(name).parent).iterdir() if p.name != INSIGHTS_FILE)
        fresh_files = sorted(p.name for p in (tmp_path / "release" / name).iterdir())
        assert extra == fresh_files, f"{name}: files differ from a fresh release: {extra} vs {fresh_files}"


@pytest.mark.parametrize("name", ASSIGNMENTS)
def test_solutions_are_committed_without_outputs(name):
    nb = read(solution_path(name))
    dirty = [i for i, c in enumerate(nb.cells) if c.cell_type == "code" and (c.outputs or c.execution_count)]
    assert not dirty, f"{name}: cells {dirty} carry outputs; clear them before committing"


# notebooks 09 and 10 choose their kernel path by measurement: run them again with the CPU capped to AVX2 (what
# most laptops have), in quick mode, where bf16 verification is not cheap and another path has to be chosen; 12 times
# its mixture-of-experts twin in bf16, whose expert reads cost more per row there (and take longest)
CAPPED = ("09_speculation_that_pays", "10_batches_and_servers", "12_moe_and_quantised")


@pytest.mark.parametrize("name", CAPPED)
def test_solution_executes_under_the_avx2_cap(name, monkeypatch):
    from specdec.measure.kernels import AVX2_CAP

    for key, value in {**AVX2_CAP, "SPECDEC_QUICK": "1"}.items():
        monkeypatch.setenv(key, value)
    results, executed, seconds = validate(solution_path(name))
    assert results == {}, f"{name} under the AVX2 cap: nbgrader Validator reports {results}"
    assert error_outputs(executed) == [], f"{name} under the AVX2 cap: cells raised errors"
    printed = "".join(o.get("text", "") for c in executed.cells if c.cell_type == "code" for o in c.outputs)
    assert "AVX2 kernels" in printed or "DEFAULT kernels" in printed, f"{name}: the cap did not reach the kernel"
    assert seconds < NOTEBOOK_SECONDS, f"{name} under the AVX2 cap took {seconds:.0f} s, budget {NOTEBOOK_SECONDS} s"
    print(f"{name}: solution validated under the AVX2 cap in {seconds:.1f} s")


def test_judging_saved_outputs_fails_a_graded_cell_that_holds_an_error(tmp_path):
    """What the solution test relies on when the browser ran the notebook: nbgrader's Validator judges saved
    outputs without executing, and an error in a graded cell's output is a failure."""
    nb = read(solution_path("03_acceptance_math"))
    path = tmp_path / "saved.ipynb"
    nbformat.write(nb, str(path))
    results, _ = judge(path)
    assert results == {}, results
    first = graded_code_cells(nb)[0]
    first.outputs = [nbformat.v4.new_output("error", ename="AssertionError", evalue="rule: x", traceback=[])]
    nbformat.write(nb, str(path))
    results, _ = judge(path)
    assert [f["source"] for f in results.get("failed", [])] == [first.source], results


# the speed notebooks save what the learner's machine measured beside themselves (specdec/measure/my_measurements.py)
RECORDING = {
    "05_acceptance_in_practice": ("alpha", "c", "v", "speedup_by_k"),
    "09_speculation_that_pays": ("path", "c", "v", "alpha", "k", "speedup"),
    "10_batches_and_servers": ("path", "bandwidth_gb_s", "crossover", "speedup_by_batch"),
    "11_real_engines": ("load", "service_rate", "gate", "vllm_speedup_by_batch"),
}


@pytest.mark.parametrize("name", sorted(RECORDING))
def test_a_speed_notebook_saves_its_measurements_beside_itself(name):
    """After its run in this session (the browser's Run All, or the solution test above), the notebook's folder
    holds my_measurements.json: the machine and the keys the class plot reads, with numbers in them."""
    from specdec.engines.install import status
    from specdec.measure.my_measurements import load

    engines = status()
    if name == "11_real_engines" and not (engines["llama.cpp"] and engines["models"] and engines["vllm"]):
        assert os.environ.get("SPECDEC_REQUIRE_ENGINES") != "1", "make test requires the engines (make engines)"
        pytest.skip("11 measures nothing without its engines (make engines)")
    path = MEASUREMENTS.get(name) or solution_path(name).parent / INSIGHTS_FILE
    if name in EXECUTED:
        assert name in MEASUREMENTS, f"{name}: its browser run left no {INSIGHTS_FILE} beside it"
    assert path.is_file(), f"{name}: no {INSIGHTS_FILE} after its run in this session ({path})"
    assert path.stat().st_mtime >= SESSION_START, f"{name}: {path} is older than this test run"
    doc = load(path, notebook=name)
    missing = [k for k in RECORDING[name] if doc["measured"].get(k) is None]
    assert not missing, f"{name}: {path} lacks measured {missing}"
    assert doc["machine"]["capability"] and doc["machine"]["logical_cpus"] >= 1
    if "v" in RECORDING[name]:
        assert doc["measured"]["v"]["4"] > 0


ENGINE_PROCESSES = ("llama-server", "specdec.engines.vllm_bench")


def _engine_processes():
    """[(pid, command line)] of every llama-server and vLLM worker running on this machine."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
            with open(f"/proc/{entry}/stat") as f:
                zombie = f.read().rsplit(")", 1)[1].split()[0] == "Z"
        except OSError:
            continue
        if not zombie and any(name in cmd for name in ENGINE_PROCESSES):
            found.append((int(entry), cmd[:200]))
    return found


def test_notebook_11_leaves_no_engine_running():
    """Notebook 11 starts llama-server and a vLLM worker; after its run in this session (the browser's Run All, or
    the solution test above, which come first in the suite) none of them may still run."""
    name = "11_real_engines"
    assert name in ASSIGNMENTS
    if name not in EXECUTED and name not in RAN_HERE:
        pytest.skip(f"{name} did not run in this session (run the suite, or test_solution_executes for it, first)")
    time.sleep(2)
    assert _engine_processes() == [], f"engines still running after {name}'s run: {_engine_processes()}"
