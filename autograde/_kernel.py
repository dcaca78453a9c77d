"""The grading kernel: ipykernel with a guard around the graded test cells.

This file runs INSIDE the sandbox (it is bind-mounted read-only there and run as a script), so it
imports nothing from the course.  Usage (written into the kernelspec by autograde.engine):

    python _kernel.py -f CONNECTION_FILE      with env AUTOGRADE_TEST_CELLS=sha256,sha256,...

A student's cells run exactly as in Jupyter.  A cell whose source hashes to one of the graded test
cells is not handed to IPython: the guard compiles and executes it itself, so that the verdict does not
depend on anything the student's code could have replaced in IPython (custom exception handlers,
``showtraceback``, input/AST transformers, ``run_cell``).  Around each test cell the guard also

- runs the test in a copy of the notebook's namespace, so that what the hidden part defines (its
  reference implementation, its expected values) is invisible to the student's functions, and only
  what the visible part defines is kept afterwards (as in the learner's own notebook);
- restores the builtins and the ``math``/``random``/``operator`` modules to the state they had before
  any student code ran, and hides notebook globals that shadow a builtin the test uses (``abs = ...``);
- clears trace/profile hooks;
- after the cell, fails the test if any of that was changed while it ran (a student function that
  patches ``abs`` when called).

The verdict is sent as a normal Jupyter ``error`` message whose traceback names the test-cell line
("autograde: test cell line N"), which the feedback uses without showing any hidden source.

What it cannot do: student code runs in this same process, so code written to target this guard
(frame introspection, replacing the kernel's message handlers) can still forge a pass.  The grading
tool flags such code statically (autograde.scan); see the README.
"""
import builtins
import hashlib
import math
import operator
import os
import random
import sys
import threading

_TEST_CELLS = frozenset(h for h in os.environ.pop("AUTOGRADE_TEST_CELLS", "").split(",") if h)
_GUARDED_MODULES = (builtins, math, random, operator)
_PRISTINE = {id(m): dict(vars(m)) for m in _GUARDED_MODULES}
_MISSING = object()
# private references, taken before any student code exists
_compile, _exec, _type, _str, _len, _dict, _list, _isinstance = compile, exec, type, str, len, dict, list, isinstance
_BaseException, _CodeType = BaseException, type(compile("0", "<x>", "eval"))
_settrace, _setprofile, _gettrace, _getprofile = sys.settrace, sys.setprofile, sys.gettrace, sys.getprofile
_th_settrace, _th_setprofile = threading.settrace, threading.setprofile
_sha256 = hashlib.sha256
BUILTIN_NAMES = frozenset(k for k in vars(builtins) if not k.startswith("_"))
HIDDEN_MARK = "### BEGIN HIDDEN TESTS"


def _restore_modules():
    """Put every guarded module's attributes back; return 'module.name' for each one that was changed."""
    changed = []
    for module in _GUARDED_MODULES:
        current, pristine = vars(module), _PRISTINE[id(module)]
        for key, value in pristine.items():
            if current.get(key, _MISSING) is not value:
                changed.append(f"{module.__name__}.{key}")
                current[key] = value
    return changed


def _clear_hooks():
    changed = []
    if _gettrace() is not None:
        changed.append("sys.settrace")
    if _getprofile() is not None:
        changed.append("sys.setprofile")
    _settrace(None)
    _setprofile(None)
    _th_settrace(None)
    _th_setprofile(None)
    return changed


def _names(code):
    """Every global/attribute name a code object (and the functions defined in it) refers to."""
    found = set(code.co_names)
    for const in code.co_consts:
        if _isinstance(const, _CodeType):
            found |= _names(const)
    return found


def _safe_text(obj, limit=2000):
    try:
        text = _str(obj)
    except _BaseException:  # a student exception whose __str__ raises
        text = "<unprintable>"
    if _type(text) is not _str:
        text = "<unprintable>"
    return text if _len(text) <= limit else text[:limit] + " ..."


def _failing_line(exc):
    """Line of the test cell (1-based) where the exception left the test code, or 0."""
    tb, line = exc.__traceback__, 0
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == "<test-cell>":
            line = tb.tb_lineno
            break
        tb = tb.tb_next
    return line


