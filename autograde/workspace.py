"""The learner's workspace: their own copies of the course notebooks, outside every tracked file.

`make lab` (through `python -m autograde workspace`) fills the workspace, my-work/ by default (git-ignored),
with the released notebooks of notebooks/, the way nbgrader's fetch does it, and serves it in JupyterLab.
Course updates (`git pull`) change notebooks/ only; the next set-up run then

- copies a notebook (or file) that is new in the course, or whose copy the learner deleted to start over;
- never overwrites a file the learner has;
- when the course changed a file since the learner's copy was made, puts the new version in
  course-updates/ASSIGNMENT/ (inside the workspace, outside every assignment folder, so it is never
  submitted) and says so in one line; nothing is merged;
- reports a notebook that is not readable JSON by name and leaves it as it is.

Which release each copy came from is recorded in the manifest .course-release.json: per assignment and
file, the sha256 of the course's version the copy was made from ("sha256"), and of the newer version
last put in course-updates/ ("offered"). A learner who deletes the offered file has dealt with it: the
reminder stops. The workspace also gets its own nbgrader_config.py (JupyterLab's nbgrader panels read
their settings from the folder they serve): it loads the course's notebooks/nbgrader_config.py and
makes the workspace the folder the Assignment List opens and submits from.
"""

import hashlib
import json
import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from autograde import NOTEBOOKS, REPO, assignments, write_atomic

WORKSPACE = REPO / "my-work"  # git-ignored; SPECDEC_WORKSPACE overrides it
MANIFEST = ".course-release.json"
UPDATES = "course-updates"
CONFIG = "nbgrader_config.py"
SKIP = {".ipynb_checkpoints", "__pycache__"}

__all__ = [
    "WORKSPACE",
    "MANIFEST",
    "UPDATES",
    "Sync",
    "default_workspace",
    "set_up",
    "resolve_notebook",
    "changed_in_course_folder",
]


def default_workspace():
    return Path(os.environ.get("SPECDEC_WORKSPACE") or WORKSPACE)


def _sha256(path):
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _course_files(course):
    """{assignment: [file names]} of the course's released folders (a folder holding a notebook)."""
    found = {}
    for folder in sorted(p for p in Path(course).iterdir() if p.is_dir() and p.name not in SKIP):
        files = sorted(
            f.name for f in folder.iterdir() if f.is_file() and not f.name.startswith(".") and f.name not in SKIP
        )
        if any(f.endswith(".ipynb") for f in files):
            found[folder.name] = files
    return found


def _unreadable(path):
    """Why a notebook file is not readable JSON, or None when it is."""
    try:
        json.loads(Path(path).read_bytes())
    except (OSError, ValueError) as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


def _copy(src, dest):
    dest.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(dest, Path(src).read_bytes())


def config_text(workspace, template=None):
    """The workspace's nbgrader_config.py: the course's learner settings, with the workspace as the
    folder the Assignment List opens, fetches into and submits from."""
    template = Path(template or NOTEBOOKS / CONFIG).resolve()
    return (
        f'"""nbgrader settings for JupyterLab serving this folder, written by `python -m autograde workspace`\n'
        f'(make lab) on every run: edits here are replaced. The settings themselves: {template}."""\n'
        f"c = get_config()  # noqa: F821 (provided by nbgrader)\n"
        f"load_subconfig({str(template)!r})  # noqa: F821 (provided by traitlets)\n"
        f"c.Exchange.assignment_dir = {str(Path(workspace).resolve())!r}\n"
    )


@dataclass
class Sync:
    """What one set-up run did; `messages` holds one line per event, for the learner."""

    workspace: Path
    added: list = field(default_factory=list)  # "NAME/file": new in the course, or first set-up
    restored: list = field(default_factory=list)  # "NAME/file": the learner's copy was missing
    updates: list = field(default_factory=list)  # "NAME/file": a newer course version waits in UPDATES/
    corrupt: list = field(default_factory=list)  # "NAME/file": not readable JSON, left untouched
    messages: list = field(default_factory=list)


def _read_manifest(path, sync):
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text())
        recorded = data["assignments"]
        if not isinstance(recorded, dict):
            raise ValueError("'assignments' is not an object")
        return recorded
    except (OSError, ValueError, KeyError, TypeError) as exc:
        sync.messages.append(
            f"{path} is unreadable ({type(exc).__name__}: {exc}): rebuilt it; your notebooks "
            f"are untouched, and any that differ from the course are offered in {UPDATES}/"
        )
        return {}


