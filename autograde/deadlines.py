"""Deadlines and the late policy, from one course file: course.toml at the repository root.

    [late_policy]                   # every assignment's, unless its own table says otherwise
    grace = "15m"                   # a submission up to this long after the due date is on time (s, m, h, d)
    penalty = "percent_per_day"     # "none", "zero" (a late submission scores 0) or "percent_per_day"
    percent_per_day = 10            # % of the raw score taken per day started after the due date ...
    max_percent = 50                # ... never more than this in all
    resubmission = "latest"         # which submission is graded: "latest", or "latest_on_time" (the latest
                                    # one inside the grace period, else the latest)

    [assignments.03_acceptance_math]
    due = 2026-12-09T17:00:00+01:00 # a TOML date-time with its offset, or "2026-12-09 17:00 Europe/Berlin"
    # grace, penalty, percent_per_day, max_percent, resubmission may be set here for this assignment alone

Read by `python -m autograde class` (lateness, penalty and the submission it grades), by Course.prepare
and `python -m autograde release` (the gradebook's assignment `duedate`), and by the classroom, which
writes the due dates into the instructor's gradebook so that formgrader and `nbgrader collect
--before-duedate` agree. nbgrader applies the penalty in the gradebook through CoursePenalty (its
AssignLatePenalties step calls it with the seconds late).

An assignment without a due date has no lateness ("no_deadline"). Lateness of a submission:
  on_time        at or before the due date
  in_grace       after the due date, inside the grace period: no penalty
  late           after the grace period: the penalty rule applies (days counted from the due date)
  no_timestamp   the assignment has a due date but the submission has no readable timestamp: no penalty is
                 applied, and the grader reports it (printed, exit code 1): never silently on time
  bad_timestamp  the timestamp lies in the future (more than FUTURE_SLACK after the grading run's clock)
"""

import csv
import math
from dataclasses import dataclass, replace
from datetime import date, datetime, timedelta, timezone
from pathlib import Path
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import tomllib
from nbgrader.plugins import LateSubmissionPlugin
from traitlets import Unicode

from autograde import REPO

COURSE_FILE = REPO / "course.toml"
PENALTIES = ("none", "zero", "percent_per_day")
RESUBMISSION_RULES = ("latest", "latest_on_time")
RULE_KEYS = ("grace", "penalty", "percent_per_day", "max_percent", "resubmission")
FUTURE_SLACK = timedelta(minutes=5)  # clocks of the submitting and the grading machine may differ this much
UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
NBGRADER_FORMAT = "%Y-%m-%d %H:%M:%S.%f UTC"  # nbgrader's timestamp.txt (Exchange.timestamp_format, in UTC)


class PolicyError(ValueError):
    """Bad input in the course file or a timestamps file; the message names the file and the field."""


@dataclass(frozen=True)
class Rule:
    """One assignment's deadline and late policy."""

    assignment: str
    due: datetime | None = None  # aware
    grace: timedelta = timedelta(0)
    penalty: str = "none"
    percent_per_day: float = 0.0
    max_percent: float = 100.0
    resubmission: str = "latest"

    def describe(self):
        if self.due is None:
            return f"{self.assignment}: no due date"
        pen = {
            "none": "no penalty",
            "zero": "a late submission scores 0",
            "percent_per_day": f"{self.percent_per_day:g}% of the raw score per day started, at most "
            f"{self.max_percent:g}%",
        }[self.penalty]
        return (
            f"{self.assignment}: due {self.due.isoformat()} (UTC {utc(self.due):%Y-%m-%d %H:%M}), grace "
            f"{_hours(self.grace)}, late: {pen}; resubmissions: {self.resubmission.replace('_', ' ')}"
        )


def _hours(delta):
    s = delta.total_seconds()
    return f"{s / 3600:g} h" if s >= 3600 else f"{s / 60:g} min" if s >= 60 else f"{s:g} s"


def utc(moment):
    return moment.astimezone(timezone.utc)


@dataclass(frozen=True)
class Policy:
    path: Path
    rules: dict  # {assignment: Rule}
    default: Rule

    def rule(self, assignment):
        return self.rules.get(assignment) or replace(self.default, assignment=assignment)


