"""python -m classroom up|down: a JupyterHub classroom on 127.0.0.1 (see docs/classroom.md).

up             create the instructor and N student Unix users, each with a password of their own (a table
               printed once, and ROOT/credentials.csv, root only), the classroom environment under /opt, the
               nbgrader exchange and the course folder under /srv, then run JupyterHub until Ctrl-C (the
               users stay until `down`); run again, it starts the hub of the existing classroom
down           stop the hub and remove exactly what `up` created (the users and their passwords too)
credentials    print the table of users and their passwords again
password USER  give USER a new password (a learner who lost theirs), print it and update the file
"""

import argparse
import signal
import sys
import time
from pathlib import Path

from classroom import COURSE_ID, PREFIX, ROOT, ClassroomError, log
from classroom.provision import AUTH, Classroom, check_username


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m classroom", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="set up the classroom and run the hub until Ctrl-C")
    up.add_argument("--students", type=int, default=3, help="number of students (default 3)")
    up.add_argument("--prefix-name", default="sd", help="user names: PREFIX-instructor, PREFIX-student01, ...")
    up.add_argument("--names", default="", help="comma-separated student user names instead of --students")
    up.add_argument("--port", type=int, default=8000, help="hub port on 127.0.0.1 (default 8000)")
    up.add_argument("--root", default=str(ROOT), help=f"exchange, course folder and hub state (default {ROOT})")
    up.add_argument("--prefix", default=str(PREFIX), help=f"the classroom's Python environment (default {PREFIX})")
    up.add_argument("--no-hub", action="store_true", help="set up only, do not start the hub")
    up.add_argument(
        "--auth",
        choices=AUTH,
        default="pam",
        help=(
            "pam (default): every user gets a password of their own; shared: one password for everyone, "
            "which lets anyone log in as any learner (a closed room only)"
        ),
    )
    down = sub.add_parser("down", help="stop the hub, remove the users, groups, exchange and environment")
    down.add_argument("--root", default=str(ROOT))
    creds = sub.add_parser("credentials", help="print every user's password (root only)")
    creds.add_argument("--root", default=str(ROOT))
    reset = sub.add_parser("password", help="give one user a new password")
    reset.add_argument("user")
    reset.add_argument("--root", default=str(ROOT))
    args = parser.parse_args(argv)
    try:
        if args.command == "down":
            Classroom.load(args.root).teardown()
            return 0
        if args.command == "credentials":
            print(Classroom.load(args.root).credentials_table())
            return 0
        if args.command == "password":
            room = Classroom.load(args.root)
            print(f"{args.user}: {room.reset_password(args.user)}  (also in {room.credentials_file})")
            return 0
        p = check_username(args.prefix_name)
        if (Path(args.root) / "state.json").exists():
            # set up before (the hub was stopped with Ctrl-C): start its hub again, users and grades as they are
            room = Classroom.load(args.root)
            students = room.students
            log(
                f"a classroom is set up at {args.root} ({room.instructor}, {len(students)} students, port "
                f"{room.port}): starting its hub again (`make classroom-down` removes it)"
            )
        else:
            students = [n.strip() for n in args.names.split(",") if n.strip()] or [
                f"{p}-student{i:02d}" for i in range(1, args.students + 1)
            ]
            room = Classroom(
                f"{p}-instructor",
                students,
                port=args.port,
                root=args.root,
                prefix=args.prefix,
                course=COURSE_ID,
                auth=args.auth,
            ).setup()
            if room.auth == "pam":
                print(room.credentials_table(), flush=True)
        if args.no_hub:
            return 0
        room.start()
        log(f"JupyterHub is up in {room.start_seconds:.1f} s: {room.url}/ (proxy: {room.state['proxy_name']})")
        if room.auth == "pam":
            log(
                f"log in as {room.instructor} or {students[0]} ... {students[-1]}, each with their own password: "
                f"{room.credentials_file} (root only; `python -m classroom credentials` prints it)"
            )
        else:
            log(
                f"log in as {room.instructor} or {students[0]} ... {students[-1]} with the shared password "
                f"{room.state['password']!r}"
            )
            log("WARNING: the shared password lets anyone log in as any learner: closed workshop networks only")
        lock = room.lockout
        log(
            f"a user name is locked for {lock['lockout_seconds']} s after {lock['failed_logins_allowed']} "
            "wrong passwords in a row"
        )
        log(f"formgrader (instructor only, in its own tab): {room.url}/services/{COURSE_ID}/formgrader")
        log("Ctrl-C stops the hub; `make classroom-down` removes the users")
        signal.signal(signal.SIGTERM, lambda *a: (_ for _ in ()).throw(KeyboardInterrupt()))
        try:
            while room.proc.poll() is None:
                time.sleep(1)
            log(f"JupyterHub exited with {room.proc.returncode}:\n{room.log_tail()}")
            return 1
        except KeyboardInterrupt:
            room.stop()
            log("hub stopped; the users, exchange and grades stay until `make classroom-down`")
            return 0
    except ClassroomError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
