"""nbgrader set-up of the course: solutions/ is the source, notebooks/ the release.

Everything nbgrader writes while grading (submissions, autograded copies, feedback, the gradebook)
lives under autograde/work/, which git ignores.
"""

import os

c = get_config()  # noqa: F821 (provided by nbgrader)

here = os.path.dirname(os.path.abspath(__file__))
work = os.path.join(here, "autograde", "work")

c.CourseDirectory.root = here
c.CourseDirectory.course_id = "speculative-decoding"
c.CourseDirectory.source_directory = "solutions"
c.CourseDirectory.release_directory = "notebooks"
c.CourseDirectory.submitted_directory = os.path.join("autograde", "work", "submitted")
c.CourseDirectory.autograded_directory = os.path.join("autograde", "work", "autograded")
c.CourseDirectory.feedback_directory = os.path.join("autograde", "work", "feedback")
c.CourseDirectory.db_url = "sqlite:///" + os.path.join(work, "gradebook.db")

# measured: without this, a test cell the student deleted is silently ignored
c.OverwriteCells.add_missing_cells = True

# measured: feedback HTML shows hidden tests unless they are cleared first
from nbconvert.preprocessors import CSSHTMLHeaderPreprocessor  # noqa: E402
from nbgrader.preprocessors import ClearHiddenTests, GetGrades  # noqa: E402

c.GenerateFeedback.preprocessors = [ClearHiddenTests, GetGrades, CSSHTMLHeaderPreprocessor]

# a cell may run for at most this many seconds (the longest measurement cell takes well under it)
c.Execute.timeout = 120

# every grading path runs the judges: plain `nbgrader autograde` and formgrader's Autograde button grade through the
# course's executor (the sandbox, the guard, and the judges outside the student's process), as `python -m autograde
# class` does. A judged cell's hidden block is one comment line: graded by nbgrader's own Execute, its visible part
# alone would decide it (measured: a submission of 01 whose functions return the visible examples' constants, 8 of 9)
import sys  # noqa: E402

sys.path.insert(0, here)  # the course's own package, wherever nbgrader runs from

from nbgrader.converters import Autograde  # noqa: E402
from nbgrader.preprocessors import Execute  # noqa: E402

from autograde.executor import SandboxedExecute  # noqa: E402

c.Autograde.autograde_preprocessors = [
    SandboxedExecute if p is Execute else p for p in Autograde.class_traits()["autograde_preprocessors"].default()
]
