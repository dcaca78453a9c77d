"""The house style, kept by a tool: ruff's lint (pycodestyle, pyflakes, import order) and its format check pass on the
course's code, as pyproject.toml configures them (a line length of 120). `make test-fast` and `make test` run this."""

import subprocess
import sys
from pathlib import Path

import pytest

from autograde import REPO

RUFF = Path(sys.executable).with_name("ruff")  # installed into the virtual environment by requirements.txt


def _ruff(*args, stdin=None):
    if not RUFF.exists():
        pytest.fail(
            f"ruff is not installed beside {sys.executable}: run `make test` (or pip install -r requirements.txt)"
        )
    return subprocess.run([str(RUFF), *args], cwd=REPO, input=stdin, capture_output=True, text=True, timeout=120)


def test_ruff_check_passes_on_the_course_code():
    done = _ruff("check", "--no-cache", ".")
    assert done.returncode == 0, f"ruff check found problems (fix them, or `ruff check --fix`):\n{done.stdout[-4000:]}"


def test_ruff_format_check_passes_on_the_course_code():
    done = _ruff("format", "--check", "--no-cache", ".")
    assert done.returncode == 0, f"ruff format would change these files (run `ruff format`):\n{done.stdout[-4000:]}"


def test_the_configuration_holds_lines_to_120_and_imports_in_order():
    """The checks above are only as strict as pyproject.toml: a line of 121 characters and imports out of order fail,
    a line of 120 passes."""
    long_line = 'X = "' + "a" * 115 + '"\n'  # 121 characters
    fits = 'X = "' + "a" * 114 + '"\n'  # 120
    bad = _ruff(
        "check",
        "--no-cache",
        "--stdin-filename",
        "specdec/_example.py",
        "-",
        stdin="import sys\nimport os\n\n" + long_line + "print(os, sys)\n",
    )
    assert bad.returncode == 1 and "E501" in bad.stdout and "I001" in bad.stdout, bad.stdout
    good = _ruff(
        "check",
        "--no-cache",
        "--stdin-filename",
        "specdec/_example.py",
        "-",
        stdin="import os\nimport sys\n\n" + fits + "print(os, sys)\n",
    )
    assert good.returncode == 0, good.stdout
