"""The grading kernel: ipykernel with a guard around the graded test cells.

This file runs INSIDE the sandbox (it is bind-mounted read-only there and run as a script), so it
imports nothing from the course.  Usage (written into the kernelspec by autograde.executor):

    python guard_kernel.py -f CONNECTION_FILE     with env AUTOGRADE_GUARD_FILE=PATH

PATH is a JSON file the grader wrote for this kernel alone; the kernel reads it and deletes it before
any cell runs.  It holds the graded test cells' source (the grader sends each test cell as a one-line
stub naming it, so the test's text is never in the kernel's request, its history or `In`), the locked
cells' hashes, the modules the course's cells import, and a key that signs each test's verdict.

A student's cells run exactly as in Jupyter.  A graded test cell is not handed to IPython: the guard
compiles and executes it itself, so that the verdict does not depend on anything the student's code could
have replaced in IPython (custom exception handlers, ``showtraceback``, input/AST transformers,
``run_cell``).  Around each test cell the guard also

- runs the test in a copy of the notebook's namespace, so that what the hidden part defines (its
  reference implementation, its expected values) is invisible to the student's functions, and only
  what the visible part defines is kept afterwards (as in the learner's own notebook);
- restores the builtins and the ``math``/``random``/``operator``/``re`` modules to the state they had before
  any student code ran, and hides notebook globals that shadow a builtin the test uses (``abs = ...``);
- clears trace/profile hooks (``sys`` and ``threading``);
- after the cell, fails the test if any of that was changed while it ran (a student function that
  patches ``abs`` when called);
- keeps what the course's *locked* cells (the setup cell, given cells restating earlier answers) bound
  trustworthy: after each locked cell it records the objects that cell bound in the notebook, the
  attributes of the course's own modules (``specdec``) and of their classes, the code, defaults and
  closure of every function among them, a copy of plain data (dicts, lists, dataclasses) the cell bound, and
  which module object each name of ``sys.modules`` maps to.  Before and after each test cell every one of
  them is compared with the record (objects by identity: a student cell that re-imports ``numpy as np``
  binds the same object and is fine) and restored; a difference fails that test with
  ``GraderIntegrityError`` naming what was rebound;
- verifies its own functions and their code before it signs a verdict: a test passes only when the guard
  ran it to its end and sends the grader a verdict signed with the kernel's key (an unsigned pass is a
  failure, so replacing the kernel's handlers or this runner passes nothing).

An audit hook (PEP 578, installed before any student code and impossible to remove from Python) watches
what tampering needs and answers never do.  Code from a student's cell that walks the interpreter's
objects (``gc``), installs trace or profile hooks or another audit hook, swaps a function's code or
defaults, or uses ``ctypes`` is refused (``PermissionError``) and recorded as tampering; reading frames
(``sys._getframe``, ``inspect.stack``, a traceback's or generator's frame), ``exec``/``compile`` of its own
strings, are recorded for review, and frame access is refused while a test runs.  The kernel sends the
records to the grader after every cell (autograde.executor, status ``tampered`` or ``flagged``).

What it cannot do: student code runs in this same process, so code written against this guard can still
reach objects the hook does not see; the grading tool also flags such code statically (autograde.scan).
docs/grading.md has the threat model.
"""

import builtins
import copy
import dataclasses
import hashlib
import hmac
import json
import math
import operator
import os
import random
import re
import symtable
import sys
import sysconfig
import threading
import types

_COURSE_PACKAGES = ("specdec",)  # the course's own package (the grader's guard file may name others)
_GUARDED_MODULES = (builtins, math, random, operator, re)  # re: the tests' message checks use re.search
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
    """Remove trace and profile hooks (sys and threading); return the names of those that were set."""
    changed = []
    if _gettrace() is not None:
        changed.append("sys.settrace")
    if _getprofile() is not None:
        changed.append("sys.setprofile")
    if getattr(threading, "_trace_hook", None) is not None:
        changed.append("threading.settrace")
    if getattr(threading, "_profile_hook", None) is not None:
        changed.append("threading.setprofile")
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


BY_TEST = " (raised by the test's own code)"  # after the line in a failed test's traceback (see _raised_by_test)


