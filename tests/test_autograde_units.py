"""Unit tests of the grading tool's parts that need no kernel and no bubblewrap run: the sandbox's command
line, the executor's run records, and the feedback a learner sees."""

import nbformat
import pytest

from autograde import REPO, sandbox
from autograde.assignment import load_assignment
from autograde.feedback import NOTE, SanitizeFeedback
from autograde.records import RunRecord, read_run_record, run_record_path, write_run_record

A = "01_decode_is_bandwidth_bound"


# ------------------------------------------------------------------------------------------ sandbox
def test_the_sandbox_binds_the_course_read_only_and_the_submission_alone_writable(tmp_path, monkeypatch):
    monkeypatch.setattr(sandbox, "bwrap_status", lambda: (True, "/usr/bin/bwrap"))
    shared = [str(REPO / "specdec"), str(REPO / "data")]
    argv = sandbox.bwrap_argv(
        cwd=tmp_path / "nb",
        scratch=tmp_path / "scratch",
        ipc_dir=tmp_path / "ipc",
        shared=shared,
        env={"PYTHONPATH": str(REPO), "SECRET": "x"},
        tmp_bytes=2**20,
    )
    pairs = list(zip(argv, argv[1:], argv[2:]))
    for path in shared:
        assert ("--ro-bind", path, path) in pairs, f"{path} must be bound read-only"
    writable = [(a, b) for flag, a, b in pairs if flag == "--bind"]
    assert writable == [
        (str(tmp_path / "ipc"), str(tmp_path / "ipc")),
        (str(tmp_path / "scratch"), str(tmp_path / "nb")),
    ], writable
    for flag in ("--unshare-all", "--unshare-user", "--die-with-parent", "--clearenv"):
        assert flag in argv
    assert ("--cap-drop", "ALL") in list(zip(argv, argv[1:]))
    assert ("--setenv", "PYTHONPATH", str(REPO)) in pairs  # the course package of this checkout
    assert not any(str(REPO / "solutions") in a for a in argv), "solutions/ must not be visible"
    assert not any(a.endswith("gradebook.db") for a in argv)


def test_the_sandbox_refuses_to_build_a_command_without_bubblewrap(tmp_path, monkeypatch):
    monkeypatch.setattr(sandbox, "bwrap_status", lambda: (False, "bubblewrap (bwrap) is not installed"))
    with pytest.raises(RuntimeError, match="not installed"):
        sandbox.bwrap_argv(cwd=tmp_path, scratch=tmp_path, ipc_dir=tmp_path, shared=[], env={}, tmp_bytes=1)


# ------------------------------------------------------------------------------------ run records
def test_a_run_record_round_trips_and_a_missing_one_is_empty(tmp_path):
    record = RunRecord(
        student="ada", assignment=A, notebook=A, events=[{"kind": "timeout", "cell": 3, "message": "m"}], seconds=1.5
    )
    path = write_run_record(tmp_path, record)
    assert path == run_record_path(tmp_path, "ada", A, A) and path.exists()
    assert read_run_record(tmp_path, "ada", A, A) == record
    assert read_run_record(tmp_path, "bob", A, A) == RunRecord()
    path.write_text("{not json")
    assert read_run_record(tmp_path, "ada", A, A) == RunRecord()


def test_a_run_record_reads_a_file_with_fewer_or_unknown_fields():
    """A record written by another version of the grader still reads: missing fields get their defaults."""
    record = RunRecord.from_dict(
        {"student": "ada", "stop": {"kind": "crash", "cell": 2, "message": "m"}, "not_a_field": 1}
    )
    assert (record.student, record.stop["kind"], record.events, record.review) == ("ada", "crash", [], "")


