"""docs/contract.md is the contract of the graded work, and it stays true: every graded function and value of
every notebook is there with its exact signature, under the part (and points) that grades it, and every rule a
hidden test checks is listed for its part with the sentence of the notebook that states it."""
import ast
import re
from pathlib import Path

import nbformat
import pytest

from autograde import REPO, assignments
from autograde.assignment import PART_HEADER, TestCell, load_assignment, nbgrader_meta, source_notebook

CONTRACT = REPO / "docs" / "contract.md"
ENTRY = re.compile(r"^#### `([A-Za-z_][A-Za-z0-9_]*)(?:\((.*)\))?`\s*$")
PART = re.compile(r"^### (Part [A-Za-z0-9]+) \((\d+(?:\.\d+)?) points?\)")
RULE_LINE = re.compile(r'^- `rule: ([^`]+)` *(?:—|--) *"(.+)"\s*$')


def _words(text):
    """Text with markdown emphasis and code marks dropped and whitespace collapsed, for quoting."""
    return " ".join(re.sub(r"[*`]", "", text).split())


def parse_contract(text=None):
    """{assignment: {part label: {"points": float, "entries": {name: signature or None}, "rules": {label: quote}}}}"""
    text = CONTRACT.read_text() if text is None else text
    doc, assignment, part = {}, None, None
    for line in text.splitlines():
        if line.startswith("## "):
            name = line[3:].strip()
            assignment, part = (name, None) if re.fullmatch(r"\d\d_\w+", name) else (None, None)
            if assignment:
                doc.setdefault(assignment, {})
            continue
        m = PART.match(line)
        if m and assignment:
            part = doc[assignment].setdefault(m.group(1), {"points": float(m.group(2)), "entries": {}, "rules": {}})
            continue
        m = ENTRY.match(line)
        if m and part is not None:
            part["entries"][m.group(1)] = None if m.group(2) is None else m.group(2).replace(" ", "")
            continue
        m = RULE_LINE.match(line)
        if m and part is not None:
            part["rules"][m.group(1).strip()] = m.group(2).strip()
    return doc


def notebook_parts(name):
    """{part label: {"points", "header_points", "entries", "rules", "text"}} read from the solution notebook.

    A part's text is what the learner has read when they answer it: the notebook's markdown up to the end of
    the part, and the docstrings of the part's functions."""
    nb = nbformat.read(str(source_notebook(name)), as_version=4)
    graded = {p.label: p for p in load_assignment(name).parts}
    parts, current, read = {}, None, ""      # read: every markdown cell so far (what the learner was told)
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            read += "\n" + cell.source
            m = PART_HEADER.search(cell.source)
            if m:
                said = re.search(r"\((\d+(?:\.\d+)?) points?\)", m.group(0))
                current = parts.setdefault(m.group(1), {"points": graded[m.group(1)].points if m.group(1) in graded
                                                        else 0.0, "header_points": float(said.group(1)) if said
                                                        else None, "entries": {}, "rules": set(), "text": read})
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
                    for target in (node.targets if isinstance(node, ast.Assign) else [node.target]):
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
        assert doc[label]["points"] == part["points"], \
            f"{name} {label}: the contract says {doc[label]['points']:g} points, the tests carry {part['points']:g}"
        assert doc[label]["entries"] == part["entries"], \
            f"{name} {label}: contract {doc[label]['entries']} vs solution cells {part['entries']}"


@pytest.mark.parametrize("name", assignments())
def test_part_headers_state_the_points_their_tests_carry(name):
    for label, part in notebook_parts(name).items():
        if part["points"]:
            assert part["header_points"] == part["points"], \
                f"{name} {label}: the header says {part['header_points']} points, its tests carry {part['points']:g}"


@pytest.mark.parametrize("name", assignments())
def test_every_hidden_rule_is_listed_and_quotes_the_notebook(name):
    doc, nb = parse_contract()[name], notebook_parts(name)
    for label, part in nb.items():
        listed = doc.get(label, {}).get("rules", {})
        missing = sorted(part["rules"] - set(listed))
        assert not missing, f"{name} {label}: hidden tests use rule labels the contract does not list: {missing}"
        for rule, quote in listed.items():
            assert _words(quote) in _words(part["text"]), \
                f"{name} {label}: the contract quotes {quote!r} for rule {rule!r}, but the notebook up to this " \
                f"part and its docstrings do not say it"


def test_the_parser_reads_what_it_should():
    doc = parse_contract('## Conventions\n### Part Z (1 point): not an assignment\n'
                         '## 99_x\n### Part A (3 points): y\n#### `f(a, b=2)`\n- `rule: bad input: a` — "raises"\n'
                         '#### `v`\n')
    assert doc == {"99_x": {"Part A": {"points": 3.0, "entries": {"f": "a,b=2", "v": None},
                                       "rules": {"bad input: a": "raises"}}}}
