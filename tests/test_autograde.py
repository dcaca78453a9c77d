"""The grading tool's parts (no kernel), and `python -m autograde check` end to end."""

import subprocess
import sys

import nbformat
import pytest

from autograde import NOTEBOOKS, REPO, SOLUTIONS, assignments, guard_kernel
from autograde.assignment import is_locked_cell, load_assignment, nbgrader_meta, source_notebook
from autograde.grade_class import discover
from autograde.lint import hidden_names_used_elsewhere
from autograde.notebook_io import read_json_notebook
from autograde.release import tool_env
from autograde.repair import normalize
from autograde.scan import findings_in, scan

pytestmark = pytest.mark.notebooks

A = "01_decode_is_bandwidth_bound"
SOLUTION = SOLUTIONS / A / f"{A}.ipynb"
LEARNER = NOTEBOOKS / A / f"{A}.ipynb"


# ------------------------------------------------------------------------------------- assignment
def test_assignment_parts_come_from_the_part_headers():
    a = load_assignment(A)
    assert [p.label for p in a.parts] == ["Part A", "Part B", "Part C", "Part D"]
    assert a.points == 9
    assert a.parts[0].grade_ids == ["test_weight_bytes", "test_weight_bytes_models", "test_weight_bytes_bad_input"]
    assert a.parts[0].functions == ["weight_bytes"]
    assert "16,060,522,496" in a.parts[0].example
    test = a.test("test_weight_bytes")
    assert test.visible_lines == 6 and test.line(2) == "got = weight_bytes(cfg_8b)"


def test_read_json_notebook_names_the_problem(tmp_path):
    bad = tmp_path / "x.ipynb"
    bad.write_text(SOLUTION.read_text()[:500])
    with pytest.raises(ValueError, match="not valid JSON"):
        read_json_notebook(bad)
    bad.write_bytes(b"\xff\xfe binary")
    with pytest.raises(ValueError, match="UTF-8"):
        read_json_notebook(bad)
    bad.write_text('{"a": 1}')
    with pytest.raises(ValueError, match="not a notebook"):
        read_json_notebook(bad)


def test_normalize_restores_tests_and_drops_forged_metadata():
    released = nbformat.read(str(LEARNER), as_version=4)
    nb = nbformat.read(str(LEARNER), as_version=4)
    tests = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade")]
    nb.cells = [c for c in nb.cells if c not in tests[1:]]  # delete every test cell but the first
    fake = nbformat.v4.new_code_cell("pass")
    fake.metadata["nbgrader"] = {"grade": True, "grade_id": "not_a_test", "points": 100}
    nb.cells.insert(0, fake)
    notes = normalize(nb, released)
    ids = [c.metadata.get("nbgrader", {}).get("grade_id") for c in nb.cells]
    assert [i for i in ids if i] == [
        i for i in (c.metadata.get("nbgrader", {}).get("grade_id") for c in released.cells) if i
    ]
    assert "nbgrader" not in nb.cells[0].metadata
    assert any(f"restored {len(tests) - 1}" in n for n in notes) and any("not_a_test" in n for n in notes)


def test_normalize_puts_back_a_deleted_setup_cell_where_it_was():
    released = nbformat.read(str(LEARNER), as_version=4)
    nb = nbformat.read(str(LEARNER), as_version=4)
    setup_at = next(i for i, c in enumerate(nb.cells) if is_locked_cell(c))
    nb.cells[setup_at].source = "import numpy as np  # my own set-up"
    del nb.cells[setup_at].metadata["nbgrader"]  # metadata stripped: no longer the locked cell
    notes = normalize(nb, released)
    restored = [i for i, c in enumerate(nb.cells) if is_locked_cell(c)]
    assert restored == [0], restored  # on top: it runs before everything
    assert nb.cells[0].source == released.cells[setup_at].source
    assert any("restored 1" in n and "setup" in n for n in notes), notes


@pytest.mark.parametrize("name", assignments())
def test_every_setup_cell_is_locked(name):
    """nbgrader restores a locked cell's source at autograde; the guard records what it binds."""
    nb = nbformat.read(str(source_notebook(name)), as_version=4)
    setup = [c for c in nb.cells if c.cell_type == "code" and "setup" in c.metadata.get("tags", [])]
    assert setup, f"{name}: no setup cell"
    assert all(is_locked_cell(c) for c in setup), f"{name}: a setup cell is not an nbgrader locked cell"
    assert is_locked_cell(setup[0]) and nbgrader_meta(setup[0])["grade_id"] == "setup"


