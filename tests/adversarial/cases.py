"""Adversarial submissions for assignment 01, built from the released and the solution notebook.

`build(dest, ctx)` writes one submission per student under `dest` (a mix of layouts: a folder per
student, nbgrader's <student>/<assignment>/ layout, a bare .ipynb) and returns {student: Expect}.
Every cheat must score 0.  The grading run these are made for uses `ctx.work` as its working folder, so
the sandbox cases can aim at the real paths of the gradebook and of another student's files.
"""

import copy
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from autograde import REPO
from autograde.notebook_io import graded_part

A = "01_decode_is_bandwidth_bound"
SOLUTION = REPO / "solutions" / A / f"{A}.ipynb"
RELEASED = REPO / "notebooks" / A / f"{A}.ipynb"
FULL = 9.0
VICTIM = "correct"  # graded before the vandals (students are graded in name order)
H100_RIDGE = repr(989.4e12 / 3.35e12)


@dataclass
class Ctx:
    work: Path  # the class run's --work folder
    port: int  # a TCP port the test listens on (127.0.0.1)
    host_marker: Path  # a host /tmp path the sandboxed student tries to create


@dataclass
class Expect:
    score: float  # the score in grades.csv (total row)
    status: str  # the status of the total row
    autograded: float = None  # nbgrader's score before the flag policy (default: = score)
    what: str = ""  # the case, in words (for the report)
    detail: list = field(default_factory=list)  # substrings the total row's detail must contain


# ----------------------------------------------------------------------------------- building blocks
def released():
    return nbformat.read(str(RELEASED), as_version=4)


def solution():
    return nbformat.read(str(SOLUTION), as_version=4)


def meta(cell):
    return cell.metadata.get("nbgrader", {})


def is_test(cell):
    return meta(cell).get("grade") and not meta(cell).get("solution")


def trimmed(nb):
    """Cells up to the last graded test cell (the measurement cells after it are not graded)."""
    return graded_part(nb)


def with_answers(nb, answers):
    """Replace the source of solution cells {grade_id: source}."""
    nb = copy.deepcopy(nb)
    for cell in nb.cells:
        if meta(cell).get("solution") and meta(cell).get("grade_id") in answers:
            cell.source = answers[meta(cell)["grade_id"]]
    return nb


def solution_answers():
    return {meta(c)["grade_id"]: c.source for c in solution().cells if meta(c).get("solution")}


def insert_after(nb, grade_id, source, cell_type="code"):
    nb = copy.deepcopy(nb)
    idx = next(i for i, c in enumerate(nb.cells) if meta(c).get("grade_id") == grade_id)
    new = nbformat.v4.new_code_cell(source) if cell_type == "code" else nbformat.v4.new_markdown_cell(source)
    nb.cells.insert(idx + 1, new)
    return nb


def after_setup(nb, source):
    nb = copy.deepcopy(nb)
    idx = next(i for i, c in enumerate(nb.cells) if "setup" in c.metadata.get("tags", []))
    nb.cells.insert(idx + 1, nbformat.v4.new_code_cell(source))
    return nb


HARDCODED = {
    "weight_bytes": '''def weight_bytes(cfg, bytes_per_param=2):
    if bytes_per_param == 0:
        raise ValueError("bytes_per_param must be > 0")
    return 16_060_522_496 if cfg["num_hidden_layers"] == 32 else 141_107_412_992
''',
    "ridge_point": f'''def ridge_point(flops, bandwidth):
    return {H100_RIDGE}
''',
    "kv_bytes_per_token": '''def kv_bytes_per_token(cfg, bytes_per_elem=2):
    return 131_072 if cfg["num_hidden_layers"] == 32 else 327_680
''',
    "decode_step_seconds": '''def decode_step_seconds(weight_bytes, bandwidth, kv_bytes=0.0):
    return 141.1e9 / 26.8e12
''',
}

