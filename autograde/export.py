"""`nbgrader export` plugins that write a gradebook CSV an LMS imports, from the course's gradebook.

    nbgrader export --exporter=autograde.export.CanvasExport --to canvas.csv
    nbgrader export --exporter=autograde.export.MoodleExport --to moodle.csv

One row per student (by student id), one column per assignment of the gradebook (or those given with --assignment), the
score after nbgrader's late_submission_penalty (what `python -m autograde class` writes as final_score).

Canvas (Grades > Import): the columns Student, ID, SIS User ID, SIS Login ID, Section, then one column per
assignment named after it. Canvas reads "NAME (NUMBER)" as its own assignment id, so the points are not
put in the header: as in Canvas's own export, the first row under the header is "Points Possible" with
each assignment's maximum. SIS User ID is the student's lms_user_id in the gradebook when set, else the
nbgrader student id (the hub's user name); SIS Login ID is the student id; ID (Canvas's own number) and
Section are left empty for Canvas to match by SIS id.

Moodle (Grades > Import > CSV file): the columns First name, Last name, Username, ID number, Email
address, then one column per assignment named "NAME (out of POINTS)"; map Username (or ID number) to the
user and each assignment column to a grade item on Moodle's import page.

A cell is empty, never 0, where the student has no submission of that assignment or where a grade waits
for an instructor (needs manual grading: the grader could not grade it); the export logs each one.
"""

import csv

from nbgrader.api import MissingEntry
from nbgrader.plugins import ExportPlugin


def _grades(plugin, gradebook):
    """(assignments [(name, max_score)], rows [(student, {name: score or None})]) honouring --assignment and
    --student; logs every empty cell with the reason."""
    wanted_a = [str(a) for a in plugin.assignment]
    wanted_s = [str(s) for s in plugin.student]
    found = {a.name: a for a in gradebook.assignments}
    unknown = sorted(set(wanted_a) - set(found))
    if unknown:
        raise ValueError(
            f"nbgrader export: no assignment {', '.join(unknown)} in the gradebook "
            f"(it has {', '.join(sorted(found)) or 'none'})"
        )
    assignments = [a for a in gradebook.assignments if not wanted_a or a.name in wanted_a]
    rows = []
    for student in sorted(gradebook.students, key=lambda s: s.id):
        if wanted_s and student.id not in wanted_s:
            continue
        scores = {}
        for a in assignments:
            try:
                sub = gradebook.find_submission(a.name, student.id)
            except MissingEntry:
                plugin.log.info("%s: no submission of %s (empty cell)", student.id, a.name)
                scores[a.name] = None
                continue
            if sub.needs_manual_grade:
                plugin.log.warning("%s: %s waits for manual grading (empty cell, not 0)", student.id, a.name)
                scores[a.name] = None
                continue
            scores[a.name] = max(0.0, sub.score - (sub.late_submission_penalty or 0.0))
        rows.append((student, scores))
    return [(a.name, a.max_score) for a in assignments], rows


def _number(x):
    return "" if x is None else f"{x:g}"


class _LmsExport(ExportPlugin):
    default_to = "grades.csv"

    def header(self, assignments):
        raise NotImplementedError

    def first_rows(self, assignments):
        return []

    def row(self, student, scores, assignments):
        raise NotImplementedError

    def export(self, gradebook):
        assignments, rows = _grades(self, gradebook)
        dest = self.to or self.default_to
        self.log.info("Exporting %d students x %d assignments to %s", len(rows), len(assignments), dest)
        with open(dest, "w", newline="") as fh:
            w = csv.writer(fh)
            w.writerow(self.header(assignments))
            w.writerows(self.first_rows(assignments))
            for student, scores in rows:
                w.writerow(self.row(student, scores, assignments))


class CanvasExport(_LmsExport):
    """Canvas's gradebook import: Student, ID, SIS User ID, SIS Login ID, Section, one column per assignment."""

    default_to = "canvas_grades.csv"

    def header(self, assignments):
        return ["Student", "ID", "SIS User ID", "SIS Login ID", "Section"] + [name for name, _ in assignments]

    def first_rows(self, assignments):
        return [["Points Possible", "", "", "", ""] + [_number(points) for _, points in assignments]]

    def row(self, student, scores, assignments):
        name = ", ".join(p for p in (student.last_name, student.first_name) if p) or student.id
        return [name, "", student.lms_user_id or student.id, student.id, ""] + [
            _number(scores[a]) for a, _ in assignments
        ]


class MoodleExport(_LmsExport):
    """Moodle's CSV grade import: First name, Last name, Username, ID number, Email address, one column per
    assignment named "NAME (out of POINTS)"."""

    default_to = "moodle_grades.csv"

    def header(self, assignments):
        return ["First name", "Last name", "Username", "ID number", "Email address"] + [
            f"{name} (out of {_number(points)})" for name, points in assignments
        ]

    def row(self, student, scores, assignments):
        return [
            student.first_name or "",
            student.last_name or "",
            student.id,
            student.lms_user_id or "",
            student.email or "",
        ] + [_number(scores[a]) for a, _ in assignments]