# ------------------------------------------------------------------------------------------- scan
def test_scan_passes_the_solution_and_flags_tampering():
    assert scan(nbformat.read(str(SOLUTION), as_version=4), nbformat.read(str(LEARNER), as_version=4)) == []
    found = findings_in(
        "import sys\nx = sys._getframe(1).f_globals\nget_ipython()\ndef abs(x): return 0\n"
        "math.isclose = lambda *a: True\ngetattr(obj, name)\n",
        {"math"},
    )
    for needle in (
        "._getframe",
        ".f_globals",
        "get_ipython",
        "redefines builtin abs",
        "monkeypatches math.isclose",
        "getattr with a computed name",
    ):
        assert needle in found, found
    assert findings_in("import torch\ntorch.backends.cudnn.benchmark = True\nmodel.modules()\n", {"torch"}) == []
    # aliasing the dynamic attribute functions hides the names they reach from the checks above
    found = findings_in(
        "put = setattr\nput(f, '__co' + 'de__', g)\nlist(map(getattr, [a], ['x']))\n"
        "f.__closure__[0].cell_contents = 1\n"
    )
    assert {"setattr passed on as a value", "getattr passed on as a value", ".cell_contents"} <= set(found), found
    assert findings_in("x = getattr(model, 'config')\nif hasattr(model, 'lm_head'): pass\n") == []


# ------------------------------------------------------------------------------------------ guard
def test_guard_hides_shadowed_builtins_and_catches_patching():
    ns = {"__builtins__": __builtins__, "abs": lambda x: 0}
    failure = guard_kernel.run_test_cell("assert abs(-3) == 3", ns)
    assert failure is None and "abs" in ns  # the student's abs is hidden, then back
    import builtins

    real = builtins.abs
    ns = {"__builtins__": builtins, "f": lambda: setattr(builtins, "abs", lambda x: 0) or 1}
    failure = guard_kernel.run_test_cell("f()\nassert abs(-1) == 1", ns)
    assert builtins.abs is real
    assert failure is not None and failure[0] in ("AssertionError", "GraderIntegrityError")
    failure = guard_kernel.run_test_cell("x = 1\nassert x == 2, 'nope'", {})
    assert failure == ("AssertionError", "nope", 2)


def test_guard_keeps_hidden_definitions_away_from_the_student():
    ns = {"__builtins__": __builtins__}
    exec("def f():\n    try:\n        return want\n    except NameError:\n        return 0\n", ns)
    cell = (
        "got = f()\nassert got == 0\n### BEGIN HIDDEN TESTS\nwant = 5\nassert f() == 5, 'oracle'\n### END HIDDEN TESTS"
    )
    assert guard_kernel.run_test_cell(cell, ns) == ("AssertionError", "oracle", 5)
    assert ns["got"] == 0 and "want" not in ns  # the visible part's names stay, the hidden ones do not


@pytest.mark.parametrize("name", assignments())
def test_no_cell_depends_on_a_hidden_definition(name):
    """The guard keeps what a hidden block defines inside its test cell: nothing else may use it."""
    nb = nbformat.read(str(source_notebook(name)), as_version=4)
    assert hidden_names_used_elsewhere(nb) == [], f"{name}: (cell, name, defined in hidden block of)"


def test_hidden_dependency_detector_finds_one():
    nb = nbformat.v4.new_notebook()
    test = nbformat.v4.new_code_cell("assert 1\n### BEGIN HIDDEN TESTS\n_ref = 3\n### END HIDDEN TESTS")
    test.metadata["nbgrader"] = {"grade": True, "grade_id": "t", "solution": False, "points": 1}
    nb.cells = [test, nbformat.v4.new_code_cell("def g():\n    return _ref\n")]
    assert hidden_names_used_elsewhere(nb) == [(1, "_ref", "t")]


# ------------------------------------------------------------------------------------ submissions
def test_discover_handles_every_layout(tmp_path):
    subs = tmp_path / "subs"
    subs.mkdir()
    (subs / "alice.ipynb").write_bytes(LEARNER.read_bytes())  # one file per student
    (subs / "bob").mkdir()
    (subs / "bob" / "Untitled (1).ipynb").write_bytes(LEARNER.read_bytes())  # one folder, odd name
    (subs / "carol" / A).mkdir(parents=True)  # nbgrader submitted/
    (subs / "carol" / A / f"{A}.ipynb").write_bytes(LEARNER.read_bytes())
    (subs / "dave").mkdir()  # nothing in it
    (subs / "e v*e").mkdir()  # an unsafe name
    (subs / "e v*e" / f"{A}.ipynb").write_text("{")
    (subs / "notes.txt").write_text("not a submission")
    found = {s.student: s for s in discover(subs, load_assignment(A))}
    assert sorted(found) == ["alice", "bob", "carol", "dave", "e_v_e"]
    assert found["alice"].status == found["bob"].status == found["carol"].status == "ok"
    assert found["bob"].notebook.name == "Untitled (1).ipynb"
    assert found["dave"].status == "missing"
    assert found["e_v_e"].status == "corrupt" and "renamed" in found["e_v_e"].detail
    root = tmp_path / "course"
    (root / "submitted").mkdir(parents=True)
    (subs / "carol").rename(root / "submitted" / "carol")
    assert [s.student for s in discover(root, load_assignment(A))] == ["carol"]


