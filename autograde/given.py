"""Given cells written from their source: a notebook that restates an earlier notebook's answer never types it again.

A locked given cell (nbgrader: locked, neither solution nor grade) that restates earlier answers names them in
its metadata, in the order the cell defines them:

    "given_from": ["01_decode_is_bandwidth_bound:weight_bytes", "03_acceptance_math:expected_tokens", "max_batch"]

`NOTEBOOK:NAME` is a top-level definition (function, class or assignment) of that earlier notebook's solution,
found in exactly one of its code cells that is not a graded test, copied with the `### BEGIN/END SOLUTION`
lines dropped; a bare `NAME` is the cell's own definition, kept as the cell holds it now (with the comment lines
right above it). `python -m autograde release` (`make release`) rewrites every such cell from its sources
before nbgrader generates the learner notebooks (`write`); tests/test_given_cells.py fails when a committed
solution is not what this step would write (`stale`), as transformers' `# Copied from` with check_copies.py.
A name that is itself restated in the notebook it is taken from is refused: name the notebook that defines it.

The same step folds every given cell (`jupyter.source_hidden` in its metadata): JupyterLab then shows only the
cell's first line, the `# Given: restated from ...` summary, and expands the code on a click.
"""

import ast

import nbformat

from autograde import SOLUTIONS, assignments, write_atomic
from autograde.assignment import is_locked_cell, is_test_cell, nbgrader_meta

KEY = "given_from"
MARKERS = ("### BEGIN SOLUTION", "### END SOLUTION")

__all__ = ["KEY", "GivenCellError", "generate", "write", "stale", "given_cells", "is_folded"]


class GivenCellError(ValueError):
    """A given cell's `given_from` cannot be resolved: the message names the notebook, the cell and the entry."""


def _path(name):
    return SOLUTIONS / name / f"{name}.ipynb"


def _strip_markers(source):
    return "\n".join(line for line in source.splitlines() if line.strip() not in MARKERS)


def _cell_id(cell, index):
    return nbgrader_meta(cell).get("grade_id") or f"cell {index}"


def is_folded(cell):
    """JupyterLab shows only the cell's first line (`jupyter.source_hidden`, which this step writes)."""
    return cell.metadata.get("jupyter", {}).get("source_hidden") is True


def given_cells(nb):
    """[(index, cell)] of the code cells whose source this step writes (they carry `given_from`)."""
    return [(i, c) for i, c in enumerate(nb.cells) if c.cell_type == "code" and c.metadata.get(KEY)]


def _definitions(source, where):
    """{name: text} of a cell's top-level definitions; the text keeps the comment lines right above it."""
    text = _strip_markers(source)
    try:
        tree = ast.parse(text)
    except SyntaxError as error:
        raise GivenCellError(f"{where}: does not parse ({error})") from None
    lines = text.splitlines()
    found = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names = [node.name]
        elif isinstance(node, ast.Assign) and all(isinstance(t, ast.Name) for t in node.targets):
            names = [t.id for t in node.targets]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names = [node.target.id]
        else:
            continue
        first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])]) - 1
        start = first
        while start > 0 and lines[start - 1].lstrip().startswith("#"):
            start -= 1
        for name in names:
            found[name] = ("\n".join(lines[first : node.end_lineno]), "\n".join(lines[start : node.end_lineno]))
    return found


def _lookup(notebooks, origin, name, where):
    """The text of `name`'s definition in solution notebook `origin` (markers dropped, no comments above)."""
    nb = notebooks[origin]
    hits = []
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code" or is_test_cell(cell):
            continue
        defs = _definitions(cell.source, f"{origin} {_cell_id(cell, i)}")
        if name in defs:
            hits.append((i, cell, defs[name][0]))
    if not hits:
        raise GivenCellError(f"{where}: {origin} defines no top-level {name!r} outside its test cells")
    if len(hits) > 1:
        cells = ", ".join(_cell_id(c, i) for i, c, _ in hits)
        raise GivenCellError(f"{where}: {origin} defines {name!r} in several cells ({cells}); it must be one")
    i, cell, text = hits[0]
    if any(entry.partition(":")[2] == name for entry in cell.metadata.get(KEY, []) if ":" in entry):
        raise GivenCellError(
            f"{where}: {origin}'s {name!r} is itself restated there ({_cell_id(cell, i)}); "
            f"name the notebook that defines it"
        )
    return text


