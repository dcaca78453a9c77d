"""nbgrader's submit, collect and release for the classroom (installed into the classroom environment as
specdec_classroom_exchange.py; nbgrader_config.py there sets c.ExchangeFactory.submit, .collect and
.release_assignment to them).

nbgrader 0.9.6 leaves each submission in the exchange's inbound/ with mode 0777 (folder) and 0644
(files), "hidden from other users by the timestamp": any student who learns the path can read,
change or delete another student's work. Here the submission folder is 0770 and its files 0640, and
their group is the course's graders' group (formgrade-<course>), which inbound/ (mode 2773, set-gid)
hands down: the instructor can still collect and delete, other students cannot open anything.

Submitting in another learner's name: inbound/ must be writable by every learner, so a learner can make a
folder there named for anyone (`nbgrader submit --student B`, or plain mkdir), and nbgrader's collect only warns
("cheating attempt?") before collecting it as B's. A folder could also hold symbolic links, which collect
follows as the instructor (into solutions/). PrivateSubmit refuses a student id other than the Unix user's
own (a courtesy: a learner runs it in their own process); CheckedCollect is the check that holds: it runs as
the instructor and moves every inbound/ entry that is not a plain folder of plain files owned by the learner it
names into the course folder's forged/, with an error naming who made it, before collecting.

Release order: a later notebook restates earlier assignments' graded answers in its locked given cells (their
`given_from` metadata). OrderedRelease, behind formgrader's Release button and `nbgrader release_assignment`,
refuses such a notebook while an assignment it restates still accepts submissions (due date plus grace in the
course folder's course.toml), as `python -m autograde release` does; OrderedRelease.force_early releases it anyway.
"""

import grp
import os
import pwd
import shutil
import stat
import tempfile
from datetime import datetime, timezone
from pathlib import Path

from nbgrader.exchange.default.collect import ExchangeCollect
from nbgrader.exchange.default.release_assignment import ExchangeReleaseAssignment
from nbgrader.exchange.default.submit import ExchangeSubmit
from nbgrader.utils import get_osusername
from traitlets import Bool


class PrivateSubmit(ExchangeSubmit):
    def init_dest(self):
        me = get_osusername()
        if self.coursedir.student_id not in ("*", me):
            self.fail(f"you are {me}: you cannot submit as {self.coursedir.student_id}")
        super().init_dest()

    def do_copy(self, src, dest, log=None):
        inbound = os.path.join(self.root, self.coursedir.course_id, "inbound")
        if os.path.dirname(os.path.abspath(dest)) != os.path.abspath(inbound):
            return super().do_copy(src, dest, log)
        # nbgrader's copy (its size limit and ignore patterns) into a private temporary folder, then
        # folders made and files written in inbound/ without copying their modes: copytree's copystat
        # would clear the set-gid bit, and the files written next (timestamp.txt,
        # submission_secret.txt) would get the student's group, which the instructor cannot read
        with tempfile.TemporaryDirectory() as tmp:
            staged = os.path.join(tmp, "submission")
            super().do_copy(src, staged, log)
            for dirpath, dirnames, filenames in os.walk(staged):
                target = os.path.normpath(os.path.join(dest, os.path.relpath(dirpath, staged)))
                os.mkdir(target)
                for f in filenames:
                    shutil.copyfile(os.path.join(dirpath, f), os.path.join(target, f))

    def copy_files(self):
        super().copy_files()
        dest = os.path.join(self.inbound_path, self.assignment_filename)
        group = os.stat(self.inbound_path).st_gid
        for dirpath, dirnames, filenames in os.walk(dest):
            for f in filenames:
                os.chmod(os.path.join(dirpath, f), 0o640)
        for dirpath, dirnames, filenames in list(os.walk(dest))[::-1]:
            os.chmod(dirpath, 0o770)
        if os.stat(dest).st_gid != group:
            name = grp.getgrgid(group).gr_name
            self.fail(
                f"the submission {dest} did not get the graders' group {name}: inbound/ must be set-gid "
                f"(mode 2773) so that the instructor can collect it"
            )


