"""Confine a student's kernel with bubblewrap and resource limits.

The grading process (trusted) writes a launch spec with :func:`write_spec`; the kernelspec's argv is
``python -m autograde.sandbox SPEC {connection_file}``.  That launcher runs on the host, applies the
resource limits to itself (they are inherited) and execs ``bwrap``, which starts the kernel in:

- a new mount namespace whose root is an empty tmpfs holding only read-only binds of the system
  (/usr, a few files of /etc, the Python installation and virtual environment), the course's shared
  read-only folders (specdec/, data/) and the guarded kernel script; nothing else of the host exists
  there: no solutions/, no gradebook, no .git, no home directory, no other student's folder;
- a private writable copy of the notebook's folder (the submission) at the folder's own path, and a
  private size-limited /tmp;
- new network, PID, IPC, UTS and user namespaces: no network at all (not even the host's loopback),
  no view of host processes; all capabilities dropped; ``--die-with-parent`` so that killing the
  kernel kills everything it started;
- the connection to the grader over IPC (Unix) sockets in a per-kernel folder, so no TCP is needed;
- RLIMIT_AS (memory per process), RLIMIT_CPU (CPU seconds), RLIMIT_FSIZE (largest file written) and,
  where the host lets us create a child cgroup, a cgroup limit on total memory and on the number of
  processes of the whole sandbox.
"""

import json
import os
import shutil
import subprocess
import sys
from functools import lru_cache
from pathlib import Path

KERNEL_SCRIPT = Path(__file__).resolve().parent / "guard_kernel.py"
KERNEL_IN_SANDBOX = "/opt/autograde/guard_kernel.py"
ETC_FILES = (
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "fonts",
    "localtime",
    "mime.types",
    "ssl/certs",
    "nsswitch.conf",
    "passwd",
    "group",
    "hosts",
)
try:
    import resource

    RLIMITS = {
        "memory_bytes": resource.RLIMIT_AS,
        "cpu_seconds": resource.RLIMIT_CPU,
        "file_bytes": resource.RLIMIT_FSIZE,
    }
except ImportError:  # Windows: `check` still runs, without limits
    resource, RLIMITS = None, {}