def _raised_by_test(exc, student_files=None):
    """True where no code of the student's ran between the test cell's last frame and the raise: the test's own
    code raised on what came back (`float(None)`), so a hint must not say the learner's code raised it. A frame
    is the student's when its file is one of their cells (`student_files`, the audit's), or, without that list,
    when it is neither the standard library's nor a package's."""
    tb, after = exc.__traceback__, None
    while tb is not None:
        name = tb.tb_frame.f_code.co_filename
        if name == "<test-cell>":
            after = []
        elif after is not None:
            after.append(name)
        tb = tb.tb_next
    if after is None:
        return False
    for name in after:
        if (
            (name in student_files)
            if student_files is not None
            else (not _is_stdlib(name) and "-packages" + os.sep not in name)
        ):
            return False
    return True


def _split(code):
    """(visible part, hidden part or None); the hidden part keeps its line numbers."""
    lines = code.splitlines(keepends=True)
    for i, line in enumerate(lines):
        if line.startswith(HIDDEN_MARK):
            return "".join(lines[:i]), "\n" * i + "".join(lines[i:])
    return code, None


# ------------------------------------------------------------------------------------ the audit hook
_STDLIB = tuple(os.path.realpath(sysconfig.get_paths()[k]) + os.sep for k in ("stdlib", "platstdlib"))
_STDLIB_FILE = os.path.realpath(os.__file__)


def _is_stdlib(filename):
    """True for the standard library's own code (not site-packages, not a notebook cell)."""
    if filename.startswith("<frozen "):
        return True
    return filename.startswith(_STDLIB) and "-packages" + os.sep not in filename


def _stdlib_file(name):
    return os.path.join(os.path.dirname(_STDLIB_FILE), name)


# events that tampering needs and answers never do: refused and recorded as tampering
_TAMPER_EVENTS = {
    "gc.get_objects": "walked the interpreter's objects (gc.get_objects)",
    "gc.get_referrers": "walked the interpreter's objects (gc.get_referrers)",
    "gc.get_referents": "walked the interpreter's objects (gc.get_referents)",
    "sys.settrace": "installed a trace hook (sys.settrace)",
    "sys.setprofile": "installed a profile hook (sys.setprofile)",
    "sys._current_frames": "read every thread's frame (sys._current_frames)",
    "sys._current_exceptions": "read every thread's exception (sys._current_exceptions)",
    "sys.addaudithook": "installed an audit hook (sys.addaudithook)",
}
_FUNCTION_ATTRS = frozenset({"__code__", "__defaults__", "__kwdefaults__"})
# attributes whose read hands out a frame (audited by CPython as object.__getattr__)
_FRAME_ATTRS = frozenset({"tb_frame", "gi_frame", "cr_frame", "ag_frame"})
# standard-library callers whose own frame access is theirs (warnings and logging find their caller's line;
# the traceback module formats a caught exception, whose frames are the student's own)
# (collections, typing, enum and dataclasses read their caller's module name to name a class they make)
_FRAME_CALLERS = {
    "sys._getframe": frozenset(
        _stdlib_file(n)
        for n in (
            "warnings.py",
            os.path.join("logging", "__init__.py"),
            os.path.join("collections", "__init__.py"),
            "typing.py",
            "enum.py",
            "dataclasses.py",
        )
    ),
    "tb_frame": frozenset({_stdlib_file("traceback.py")}),
}