# ------------------------------------------------------------------------------------- check (CLI)
def _check(path, tmp_path, cache):
    env = {**tool_env(), "XDG_CACHE_HOME": str(cache)}
    return subprocess.run(
        [sys.executable, "-m", "autograde", "check", str(path)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=600,
    )


@pytest.mark.timeout(600)
def test_check_gives_the_untouched_notebook_zero_and_one_hint_per_part(tmp_path, grader_cache):
    copy = tmp_path / "my work" / "notebook.ipynb"  # any folder, any name
    copy.parent.mkdir()
    copy.write_bytes(LEARNER.read_bytes())
    done = _check(copy, tmp_path, grader_cache)
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert "total: 0/9 points" in out, out
    assert out.count("hint:") == 4, out  # one per part: the same hint is not said twice
    assert out.count("\n  x test_") == 9, out  # every failing test of a part, not only the first (issue 78)
    for fn in ("weight_bytes", "ridge_point", "kv_bytes_per_token", "decode_step_seconds"):
        assert f"write {fn}()" in out, out
    assert "got = weight_bytes(cfg_8b)" in out  # the visible line that failed
    assert "BEGIN HIDDEN" not in out and "_ref_params" not in out


def test_check_refuses_what_it_cannot_grade(tmp_path, grader_cache):
    bad = tmp_path / "broken.ipynb"
    bad.write_text("{")
    done = _check(bad, tmp_path, grader_cache)
    assert done.returncode == 2 and "not valid JSON" in done.stdout, done.stdout


def test_release_command_still_works(tmp_path):
    from autograde.release import release

    assert release([A], release_dir=str(tmp_path / "r"), db_url=f"sqlite:///{tmp_path / 'g.db'}", given=False) == [A]
    assert (tmp_path / "r" / A / f"{A}.ipynb").exists()
    assert REPO.joinpath("autograde", "__main__.py").exists()


# ------------------------------------------------------------------------------------- rule labels
ALMOST_RIGHT = '''def expected_tokens(alpha, k):
    """The right formula, ValueError for alpha outside [0, 1] (NaN too) and k < 1: but k = 2.5 passes."""
    if not 0 <= alpha <= 1:
        raise ValueError(f"alpha must lie in [0, 1], got {alpha}")
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    if alpha == 1:
        return float(k + 1)
    return (1 - alpha ** (k + 1)) / (1 - alpha)
'''


@pytest.mark.timeout(600)
def test_check_names_the_rule_a_hidden_test_found_broken(tmp_path, grader_cache):
    """Notebook 03 Part A with an expected_tokens that accepts k = 2.5: check names the rule it broke, the
    part's text states it, and nothing of the hidden tests but their labels is printed."""
    name = "03_acceptance_math"
    nb = nbformat.read(str(NOTEBOOKS / name / f"{name}.ipynb"), as_version=4)
    solutions = {
        c.metadata["nbgrader"]["grade_id"]: c.source
        for c in nbformat.read(str(SOLUTIONS / name / f"{name}.ipynb"), as_version=4).cells
        if c.metadata.get("nbgrader", {}).get("solution")
    }
    for cell in nb.cells:
        gid = cell.metadata.get("nbgrader", {}).get("grade_id")
        if cell.metadata.get("nbgrader", {}).get("solution"):
            cell.source = ALMOST_RIGHT if gid == "expected_tokens" else solutions[gid]
    path = tmp_path / f"{name}.ipynb"
    nbformat.write(nb, str(path))
    done = _check(path, tmp_path, grader_cache)
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    rules = [line.split("rule: ", 1)[1].strip() for line in out.splitlines() if "in the hidden tests: rule: " in line]
    assert rules == ["bad input: k that is not an integer >= 1 must raise ValueError"], out
    assert "Part A (4 points): expected tokens per round ................ 3/4" in out, out
    part_a = load_assignment(name).parts[0]
    stated = " ".join(c.source for c in nbformat.read(str(SOLUTIONS / name / f"{name}.ipynb"), as_version=4).cells)
    assert "k not an integer" in stated or "k that is not an integer" in stated, "the notebook must state the rule"
    hidden = "".join(
        t.source.split("### BEGIN HIDDEN TESTS", 1)[1] for t in part_a.tests if "### BEGIN HIDDEN TESTS" in t.source
    )
    for line in hidden.splitlines():
        line = line.strip()
        if len(line) > 25 and "rule: " not in line:
            assert line not in out, f"check printed hidden test text: {line}"
