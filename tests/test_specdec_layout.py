"""specdec has rooms (issue "the measuring is the learner's work", item 8): every module lives in the room of its
job and the package's module map names it; every reference in the course's files names a module that exists
where it says; a notebook saved before the move still imports (with a warning); one meaning per name."""

import ast
import importlib
import importlib.util
import pkgutil
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
from nbhelpers import parse_contract

import specdec
from specdec import MOVED, REPO

ROOMS = {"core", "measure", "training", "engines"}
TOP = {"tables", "plotting", "checks", "moved"}  # shared by every room


def _modules():
    return [m for m in pkgutil.walk_packages(specdec.__path__, "specdec.") if not m.ispkg]


def _source(m):
    return (Path(m.module_finder.path) / f"{m.name.rsplit('.', 1)[1]}.py").read_text()


def _exists(name):
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:  # a child of a module that is not a package: an attribute, not a module
        return False


def _course_files():
    listed = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout.split()
    return [
        REPO / p
        for p in listed
        if p.endswith((".py", ".ipynb", ".md", ".toml", ".json")) or p in ("Makefile", ".ci/run")
    ]


def test_every_module_lives_in_a_room_and_the_map_names_it():
    doc = specdec.__doc__
    for m in _modules():
        parts = m.name.split(".")
        assert (len(parts) == 2 and parts[1] in TOP) or (len(parts) == 3 and parts[1] in ROOMS), (
            f"{m.name} is outside the rooms {sorted(ROOMS)} and the shared modules {sorted(TOP)}"
        )
        assert re.search(rf"\b{parts[-1]}\b", doc), f"specdec's module map (its docstring) does not name {m.name}"
    for room in ROOMS:
        assert importlib.import_module(f"specdec.{room}").__doc__, f"specdec.{room} has no docstring"


# a dotted name that starts a word (or follows a "\\n" inside a string literal)
REFERENCE = re.compile(r"(?:(?<![\w/-])|(?<=\\n))(specdec(?:\.[a-z_]+)+)")


def test_every_reference_names_a_module_where_it_is():
    """Imports, `python -m` commands and dotted names in quotes or backticks (mock targets, docs) in every file
    of the course: the longest module prefix of each exists, and none is a flat name of before the move."""
    bad = []
    for path in _course_files():
        if path.name == "test_specdec_layout.py" or path == REPO / "specdec" / "moved.py":  # name the old layout
            continue  # on purpose
        try:
            text = path.read_text()
        except (UnicodeDecodeError, FileNotFoundError):
            continue
        for ref in set(REFERENCE.findall(text)):
            parts = ref.split(".")
            if parts[-1] == "py" or parts[1].startswith("__"):  # a file name (specdec.py), an attribute (__file__)
                continue
            if parts[1] in MOVED:
                bad.append(f"{path.relative_to(REPO)}: {ref} (now specdec.{MOVED[parts[1]]})")
                continue
            found = next((".".join(parts[:n]) for n in range(len(parts), 1, -1) if _exists(".".join(parts[:n]))), None)
            if found is None:
                bad.append(f"{path.relative_to(REPO)}: {ref} names no module")
    assert not bad, "\n".join(sorted(bad))


def test_the_scan_sees_an_old_name_and_a_missing_one():
    text = 'from specdec.kernels import convert\nrun("python -m specdec.measure.nothing_here")\n'
    refs = REFERENCE.findall(text)
    assert refs == ["specdec.kernels", "specdec.measure.nothing_here"]
    assert refs[0].split(".")[1] in MOVED
    assert not _exists("specdec.measure.nothing_here") and not _exists("specdec.measure.kernels.convert")


@pytest.mark.parametrize("old", sorted(MOVED))
def test_a_notebook_saved_before_the_move_still_imports(old):
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        module = importlib.import_module(f"specdec.{old}")
    assert module is importlib.import_module(f"specdec.{MOVED[old]}")
    assert any(issubclass(w.category, FutureWarning) and f"specdec.{MOVED[old]}" in str(w.message) for w in said)


