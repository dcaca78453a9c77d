"""Throughput: grade N copies of the solution notebook with `python -m autograde class`.

    python tests/adversarial/throughput.py [--n 20] [--jobs 1] [--plain 3]

Prints the notebook's own run time (plain nbclient, a normal kernel, SPECDEC_QUICK=1 as in grading;
median of --plain runs), the class run's wall time per submission, and the difference: what grading
costs on top of running the notebook.
"""

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

A = "01_decode_is_bandwidth_bound"


def plain_seconds(path, runs):
    """Wall seconds to run the notebook top to bottom in a normal kernel (nbclient), median of runs."""
    import nbformat
    from nbclient import NotebookClient

    os.environ["SPECDEC_QUICK"] = "1"
    times = []
    for _ in range(runs):
        nb = nbformat.read(str(path), as_version=4)
        t0 = time.monotonic()
        NotebookClient(
            nb,
            timeout=600,
            kernel_name="python3",
            allow_errors=True,
            resources={"metadata": {"path": str(path.parent)}},
        ).execute()
        times.append(time.monotonic() - t0)
    return statistics.median(times), times


def measure(n=20, jobs=1, plain_runs=3, out=sys.stdout):
    from autograde import REPO
    from autograde.release import tool_env

    solution = REPO / "solutions" / A / f"{A}.ipynb"
    own, own_all = plain_seconds(solution, plain_runs)
    root = Path(tempfile.mkdtemp(prefix="autograde-throughput-"))
    try:
        for i in range(n):
            d = root / "subs" / f"student{i:03d}"
            d.mkdir(parents=True)
            shutil.copy(solution, d / f"{A}.ipynb")
        env = tool_env()
        t0 = time.monotonic()
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "autograde",
                "class",
                A,
                str(root / "subs"),
                "--work",
                str(root / "work"),
                "--jobs",
                str(jobs),
            ],
            capture_output=True,
            text=True,
            env=env,
        )
        wall = time.monotonic() - t0
        if done.returncode != 0:
            raise RuntimeError(done.stdout[-3000:] + done.stderr[-3000:])
        per = wall / n
        load = os.getloadavg()
        result = {
            "n": n,
            "jobs": jobs,
            "own_s": own,
            "own_all": own_all,
            "wall_s": wall,
            "per_submission_s": per,
            "overhead_s": per - own,
            "load": load,
            "ok": done.stdout.count(" 9/9 ok"),
        }
        print(
            f"notebook's own run time (plain kernel, median of {plain_runs}): {own:.1f} s "
            f"({', '.join(f'{t:.1f}' for t in own_all)})",
            file=out,
        )
        print(
            f"class run, {n} submissions, --jobs {jobs}: {wall:.0f} s wall = {per:.1f} s per submission "
            f"({result['ok']} graded 9/9)",
            file=out,
        )
        print(
            f"grading cost beyond the notebook's own run time: {per - own:.1f} s per submission "
            f"(goal <= 15 s); load average {load[0]:.1f}",
            file=out,
        )
        print("the tool's own summary: " + done.stdout.strip().splitlines()[-1], file=out)
        return result
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=20)
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--plain", type=int, default=3)
    a = parser.parse_args()
    measure(a.n, a.jobs, a.plain)
