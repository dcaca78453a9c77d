"""docs/contract.md is the contract of the graded work, and it stays true: every graded function and value of
every notebook is there with its exact signature, under the part (and points) that grades it, and every rule a
hidden test checks is listed for its part with the sentence of the notebook that states it."""

import ast
import re

import nbformat
import pytest
from nbhelpers import CONTRACT, parse_contract, words as _words

from autograde import REPO, assignments
from autograde.assignment import PART_HEADER, TestCell, load_assignment, nbgrader_meta, source_notebook


def notebook_parts(name):
    """{part label: {"points", "header_points", "entries", "rules", "text"}} read from the solution notebook.

    A part's text is what the learner has read when they answer it: the notebook's markdown up to the end of
    the part, and the docstrings of the part's functions."""
    nb = nbformat.read(str(source_notebook(name)), as_version=4)
    graded = {p.label: p for p in load_assignment(name).parts}
    parts, current, read = {}, None, ""  # read: every markdown cell so far (what the learner was told)
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            read += "\n" + cell.source
            m = PART_HEADER.search(cell.source)
            if m:
                said = re.search(r"\((\d+(?:\.\d+)?) points?\)", m.group(0))
                current = parts.setdefault(
                    m.group(1),
                    {
                        "points": graded[m.group(1)].points if m.group(1) in graded else 0.0,
                        "header_points": float(said.group(1)) if said else None,
                        "entries": {},
                        "rules": set(),
                        "text": read,
                    },
                )
            elif current is not None:
                current["text"] += "\n" + cell.source
            continue
        if current is None or cell.cell_type != "code":
            continue
        meta = nbgrader_meta(cell)
        if meta.get("solution"):
            tree = ast.parse(cell.source)
            for node in tree.body:
                if isinstance(node, ast.FunctionDef):
                    current["entries"][node.name] = ast.unparse(node.args).replace(" ", "")
                    current["text"] += "\n" + (ast.get_docstring(node) or "")
                elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                    for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                        for leaf in ast.walk(target):
                            if isinstance(leaf, ast.Name) and not leaf.id.isupper():
                                current["entries"].setdefault(leaf.id, None)
        elif meta.get("grade"):
            current["rules"] |= set(TestCell(meta["grade_id"], 0.0, cell.source).rules)
    return parts


def test_the_contract_names_every_assignment():
    assert set(parse_contract()) == set(assignments())


@pytest.mark.parametrize("name", assignments())
def test_every_graded_function_is_in_the_contract_with_its_signature_and_points(name):
    doc, nb = parse_contract()[name], notebook_parts(name)
    graded = {label: part for label, part in nb.items() if part["points"]}
    assert set(doc) == set(graded), f"{name}: parts in docs/contract.md {sorted(doc)} vs notebook {sorted(graded)}"
    for label, part in graded.items():
        assert doc[label]["points"] == part["points"], (
            f"{name} {label}: the contract says {doc[label]['points']:g} points, the tests carry {part['points']:g}"
        )
        assert doc[label]["entries"] == part["entries"], (
            f"{name} {label}: contract {doc[label]['entries']} vs solution cells {part['entries']}"
        )


@pytest.mark.parametrize("name", assignments())
def test_part_headers_state_the_points_their_tests_carry(name):
    """'## Part X (N points)' equals the points of the part's graded cells, for every header that states points
    and every part with tests; no graded cell sits before the first part header."""
    parts = notebook_parts(name)
    headerless = sorted(p.label for p in load_assignment(name).parts if p.label not in parts)
    assert not headerless, f"{name}: graded cells before any part header: {headerless}"
    for label, part in parts.items():
        if part["points"] or part["header_points"]:
            assert part["header_points"] == part["points"], (
                f"{name} {label}: the header says {part['header_points']} points, its tests carry {part['points']:g}"
            )


