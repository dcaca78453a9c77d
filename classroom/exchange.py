"""nbgrader's submit, with private submissions (installed into the classroom environment as
specdec_classroom_exchange.py; nbgrader_config.py there sets c.ExchangeFactory.submit to it).

nbgrader 0.9.6 leaves each submission in the exchange's inbound/ with mode 0777 (folder) and 0644
(files), "hidden from other users by the timestamp": any student who learns the path can read,
change or delete another student's work. Here the submission folder is 0770 and its files 0640, and
their group is the course's graders' group (formgrade-<course>), which inbound/ (mode 2773, set-gid)
hands down: the instructor can still collect and delete, other students cannot open anything.
"""
import grp
import os
import shutil
import tempfile

from nbgrader.exchange.default.submit import ExchangeSubmit


class PrivateSubmit(ExchangeSubmit):

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
            self.fail(f"the submission {dest} did not get the graders' group {name}: inbound/ must be set-gid "
                      f"(mode 2773) so that the instructor can collect it")