# ------------------------------------------------------------------------------------------ parsing
def parse_moment(value, where):
    """An aware datetime from a TOML date-time with offset, an ISO 8601 string with offset ("Z" or +01:00),
    or "YYYY-MM-DD HH:MM[:SS] Area/City"; PolicyError naming `where` otherwise (no time zone included)."""
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise PolicyError(
                f"{where}: {value.isoformat()} has no time zone: write its offset "
                f"({value.isoformat()}+01:00, or Z for UTC) or a zone name (\"... Europe/Berlin\")"
            )
        return value
    if isinstance(value, date):
        raise PolicyError(
            f"{where}: {value.isoformat()} is a date without a time and a time zone "
            f"(e.g. {value.isoformat()}T23:59:00+01:00)"
        )
    if not isinstance(value, str):
        raise PolicyError(f"{where}: {value!r} is not a date and time")
    text = value.strip()
    bad = PolicyError(
        f"{where}: {value!r} is not a date and time with a time zone: write e.g. "
        f"2026-12-09T17:00:00+01:00 or \"2026-12-09 17:00 Europe/Berlin\""
    )
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        head, _, zone = text.rpartition(" ")
        try:
            local = datetime.fromisoformat(head)
            if local.tzinfo is not None or not ("/" in zone or zone == "UTC"):
                raise bad
            moment = local.replace(tzinfo=ZoneInfo(zone))
        except (ValueError, ZoneInfoNotFoundError):
            raise bad from None
    return parse_moment(moment, where)


def parse_duration(value, where):
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise PolicyError(f"{where}: {value!r} is not a duration (e.g. \"15m\", \"2h\", \"1d\", or minutes)")
    if isinstance(value, (int, float)):
        seconds = float(value) * 60
    else:
        text = value.strip().lower()
        try:
            seconds = float(text[:-1]) * UNITS[text[-1]] if text and text[-1] in UNITS else float(text) * 60
        except ValueError:
            raise PolicyError(
                f"{where}: {value!r} is not a duration (e.g. \"15m\", \"2h\", \"1d\", or a number of minutes)"
            ) from None
    if not math.isfinite(seconds) or seconds < 0:
        raise PolicyError(f"{where}: {value!r} must be a duration of 0 or more")
    return timedelta(seconds=seconds)


def _percent(value, where):
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise PolicyError(f"{where}: {value!r} is not a number of percent")
    if not (0 <= value <= 100):
        raise PolicyError(f"{where}: {value:g} % is outside [0, 100] %")
    return float(value)


def _rule(table, base, where):
    unknown = sorted(set(table) - set(RULE_KEYS) - {"due"})
    if unknown:
        raise PolicyError(f"{where}: unknown key(s) {unknown}; known: due, {', '.join(RULE_KEYS)}")
    fields = {}
    if "due" in table:
        fields["due"] = parse_moment(table["due"], f"{where} due")
    if "grace" in table:
        fields["grace"] = parse_duration(table["grace"], f"{where} grace")
    if "penalty" in table:
        if table["penalty"] not in PENALTIES:
            raise PolicyError(f"{where} penalty: {table['penalty']!r} is not one of {', '.join(PENALTIES)}")
        fields["penalty"] = table["penalty"]
    for key in ("percent_per_day", "max_percent"):
        if key in table:
            fields[key] = _percent(table[key], f"{where} {key}")
    if "resubmission" in table:
        if table["resubmission"] not in RESUBMISSION_RULES:
            raise PolicyError(
                f"{where} resubmission: {table['resubmission']!r} is not one of {', '.join(RESUBMISSION_RULES)}"
            )
        fields["resubmission"] = table["resubmission"]
    rule = replace(base, **fields)
    if rule.penalty == "percent_per_day" and rule.percent_per_day == 0:
        raise PolicyError(f"{where}: penalty = \"percent_per_day\" needs percent_per_day above 0")
    return rule


def load_policy(path=None, known=None):
    """The course file's Policy; a missing file is a policy without deadlines. PolicyError on bad input.
    known: the course's assignment names (an assignment table naming another is an error: a typo)."""
    path = Path(path) if path is not None else COURSE_FILE
    if not path.exists():
        if path != COURSE_FILE:
            raise PolicyError(f"the course file {path} does not exist")
        return Policy(path, {}, Rule(""))
    try:
        data = tomllib.loads(path.read_text())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise PolicyError(f"{path}: not a readable TOML file ({exc})") from None
    unknown = sorted(set(data) - {"late_policy", "assignments"})
    if unknown:
        raise PolicyError(f"{path}: unknown table(s) {unknown}; known: late_policy, assignments")
    base = _rule(data.get("late_policy", {}), Rule(""), f"{path}: [late_policy]")
    if base.due is not None:
        raise PolicyError(
            f"{path}: [late_policy] due: a due date belongs to one assignment ([assignments.NAME] due = ...)"
        )
    rules = {}
    for name, table in data.get("assignments", {}).items():
        where = f"{path}: [assignments.{name}]"
        if known is not None and name not in known:
            raise PolicyError(f"{where}: no assignment is called {name!r}; known: {', '.join(known)}")
        if not isinstance(table, dict):
            raise PolicyError(f"{where}: must be a table (due = ..., grace = ...)")
        rules[name] = _rule(table, replace(base, assignment=name), where)
    return Policy(path, rules, base)


