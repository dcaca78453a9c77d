"""What the student's process can reach, searched from inside it (issue 60): with every test cell of 04 and 11
judged outside the kernel, a student's code that searches its own process (the kernel's globals and history, the
guard's closures and module, the environment, the files of its folder, /tmp and the connection folder), once
inside a graded function while a judge's probe calls it and once after the last test, finds neither the grader's
key, nor the judge's seed, nor any text of a hidden test (their rules, their markers). Controls prove each pass
sees what it searches: a variable the instructor exported (SPECDEC_*) is found in the environment, and the visible
part of a test cell is found in the guard's closure. Each pass keeps what it scanned alive, so that a freed copy's
id, reused by the next copy (of the environment, of a class's dict), is not taken as already seen."""

import importlib
import json
import secrets

import nbformat
import pytest

from autograde import pipeline, sandbox
from autograde.assignment import load_assignment, source_notebook
from autograde.course import Course
from autograde.guard_kernel import PROBE_STUB
from autograde.notebook_io import released_notebook

pytestmark = pytest.mark.notebooks

KEY = bytes.fromhex("5e" * 4 + "c7" * 28)  # the grader's key and the judge's seed, fixed for this test
SEED = 0x5EED_1234_ABCD_9876
BUDGET = 400_000  # objects one pass of the search may scan
CONTROL = "control-7f3a9c-from-the-instructor"

SEARCH = r'''
import glob as _glob
import json as _json
import os as _os
import sys as _sys

# the needles travel reversed and hex-encoded, so that the search does not find its own source; the decoded
# strings are never scanned
_TARGETS = {name: [bytes.fromhex(h)[::-1].decode("utf-8") for h in hexes] for name, hexes in %(targets)s.items()}
_NEEDLES = {id(_TARGETS)} | {id(v) for v in _TARGETS.values()} | {id(n) for v in _TARGETS.values() for n in v}
_BUDGET = %(budget)d
# _SEEN: id -> the shallowest depth it was scanned at; _KEEP holds what a pass scanned, so that no id is reused
_FOUND, _PASSES, _SEEN, _KEEP, _SCANNED = {}, {}, {}, [], [0]
_NEEDLES |= {id(_FOUND), id(_PASSES), id(_SEEN), id(_KEEP), id(_SCANNED)}     # nor is the search's own state


def _hit(where, text):
    for name, needles in _TARGETS.items():
        if any(n in text for n in needles):
            _FOUND.setdefault(name, []).append(where[:160])


def _scan(where, obj, depth=0):
    # an object first met deep down is met again nearer the top: scanned again there, its children within reach
    if id(obj) in _NEEDLES or _SEEN.get(id(obj), 99) <= depth or depth > 6 or _SCANNED[0] >= _BUDGET:
        return
    _SEEN[id(obj)] = depth
    _KEEP.append(obj)
    _SCANNED[0] += 1
    try:
        if isinstance(obj, (bytes, bytearray)):
            _hit(where, bytes(obj).hex() + " " + bytes(obj).decode("latin-1"))
        elif isinstance(obj, str):
            _hit(where, obj)
        elif isinstance(obj, int) and not isinstance(obj, bool):
            _hit(where, f"{obj} {obj:x}")
        elif isinstance(obj, dict):
            for k, v in list(obj.items())[:20000]:
                _scan(where + f"[{str(k)[:40]}]", k, depth + 1)
                _scan(where + f"[{str(k)[:40]}]", v, depth + 1)
        elif isinstance(obj, (list, tuple, set, frozenset)):
            for i, v in enumerate(list(obj)[:20000]):
                _scan(where + f"[{i}]", v, depth + 1)
        elif type(obj).__module__.startswith(("torch", "numpy")):
            return
        else:
            if callable(obj) and getattr(obj, "__closure__", None):
                for i, cell in enumerate(obj.__closure__):
                    try:
                        _scan(where + f".<closure {i}>", cell.cell_contents, depth + 1)
                    except ValueError:
                        pass
            if getattr(obj, "__defaults__", None):
                _scan(where + ".__defaults__", obj.__defaults__, depth + 1)
            if depth < 4 and hasattr(obj, "__dict__") and not isinstance(obj, type(_sys)):
                _scan(where + ".__dict__", vars(obj), depth + 1)
            if isinstance(obj, type):
                _scan(where + ".<class dict>", dict(vars(obj)), depth + 1)
    except Exception:
        pass


def _search(label):
    import time as _time
    _SEEN.clear()                  # each pass searches afresh, with its own budget
    _KEEP.clear()
    _SCANNED[0], t0, error = 0, _time.monotonic(), None
    try:
        _search_from(label)
    except BaseException as exc:   # the report says so; the test fails on it
        error = repr(exc)[:200]
    _KEEP.clear()
    _PASSES[label] = {"scanned": _SCANNED[0], "seconds": round(_time.monotonic() - t0, 1), "error": error,
                      "found": sorted({what for what, wheres in _FOUND.items()
                                       if any(w.startswith(label + ":") for w in wheres)})}


def _search_from(label):
    ip = get_ipython()
    _scan(label + ":user_ns", dict(ip.user_ns))
    _scan(label + ":kernel", ip.kernel)
    _scan(label + ":kernel class", type(ip.kernel))
    for cls in type(ip.kernel).__mro__[:2]:
        _scan(label + ":class " + cls.__name__, cls)
    _scan(label + ":guard module", dict(vars(_sys.modules["__main__"])))
    _scan(label + ":environ", dict(_os.environ))
    _scan(label + ":argv", list(_sys.argv))
    folders = [".", "/tmp", _os.path.dirname(getattr(ip.kernel, "connection_file", "") or ".")]
    for folder in folders:
        for path in _glob.glob(_os.path.join(folder, "**"), recursive=True)[:2000]:
            try:
                if _os.path.isfile(path) and _os.path.getsize(path) < 2_000_000:
                    with open(path, "rb") as fh:
                        data = fh.read()
                    _SCANNED[0] += 1
                    _hit(label + ":file " + path, data.hex() + " " + data.decode("latin-1"))
            except OSError:
                pass
'''