def test_the_executor_keeps_the_guards_rebound_field_of_an_integrity_failure_only():
    from autograde import executor
    from autograde.guard_kernel import REBOUND_FIELD

    content = {"ename": "GraderIntegrityError", "evalue": "reworded at will", REBOUND_FIELD: ["limits", "x" * 999]}
    assert executor.guard_rebound(content) == ["limits", "x" * executor.ERROR_LINE_CHARS]
    assert executor.guard_rebound({**content, "ename": "AssertionError"}) == []
    assert executor.guard_rebound({**content, REBOUND_FIELD: "limits"}) == []
    assert executor.guard_rebound({"ename": "GraderIntegrityError", "evalue": "no field"}) == []


# ---------------------------------------------------------------------------------------- feedback
def test_feedback_shows_trusted_results_and_no_output_or_hidden_text(tmp_path):
    nb = nbformat.read(str(REPO / "solutions" / A / f"{A}.ipynb"), as_version=4)
    assignment = load_assignment(A)
    test = assignment.tests[0]
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text="SECRET kernel output\n")]
        if cell.metadata.get("nbgrader", {}).get("grade_id") == test.grade_id:
            cell.outputs.append(
                nbformat.v4.new_output(
                    "error",
                    ename="AssertionError",
                    evalue="rule: SECRET-VALUE 12345",
                    traceback=[f"autograde: test cell line {test.visible_lines + 3}", "AssertionError: x"],
                )
            )
    write_run_record(tmp_path, RunRecord(student="ada", assignment=A, notebook=A, review="Flagged because of a test."))
    pre = SanitizeFeedback(record_dir=str(tmp_path))
    out, _ = pre.preprocess(nb, {"nbgrader": {"student": "ada", "assignment": A, "notebook": A}})
    text = nbformat.writes(out)
    assert "SECRET" not in text and "12345" not in text
    assert NOTE in text and "Flagged because of a test." in text
    summaries = [o.text for c in out.cells if c.cell_type == "code" for o in c.outputs]
    assert any("in the hidden tests" in s for s in summaries), summaries
    assert sum(s.startswith("autograder: passed") for s in summaries) == len(assignment.tests) - 1


def test_feedback_without_a_record_still_hides_every_output():
    nb = nbformat.read(str(REPO / "notebooks" / A / f"{A}.ipynb"), as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text="kernel said this\n")]
    out, _ = SanitizeFeedback().preprocess(nb, {"nbgrader": {"student": "x", "assignment": A, "notebook": A}})
    assert "kernel said this" not in nbformat.writes(out)


def test_the_executor_names_its_limits():
    from autograde import executor

    assert executor.SandboxedExecute.class_traits()["memory_bytes"].default_value == executor.MEMORY_BYTES
    assert executor.SandboxedExecute.class_traits()["notebook_timeout"].default_value == executor.NOTEBOOK_SECONDS
    assert not hasattr(executor, "RUNS"), "run records are files (autograde.records), not module state"


# ------------------------------------------------------------------------------------------ class grading pool
def _what_a_worker_inherited():
    import zmq

    from autograde import grade_class

    return zmq.Context._instance is not None, grade_class._WORKER


def test_pool_workers_start_fresh_without_the_parents_zeromq_context():
    """`class --jobs N` grades in worker processes started fresh: by then the grader has run the preflight's
    kernel (a ZeroMQ context and its threads); a worker forked from that inherits them (with fork, 3 of about 20
    class runs sat idle for 120 s after a submission's last cell: docs/classroom.md)."""
    import zmq

    from autograde import grade_class

    zmq.Context.instance()  # what the preflight's kernel client leaves in the grading process
    with grade_class.worker_pool(2, ("course", "assignment", False)) as pool:
        inherited = [pool.submit(_what_a_worker_inherited).result() for _ in range(2)]
    assert all(not has_context for has_context, _ in inherited), "a worker inherited the parent's ZeroMQ context"
    assert all(state == ("course", "assignment", False) for _, state in inherited), inherited


def _what_a_worker_has_loaded():
    import sys

    from autograde.judges import nb04

    return nb04._load_pair.cache_info().currsize, "transformers" in sys.modules