@lru_cache(maxsize=None)
def bwrap_status():
    """(True, path) if bubblewrap can create a sandbox here, else (False, reason)."""
    path = shutil.which("bwrap")
    if path is None:
        return False, "bubblewrap (bwrap) is not installed: apt-get install bubblewrap"
    probe = [
        path,
        "--ro-bind",
        "/",
        "/",
        "--dev",
        "/dev",
        "--proc",
        "/proc",
        "--unshare-all",
        "--unshare-user",
        "--uid",
        "65534",
        "--gid",
        "65534",
        "--die-with-parent",
        "--cap-drop",
        "ALL",
        "true",
    ]
    try:
        done = subprocess.run(probe, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, f"bwrap failed to start: {exc}"
    if done.returncode != 0:
        return False, f"bwrap cannot create namespaces here: {done.stderr.strip()}"
    return True, path


def _python_roots():
    """Folders the kernel's Python needs, read-only: the venv and the interpreter it was made from."""
    roots = set()
    for p in (
        sys.prefix,
        sys.base_prefix,
        sys.exec_prefix,
        sys.base_exec_prefix,
        os.path.dirname(os.path.realpath(sys.executable)),
    ):
        p = os.path.realpath(p)
        if p.endswith("/bin"):
            p = os.path.dirname(p)
        if p and p != "/" and not p.startswith("/usr"):
            roots.add(p)
    # a venv's bin/python is usually a symlink into the base interpreter: keep both paths valid
    roots.add(os.path.realpath(sys.prefix))
    return sorted(roots)


def bwrap_argv(*, cwd, scratch, ipc_dir, shared, env, tmp_bytes, extra_ro=()):
    """The bwrap command line (without the kernel command) for one kernel.

    cwd: the notebook's folder as the kernel sees it; scratch: the writable copy mounted there;
    ipc_dir: folder of the connection file and sockets (bound read-write); shared: host folders bound
    read-only at the same path (specdec/, data/ ...); env: the kernel's whole environment.
    """
    ok, bwrap = bwrap_status()
    if not ok:
        raise RuntimeError(bwrap)
    argv = [
        bwrap,
        "--unshare-all",
        "--unshare-user",
        "--uid",
        "65534",
        "--gid",
        "65534",
        "--hostname",
        "sandbox",
        "--die-with-parent",
        "--new-session",
        "--cap-drop",
        "ALL",
        "--clearenv",
    ]
    for key, value in sorted(env.items()):
        argv += ["--setenv", key, str(value)]
    argv += ["--ro-bind", "/usr", "/usr"]
    for top in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        host = Path("/") / top
        if host.is_symlink():
            argv += ["--symlink", os.readlink(host), str(host)]
        elif host.is_dir():
            argv += ["--ro-bind", str(host), str(host)]
    for name in ETC_FILES:
        argv += ["--ro-bind-try", f"/etc/{name}", f"/etc/{name}"]
    # the private /tmp comes before the binds: a course checked out under /tmp (the venv, specdec/,
    # data/) must stay visible on top of it
    argv += ["--proc", "/proc", "--dev", "/dev", "--size", str(int(tmp_bytes)), "--tmpfs", "/tmp"]
    for root in _python_roots():
        argv += ["--ro-bind", root, root]
    for path in list(shared) + list(extra_ro):
        argv += ["--ro-bind", str(path), str(path)]
    argv += [
        "--ro-bind",
        str(KERNEL_SCRIPT),
        KERNEL_IN_SANDBOX,
        "--bind",
        str(ipc_dir),
        str(ipc_dir),
        "--bind",
        str(scratch),
        str(cwd),
        "--chdir",
        str(cwd),
    ]
    return argv


def write_spec(path, *, argv, limits, cgroups=(), sandboxed=True):
    """Store what the launcher needs; `argv` ends with the kernel command, '{connection_file}' in it."""
    Path(path).write_text(
        json.dumps({"argv": list(argv), "limits": dict(limits), "cgroups": list(cgroups), "sandboxed": sandboxed})
    )


def launch(spec_path, connection_file, extra=()):
    """Entry point of the kernelspec: apply limits, join the cgroups, exec bwrap. Never returns."""
    spec = json.loads(Path(spec_path).read_text())
    for name, value in spec["limits"].items():
        if value and name in RLIMITS:
            try:
                resource.setrlimit(RLIMITS[name], (int(value), int(value)))
            except (ValueError, OSError):
                if spec.get("sandboxed"):  # in the sandbox the limits are not optional
                    raise
    for procs in spec.get("cgroups", []):
        try:
            Path(procs).write_text(str(os.getpid()))
        except OSError:
            pass
    argv = [connection_file if a == "{connection_file}" else a for a in spec["argv"]] + list(extra)
    # bwrap's own environment stays readable in the sandbox (/proc/1/environ): give it none of ours
    env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"} if os.path.basename(argv[0]) == "bwrap" else dict(os.environ)
    os.execve(argv[0], argv, env)


# ---------------------------------------------------------------------------------------- cgroups
def _own_cgroup_dir(controller):
    """This process's cgroup folder for a v1 controller (memory, pids) if we may create children in it."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, rel = line.split(":", 2)
        if controller in controllers.split(","):
            base = Path("/sys/fs/cgroup") / controller / rel.lstrip("/")
            if base.is_dir() and os.access(base, os.W_OK):
                return base
    return None


class CgroupLimits:
    """Best-effort cgroup (v1) limits on a whole sandbox: total memory and number of processes.

    Created as children of the grader's own cgroups (so they stay inside whatever limits the machine
    already puts on the grader); silently absent where the host does not allow it.
    """

    def __init__(self, name, memory_bytes, max_pids):
        self.dirs, self.procs = [], []
        for controller, knob, value in (
            ("memory", "memory.limit_in_bytes", memory_bytes),
            ("pids", "pids.max", max_pids),
        ):
            base = _own_cgroup_dir(controller)
            if base is None or not value:
                continue
            d = base / name
            try:
                d.mkdir(exist_ok=True)
                (d / knob).write_text(str(int(value)))
                if controller == "memory" and (d / "memory.memsw.limit_in_bytes").exists():
                    try:
                        (d / "memory.memsw.limit_in_bytes").write_text(str(int(value)))
                    except OSError:
                        pass
            except OSError:
                continue
            self.dirs.append(d)
            self.procs.append(str(d / "cgroup.procs"))

    @property
    def active(self):
        """Controllers in effect, e.g. ['memory', 'pids']."""
        return [d.relative_to("/sys/fs/cgroup").parts[0] for d in self.dirs]

    def oom_killed(self):
        """True if the kernel's out-of-memory killer fired inside this sandbox."""
        for d in self.dirs:
            try:
                lines = (d / "memory.oom_control").read_text().splitlines()
            except OSError:
                continue
            for line in lines:
                if line.startswith("oom_kill ") and int(line.split()[1]) > 0:
                    return True
        return False

    def remove(self):
        import signal
        import time

        for d in self.dirs:
            for _ in range(50):
                try:
                    pids = [int(p) for p in (d / "cgroup.procs").read_text().split()]
                except OSError:
                    pids = []
                for pid in pids:
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except OSError:
                        pass
                try:
                    d.rmdir()
                    break
                except OSError:
                    time.sleep(0.05)


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit("usage: python -m autograde.sandbox SPEC CONNECTION_FILE [KERNEL ARGS ...]")
    launch(sys.argv[1], sys.argv[2], sys.argv[3:])