def set_up(course=NOTEBOOKS, workspace=None, config_template=None):
    """Fill or refresh the learner's workspace from the course's released notebooks; returns a Sync.

    course: the released assignment folders (notebooks/); workspace: the learner's folder (default
    my-work/, or SPECDEC_WORKSPACE). Never overwrites or deletes a file of the learner's.
    """
    course = Path(course)
    if not course.is_dir():
        raise FileNotFoundError(
            f"the course's released notebooks {course} are missing: restore them with "
            f"`git checkout -- {course.name}/` (instructors: `make release`)"
        )
    ws = Path(workspace or default_workspace())
    sync = Sync(ws)
    first = not (ws / MANIFEST).exists()
    ws.mkdir(parents=True, exist_ok=True)
    recorded = _read_manifest(ws / MANIFEST, sync)
    shown = ws.name

    for name, files in _course_files(course).items():
        entries = recorded.setdefault(name, {})
        if not isinstance(entries, dict):
            entries = recorded[name] = {}
        for fname in files:
            rel = f"{name}/{fname}"
            src, mine, offered_at = course / name / fname, ws / name / fname, ws / UPDATES / name / fname
            release = _sha256(src)
            entry = entries.get(fname) if isinstance(entries.get(fname), dict) else {}
            if not mine.exists():
                _copy(src, mine)
                entries[fname] = {"sha256": release}
                if entry:
                    sync.restored.append(rel)
                    sync.messages.append(
                        f"restored {shown}/{rel}: a fresh copy of the course's version (yours was not there)"
                    )
                else:
                    sync.added.append(rel)
                    if not first:
                        sync.messages.append(f"added {shown}/{rel}: new in the course")
                continue
            if fname.endswith(".ipynb"):
                why = _unreadable(mine)
                if why:
                    sync.corrupt.append(rel)
                    sync.messages.append(
                        f"{shown}/{rel} is not a readable notebook ({why}): left untouched; "
                        f"repair it, or move it out of {shown}/ and run `make lab` again for a "
                        f"fresh copy"
                    )
            old, offered = entry.get("sha256"), entry.get("offered")
            if old == release:
                continue  # the course has not changed this file
            if (mine.is_file() and rel not in sync.corrupt and _sha256(mine) == release) or (
                offered == release and not offered_at.exists()
            ):
                # the learner's copy is the course's version, or they deleted the offered update
                entries[fname] = {"sha256": release}
                continue
            sync.updates.append(rel)
            if offered == release:
                sync.messages.append(
                    f"{shown}/{rel}: the course's newer version still waits in "
                    f"{shown}/{UPDATES}/{rel}; delete that file once you have taken what you need"
                )
                continue
            _copy(src, offered_at)
            entries[fname] = {"sha256": old, "offered": release}
            why = (
                "changed in the course since your copy was made"
                if old
                else "differs from the course's version, and no record says which version it came from"
            )
            sync.messages.append(
                f"{shown}/{rel} {why}: the course's version is in {shown}/{UPDATES}/{rel}; your copy is untouched"
            )

    if first and sync.added:
        count = sum(rel.endswith(".ipynb") for rel in sync.added)
        sync.messages.insert(
            0,
            f"set up your workspace {ws} with the course's {count} notebooks: your work "
            f"lives here, and course updates never overwrite it",
        )
    manifest = {
        "note": "written by `python -m autograde workspace`: for each of your files, the sha256 of the "
        "course's version it was copied from, and of a newer one offered in "
        f"{UPDATES}/. Delete this file only to have every differing notebook offered again.",
        "assignments": recorded,
    }
    write_atomic(ws / MANIFEST, (json.dumps(manifest, indent=1, sort_keys=True) + "\n").encode())
    config = config_text(ws, config_template)
    if not (ws / CONFIG).exists() or (ws / CONFIG).read_text() != config:
        write_atomic(ws / CONFIG, config.encode())
    return sync


def resolve_notebook(arg, workspace=None):
    """`check`'s argument: a path as given (as before), or an assignment, by number (04, 4) or name, meaning
    the learner's own copy in the workspace. Raises LookupError naming what is missing."""
    text = str(arg)
    path = Path(text).expanduser()
    if text.endswith(".ipynb") or os.sep in text or path.is_file():
        return path
    names = assignments()
    key = text.strip()
    matches = [n for n in names if key == n or (key.isdigit() and n.split("_")[0] == key.zfill(2))]
    if not matches:
        raise LookupError(
            f"{text!r} is neither a notebook file nor an assignment of this course; give the path "
            f"of a .ipynb, or an assignment number or name: {', '.join(names)}"
        )
    name = matches[0]
    ws = Path(workspace or default_workspace())
    mine = ws / name / f"{name}.ipynb"
    if not ws.is_dir():
        raise LookupError(
            f"there is no workspace {ws}, where your copy of {name} would be: `make lab` (or "
            f"`python -m autograde workspace`) creates it"
        )
    if not mine.is_file():
        raise LookupError(
            f"your copy of {name} is not in the workspace: {mine} does not exist; `make lab` (or "
            f"`python -m autograde workspace`) puts a fresh copy there, or give the path of your "
            f"notebook"
        )
    return mine


def changed_in_course_folder(course=NOTEBOOKS):
    """Notebooks in the course's tracked folder that differ from the checkout's last commit, as paths from
    the repository root: work done there under an earlier version of the course, which blocks `git pull`
    and fails the sync test. [] where git cannot tell (no git, not a checkout)."""
    try:
        done = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=all", "--", "."],
            cwd=course,
            capture_output=True,
            text=True,
            timeout=60,
        )
    except (OSError, subprocess.SubprocessError):
        return []
    if done.returncode != 0:
        return []
    return sorted(line[3:] for line in done.stdout.splitlines() if line[3:].endswith(".ipynb"))
