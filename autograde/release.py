"""Regenerate learner notebooks in notebooks/ from solutions/ with nbgrader generate_assignment."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

from autograde import COURSE_ID, EXCHANGE, NOTEBOOKS, REPO, WORK, assignments, tool_env
from autograde.given import write as write_given
from specdec.measure.my_measurements import FILE as INSIGHTS_FILE

__all__ = ["release", "publish", "copy_notebook_folder", "tool_env", "RELEASE_IGNORE"]

# nbgrader's own defaults, and the measurements file a notebook writes beside itself
# (specdec/measure/my_measurements.py)
RELEASE_IGNORE = (".ipynb_checkpoints", "*.pyc", "__pycache__", "feedback", INSIGHTS_FILE)


class EarlyReleaseError(ValueError):
    """A notebook whose given cells restate an earlier assignment's answers, released while that assignment still
    accepts submissions (course.toml's due date and grace); the message names both and the time, and --force."""


def release(names=None, release_dir=None, db_url=None, given=True, force=False, now=None):
    """Write the given cells of the solutions from their sources (autograde/given.py), then run
    `nbgrader generate_assignment` for each assignment and set its duedate in the gradebook from the
    course file (course.toml); returns the names released.

    A notebook whose given cells restate answers of an assignment still open for submissions (course.toml) is
    refused before anything is written (EarlyReleaseError), unless force.

    release_dir / db_url redirect the output (the sync test releases into a temporary folder, with
    given=False: a test never writes into solutions/).
    """
    names = list(names) if names else assignments()
    unknown = sorted(set(names) - set(assignments()))
    if unknown:
        raise ValueError(f"unknown assignment(s) {unknown}; known: {assignments()}")
    from autograde.deadlines import describe_early, early_releases, load_policy, write_duedates

    policy = load_policy(known=assignments())  # bad input stops the release before it writes anything
    early = early_releases(names, policy, now=now)
    if early and not force:
        raise EarlyReleaseError(
            f"not released: {describe_early(early, policy)}. Learners would get those answers "
            f"before the deadline; release it after that, or pass --force to release it anyway"
        )
    out_of_step = judges_out_of_step(names)
    if out_of_step:
        raise ValueError(
            "the test cells and their judges (autograde/judges) are out of step: " + "; ".join(out_of_step)
        )
    for name, origin, closes in early:
        print(f"warning: releasing {name} while {origin} is open until {closes:%Y-%m-%d %H:%M} UTC (--force)")
    if given:
        for name, cell in write_given(names):
            print(f"wrote the given cell {cell} of solutions/{name} from its sources")
    if db_url is None:  # the course's gradebook lives in autograde/work/, absent on a fresh clone
        WORK.mkdir(parents=True, exist_ok=True)
    for name in names:
        cmd = [sys.executable, "-m", "nbgrader", "generate_assignment", name, "--force", "--log-level=WARN"]
        # what a run of a solution leaves beside it (the learner's measurements) is not part of the release; the
        # exchange still copies such files, so a learner's my_measurements.json travels with their submission
        cmd += [f"--CourseDirectory.ignore={pattern}" for pattern in RELEASE_IGNORE]
        if release_dir is not None:
            cmd.append(f"--CourseDirectory.release_directory={release_dir}")
        if db_url is not None:
            cmd.append(f"--CourseDirectory.db_url={db_url}")
        done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, env=tool_env())
        if done.returncode != 0:
            raise RuntimeError(f"nbgrader generate_assignment {name} failed:\n{done.stdout}\n{done.stderr}")
    # the gradebook's duedate from course.toml (formgrader and `nbgrader collect --before-duedate` read it)
    for name, due in write_duedates(db_url or f"sqlite:///{WORK / 'gradebook.db'}", COURSE_ID, policy, names).items():
        if due is not None:
            print(f"{name}: due {due:%Y-%m-%d %H:%M} UTC in the gradebook ({policy.path.name})")
    return names


def judges_out_of_step(names):
    """Where a notebook's judged test cells and its judge module (autograde/judges) disagree, "name: problem" each:
    the release refuses them, so a test cell never ships naming a judge that does not decide it."""
    import nbformat

    from autograde.assignment import source_notebook
    from autograde.judges import out_of_step

    return [
        f"{name}: {problem}"
        for name in names
        for problem in out_of_step(name, nbformat.read(str(source_notebook(name)), as_version=4).cells)
    ]


def copy_notebook_folder(src_dir, dest_dir):
    """Copy one assignment folder (notebook plus any files beside it) without what a release leaves out
    (RELEASE_IGNORE: checkpoints, caches, a run's measurements)."""
    shutil.copytree(src_dir, dest_dir, ignore=shutil.ignore_patterns(*RELEASE_IGNORE))
    return Path(dest_dir)


def publish(root=None):
    """Put every learner notebook folder of notebooks/ into a local nbgrader exchange, as
    `nbgrader release_assignment` would: ROOT/speculative-decoding/outbound/NAME/. The learner's
    JupyterLab (notebooks/nbgrader_config.py) lists them in its Assignment List. Returns the folder.

    root: the exchange folder (default: SPECDEC_EXCHANGE, else autograde/work/exchange/).
    """
    root = Path(root or os.environ.get("SPECDEC_EXCHANGE") or EXCHANGE)
    outbound = root / COURSE_ID / "outbound"
    outbound.mkdir(parents=True, exist_ok=True)
    for name in assignments():
        if not (NOTEBOOKS / name).is_dir():
            raise FileNotFoundError(f"notebooks/{name} is missing: run `make release` first")
        shutil.rmtree(outbound / name, ignore_errors=True)
        copy_notebook_folder(NOTEBOOKS / name, outbound / name)
    return root