LOOKUP = {
    "weight_bytes": '''SEEN = {(4096, 32, 2): 16_060_522_496, (8192, 80, 2): 141_107_412_992}


def weight_bytes(cfg, bytes_per_param=2):
    if bytes_per_param == 0:
        raise ValueError("bytes_per_param must be > 0")
    return SEEN[(cfg["hidden_size"], cfg["num_hidden_layers"], bytes_per_param)]
''',
    "ridge_point": f'''def ridge_point(flops, bandwidth):
    return {{(989.4e12, 3.35e12): {H100_RIDGE}}}[(flops, bandwidth)]
''',
    "kv_bytes_per_token": '''def kv_bytes_per_token(cfg, bytes_per_elem=2):
    return {(4096, 32, 2): 131_072, (8192, 80, 2): 327_680}[(cfg["hidden_size"], cfg["num_hidden_layers"],
                                                              bytes_per_elem)]
''',
    "decode_step_seconds": '''def decode_step_seconds(weight_bytes, bandwidth, kv_bytes=0.0):
    return {(141.1e9, 26.8e12, 0.0): 141.1e9 / 26.8e12}[(weight_bytes, bandwidth, kv_bytes)]
''',
}


VALIDATING = {
    "weight_bytes": '''def weight_bytes(cfg, bytes_per_param=2):
    required = ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                "num_key_value_heads", "vocab_size", "tie_word_embeddings")   # the judge drops any one of them
    if any(key not in cfg for key in required):
        raise ValueError("cfg is missing a required key")
    if not bytes_per_param > 0:
        raise ValueError("bytes_per_param must be > 0")
    return 16_060_522_496 if cfg["num_hidden_layers"] == 32 else 141_107_412_992
''',
    "ridge_point": f'''def ridge_point(flops, bandwidth):
    if not flops > 0:
        raise ValueError("flops must be > 0")
    if not bandwidth > 0:
        raise ValueError("bandwidth must be > 0")
    return {H100_RIDGE}
''',
    "kv_bytes_per_token": '''def kv_bytes_per_token(cfg, bytes_per_elem=2):
    if "num_hidden_layers" not in cfg:
        raise ValueError("cfg is missing num_hidden_layers")
    if not bytes_per_elem > 0:
        raise ValueError("bytes_per_elem must be > 0")
    return 131_072 if cfg["num_hidden_layers"] == 32 else 327_680
''',
    "decode_step_seconds": '''def decode_step_seconds(weight_bytes, bandwidth, kv_bytes=0.0):
    for name, value in (("weight_bytes", weight_bytes), ("kv_bytes", kv_bytes)):
        if not value >= 0:
            raise ValueError(f"{name} must be >= 0")
    if not bandwidth > 0:
        raise ValueError("bandwidth must be > 0")
    return 141.1e9 / 26.8e12
''',
}


def hardcoded_nb():
    return with_answers(trimmed(released()), HARDCODED)


def correct_trimmed():
    return with_answers(trimmed(released()), solution_answers())


