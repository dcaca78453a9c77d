"""Provisioning: set up and remove a classroom: Unix users and groups, each user's own password (written once to
ROOT/credentials.csv, root only), the shared Python environment, nbgrader's exchange, the instructor's course
folder and the hub's state; `Classroom` is the classroom
(its hub control is classroom.hub's, its test client classroom.client's).

Everything created is recorded in ROOT/state.json (root only), so that `down` removes exactly that:
the users and groups it created, ROOT, and PREFIX when it built it. Nothing else on the machine is
changed, except the repository folder's mode (made 0700 while the classroom runs, so that students,
who get a shell in JupyterLab, cannot read solutions/, .git or a gradebook; restored by `down`).
"""

import grp
import json
import os
import pwd
import re
import secrets
import shutil
import stat
import subprocess
import sys
import time
from pathlib import Path

from classroom import COURSE_ID, PREFIX, REPO, ROOT, ClassroomError, log
from classroom.auth import FAILED_LOGINS_ALLOWED, LOCKOUT_SECONDS
from classroom.client import HubClient
from classroom.hub import EXCHANGE_MODES, HubControl, check_exchange, check_port_free, free_port, proxy_command

# Debian's useradd accepts ^[a-z][-a-z0-9_]*$ by default; nbgrader splits submission names on '+'
USERNAME = re.compile(r"^[a-z_][a-z0-9_-]{0,31}$")
COURSE_FILES = (
    "solutions",
    "notebooks",
    "autograde",
    "specdec",
    "data",
    "nbgrader_config.py",
    "pyproject.toml",
    "course.toml",
)
EXCHANGE_MODULE = "specdec_classroom_exchange"
AUTH = ("pam", "shared")  # classroom/auth.py: one password per user (default), or one for everyone
# learners' passwords: 16 characters of an alphabet without look-alikes (0/o, 1/l/i), in groups of four to read
# out or copy: 31^16, 79 bits, far beyond online guessing (PAM waits 3 s after each wrong one, the hub locks)
PASSWORD_ALPHABET = "abcdefghjkmnpqrstuvwxyz23456789"
PY = f"python{sys.version_info.major}.{sys.version_info.minor}"


# ------------------------------------------------------------------------------------------- checks
def check_username(name):
    if not isinstance(name, str) or not USERNAME.match(name):
        raise ClassroomError(
            f"{name!r} is not a valid Unix user name: use 1 to 32 characters, lower-case letters, digits, "
            "'-' or '_', starting with a letter or '_' (nbgrader identifies students by their Unix user name)"
        )
    return name


def _mode(path):
    return stat.S_IMODE(os.stat(path).st_mode)


def _run(cmd, **kw):
    done = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if done.returncode != 0:
        raise ClassroomError(f"`{' '.join(map(str, cmd))}` failed ({done.returncode}): {done.stderr.strip()}")
    return done


def _exists_user(name):
    try:
        pwd.getpwnam(name)
        return True
    except KeyError:
        return False


def _exists_group(name):
    try:
        grp.getgrnam(name)
        return True
    except KeyError:
        return False


def new_password():
    chars = "".join(secrets.choice(PASSWORD_ALPHABET) for _ in range(16))
    return "-".join(chars[i : i + 4] for i in range(0, 16, 4))


def _write_private(path, text):
    """Write `text` to `path`, mode 0600 from its creation (never readable by others, not even for a moment)."""
    tmp = path.with_name(path.name + ".new")
    if tmp.exists():
        tmp.unlink()
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
    os.replace(tmp, path)