@pytest.mark.parametrize("name", assignments())
def test_every_hidden_rule_is_listed_and_quotes_the_notebook(name):
    doc, nb = parse_contract()[name], notebook_parts(name)
    for label, part in nb.items():
        listed = doc.get(label, {}).get("rules", {})
        missing = sorted(part["rules"] - set(listed))
        assert not missing, f"{name} {label}: hidden tests use rule labels the contract does not list: {missing}"
        for rule, quote in listed.items():
            assert _words(quote) in _words(part["text"]), (
                f"{name} {label}: the contract quotes {quote!r} for rule {rule!r}, but the notebook up to this "
                f"part and its docstrings do not say it"
            )


def test_the_parser_reads_what_it_should():
    doc = parse_contract(
        '## Conventions\n### Part Z (1 point): not an assignment\n'
        '## 99_x\n### Part A (3 points): y\n#### `f(a, b=2)`\n- `rule: bad input: a` — "raises"\n'
        '#### `v`\n`test_f` (1 point): f: the formula.\n\n- `rule: formula` — "says"\n'
        '`test_f_bad` (2 points): f: bad input.\n'
    )
    assert doc == {
        "99_x": {
            "Part A": {
                "points": 3.0,
                "entries": {"f": "a,b=2", "v": None},
                "rules": {"bad input: a": "raises", "formula": "says"},
                "cells": {
                    "test_f": {"points": 1.0, "what": "f: the formula.", "rules": ["formula"]},
                    "test_f_bad": {"points": 2.0, "what": "f: bad input.", "rules": []},
                },
            }
        }
    }


@pytest.mark.parametrize("name", assignments())
def test_every_test_cell_is_worth_one_point(name):
    """Partial credit follows the rules: a part worth N points is graded by N test cells of 1 point each, every
    cell one rule group, so a slip in one rule loses that cell's point, not the part's."""
    heavy = [(t.grade_id, t.points) for t in load_assignment(name).tests if t.points != 1]
    assert not heavy, f"{name}: test cells not worth exactly 1 point: {heavy}"


@pytest.mark.parametrize("name", assignments())
def test_every_test_cell_shows_the_learner_a_check(name):
    """Each test cell keeps at least one visible statement besides its docstring, so that in the learner's copy
    (hidden tests removed) it runs the learner's code and fails on an unanswered stub: a cell that is all hidden
    would pass there while it gives 0 in grading (tests/test_notebooks.py runs the untouched copies)."""
    bare = []
    for t in load_assignment(name).tests:
        visible = "\n".join(t.source.splitlines()[: t.visible_lines])
        body = [
            s for s in ast.parse(visible).body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))
        ]
        if not body:
            bare.append(t.grade_id)
    assert not bare, f"{name}: test cells with nothing visible but a docstring: {bare}"


@pytest.mark.parametrize("name", assignments())
def test_the_contract_lists_every_test_cell_with_what_it_checks_and_its_rules(name):
    """Under each part, docs/contract.md lists its test cells in notebook order, each with its points, the
    one-line docstring the grader prints, and the hidden rules that cell checks (a rule two cells check is listed
    under both)."""
    doc = parse_contract()[name]
    for part in load_assignment(name).parts:
        listed = doc.get(part.label, {}).get("cells", {})
        want = {t.grade_id: {"points": t.points, "what": t.what, "rules": t.rules} for t in part.tests}
        assert list(listed) == list(want), (
            f"{name} {part.label}: the contract lists cells {list(listed)}, the notebook has {list(want)}"
        )
        for grade_id, cell in want.items():
            assert listed[grade_id] == cell, (
                f"{name} {part.label} {grade_id}: contract {listed[grade_id]} vs notebook {cell}"
            )


def test_one_point_is_one_point_wherever_points_are_written():
    from autograde.assignment import points_text

    assert [points_text(p) for p in (1, 1.0, 2, 0.5, 0)] == ["1 point", "1 point", "2 points", "0.5 points", "0 points"]
    # the contract, every solution's headers and the check's code say "1 point", never "1 points"
    texts = {"docs/contract.md": CONTRACT.read_text()}
    texts.update({str(p): p.read_text() for p in (REPO / "solutions").glob("*/*.ipynb")})
    texts.update({str(p): p.read_text() for p in (REPO / "autograde").glob("*.py")})
    bad = [name for name, text in texts.items() if re.search(r"\b1 points\b", text)]
    assert bad == [], f"'1 points' in {bad}"
