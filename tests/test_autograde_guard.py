"""The kernel's guard (autograde/guard_kernel.py), in-process: what the course's locked cells bind stays what
the tests see, whatever form the rebinding takes; correct code that uses new names is untouched."""

import builtins

import pytest

from autograde import guard_kernel

SETUP = '''import math
import numpy as np
from specdec.core.decoding import ForwardCounter, greedy_generate
from specdec.tables import Hardware
hardware = {"H100": Hardware("H100", 80e9, 3.35e12, 989.4e12, True, "datasheet")}
limits = [1, 2, 3]


class Model:
    def step(self):
        return "real"


model = Model()
'''
TEST = '''assert greedy_generate.__module__ == "specdec.core.decoding", "rule: reference"
assert ForwardCounter.__module__ == "specdec.core.decoding", "rule: counter"
assert hardware["H100"].bandwidth_bytes_per_s == 3.35e12, "rule: data"
assert limits == [1, 2, 3], "rule: data"
assert model.step() == "real", "rule: method"
'''


def _notebook(student, setup=SETUP):
    """Run the locked setup cell, then the student's cell, as the kernel would; return (namespace, locked)."""
    locked = guard_kernel.LockedBindings(packages=("specdec",))
    ns = {"__builtins__": builtins, "__name__": "__main__"}
    before = locked.before_locked_cell(ns)
    exec(compile(setup, "<setup>", "exec"), ns)
    locked.after_locked_cell(setup, ns, before, "setup")
    exec(compile(student, "<student>", "exec"), ns)
    return ns, locked


FORMS = {
    "assignment": "greedy_generate = lambda *args, **kwargs: None",
    "def": "def greedy_generate(model, prompt, n):\n    return prompt",
    "class": "class ForwardCounter:\n    calls = 0\n    def __init__(self, model): pass\n"
    "    def __enter__(self): return self\n    def __exit__(self, *a): return False",
    "import as": "import random as greedy_generate",
    "from-import of another object": "from specdec.core.decoding import sample as greedy_generate",
    "globals()[...]": "globals()['greedy_generate'] = print",
    "global inside a function": "def _cheat():\n    global ForwardCounter\n    ForwardCounter = object\n_cheat()",
    "module attribute": "import specdec.core.decoding\nspecdec.core.decoding.greedy_generate = print",
    "class attribute": "ForwardCounter.__exit__ = lambda *a: True",
    "data contents": "hardware['H100'] = Hardware('H100', 80e9, 99e12, 989.4e12, True, 'mine')",
    "list contents": "limits.append(4)",
    "instance method": "model.step = lambda: 'real'",
}


@pytest.mark.parametrize("form", FORMS)
def test_every_form_of_rebinding_fails_the_test_and_is_undone(form):
    import specdec.core.decoding

    real = specdec.core.decoding.greedy_generate, specdec.core.decoding.ForwardCounter.__dict__.get("__exit__")
    ns, locked = _notebook(FORMS[form])
    failure = guard_kernel.run_test_cell(TEST, ns, locked)
    assert failure is not None and failure[0] == "GraderIntegrityError", (form, failure)
    assert "Before this test" in failure[1] and "new names" in failure[1], failure
    # everything is back: the next test passes, and the package is as it was
    assert guard_kernel.run_test_cell(TEST, ns, locked) is None
    assert (
        specdec.core.decoding.greedy_generate,
        specdec.core.decoding.ForwardCounter.__dict__.get("__exit__"),
    ) == real


def test_the_message_names_what_was_rebound_and_where_it_was_defined():
    ns, locked = _notebook("greedy_generate = None")
    failure = guard_kernel.run_test_cell("pass", ns, locked)
    assert "greedy_generate" in failure[1] and "(defined in setup)" in failure[1], failure