def test_the_old_engines_module_forwards_to_install():
    from specdec.engines import install

    with pytest.warns(FutureWarning, match="specdec.engines.install.cache_dir"):
        from specdec.engines import cache_dir
    assert cache_dir is install.cache_dir
    with pytest.raises(ImportError):
        from specdec.engines import no_such_function  # noqa: F401


def test_one_meaning_per_name():
    """No specdec function or class is named like a graded answer (the learner writes those), and no module name
    is used in both specdec and autograde."""
    graded = {name for parts in parse_contract().values() for part in parts.values() for name in part["entries"]}
    clash = []
    for m in _modules():
        tree = ast.parse(_source(m))
        clash += [
            f"{m.name}.{n.name}"
            for n in tree.body
            if isinstance(n, (ast.FunctionDef, ast.ClassDef)) and n.name in graded
        ]
    assert not clash, f"named like a graded answer: {clash}"
    ours = {m.name.rsplit(".", 1)[1] for m in _modules()}
    grader = {p.stem for p in (REPO / "autograde").glob("*.py")} - {"__init__", "__main__"}
    assert not ours & grader, f"module names in both specdec and autograde: {sorted(ours & grader)}"


def _notebook_imports():
    """{module: {notebook number}}: the specdec modules each solution notebook's code cells import."""
    import nbformat

    from autograde import SOLUTIONS, assignments

    used = {}
    for name in assignments():
        nb = nbformat.read(str(SOLUTIONS / name / f"{name}.ipynb"), as_version=4)
        for cell in nb.cells:
            if cell.cell_type != "code":
                continue
            code = "\n".join(line for line in cell.source.splitlines() if not line.lstrip().startswith(("%", "!")))
            for node in ast.walk(ast.parse(code)):
                names = (
                    [a.name for a in node.names]
                    if isinstance(node, ast.Import)
                    else [node.module] + [f"{node.module}.{a.name}" for a in node.names]
                    if isinstance(node, ast.ImportFrom) and node.module
                    else []
                )
                for module in names:
                    if module.startswith("specdec.") and _exists(module):
                        used.setdefault(module, set()).add(name[:2])
    return used


def _numbers(listed):
    """'01, 06-08, 12' -> {'01', '06', '07', '08', '12'}."""
    out = set()
    for part in listed.split(","):
        first, _, last = part.strip().partition("-")
        out |= {f"{n:02d}" for n in range(int(first), int(last or first) + 1)}
    return out


def test_the_module_map_names_the_notebooks_that_import_each_module():
    """The docstring's `(module: notebooks)` lists are the notebooks whose solutions import the module; a module no
    notebook imports has no list."""
    doc, used = specdec.__doc__, _notebook_imports()
    wrong = {}
    for m in _modules():
        short = m.name.rsplit(".", 1)[1]
        listed = re.search(rf"\({short}: ([0-9][0-9, \-]*)[);]", " ".join(doc.split()))
        said = _numbers(listed.group(1)) if listed else set()
        if said != used.get(m.name, set()):
            wrong[m.name] = (sorted(said), sorted(used.get(m.name, set())))
    assert not wrong, f"specdec's module map (listed, imported by): {wrong}"
    assert len(used) >= 15, used  # the scan reads the notebooks' imports


# which rooms a room may import (besides itself, the shared modules and the package's own names): core stands alone,
# measure and training build on core, engines on core and measure; the shared modules import no room
MAY_IMPORT = {"core": set(), "measure": {"core"}, "training": {"core"}, "engines": {"core", "measure"}}


def _arrows():
    """[(module, its room or None for a shared module, imported specdec module, imported names)] for every import in
    specdec's modules, at any depth (a function's lazy import counts too)."""
    out = []
    for m in _modules():
        parts = m.name.split(".")
        room = parts[1] if len(parts) == 3 else None
        for node in ast.walk(ast.parse(_source(m))):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("specdec"):
                out.append((m.name, room, node.module, [a.name for a in node.names]))
            elif isinstance(node, ast.Import):
                out += [(m.name, room, a.name, []) for a in node.names if a.name.startswith("specdec")]
    return out


