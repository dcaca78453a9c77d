"""The engines' child processes (llama-server, the vLLM worker): started in their own process group, ended as a
group, never left behind.

``start(cmd, **popen)`` starts one with Linux's parent-death signal set, so it gets SIGTERM if the Python that
started it is killed outright; ``end(proc)`` ends its whole group (SIGTERM, then SIGKILL after a grace period);
an ``atexit`` hook ends every one still running when Python exits.
"""

from __future__ import annotations

import atexit
import os
import signal
import subprocess

PR_SET_PDEATHSIG = 1
RUNNING: set = set()


def end_with_parent():
    """preexec_fn: Linux sends the child SIGTERM when the process that started it dies, so a kernel killed
    outright (a restart that does not wait) leaves no engine behind either."""
    import ctypes

    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):
        pass


def start(cmd, **popen) -> subprocess.Popen:
    proc = subprocess.Popen(cmd, start_new_session=True, preexec_fn=end_with_parent, **popen)
    RUNNING.add(proc)
    return proc


def end(proc, grace=10.0):
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(grace)
    RUNNING.discard(proc)


def engine_pids() -> list:
    """Ids of every process in the groups of the engines now running (the engine and whatever it started): a
    timing section counts their CPU time as its own (specdec.measure.timing.Steadiness(pids=engine_pids))."""
    groups = {proc.pid for proc in RUNNING if proc.poll() is None}
    pids = []
    if not groups:
        return pids
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) in groups:  # the process group id
            pids.append(int(entry))
    return pids


def log_tail(path, n=3000) -> str:
    """The last n characters of a child's log file ("" if there is none)."""
    try:
        with open(path, errors="replace") as f:
            return f.read()[-n:]
    except (OSError, TypeError):
        return ""


@atexit.register
def _end_all():
    for proc in list(RUNNING):
        end(proc, grace=2.0)