def _targets(name):
    """{what: [strings]}: the secrets, and the controls that prove the search sees the environment and closures."""
    import inspect

    from autograde.judges import marked, modules, rules_of

    nb = nbformat.read(str(source_notebook(name)), as_version=4)
    judged = [marked(c.source) for c in nb.cells if "### BEGIN HIDDEN TESTS" in c.source]
    assert judged and all(judged), f"{name}: every test cell names its judge"
    released = "\n".join(
        c.source
        for c in nbformat.read(str(source_notebook(name)).replace("solutions", "notebooks"), as_version=4).cells
    )
    rules = sorted({r for module, function in judged for r in rules_of(module, function)} - {""})
    rules = [r for r in rules if r not in released][:40]
    judge = inspect.getsource(importlib.import_module(f"autograde.judges.{modules()[name]}"))  # the hidden tests
    lines = sorted(
        {
            line.strip()
            for line in judge.splitlines()
            if len(line.strip()) > 40
            and line.strip() not in released
            and not line.strip().startswith("#")
            and '"""' not in line
        }
    )[:60]
    visible = next(
        c.source.split("### BEGIN HIDDEN TESTS")[0].splitlines()[1]
        for c in nb.cells
        if "### BEGIN HIDDEN TESTS" in c.source
    )
    return {
        "key": [KEY.hex(), KEY.decode("latin-1")],
        "seed": [str(SEED), f"{SEED:x}"],
        "hidden tests": [f"rule: {r}" for r in rules] + lines,
        "control: environment": [CONTROL],
        "control: guard closure": [visible.strip()],
    }


@pytest.mark.parametrize(
    "name, function", [("04_speculative_decoder", "verify"), ("11_real_engines", "acceptance_from_counters")]
)
def test_nothing_secret_is_reachable_from_the_students_process(tmp_path, monkeypatch, name, function):
    ok, why = sandbox.bwrap_status()
    assert ok, f"the search runs in the sandbox: {why}"
    real_bytes, real_bits = secrets.token_bytes, secrets.randbits
    monkeypatch.setattr(secrets, "token_bytes", lambda n=None: KEY if n == 32 else real_bytes(n))
    monkeypatch.setattr(secrets, "randbits", lambda k: SEED if k == 64 else real_bits(k))
    monkeypatch.setenv("SPECDEC_SEARCH_CONTROL", CONTROL)
    targets = _targets(name)
    nb = nbformat.read(str(source_notebook(name)), as_version=4)
    cell = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == function)
    # the solution, searching once from inside the function while a judge's probe calls it
    hidden_form = {what: [n.encode("utf-8")[::-1].hex() for n in needles] for what, needles in targets.items()}
    cell.source = (
        SEARCH % {"targets": repr(hidden_form), "budget": BUDGET}
        + "\n"
        + cell.source.replace(f"def {function}(", f"def _right_{function}(", 1)
        + f'''


_searched_in_probe = []


def _in_a_probe():            # the kernel's request now is a judge's probe (autograde.guard_kernel.PROBE_STUB)
    parent = get_ipython().kernel.get_parent()
    return (parent.get("content") or {{}}).get("code", "").startswith({PROBE_STUB!r})


def {function}(*args, **kwargs):
    if not _searched_in_probe and _in_a_probe():
        _searched_in_probe.append(True)
        _search("inside a probe")
    return _right_{function}(*args, **kwargs)
'''
    )
    nb.cells.append(
        nbformat.v4.new_code_cell(
            '_search("after the tests")\nprint("SEARCH " + _json.dumps('
            '{"found": _FOUND, "passes": _PASSES, '
            '"in_probe": bool(_searched_in_probe)}))'
        )
    )
    a = load_assignment(name)
    course = Course(tmp_path / "work", sandboxed=True)
    course.prepare(name)
    released = released_notebook(a, course)
    pipeline.submit(course, a, "searcher", nb, released)
    g = pipeline.grade(course, a, "searcher", released)
    assert g.ok, g.reason
    graded = nbformat.read(str(course.path("autograded", "searcher", a.name) / f"{a.notebook}.ipynb"), as_version=4)
    text = "".join(o.get("text", "") for o in graded.cells[-1].get("outputs", []) if o.get("output_type") == "stream")
    assert "SEARCH " in text, graded.cells[-1].get("outputs")
    report = json.loads(text.split("SEARCH ", 1)[1].splitlines()[0])
    found = report["found"]
    passes = report["passes"]
    assert report["in_probe"] and set(passes) == {"inside a probe", "after the tests"}, report
    for label, seen in passes.items():  # each pass ran to its end and saw what it must see
        assert seen["error"] is None and 2_000 < seen["scanned"] < BUDGET, (label, seen)
        assert {"control: environment", "control: guard closure"} <= set(seen["found"]), (label, seen, found)
    assert not {"key", "seed", "hidden tests"} & set(found), {k: found[k][:5] for k in found}
    # the grader's key really was this run's (the patch took), and its judged cells passed
    assert g.points == a.points, {k: (o.kind, o.rule) for k, o in g.results.items() if not o.passed}