def test_a_pool_warmed_for_a_judged_notebook_has_its_judges_models_before_the_first_submission():
    """With `warm`, every worker starts at once and loads what the notebook's judges need before it takes a task
    (the loading then overlaps the grader's set-up instead of the first kernels); without it, nothing is loaded."""
    from autograde import grade_class

    with grade_class.worker_pool(2, ("course", "assignment", False), warm="04_speculative_decoder") as pool:
        assert len(pool._processes) == 2  # started now, not at the first submission
        loaded = [pool.submit(_what_a_worker_has_loaded).result() for _ in range(4)]
    assert all(pair == 1 and transformers for pair, transformers in loaded), loaded
    with grade_class.worker_pool(2, ("course", "assignment", False)) as pool:
        assert pool.submit(_what_a_worker_has_loaded).result() == (0, False)


# ------------------------------------------------------------------------------------------ submission repair
def test_a_copy_made_before_a_cell_was_renamed_is_graded_as_that_cell():
    """A learner's copy keeps the ids it was released with; a given cell the course renamed since (its release
    lists the old id in `former_ids`) is that cell, not the student's own code redefining the given names."""
    from autograde.notebook_io import released_notebook
    from autograde.repair import normalize

    name = "07_batch_crossover"
    released = released_notebook(load_assignment(name))
    old = nbformat.reads(nbformat.writes(released), as_version=4)
    renamed = [c for c in old.cells if c.metadata.get("former_ids")]
    assert renamed, "07 has a renamed given cell"
    cell = renamed[0]
    new_id = cell.metadata["nbgrader"]["grade_id"]
    cell.metadata["nbgrader"]["grade_id"] = cell.metadata["former_ids"][0]
    notes = normalize(old, released)
    ids = [c.metadata["nbgrader"]["grade_id"] for c in old.cells if "nbgrader" in c.metadata]
    assert ids.count(new_id) == 1 and cell.metadata["nbgrader"]["grade_id"] == new_id, (ids, notes)
    assert any("renamed since your copy was made" in n for n in notes), notes
    assert len(old.cells) == len(released.cells), "no second copy of the given cell may be restored"


# ------------------------------------------------------------------------------------------ course cells that time out
def test_a_course_cell_that_times_out_is_recorded_as_the_courses_and_a_students_is_not():
    """A cell of the released notebook, unchanged, that runs past the cell limit goes into the run record's
    course_timeouts (grading then holds the submission for an instructor: autograde.pipeline); a cell the student
    wrote that does the same is only a timeout event, the student's own."""
    import nbformat

    from autograde.assignment import sha256
    from autograde.executor import SandboxedExecute

    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell("import time"),
        nbformat.v4.new_code_cell("time.sleep(30)  # course"),
        nbformat.v4.new_code_cell("time.sleep(30)  # student"),
    ]
    ex = SandboxedExecute(
        use_sandbox=False,
        guard=False,
        timeout=2,
        notebook_timeout=60,
        course_cells=[sha256(c.source) for c in nb.cells[:2]],
    )
    ex.preprocess(nb, {"metadata": {"path": "/tmp"}})
    assert ex._record.course_timeouts == [{"cell": 1, "seconds": 2}]
    assert [e["cell"] for e in ex._record.events if e["kind"] == "timeout"] == [1, 2]


def test_the_kernel_is_held_to_its_share_of_the_cores_whatever_the_notebook_asks():
    """`class --jobs N` gives each kernel cores / N threads: OpenMP and MKL start at that size and the guard kernel
    caps torch.set_num_threads, so a notebook's set_num_threads(2) gets 1 thread when two kernels share 2 cores."""
    import nbformat

    from autograde.executor import SandboxedExecute

    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell(
            "import os, torch\ntorch.set_num_threads(2)\nprint(torch.get_num_threads(), os.environ['OMP_NUM_THREADS'])"
        )
    ]
    ex = SandboxedExecute(use_sandbox=False, guard=False, timeout=120, notebook_timeout=120, threads=1)
    out, _ = ex.preprocess(nb, {"metadata": {"path": "/tmp"}})
    assert out.cells[0].outputs[0]["text"].split() == ["1", "1"], out.cells[0].outputs
    assert ex._record.threads == 1


