"""Release order in the classroom (docs/classroom.md, "Release order"): formgrader's Release button and `nbgrader
release_assignment` run classroom/exchange.py's OrderedRelease, which the classroom environment's nbgrader_config.py
selects; it refuses a notebook that restates answers of an assignment still open in the course folder's course.toml.

No users, no hub: the classroom's own `_environment` writes its config and exchange module into a temporary
environment (reused, so nothing is built), and nbgrader's release runs on a temporary course folder laid out as the
classroom's (a copy of the course's nbgrader_config.py, solutions/ and notebooks/) with a temporary exchange.
"""

import datetime as dt
import shutil
import subprocess
import sys

import pytest
from traitlets.config import Config
from traitlets.config.loader import PyFileConfigLoader

from autograde import NOTEBOOKS, REPO, SOLUTIONS, tool_env
from classroom import COURSE_ID
from classroom.provision import EXCHANGE_MODULE, Classroom

UTC = dt.timezone.utc
EARLY, ORIGIN, PLAIN = "08_break_even_acceptance", "07_batch_crossover", "03_acceptance_math"


@pytest.fixture
def env(tmp_path, monkeypatch):
    """A classroom environment as `up` leaves it (config and exchange module), its module importable; the room."""
    room = Classroom("instructor", ["student"], root=tmp_path / "room", prefix=tmp_path / "env")
    room.python.parent.mkdir(parents=True)
    room.python.touch()
    (room.prefix / ".complete").write_text("a test environment\n")
    (room.prefix / "course-lib").mkdir()
    room._environment()
    monkeypatch.syspath_prepend(str(room.prefix / "course-lib"))
    sys.modules.pop(EXCHANGE_MODULE, None)
    return room


def course(tmp_path, toml):
    """A course folder as the classroom's (classroom/provision.py COURSE_FILES) with 03, 07 and 08, and course.toml."""
    root = tmp_path / "course"
    for name in (PLAIN, ORIGIN, EARLY):
        shutil.copytree(NOTEBOOKS / name, root / "notebooks" / name)
        (root / "solutions" / name).mkdir(parents=True)
        shutil.copy(SOLUTIONS / name / f"{name}.ipynb", root / "solutions" / name)
    shutil.copy(REPO / "nbgrader_config.py", root)
    (root / "autograde" / "work").mkdir(parents=True)
    (root / "course.toml").write_text(toml)
    return root


def due(delta, grace="15m"):
    moment = (dt.datetime.now(UTC) + delta).replace(microsecond=0)
    return f'[late_policy]\ngrace = "{grace}"\n\n[assignments.{ORIGIN}]\ndue = {moment.isoformat()}\n', moment


def release(env, root, name, **traits):
    """nbgrader's API release (formgrader's Release button) with the classroom's and the course folder's config."""
    from nbgrader.apps import NbGraderAPI

    config = Config()
    config.merge(PyFileConfigLoader("nbgrader_config.py", str(env.prefix / "venv" / "etc" / "jupyter")).load_config())
    config.merge(PyFileConfigLoader("nbgrader_config.py", str(root)).load_config())
    for trait, value in traits.items():
        setattr(config.OrderedRelease, trait, value)
    return NbGraderAPI(config=config).release_assignment(name)


def outbound(env, name):
    return env.exchange / COURSE_ID / "outbound" / name / f"{name}.ipynb"