def forgery(path):
    """Why the inbound/ entry `path` is not its named learner's own submission, or None: every entry in it must be
    a plain folder or file (no symbolic link, device or fifo) owned by the user whose name it starts with."""
    name = os.path.basename(path).rsplit("+", 3)[0]
    try:
        uid = pwd.getpwnam(name).pw_uid
    except KeyError:
        return f"it names {name!r}, who has no Unix account"
    errors = []
    entries = [path]
    if stat.S_ISDIR(os.lstat(path).st_mode):
        for dirpath, dirnames, filenames in os.walk(path, onerror=errors.append):
            entries += [os.path.join(dirpath, n) for n in dirnames + filenames]
    if errors:
        return f"the instructor cannot read it ({errors[0]})"
    for entry in entries:
        st = os.lstat(entry)
        if not (stat.S_ISDIR(st.st_mode) or stat.S_ISREG(st.st_mode)) or (
            entry == path and not stat.S_ISDIR(st.st_mode)
        ):
            return f"{entry} is not a plain folder or file (a symbolic link?)"
        if st.st_uid != uid:
            try:
                maker = pwd.getpwuid(st.st_uid).pw_name
            except KeyError:
                maker = f"uid {st.st_uid}"
            return f"it names {name} but {maker} made {entry}"
    return None


class CheckedCollect(ExchangeCollect):
    def init_src(self):
        left = self.refuse_forged()
        super().init_src()
        # an entry that could not be moved out (its maker kept write permission on it to themselves) is not
        # collected, nor is anything else of the learner it names this time
        self.src_records = [r for r in self.src_records if r["filename"] not in left]

    def refuse_forged(self):
        """Move every forged inbound/ entry into the course folder's forged/; return the names of those that
        could not be moved."""
        inbound = os.path.join(self.root, self.coursedir.course_id, "inbound")
        left = set()
        if not (os.path.isdir(inbound) and os.access(inbound, os.R_OK | os.X_OK)):
            return left
        quarantine = os.path.join(os.path.abspath(self.coursedir.root), "forged")
        for entry in sorted(os.listdir(inbound)):
            path = os.path.join(inbound, entry)
            try:
                why = forgery(path)
            except OSError as exc:  # changed while being read
                why = f"it could not be examined ({exc})"
            if why is None:
                continue
            os.makedirs(quarantine, exist_ok=True)
            try:
                os.rename(path, os.path.join(quarantine, entry))
                self.log.error(f"refused the submission {path}: {why}; moved it to {quarantine}/")
            except OSError as exc:
                left.add(entry)
                self.log.error(
                    f"refused the submission {path}: {why}; it stays in inbound/ ({exc.strerror}): "
                    f"remove it as root (sudo rm -r '{path}') and collect again"
                )
        return left


class OrderedRelease(ExchangeReleaseAssignment):
    """nbgrader's release, refused (ExchangeError, logged) before anything reaches the exchange while an assignment
    whose answers the notebook restates still accepts submissions. Runs as the instructor, in the course folder
    (CourseDirectory.root: its course.toml and the course's autograde package, PYTHONPATH)."""

    force_early = Bool(
        False, help="release a notebook even while an assignment it restates is open (a warning names it)"
    ).tag(config=True)

    def init_src(self):
        super().init_src()
        self.check_order()

    def check_order(self):
        """Fail naming what the released notebooks restate and when that closes; with force_early, warn."""
        name, root = self.coursedir.assignment_id, os.path.abspath(self.coursedir.root)
        try:
            import nbformat

            from autograde.deadlines import PolicyError, describe_early, early_releases, load_policy
        except ImportError as exc:
            self.fail(
                f"{name} not released: the release order cannot be checked without the course's autograde "
                f"package ({exc}); run nbgrader with PYTHONPATH={root}"
            )
        source = Path(self.coursedir.format_path(self.coursedir.source_directory, ".", name))
        known = (
            sorted(p.name for p in source.parent.iterdir() if any(p.glob("*.ipynb")))
            if source.parent.is_dir()
            else None
        )
        try:
            policy = load_policy(Path(root) / "course.toml", known=known)
        except PolicyError as exc:
            self.fail(f"{name} not released: {exc}")
        cells = []  # the given cells of what goes out, and of its source (should a release drop metadata)
        for path in sorted(Path(self.src_path).glob("*.ipynb")) + sorted(source.glob("*.ipynb")):
            try:
                cells += nbformat.read(str(path), as_version=4).cells
            except Exception as exc:  # nbformat raises several kinds for a broken file
                self.fail(f"{name} not released: {path} is not a readable notebook ({exc})")
        early = early_releases(
            [name], policy, {name: nbformat.from_dict({"cells": cells})}, now=datetime.now(timezone.utc)
        )
        if early and not self.force_early:
            self.fail(
                f"not released: {describe_early(early, policy)}. Learners would get those answers before the "
                f"deadline: release it after that, or force it with `nbgrader release_assignment {name} "
                f"--OrderedRelease.force_early=True` (formgrader's Release button: "
                f"c.OrderedRelease.force_early = True in {root}/nbgrader_config.py, then False again)"
            )
        for _, origin, closes in early:
            self.log.warning(
                f"releasing {name} while {origin} accepts submissions until {closes:%Y-%m-%d %H:%M} UTC "
                f"(OrderedRelease.force_early)"
            )