def _and(parts):
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]


def _header(copied, own):
    """Comment lines: where the restated definitions come from, which are the notebook's own, and that the
    restated ones are written for you."""
    by_notebook = {}
    for origin, name in copied:
        by_notebook.setdefault(origin[:2], []).append(name)
    said = _and([f"notebook {nb} ({', '.join(names)})" for nb, names in by_notebook.items()])
    lines = [f"# Given: restated from {said}. Folded: click to read the code."]
    if own:
        lines.append(f"# {_and(own)} {'is' if len(own) == 1 else 'are'} this notebook's own.")
    lines.append("# `make release` copies the restated code from those solutions: change it there, not here.")
    return "\n".join(lines)


def generate(name, cell, notebooks, index=None):
    """The source the release step writes into `cell` of solution notebook `name`.

    notebooks: {assignment: notebook} of the solutions (earlier ones are read from it).
    """
    where = f"{name} {_cell_id(cell, index)}"
    entries = cell.metadata.get(KEY)
    if not isinstance(entries, list) or not entries or not all(isinstance(e, str) and e for e in entries):
        raise GivenCellError(
            f"{where}: {KEY} must be a non-empty list of 'NOTEBOOK:NAME' or 'NAME' strings, got {entries!r}"
        )
    if not is_locked_cell(cell):
        raise GivenCellError(f"{where}: only a locked cell that is neither a solution nor a test can be given")
    order = assignments()
    own = None
    blocks, copied, own_names = [], [], []
    for entry in entries:
        origin, sep, defined = entry.rpartition(":")
        if sep:
            if origin not in notebooks:
                raise GivenCellError(f"{where}: {entry!r} names {origin!r}, which is no assignment ({order})")
            if order.index(origin) >= order.index(name):
                raise GivenCellError(f"{where}: {entry!r} restates {origin}, which is not an earlier notebook")
            blocks.append(_lookup(notebooks, origin, defined, where))
            copied.append((origin, defined))
        else:
            if own is None:
                own = _definitions(cell.source, where)
            if defined not in own:
                raise GivenCellError(f"{where}: {entry!r} is not defined in the cell itself")
            blocks.append(own[defined][1])
            own_names.append(defined)
    if not copied:
        raise GivenCellError(f"{where}: {KEY} names nothing from an earlier notebook; a cell of its own needs none")
    return _header(copied, own_names) + "\n\n" + "\n\n\n".join(block.strip("\n") for block in blocks)


def _solutions():
    return {name: nbformat.read(str(_path(name)), as_version=4) for name in assignments()}


def _regenerate(notebooks, names):
    """Rewrite the given cells of `names` in the in-memory notebooks, in course order; [(name, cell id)] changed."""
    changed = []
    for name in assignments():
        if name not in names:
            continue
        for i, cell in given_cells(notebooks[name]):
            new = generate(name, cell, notebooks, i)
            if new != cell.source or not is_folded(cell):
                cell.source = new
                cell.metadata.setdefault("jupyter", {})["source_hidden"] = True  # JupyterLab shows line 1 only
                changed.append((name, _cell_id(cell, i)))
    return changed


def write(names=None):
    """Rewrite the given cells of the named solution notebooks (default: all) in solutions/; [(name, cell id)]
    of the cells that changed. Notebooks with nothing to change are not touched."""
    names = set(names or assignments())
    notebooks = _solutions()
    changed = _regenerate(notebooks, names)
    for name in sorted({n for n, _ in changed}):
        write_atomic(_path(name), (nbformat.writes(notebooks[name]) + "\n").encode())
    return changed


def stale():
    """[(name, cell id)] of the committed given cells that differ from what `write` would put there."""
    return _regenerate(_solutions(), set(assignments()))
