"""The learner's JupyterLab lists the course in nbgrader's Assignment List: notebooks/nbgrader_config.py
points the panel at a local exchange that `python -m autograde workspace` (run by `make lab`) fills."""

import re

import pytest

from autograde import COURSE_ID, NOTEBOOKS, REPO, assignments
from autograde.release import publish

pytestmark = pytest.mark.notebooks


def listed(monkeypatch, exchange, root=NOTEBOOKS):
    """What the Assignment List panel's server handler returns for a JupyterLab serving `root`."""
    from nbgrader.server_extensions.assignment_list.handlers import AssignmentList

    monkeypatch.setenv("SPECDEC_EXCHANGE", str(exchange))
    panel = AssignmentList()
    panel.root_dir = str(root)
    return panel.list_released_assignments()


def test_every_assignment_is_listed_as_downloaded_in_notebooks(tmp_path, monkeypatch):
    assert publish(tmp_path / "exchange") == tmp_path / "exchange"
    result = listed(monkeypatch, tmp_path / "exchange")
    assert result["success"], result["value"]
    rows = {r["assignment_id"]: r for r in result["value"]}
    assert sorted(rows) == assignments()
    for name, row in rows.items():
        assert row["course_id"] == COURSE_ID and row["status"] == "fetched", row
        assert row["path"] == name, f"{name}: the panel should open notebooks/{name}, got {row['path']}"
        assert [n["path"] for n in row["notebooks"]] == [f"{name}/{name}.ipynb"]
        outbound = tmp_path / "exchange" / COURSE_ID / "outbound" / name / f"{name}.ipynb"
        assert outbound.read_bytes() == (NOTEBOOKS / name / f"{name}.ipynb").read_bytes()


def test_publishing_again_replaces_what_was_there(tmp_path):
    stale = tmp_path / "exchange" / COURSE_ID / "outbound" / assignments()[0] / "stale.ipynb"
    stale.parent.mkdir(parents=True)
    stale.write_text("{}")
    publish(tmp_path / "exchange")
    assert not stale.exists()


def test_an_empty_exchange_is_reported_not_a_crash(tmp_path, monkeypatch):
    """before `make lab` has published (the folder does not exist yet): the panel says so."""
    result = listed(monkeypatch, tmp_path / "missing")
    assert result["success"] is False and "exchange directory does not exist" in result["value"]


def test_the_learner_config_loads_the_course_config(monkeypatch):
    """The Assignment List reads notebooks/nbgrader_config.py: it carries the course's own settings
    (cell timeout, course id) besides the exchange, so no panel sees a different course."""
    from nbgrader.apps import NbGrader

    monkeypatch.chdir(NOTEBOOKS)
    app = NbGrader()
    app.config_file_paths.append(str(NOTEBOOKS))
    app.load_config_file()
    course_app = NbGrader()
    course_app.config_file_paths.append(str(REPO))
    course_app.load_config_file()
    assert app.config.Execute.timeout == course_app.config.Execute.timeout == 120
    assert app.config.CourseDirectory.course_id == COURSE_ID
    assert app.config.Exchange.assignment_dir == str(NOTEBOOKS)
    course = re.search(r'course_id = "([^"]+)"', (REPO / "nbgrader_config.py").read_text()).group(1)
    assert course == COURSE_ID, "autograde.COURSE_ID must match nbgrader_config.py"