def test_the_guard_writes_what_was_rebound_in_a_structured_field():
    """The grader's verdict reads the guard's `rebound` field (sent beside the message in the kernel's error
    content), never the message: it names what was rebound before or while the test ran, and is empty for
    every other failure."""
    ns, locked = _notebook("greedy_generate = None\nlimits.append(4)")
    failure = guard_kernel.run_test_cell("pass", ns, locked)
    assert failure.rebound == ["greedy_generate", "limits (its contents)"], failure
    content = guard_kernel.error_content(failure)
    assert content[guard_kernel.REBOUND_FIELD] == failure.rebound
    assert (content["ename"], content["evalue"]) == ("GraderIntegrityError", failure[1])
    assert content["traceback"] == ["autograde: test cell line 0", f"GraderIntegrityError: {failure[1]}"]
    student = "def answer():\n    global greedy_generate\n    greedy_generate = print\n    return 1\n"
    ns, locked = _notebook(student)
    failure = guard_kernel.run_test_cell("assert answer() == 1", ns, locked)
    assert "While this test ran" in failure[1] and failure.rebound == ["greedy_generate"], failure
    ns, locked = _notebook("")
    failure = guard_kernel.run_test_cell("assert limits == [0], 'rule: data'", ns, locked)
    assert failure == ("AssertionError", "rule: data", 1) and failure.rebound == []
    assert guard_kernel.error_content(failure)[guard_kernel.REBOUND_FIELD] == []


def test_rebinding_while_a_test_runs_fails_that_test():
    student = "def answer():\n    global greedy_generate\n    greedy_generate = print\n    return 1\n"
    ns, locked = _notebook(student)
    failure = guard_kernel.run_test_cell("assert answer() == 1", ns, locked)
    assert failure is not None and failure[0] == "GraderIntegrityError" and "While this test ran" in failure[1]
    assert ns["greedy_generate"].__module__ == "specdec.core.decoding"


CORRECT = {
    "the same objects imported again": "import math\nimport numpy as np\n"
    "from specdec.core.decoding import ForwardCounter, greedy_generate",
    "helpers under new names": "def my_greedy(model, prompt, n):\n    return greedy_generate(model, prompt, n)\n"
    "local_limits = list(limits) + [4]\nmy_hw = dict(hardware)\nmy_hw['X'] = 1",
    "local variables that shadow nothing global": "def f(hardware, limits):\n    hardware = {}\n    return limits",
    "calling the given objects": "counted = model.step()\nsize = len(limits)",
}


@pytest.mark.parametrize("case", CORRECT)
def test_correct_code_is_untouched(case):
    ns, locked = _notebook(CORRECT[case])
    assert guard_kernel.run_test_cell(TEST, ns, locked) is None


def test_a_test_cell_may_rebind_a_given_name_itself():
    ns, locked = _notebook("")
    assert guard_kernel.run_test_cell("limits = [9]\nassert limits == [9]", ns, locked) is None
    assert ns["limits"] == [9]
    assert guard_kernel.run_test_cell("assert limits == [9]", ns, locked) is None


def test_a_later_locked_cell_may_rebind_a_given_name():
    ns, locked = _notebook("")
    before = locked.before_locked_cell(ns)
    exec("limits = (5,)", ns)
    locked.after_locked_cell("limits = (5,)", ns, before, "given")
    assert guard_kernel.run_test_cell("assert limits == (5,)", ns, locked) is None


