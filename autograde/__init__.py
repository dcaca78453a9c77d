"""The course's grading tool: release learner notebooks, self-check one notebook, grade a class.

The course's facts live here, once: where the repository, its solutions and learner notebooks are, the
nbgrader course id (nbgrader_config.py says the same; tests/test_exchange.py checks it), the working
folder for everything grading writes, and how tools run by name (nbgrader calls `alembic`).
"""

import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SOLUTIONS = REPO / "solutions"
NOTEBOOKS = REPO / "notebooks"
COURSE_ID = "speculative-decoding"
WORK = REPO / "autograde" / "work"  # gradebook, submitted/, autograded/, feedback/ (git-ignored)
EXCHANGE = WORK / "exchange"  # the learner's local exchange (notebooks/nbgrader_config.py)


def assignments():
    """Names of the assignments (folders of solutions/ holding a notebook), in course order."""
    return sorted(p.name for p in SOLUTIONS.iterdir() if p.is_dir() and any(p.glob("*.ipynb")))


def tool_env(env=None):
    """A copy of the environment with this interpreter's bin/ first on PATH (nbgrader runs `alembic` by
    name, and the course's tools must be the ones of the environment that runs the grader)."""
    env = dict(os.environ if env is None else env)
    bin_dir = os.path.dirname(sys.executable)
    parts = env.get("PATH", "").split(os.pathsep)
    if bin_dir not in parts:
        env["PATH"] = os.pathsep.join([bin_dir] + [p for p in parts if p])
    return env


def put_tools_on_path():
    """Make this process's PATH the one tool_env() gives (for converters nbgrader runs in-process)."""
    os.environ["PATH"] = tool_env()["PATH"]


def cache_dir():
    """Where the grading tool caches prepared gradebooks and preflight results (per user)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "speculative-decoding-autograde"


def grading_sources():
    """Which course package and data the kernels import and read (always this checkout's)."""
    return f"course package {REPO / 'specdec'}, data {REPO / 'data'}"


def write_atomic(path, data):
    """Write bytes to `path` through a temporary file beside it, so that a reader never sees half a file."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)