# ------------------------------------------------------------------------------------------ measuring cells
def test_grading_does_not_run_the_courses_measuring_cells_but_runs_a_changed_one():
    """A cell tagged `measures`, as released, is not run under grading: its output says why and the run record
    names it with what it would have set; the same cell changed by the student is the student's code and runs;
    with skip_measuring off (`--measure`) the course's copy runs too."""
    import nbformat

    from autograde.assignment import sha256
    from autograde.executor import SKIPPED_NOTE, SandboxedExecute

    measuring = (
        "TIMED = 41\nfor k in range(2):\n    pass\nif TIMED:\n    INNER = [j for j in range(2)]\n"
        "def f(x):\n    local = x\nprint('measured')"
    )
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell(measuring),
        nbformat.v4.new_code_cell(measuring + "  # changed"),
        nbformat.v4.new_code_cell("print(TIMED + 1)"),
    ]
    for skip, first in ((True, SKIPPED_NOTE), (False, "measured\n")):
        ex = SandboxedExecute(
            use_sandbox=False,
            guard=False,
            timeout=60,
            notebook_timeout=120,
            course_cells=[sha256(measuring)],
            measure_cells=[sha256(measuring)],
            skip_measuring=skip,
        )
        out, _ = ex.preprocess(nbformat.reads(nbformat.writes(nb), as_version=4), {"metadata": {"path": "/tmp"}})
        texts = ["".join(o.get("text", "")) for c in out.cells for o in c.outputs]
        assert texts == [first, "measured\n", "42\n"], texts
        assert ex._record.skipped == ([{"cell": 0, "names": ["INNER", "TIMED", "f", "k"]}] if skip else []), (
            ex._record.skipped
        )
        assert out.cells[0].execution_count is None if skip else out.cells[0].execution_count == 1


def test_a_name_only_a_skipped_measuring_cell_sets_gets_its_own_hint():
    """A test that fails with NameError for a name set by a cell grading did not run says so and what to do;
    another NameError keeps the general hint."""
    from autograde.explain import explain
    from autograde.outcomes import outcomes

    assignment = load_assignment("09_speculation_that_pays")
    test = assignment.tests[0]
    released = nbformat.read(str(REPO / "notebooks" / assignment.name / f"{assignment.notebook}.ipynb"), as_version=4)
    nb = nbformat.reads(nbformat.writes(released), as_version=4)
    index = next(i for i, c in enumerate(nb.cells) if c.metadata.get("nbgrader", {}).get("grade_id") == test.grade_id)
    record = RunRecord(skipped=[{"cell": 10, "names": ["KS", "rows"]}])
    for name, special in (("KS", True), ("other_name", False)):
        nb.cells[index].outputs = [
            nbformat.v4.new_output("error", ename="NameError", evalue=f"name '{name}' is not defined", traceback=[])
        ]
        outcome = outcomes(nb, assignment, record)[test.grade_id]
        hint = explain(test, outcome).hint
        assert ("cell 10, a cell that only measures" in hint) == special, hint
        assert ("take it as an argument" in hint) == special, hint


def test_measuring_tags_sit_on_plain_course_cells_only():
    """`measures` marks a cell grading may leave out: never a solution, test or locked cell, and the learner
    notebooks carry the same tags as the solutions (release keeps them)."""
    from autograde import assignments
    from autograde.assignment import MEASURES_TAG

    tagged = {}
    for name in assignments():
        a = load_assignment(name)
        for folder in ("solutions", "notebooks"):
            nb = nbformat.read(str(REPO / folder / name / f"{a.notebook}.ipynb"), as_version=4)
            cells = [c for c in nb.cells if MEASURES_TAG in c.metadata.get("tags", [])]
            assert all(c.cell_type == "code" and not c.metadata.get("nbgrader") for c in cells), (name, folder)
            tagged[name, folder] = [c.source for c in cells]
        assert tagged[name, "solutions"] == tagged[name, "notebooks"], name
    assert all(
        tagged[n, "solutions"]
        for n in ("05_acceptance_in_practice", "09_speculation_that_pays", "10_batches_and_servers")
    ), "the measuring notebooks tag their cells"


