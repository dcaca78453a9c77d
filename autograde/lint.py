"""A lint of the course's own notebooks: what the grader's guard would make undefined."""

from autograde.assignment import HIDDEN_BEGIN, is_test_cell, nbgrader_meta


def _bound_and_loaded(source):
    """(names the code binds at module level, module-level names it reads, also from inside its functions)."""
    import symtable

    try:
        table = symtable.symtable(source, "<cell>", "exec")
    except SyntaxError:
        return None
    bound = {sym.get_name() for sym in table.get_symbols() if sym.is_assigned() or sym.is_imported()}
    loaded = {sym.get_name() for sym in table.get_symbols() if sym.is_referenced()}
    stack = list(table.get_children())
    while stack:
        child = stack.pop()
        loaded |= {sym.get_name() for sym in child.get_symbols() if sym.is_referenced() and sym.is_global()}
        stack.extend(child.get_children())
    return bound, loaded


def hidden_names_used_elsewhere(nb):
    """[(cell index, name, grade id of the test that defines it)]: cells that use a name which only the
    hidden block of an earlier test cell defines.

    The grader runs each test cell in a copy of the notebook's namespace and keeps only what the
    visible part defines (so that a student's function cannot read the hidden reference values), so
    such a name is undefined when it is used.  Define it where it is used instead.
    """
    visible, hidden, problems = set(), {}, []
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        pieces = [(cell.source, False)]
        if is_test_cell(cell):
            lines = cell.source.splitlines(keepends=True)
            cut = next((i for i, line in enumerate(lines) if line.startswith(HIDDEN_BEGIN)), None)
            if cut is not None:
                pieces = [("".join(lines[:cut]), False), ("".join(lines[cut:]), True)]
        own = set()
        for source, is_hidden in pieces:
            parsed = _bound_and_loaded(source)
            if parsed is None:
                continue
            bound, loaded = parsed
            for name in sorted(loaded - own - bound - visible):
                if name in hidden:
                    problems.append((index, name, hidden[name]))
            own |= bound
            if is_hidden:
                for name in bound - visible:
                    hidden.setdefault(name, nbgrader_meta(cell).get("grade_id"))
            else:
                visible |= bound
                for name in bound:
                    hidden.pop(name, None)
    return problems
