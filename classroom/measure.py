"""Measure a 30-learner classroom on this machine (not run by CI; the figures go to docs/classroom.md).

    sudo .venv/bin/python -m classroom.measure [--students 30] [--jobs 2] [--out measure.json]

Sets up its own classroom (users sdm-instructor, sdm-s01..., root /srv/sdm-classroom, environment
/opt/sdm-classroom), and removes it at the end, also on failure. Measures:
- set-up time (users, environment, course, exchange) and hub start time (process start to the API answering);
- spawn time per user: each student's server started through the hub's REST API, one after another,
  until the hub reports it ready;
- memory per user server (PSS and RSS of all the user's processes, server idle without a kernel), with
  all N running; and one learner kernel's memory after importing what the notebooks import;
- autograde time for N submissions with --jobs J: every student fetches 03_acceptance_math, fills it
  (correct / partial / blank in turn) and submits through their server; the instructor collects through
  formgrader and runs `python -m autograde class` (sandboxed) as their Unix user.
"""

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

from classroom import COURSE_ID, fill, log
from classroom.hub import free_port
from classroom.provision import Classroom

ASSIGNMENT = "03_acceptance_math"
PARTIAL = "expected_tokens"


def memory_of(uid):
    """(PSS, RSS) in MiB of all processes of `uid`."""
    return memory_of_all({uid})


def memory_of_all(uids, pids=()):
    """(PSS, RSS) in MiB of all processes of the users `uids` and of the processes `pids`, read once each."""
    pss = rss = 0
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if proc.stat().st_uid not in uids and int(proc.name) not in pids:
                continue
            for line in (proc / "smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    pss += int(line.split()[1])
                elif line.startswith("Rss:"):
                    rss += int(line.split()[1])
        except OSError:
            continue
    return pss / 1024, rss / 1024


def memory_in_use_gib():
    """The machine's memory in use (MemTotal - MemAvailable), GiB."""
    info = {line.split(":")[0]: int(line.split()[1]) for line in Path("/proc/meminfo").read_text().splitlines()}
    return (info["MemTotal"] - info["MemAvailable"]) / 2**20


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--students", type=int, default=30)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--out", default="classroom-measure.json")
    args = parser.parse_args(argv)
    import pwd

    students = [f"sdm-s{i:02d}" for i in range(1, args.students + 1)]
    room = Classroom(
        "sdm-instructor", students, port=free_port(), root="/srv/sdm-classroom", prefix="/opt/sdm-classroom"
    )
    out = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": {
            "cpus": os.cpu_count(),
            "memory_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
            "kernel": platform.release(),
            "load_average_at_start": os.getloadavg(),
        },
        "students": args.students,
    }
    try:
        t0 = time.monotonic()
        room.setup()
        out["setup_s"] = round(time.monotonic() - t0, 1)
        room.start()
        out["hub_start_s"] = round(room.start_seconds, 1)
        out["proxy"] = room.state["proxy_name"]
        log(f"hub up in {room.start_seconds:.1f} s; spawning {len(students)} servers one after another")
        spawn = {}
        for s in students:
            spawn[s] = room.spawn(s)
        out["spawn_s"] = {
            "median": round(statistics.median(spawn.values()), 2),
            "max": round(max(spawn.values()), 2),
            "min": round(min(spawn.values()), 2),
            "all": {k: round(v, 2) for k, v in spawn.items()},
        }
        time.sleep(5)  # let the servers settle
        mem = {s: memory_of(pwd.getpwnam(s).pw_uid) for s in students}
        out["server_memory_mib"] = {
            "pss_median": round(statistics.median(m[0] for m in mem.values()), 1),
            "rss_median": round(statistics.median(m[1] for m in mem.values()), 1),
            "pss_total": round(sum(m[0] for m in mem.values()), 1),
        }
        kernel = room.run_as(
            students[0],
            [
                "-c",
                (
                    "import torch, numpy, matplotlib.pyplot, ipykernel, specdec, specdec.core.models\n"
                    "for l in open('/proc/self/smaps_rollup'):\n"
                    "    if l.startswith(('Rss:', 'Pss:')): print(l.split()[0], int(l.split()[1]) // 1024)"
                ),
            ],
        )
        out["kernel_imports_mib"] = kernel.stdout.split() if kernel.returncode == 0 else kernel.stderr[-500:]
        log(f"servers: spawn median {out['spawn_s']['median']} s, memory {out['server_memory_mib']}")

        # the instructor releases; every student fetches, fills, submits through their own server
        itoken = room.token(room.instructor)
        svc = f"/services/{COURSE_ID}/formgrader/api/assignment/{ASSIGNMENT}"
        released = room.api(f"{svc}/release", "POST", {}, token=itoken)
        assert released["success"], released
        t0 = time.monotonic()
        for i, s in enumerate(students):
            kind = fill.KINDS[i % 3]
            token = room.token(s)

            def api(path, method="GET", body=None):
                return room.api(f"/user/{s}{path}", method, body, token=token)

            fetched = api("/assignments/fetch", "POST", {"course_id": COURSE_ID, "assignment_id": ASSIGNMENT})
            assert fetched["success"], fetched
            nb = fill.filled_notebook(ASSIGNMENT, kind, PARTIAL)
            api(
                f"/api/contents/{ASSIGNMENT}/{ASSIGNMENT}.ipynb",
                "PUT",
                {"type": "notebook", "format": "json", "content": nb},
            )
            done = api("/assignments/submit", "POST", {"course_id": COURSE_ID, "assignment_id": ASSIGNMENT})
            assert done["success"], done
        out["fetch_fill_submit_all_s"] = round(time.monotonic() - t0, 1)
        t0 = time.monotonic()
        assert room.api(f"{svc}/collect", "POST", {}, token=itoken)["success"]
        out["collect_s"] = round(time.monotonic() - t0, 1)
        t0 = time.monotonic()
        graded = room.run_as(
            room.instructor,
            ["-m", "autograde", "class", ASSIGNMENT, "collected", "--work", "autograde/work", "--jobs", str(args.jobs)],
            cwd=room.course_dir,
            env={"PYTHONPATH": str(room.course_dir)},
            timeout=3600,
        )
        out["autograde_s"] = round(time.monotonic() - t0, 1)
        out["autograde_jobs"] = args.jobs
        out["autograde_rc"] = graded.returncode
        out["autograde_tail"] = graded.stdout.splitlines()[-6:]
        import csv

        with open(room.course_dir / "autograde" / "work" / f"grades_{ASSIGNMENT}.csv") as fh:
            totals = {r["student"]: float(r["score"]) for r in csv.DictReader(fh) if r["part"] == "total"}
        want = {s: fill.expected_points(ASSIGNMENT, fill.KINDS[i % 3], PARTIAL) for i, s in enumerate(students)}
        out["scores_as_expected"] = totals == want
        log(
            f"autograde of {len(students)} submissions with --jobs {args.jobs}: {out['autograde_s']} s "
            f"(exit {graded.returncode}); scores as expected: {out['scores_as_expected']}"
        )
    finally:
        out["load_average_at_end"] = os.getloadavg()
        try:
            Path(args.out).with_suffix(".hub.log").write_text(room.log_tail(10**7))
        except OSError:
            pass
        room.teardown()
        Path(args.out).write_text(json.dumps(out, indent=1))
        print(
            json.dumps(
                {k: v for k, v in out.items() if k != "spawn_s"}
                | {"spawn_s": {k: v for k, v in out.get("spawn_s", {}).items() if k != "all"}},
                indent=1,
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