def read_timestamp_file(path):
    """(aware UTC datetime, None) from nbgrader's timestamp.txt, or (None, why) when it is unreadable."""
    from nbgrader.utils import parse_utc

    try:
        text = Path(path).read_text().strip()
    except (OSError, UnicodeDecodeError) as exc:
        return None, f"{path}: cannot be read ({type(exc).__name__})"
    if not text:
        return None, f"{path}: empty"
    try:
        moment = parse_utc(text)
    except (ValueError, OverflowError, TypeError):
        return None, f"{path}: {text[:60]!r} is not a timestamp"
    return moment.replace(tzinfo=timezone.utc), None


def read_timestamps_csv(path):
    """{student: aware datetime} from a CSV with columns `student` and `submitted_at` (ISO 8601 with an
    offset, or "YYYY-MM-DD HH:MM Area/City"); PolicyError naming the file, line and field on bad input."""
    path = Path(path)
    try:
        with open(path, newline="") as fh:
            reader = csv.DictReader(fh)
            missing = {"student", "submitted_at"} - set(reader.fieldnames or [])
            if missing:
                raise PolicyError(
                    f"{path}: the header must name the columns student and submitted_at "
                    f"(missing: {', '.join(sorted(missing))})"
                )
            stamps = {}
            for row in reader:
                where = f"{path}, line {reader.line_num}"
                student = (row["student"] or "").strip()
                if not student:
                    raise PolicyError(f"{where}: the field student is empty")
                if student in stamps:
                    raise PolicyError(f"{where}: student {student!r} has a second row")
                stamps[student] = utc(parse_moment(row["submitted_at"] or "", f"{where}, field submitted_at"))
    except (OSError, UnicodeDecodeError) as exc:
        raise PolicyError(f"{path}: cannot be read ({exc})") from None
    return stamps


# ------------------------------------------------------------------------------------------ lateness
@dataclass
class Lateness:
    status: str = "no_deadline"
    submitted_at: datetime | None = None  # aware UTC
    hours_late: float | None = None  # hours after the due date (0 when not after it)
    percent: float = 0.0  # of the raw score taken
    detail: str = ""

    @property
    def needs_attention(self):
        return self.status in ("no_timestamp", "bad_timestamp")


def assess(rule, submitted_at, now=None, why_missing="", check_future=True):
    """The Lateness of a submission made at `submitted_at` (aware, or None) under `rule`."""
    now = now or datetime.now(timezone.utc)
    if check_future and submitted_at is not None and submitted_at > now + FUTURE_SLACK:
        return Lateness(
            "bad_timestamp",
            submitted_at,
            None,
            0.0,
            f"submitted_at {utc(submitted_at):%Y-%m-%d %H:%M:%S} UTC is in the future (now "
            f"{utc(now):%Y-%m-%d %H:%M:%S} UTC): no lateness or penalty applied, check the timestamp",
        )
    if rule.due is None:
        return Lateness("no_deadline", submitted_at)
    if submitted_at is None:
        return Lateness(
            "no_timestamp",
            None,
            None,
            0.0,
            f"no readable timestamp ({why_missing or 'none given'}): lateness unknown, no penalty applied",
        )
    late = (submitted_at - rule.due).total_seconds()
    hours = round(max(0.0, late) / 3600, 4)
    if late <= 0:
        return Lateness("on_time", submitted_at, hours)
    if late <= rule.grace.total_seconds():
        return Lateness(
            "in_grace",
            submitted_at,
            hours,
            0.0,
            f"{_hours(timedelta(seconds=late))} late, inside the grace period of {_hours(rule.grace)}",
        )
    days = math.ceil(late / 86400)
    percent = {"none": 0.0, "zero": 100.0, "percent_per_day": min(rule.max_percent, days * rule.percent_per_day)}[
        rule.penalty
    ]
    return Lateness(
        "late",
        submitted_at,
        hours,
        percent,
        f"{_hours(timedelta(seconds=late))} late ({days} day(s) started): {percent:g}% taken",
    )