def _split(code):
    """(visible part, hidden part or None); the hidden part keeps its line numbers."""
    lines = code.splitlines(keepends=True)
    for i, line in enumerate(lines):
        if line.startswith(HIDDEN_MARK):
            return "".join(lines[:i]), "\n" * i + "".join(lines[i:])
    return code, None


def run_test_cell(code, namespace):
    """Run one graded test cell under the guard; return None if it passed, else (ename, evalue, line).

    The test runs in a copy of the notebook's namespace: what it defines (a hidden reference
    implementation, the expected value `want`) is not visible to the student's functions, whose
    globals are the notebook's namespace.  Afterwards the names the *visible* part of the cell defined
    are copied back, exactly as the learner's own notebook (which has only the visible part) has them.
    """
    _restore_modules()
    _clear_hooks()
    visible, hidden = _split(code)
    try:
        parts = [_compile(visible, "<test-cell>", "exec")]
        if hidden is not None:
            parts.append(_compile(hidden, "<test-cell>", "exec"))
    except SyntaxError:
        try:       # a hidden block that does not start at the top level: one piece, nothing copied back
            parts, visible = [_compile(code, "<test-cell>", "exec")], None
        except SyntaxError as exc:
            return "SyntaxError", _safe_text(exc), exc.lineno or 0
    used = set()
    for part in parts:
        used |= _names(part)
    ns = _dict(namespace)
    for name in used & BUILTIN_NAMES:       # `abs = lambda x: 0` in the notebook does not reach the test
        ns.pop(name, None)
    failure, defined = None, {}
    try:
        try:
            _exec(parts[0], ns)
        finally:
            if visible is not None:
                defined = {k: v for k, v in ns.items() if k != "__builtins__" and namespace.get(k, _MISSING) is not v}
        for part in parts[1:]:
            _exec(part, ns)
    except _BaseException as exc:  # noqa: BLE001  (KeyboardInterrupt on timeout, SystemExit too)
        failure = (_type(exc).__name__, _safe_text(exc), _failing_line(exc))
    for name, value in defined.items():
        if name not in BUILTIN_NAMES or name not in used:
            namespace[name] = value
    tampered = _restore_modules() + _clear_hooks()
    if failure is None and tampered:
        failure = ("GraderIntegrityError",
                   "the test cell ran with modified Python internals: " + ", ".join(sorted(set(tampered))[:8]), 0)
    return failure


def main():
    from ipykernel.ipkernel import IPythonKernel
    from ipykernel.kernelapp import IPKernelApp

    class GuardedKernel(IPythonKernel):
        implementation = "autograde-guarded-ipython"

        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self._ag_namespace = self.shell.user_ns
            # IPython adds its own builtins (display, get_ipython, ...) when the shell starts: keep them
            _PRISTINE[id(builtins)] = _dict(vars(builtins))

        async def do_execute(self, code, silent, store_history=True, user_expressions=None,
                             allow_stdin=False, **kwargs):
            if _sha256(code.encode("utf-8", "surrogatepass")).hexdigest() not in _TEST_CELLS:
                return await super().do_execute(code, silent, store_history, user_expressions, allow_stdin,
                                                **kwargs)
            failure = run_test_cell(code, self._ag_namespace)
            for stream in (sys.stdout, sys.stderr):
                try:
                    stream.flush()
                except _BaseException:
                    pass
            reply = {"status": "ok", "execution_count": self.execution_count, "payload": [],
                     "user_expressions": {}}
            if failure is not None:
                ename, evalue, line = failure
                content = {"ename": ename, "evalue": evalue,
                           "traceback": [f"autograde: test cell line {line}", f"{ename}: {evalue}"]}
                self.send_response(self.iopub_socket, "error", content)
                reply.update(status="error", **content)
            return reply

    IPKernelApp.launch_instance(kernel_class=GuardedKernel)


if __name__ == "__main__":
    sys.path = [p for p in sys.path if p and os.path.abspath(p) != os.path.dirname(os.path.abspath(__file__))]
    main()
