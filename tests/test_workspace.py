"""The learner's workspace (autograde/workspace.py): the learner's copies live outside the tracked files, a
course update adds new notebooks and offers changed ones beside the learner's copy, never over it.

"The course gains a commit" is simulated on a temporary copy of the released notebooks (notebooks/): one
notebook's text changes and a new assignment folder appears, as a `git pull` would do to notebooks/."""

import hashlib
import io
import json
import re
import shutil
import subprocess
import sys

import nbformat
import pytest

from autograde import COURSE_ID, NOTEBOOKS, REPO, assignments, tool_env
from autograde.check import check
from autograde.release import copy_notebook_folder, publish
from autograde.workspace import MANIFEST, UPDATES, WORKSPACE, resolve_notebook, set_up

pytestmark = pytest.mark.notebooks

EDITED = "04_speculative_decoder"
NEW = "09_new_in_the_course"
ANSWER = "# the learner's own answer, kept across course updates\nx = 42\n"


def rel(name):
    return f"{name}/{name}.ipynb"


@pytest.fixture
def course(tmp_path):
    """A temporary copy of the course's released notebooks, to change as a course update would."""
    root = tmp_path / "course"
    for name in assignments():
        copy_notebook_folder(NOTEBOOKS / name, root / name)
    shutil.copy(NOTEBOOKS / "nbgrader_config.py", root / "nbgrader_config.py")
    return root


def snapshot(folder):
    """{relative path: bytes} of every file under folder."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def learner_edits(path):
    """Write an answer into the notebook's first solution cell, as a learner would in JupyterLab."""
    nb = nbformat.read(str(path), as_version=4)
    cell = next(c for c in nb.cells if c.cell_type == "code" and c.metadata.get("nbgrader", {}).get("solution"))
    cell.source = ANSWER
    nbformat.write(nb, str(path))
    return path.read_bytes()


def has_answer(path):
    return any(c.source == ANSWER for c in nbformat.read(str(path), as_version=4).cells)


def course_commit(course):
    """The course gains a commit: EDITED's text changes and a new notebook NEW appears."""
    nb = nbformat.read(str(course / rel(EDITED)), as_version=4)
    nb.cells[0].source += "\n\n*Erratum (course update): the verify step reads the KV cache once.*"
    nbformat.write(nb, str(course / rel(EDITED)))
    (course / NEW).mkdir()
    new = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# 09: new in the course")])
    nbformat.write(new, str(course / rel(NEW)))


def test_first_run_copies_every_released_notebook_and_records_its_release(course, tmp_path):
    ws = tmp_path / "my-work"
    sync = set_up(course, ws)
    assert sorted(sync.added) == [rel(n) for n in assignments()]
    assert len(sync.messages) == 1 and "set up your workspace" in sync.messages[0], sync.messages
    for name in assignments():
        assert (ws / rel(name)).read_bytes() == (course / rel(name)).read_bytes(), name
    recorded = json.loads((ws / MANIFEST).read_text())["assignments"]
    for name in assignments():
        want = hashlib.sha256((course / rel(name)).read_bytes()).hexdigest()
        assert recorded[name][f"{name}.ipynb"] == {"sha256": want}, name
    assert not (ws / UPDATES).exists()
    # nothing changed: a second run is silent and changes nothing
    before = snapshot(ws)
    again = set_up(course, ws)
    assert (again.messages, again.added, again.updates) == ([], [], [])
    assert snapshot(ws) == before