class Audit:
    """A PEP 578 audit hook that attributes events to the student's cells and records (or refuses) them.

    student_files: {code file name of a cell the student wrote or changed: its execution count}.  An event is
    the student's when the first frame above it that is not the standard library's comes from such a cell
    (so `inspect.stack()` in a student function is the student's, a library's own `warnings.warn` is not).
    Severity: "tamper" (refused, no answer needs it) or "flag" (recorded for review: honest debugging code
    such as `inspect.stack()` can do it; frame access is refused while a test runs, when only a cheat needs
    the caller's frames).
    """

    def __init__(self):
        self.student_files = {}
        self.events = []
        self.in_test = False
        self._busy = set()
        self._get_ident = threading.get_ident
        self._getframe = sys._getframe

    def _origin(self, frame, callers=frozenset(), walk=True):
        """Execution count of the student cell whose code caused the event, or None.

        Walks up through the standard library's frames (not through an import: a module's own code at import
        time is not the importer's, and not through `callers`) to the first other frame."""
        f = frame
        while f is not None:
            name = f.f_code.co_filename
            count = self.student_files.get(name)
            if count is not None:
                return count
            if not walk or name in callers or not _is_stdlib(name) or name.startswith("<frozen importlib"):
                return None
            f = f.f_back
        return None

    def hook(self, event, args):
        severity = what = None
        if event in _TAMPER_EVENTS:
            severity, what = "tamper", _TAMPER_EVENTS[event]
        elif event == "object.__setattr__":
            if _len(args) < 2 or _type(args[0]) is not types.FunctionType or args[1] not in _FUNCTION_ATTRS:
                return
            severity, what = "tamper", f"changed a function's {args[1]} ({getattr(args[0], '__qualname__', '?')})"
        elif event.startswith("ctypes."):
            severity, what = "tamper", f"used ctypes ({event})"
        elif event == "sys._getframe":
            severity, what = "frame", "read a frame (sys._getframe, inspect)"
        elif event == "object.__getattr__":
            if _len(args) < 2 or args[1] not in _FRAME_ATTRS:
                return
            severity, what = "frame", f"read a frame ({args[1]})"
        elif event in ("exec", "compile"):
            severity, what = "exec", f"ran code of its own making ({event})"
        else:
            return
        me = self._get_ident()
        if me in self._busy:
            return
        self._busy.add(me)
        try:
            callers = _FRAME_CALLERS.get(args[1] if event == "object.__getattr__" else event, frozenset())
            frame = self._getframe(1)
            origin = self._origin(frame, callers, walk=event not in ("exec", "compile"))
        finally:
            self._busy.discard(me)
        if origin is None:
            return
        refuse = severity == "tamper" or (severity == "frame" and self.in_test)
        self.events.append(
            {
                "severity": "tamper" if severity == "tamper" else "flag",
                "what": what,
                "origin": origin,
                "during_test": self.in_test,
                "refused": refuse,
            }
        )
        if refuse:
            raise PermissionError(f"autograde: your code {what}; graded notebooks may not do this")

    def note(self, what, origin=None):
        """Record tampering the guard found by comparison (not through the hook)."""
        self.events.append(
            {"severity": "tamper", "what": what, "origin": origin, "during_test": self.in_test, "refused": False}
        )

    def take(self):
        events, self.events = self.events, []
        return events


# ------------------------------------------------------------------------- what the locked cells bound
_IPYTHON_NAMES = frozenset(
    {
        "_",
        "__",
        "___",
        "_i",
        "_ii",
        "_iii",
        "_ih",
        "_oh",
        "_dh",
        "In",
        "Out",
        "exit",
        "quit",
        "get_ipython",
        "__builtins__",
        "__name__",
        "__doc__",
        "__package__",
        "__loader__",
        "__spec__",
        "__builtin__",
    }
)
_PLAIN = (type(None), bool, int, float, complex, str, bytes)
_MAX_DATA_ITEMS = 100_000


def _ipython_name(name):
    return (
        name in _IPYTHON_NAMES or (name[:2] == "_i" and name[2:].isdigit()) or (name[:1] == "_" and name[1:].isdigit())
    )


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


def _cells(fn):
    """The contents of a function's closure cells (a _MISSING for an empty one)."""
    out = []
    for cell in fn.__closure__ or ():
        try:
            out.append(cell.cell_contents)
        except ValueError:
            out.append(_MISSING)
    return tuple(out)


def _internals(fn):
    return fn.__code__, fn.__defaults__, fn.__kwdefaults__, _cells(fn)


def _check_internals(fn, saved, label, changed):
    """Compare a function's code, defaults and closure with `saved` (by identity); put back what differs."""
    code, defaults, kwdefaults, cells = saved
    for attr, value in (("__code__", code), ("__defaults__", defaults), ("__kwdefaults__", kwdefaults)):
        if getattr(fn, attr) is not value:
            changed.append(f"{label}.{attr}")
            try:
                object.__setattr__(fn, attr, value)
            except _BaseException:
                pass
    now = _cells(fn)
    if _len(now) == _len(cells) and any(a is not b for a, b in zip(now, cells)):
        changed.append(f"{label}.__closure__")
        for cell, value in zip(fn.__closure__, cells):
            if value is not _MISSING:
                cell.cell_contents = value


