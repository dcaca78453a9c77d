"""The judges: each notebook's hidden tests, run by the grader outside the student's process (autograde.judge).

One module per notebook whose test cells are judged (``nb01`` for 01_decode_is_bandwidth_bound, ``nb04`` for
04_speculative_decoder and so on; ``modules`` is the table), never shipped to learners (the release step copies
notebooks only). A judge function takes ``probe`` (an
``autograde.judge.KernelProbe``: ``probe(name, *args)``, ``probe.many``, ``probe.map``) and ``rng`` (a
``numpy.random.Generator`` seeded by the grader, fresh for every grading run) and raises an AssertionError
("rule: ...", a ``judge.Broken`` where it can say what came back) on the first rule the answers break. The
references are the judge's own code, independent of the solution notebook's.

A test cell's hidden block is one line naming its judge (``MARK``): no hidden test runs in the student's kernel.
The release step refuses a notebook whose test cells and judge module are out of step (``out_of_step``: hidden test
code without a judge included), the grader a hidden block without a judge, and the contract's rules for a cell are
the rule labels its judge can raise (``rules_of``).
"""

import ast
import functools
import inspect
import re

MARK = "# judged by the grader outside the student's process: autograde.judges.{module}.{function}"
_MARKED = re.compile("^" + re.escape(MARK.split("{module}")[0]) + r"(\w+)\.(\w+)$")


def _module(assignment: str):
    """The judge module of a notebook, or None where it has none (``modules`` is the table)."""
    import importlib

    name = modules().get(assignment)
    return importlib.import_module(f"autograde.judges.{name}") if name else None


def judge_for(assignment: str, grade_id: str):
    """The judge of one test cell, or None where it has none (a cell without a hidden block; the grader refuses a
    hidden block without a judge: no hidden test runs in the student's kernel)."""
    module = _module(assignment)
    return module.JUDGES.get(grade_id) if module else None


def warm(assignment: str):
    """Load what a notebook's judges need ahead of its first judged cell (the grader calls it in a thread while
    the kernel starts); nothing where the notebook has no judges or its judges need nothing loaded."""
    fn = getattr(_module(assignment), "warm", None)
    if fn is not None:
        fn()


def modules():
    """{assignment: judge module name}: the notebooks whose test cells are judged."""
    return {
        "01_decode_is_bandwidth_bound": "nb01",
        "02_verification_is_almost_free": "nb02",
        "03_acceptance_math": "nb03",
        "04_speculative_decoder": "nb04",
        "05_acceptance_in_practice": "nb05",
        "06_h100_configs_real_timings": "nb06",
        "07_batch_crossover": "nb07",
        "08_break_even_acceptance": "nb08",
        "09_speculation_that_pays": "nb09",
        "10_batches_and_servers": "nb10",
        "11_real_engines": "nb11",
        "12_moe_and_quantised": "nb12",
    }


@functools.lru_cache(maxsize=1)
def hardware():
    """The course's hardware table (specdec.tables.load_hardware, data/hardware.csv), read once per process for every
    judge that sends or prices a machine; callers must not change it."""
    from specdec.tables import load_hardware

    return load_hardware()


@functools.lru_cache(maxsize=1)
def model_configs():
    """The course's model configs (specdec.tables.load_model_configs, data/model_configs.json), read once per process;
    callers must not change them."""
    from specdec.tables import load_model_configs

    return load_model_configs()


def given_names(assignment: str):
    """The course's own copies of what a notebook's given cells define (the earlier notebooks' answers restated
    by ``autograde.given``), in a fresh namespace of this process, for judges whose rule is stated against them
    (10's ``gate_k``: ``best_k_for_batch`` at the mean context). Run from the solution notebook, never the
    submission: its setup cell's imports and plain assignments (not its expression statements, nor what loads
    the models), then every given cell in order. Cached per process; callers must not change it."""
    return _given_names(assignment)


@functools.lru_cache(maxsize=None)
def _given_names(assignment):
    import nbformat

    from autograde import SOLUTIONS
    from autograde.given import given_cells

    nb = nbformat.read(SOLUTIONS / assignment / f"{assignment}.ipynb", as_version=4)
    setup = next(c for c in nb.cells if c.cell_type == "code")
    given = [cell.source for _, cell in given_cells(nb)]
    kept = [
        node
        for node in ast.parse(setup.source).body
        if isinstance(node, (ast.Import, ast.ImportFrom))
        or (
            isinstance(node, ast.Assign)
            and not any(isinstance(n, ast.Name) and n.id == "load_pair" for n in ast.walk(node.value))
        )
    ]
    kept = _needed(kept, [ast.parse(source) for source in given])
    names = {"__name__": f"given_{assignment}"}
    exec(compile(ast.Module(body=kept, type_ignores=[]), f"<{assignment} setup>", "exec"), names)
    for source in given:
        exec(compile(source, f"<{assignment} given>", "exec"), names)
    return names