def _write_new(path, text):
    """Write a file of the classroom environment as a new inode (never through a hard link into the .venv)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists() or path.is_symlink():
        path.unlink()
    path.write_text(text)
    os.chmod(path, 0o644)


def _copy_tree(src, dest):
    """Copy a folder's contents as hard links (instant, no space) where src and dest share a file
    system, else as a plain copy."""
    if subprocess.run(["cp", "-al", f"{src}/.", str(dest)], capture_output=True).returncode:
        _run(["cp", "-a", f"{src}/.", str(dest)])


STDLIB_SKIP = {"site-packages", "test", "idlelib", "tkinter", "turtledemo", "ensurepip"}


def copy_interpreter(base, dest):
    """Copy the interpreter installed at `base` (pyenv's, under /root here) to `dest`: the executable,
    libpython and the standard library (no tests, no site-packages). A RUNPATH that points into `base`
    is rewritten in place to $ORIGIN/../lib. Returns the new executable."""
    exe = base / "bin" / PY
    if not exe.exists():
        raise ClassroomError(f"the course's interpreter {exe} is missing")
    (dest / "bin").mkdir(parents=True)
    stdlib = dest / "lib" / PY
    stdlib.mkdir(parents=True)
    for entry in (base / "lib" / PY).iterdir():
        if entry.name in STDLIB_SKIP or entry.name.startswith("config-"):
            continue
        if entry.is_dir() and not entry.is_symlink():
            (stdlib / entry.name).mkdir()
            _copy_tree(entry, stdlib / entry.name)
        else:
            shutil.copy2(entry, stdlib / entry.name, follow_symlinks=False)
    (stdlib / "site-packages").mkdir()
    for lib in (base / "lib").glob("libpython*"):
        shutil.copy2(lib, dest / "lib" / lib.name, follow_symlinks=False)
    data = exe.read_bytes()
    runpath = str(base / "lib").encode() + b"\0"
    if runpath in data:
        new = b"$ORIGIN/../lib\0"
        if len(new) > len(runpath):
            raise ClassroomError(f"cannot rewrite the RUNPATH of {exe}: {base} is too short a path")
        data = data.replace(runpath, new + b"\0" * (len(runpath) - len(new)), 1)
    (dest / "bin" / PY).write_bytes(data)
    os.chmod(dest / "bin" / PY, 0o755)
    os.symlink(PY, dest / "bin" / "python3")
    return dest / "bin" / PY


# ----------------------------------------------------------------------------------------- classroom
class Classroom(HubControl, HubClient):
    """One classroom: `instructor` and `students` (Unix user names), the hub on 127.0.0.1:`port`."""

    def __init__(
        self,
        instructor,
        students,
        *,
        port=8000,
        root=ROOT,
        prefix=PREFIX,
        course=COURSE_ID,
        auth="pam",
        failed_logins_allowed=FAILED_LOGINS_ALLOWED,
        lockout_seconds=LOCKOUT_SECONDS,
    ):
        if auth not in AUTH:
            raise ClassroomError(f"unknown authentication {auth!r}: choose one of {', '.join(AUTH)}")
        self.root, self.prefix, self.course = Path(root), Path(prefix), course
        self.instructor, self.students = instructor, list(students)
        self.port, self.auth = port, auth
        self.lockout = {"failed_logins_allowed": int(failed_logins_allowed), "lockout_seconds": int(lockout_seconds)}
        self.state = {}

    # paths
    @property
    def exchange(self):
        return self.root / "exchange"

    @property
    def course_dir(self):
        return self.root / "course"

    @property
    def hub_dir(self):
        return self.root / "hub"

    @property
    def python(self):
        return self.prefix / "venv" / "bin" / "python"

    @property
    def state_file(self):
        return self.root / "state.json"

    @property
    def credentials_file(self):
        return self.root / "credentials.csv"

    @property
    def url(self):
        return f"http://127.0.0.1:{self.port}"

    @property
    def groups(self):
        return f"nbgrader-{self.course}", f"formgrade-{self.course}"

    @classmethod
    def load(cls, root=ROOT):
        path = Path(root) / "state.json"
        if not path.exists():
            raise ClassroomError(f"no classroom at {root} ({path} is missing): nothing to do")
        state = json.loads(path.read_text())
        room = cls(
            state["instructor"],
            state["students"],
            port=state["port"],
            root=state["root"],
            prefix=state["prefix"],
            course=state["course"],
            auth=state.get("auth", "shared"),
            **state.get("lockout", {}),
        )
        room.state = state
        return room

    def save(self):
        self.root.mkdir(parents=True, exist_ok=True)
        os.chmod(self.root, 0o755)
        self.state_file.write_text(json.dumps(self.state, indent=1))
        os.chmod(self.state_file, 0o600)

    # ------------------------------------------------------------------ set-up
    def preflight(self):
        if os.geteuid() != 0:
            raise ClassroomError(
                "the classroom creates Unix users and runs JupyterHub's LocalProcessSpawner, "
                "which need root: run it as root (sudo make classroom)"
            )
        names = [self.instructor] + self.students
        for name in names:
            check_username(name)
        if len(set(names)) != len(names):
            raise ClassroomError(f"user names repeat: {names}")
        taken = [n for n in names if _exists_user(n)]
        if taken:
            raise ClassroomError(
                f"Unix user(s) {taken} already exist: the classroom only uses users it creates "
                "(and removes them again); choose another prefix or run `make classroom-down`"
            )
        for g in self.groups:
            if _exists_group(g):
                raise ClassroomError(
                    f"the group {g} already exists: another classroom runs here; `make classroom-down` first"
                )
        if self.state_file.exists():
            raise ClassroomError(f"a classroom is already set up at {self.root}: `make classroom-down` first")
        check_port_free(self.port)
        self.proxy = proxy_command()
        from autograde import assignments
        from autograde.deadlines import PolicyError, load_policy

        try:
            load_policy(REPO / "course.toml", known=assignments())
        except PolicyError as exc:
            raise ClassroomError(f"the course file is wrong, nothing was set up: {exc}") from None

    def setup(self):
        """Create everything; on failure remove what was created."""
        self.preflight()
        self.state = {
            "root": str(self.root),
            "prefix": str(self.prefix),
            "course": self.course,
            "instructor": self.instructor,
            "students": self.students,
            "port": self.port,
            "auth": self.auth,
            "lockout": self.lockout,
            "created_users": [],
            "created_groups": [],
            "prefix_created": False,
            "repo": str(REPO),
            "repo_mode": _mode(REPO),
            "owner_pid": os.getpid(),
        }
        self.save()
        try:
            self._make_private_repo()
            self._users()
            if self.auth == "pam":
                self._passwords()
            self._environment()
            self._course_folder()
            self._exchange()
            self._hub_state()
        except BaseException:
            log("set-up failed: removing what it created")
            self.teardown()
            raise
        return self

    def _make_private_repo(self):
        if self.state["repo_mode"] & 0o077:
            os.chmod(REPO, 0o700)
            log(
                f"made the repository {REPO} private (mode {self.state['repo_mode']:04o} -> 0700): students get a "
                "shell and must not read solutions/ or .git; `make classroom-down` restores the mode"
            )
        git = REPO / ".git"
        if git.is_file():  # a git worktree: its objects live elsewhere
            common = Path(git.read_text().split(":", 1)[1].strip()).parent.parent
            if _mode(common) & 0o005:
                log(
                    f"WARNING: this is a git worktree; its object store {common} (solutions in history) is "
                    "readable by other users: run the classroom from a clone, or `chmod o-rx` that folder"
                )

    def _users(self):
        for g in self.groups:
            _run(["groupadd", g])
            self.state["created_groups"].append(g)
            self.save()
        nbgrader_group, formgrade_group = self.groups
        for name in [self.instructor] + self.students:
            groups = nbgrader_group + ("," + formgrade_group if name == self.instructor else "")
            # home 0700: a student's fetched notebooks and nbgrader cache are private
            _run(["useradd", "--create-home", "--shell", "/bin/bash", "-K", "HOME_MODE=0700", "--groups", groups, name])
            self.state["created_users"].append(name)
            self.save()
        log(
            f"created Unix users {self.instructor} (instructor; groups {nbgrader_group}, {formgrade_group}) and "
            f"{len(self.students)} students ({', '.join(self.students[:3])}{', ...' if len(self.students) > 3 else ''};"
            f" group {nbgrader_group})"
        )

    # ------------------------------------------------------------------ credentials
    def _passwords(self):
        """A random password of its own for every classroom user (the hub checks it through PAM), set with
        chpasswd and written once to ROOT/credentials.csv (root only, 0600): the only copy in clear."""
        names = [self.instructor] + self.students
        passwords = {name: new_password() for name in names}
        self._set_passwords(passwords)
        self._write_credentials(passwords)
        self.state["credentials_file"] = str(self.credentials_file)
        self.save()
        log(
            f"gave each of the {len(names)} users a password of their own: {self.credentials_file} "
            "(root only, mode 0600); hand each learner their own line"
        )

    def _set_passwords(self, passwords):
        _run(["chpasswd"], input="".join(f"{n}:{p}\n" for n, p in passwords.items()))

    def _write_credentials(self, passwords):
        rows = ["user,role,password"] + [
            f"{n},{'instructor' if n == self.instructor else 'student'},{p}" for n, p in passwords.items()
        ]
        _write_private(self.credentials_file, "\n".join(rows) + "\n")

    def credentials(self):
        """{user: password} from ROOT/credentials.csv (root only)."""
        if self.auth != "pam":
            raise ClassroomError(f"this classroom uses one shared password (--auth {self.auth}): no credentials file")
        import csv

        with open(self.credentials_file, newline="") as fh:
            return {row["user"]: row["password"] for row in csv.DictReader(fh)}

    def credentials_table(self):
        creds = self.credentials()
        width = max(map(len, creds))
        lines = [f"{'user':<{width}}  role        password", f"{'-' * width}  ----------  {'-' * 19}"]
        lines += [
            f"{n:<{width}}  {'instructor' if n == self.instructor else 'student':<10}  {p}" for n, p in creds.items()
        ]
        return "\n".join(lines)

    def reset_password(self, user):
        """A new password for one classroom user (a learner who lost theirs); returns it."""
        creds = self.credentials()
        if user not in creds:
            raise ClassroomError(
                f"{user!r} is not a user of this classroom ({self.instructor}, {', '.join(self.students[:3])}, ...)"
            )
        creds[user] = new_password()
        self._set_passwords({user: creds[user]})
        self._write_credentials(creds)
        return creds[user]

    def _environment(self):
        """PREFIX/python: a copy of the course's interpreter (the one its .venv was made from) that every
        user can run; PREFIX/venv: a venv on it holding the .venv's packages (hard links where the file
        system allows); PREFIX/course-lib: specdec/ and data/ for the learners' kernels, and the classroom's
        exchange classes (classroom/exchange.py, written again on every `up`)."""
        venv = self.prefix / "venv"
        if self.python.exists() and (self.prefix / ".complete").exists():
            log(f"reusing the classroom environment {self.prefix}")
        else:
            if self.prefix.exists():
                raise ClassroomError(
                    f"{self.prefix} exists but is not a complete classroom environment: "
                    f"remove it (rm -r {self.prefix}) and run again"
                )
            src = Path(sys.prefix)
            if src == Path(sys.base_prefix):
                raise ClassroomError(f"run the classroom with the course's .venv python ({REPO / '.venv/bin/python'})")
            t0 = time.monotonic()
            self.state["prefix_created"] = True
            self.save()
            self.prefix.mkdir(parents=True)
            os.chmod(self.prefix, 0o755)
            base = copy_interpreter(Path(sys.base_prefix), self.prefix / "python")
            _run([str(base), "-m", "venv", "--without-pip", str(venv)])
            for sub in (f"lib/{PY}/site-packages", "share", "etc"):
                if (src / sub).exists():
                    (venv / sub).mkdir(parents=True, exist_ok=True)
                    _copy_tree(src / sub, venv / sub)
            # console scripts (jupyter, nbgrader, alembic: nbgrader runs it by name) with this venv's python
            for script in (src / "bin").iterdir():
                if script.is_symlink() or not script.is_file() or (venv / "bin" / script.name).exists():
                    continue
                text = script.read_bytes()
                first, _, rest = text.partition(b"\n")
                if first.startswith(b"#!" + str(src / "bin").encode()):
                    (venv / "bin" / script.name).write_bytes(b"#!" + str(self.python).encode() + b"\n" + rest)
                    os.chmod(venv / "bin" / script.name, 0o755)
            site = venv / "lib" / PY / "site-packages"
            for p in list(site.glob("__editable__*specdec*")) + list(site.glob("specdec-*.dist-info")):
                shutil.rmtree(p) if p.is_dir() else p.unlink()
            lib = self.prefix / "course-lib"
            lib.mkdir()
            for name in ("specdec", "data"):
                shutil.copytree(REPO / name, lib / name, ignore=shutil.ignore_patterns("__pycache__"))
            (site / "specdec_classroom.pth").write_text(str(lib) + "\n")
            _run(["chmod", "-R", "a+rX", str(self.prefix)])
            # proof that an unprivileged user (nobody, 65534) can run it
            done = subprocess.run(
                [str(self.python), "-c", "import torch, nbgrader, jupyterhub, specdec"],
                cwd="/",
                user=65534,
                group=65534,
                extra_groups=[],
                capture_output=True,
                text=True,
                env={"PATH": "/usr/bin:/bin", "HOME": "/nonexistent"},
            )
            if done.returncode != 0:
                raise ClassroomError(
                    f"the classroom environment {self.prefix} does not work for other users:\n" + done.stderr[-2000:]
                )
            (self.prefix / ".complete").write_text("built from " + str(src) + "\n")
            log(
                f"built the classroom environment {self.prefix} (a copy of {sys.base_prefix}'s interpreter "
                f"and the course's .venv packages) in {time.monotonic() - t0:.0f} s"
            )
        # the exchange classes the config below names, from this checkout also when the environment is reused
        _write_new(
            self.prefix / "course-lib" / f"{EXCHANGE_MODULE}.py", (REPO / "classroom" / "exchange.py").read_text()
        )
        # every server and nbgrader command of this environment finds the exchange through this file
        _write_new(venv / "etc" / "jupyter" / "nbgrader_config.py", self.nbgrader_config())
        # JupyterLab for a workshop: no news or update pop-ups (every learner would be asked)
        _write_new(
            venv / "share" / "jupyter" / "lab" / "settings" / "overrides.json",
            json.dumps(
                {"@jupyterlab/apputils-extension:notification": {"fetchNews": "false", "checkForUpdates": False}}
            ),
        )

    def nbgrader_config(self):
        """The classroom environment's nbgrader_config.py (PREFIX/venv/etc/jupyter/): the exchange and its classes."""
        return (
            "# written by `python -m classroom up`: the classroom's nbgrader exchange\n"
            "c = get_config()\n"
            f"c.CourseDirectory.course_id = {self.course!r}\n"
            f"c.Exchange.root = {str(self.exchange)!r}\n"
            "c.Execute.timeout = 120  # as the course's nbgrader_config.py (Validate runs the whole notebook)\n"
            "# submissions readable by the course's graders only (nbgrader's default: 0777 folders, 0644 files)\n"
            f"c.ExchangeFactory.submit = '{EXCHANGE_MODULE}.PrivateSubmit'\n"
            "# collect refuses (moves to the course folder's forged/) what a learner put in inbound/ "
            "in another's name\n"
            f"c.ExchangeFactory.collect = '{EXCHANGE_MODULE}.CheckedCollect'\n"
            "# release (formgrader's Release button, `nbgrader release_assignment`) refuses a notebook that\n"
            "# restates answers of an assignment still open in the course folder's course.toml (docs/classroom.md,\n"
            "# Release order); OrderedRelease.force_early = True releases it anyway\n"
            f"c.ExchangeFactory.release_assignment = '{EXCHANGE_MODULE}.OrderedRelease'\n"
        )

    def _course_folder(self):
        """ROOT/course: the instructor's nbgrader course (solutions, gradebook): instructor and group
        formgrade-<course> only."""
        dest = self.course_dir
        dest.mkdir(parents=True)
        for name in COURSE_FILES:
            src = REPO / name
            if src.is_dir():
                shutil.copytree(
                    src, dest / name, ignore=shutil.ignore_patterns("__pycache__", ".ipynb_checkpoints", "work")
                )
            else:
                shutil.copy(src, dest / name)
        with open(dest / "nbgrader_config.py", "a") as fh:
            fh.write(
                "\n# --- the classroom (written by `python -m classroom up`) ---\n"
                "# `nbgrader collect` (formgrader's Collect) puts submissions into collected/;\n"
                "# `python -m autograde class ASSIGNMENT collected --work autograde/work` grades them into\n"
                "# autograde/work/gradebook.db, which formgrader shows, and writes the feedback it releases.\n"
                "c.CourseDirectory.submitted_directory = 'collected'\n"
            )
        (dest / "collected").mkdir()
        (dest / "autograde" / "work").mkdir(parents=True, exist_ok=True)
        self.set_deadlines(chown=False)
        uid = pwd.getpwnam(self.instructor).pw_uid
        gid = grp.getgrnam(self.groups[1]).gr_gid
        for dirpath, dirnames, filenames in os.walk(dest):
            os.chown(dirpath, uid, gid)
            os.chmod(dirpath, 0o2770)
            for f in filenames:
                os.chown(os.path.join(dirpath, f), uid, gid)
                os.chmod(os.path.join(dirpath, f), 0o660)
        log(
            f"copied the course into {dest} (owner {self.instructor}, group {self.groups[1]}, mode 2770: "
            "solutions and gradebook invisible to students)"
        )

    def set_deadlines(self, chown=True):
        """Write the due dates of the course folder's course.toml into the instructor's gradebook
        (course/autograde/work/gradebook.db), so that formgrader and `nbgrader collect --before-duedate` show
        and use them; `python -m autograde class` sets them again whenever it grades. Returns {name: UTC}."""
        from autograde import COURSE_ID as course_id, assignments, put_tools_on_path
        from autograde.deadlines import PolicyError, load_policy, write_duedates

        try:
            policy = load_policy(self.course_dir / "course.toml", known=assignments())
        except PolicyError as exc:
            raise ClassroomError(str(exc)) from None
        names = [n for n in assignments() if policy.rule(n).due is not None]
        db = self.course_dir / "autograde" / "work" / "gradebook.db"
        if not names:
            return {}
        put_tools_on_path()  # nbgrader runs alembic by name
        created = not db.exists()
        written = write_duedates(f"sqlite:///{db}", course_id, policy, names)
        if chown and created:
            os.chown(db, pwd.getpwnam(self.instructor).pw_uid, grp.getgrnam(self.groups[1]).gr_gid)
            os.chmod(db, 0o660)
        log(
            "due dates in the instructor's gradebook: "
            + ", ".join(f"{n} {d:%Y-%m-%d %H:%M} UTC" for n, d in written.items())
        )
        return written

    def _exchange(self):
        uid = pwd.getpwnam(self.instructor).pw_uid
        gid = grp.getgrnam(self.groups[1]).gr_gid
        for rel, (mode, owner) in EXCHANGE_MODES.items():
            path = self.exchange / rel.format(course=self.course)
            path.mkdir(parents=True, exist_ok=True)
            if owner == "instructor":
                os.chown(path, uid, gid)
            os.chmod(path, mode)
        check_exchange(self.exchange, self.course, self.instructor)
        log(
            f"created the nbgrader exchange {self.exchange} (root 1777; {self.course}/inbound 2773 group "
            f"{self.groups[1]}: students submit but cannot list)"
        )

    def _hub_state(self):
        self.hub_dir.mkdir(mode=0o700, exist_ok=True)
        os.chmod(self.hub_dir, 0o700)
        if self.auth == "shared":  # a closed room only: one password for every learner
            self.state["password"] = secrets.token_urlsafe(9)
        self.state.update(
            admin_token=secrets.token_hex(32),
            proxy_token=secrets.token_hex(32),
            hub_port=free_port(),
            proxy_api_port=free_port(),
            service_port=free_port(),
            proxy_command=self.proxy[0],
            proxy_name=self.proxy[1],
            python=str(self.python),
            hub_dir=str(self.hub_dir),
            exchange=str(self.exchange),
            course_dir=str(self.course_dir),
        )
        self.save()

    # ------------------------------------------------------------------ tear-down
    def teardown(self):
        """Remove what setup created (recorded in state.json)."""
        self.stop()
        for name in reversed(self.state.get("created_users", [])):
            if _exists_user(name):
                _run(["userdel", "--remove", name]) if Path(pwd.getpwnam(name).pw_dir).exists() else _run(
                    ["userdel", name]
                )
        for g in self.state.get("created_groups", []):
            if _exists_group(g):
                _run(["groupdel", g])
        if self.state.get("prefix_created"):
            shutil.rmtree(self.prefix, ignore_errors=True)
        mode = self.state.get("repo_mode")
        if mode is not None and Path(self.state.get("repo", REPO)).exists():
            os.chmod(self.state.get("repo", REPO), mode)
        shutil.rmtree(self.root, ignore_errors=True)
        users = self.state.get("created_users", [])
        log(
            f"removed users {', '.join(users) or '(none)'}, "
            f"groups {', '.join(self.state.get('created_groups', [])) or '(none)'}, "
            f"{self.root}" + (f", {self.prefix}" if self.state.get("prefix_created") else "")
        )
