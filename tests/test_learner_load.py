"""What each learner notebook asks, recounted (autograde/learner_load.py): no notebook over 60 visible code lines
per point, the measuring sections of 09 and 10 carry points, and the minutes the README and the notebooks state
are the estimate's."""

import re

import nbformat
import pytest

from autograde import NOTEBOOKS, assignments
from autograde.assignment import is_test_cell, nbgrader_meta
from autograde.learner_load import MAX_LINES_PER_POINT, count, minutes, readme_rows, report, table

NAMES = assignments()


def test_the_table_prints_every_notebook():
    text = report()
    print("\n" + text)
    assert all(name in text for name in NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_at_most_60_visible_code_lines_per_point(name):
    load = table([name])[name]
    assert load["points"] > 0, f"{name} carries no points"
    assert load["lines_per_point"] <= MAX_LINES_PER_POINT, (
        f"{name}: {load['visible_lines']} visible code lines for {load['points']:g} points = "
        f"{load['lines_per_point']:.1f} a point (at most {MAX_LINES_PER_POINT}): move measuring machinery into "
        "specdec/, fold given cells, or turn a decision into a graded part"
    )


def _section_points(name, number):
    """Points of the graded test cells between the headings `## {number}.` and the next numbered section."""
    nb = nbformat.read(str(NOTEBOOKS / name / f"{name}.ipynb"), as_version=4)
    inside, points, seen = False, 0.0, False
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            for heading in re.findall(r"^## (\d+)\.", cell.source, flags=re.M):
                inside = heading == str(number)
                seen |= inside
        elif inside and is_test_cell(cell):
            points += float(nbgrader_meta(cell).get("points", 0))
    assert seen, f"{name} has no section {number}"
    return points


@pytest.mark.parametrize("name,section", [("09_speculation_that_pays", 2), ("10_batches_and_servers", 2)])
def test_the_measuring_sections_carry_points(name, section):
    """09 section 2 (the path, the terms and the race) and 10 section 2 (the measured crossover): the decisions
    made from the learner's own measurements are graded parts."""
    assert _section_points(name, section) >= 5


def test_the_counters_on_a_small_notebook(tmp_path):
    """The counters on a small notebook: a folded given cell is left out, a test cell is counted, blank lines not."""
    nb = nbformat.v4.new_notebook()
    given = nbformat.v4.new_code_cell("# Given: restated\nx = 1\n\ny = 2")
    given.metadata["jupyter"] = {"source_hidden": True}
    stub = nbformat.v4.new_code_cell("def f():\n    raise NotImplementedError()")
    stub.metadata["nbgrader"] = {"solution": True, "grade": False, "grade_id": "f"}
    test = nbformat.v4.new_code_cell('"""f works."""\nassert f() == 1')
    test.metadata["nbgrader"] = {"solution": False, "grade": True, "grade_id": "t", "points": 2}
    nb.cells = [nbformat.v4.new_markdown_cell("## 1. One two three"), given, stub, test]
    (tmp_path / "99_x").mkdir()
    nbformat.write(nb, str(tmp_path / "99_x" / "99_x.ipynb"))
    got = count("99_x", tmp_path)
    assert got == {"words": 5, "code_lines": 7, "folded_lines": 3, "visible_lines": 4, "points": 2.0, "code_cells": 3}
    with pytest.raises(ValueError, match="name"):
        count("98_missing", tmp_path)


def test_the_readme_minutes_are_the_estimate():
    rows = readme_rows()
    assert set(rows) == set(NAMES), f"README's table lists {sorted(rows)}"
    wrong = {
        name: (said, minutes(table([name])[name], run_s))
        for name, (said, run_s) in rows.items()
        if said != minutes(table([name])[name], run_s)
    }
    assert not wrong, f"README minutes (said, estimated): {wrong}; python -m autograde load prints the estimate"


@pytest.mark.parametrize("name", NAMES)
def test_the_notebook_states_the_readme_minutes(name):
    nb = nbformat.read(str(NOTEBOOKS / name / f"{name}.ipynb"), as_version=4)
    said = re.search(r"\*\*Time:\*\* about (\d+) minutes", nb.cells[0].source)
    assert said, f"{name}: the first cell does not say '**Time:** about N minutes'"
    assert int(said.group(1)) == readme_rows()[name][0], (
        f"{name} says {said.group(1)} minutes, the README {readme_rows()[name][0]}"
    )


def test_minutes_rounds_to_five_and_refuses_a_negative_time():
    load = {"words": 2000, "visible_lines": 400, "points": 10}
    assert minutes(load, 60) == 5 * round((10 + 10 + 25 + 1) / 5) == 45
    assert minutes({"words": 0, "visible_lines": 0, "points": 0}, 0) == 5
    with pytest.raises(ValueError, match="run_seconds"):
        minutes(load, -1)
