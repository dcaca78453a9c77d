"""The course's grading tool.

python -m autograde workspace                       a learner: set up or refresh your workspace my-work/
python -m autograde check 04 | PATH.ipynb            a learner: grade your own notebook
python -m autograde class ASSIGNMENT SUBMISSIONS     an instructor: grade a class, feedback, grades CSV
python -m autograde class-insights ASSIGNMENT [DIR]  an instructor: the class's own measurements, plotted
python -m autograde release [ASSIGNMENT ...]         regenerate notebooks/ from solutions/
python -m autograde load                             what each notebook asks of a learner (autograde/learner_load.py)
"""

import argparse
import sys

from autograde import put_tools_on_path
from autograde.release import release


def _size(text):
    units = {"k": 2**10, "m": 2**20, "g": 2**30}
    text = text.strip().lower().rstrip("b").rstrip("i")
    if text and text[-1] in units:
        return int(float(text[:-1]) * units[text[-1]])
    return int(text)


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m autograde", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)

    rel = sub.add_parser("release", help="regenerate notebooks/ from solutions/ (all assignments by default)")
    rel.add_argument("assignments", nargs="*")
    rel.add_argument(
        "--force",
        action="store_true",
        help="release a notebook even while an assignment it restates answers of is still open (course.toml)",
    )

    def limits(p, notebook_default):
        p.add_argument(
            "--cell-timeout",
            type=int,
            default=None,
            metavar="S",
            help="seconds one cell may run (default: Execute.timeout of nbgrader_config.py)",
        )
        p.add_argument(
            "--notebook-timeout",
            type=int,
            default=notebook_default,
            metavar="S",
            help=f"seconds the whole notebook may run (default {notebook_default})",
        )
        p.add_argument(
            "--full",
            action="store_true",
            help="run measurement sweeps at full size (default: SPECDEC_QUICK=1; never graded)",
        )
        p.add_argument(
            "--measure",
            action="store_true",
            help="also run the course's cells that only measure this machine (tagged `measures`; by "
            "default grading does not run them: timings are never graded)",
        )

    sub.add_parser("load", help="words, visible code lines and points per notebook; the README's minutes estimated")
    sub.add_parser(
        "workspace",
        help="set up or refresh your workspace (my-work/) from the course's notebooks, "
        "never overwriting your copies, and fill the local exchange (make lab runs this)",
    )

    chk = sub.add_parser("check", help="grade your own notebook with the course's tests")
    chk.add_argument(
        "notebook",
        help="an assignment, by number (04) or name: your copy in the workspace "
        "(my-work/); or the path of a notebook file",
    )
    chk.add_argument("--no-sandbox", action="store_true", help="run the kernel without bubblewrap")
    limits(chk, 600)

    cls = sub.add_parser("class", help="grade a folder of submissions (one sub-folder or .ipynb per student)")
    cls.add_argument("assignment")
    cls.add_argument("submissions")
    cls.add_argument(
        "--work",
        default=None,
        help="course working folder: gradebook, submitted/, autograded/, feedback/ "
        "(default: as in nbgrader_config.py, autograde/work/)",
    )
    cls.add_argument("--csv", default=None, help="grades CSV (default: WORK/grades_ASSIGNMENT.csv)")
    cls.add_argument("--memory", default="4G", help="memory limit per kernel process (default 4G)")
    cls.add_argument("--jobs", type=int, default=1, help="submissions graded in parallel (default 1)")
    cls.add_argument(
        "--keep-flagged",
        action="store_true",
        help="keep the autograded score of flagged submissions (default: 0, for review)",
    )
    cls.add_argument(
        "--skip-preflight",
        action="store_true",
        help="do not grade the solution first (it checks that this environment can grade; a "
        "passing check is cached); failures of the course's own code still show as `error`",
    )
    cls.add_argument(
        "--no-sandbox", action="store_true", help="DANGEROUS: run student code unconfined (only for trusted notebooks)"
    )
    cls.add_argument(
        "--course-file",
        default=None,
        metavar="TOML",
        help="deadlines and late policy (default: course.toml of the course)",
    )
    cls.add_argument(
        "--timestamps",
        default=None,
        metavar="CSV",
        help="when each student submitted, for plain files: a CSV with columns student,submitted_at "
        "(ISO 8601 with an offset); default SUBMISSIONS/timestamps.csv if it exists; nbgrader's "
        "timestamp.txt in a submission is used otherwise",
    )
    limits(cls, 600)

    ins = sub.add_parser(
        "class-insights",
        help="collect what each learner's machine measured (my_measurements.json "
        "in the submissions) and plot the class",
    )
    ins.add_argument("assignment", help="an assignment, by number (09) or name")
    ins.add_argument(
        "submissions",
        nargs="?",
        default=None,
        help="one sub-folder per student (default: the collected submissions, WORK/submitted/)",
    )
    ins.add_argument("--out", default=None, help="the plot (default: WORK/insights_ASSIGNMENT.png)")

    args = parser.parse_args(argv)
    if args.command == "class-insights":
        from autograde.insights import class_insights

        try:
            return class_insights(args.assignment, args.submissions, args.out)
        except ValueError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
    put_tools_on_path()
    if args.command == "release":
        try:
            names = release(args.assignments, force=args.force)
        except ValueError as exc:  # an unknown assignment, or bad input in course.toml
            print(f"error: {exc}", file=sys.stderr)
            return 2
        for name in names:
            print(f"released {name} -> notebooks/{name}/")
        return 0
    if args.command == "load":
        from autograde.learner_load import report

        print(report())
        return 0
    if args.command == "workspace":
        from autograde.release import publish
        from autograde.workspace import changed_in_course_folder, set_up

        try:
            exchange = publish()
            sync = set_up()
        except FileNotFoundError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        for line in sync.messages:
            print(line)
        for path in changed_in_course_folder():
            print(
                f"{path} has changes of yours, in the course's own copy: your work belongs in {sync.workspace.name}/ "
                f"(a first set-up copies it there); once it is there, `git checkout -- notebooks/` lets `git pull` "
                f"update the course"
            )
        print(
            f"your workspace: {sync.workspace} (course updates never overwrite it; the Assignment List reads "
            f"the local exchange {exchange})"
        )
        return 0
    if args.command == "check":
        from autograde.check import check

        result = check(
            args.notebook,
            sandboxed=False if args.no_sandbox else None,
            cell_timeout=args.cell_timeout,
            notebook_timeout=args.notebook_timeout,
            quick=not args.full,
            measure=args.measure,
        )
        return 0 if result is not None else 2
    from autograde.grade_class import grade_class

    try:
        results, _, problems = grade_class(
            args.assignment,
            args.submissions,
            work=args.work,
            csv_path=args.csv,
            cell_timeout=args.cell_timeout,
            notebook_timeout=args.notebook_timeout,
            memory_bytes=_size(args.memory),
            sandboxed=not args.no_sandbox,
            quick=not args.full,
            measure=args.measure,
            keep_flagged=args.keep_flagged,
            jobs=max(1, args.jobs),
            check_solution=not args.skip_preflight,
            course_file=args.course_file,
            timestamps=args.timestamps,
        )
    except (ValueError, RuntimeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 1 if problems or any(r.status == "error" or r.lateness.needs_attention for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