class LockedBindings:
    """What the course's locked cells bound, recorded after each of them and checked around each test.

    names:   {name: object} bound in the notebook by a locked cell (compared by identity);
    data:    {name: deep copy} of those objects that are plain data (compared by value, restored in place);
    modules: {module name: (module, copy of its namespace)} for the course's own package;
    classes: [(class, copy of its __dict__)] for the classes defined in those modules;
    methods: {name: {attribute: callable}} instance attributes that are callables, of bound objects;
    functions: [(label, function, (code, defaults, kwdefaults, closure contents))] of the functions among them
             (bound names, module functions, class methods): a swapped `__code__` or closure cell is a change;
    sysmodules: {name: module} of sys.modules, recorded before any student code and after each locked cell.
    """

    def __init__(self, packages=_COURSE_PACKAGES):
        self.packages = packages
        self.names, self.where, self.data, self.modules, self.classes, self.methods = {}, {}, {}, {}, [], {}
        self.functions, self.sysmodules = {}, {}

    def record_sys_modules(self):
        for name, module in list(sys.modules.items()):
            if name not in self.sysmodules and module is not None:
                self.sysmodules[name] = module

    def _record_function(self, label, fn):
        if _type(fn) is types.FunctionType:
            self.functions[label] = (fn, _internals(fn))

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
        self.record_sys_modules()

    def after_test_cell(self, defined):
        """A test cell is trusted: what its visible part binds is the new reference."""
        for name, value in defined.items():
            if name in self.names:
                self._record(name, value, self.where.get(name, "a test cell"))

    def _record(self, name, value, label):
        self.names[name], self.where[name] = value, label
        self._record_function(name, value)
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
            if not self._is_course_module(modname):
                continue
            self.modules[modname] = (module, _dict(vars(module)))
            for key, value in list(vars(module).items()):
                if _isinstance(value, type) and getattr(value, "__module__", None) == modname:
                    self.classes.append((value, _dict(value.__dict__)))
                    for attr, member in list(value.__dict__.items()):
                        self._record_function(
                            f"{modname}.{value.__qualname__}.{attr}", getattr(member, "__func__", member)
                        )
                elif getattr(value, "__module__", None) == modname:
                    self._record_function(f"{modname}.{key}", value)

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
                    extra = [
                        k
                        for k, v in vars(value).items()
                        if callable(v) and not _isinstance(v, type) and k not in self.methods[name]
                    ]
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
        for label, (fn, saved) in self.functions.items():
            _check_internals(fn, saved, label, changed)
        changed += self.check_and_restore_sys_modules()
        return sorted(set(changed))

    def _is_course_module(self, name):
        return any(name == p or name.startswith(p + ".") for p in self.packages)

    def check_and_restore_sys_modules(self):
        """Compare sys.modules with the record; put back what differs; return what a student's code changed.

        A library may replace its own entry with another instance of its own module class (transformers'
        lazy module does, on first use): same class (not a plain module), same file, same name.  That is taken
        as the new record; the course's own modules never do it, and a plain module is never replaced."""
        changed = []
        for name, module in list(self.sysmodules.items()):
            now = sys.modules.get(name, _MISSING)
            if now is module:
                continue
            if (
                now is not _MISSING
                and not self._is_course_module(name)
                and _type(now) is _type(module)
                and _type(module) is not types.ModuleType
                and getattr(now, "__name__", None) == name
                and getattr(now, "__file__", None) is not None
                and getattr(now, "__file__", None) == getattr(module, "__file__", None)
            ):
                self.sysmodules[name] = now
                continue
            if now is not _MISSING or self._is_course_module(name):
                changed.append(f"sys.modules[{name!r}]")
            sys.modules[name] = module
        return changed

    def message(self, changed, when):
        where = sorted({self.where.get(c.split(".")[0].split(" ")[0], "") for c in changed} - {""})
        return (
            f"{when}, code outside the course's locked cells had rebound or changed what those cells define "
            f"and the tests rely on: {', '.join(changed[:8])}{' ...' if _len(changed) > 8 else ''}"
            f"{' (defined in ' + ', '.join(where) + ')' if where else ''}. The course's objects were put back "
            f"and this test counts as failed: give your own helpers new names and leave the given ones as "
            f"they are."
        )


LOCKED = LockedBindings()