def test_a_course_update_keeps_the_learners_edit_adds_the_new_notebook_and_offers_the_changed_one(course, tmp_path):
    ws = tmp_path / "my-work"
    set_up(course, ws)
    mine = learner_edits(ws / rel(EDITED))
    others = {n: (ws / rel(n)).read_bytes() for n in assignments() if n != EDITED}

    course_commit(course)
    sync = set_up(course, ws)  # `make lab`'s set-up step, after `git pull`

    assert (ws / rel(EDITED)).read_bytes() == mine, "the learner's edit was overwritten"
    assert has_answer(ws / rel(EDITED))
    assert (ws / rel(NEW)).read_bytes() == (course / rel(NEW)).read_bytes(), "the new notebook was not added"
    offered = ws / UPDATES / rel(EDITED)
    assert offered.read_bytes() == (course / rel(EDITED)).read_bytes(), "the changed notebook is not offered"
    assert "Erratum" in offered.read_text() and "Erratum" not in (ws / rel(EDITED)).read_text()
    assert all((ws / rel(n)).read_bytes() == b for n, b in others.items()), "an unchanged notebook was rewritten"
    assert (sync.added, sync.updates, sync.restored, sync.corrupt) == ([rel(NEW)], [rel(EDITED)], [], [])
    # one line per event, naming the file and where the new version is
    assert len(sync.messages) == 2, sync.messages
    update, added = sync.messages  # in course order
    assert added == f"added my-work/{rel(NEW)}: new in the course"
    assert (
        update.startswith(f"my-work/{rel(EDITED)} changed in the course since your copy was made")
        and f"my-work/{UPDATES}/{rel(EDITED)}" in update
        and "\n" not in update
    ), update
    # the updates folder is outside every assignment folder: nothing offered is ever submitted
    assert not any((ws / n / UPDATES).exists() for n in assignments() + [NEW])

    # until the learner acts, every run reminds them, and still changes nothing of theirs
    again = set_up(course, ws)
    assert again.updates == [rel(EDITED)] and again.added == []
    assert len(again.messages) == 1 and "still waits in" in again.messages[0], again.messages
    assert (ws / rel(EDITED)).read_bytes() == mine
    # deleting the offered file means "dealt with": the reminder stops, the learner's copy stays theirs
    offered.unlink()
    quiet = set_up(course, ws)
    assert (quiet.messages, quiet.updates) == ([], [])
    assert (ws / rel(EDITED)).read_bytes() == mine and not offered.exists()


def test_a_learner_who_takes_the_offered_version_whole_is_up_to_date(course, tmp_path):
    ws = tmp_path / "my-work"
    set_up(course, ws)
    learner_edits(ws / rel(EDITED))
    course_commit(course)
    set_up(course, ws)
    shutil.copy(ws / UPDATES / rel(EDITED), ws / rel(EDITED))
    sync = set_up(course, ws)
    assert (sync.messages, sync.updates) == ([], [])
    recorded = json.loads((ws / MANIFEST).read_text())["assignments"][EDITED][f"{EDITED}.ipynb"]
    assert "offered" not in recorded, recorded


def test_starting_a_notebook_over_restores_the_courses_current_version(course, tmp_path):
    """README: move your copy away (or delete it) and run `make lab` again."""
    ws = tmp_path / "my-work"
    set_up(course, ws)
    learner_edits(ws / rel(EDITED))
    course_commit(course)
    set_up(course, ws)
    (ws / rel(EDITED)).rename(ws / "my-old-04.ipynb")
    sync = set_up(course, ws)
    assert sync.restored == [rel(EDITED)] and sync.updates == []
    assert sync.messages == [
        f"restored my-work/{rel(EDITED)}: a fresh copy of the course's version (yours was not there)"
    ]
    assert (ws / rel(EDITED)).read_bytes() == (course / rel(EDITED)).read_bytes()
    assert has_answer(ws / "my-old-04.ipynb"), "the learner's moved copy was touched"
    assert set_up(course, ws).messages == []


def test_a_corrupt_notebook_is_reported_by_name_and_left_untouched(course, tmp_path):
    ws = tmp_path / "my-work"
    set_up(course, ws)
    broken = ws / rel("03_acceptance_math")
    broken.write_bytes(b'{"cells": [ {"cell_type": "code", "sour')  # a save cut short
    course_commit(course)
    sync = set_up(course, ws)
    assert sync.corrupt == [rel("03_acceptance_math")]
    lines = [m for m in sync.messages if "03_acceptance_math" in m]
    assert len(lines) == 1 and lines[0].startswith(
        f"my-work/{rel('03_acceptance_math')} is not a readable notebook (JSONDecodeError"
    ), sync.messages
    assert "left untouched" in lines[0]
    assert broken.read_bytes() == b'{"cells": [ {"cell_type": "code", "sour'
    # the rest of the update still happens
    assert (ws / rel(NEW)).exists() and (ws / UPDATES / rel(EDITED)).exists()