def test_the_classroom_config_selects_the_ordered_release_from_the_module_it_installs(env):
    from nbgrader.exchange import ExchangeFactory
    from nbgrader.exchange.default import ExchangeReleaseAssignment

    module = env.prefix / "course-lib" / f"{EXCHANGE_MODULE}.py"
    assert module.read_text() == (REPO / "classroom" / "exchange.py").read_text()
    config = PyFileConfigLoader("nbgrader_config.py", str(env.prefix / "venv" / "etc" / "jupyter")).load_config()
    assert config.ExchangeFactory.release_assignment == f"{EXCHANGE_MODULE}.OrderedRelease"
    factory = ExchangeFactory(config=config)
    assert factory.release_assignment.__name__ == "OrderedRelease"
    assert issubclass(factory.release_assignment, ExchangeReleaseAssignment)
    assert factory.submit.__name__ == "PrivateSubmit" and factory.collect.__name__ == "CheckedCollect"
    # a learner's process loads the same config: the module must not need the course's autograde package
    done = subprocess.run(
        [sys.executable, "-c", f"import sys, {EXCHANGE_MODULE}; print('autograde' in sys.modules)"],
        cwd=module.parent,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0 and done.stdout.strip() == "False", done.stderr


def test_an_early_notebook_is_refused_naming_what_it_restates_and_when_that_closes(env, tmp_path):
    toml, moment = due(dt.timedelta(days=2), grace="1h")
    root = course(tmp_path, toml)
    closes = moment + dt.timedelta(hours=1)
    result = release(env, root, EARLY)
    assert result["success"] is False, result
    said = result["log"]
    assert (
        f"not released: {EARLY} restates answers of {ORIGIN}, which accepts submissions until "
        f"{closes:%Y-%m-%d %H:%M} UTC (due date and grace in course.toml)"
    ) in said, said
    assert f"nbgrader release_assignment {EARLY} --OrderedRelease.force_early=True" in said
    assert f"c.OrderedRelease.force_early = True in {root}/nbgrader_config.py" in said
    assert "ExchangeError" in result["error"]  # formgrader shows the log and the traceback
    assert not outbound(env, EARLY).parent.exists(), "nothing may reach the exchange"
    # a notebook that restates nothing goes out
    result = release(env, root, PLAIN)
    assert result["success"], result
    assert outbound(env, PLAIN).read_bytes() == (root / "notebooks" / PLAIN / f"{PLAIN}.ipynb").read_bytes()


def test_an_early_notebook_is_released_when_forced_with_a_warning(env, tmp_path):
    root = course(tmp_path, due(dt.timedelta(days=2))[0])
    result = release(env, root, EARLY, force_early=True)
    assert result["success"], result
    assert f"releasing {EARLY} while {ORIGIN} accepts submissions until" in result["log"]
    assert outbound(env, EARLY).read_bytes() == (root / "notebooks" / EARLY / f"{EARLY}.ipynb").read_bytes()


def test_the_grace_period_keeps_the_assignment_open_and_after_it_the_notebook_goes_out(env, tmp_path):
    root = course(tmp_path, due(-dt.timedelta(minutes=5), grace="1h")[0])  # past due, inside its grace
    assert release(env, root, EARLY)["success"] is False
    (root / "course.toml").write_text(due(-dt.timedelta(hours=2), grace="1h")[0])
    result = release(env, root, EARLY)
    assert result["success"], result
    assert "releasing" not in result["log"] and outbound(env, EARLY).is_file()


def test_a_bad_course_file_stops_the_release_and_says_why(env, tmp_path):
    root = course(tmp_path, "[assignments.07_batch_crosover]\ndue = 2026-12-09T17:00:00Z\n")
    result = release(env, root, PLAIN)
    assert result["success"] is False
    assert f"{PLAIN} not released:" in result["log"] and "no assignment is called '07_batch_crosover'" in result["log"]


def test_nbgrader_release_assignment_refuses_with_the_reason_and_releases_with_the_flag(env, tmp_path):
    """The command in the instructor's terminal: the course folder's config and the environment's (JUPYTER_CONFIG_PATH
    stands for PREFIX/venv/etc/jupyter), the course's autograde package on PYTHONPATH, as the classroom sets it."""
    root = course(tmp_path, due(dt.timedelta(days=2))[0])
    environ = tool_env()
    environ.update(
        JUPYTER_CONFIG_PATH=str(env.prefix / "venv" / "etc" / "jupyter"),
        PYTHONPATH=f"{env.prefix / 'course-lib'}:{REPO}",
    )
    cmd = [sys.executable, "-m", "nbgrader", "release_assignment", EARLY]
    done = subprocess.run(cmd, cwd=root, env=environ, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stderr
    assert f"not released: {EARLY} restates answers of {ORIGIN}" in done.stderr, done.stderr
    assert not outbound(env, EARLY).exists()
    done = subprocess.run(
        cmd + ["--OrderedRelease.force_early=True"], cwd=root, env=environ, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert f"releasing {EARLY} while {ORIGIN}" in done.stderr and outbound(env, EARLY).is_file()