def test_rooms_import_in_one_direction_and_no_private_name_crosses_a_module():
    arrows = _arrows()
    assert len(arrows) > 40, arrows  # the scan reads the imports
    wrong, private = [], []
    for module, room, target, names in arrows:
        parts = target.split(".")
        to = parts[1] if len(parts) > 1 and parts[1] in ROOMS else None
        if to is not None and to != room and (room is None or to not in MAY_IMPORT[room]):
            wrong.append(f"{module} -> {target}")
        private += [f"{module} <- {target}.{n}" for n in names if n.startswith("_") and target != module]
    assert not wrong, f"imports against the rooms' direction ({MAY_IMPORT}; shared modules import none): {wrong}"
    assert not private, f"private names imported from another module: {private}"


def test_the_direction_test_sees_a_wrong_arrow(monkeypatch):
    fake = [
        ("specdec.core.lean", "core", "specdec.measure.timing", ["note_spread"]),
        ("specdec.tables", None, "specdec.core.models", ["DOMAINS"]),
    ]
    monkeypatch.setattr(sys.modules[__name__], "_arrows", lambda: fake * 30)
    with pytest.raises(AssertionError, match="specdec.core.lean -> specdec.measure.timing.*specdec.tables -> "):
        test_rooms_import_in_one_direction_and_no_private_name_crosses_a_module()


@pytest.mark.parametrize("old, name", sorted(specdec.MOVED_NAMES))
def test_a_moved_name_still_imports_from_its_old_module(old, name):
    new = importlib.import_module(specdec.MOVED_NAMES[old, name])
    with pytest.warns(FutureWarning, match=f"{new.__name__}.{name}"):
        got = getattr(importlib.import_module(old), name)
    assert got is getattr(new, name)
    with pytest.raises(AttributeError, match="no attribute 'nothing_here'"):
        importlib.import_module(old).nothing_here


def test_the_shims_live_in_one_module_and_end_with_their_release():
    """specdec.moved holds every shim; an old module's __getattr__ only hands the name to it; and once the course's
    version (pyproject.toml) reaches SHIMS_END, the shims must go: this test fails until they do."""
    from specdec import moved

    version = re.search(r'^version = "([0-9.]+)"', (REPO / "pyproject.toml").read_text(), re.M).group(1)

    def release(text):
        return tuple(int(x) for x in text.split("."))

    assert release(version) < release(moved.SHIMS_END), (
        f"the course is at release {version}, and the shims of specdec.moved go with release {moved.SHIMS_END}: "
        "remove them "
        f"(MODULES, NAMES, PACKAGES and the __getattr__ that call moved_name)"
    )
    sources = {m.name: _source(m) for m in _modules()}
    sources.update({f"specdec.{room}": (REPO / "specdec" / room / "__init__.py").read_text() for room in ROOMS})
    with_getattr = set()
    for name, source in sources.items():
        tree = ast.parse(source)
        for fn in [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "__getattr__"]:
            with_getattr.add(name)
            calls = {c.func.id for c in ast.walk(fn) if isinstance(c, ast.Call) and isinstance(c.func, ast.Name)}
            assert calls == {"moved_name"}, f"{name}.__getattr__ does more than hand the name to specdec.moved"
        warns_of_moves = [
            c.lineno
            for c in ast.walk(tree)
            if isinstance(c, ast.Call) and any(isinstance(x, ast.Name) and x.id == "FutureWarning" for x in ast.walk(c))
        ]
        assert name == "specdec.moved" or not warns_of_moves, (
            f"{name} warns of a move itself: shims live in specdec.moved"
        )
    assert with_getattr == {old for old, _ in moved.NAMES} | set(moved.PACKAGES), (
        "every old module in NAMES or PACKAGES hands its names to specdec.moved, and no other module has a __getattr__"
    )
