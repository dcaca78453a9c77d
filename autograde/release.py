"""Regenerate learner notebooks in notebooks/ from solutions/ with nbgrader generate_assignment."""
import os
import subprocess
import sys

from autograde import REPO, assignments


def tool_env():
    """The environment with this interpreter's bin/ first on PATH (nbgrader calls `alembic` by name)."""
    env = dict(os.environ)
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    return env


def release(names=None, release_dir=None, db_url=None):
    """Run `nbgrader generate_assignment` for each assignment; returns the names released.

    release_dir / db_url redirect the output (the sync test releases into a temporary folder).
    """
    names = list(names) if names else assignments()
    unknown = sorted(set(names) - set(assignments()))
    if unknown:
        raise ValueError(f"unknown assignment(s) {unknown}; known: {assignments()}")
    for name in names:
        cmd = [sys.executable, "-m", "nbgrader", "generate_assignment", name, "--force", "--log-level=WARN"]
        if release_dir is not None:
            cmd.append(f"--CourseDirectory.release_directory={release_dir}")
        if db_url is not None:
            cmd.append(f"--CourseDirectory.db_url={db_url}")
        done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, env=tool_env())
        if done.returncode != 0:
            raise RuntimeError(f"nbgrader generate_assignment {name} failed:\n{done.stdout}\n{done.stderr}")
    return names