def test_a_missing_course_folder_is_named_and_no_workspace_is_made(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"the course's released notebooks .*gone are missing"):
        set_up(tmp_path / "gone", tmp_path / "my-work")
    assert not (tmp_path / "my-work").exists()


def test_a_workspace_without_its_record_offers_what_differs_and_changes_nothing(course, tmp_path):
    """A lost or unreadable manifest: copies equal to the course's are recorded silently, a differing copy
    is offered beside it (no record says which version it came from); nothing of the learner's changes."""
    ws = tmp_path / "my-work"
    set_up(course, ws)
    mine = learner_edits(ws / rel(EDITED))
    (ws / MANIFEST).write_text("{ not json")
    sync = set_up(course, ws)
    assert sync.messages[0].startswith(f"{ws / MANIFEST} is unreadable (JSONDecodeError"), sync.messages
    assert sync.updates == [rel(EDITED)] and "no record says which version" in sync.messages[1]
    assert len(sync.messages) == 2, sync.messages
    assert (ws / rel(EDITED)).read_bytes() == mine
    assert (ws / UPDATES / rel(EDITED)).read_bytes() == (course / rel(EDITED)).read_bytes()


def test_the_workspace_config_makes_the_assignment_list_open_the_workspace(course, tmp_path, monkeypatch):
    """JupyterLab serving the workspace: nbgrader's Assignment List reads the workspace's generated
    nbgrader_config.py, lists every assignment as downloaded there, and not the updates folder."""
    from nbgrader.server_extensions.assignment_list.handlers import AssignmentList

    ws = tmp_path / "my-work"
    set_up(course, ws)
    learner_edits(ws / rel(EDITED))
    course_commit(course)
    set_up(course, ws)
    assert (ws / UPDATES / rel(EDITED)).exists()
    monkeypatch.setenv("SPECDEC_EXCHANGE", str(tmp_path / "exchange"))
    publish(tmp_path / "exchange")
    panel = AssignmentList()
    panel.root_dir = str(ws)
    result = panel.list_released_assignments()
    assert result["success"], result["value"]
    rows = {r["assignment_id"]: r for r in result["value"]}
    assert sorted(rows) == assignments()
    for name, row in rows.items():
        assert row["course_id"] == COURSE_ID and row["status"] == "fetched", row
        assert row["path"] == name and [n["path"] for n in row["notebooks"]] == [rel(name)], row
    assert UPDATES not in rows


def test_check_takes_an_assignment_as_the_learners_copy_in_the_workspace(course, tmp_path):
    ws = tmp_path / "my-work"
    set_up(course, ws)
    mine = ws / rel(EDITED)
    assert resolve_notebook("04", ws) == mine
    assert resolve_notebook("4", ws) == mine
    assert resolve_notebook(EDITED, ws) == mine
    # a path works as before, even one that does not exist (check then says it cannot read it)
    assert resolve_notebook(str(NOTEBOOKS / rel(EDITED)), ws) == NOTEBOOKS / rel(EDITED)
    assert resolve_notebook("elsewhere.ipynb", ws).name == "elsewhere.ipynb"


@pytest.mark.parametrize(
    "arg, missing, expect",
    [
        ("04", "workspace", "there is no workspace {ws}, where your copy of 04_speculative_decoder would be"),
        (
            "04",
            "notebook",
            "your copy of 04_speculative_decoder is not in the workspace: {ws}/04_speculative_decoder/"
            "04_speculative_decoder.ipynb does not exist",
        ),
        ("99", "", "'99' is neither a notebook file nor an assignment of this course"),
    ],
)
def test_check_names_what_is_missing(course, tmp_path, monkeypatch, arg, missing, expect):
    ws = tmp_path / "my-work"
    if missing != "workspace":
        set_up(course, ws)
    if missing == "notebook":
        (ws / rel(EDITED)).unlink()
    monkeypatch.setenv("SPECDEC_WORKSPACE", str(ws))
    out = io.StringIO()
    assert check(arg, out=out) is None
    assert out.getvalue().startswith(f"cannot grade {arg}: " + expect.format(ws=ws)), out.getvalue()
    if arg == "99":
        assert all(name in out.getvalue() for name in assignments())
    else:
        assert "`make lab` (or `python -m autograde workspace`)" in out.getvalue()