def penalty_points(raw, lateness):
    """Points taken from a raw score; never more than the score."""
    if raw is None or raw <= 0:
        return 0.0
    return min(raw, round(raw * lateness.percent / 100, 6))


def choose(rule, attempts):
    """The attempt to grade among [(aware datetime or None, item)], by the rule; (item, note)."""
    timed = sorted((a for a in attempts if a[0] is not None), key=lambda a: a[0])
    if not timed:
        return attempts[-1][1], f"{len(attempts)} submissions, none with a readable timestamp: graded the last by name"
    pick = timed[-1]
    why = "the latest"
    if rule.resubmission == "latest_on_time" and rule.due is not None:
        on_time = [a for a in timed if a[0] <= rule.due + rule.grace]
        if on_time:
            pick, why = on_time[-1], "the latest on time"
        else:
            why = "the latest (none was on time)"
    untimed = len(attempts) - len(timed)
    note = (
        f"{len(attempts)} submissions, rule {rule.resubmission}: graded {why}, "
        f"{utc(pick[0]):%Y-%m-%d %H:%M:%S} UTC; the others are kept where they are"
    )
    if untimed:
        note += f" ({untimed} without a readable timestamp not considered)"
    return pick[1], note


# ------------------------------------------------------------------------------------------ nbgrader
def early_releases(names, policy, notebooks=None, now=None):
    """[(name, earlier, closes)] for each named assignment whose given cells restate answers of an `earlier`
    assignment that still accepts submissions at `now` (its due date plus grace, `closes`, is still ahead):
    releasing it would hand those answers out. notebooks: {name: solution notebook} (default: solutions/).
    An earlier assignment without a due date closes never in this sense: it has no window to protect.
    Run by `python -m autograde release` and by the classroom's nbgrader release (classroom/exchange.py, OrderedRelease:
    formgrader's Release button, `nbgrader release_assignment`)."""
    import nbformat

    from autograde.given import KEY, _path, given_cells

    now = utc(now or datetime.now(timezone.utc))
    found = []
    for name in names:
        nb = notebooks[name] if notebooks is not None else nbformat.read(str(_path(name)), as_version=4)
        earlier = sorted(
            {
                entry.rpartition(":")[0]
                for _, cell in given_cells(nb)
                for entry in cell.metadata.get(KEY, [])
                if ":" in entry
            }
        )
        for origin in earlier:
            rule = policy.rule(origin)
            if rule.due is not None and utc(rule.due) + rule.grace > now:
                found.append((name, origin, utc(rule.due) + rule.grace))
    return found


def describe_early(found, policy):
    """The refusal, one line per notebook held back, naming what it restates and when that window closes."""
    return "; ".join(
        f"{name} restates answers of {origin}, which accepts submissions until "
        f"{closes:%Y-%m-%d %H:%M} UTC (due date and grace in {policy.path.name})"
        for name, origin, closes in found
    )


def write_duedates(db_url, course_id, policy, names):
    """Set each assignment's duedate in an nbgrader gradebook (naive UTC, as nbgrader keeps it); an
    assignment without a due date gets none. Returns {name: duedate or None}."""
    from nbgrader.api import Gradebook

    written = {}
    with Gradebook(db_url, course_id) as gb:
        for name in names:
            due = policy.rule(name).due
            value = utc(due).replace(tzinfo=None) if due is not None else None
            assignment = gb.update_or_create_assignment(name)
            assignment.duedate = value
            gb.db.commit()
            written[name] = value
    return written


class CoursePenalty(LateSubmissionPlugin):
    """nbgrader's late-submission plugin with the course file's rule (AssignLatePenalties.plugin_class):
    nbgrader gives it the seconds after the gradebook's duedate, which Course.prepare sets from the file."""

    course_file = Unicode("", help="the course file (default: course.toml of the repository)").tag(config=True)

    def late_submission_penalty(self, student_id, score, total_seconds_late):
        assignment = getattr(self.parent, "assignment_id", None)
        rule = load_policy(self.course_file or None).rule(assignment)
        if rule.due is None:
            return None
        lateness = assess(rule, rule.due + timedelta(seconds=total_seconds_late), check_future=False)
        points = penalty_points(score, lateness)
        self.log.info("late policy of %s: %s -> penalty %s", assignment, lateness.detail, points)
        return points or None