def _needed(setup, trees):
    """The setup's assignments (the judges read their tables and machines by name) and the imports that these and
    the given cells read: a judge's process imports what the given functions use, not the notebook's plotting and
    progress bars (10's setup imports matplotlib and tqdm: about half a second of one core in a fresh process)."""

    def read(node):
        return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}

    def bound(node):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            return {(a.asname or a.name).split(".")[0] for a in node.names}
        return {n.id for t in node.targets for n in ast.walk(t) if isinstance(n, ast.Name)}

    chosen = {i for i, node in enumerate(setup) if isinstance(node, ast.Assign)}
    wanted = set().union(*(read(tree) for tree in trees), *(read(setup[i]) for i in chosen))
    while True:
        more = {i for i, node in enumerate(setup) if i not in chosen and bound(node) & wanted}
        if not more:
            return [node for i, node in enumerate(setup) if i in chosen]
        chosen |= more
        for i in more:
            wanted |= read(setup[i])


def marked(source: str):
    """(module, function) a test cell's hidden block names as its judge, or None where the block is test code."""
    from autograde.assignment import HIDDEN_BEGIN

    lines = [line.strip() for line in source.splitlines()]
    start = next((i for i, line in enumerate(lines) if line.startswith(HIDDEN_BEGIN)), None)
    if start is None:
        return None
    block = [line for line in lines[start + 1 :] if line and not line.startswith("### END HIDDEN TESTS")]
    found = [_MARKED.match(line) for line in block]
    if len(block) == 1 and found[0]:
        return found[0].group(1), found[0].group(2)
    return None


def rules_of(module_name: str, function: str):
    """The rule labels (without "rule: ") a judge can raise, in the order they appear in its source, the module's
    helpers and constants it names followed where they are named (implicit concatenation is one constant)."""
    return list(_rules_of(module_name, function))


@functools.lru_cache(maxsize=None)
def _rules_of(module_name, function):
    import importlib

    from autograde.assignment import RULE_PREFIX

    tree = ast.parse(inspect.getsource(importlib.import_module(f"autograde.judges.{module_name}")))
    defs = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            defs[node.name] = node
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                for leaf in ast.walk(target):
                    if isinstance(leaf, ast.Name):
                        defs[leaf.id] = node
    if function not in defs:
        raise ValueError(f"function: autograde.judges.{module_name} has no judge {function!r}")
    found, seen = [], {function}

    def walk(node):
        for n in sorted((n for n in ast.walk(node) if hasattr(n, "lineno")), key=lambda n: (n.lineno, n.col_offset)):
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value.startswith(RULE_PREFIX):
                found.append(n.value[len(RULE_PREFIX) :].strip())
            elif isinstance(n, ast.Name) and n.id in defs and n.id not in seen:
                seen.add(n.id)
                walk(defs[n.id])

    walk(defs[function])
    return tuple(dict.fromkeys(found))


def out_of_step(assignment: str, cells):
    """What keeps a notebook's test cells and its judges from being in step, as sentences (empty when they are):
    a test cell with a judge has, as its whole hidden block, the one line naming the judge of its own grade id; a
    hidden block is never test code (no hidden test runs in the student's kernel); every judge has its cell.
    `cells` are the notebook's cells (nbformat)."""
    from autograde.assignment import is_test_cell, nbgrader_meta
    from autograde.executor import visible_part

    module, name = _module(assignment), modules().get(assignment)
    judges = module.JUDGES if module is not None else {}
    problems, seen = [], set()
    for cell in cells:
        if not is_test_cell(cell):
            continue
        grade_id, mark = nbgrader_meta(cell).get("grade_id"), marked(cell.source)
        seen.add(grade_id)
        if not mark and grade_id not in judges and visible_part(cell.source)[1]:
            problems.append(
                f"{grade_id}: its hidden tests have no judge (no hidden test runs in the student's "
                f"kernel: write one in autograde/judges/)"
            )
        elif mark and module is None:
            problems.append(f"{grade_id}: names a judge, but {assignment} has no judge module")
        elif grade_id in judges and mark != (name, grade_id):
            problems.append(
                f"{grade_id}: its hidden block must be the one line {MARK.format(module=name, function=grade_id)!r}"
            )
        elif mark and grade_id not in judges:
            problems.append(f"{grade_id}: names a judge, but autograde.judges.{name} has none for it")
    problems += [
        f"{g}: autograde.judges.{name} judges a test cell the notebook does not have"
        for g in sorted(set(judges) - seen)
    ]
    return problems