def test_the_workspace_command_sets_up_then_only_reports_changes(tmp_path):
    """`make lab` runs `python -m autograde workspace`: the exchange and the workspace, then one line."""
    env = dict(tool_env(), SPECDEC_WORKSPACE=str(tmp_path / "my-work"), SPECDEC_EXCHANGE=str(tmp_path / "exchange"))
    cmd = [sys.executable, "-m", "autograde", "workspace"]
    first = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True)
    assert first.returncode == 0, first.stderr
    lines = first.stdout.splitlines()
    assert len(lines) == 2 and lines[0].startswith(
        f"set up your workspace {tmp_path / 'my-work'} with the course's {len(assignments())} notebooks"
    ), lines
    assert (tmp_path / "exchange" / COURSE_ID / "outbound" / rel(EDITED)).is_file()
    config = (tmp_path / "my-work" / "nbgrader_config.py").read_text()
    assert f"load_subconfig({str(NOTEBOOKS / 'nbgrader_config.py')!r})" in config
    assert f"c.Exchange.assignment_dir = {str(tmp_path / 'my-work')!r}" in config
    mine = learner_edits(tmp_path / "my-work" / rel(EDITED))
    second = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True)
    assert second.returncode == 0 and second.stdout.splitlines() == lines[1:], second.stdout + second.stderr
    assert (tmp_path / "my-work" / rel(EDITED)).read_bytes() == mine


def test_make_lab_serves_the_workspace_and_git_ignores_it():
    """The Makefile's `lab` target sets up and serves the same folder the tool fills, and no learner file in
    it is ever tracked (so `git pull` never conflicts with it, and the sync test never sees it)."""
    lab = re.search(r"^lab:.*?\n((?:\t.*\n)+)", (REPO / "Makefile").read_text(), re.MULTILINE).group(1)
    assert "-m autograde workspace" in lab, lab
    assert f"--notebook-dir={WORKSPACE.relative_to(REPO)} " in lab, lab
    probe = f"{WORKSPACE.relative_to(REPO)}/{rel(EDITED)}"
    ignored = subprocess.run(["git", "check-ignore", "-q", probe], cwd=REPO)
    assert ignored.returncode == 0, f"{probe} is not git-ignored"


@pytest.mark.timeout(600)
def test_check_by_number_grades_the_learners_copy_in_the_workspace(tmp_path, grader_cache):
    """`python -m autograde check 01` from any folder: the workspace copy is graded (here the learner has
    solved it: full points, no failed check, no hint), not the untouched notebook in notebooks/ (which scores 0)."""
    first = assignments()[0]
    ws = tmp_path / "my-work"
    set_up(NOTEBOOKS, ws)
    shutil.copy(REPO / "solutions" / rel(first), ws / rel(first))
    env = dict(tool_env(), SPECDEC_WORKSPACE=str(ws), XDG_CACHE_HOME=str(grader_cache))
    done = subprocess.run(
        [sys.executable, "-m", "autograde", "check", first[:2]],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"checking {ws / rel(first)} against {first}" in done.stdout, done.stdout  # the copy in my-work/
    assert "total: 9/9 points" in done.stdout, done.stdout
    assert " x " not in done.stdout and "hint" not in done.stdout, done.stdout


def test_work_done_in_the_course_folder_is_named(tmp_path):
    """A learner who worked in notebooks/ under an earlier version of the course is told which files hold
    their changes (they block `git pull` and fail the sync test); a clean checkout names none."""
    from autograde.workspace import changed_in_course_folder

    repo = tmp_path / "clone"
    course = repo / "notebooks"
    for name in assignments()[:2]:
        copy_notebook_folder(NOTEBOOKS / name, course / name)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.org"]
    for cmd in (["init", "-q"], ["add", "."], ["commit", "-q", "-m", "course"]):
        subprocess.run(git + cmd, cwd=repo, check=True, capture_output=True)
    assert changed_in_course_folder(course) == []
    first = assignments()[0]
    learner_edits(course / rel(first))
    assert changed_in_course_folder(course) == [f"notebooks/{rel(first)}"]
    (tmp_path / "plain").mkdir()
    assert changed_in_course_folder(tmp_path / "plain") == [], "a folder outside any checkout has no changes"