def test_the_rebinding_cheats_of_notebook_04_pass_without_the_record_and_fail_with_it():
    """The two submissions of tests/adversarial/cases04.py, against the real setup cell and test cells: the
    guard without a record of the locked cell (as before) lets the first pass; with the record both fail.  (The
    second passed too before the stats test counted the work done: a counter that never counts now fails its
    lower bound, so it fails without the record as well.)"""
    import nbformat
    from adversarial import cases04

    nb = nbformat.read(str(cases04.SOLUTION), as_version=4)
    setup = next(c.source for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "setup")
    from autograde.executor import visible_part

    tests = {  # what the kernel runs of a test cell: its visible part (the hidden block is its judge's)
        c.metadata["nbgrader"]["grade_id"]: visible_part(c.source)[0]
        for c in nb.cells
        if c.metadata.get("nbgrader", {}).get("grade")
    }
    verify = cases04.solution_answers()["verify"]
    for answer, test in (
        (cases04.REBIND_REFERENCE, "test_speculative_generate_greedy"),
        (cases04.REBIND_COUNTER, "test_speculative_generate_stats"),
    ):
        verdicts = []
        for record in (False, True):
            locked = guard_kernel.LockedBindings(packages=("specdec",))
            ns = {"__builtins__": builtins, "__name__": "__main__"}
            before = locked.before_locked_cell(ns)
            exec(compile(setup, "<setup>", "exec"), ns)
            if record:
                locked.after_locked_cell(setup, ns, before, "setup")
            exec(compile(verify, "<verify>", "exec"), ns)
            exec(compile(answer, "<answer>", "exec"), ns)
            verdicts.append(guard_kernel.run_test_cell(tests[test], ns, locked))
        if answer is cases04.REBIND_REFERENCE:
            assert verdicts[0] is None, f"{test}: the cheat should pass without the record: {verdicts[0]}"
        else:
            assert verdicts[0] is not None and "target forwards" in verdicts[0][1], verdicts[0]
        assert verdicts[1] is not None and verdicts[1][0] == "GraderIntegrityError", verdicts[1]


def test_a_patched_re_search_is_undone_before_a_message_check():
    """Hidden tests check error messages with re.search: a student's `re.search = ...` must not reach them."""
    import re

    real = re.search
    ns, locked = _notebook("import re\nre.search = lambda *args, **kwargs: True")
    try:
        failure = guard_kernel.run_test_cell(
            'import re\nassert re.search(r"\\bk\\b", "no such word") is None, "rule: m"', ns, locked
        )
    finally:
        re.search = real
    assert failure is None, failure
    assert re.search is real


# ------------------------------------------------------------------- functions' internals, sys.modules
CLOSURE_SETUP = '''import math


def _make_loop(step):
    def loop(n):
        return [step(i) for i in range(n)]
    return loop


tree_loop = _make_loop(lambda i: i * i)
'''


@pytest.mark.parametrize(
    "student, what",
    [
        ("tree_loop.__closure__[0].cell_contents = lambda i: 0", "tree_loop.__closure__"),
        (
            "def _swap(step):\n    def zero(n):\n        return [step] * n\n    return zero\n"
            "tree_loop.__code__ = _swap(0).__code__",
            "tree_loop.__code__",
        ),
        ("def _k(step=None): pass\n_make_loop.__defaults__ = (1,)", "_make_loop.__defaults__"),
    ],
)
def test_a_swapped_closure_code_or_defaults_of_a_given_function_fails_the_test_and_is_undone(student, what):
    ns, locked = _notebook(student, CLOSURE_SETUP)
    failure = guard_kernel.run_test_cell("assert tree_loop(4) == [0, 1, 4, 9], 'rule: loop'", ns, locked)
    assert failure is not None and failure[0] == "GraderIntegrityError" and what in failure[1], failure
    assert ns["tree_loop"](4) == [0, 1, 4, 9]  # put back: the next test runs on it
    assert guard_kernel.run_test_cell("assert tree_loop(4) == [0, 1, 4, 9], 'rule: loop'", ns, locked) is None


def test_a_replaced_sys_modules_entry_fails_the_test_and_is_put_back():
    import sys
    import types

    ns, locked = _notebook("")
    real = sys.modules["specdec.core.decoding"]
    sys.modules["specdec.core.decoding"] = types.ModuleType("specdec.core.decoding")
    try:
        failure = guard_kernel.run_test_cell(
            "from specdec.core.decoding import greedy_generate\nassert greedy_generate", ns, locked
        )
    finally:
        restored = sys.modules["specdec.core.decoding"]
        sys.modules["specdec.core.decoding"] = real
    assert (
        restored is real
        and failure[0] == "GraderIntegrityError"
        and "sys.modules['specdec.core.decoding']" in failure[1]
    )


