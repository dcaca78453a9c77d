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
- restores the builtins and the ``math``/``random``/``operator``/``re`` modules to the state they had before
  any student code ran, and hides notebook globals that shadow a builtin the test uses (``abs = ...``);
- clears trace/profile hooks;
- after the cell, fails the test if any of that was changed while it ran (a student function that
  patches ``abs`` when called);
- keeps what the course's *locked* cells (the setup cell, given cells restating earlier answers) bound
  trustworthy: after each locked cell it records the objects that cell bound in the notebook, the
  attributes of the course's own modules (``specdec``) and of their classes, and a copy of plain data
  (dicts, lists, dataclasses) the cell bound.  Before and after each test cell every one of them is
  compared with the record (objects by identity: a student cell that re-imports ``numpy as np`` binds the
  same object and is fine) and restored; a difference fails that test with ``GraderIntegrityError``
  naming what was rebound.  A student who rebinds ``greedy_generate`` or ``ForwardCounter`` in an answer
  cell cannot make a test compare against, or count with, their own version.

The verdict is sent as a normal Jupyter ``error`` message whose traceback names the test-cell line
("autograde: test cell line N"), which the feedback uses without showing any hidden source.

What it cannot do: student code runs in this same process, so code written to target this guard
(frame introspection, replacing the kernel's message handlers) can still forge a pass.  The grading
tool flags such code statically (autograde.scan); see the README.
"""
import builtins
import copy
import dataclasses
import hashlib
import math
import operator
import os
import random
import re
import symtable
import sys
import threading

_TEST_CELLS = frozenset(h for h in os.environ.pop("AUTOGRADE_TEST_CELLS", "").split(",") if h)
# sha256 -> grade id of the locked cells that are not tests (setup, given answers)
_LOCKED_CELLS = dict(item.split(":", 1) for item in os.environ.pop("AUTOGRADE_LOCKED_CELLS", "").split(",")
                     if ":" in item)
_COURSE_PACKAGES = tuple(p for p in os.environ.pop("AUTOGRADE_COURSE_PACKAGES", "specdec").split(",") if p)
_GUARDED_MODULES = (builtins, math, random, operator, re)   # re: the tests' message checks use re.search
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


# ------------------------------------------------------------------------- what the locked cells bound
_IPYTHON_NAMES = frozenset({"_", "__", "___", "_i", "_ii", "_iii", "_ih", "_oh", "_dh", "In", "Out", "exit", "quit",
                            "get_ipython", "__builtins__", "__name__", "__doc__", "__package__", "__loader__",
                            "__spec__", "__builtin__"})
_PLAIN = (type(None), bool, int, float, complex, str, bytes)
_MAX_DATA_ITEMS = 100_000


def _ipython_name(name):
    return name in _IPYTHON_NAMES or (name[:2] == "_i" and name[2:].isdigit()) or (name[:1] == "_" and name[1:].isdigit())


def _module_level_bound(code):
    """Names a cell binds at module level (assignments, imports, def, class; `global` inside functions)."""
    try:
        table = symtable.symtable(code, "<locked-cell>", "exec")
    except SyntaxError:
        return set()
    bound = {s.get_name() for s in table.get_symbols() if s.is_assigned() or s.is_imported()}
    stack = list(table.get_children())
    while stack:
        child = stack.pop()
        bound |= {s.get_name() for s in child.get_symbols() if s.is_declared_global() and s.is_assigned()}
        stack.extend(child.get_children())
    return bound


def _is_data(obj, budget=None):
    """True for plain data: numbers, strings, and dicts/lists/tuples/sets/dataclass instances of them."""
    budget = budget if budget is not None else [_MAX_DATA_ITEMS]
    budget[0] -= 1
    if budget[0] < 0:
        return False
    kind = _type(obj)
    if kind in _PLAIN:
        return True
    if kind in (list, tuple, set, frozenset):
        return all(_is_data(x, budget) for x in obj)
    if kind is dict:
        return all(_is_data(k, budget) and _is_data(v, budget) for k, v in obj.items())
    if dataclasses.is_dataclass(obj) and not _isinstance(obj, type):
        return all(_is_data(getattr(obj, f.name), budget) for f in dataclasses.fields(obj))
    return False


def _same_data(a, b):
    return _type(a) is _type(b) and repr(a) == repr(b)


def _restore_data(obj, saved):
    """Put a copy of `saved` back into `obj` in place where the type allows it; return False otherwise."""
    fresh = copy.deepcopy(saved)
    if _type(obj) is dict:
        obj.clear()
        obj.update(fresh)
    elif _type(obj) is list:
        obj[:] = fresh
    elif _type(obj) is set:
        obj.clear()
        obj.update(fresh)
    elif dataclasses.is_dataclass(obj) and not _isinstance(obj, type):
        for f in dataclasses.fields(obj):
            object.__setattr__(obj, f.name, getattr(fresh, f.name))
    else:
        return False
    return True


class LockedBindings:
    """What the course's locked cells bound, recorded after each of them and checked around each test.

    names:   {name: object} bound in the notebook by a locked cell (compared by identity);
    data:    {name: deep copy} of those objects that are plain data (compared by value, restored in place);
    modules: {module name: (module, copy of its namespace)} for the course's own package;
    classes: [(class, copy of its __dict__)] for the classes defined in those modules;
    methods: {name: {attribute: callable}} instance attributes that are callables, of bound objects.
    """

    def __init__(self, packages=_COURSE_PACKAGES):
        self.packages = packages
        self.names, self.where, self.data, self.modules, self.classes, self.methods = {}, {}, {}, {}, [], {}

    def before_locked_cell(self, namespace):
        return _dict(namespace)

    def after_locked_cell(self, code, namespace, before, label="locked cell"):
        bound = _module_level_bound(code)
        for name, value in list(namespace.items()):
            if _ipython_name(name):
                continue
            if name in bound or before.get(name, _MISSING) is not value:
                self._record(name, value, label)
        self._record_modules()

    def after_test_cell(self, defined):
        """A test cell is trusted: what its visible part binds is the new reference."""
        for name, value in defined.items():
            if name in self.names:
                self._record(name, value, self.where.get(name, "a test cell"))

    def _record(self, name, value, label):
        self.names[name], self.where[name] = value, label
        self.data.pop(name, None)
        self.methods.pop(name, None)
        if _type(value) not in _PLAIN and _is_data(value):
            self.data[name] = copy.deepcopy(value)
        elif not _isinstance(value, (type, type(sys))) and not callable(value):
            try:
                attrs = vars(value)
            except TypeError:
                attrs = None
            if attrs is not None:
                self.methods[name] = {k: v for k, v in attrs.items() if callable(v) and not _isinstance(v, type)}

    def _record_modules(self):
        for modname, module in list(sys.modules.items()):
            if module is None or modname in self.modules:
                continue
            if not any(modname == p or modname.startswith(p + ".") for p in self.packages):
                continue
            self.modules[modname] = (module, _dict(vars(module)))
            for value in list(vars(module).values()):
                if _isinstance(value, type) and getattr(value, "__module__", None) == modname:
                    self.classes.append((value, _dict(value.__dict__)))

    def check_and_restore(self, namespace):
        """Restore everything recorded; return a sorted list of what had been changed (empty: nothing)."""
        changed = []
        for name, value in self.names.items():
            if namespace.get(name, _MISSING) is not value:
                changed.append(name)
                namespace[name] = value
            if name in self.data and not _same_data(value, self.data[name]):
                changed.append(f"{name} (its contents)")
                if not _restore_data(value, self.data[name]):
                    namespace[name] = copy.deepcopy(self.data[name])
                    self.names[name] = namespace[name]
            for attr, method in self.methods.get(name, {}).items():
                if getattr(value, "__dict__", {}).get(attr, _MISSING) is not method:
                    changed.append(f"{name}.{attr}")
                    try:
                        setattr(value, attr, method)
                    except _BaseException:
                        pass
            if name in self.methods:
                try:
                    extra = [k for k, v in vars(value).items() if callable(v) and not _isinstance(v, type)
                             and k not in self.methods[name]]
                except TypeError:
                    extra = []
                for attr in extra:
                    changed.append(f"{name}.{attr}")
                    try:
                        delattr(value, attr)
                    except _BaseException:
                        pass
        for modname, (module, saved) in self.modules.items():
            current = vars(module)
            for key, value in saved.items():
                if current.get(key, _MISSING) is not value:
                    changed.append(f"{modname}.{key}")
                    current[key] = value
        for cls, saved in self.classes:
            current = cls.__dict__
            for key in [k for k in current if k not in saved]:
                changed.append(f"{cls.__module__}.{cls.__qualname__}.{key}")
                try:
                    delattr(cls, key)
                except _BaseException:
                    pass
            for key, value in saved.items():
                if key in ("__dict__", "__weakref__", "__doc__"):
                    continue
                if current.get(key, _MISSING) is not value:
                    changed.append(f"{cls.__module__}.{cls.__qualname__}.{key}")
                    try:
                        setattr(cls, key, value)
                    except _BaseException:
                        pass
        return sorted(set(changed))

    def message(self, changed, when):
        where = sorted({self.where.get(c.split(".")[0].split(" ")[0], "") for c in changed} - {""})
        return (f"{when}, code outside the course's locked cells had rebound or changed what those cells define "
                f"and the tests rely on: {', '.join(changed[:8])}{' ...' if _len(changed) > 8 else ''}"
                f"{' (defined in ' + ', '.join(where) + ')' if where else ''}. The course's objects were put back "
                f"and this test counts as failed: give your own helpers new names and leave the given ones as "
                f"they are.")


LOCKED = LockedBindings()


def run_test_cell(code, namespace, locked=None):
    """Run one graded test cell under the guard; return None if it passed, else (ename, evalue, line).

    The test runs in a copy of the notebook's namespace: what it defines (a hidden reference
    implementation, the expected value `want`) is not visible to the student's functions, whose
    globals are the notebook's namespace.  Afterwards the names the *visible* part of the cell defined
    are copied back, exactly as the learner's own notebook (which has only the visible part) has them.
    """
    locked = LOCKED if locked is None else locked
    _restore_modules()
    _clear_hooks()
    rebound = locked.check_and_restore(namespace)
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
    start = _dict(namespace)                # what the test starts from: its own bindings are what differs
    for name in used & BUILTIN_NAMES:       # `abs = lambda x: 0` in the notebook does not reach the test
        ns.pop(name, None)
    failure, defined = None, {}
    try:
        try:
            _exec(parts[0], ns)
        finally:
            if visible is not None:
                defined = {k: v for k, v in ns.items() if k != "__builtins__" and start.get(k, _MISSING) is not v}
        for part in parts[1:]:
            _exec(part, ns)
    except _BaseException as exc:  # noqa: BLE001  (KeyboardInterrupt on timeout, SystemExit too)
        failure = (_type(exc).__name__, _safe_text(exc), _failing_line(exc))
    for name, value in defined.items():
        if name not in BUILTIN_NAMES or name not in used:
            namespace[name] = value
    tampered = _restore_modules() + _clear_hooks()
    locked.after_test_cell(defined)
    during = locked.check_and_restore(namespace)
    if rebound:
        failure = ("GraderIntegrityError", locked.message(rebound, "Before this test"), 0)
    elif failure is None and tampered:
        failure = ("GraderIntegrityError",
                   "the test cell ran with modified Python internals: " + ", ".join(sorted(set(tampered))[:8]), 0)
    elif failure is None and during:
        failure = ("GraderIntegrityError", locked.message(during, "While this test ran"), 0)
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
            digest = _sha256(code.encode("utf-8", "surrogatepass")).hexdigest()
            if digest in _LOCKED_CELLS:
                before = LOCKED.before_locked_cell(self._ag_namespace)
                try:
                    return await super().do_execute(code, silent, store_history, user_expressions, allow_stdin,
                                                    **kwargs)
                finally:
                    LOCKED.after_locked_cell(code, self._ag_namespace, before, _LOCKED_CELLS[digest])
            if digest not in _TEST_CELLS:
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
