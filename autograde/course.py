"""An nbgrader course directory that grades with the sandboxed executor.

One `Course` holds an nbgrader course directory (gradebook, submitted/, autograded/, feedback/) under a
work folder, with nbgrader's own converters driven in this process.  `Course.prepare(assignment)` stores
the assignment's source cells (hidden tests included) and its due date (course.toml) in the gradebook;
`Course.autograde(student)` runs nbgrader's Autograde converter, whose Execute step is replaced by
autograde.executor.SandboxedExecute;
`Course.feedback(student)` runs GenerateFeedback with autograde.feedback.SanitizeFeedback first.
"""

import logging
from io import StringIO
from pathlib import Path

from nbgrader.preprocessors import Execute
from traitlets.config import Config
from traitlets.config.loader import PyFileConfigLoader

from autograde import REPO, WORK, put_tools_on_path
from autograde.assignment import is_measuring_cell, sha256
from autograde.executor import MEMORY_BYTES, NOTEBOOK_SECONDS, SandboxedExecute
from autograde.records import read_run_record, write_run_record


def load_course_config():
    """The course's nbgrader_config.py as a traitlets Config."""
    return PyFileConfigLoader("nbgrader_config.py", path=str(REPO)).load_config()


class Course:
    """An nbgrader course directory rooted at the repository, with its working state under `work`."""

    def __init__(
        self,
        work=None,
        *,
        sandboxed=True,
        cell_timeout=None,
        notebook_timeout=NOTEBOOK_SECONDS,
        memory_bytes=MEMORY_BYTES,
        quick=True,
        guard=True,
        extra_config=None,
        course_file=None,
        threads=0,
        measure=False,
    ):
        put_tools_on_path()
        from autograde.deadlines import COURSE_FILE, CoursePenalty

        self.course_file = Path(course_file) if course_file is not None else COURSE_FILE
        self.config = load_course_config()
        cfg = self.config
        if work is not None:
            work = Path(work).resolve()
            work.mkdir(parents=True, exist_ok=True)
            cfg.CourseDirectory.submitted_directory = str(work / "submitted")
            cfg.CourseDirectory.autograded_directory = str(work / "autograded")
            cfg.CourseDirectory.feedback_directory = str(work / "feedback")
            cfg.CourseDirectory.db_url = f"sqlite:///{work / 'gradebook.db'}"
        else:
            work = WORK
            work.mkdir(parents=True, exist_ok=True)
        self.work = work
        self.records = work / "runs"  # one JSON run record per student, assignment and notebook
        cfg.CourseDirectory.root = str(REPO)
        cfg.CourseDirectory.release_directory = str(work / "release")  # never notebooks/ while grading
        execute = cfg.SandboxedExecute
        execute.use_sandbox = sandboxed
        execute.notebook_timeout = int(notebook_timeout)
        execute.memory_bytes = int(memory_bytes)
        execute.quick = quick
        execute.skip_measuring = not measure
        execute.guard = guard
        execute.threads = int(threads)  # 0: one per core (autograde.executor)
        execute.record_dir = str(self.records)
        if cell_timeout is not None:
            cfg.Execute.timeout = int(cell_timeout)
        cfg.Autograde.autograde_preprocessors = [
            SandboxedExecute if p is Execute else p for p in self._default_autograde_preprocessors()
        ]
        from autograde.feedback import SanitizeFeedback

        feedback_pps = list(cfg.GenerateFeedback.get("preprocessors", []))
        cfg.GenerateFeedback.preprocessors = [SanitizeFeedback] + [p for p in feedback_pps if p is not SanitizeFeedback]
        cfg.SanitizeFeedback.record_dir = str(self.records)
        cfg.HTMLExporter.template_name = "feedback"
        # nbgrader's AssignLatePenalties step takes the course file's late policy (autograde/deadlines.py)
        cfg.AssignLatePenalties.plugin_class = CoursePenalty
        cfg.CoursePenalty.course_file = str(self.course_file)
        if extra_config:
            cfg.merge(Config(extra_config))
        self.log = logging.getLogger(f"autograde.course.{id(self)}")
        self.log.propagate = False
        self.log.setLevel(logging.INFO)

    @staticmethod
    def _default_autograde_preprocessors():
        from nbgrader.converters import Autograde

        return list(Autograde.class_traits()["autograde_preprocessors"].default())

    # nbgrader paths
    @property
    def db_url(self):
        return self.config.CourseDirectory.db_url

    @property
    def course_id(self):
        return self.config.CourseDirectory.get("course_id", "")

    def coursedir(self, assignment, student="."):
        from nbgrader.coursedir import CourseDirectory

        cd = CourseDirectory(config=self.config)
        cd.assignment_id = assignment
        cd.student_id = student
        return cd

    def path(self, step, student, assignment):
        return Path(
            self.coursedir(assignment).format_path(
                getattr(self.coursedir(assignment), f"{step}_directory"), student, assignment
            )
        )

    def _run(self, converter_class, assignment, student=".", **attrs):
        """Run one nbgrader converter in this process; return (ok, log text)."""
        from nbgrader.converters.base import NbGraderException

        buf = StringIO()
        handler = logging.StreamHandler(buf)
        handler.setFormatter(logging.Formatter("[%(levelname)s] %(message)s"))
        app = converter_class(coursedir=self.coursedir(assignment, student), config=self.config)
        for k, v in attrs.items():
            setattr(app, k, v)
        app.log.addHandler(handler)
        old_propagate = app.log.propagate
        app.log.propagate = False
        try:
            app.start()
            ok = True
        except NbGraderException:
            ok = False
        except Exception:  # noqa: BLE001 (report, keep grading the others)
            import traceback

            buf.write(traceback.format_exc())
            ok = False
        finally:
            app.log.removeHandler(handler)
            app.log.propagate = old_propagate
        return ok, buf.getvalue()

    def prepare(self, assignment):
        """Store the assignment's source (hidden tests included) in the gradebook; release into work/."""
        from nbgrader.converters import GenerateAssignment

        ok, log = self._run(GenerateAssignment, assignment, ".", force=True, create_assignment=True)
        if not ok:
            raise RuntimeError(f"nbgrader generate_assignment {assignment} failed:\n{log}")
        from autograde.deadlines import load_policy, write_duedates

        write_duedates(self.db_url, self.course_id, load_policy(self.course_file), [assignment])
        return self.work / "release" / assignment

    def autograde(self, assignment, student):
        """Run nbgrader's autograde for one student; return (ok, log text)."""
        from nbgrader.converters import Autograde

        return self._run(Autograde, assignment, student, force=True, create_student=True)

    def know_course_cells(self, released):
        """Tell the kernel's runner which code cells are the course's own (as released, unchanged)."""
        self.config.SandboxedExecute.course_cells = sorted(
            {sha256(c.source) for c in released.cells if c.cell_type == "code"}
        )
        self.config.SandboxedExecute.measure_cells = sorted(
            {sha256(c.source) for c in released.cells if is_measuring_cell(c)}
        )

    def run_record(self, assignment, student, notebook):
        """The RunRecord the sandboxed kernel's run left (events, stop, seconds ...); RunRecord() if none."""
        return read_run_record(self.records, student, assignment, notebook)

    def save_run_record(self, record):
        write_run_record(self.records, record)

    def feedback(self, assignment, student):
        from nbgrader.converters import GenerateFeedback

        return self._run(GenerateFeedback, assignment, student, force=True)

    def gradebook(self):
        from nbgrader.api import Gradebook

        return Gradebook(self.db_url, self.course_id)