def test_a_threading_trace_hook_is_cleared_and_named():
    import threading

    threading.settrace(lambda *args: None)
    try:
        assert "threading.settrace" in guard_kernel._clear_hooks()
    finally:
        threading.settrace(None)
    assert getattr(threading, "_trace_hook", None) is None and guard_kernel._clear_hooks() == []


# ------------------------------------------------------------------------------------ the audit hook
AUDIT_SCRIPT = r'''
import json, sys, warnings, logging, traceback, collections
sys.path.insert(0, sys.argv[1])
import guard_kernel
audit = guard_kernel.Audit()
sys.addaudithook(audit.hook)
STUDENT = """
import gc, inspect, sys, ctypes
def walk():
    return len(gc.get_objects())
def frames():
    return inspect.stack()
def swap(f, g):
    f.__code__ = g.__code__
def hook():
    sys.setprofile(lambda *a: None)
def honest():
    warnings.warn("careful")
    logging.getLogger("x").warning("noted")
    try:
        1 / 0
    except ZeroDivisionError:
        traceback.format_exc()
    return collections.namedtuple("P", "a b")(1, 2)
"""
audit.student_files["<student-cell>"] = 7
ns = {"warnings": warnings, "logging": logging, "traceback": traceback, "collections": collections}
exec(compile(STUDENT, "<student-cell>", "exec"), ns)
results = {}
for name, args, in_test in [("walk", (), False), ("frames", (), False), ("frames", (), True),
                            ("swap", (ns["walk"], ns["frames"]), False), ("hook", (), False), ("honest", (), True)]:
    audit.in_test = in_test
    try:
        ns[name](*args)
        results[f"{name}/{in_test}"] = "ran"
    except PermissionError as exc:
        results[f"{name}/{in_test}"] = "refused"
    audit.in_test = False
results["library_frames"] = len(sys._getframe(0).f_code.co_name) > 0      # the runner's own: not recorded
print(json.dumps({"results": results, "events": audit.take()}))
'''


def test_the_audit_hook_refuses_tampering_records_frames_and_leaves_honest_code_alone(tmp_path):
    import json
    import subprocess
    import sys
    from pathlib import Path

    script = tmp_path / "audit.py"
    script.write_text(AUDIT_SCRIPT)
    done = subprocess.run(
        [sys.executable, str(script), str(Path(guard_kernel.__file__).parent)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["results"] == {
        "walk/False": "refused",
        "frames/False": "ran",
        "frames/True": "refused",
        "swap/False": "refused",
        "hook/False": "refused",
        "honest/True": "ran",
        "library_frames": True,
    }, out
    events = [(e["severity"], e["what"].split(" (")[0], e["refused"], e["origin"]) for e in out["events"]]
    assert ("tamper", "walked the interpreter's objects", True, 7) in events
    assert ("flag", "read a frame", False, 7) in events and ("flag", "read a frame", True, 7) in events
    assert ("tamper", "changed a function's __code__", True, 7) in events
    assert ("tamper", "installed a profile hook", True, 7) in events
    assert len(events) == 5, events  # honest(): warnings, logging, a formatted traceback, a namedtuple


def test_a_test_passes_only_with_the_guards_signed_verdict():
    key, other = bytes(32), bytes([1]) * 32
    tag = guard_kernel.evidence_tag(key, "abc", "n1")
    assert tag == guard_kernel.evidence_tag(key, "abc", "n1")
    assert tag not in (
        guard_kernel.evidence_tag(other, "abc", "n1"),
        guard_kernel.evidence_tag(key, "abc", "n2"),
        guard_kernel.evidence_tag(key, "abd", "n1"),
    )
