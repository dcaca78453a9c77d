"""House rules a tool keeps (issue 64): each test module marks itself (`pytestmark` at its top, or a mark on the
one test that differs from its module), with the markers pyproject.toml registers, and pytest refuses any other
(`--strict-markers`); no hook adds marks from a table elsewhere."""

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent
SPEED = {"notebooks", "browser", "e2e", "slow"}  # the marks `make test-fast` leaves out


def _module_marks(tree):
    """Names of pytest.mark.X in the module's top-level `pytestmark = ...`, or None where it has none."""
    marks = None
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "pytestmark" for t in node.targets):
            marks = (marks or set()) | {
                n.attr
                for n in ast.walk(node.value)
                if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Attribute) and n.value.attr == "mark"
            }
    return marks


def test_markers_are_registered_and_strict(pytestconfig):
    assert "--strict-markers" in pytestconfig.getini("addopts")
    assert {m.split(":")[0] for m in pytestconfig.getini("markers")} >= SPEED


def test_each_test_module_marks_itself_and_nothing_else_does():
    conftest = ast.parse((TESTS / "conftest.py").read_text())
    hooks = [n.name for n in ast.walk(conftest) if isinstance(n, ast.FunctionDef) and n.name.startswith("pytest_")]
    adds = [n.lineno for n in ast.walk(conftest) if isinstance(n, ast.Attribute) and n.attr == "add_marker"]
    assert not adds and "pytest_collection_modifyitems" not in hooks, "conftest.py adds marks: mark the module"
    speed_marked = {}
    for path in sorted(TESTS.glob("test_*.py")):
        tree = ast.parse(path.read_text())
        speed_marked[path.stem] = sorted((_module_marks(tree) or set()) & SPEED)
    # the modules that execute notebooks, drive a browser or the classroom, or run for minutes say so themselves
    assert speed_marked["test_notebooks"] == ["notebooks"]
    assert speed_marked["test_browser"] == ["browser", "notebooks"]
    assert speed_marked["test_classroom"] == ["e2e", "notebooks"]
    assert speed_marked["test_wrong_implementations"] == ["slow"]
    assert sum(1 for marks in speed_marked.values() if marks) >= 17, speed_marked
