"""Given cells are generated from their source (autograde/given.py), and no answer is restated by hand.

- every committed given cell is what `make release` writes from the solutions it names (the freshness check);
  the check fails when a solution changes and its copies do not, and writing twice changes nothing;
- every name a restated definition reads is bound in the notebook that restates it;
- bad `given_from` metadata is refused with a message naming the cell and the entry;
- no block of six or more code lines appears twice in the solutions outside the generated copies (imports and
  graded test cells aside: tests carry their own independent reference implementations).
"""

import ast
import builtins
import collections
import copy
import re
import symtable

import nbformat
import pytest
from nbhelpers import without_solution_markers

from autograde import assignments
from autograde.assignment import is_locked_cell
from autograde.given import KEY, GivenCellError, _definitions, _regenerate, _solutions, generate, given_cells, stale

BLOCK = 6  # lines: a repeated block this long is a restatement


@pytest.fixture(scope="module")
def solutions():
    return _solutions()


def _cell(nb, grade_id):
    return next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id)


def test_every_given_cell_is_what_the_release_step_writes():
    assert stale() == [], "given cells differ from their sources: run `make release` (autograde/given.py)"


def test_there_are_given_cells_in_every_notebook_that_restates_answers(solutions):
    restating = {name for name, nb in solutions.items() if given_cells(nb)}
    assert restating >= {
        "02_verification_is_almost_free",
        "05_acceptance_in_practice",
        "06_h100_configs_real_timings",
        "07_batch_crossover",
        "08_break_even_acceptance",
        "09_speculation_that_pays",
        "10_batches_and_servers",
    }, restating


def test_a_changed_solution_makes_its_copies_stale(solutions):
    notebooks = copy.deepcopy(solutions)
    answer = _cell(notebooks["01_decode_is_bandwidth_bound"], "weight_bytes")
    answer.source = answer.source.replace("return params * bytes_per_param", "return params * bytes_per_param + 0")
    assert "+ 0" in answer.source
    changed = _regenerate(notebooks, set(assignments()))
    assert sorted(changed) == [
        ("06_h100_configs_real_timings", "given_answers_01"),
        ("07_batch_crossover", "given_answers_01_03"),
        ("08_break_even_acceptance", "given_answers_01_03"),
        ("10_batches_and_servers", "given_answers_01_03"),
    ], changed
    assert "+ 0" in _cell(notebooks["10_batches_and_servers"], "given_answers_01_03").source
    assert _regenerate(notebooks, set(assignments())) == [], "writing twice must change nothing"


def test_a_hand_edited_copy_is_stale(solutions):
    notebooks = copy.deepcopy(solutions)
    cell = _cell(notebooks["09_speculation_that_pays"], "given_decoding_loop")
    cell.source = cell.source.replace("class DraftModelProposer", "class  DraftModelProposer")
    assert _regenerate(notebooks, {"09_speculation_that_pays"}) == [("09_speculation_that_pays", "given_decoding_loop")]


def test_a_cells_own_definitions_are_kept_as_written(solutions):
    notebooks = copy.deepcopy(solutions)
    cell = _cell(notebooks["02_verification_is_almost_free"], "given_measurements")
    assert "measure_bandwidth" in cell.metadata[KEY]
    cell.source = cell.source.replace(
        "def measure_bandwidth(n_bytes, repeats=7)", "def measure_bandwidth(n_bytes, repeats=9)"
    )
    assert _regenerate(notebooks, {"02_verification_is_almost_free"}) == []
    assert "repeats=9" in cell.source


def test_a_later_notebook_follows_an_earlier_given_cell(solutions):
    notebooks = copy.deepcopy(solutions)
    cell = _cell(notebooks["07_batch_crossover"], "given_models_and_memory")
    cell.source = cell.source.replace("RESERVE_FRACTION = 0.1", "RESERVE_FRACTION = 0.15")
    assert sorted(_regenerate(notebooks, set(assignments()))) == [
        ("08_break_even_acceptance", "given_models_and_memory"),
        ("10_batches_and_servers", "given_models_and_memory"),
    ]
    assert "RESERVE_FRACTION = 0.15" in _cell(notebooks["10_batches_and_servers"], "given_models_and_memory").source