class Failure(tuple):
    """A failed test: the tuple (ename, evalue, line), and `rebound`, the list of what code outside the course's
    locked cells had rebound or changed of what those cells define ([] for every other failure).

    evalue is the message for people; the grader's verdict reads `rebound`, which the kernel sends beside the
    message (error_content), so that rewording the message changes no verdict."""

    def __new__(cls, ename, evalue, line, rebound=(), by_test=False):
        failure = tuple.__new__(cls, (ename, evalue, line))
        failure.rebound = _list(rebound)
        failure.by_test = by_test is True
        return failure


def error_content(failure):
    """The content of the kernel's error message for a failed test: the error as Jupyter shows it (the
    traceback names the test cell's line, and BY_TEST after it where the test's own code raised) and the
    structured REBOUND_FIELD (autograde.executor keeps it)."""
    ename, evalue, line = failure
    where = f"autograde: test cell line {line}" + (BY_TEST if getattr(failure, "by_test", False) is True else "")
    return {
        "ename": ename,
        "evalue": evalue,
        "traceback": [where, f"{ename}: {evalue}"],
        REBOUND_FIELD: _list(getattr(failure, "rebound", ())),
    }


def run_test_cell(code, namespace, locked=None, audit=None):
    """Run one graded test cell under the guard; return None if it passed, else a Failure (ename, evalue, line).

    The test runs in a copy of the notebook's namespace: what it defines (a hidden reference
    implementation, the expected value `want`) is not visible to the student's functions, whose
    globals are the notebook's namespace.  Afterwards the names the *visible* part of the cell defined
    are copied back, exactly as the learner's own notebook (which has only the visible part) has them.
    """
    locked = LOCKED if locked is None else locked
    _restore_modules()
    hooks = _clear_hooks()
    if audit is not None:
        for hook in hooks:
            audit.note(f"left a {hook} hook installed")
    rebound = locked.check_and_restore(namespace)
    visible, hidden = _split(code)
    try:
        parts = [_compile(visible, "<test-cell>", "exec")]
        if hidden is not None:
            parts.append(_compile(hidden, "<test-cell>", "exec"))
    except SyntaxError:
        try:  # a hidden block that does not start at the top level: one piece, nothing copied back
            parts, visible = [_compile(code, "<test-cell>", "exec")], None
        except SyntaxError as exc:
            return Failure("SyntaxError", _safe_text(exc), exc.lineno or 0)
    used = set()
    for part in parts:
        used |= _names(part)
    ns = _dict(namespace)
    start = _dict(namespace)  # what the test starts from: its own bindings are what differs
    for name in used & BUILTIN_NAMES:  # `abs = lambda x: 0` in the notebook does not reach the test
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
        failure = Failure(
            _type(exc).__name__,
            _safe_text(exc),
            _failing_line(exc),
            by_test=_raised_by_test(exc, None if audit is None else audit.student_files),
        )
    for name, value in defined.items():
        if name not in BUILTIN_NAMES or name not in used:
            namespace[name] = value
    tampered = _restore_modules() + _clear_hooks()
    locked.after_test_cell(defined)
    during = locked.check_and_restore(namespace)
    if rebound:
        failure = Failure("GraderIntegrityError", locked.message(rebound, "Before this test"), 0, rebound)
    elif failure is None and tampered:
        failure = Failure(
            "GraderIntegrityError",
            "the test cell ran with modified Python internals: " + ", ".join(sorted(set(tampered))[:8]),
            0,
        )
    elif failure is None and during:
        failure = Failure("GraderIntegrityError", locked.message(during, "While this test ran"), 0, during)
    return failure


STUB = "# autograde: graded test cell "  # what the grader sends instead of a test's source
PROBE_STUB = "# autograde: probe "  # a judge's probe: the marker, then its request as JSON (autograde.judge)
PROBE_MIME = "application/x-autograde-probe+json"  # autograde.judge.MIME: the probe's answer
AUDIT_MIME = "application/vnd.autograde.audit+json"
EVIDENCE_MIME = "application/vnd.autograde.verdict+json"
REBOUND_FIELD = "rebound"  # of a failed test's error message: what a student's cell rebound


def _flush_streams():
    """Flush the kernel's stdout and stderr, so what a test or a probe printed goes out before its reply."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except _BaseException:
            pass


def evidence_tag(key, digest, nonce):
    """The signature of a passed test: only the kernel's guard and the grader hold `key`."""
    return hmac.new(key, f"{digest}:{nonce}:passed".encode(), "sha256").hexdigest()