# ------------------------------------------------------------------------------------------ a judge that crashes
def test_an_answer_that_crashes_a_judge_fails_its_cell_and_the_notebook_goes_on(monkeypatch):
    """A judge that raises anything but its verdict (an overflow, a TypeError on an object posing as a tensor) fails
    the student's cell with a rule the learner reads; the run record keeps the judge's exception for the
    instructor; the cells after it run (before issue 77 the submission ended as `error`, ungraded)."""
    import nbformat

    from autograde import executor

    def crashing(probe, rng):
        raise OverflowError("cannot convert float infinity to integer")

    def passing(probe, rng):
        return None

    judges = {"test_crash": crashing, "test_after": passing}
    monkeypatch.setattr(executor, "judge_for", lambda assignment, grade_id: judges.get(grade_id))
    monkeypatch.setattr(executor, "warm_judges", lambda assignment: None)
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(f'"""{g}"""\nassert True') for g in judges]
    for cell, grade_id in zip(nb.cells, judges):
        cell.metadata["nbgrader"] = {
            "grade": True,
            "grade_id": grade_id,
            "locked": True,
            "points": 1,
            "schema_version": 3,
            "solution": False,
        }
    nb.cells.append(nbformat.v4.new_code_cell("print('after')"))
    ex = executor.SandboxedExecute(use_sandbox=False, guard=False, timeout=30, notebook_timeout=120, threads=1)
    out, _ = ex.preprocess(nb, {"metadata": {"path": "/tmp"}, "nbgrader": {"assignment": "x", "student": "s"}})
    errors = [o for o in out.cells[0].outputs if o.output_type == "error"]
    assert len(errors) == 1 and errors[0].evalue.startswith("rule: returns what the contract says"), errors
    assert "OverflowError" in errors[0].evalue
    assert not [o for o in out.cells[1].outputs if o.output_type == "error"]
    assert out.cells[2].outputs[0]["text"] == "after\n"
    judge_events = [e for e in ex._record.events if e["kind"] == "judge"]
    assert len(judge_events) == 1 and "crashing raised OverflowError: cannot convert" in judge_events[0]["message"]
    assert ex._record.stop is None


def test_kernels_started_side_by_side_all_start_and_each_answers_its_own_cells():
    """Issue 77 (a grading `error` 0.5 s into a run while other kernels started): kernels now talk over Unix
    sockets in their own run folder, so there is no free-port pick to race on. Six executors start their kernels at
    once from six threads, on this machine's cores, and every one runs its notebook and gets back its own output."""
    import threading

    import nbformat

    from autograde.executor import SandboxedExecute

    n, results, errors = 6, {}, []
    start = threading.Barrier(n)

    def grade(i):
        nb = nbformat.v4.new_notebook()
        nb.cells = [nbformat.v4.new_code_cell(f"import os\nprint({i}, os.getpid())")]
        ex = SandboxedExecute(use_sandbox=False, guard=False, timeout=60, notebook_timeout=120, threads=1)
        try:
            start.wait()
            out, _ = ex.preprocess(nb, {"metadata": {"path": "/tmp"}})
            results[i] = out.cells[0].outputs[0]["text"].split()
            assert ex._record.stop is None, ex._record.stop
        except Exception as e:  # noqa: BLE001  (reported below, with the kernel that failed)
            errors.append(f"kernel {i}: {type(e).__name__}: {e}")

    threads = [threading.Thread(target=grade, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not errors, errors
    assert sorted(results) == list(range(n))
    assert all(out[0] == str(i) for i, out in results.items()), results
    assert len({out[1] for out in results.values()}) == n, f"two executors shared a kernel: {results}"