def _bound_at_top(cells):
    """Names a sequence of code cells binds at top level (imports, definitions, assignments, loop targets)."""
    names = set()
    for source in cells:
        tree = ast.parse("\n".join(ln for ln in source.splitlines() if not ln.lstrip().startswith(("%", "!"))))
        for node in tree.body:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                names |= {(a.asname or a.name).split(".")[0] for a in node.names}
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            else:
                names |= {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    return names


def _globals_read(text):
    """Free names a definition's code reads (symtable: globals of every nested function scope)."""
    found, stack = set(), [symtable.symtable(text, "<given>", "exec")]
    while stack:
        table = stack.pop()
        if table.get_type() == "function":
            found |= {s.get_name() for s in table.get_symbols() if s.is_global() and s.is_referenced()}
        stack.extend(table.get_children())
    return found


@pytest.mark.parametrize("name", assignments())
def test_what_a_restated_definition_reads_is_bound_in_the_notebook(solutions, name):
    nb = solutions[name]
    for index, cell in given_cells(nb):
        before = [
            c.source
            for c in nb.cells[: index + 1]
            if c.cell_type == "code" and not c.metadata.get("nbgrader", {}).get("grade")
        ]
        bound = _bound_at_top(before) | set(dir(builtins))
        for defined, (text, _) in _definitions(cell.source, name).items():
            missing = sorted(_globals_read(text) - bound)
            assert not missing, f"{name}: given {defined} reads {missing}, which nothing before it binds"


@pytest.mark.parametrize(
    "entries,message",
    [
        ("01_decode_is_bandwidth_bound:weight_bytes", "must be a non-empty list"),
        ([], "must be a non-empty list"),
        (["99_nowhere:weight_bytes"], "which is no assignment"),
        (["08_break_even_acceptance:should_speculate"], "not an earlier notebook"),
        (["01_decode_is_bandwidth_bound:no_such_function"], "defines no top-level 'no_such_function'"),
        (["06_h100_configs_real_timings:weight_bytes"], "is itself restated there"),
        (["max_batch"], "names nothing from an earlier notebook"),
        (
            ["01_decode_is_bandwidth_bound:weight_bytes", "not_in_the_cell"],
            "'not_in_the_cell' is not defined in the cell",
        ),
    ],
)
def test_bad_given_from_is_refused_naming_cell_and_entry(solutions, entries, message):
    cell = copy.deepcopy(_cell(solutions["07_batch_crossover"], "given_models_and_memory"))
    cell.metadata[KEY] = entries
    with pytest.raises(GivenCellError, match=message) as raised:
        generate("07_batch_crossover", cell, solutions)
    assert "07_batch_crossover given_models_and_memory" in str(raised.value)


def test_a_name_defined_in_two_cells_is_refused(solutions):
    notebooks = copy.deepcopy(solutions)
    nb01 = notebooks["01_decode_is_bandwidth_bound"]
    nb01.cells.append(nbformat.v4.new_code_cell("def ridge_point(flops, bandwidth):\n    return 0"))
    cell = copy.deepcopy(_cell(notebooks["02_verification_is_almost_free"], "given_measurements"))
    with pytest.raises(GivenCellError, match="defines 'ridge_point' in several cells"):
        generate("02_verification_is_almost_free", cell, notebooks)


def test_only_a_locked_non_graded_cell_can_be_given(solutions):
    cell = copy.deepcopy(_cell(solutions["08_break_even_acceptance"], "given_models_and_memory"))
    generate("08_break_even_acceptance", cell, solutions)
    cell.metadata["nbgrader"]["solution"] = True
    with pytest.raises(GivenCellError, match="only a locked cell"):
        generate("08_break_even_acceptance", cell, solutions)


def _scanned_lines(cell, name):
    """The lines a restatement search reads from a cell: no imports, comments or blank lines; of a generated
    cell only its own definitions (its copies are checked by the freshness test)."""
    source = cell.source
    if cell.metadata.get(KEY):
        own = [e for e in cell.metadata[KEY] if ":" not in e]
        defs = _definitions(source, name)
        source = "\n\n".join(defs[e][0] for e in own)
    text = "\n".join(
        ln for ln in without_solution_markers(source).splitlines() if not ln.lstrip().startswith(("%", "!"))
    )
    lines = text.splitlines()
    drop = set()
    for node in ast.parse(text).body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            drop |= set(range(node.lineno - 1, node.end_lineno))
    return [ln.strip() for i, ln in enumerate(lines) if i not in drop and ln.strip() and not ln.strip().startswith("#")]


def test_no_block_of_code_is_restated_by_hand(solutions):
    seen = collections.defaultdict(set)
    for name, nb in solutions.items():
        for i, cell in enumerate(nb.cells):
            if cell.cell_type != "code" or cell.metadata.get("nbgrader", {}).get("grade"):
                continue
            lines = _scanned_lines(cell, name)
            where = (name, cell.metadata.get("nbgrader", {}).get("grade_id") or f"cell {i}")
            for j in range(len(lines) - BLOCK + 1):
                seen[tuple(lines[j : j + BLOCK])].add(where)
    repeated = {block: cells for block, cells in seen.items() if len(cells) > 1}
    report = sorted({tuple(sorted(cells)) for cells in repeated.values()})
    assert not report, (
        f"blocks of {BLOCK}+ lines written in more than one cell (restate them with "
        f"`given_from`, autograde/given.py): {report}"
    )


def test_given_cells_follow_one_id_scheme(solutions):
    """Every locked code cell that is neither the setup cell nor a test nor a solution is `given_answers_NN_MM`
    (only restated answers, from notebooks NN and MM) or `given_<topic>`."""
    bad = []
    for name, nb in solutions.items():
        for cell in nb.cells:
            if not is_locked_cell(cell):
                continue
            gid = cell.metadata["nbgrader"].get("grade_id", "")
            if gid == "setup":
                continue
            answers = re.fullmatch(r"given_answers((?:_\d\d)+)", gid)
            if answers:
                entries = cell.metadata.get(KEY, [])
                sources = sorted({e.partition(":")[0][:2] for e in entries if ":" in e})
                if not entries or any(":" not in e for e in entries) or sources != answers.group(1)[1:].split("_"):
                    bad.append(f"{name} {gid}: restates {sources} with {len(entries)} entries")
            elif not re.fullmatch(r"given_[a-z][a-z0-9_]*", gid):
                bad.append(f"{name} {gid}")
    assert not bad, bad


def test_former_ids_name_no_current_cell(solutions):
    """`former_ids` (the ids a renamed cell had, so that copies made before are graded as that cell,
    autograde/repair.py) are unique in their notebook and none is a current id."""
    for name, nb in solutions.items():
        current = {c.metadata.get("nbgrader", {}).get("grade_id") for c in nb.cells}
        former = [old for c in nb.cells for old in c.metadata.get("former_ids", [])]
        assert len(former) == len(set(former)), (name, former)
        assert not set(former) & current, (name, set(former) & current)


def test_every_given_cell_is_folded_to_its_one_line_summary_in_both_copies(solutions):
    """JupyterLab shows a folded cell's first line: the summary of what it restates and from where."""
    from autograde import NOTEBOOKS

    for name in assignments():
        learner = nbformat.read(str(NOTEBOOKS / name / f"{name}.ipynb"), as_version=4)
        for nb, which in ((solutions[name], "solution"), (learner, "learner copy")):
            for i, cell in given_cells(nb):
                assert cell.metadata.get("jupyter", {}).get("source_hidden") is True, (
                    f"{name} {which} cell {i} is not folded"
                )
                first = cell.source.splitlines()[0]
                assert first.startswith("# Given: restated from notebook ") and first.endswith(
                    "click to read the code."
                ), first


def test_an_unfolded_given_cell_is_stale(solutions):
    notebooks = copy.deepcopy(solutions)
    name = next(n for n in assignments() if given_cells(notebooks[n]))
    i, cell = given_cells(notebooks[name])[0]
    del cell.metadata["jupyter"]
    assert _regenerate(notebooks, {name}) and cell.metadata["jupyter"]["source_hidden"] is True