def read_guard_file(path):
    """The grader's instructions for this kernel (see the module docstring); the file is deleted."""
    if not path:
        return {}
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    finally:
        try:
            os.unlink(path)
        except OSError:
            pass


def _guard_snapshot(namespace):
    """What the guard's own module holds: {name: object}, and the code of its functions and methods."""
    names = _dict(namespace)
    code = {}
    for name, value in names.items():
        if _type(value) is types.FunctionType and value.__globals__ is namespace:
            code[name] = (value, value.__code__)
        elif _isinstance(value, type) and value.__module__ == namespace.get("__name__"):
            for attr, member in value.__dict__.items():
                if _type(member) is types.FunctionType:
                    code[f"{name}.{attr}"] = (member, member.__code__)
    return names, code


def _verify_guard(namespace, names, code):
    """Put back any of the guard's own names or function code that changed; return what had changed."""
    changed = []
    for name, value in names.items():
        if namespace.get(name, _MISSING) is not value:
            changed.append(name)
            namespace[name] = value
    for label, (fn, saved) in code.items():
        if fn.__code__ is not saved:
            changed.append(f"{label}.__code__")
            object.__setattr__(fn, "__code__", saved)
    return changed


def _cap_torch_threads(value):
    """Hold torch to `value` threads (the grader's share of the cores for this kernel, AUTOGRADE_THREADS): set it
    now, and make torch.set_num_threads(n) set min(n, value), so that a notebook asking for 2 threads gets its
    share and kernels graded side by side do not oversubscribe the cores. Nothing happens without a value."""
    try:
        limit = int(value)
    except (TypeError, ValueError):
        return
    if limit < 1:
        return
    try:
        import torch
    except BaseException:  # noqa: BLE001  (a notebook without torch has no pool to cap)
        return
    set_threads = torch.set_num_threads
    set_threads(limit)

    def set_num_threads(n):
        set_threads(max(1, min(int(n), limit)))

    set_num_threads.__doc__ = (
        f"torch.set_num_threads under grading: at most {limit} thread(s), this kernel's share "
        f"of the cores. {set_threads.__doc__ or ''}"
    )
    torch.set_num_threads = set_num_threads