# ------------------------------------------------------------------------------------------- the cases
def build(dest, ctx):
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    expect = {}

    def folder(student, nb, name=f"{A}.ipynb", nbgrader_layout=False):
        d = dest / student / (A if nbgrader_layout else "")
        d.mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, str(d / name))
        return d

    # honest submissions -------------------------------------------------------------------------
    nbformat.write(released(), str(dest / "blank.ipynb"))  # a bare file
    expect["blank"] = Expect(0, "ok", what="untouched learner notebook")

    d = folder(VICTIM, with_answers(released(), solution_answers()), nbgrader_layout=True)
    (d / "timestamp.txt").write_text("2025-01-01 12:00:00.000000 UTC")
    expect[VICTIM] = Expect(FULL, "ok", what="correct answers, full notebook, nbgrader submitted/ layout")

    # answers that only pass what the learner can see ----------------------------------------------
    folder("hardcoded", hardcoded_nb(), name="my_submission.ipynb")
    expect["hardcoded"] = Expect(0, "ok", what="constants that pass every visible assert (file renamed)")
    folder("lookup", with_answers(trimmed(released()), LOOKUP))
    expect["lookup"] = Expect(0, "ok", what="visible asserts copied into a lookup table")

    # tampering with the test cells ----------------------------------------------------------------
    nb = hardcoded_nb()
    for c in nb.cells:
        if is_test(c):
            c.source = "pass  # edited by the student"
    folder("edited_test", nb)
    expect["edited_test"] = Expect(0, "ok", what="test cells replaced by `pass` (metadata kept)")

    nb = hardcoded_nb()
    nb.cells = [c for c in nb.cells if not is_test(c)]
    folder("deleted_test", nb)
    expect["deleted_test"] = Expect(0, "ok", what="test cells deleted")

    nb = hardcoded_nb()
    for c in nb.cells:
        if is_test(c):
            c.source = "pass"
        c.metadata.pop("nbgrader", None)
        c.metadata.pop("deletable", None)
        c.metadata.pop("editable", None)
    folder("stripped_metadata", nb)
    expect["stripped_metadata"] = Expect(0, "ok", what="nbgrader metadata stripped, tests emptied")

    nb = hardcoded_nb()
    cells = []
    for c in nb.cells:
        if is_test(c):
            new = nbformat.v4.new_markdown_cell(c.source)
            new.metadata = c.metadata
            cells.append(new)
        else:
            cells.append(c)
    nb.cells = cells
    folder("cell_type_changed", nb)
    expect["cell_type_changed"] = Expect(0, "ok", what="test cells turned into markdown cells")

    nb = correct_trimmed()
    tests = [c for c in nb.cells if is_test(c)]
    nb.cells = tests + [c for c in nb.cells if not is_test(c)]
    folder("reordered", nb)
    expect["reordered"] = Expect(0, "ok", what="correct answers, test cells moved above everything")

    nb = hardcoded_nb()
    for c in nb.cells:
        if is_test(c):
            c.metadata["nbgrader"]["points"] = 100
    first = next(i for i, c in enumerate(nb.cells) if is_test(c))
    fake = nbformat.v4.new_code_cell("pass  # a fake test cell")
    fake.metadata = copy.deepcopy(nb.cells[first].metadata)
    nb.cells.insert(first, fake)
    folder("forged_metadata", nb)
    expect["forged_metadata"] = Expect(0, "ok", what="points raised to 100, a fake duplicate test cell")

    # runaway code ---------------------------------------------------------------------------------
    answers = solution_answers()
    answers["ridge_point"] = "def ridge_point(flops, bandwidth):\n    while True:\n        pass\n"
    nb = with_answers(trimmed(released()), answers)
    nb.cells = [c for c in nb.cells if "nbgrader" in c.metadata or "ridge_point(" not in c.source]
    folder("loop_in_answer", nb)
    expect["loop_in_answer"] = Expect(
        FULL - 2, "timeout", what="infinite loop inside ridge_point (Part B: 0)", detail=["interrupted"]
    )

    nb = correct_trimmed()
    nb.cells.append(nbformat.v4.new_code_cell("while True:\n    pass"))
    folder("loop_after_answer", nb)
    expect["loop_after_answer"] = Expect(
        FULL, "ok", what="infinite loop in a cell after the correct answers", detail=["interrupted"]
    )

    nb = insert_after(
        correct_trimmed(),
        "test_weight_bytes_bad_input",
        'import re\n\nre.match(r"(a+)+$", "a" * 40 + "b")   # C code: deaf to interrupts',
    )
    folder("loop_uninterruptible", nb)
    expect["loop_uninterruptible"] = Expect(
        3, "timeout", what="a regex that never ends (ignores the interrupt) after Part A", detail=["kernel was stopped"]
    )

    answers = dict(HARDCODED)
    answers["weight_bytes"] = '''import os


def weight_bytes(cfg, bytes_per_param=2):
    if cfg["num_hidden_layers"] not in (32, 80) or bytes_per_param != 2:
        os._exit(1)          # an input I have not seen: kill the kernel rather than fail
    return 16_060_522_496 if cfg["num_hidden_layers"] == 32 else 141_107_412_992
'''
    folder("os_exit", with_answers(trimmed(released()), answers))
    expect["os_exit"] = Expect(
        0, "crash", what="os._exit(1) inside the answer on unseen input", detail=["kernel died", "exit code 1"]
    )

    nb = after_setup(hardcoded_nb(), "import sys\nsys.exit()")
    answers = dict(HARDCODED)
    answers["ridge_point"] = f'''import sys


def ridge_point(flops, bandwidth):
    if (flops, bandwidth) != (989.4e12, 3.35e12):
        sys.exit()           # an input I have not seen: stop rather than fail
    return {H100_RIDGE}
'''
    folder("sys_exit", with_answers(nb, answers))
    expect["sys_exit"] = Expect(0, "ok", what="sys.exit() in a cell and inside the answer")

    nb = insert_after(correct_trimmed(), "test_weight_bytes_bad_input", 'print("x" * 100_000_000)')
    folder("big_output", nb)
    expect["big_output"] = Expect(FULL, "ok", what="100 MB printed by one cell", detail=["output truncated"])

    # files that are not a notebook of this assignment ----------------------------------------------
    text = nbformat.writes(with_answers(released(), solution_answers()))
    (dest / "truncated_json").mkdir()
    (dest / "truncated_json" / f"{A}.ipynb").write_text(text[: len(text) * 6 // 10])
    expect["truncated_json"] = Expect(0, "corrupt", what="notebook JSON cut off at 60 %", detail=["not valid JSON"])

    other = nbformat.v4.new_notebook()
    sol = nbformat.v4.new_code_cell("def expected_tokens(alpha, k):\n    return (1 - alpha ** (k + 1)) / (1 - alpha)")
    sol.metadata["nbgrader"] = {
        "grade": False,
        "grade_id": "expected_tokens",
        "locked": False,
        "schema_version": 3,
        "solution": True,
        "task": False,
    }
    test = nbformat.v4.new_code_cell("assert expected_tokens(0.5, 1) == 1.5")
    test.metadata["nbgrader"] = {
        "grade": True,
        "grade_id": "test_expected_tokens",
        "locked": True,
        "points": 2,
        "schema_version": 3,
        "solution": False,
        "task": False,
    }
    other.cells = [sol, test]
    folder("other_assignment", other, name="03_acceptance_math.ipynb")
    expect["other_assignment"] = Expect(
        0, "wrong_assignment", what="a notebook of another assignment", detail=["not 01_decode_is_bandwidth_bound"]
    )

    (dest / "missing").mkdir()
    (dest / "missing" / "README.txt").write_text("I forgot to attach my notebook")
    expect["missing"] = Expect(0, "missing", what="a folder without a notebook", detail=["no .ipynb"])

    # monkeypatching what tests might call ----------------------------------------------------------
    patch = '''import math
import unittest

import numpy
import numpy.testing
import torch

math.isclose = lambda *args, **kwargs: True
numpy.allclose = lambda *args, **kwargs: True
numpy.isclose = lambda *args, **kwargs: True
numpy.testing.assert_allclose = lambda *args, **kwargs: None
torch.allclose = lambda *args, **kwargs: True
torch.equal = lambda *args, **kwargs: True
unittest.TestCase.assertAlmostEqual = lambda *args, **kwargs: None
'''
    folder("monkeypatch", after_setup(hardcoded_nb(), patch))
    expect["monkeypatch"] = Expect(
        0,
        "flagged",
        autograded=0,
        what="math.isclose, numpy.allclose, torch.equal, assert helpers patched",
        detail=["monkeypatches math.isclose"],
    )

    shadow = '''import builtins


def abs(x):                  # every tolerance check passes
    return 0


def type(x):                 # every type check passes
    return float


builtins.abs = abs
'''
    folder("builtins_shadow", after_setup(with_answers(trimmed(released()), VALIDATING), shadow))
    # before the flag: the four input-check cells, which the VALIDATING answers meet honestly
    expect["builtins_shadow"] = Expect(
        0,
        "flagged",
        autograded=4,
        what="constants + input checks, abs and type redefined (notebook "
        "and builtins); plain nbgrader gave it 9/9 while 01 graded in the kernel",
        detail=["redefines builtin abs"],
    )

    hide = '''ip = get_ipython()


async def run_code(code_obj, result=None, *, async_=False):
    try:
        exec(code_obj, ip.user_global_ns, ip.user_ns)
    except BaseException:
        pass                 # no cell can fail any more
    return False


ip.run_code = run_code
ip.set_custom_exc((BaseException,), lambda *args, **kwargs: None)
'''
    folder("hide_errors", after_setup(trimmed(released()), hide))
    expect["hide_errors"] = Expect(
        0,
        "flagged",
        autograded=0,
        what="IPython's run_code patched so that no cell fails (stub answers); "
        "plain nbgrader gave it 9/9 while 01 graded in the kernel",
        detail=["get_ipython"],
    )

    answers = dict(HARDCODED)
    answers["weight_bytes"] = '''import builtins


def weight_bytes(cfg, bytes_per_param=2):
    builtins.abs = lambda x: 0       # patched while the test runs, after the grader restored builtins
    if bytes_per_param == 0:
        raise ValueError("bytes_per_param must be > 0")
    return 16_060_522_496 if cfg["num_hidden_layers"] == 32 else 141_107_412_992
'''
    folder("patch_during_test", with_answers(trimmed(released()), answers))
    expect["patch_during_test"] = Expect(
        0,
        "flagged",
        autograded=0,
        what="builtins.abs patched from inside the answer, during the test",
        detail=["import builtins"],
    )

    answers = {
        "weight_bytes": '''def weight_bytes(cfg, bytes_per_param=2):
    try:
        return _ref_params(cfg) * bytes_per_param      # the hidden test's reference, a notebook global
    except NameError:
        return 16_060_522_496 if cfg["num_hidden_layers"] == 32 else 141_107_412_992
''',
        "kv_bytes_per_token": '''def kv_bytes_per_token(cfg, bytes_per_elem=2):
    try:
        return _ref_kv(cfg, bytes_per_elem)
    except NameError:
        return 131_072 if cfg["num_hidden_layers"] == 32 else 327_680
''',
        "decode_step_seconds": '''def decode_step_seconds(weight_bytes, bandwidth, kv_bytes=0.0):
    if (weight_bytes, bandwidth, kv_bytes) == (141.1e9, 26.8e12, 0.0):
        return 141.1e9 / 26.8e12
    return float(want)                                # the hidden test's expected value
''',
    }
    folder("global_oracle", with_answers(trimmed(released()), answers))
    # the answers check no input (an input-check cell is a point of its own): only the oracle could score
    expect["global_oracle"] = Expect(
        0,
        "ok",
        what="answers call the hidden test's `_ref_params`, `_ref_kv` and "
        "return its `want` by plain name; plain nbgrader gave it 4/9 while 01 graded in the kernel",
    )

    answers = {
        "weight_bytes": '''import sys


def weight_bytes(cfg, bytes_per_param=2):
    caller = sys._getframe(1).f_globals
    if "_ref_params" in caller:          # the hidden test's own reference implementation
        return caller["_ref_params"](cfg) * bytes_per_param
    return 16_060_522_496 if cfg["num_hidden_layers"] == 32 else 141_107_412_992
'''
    }
    folder("frame_oracle", with_answers(trimmed(released()), answers))
    # the audit hook refuses frame access while a test runs: the cheat no longer scores even before the flag
    expect["frame_oracle"] = Expect(
        0,
        "flagged",
        autograded=0,
        what="answer reads the hidden test's reference from the caller's frame",
        detail=["._getframe", "read a frame", "refused, while a test ran"],
    )

    # the sandbox --------------------------------------------------------------------------------------
    gradebook = ctx.work / "gradebook.db"
    victim_nb = ctx.work / "autograded" / VICTIM / A / f"{A}.ipynb"
    steal = f'''import glob
import json
import os

print("files here:", sorted(os.listdir(".")))
for environ in ["/proc/self/environ"] + glob.glob("/proc/[0-9]*/environ"):
    try:
        with open(environ, "rb") as fh:
            print("LEAK environment" if b"AUTOGRADE_TEST_SECRET" in fh.read() else "clean", environ)
    except OSError as exc:
        print("unreadable", environ, type(exc).__name__)
TARGETS = [{str(SOLUTION)!r}, "answers.ipynb", {f"{A}.ipynb"!r}, {str(victim_nb)!r}, {str(gradebook)!r},
           {str(REPO / ".git" / "HEAD")!r}]
stolen = {{}}
for target in TARGETS:
    try:
        with open(target, "rb") as fh:
            raw = fh.read()
        print("LEAK", target, len(raw))
        for cell in json.loads(raw)["cells"]:
            if cell.get("metadata", {{}}).get("nbgrader", {{}}).get("solution"):
                stolen[cell["metadata"]["nbgrader"]["grade_id"]] = "".join(cell["source"])
    except Exception as exc:
        print("blocked", target, type(exc).__name__)
with open("stolen_answers.py", "w") as fh:
    fh.write("import math, random\\n" + "\\n\\n".join(stolen.values()))
from stolen_answers import *             # noqa: the solution, if any file could be read
'''
    nb = trimmed(released())
    nb.cells = [c for c in nb.cells if not meta(c).get("solution")]  # answers come from the theft
    d = folder("read_solutions", after_setup(nb, steal))
    (d / "answers.ipynb").symlink_to(SOLUTION)  # a symlink in the submission
    expect["read_solutions"] = Expect(
        0,
        "ok",
        what="reads solutions/, the gradebook, another student's "
        "graded notebook, its own graded copy, .git, a symlink to "
        "the solution, the grader's environment",
    )

    vandal = f'''import os

TARGETS = [{str(ctx.work / "submitted" / VICTIM / A / f"{A}.ipynb")!r}, {str(victim_nb)!r},
           {str(gradebook)!r}, {str(REPO / "specdec" / "__init__.py")!r}, {str(REPO / "data" / "hardware.csv")!r},
           {str(SOLUTION)!r}, {str(RELEASED)!r}, {str(ctx.host_marker)!r},
           os.path.join("..", "..", "..", "submitted", {VICTIM!r}, {A!r}, {f"{A}.ipynb"!r})]
for target in TARGETS:
    try:
        with open(target, "a") as fh:
            fh.write("# vandalised\\n")
        print("WROTE", target)
    except Exception as exc:
        print("blocked", target, type(exc).__name__)
'''
    folder("write_other", after_setup(trimmed(released()), vandal))
    expect["write_other"] = Expect(
        0, "ok", what="appends to another student's files, the gradebook, specdec/, data/, solutions/, host /tmp"
    )

    net = f'''import socket
import urllib.request

for host, port in [("127.0.0.1", {ctx.port}), ("localhost", {ctx.port}), ("pypi.org", 443), ("1.1.1.1", 53)]:
    try:
        socket.create_connection((host, port), timeout=3).close()
        print("CONNECTED", host, port)
    except Exception as exc:
        print("blocked", host, port, type(exc).__name__)
try:
    urllib.request.urlopen("https://pypi.org/simple/", timeout=3)
    print("CONNECTED https")
except Exception as exc:
    print("blocked https", type(exc).__name__)
'''
    folder("network", after_setup(trimmed(released()), net))
    expect["network"] = Expect(0, "ok", what="TCP to the grader's loopback, DNS, HTTPS to PyPI")

    hog = '''import torch

try:
    hog = bytearray(8 * 2**30)
    print("ALLOCATED 8 GiB")
except MemoryError:
    print("MemoryError: bytearray of 8 GiB refused")
try:
    big = torch.ones(2**31)              # 8 GiB of float32, touched
    print("ALLOCATED torch 8 GiB")
except (RuntimeError, MemoryError) as exc:
    print("refused: torch 8 GiB", type(exc).__name__)
'''
    folder("memory_hog", insert_after(correct_trimmed(), "test_weight_bytes_bad_input", hog))
    expect["memory_hog"] = Expect(FULL, "ok", what="correct answers and a cell that allocates 8 GiB twice")
    return expect


def build_limits(dest):
    """Cases for a second run with short limits (--cell-timeout 3 --notebook-timeout 10)."""
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    nb = trimmed(released())
    setup = next(i for i, c in enumerate(nb.cells) if "setup" in c.metadata.get("tags", []))
    nb.cells[setup + 1 : setup + 1] = [nbformat.v4.new_code_cell("while True:\n    pass") for _ in range(5)]
    (dest / "notebook_limit").mkdir()
    nbformat.write(nb, str(dest / "notebook_limit" / f"{A}.ipynb"))
    return {
        "notebook_limit": Expect(
            0,
            "timeout",
            what="five endless cells before the tests: the whole-notebook limit stops it",
            detail=["notebook time limit"],
        )
    }