def main():
    from ipykernel.ipkernel import IPythonKernel
    from ipykernel.kernelapp import IPKernelApp

    # everything the guard keeps lives in this function's closure, not in module globals
    config = read_guard_file(os.environ.pop("AUTOGRADE_GUARD_FILE", ""))
    key = bytes.fromhex(config.get("key", "")) or os.urandom(32)
    tests = _dict(config.get("tests", {}))  # sha256 -> a graded test cell's source
    locked_cells = _dict(config.get("locked", {}))  # sha256 -> grade id of a locked cell (setup, given)
    preimport = _list(config.get("preimport", []))
    locked = LockedBindings(packages=tuple(config.get("packages", _COURSE_PACKAGES)))
    audit = Audit()
    if config.get("audit"):  # the grader turns it on (off only to measure what it costs)
        sys.addaudithook(audit.hook)
    runner, verify, send_tag, make_error, fail = run_test_cell, _verify_guard, evidence_tag, error_content, Failure
    # the judges' probe runner (autograde.judge.runner_source), compiled once, here, before any student code: a
    # probe then sends a line of data, and no probe's code is compiled in the kernel (nor audited as a cell's)
    probe_space = {"__builtins__": builtins}
    if config.get("probe"):
        _exec(_compile(_str(config["probe"]), "<autograde-probe>", "exec"), probe_space)
    probe_runner = probe_space.get("_ag_probe")
    own = globals()
    own_names, own_code = _guard_snapshot(own)

    class GuardedKernel(IPythonKernel):
        implementation = "autograde-guarded-ipython"

        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            # IPython adds its own builtins (display, get_ipython, ...) when the shell starts: keep them
            _PRISTINE[id(builtins)] = _dict(vars(builtins))
            # ipykernel chooses matplotlib's inline backend after this; a module that imports pyplot must see it
            os.environ.setdefault("MPLBACKEND", "module://matplotlib_inline.backend_inline")
            for name in preimport:  # the course's imports, before any student code can fake them
                try:
                    __import__(name)
                except BaseException:  # noqa: BLE001  (the locked cell that imports it reports it)
                    pass
            _cap_torch_threads(os.environ.get("AUTOGRADE_THREADS", ""))
            locked.record_sys_modules()

        def _ag_report(self):
            events = audit.take()
            if events:
                self.send_response(
                    self.iopub_socket,
                    "display_data",
                    {"data": {AUDIT_MIME: json.dumps(events)}, "metadata": {}, "transient": {}},
                )

        async def do_execute(
            self, code, silent, store_history=True, user_expressions=None, allow_stdin=False, **kwargs
        ):
            try:
                return await self._ag_execute(code, silent, store_history, user_expressions, allow_stdin, **kwargs)
            finally:
                self._ag_report()

        async def _ag_execute(self, code, silent, store_history, user_expressions, allow_stdin, **kwargs):
            namespace = self.shell.user_ns
            if code.startswith(STUB):
                return self._ag_test(code[_len(STUB) :].split(), namespace)
            if code.startswith(PROBE_STUB) and probe_runner is not None:
                return self._ag_probe(code[_len(PROBE_STUB) :], namespace)
            digest = _sha256(code.encode("utf-8", "surrogatepass")).hexdigest()
            if digest in locked_cells:
                for what in locked.check_and_restore_sys_modules():
                    audit.note(f"replaced {what} before a locked cell imports it")
                before = locked.before_locked_cell(namespace)
                try:
                    return await super().do_execute(
                        code, silent, store_history, user_expressions, allow_stdin, **kwargs
                    )
                finally:
                    locked.after_locked_cell(code, namespace, before, locked_cells[digest])
            try:
                name = self.shell.compile.get_code_name(code, code, self.shell.execution_count)
            except BaseException:  # noqa: BLE001
                name = None
            if name:
                audit.student_files[name] = self.execution_count
            try:
                return await super().do_execute(code, silent, store_history, user_expressions, allow_stdin, **kwargs)
            finally:
                for hook in _clear_hooks():
                    audit.note(f"installed a {hook} hook", self.execution_count)

        def _ag_probe(self, request, namespace):
            """A judge's probe: call the runner on the notebook's namespace and display its answer. What the
            student's functions do while it runs is audited as always (their frames are their cells')."""
            reply = {"status": "ok", "execution_count": self.execution_count, "payload": [], "user_expressions": {}}
            try:
                answer = probe_runner(namespace, *json.loads(request), None)
            except _BaseException as exc:  # noqa: BLE001  (no answer: the grader reports it)
                reply.update(status="error", ename=_type(exc).__name__, evalue=_str(exc)[:2000], traceback=[])
                return reply
            finally:
                for hook in _clear_hooks():
                    audit.note(f"installed a {hook} hook", self.execution_count)
                _flush_streams()
            self.send_response(
                self.iopub_socket, "display_data", {"data": {PROBE_MIME: answer}, "metadata": {}, "transient": {}}
            )
            return reply

        def _ag_test(self, words, namespace):
            digest, nonce = (words + ["", ""])[:2]
            source = tests.get(digest)
            if source is None:
                failure = fail("GraderIntegrityError", "the grader sent a test cell this kernel does not know", 0)
            else:
                audit.in_test = True
                try:
                    failure = runner(source, namespace, locked, audit)
                finally:
                    audit.in_test = False
                changed = verify(own, own_names, own_code)
                if changed:
                    audit.note("changed the grader's own code: " + ", ".join(changed[:8]))
                    failure = fail(
                        "GraderIntegrityError",
                        "the grader's own code had been changed while this test ran: " + ", ".join(changed[:8]),
                        0,
                    )
            _flush_streams()
            reply = {"status": "ok", "execution_count": self.execution_count, "payload": [], "user_expressions": {}}
            if failure is not None:
                content = make_error(failure)
                self.send_response(self.iopub_socket, "error", content)
                reply.update(
                    status="error", ename=content["ename"], evalue=content["evalue"], traceback=content["traceback"]
                )
            else:
                verdict = {"test": digest, "nonce": nonce, "tag": send_tag(key, digest, nonce)}
                self.send_response(
                    self.iopub_socket,
                    "display_data",
                    {"data": {EVIDENCE_MIME: json.dumps(verdict)}, "metadata": {}, "transient": {}},
                )
            return reply

    IPKernelApp.launch_instance(kernel_class=GuardedKernel)


if __name__ == "__main__":
    sys.path = [p for p in sys.path if p and os.path.abspath(p) != os.path.dirname(os.path.abspath(__file__))]
    main()
