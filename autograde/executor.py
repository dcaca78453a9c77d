"""The sandboxed executor: nbgrader's Execute step, with the student's kernel confined and the run recorded.

`SandboxedExecute` replaces nbgrader's Execute preprocessor (autograde.course puts it into the Autograde
converter): the student's kernel runs confined (autograde.sandbox), the graded test cells under the kernel's
guard (autograde.guard_kernel), under a per-cell and a whole-notebook time limit and an output cap, and
crashes or hangs no longer abort the notebook (the cells after the failure are marked "not run", and
nbgrader saves the grades it has).  What happened goes into a run record (autograde.records) that the
outcomes and the feedback read.
"""

import ast
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import uuid
import warnings
from pathlib import Path

from jupyter_client.kernelspec import KernelSpecManager
from nbclient.exceptions import CellTimeoutError, DeadKernelError
from nbclient.util import run_sync
from nbformat.notebooknode import NotebookNode
from nbgrader.preprocessors import Execute
from traitlets import Bool, Integer, List, Unicode

from autograde import REPO, sandbox, scan
from autograde.assignment import HIDDEN_BEGIN, RULE_PREFIX, is_locked_cell, is_test_cell, nbgrader_meta, sha256
from autograde.guard_kernel import AUDIT_MIME, EVIDENCE_MIME, REBOUND_FIELD, STUB, evidence_tag
from autograde.judge import runner_source
from autograde.judges import judge_for, warm as warm_judges
from autograde.records import RunRecord, write_run_record

warnings.filterwarnings("ignore", message=".*not in session.*")  # nbgrader's SQLAlchemy use
warnings.filterwarnings("ignore", message="Cell is missing an id field")  # nbformat on old notebooks
GiB, MiB = 2**30, 2**20
SHARED = ("specdec", "data")  # course folders the kernel may read (read-only)
KERNEL_NAME = "autograde-sandbox"
NO_HISTORY = "--HistoryManager.hist_file=:memory:"  # the grading run never writes IPython's history

# limits of one student's kernel (each can be changed per run through the traits below)
NOTEBOOK_SECONDS = 600  # wall time of a whole notebook (the slowest solution runs in ~100 s)
MEMORY_BYTES = 4 * GiB  # address space per process: torch and the shipped pair use ~1.5 GiB
CGROUP_MEMORY_FACTOR = 1.5  # the cgroup bounds the whole sandbox, which runs a few processes
CPU_PER_WALL_SECOND = 2  # CPU seconds per wall second of the notebook limit: two busy threads
CPU_SLACK_SECONDS = 60  # kernel start-up and imports, on top of that
FILE_BYTES = 256 * MiB  # largest file the kernel may write
TMP_BYTES = 512 * MiB  # the kernel's private /tmp
FOLDER_BYTES = 512 * MiB  # all the kernel writes into its copy of the student's folder (on the host's disk)
FOLDER_POLL_SECONDS = 0.5  # how often the grader adds that folder up
MAX_PIDS = 256  # processes and threads of one sandbox (torch starts a pool per core)
CELL_OUTPUT_BYTES = 1_000_000  # output kept per cell: ample for a plot, not for a 100 MB print
NOTEBOOK_OUTPUT_BYTES = 10_000_000  # output kept per notebook
ERROR_TEXT_CHARS = 10_000  # an error message is always kept, cut to this length
TRACEBACK_LINES = 200  # and at most this many traceback lines
ERROR_LINE_CHARS = 200  # a locked cell's error, as the run record keeps it (one line)
EXIT_CODE_WAIT = (20, 0.05)  # polls x seconds to wait for a dead kernel's exit code (1 s)
STALL_GRACE_SECONDS = 10  # after a stalled probe's interrupt, for the kernel to go idle before it is stopped
STALL_GRACE_BYTES = 64 * MiB  # and its messages read (and dropped) meanwhile
LOG_TAIL_CHARS = 400  # of the kernel's log, quoted when the grader cannot run a notebook
AUDIT_EVENTS_KEPT = 50  # of the guard's audit records per notebook (the first ones)
REBOUND_NAMES_KEPT = 50  # of the names the guard says a student's cell rebound, per test cell
# modules the course's cells import that the kernel imports before any student code (so that a student's
# cell cannot put a stand-in in sys.modules first); not the display stack, which the kernel sets up itself
NOT_PREIMPORTED = ("matplotlib", "IPython", "ipywidgets", "tqdm", "pylab")
# the kernel's thread counts: OpenMP's and MKL's pools start at this size, and the guard kernel caps torch's
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "AUTOGRADE_THREADS")


SKIPPED_NOTE = (
    "[autograde: not run while grading: this cell only measures this machine, and timings are never "
    "graded; your own run of it is in your notebook]\n"
)


def assigned_names(source):
    """Global names a cell binds: assignments, loop and with targets, defs, classes and imports, at any depth of
    its top-level statements (inside an `if` too), not inside function or class bodies or comprehensions."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    names, todo = set(), list(tree.body)
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)  # its body is a scope of its own
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif not isinstance(node, (ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            todo.extend(ast.iter_child_nodes(node))
    return sorted(names)


def imported_modules(sources):
    """Module names the import statements of these cells name (`import a.b` gives a and a.b)."""
    names = []
    for source in sources:
        try:
            tree = ast.parse(scan.strip_magics(source))
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                found = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                found = [node.module]
            else:
                continue
            for name in found:
                parts = name.split(".")
                names += [".".join(parts[: i + 1]) for i in range(len(parts))]
    return [n for n in dict.fromkeys(names) if n.split(".")[0] not in NOT_PREIMPORTED]


def guard_rebound(content):
    """What the guard says a student's cell rebound, from the structured field of a test cell's error message
    (autograde.guard_kernel.error_content): a list of names, or [] (another failure, or no guard's field)."""
    names = content.get(REBOUND_FIELD)
    if content.get("ename") != "GraderIntegrityError" or not isinstance(names, list):
        return []
    return [str(name)[:ERROR_LINE_CHARS] for name in names[:REBOUND_NAMES_KEPT]]


def visible_part(source):
    """A test cell's source without its hidden block (from ``### BEGIN HIDDEN TESTS`` to the end, or to
    ``### END HIDDEN TESTS``): what the kernel runs of a judged cell, and (1-based) the line the block began at."""
    lines = source.split("\n")
    start = next((i for i, line in enumerate(lines) if line.strip().startswith(HIDDEN_BEGIN)), None)
    if start is None:
        return source, 0
    end = next(
        (i for i in range(start, len(lines)) if lines[i].strip().startswith("### END HIDDEN TESTS")), len(lines) - 1
    )
    return "\n".join(lines[:start] + lines[end + 1 :]).rstrip("\n"), start + 1


def kernel_source(source, judge=None):
    """What the student's kernel runs of a test cell of `source` whose judge is `judge` (or None): see
    ``SandboxedExecute._kernel_source``; ValueError where a hidden block has no judge."""
    visible, hidden_at = visible_part(source)
    if hidden_at and judge is None:
        raise ValueError("source: a hidden block without a judge never reaches the kernel")
    if judge is not None and getattr(judge, "replaces_visible", False):
        return source.split("\n", 1)[0]
    return visible


def _judged_line(source):
    """The line a judged cell's failure is reported at: its hidden block's first, or past the end (a cell without
    one), so that the outcome reads as the hidden tests' (its rule is the judge's)."""
    return visible_part(source)[1] or source.count("\n") + 2


def _error_output(ename, evalue):
    return NotebookNode(output_type="error", ename=ename, evalue=evalue, traceback=[f"{ename}: {evalue}"])


def _folder_size(path):
    """Bytes of the files under `path` (not following links), as far as it can be read while the kernel writes."""
    total, todo = 0, [str(path)]
    while todo:
        try:
            with os.scandir(todo.pop()) as entries:
                for entry in entries:
                    try:
                        if entry.is_dir(follow_symlinks=False):
                            todo.append(entry.path)
                        else:
                            total += entry.stat(follow_symlinks=False).st_size
                    except OSError:
                        continue
        except OSError:
            continue
    return total


def _signal_name(number):
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _warm_judges(assignment):
    try:
        warm_judges(assignment)
    except Exception:  # noqa: BLE001  (the first judged cell loads it again, and reports what fails)
        pass


class SandboxedExecute(Execute):
    """nbgrader's Execute, with the kernel in the sandbox and the run bounded and recorded."""

    use_sandbox = Bool(True, help="run the kernel in bubblewrap (False: plain subprocess)").tag(config=True)
    notebook_timeout = Integer(NOTEBOOK_SECONDS, help="wall seconds for the whole notebook").tag(config=True)
    memory_bytes = Integer(MEMORY_BYTES, help="address-space limit per process of the kernel").tag(config=True)
    cpu_seconds = Integer(0, help="CPU-time limit of the kernel (0: derived from notebook_timeout)").tag(config=True)
    file_bytes = Integer(FILE_BYTES, help="largest file the kernel may write").tag(config=True)
    tmp_bytes = Integer(TMP_BYTES, help="size of the kernel's private /tmp").tag(config=True)
    folder_bytes = Integer(FOLDER_BYTES, help="bytes in the kernel's copy of the student's folder").tag(config=True)
    max_pids = Integer(MAX_PIDS, help="processes and threads in one sandbox (cgroup, where available)").tag(config=True)
    max_output_bytes = Integer(CELL_OUTPUT_BYTES, help="output kept per cell (errors are always kept)").tag(config=True)
    max_total_output_bytes = Integer(NOTEBOOK_OUTPUT_BYTES, help="output kept per notebook").tag(config=True)
    record_dir = Unicode("", help="folder for the run records (JSON) that outcomes and feedback read").tag(config=True)
    course_cells = List(
        Unicode(), [], help="sha256 of the released notebook's code cells: code the student did not write"
    ).tag(config=True)
    quick = Bool(True, help="set SPECDEC_QUICK=1: shorter measurement sweeps (never graded)").tag(config=True)
    measure_cells = List(
        Unicode(),
        [],
        help="sha256 of the released notebook's cells tagged `measures`: course code that only times the machine",
    ).tag(config=True)
    skip_measuring = Bool(
        True,
        help="do not run a cell of measure_cells, unchanged (timings are never graded; "
        "the graded parts take their inputs from the tests)",
    ).tag(config=True)
    shared_paths = List(Unicode(), [str(REPO / p) for p in SHARED]).tag(config=True)
    run_root = Unicode("", help="where per-kernel folders go (short path: Unix socket names)").tag(config=True)
    guard = Bool(True, help="run test cells under the guard (autograde/guard_kernel.py)").tag(config=True)
    audit = Bool(True, help="install the guard's audit hook (off only to measure what it costs)").tag(config=True)
    threads = Integer(
        0,
        help="torch, OpenMP and MKL threads of the kernel, a cap the notebook cannot raise "
        "(0: one per core; `class --jobs N`: cores / N)",
    ).tag(config=True)

    # ------------------------------------------------------------------------------------ set-up
    def preprocess(self, nb, resources=None, km=None):
        info = (resources or {}).get("nbgrader", {})
        key = (info.get("student", "?"), info.get("assignment", "?"), info.get("notebook", "?"))
        self._record = RunRecord(student=key[0], assignment=key[1], notebook=key[2], sandbox=self.use_sandbox)
        self._cell_timeout = self.timeout or 0
        self._t0 = time.monotonic()
        self._stopped = None
        self._errors = {}
        self._out_bytes = 0
        self._cell_bytes = {}
        self._truncated = set()
        self._current = -1
        self._evidence = {}
        self._count_to_cell = {}
        self._test_cells = set()
        self._key = secrets.token_bytes(32)
        self._course_code = set(self.course_cells)
        self._measure_code = set(self.measure_cells) if self.skip_measuring else set()
        self._student_ran = False  # has a cell the student wrote or changed run yet?
        self._cwd = Path((resources or {}).get("metadata", {}).get("path") or os.getcwd()).resolve()
        self._run_dir = Path(tempfile.mkdtemp(prefix="ag-", dir=self.run_root or None))
        self._cgroups = None
        self._log_file = None
        self._guard_file = None
        self._folder_done, self._folder_full = threading.Event(), None
        self._sent = {}  # cell index -> the code the kernel ran for it (replayed after a restart)
        try:
            self._prepare_kernel(nb)
            self._watch_folder()
            try:
                nb, resources = super().preprocess(nb, resources, km)
            except Exception as exc:
                if not self._record.events or self._record.stop is None:
                    where = " < ".join(
                        f"{f.name} ({Path(f.filename).name}:{f.lineno})"
                        for f in reversed(traceback.extract_tb(exc.__traceback__)[-4:])
                    )
                    self._event(
                        "error",
                        max(self._current, 0),
                        f"the grader could not run the notebook: {type(exc).__name__}: "
                        f"{str(exc).splitlines()[0] if str(exc) else ''} at {where}; kernel log: {self._log_tail()}",
                    )
                raise
        finally:
            self._record.seconds = round(time.monotonic() - self._t0, 2)
            self._record.output_bytes = self._out_bytes
            if getattr(self, "_log_file", None) is not None:
                self._log_file.close()
            if self._cgroups is not None:
                if self._cgroups.oom_killed() and self._record.stop and self._record.stop["kind"] == "crash":
                    self._record.stop["message"] += " (out of memory: the sandbox's memory limit was reached)"
                self._cgroups.remove()
            self._folder_done.set()
            shutil.rmtree(self._run_dir, ignore_errors=True)
            if self.record_dir:
                write_run_record(self.record_dir, self._record)
        return nb, resources

    def _prepare_kernel(self, nb):
        run = self._run_dir
        (run / "ipc").mkdir()
        (run / "spec" / KERNEL_NAME).mkdir(parents=True)
        self._log_path = run / "kernel.log"
        self._test_cells = {i for i, c in enumerate(nb.cells) if is_test_cell(c)}
        # test cells with a judge outside the kernel (autograde.judge): the kernel gets their visible part only
        self._judged = {
            i: fn
            for i, c in enumerate(nb.cells)
            if is_test_cell(c)
            and (fn := judge_for(self._record.assignment, nbgrader_meta(c).get("grade_id", ""))) is not None
        }
        # no hidden test runs in the student's kernel: a test cell whose hidden block is test code and not a judge's
        # marker stops the run before the kernel starts (a course error the instructor sees, not a student's zero)
        unjudged = [
            nbgrader_meta(c).get("grade_id")
            for i, c in enumerate(nb.cells)
            if is_test_cell(c) and i not in self._judged and visible_part(c.source)[1]
        ]
        if unjudged:
            raise RuntimeError(
                f"hidden tests without a judge in {self._record.assignment} ({', '.join(unjudged)}): the "
                f"grader runs no hidden test in the student's kernel (autograde/judges/)"
            )
        self._judge_seed = secrets.randbits(64)  # drawn per grading run, never sent to the kernel
        # where every test cell has a judge, no verdict signed in the kernel counts, so the kernel gets no key
        # (its guard draws one of its own, known to nobody else); only a test decided in the kernel needs one
        self._key_in_kernel = bool(self._test_cells - set(self._judged))
        if self._judged:  # the judges' own models load while the kernel starts and runs the notebook
            threading.Thread(target=_warm_judges, args=(self._record.assignment,), daemon=True).start()
        python = sys.executable
        guard_file = run / "ipc" / "guard.json"
        if self.guard:
            # the kernel reads this and deletes it before any cell runs (autograde/guard_kernel.py)
            course = [c.source for c in nb.cells if is_test_cell(c) or is_locked_cell(c)]
            guard = {
                "key": self._key.hex() if self._key_in_kernel else "",
                "audit": self.audit,
                "tests": {
                    sha256(src): src
                    for src in (self._kernel_source(i, c) for i, c in enumerate(nb.cells) if is_test_cell(c))
                },
                "locked": {sha256(c.source): nbgrader_meta(c).get("grade_id") for c in nb.cells if is_locked_cell(c)},
                "packages": ["specdec"],
                "preimport": imported_modules(course),
                "probe": runner_source() if self._judged else "",
            }
            self._guard_file, self._guard_text = guard_file, json.dumps(guard)
            self._write_guard_file()
        env = {
            "PATH": f"{os.path.dirname(python)}:/usr/local/bin:/usr/bin:/bin",
            "HOME": "/tmp",
            "LANG": "C.UTF-8",
            "LC_ALL": "C.UTF-8",
            "MPLCONFIGDIR": "/tmp/matplotlib",
            "XDG_CACHE_HOME": "/tmp/.cache",
            "PYTHONNOUSERSITE": "1",
            "PYTHONDONTWRITEBYTECODE": "1",
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "HF_DATASETS_OFFLINE": "1",
            "AUTOGRADE_GUARD_FILE": str(guard_file) if self.guard else "",
            # the course's own package from this checkout, however (or wherever) it was installed
            "PYTHONPATH": str(REPO),
        }
        if self.quick:
            env["SPECDEC_QUICK"] = "1"
        # kernels graded side by side share the cores: each gets its share, and the guard kernel caps
        # torch.set_num_threads at it (a notebook's own set_num_threads(2) would oversubscribe two cores 2x)
        threads = self.threads or os.cpu_count() or 1
        self._record.threads = threads
        env.update({name: str(threads) for name in THREAD_VARIABLES})
        for k, v in os.environ.items():  # course settings the instructor exported
            if k.startswith("SPECDEC_") and k not in env:
                env[k] = v
        cpu = self.cpu_seconds or CPU_PER_WALL_SECOND * self.notebook_timeout + CPU_SLACK_SECONDS
        limits = {"memory_bytes": self.memory_bytes, "cpu_seconds": cpu, "file_bytes": self.file_bytes}
        cgroup_procs = []
        if self.use_sandbox:
            scratch = run / "work"
            # the student's files, not the notebook: the copy nbgrader just wrote holds the hidden tests
            shutil.copytree(self._cwd, scratch, symlinks=True, ignore=shutil.ignore_patterns("*.ipynb"))
            os.chmod(scratch, 0o777)
            argv = sandbox.bwrap_argv(
                cwd=self._cwd,
                scratch=scratch,
                ipc_dir=run / "ipc",
                shared=[p for p in self.shared_paths if os.path.exists(p)],
                env=env,
                tmp_bytes=self.tmp_bytes,
            )
            argv += [python, sandbox.KERNEL_IN_SANDBOX, "-f", "{connection_file}", NO_HISTORY]
            self._cgroups = sandbox.CgroupLimits(
                f"autograde-{uuid.uuid4().hex[:12]}", int(self.memory_bytes * CGROUP_MEMORY_FACTOR), self.max_pids
            )
            cgroup_procs = self._cgroups.procs
            self._record.cgroups = self._cgroups.active
        else:
            argv = [python, str(sandbox.KERNEL_SCRIPT), "-f", "{connection_file}", NO_HISTORY]
        sandbox.write_spec(
            run / "spec.json", argv=argv, limits=limits, cgroups=cgroup_procs, sandboxed=self.use_sandbox
        )
        kernelspec = {
            "argv": [python, "-m", "autograde.sandbox", str(run / "spec.json"), "{connection_file}"],
            "display_name": "autograde (sandboxed Python)",
            "language": "python",
            "interrupt_mode": "message",
            "env": {}
            if self.use_sandbox
            else {
                "AUTOGRADE_GUARD_FILE": env["AUTOGRADE_GUARD_FILE"],
                "PYTHONPATH": os.pathsep.join(filter(None, [env["PYTHONPATH"], os.environ.get("PYTHONPATH")])),
                "IPYTHONDIR": str(run / "ipython"),
                **{name: env[name] for name in THREAD_VARIABLES},
                **({"SPECDEC_QUICK": "1"} if self.quick else {}),
            },
        }
        (run / "spec" / KERNEL_NAME / "kernel.json").write_text(json.dumps(kernelspec))

    def _write_guard_file(self):
        """The guard's instructions, for a kernel about to start (it reads the file and deletes it)."""
        fd = os.open(self._guard_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(self._guard_text)

    def _kernel_source(self, index, cell):
        """What the kernel runs of a test cell: its visible part (a cell without a hidden block: all of it); nothing
        but its docstring where the judge repeats the visible check on inputs of its own (``replaces_visible``: a
        statistical test the learner runs in the notebook and the judge runs again, fresh, outside the kernel).
        Never a hidden block: `_prepare_kernel` refuses a hidden block without a judge."""
        return kernel_source(cell.source, self._judged.get(index))

    def _judge(self, index, cell):
        """Run cell `index`'s judge against the kernel (the visible part passed); an error output when it fails."""
        import numpy as np
        from jupyter_client import BlockingKernelClient

        from autograde.judge import KernelProbe, NoAnswer, ProbeError, Stalled

        client = BlockingKernelClient()
        client.load_connection_info(self.km.get_connection_info())
        client.start_channels()
        line = _judged_line(cell.source)
        t0, probe = time.monotonic(), None
        try:
            remaining = max(1.0, self.notebook_timeout - (time.monotonic() - self._t0))
            probe = KernelProbe(
                client, timeout=min(remaining, self._cell_timeout or remaining), stub=self.guard, alive=self._alive
            )
            self._judged[index](probe, np.random.default_rng([self._judge_seed, index]))
            return None
        except AssertionError as exc:
            ename, evalue = "AssertionError", str(exc)
            came_back = str(getattr(exc, "came_back", ""))[:200]
        except Stalled as exc:  # the student's function ran past the probe's deadline or flooded the grader
            ename, evalue, came_back = "AssertionError", exc.rule, exc.came_back
            self._event("timeout", index, f"cell {index}: the judge's probe {exc.came_back}; it was interrupted")
            if not self._settle(client, exc.msg_id) and not self._restart(index):
                self._stop(
                    "timeout",
                    index,
                    f"cell {index}: the function the judge called {exc.came_back} and kept running after an "
                    f"interrupt; the kernel was stopped",
                )
                self._kill_kernel()
        except ProbeError as exc:
            ename, evalue, came_back = "AssertionError", f"no usable answer from the kernel: {exc}", ""
            if isinstance(exc, NoAnswer):
                self._event(
                    "tampered",
                    index,
                    f"the kernel ran the judge's probe and gave no answer ({exc}): the "
                    f"probe or the kernel's messages had been replaced",
                )
        except Exception as exc:  # noqa: BLE001  (what came back crashed the judge: the student's cell fails)
            # an answer no judge foresaw (an overflowing number, an object posing as a tensor) is the student's
            # failure for this cell, not the grader's: the cell says so, and the run record keeps the judge's
            # exception and where it was raised for the instructor (the solution, graded as a control, would show
            # a judge's own bug: see the preflight)
            name = getattr(self._judged[index], "__name__", "?")
            ename, came_back = "AssertionError", f"gave an answer the judge could not read ({type(exc).__name__})"
            evalue = f"{RULE_PREFIX}returns what the contract says, of the type it says ({came_back})"
            self._event(
                "judge",
                index,
                f"cell {index}: {name} raised {type(exc).__name__}: {str(exc)[:ERROR_LINE_CHARS]} at "
                + " < ".join(f"{f.name}:{f.lineno}" for f in reversed(traceback.extract_tb(exc.__traceback__)[-4:])),
            )
        finally:
            client.stop_channels()
            self._record.judge_seconds.append(
                {
                    "cell": index,
                    "seconds": round(time.monotonic() - t0, 3),
                    "in_kernel": round(probe.waited if probe else 0.0, 3),
                }
            )
        rule = evalue[len(RULE_PREFIX) :] if evalue.startswith(RULE_PREFIX) else ""
        self._record.judged.append({"cell": index, "rule": rule[:ERROR_TEXT_CHARS], "came_back": came_back})
        err = _error_output(ename, evalue[:ERROR_TEXT_CHARS])
        err.traceback = [f"autograde: test cell line {line}", f"{ename}: {evalue[:ERROR_TEXT_CHARS]}"]
        return err

    def _watch_folder(self):
        """Files are capped one by one (RLIMIT_FSIZE) and /tmp is a bounded tmpfs; the kernel's copy of the
        student's folder lies on the host's disk, so a thread adds it up every FOLDER_POLL_SECONDS and stops the
        kernel past `folder_bytes` (a cell that wrote 2,000 MB of files there in 3.8 s was not stopped before)."""
        scratch = self._run_dir / "work"
        if not self.use_sandbox or not scratch.is_dir():
            return

        def watch():
            while not self._folder_done.wait(FOLDER_POLL_SECONDS):
                if _folder_size(scratch) > self.folder_bytes:
                    self._folder_full = (
                        f"the kernel wrote more than {self.folder_bytes // MiB} MB into its folder while running "
                        f"cell {self._current}; it was stopped"
                    )
                    self._kill_kernel()
                    return

        threading.Thread(target=watch, daemon=True).start()

    def _alive(self):
        proc = getattr(getattr(self.km, "provisioner", None), "process", None)
        return proc is None or proc.poll() is None

    def _settle(self, client, msg_id):
        """After a stalled probe: interrupt the kernel and read, dropping them, its messages until the probe's
        execution goes idle. False where it does not within STALL_GRACE_SECONDS, or floods past STALL_GRACE_BYTES
        first (the caller stops the kernel): a probe never holds the class. What was in flight when the interrupt
        landed still arrives, so the grace in bytes is a few times a probe's own cap."""
        try:
            client.control_channel.send(client.session.msg("interrupt_request", content={}))
        except Exception:  # noqa: BLE001  (a kernel that cannot be interrupted is stopped)
            return False
        return self._wait_idle(client, msg_id, STALL_GRACE_SECONDS)

    @staticmethod
    def _wait_idle(client, msg_id, timeout):
        """Read the kernel's messages, dropping them, until execution `msg_id` goes idle: True, or False past
        `timeout` seconds or STALL_GRACE_BYTES of messages."""
        from autograde.judge import message_bytes

        deadline, read = time.monotonic() + timeout, 0
        while (left := deadline - time.monotonic()) > 0:
            try:
                msg = client.get_iopub_msg(timeout=left)
            except Exception:  # noqa: BLE001  (queue.Empty: out of time)
                return False
            read += message_bytes(msg.get("content", {}))
            if read > STALL_GRACE_BYTES:
                return False
            if (
                msg.get("parent_header", {}).get("msg_id") == msg_id
                and msg.get("msg_type") == "status"
                and msg.get("content", {}).get("execution_state") == "idle"
            ):
                return True
        return False

    def _restart(self, index):
        """After a probe the kernel would not give up (it caught every interrupt): start the kernel again and run,
        in order, the code it had run for the cells up to `index` (their outputs dropped, a measuring cell left
        out as before), so that the notebook goes on with what its cells define and the stalled function costs
        its own cell only. False where the kernel does not start, or the replay fails or runs past the
        notebook's time (the caller stops the notebook)."""
        from jupyter_client import BlockingKernelClient

        t0 = time.monotonic()
        try:
            if self._guard_file is not None:
                self._guard_file.unlink(missing_ok=True)
                self._write_guard_file()
            run_sync(self.km._async_restart_kernel)(now=True)  # the manager may be an async one
            client = BlockingKernelClient()
            client.load_connection_info(self.km.get_connection_info())
            client.start_channels()
        except Exception as exc:  # noqa: BLE001  (no kernel: the notebook stops)
            self._event("restart", index, f"the kernel could not be started again: {type(exc).__name__}: {exc}")
            return False
        try:
            remaining = self.notebook_timeout - (time.monotonic() - self._t0)
            client.wait_for_ready(timeout=max(1.0, remaining))
            for j, code in sorted(self._sent.items()):
                if j > index:
                    break
                left = self.notebook_timeout - (time.monotonic() - self._t0)
                if left < 1 or not self._wait_idle(client, client.execute(code, allow_stdin=False), left):
                    self._event("restart", index, f"the kernel was started again, but replaying cell {j} failed")
                    return False
        except Exception as exc:  # noqa: BLE001
            self._event("restart", index, f"the kernel was started again, but not ready: {type(exc).__name__}: {exc}")
            return False
        finally:
            client.stop_channels()
        self._event(
            "restart",
            index,
            f"cell {index}: the kernel was started again and cells 0-{index} replayed in "
            f"{time.monotonic() - t0:.1f} s; the notebook goes on",
        )
        return True

    def _unjudged(self, cell):
        """The error output of a judged cell left unjudged because a locked cell failed before it."""
        failed = self._record.locked_errors[0]
        message = (
            f"not judged: the course cell {failed['grade_id']!r} failed before it ({failed['ename']}), so the "
            f"notebook lacks what its tests build on"
        )
        err = _error_output("NotJudged", message)
        err.traceback = [f"autograde: test cell line {_judged_line(cell.source)}", f"NotJudged: {message}"]
        return err

    def create_kernel_manager(self):
        ksm = KernelSpecManager(kernel_dirs=[str(self._run_dir / "spec")], ensure_native_kernel=False)
        self.kernel_name = KERNEL_NAME
        self.km = self.kernel_manager_class(kernel_name=KERNEL_NAME, kernel_spec_manager=ksm, config=self.config)
        self.km.connection_file = str(self._run_dir / "ipc" / "connection.json")
        # Unix sockets in the kernel's own folder, sandboxed or not: TCP ports are picked free and bound later,
        # so kernels started side by side could race for one (a start lost that way was a grading `error`)
        self.km.transport = "ipc"
        self.km.ip = str(self._run_dir / "ipc" / "k")
        self.shutdown_kernel = "immediate"
        return self.km

    async def async_start_new_kernel(self, **kwargs):
        self._log_file = open(self._log_path, "wb")
        kwargs.setdefault("stdout", self._log_file)
        kwargs.setdefault("stderr", subprocess.STDOUT)
        kwargs.setdefault("stdin", subprocess.DEVNULL)
        kwargs["cwd"] = str(self._cwd)
        return await super().async_start_new_kernel(**kwargs)

    start_new_kernel = run_sync(async_start_new_kernel)

    def _log_tail(self, n=LOG_TAIL_CHARS):
        try:
            text = self._log_path.read_text(errors="replace")
        except OSError:
            return "(none)"
        return " ".join(text[-n:].split()) or "(empty)"

    # --------------------------------------------------------------------------------- execution
    def _event(self, kind, cell, message):
        self._record.events.append({"kind": kind, "cell": cell, "message": message})

    def _stop(self, kind, cell, message):
        self._stopped = message
        self._record.stop = {"kind": kind, "cell": cell, "message": message}
        self._event(kind, cell, message)

    def _exit_cause(self):
        proc = getattr(getattr(self.km, "provisioner", None), "process", None)
        rc = None
        if proc is not None:
            polls, pause = EXIT_CODE_WAIT
            for _ in range(polls):
                rc = proc.poll()
                if rc is not None:
                    break
                time.sleep(pause)
        self._record.exit_code = rc
        if rc is None:
            return ""
        if rc < 0:
            sig = -rc
        elif rc > 128:
            sig = rc - 128
        else:
            return f" (exit code {rc})"
        why = {
            signal.SIGKILL: "killed: out of memory or a limit",
            signal.SIGXCPU: "CPU-time limit reached",
            signal.SIGXFSZ: "file-size limit reached",
            signal.SIGSEGV: "segmentation fault",
            signal.SIGABRT: "aborted",
        }.get(sig, "")
        return f" ({_signal_name(sig)}{': ' + why if why else ''})"

    def _kill_kernel(self):
        try:
            self.km.provisioner.process.kill()
        except Exception:  # noqa: BLE001
            pass

    def preprocess_cell(self, cell, resources, index):
        self._current = index
        if cell.cell_type != "code" or not cell.source.strip():
            return cell, resources
        if self._stopped:
            cell.outputs = [_error_output("NotRun", f"not run: {self._stopped}")]
            return cell, resources
        remaining = self.notebook_timeout - (time.monotonic() - self._t0)
        if remaining < 1:
            self._stop(
                "timeout", index, f"the notebook time limit ({self.notebook_timeout} s) was reached before cell {index}"
            )
            self._kill_kernel()
            cell.outputs = [_error_output("NotRun", f"not run: {self._stopped}")]
            return cell, resources
        self.timeout = max(1, int(min(self._cell_timeout or remaining, remaining)))
        if not is_test_cell(cell) and sha256(cell.source) in self._measure_code:
            # the course's own measuring cell, as released: grading spends no time on this machine's timings
            self._record.skipped.append({"cell": index, "names": assigned_names(cell.source)})
            cell.outputs = [NotebookNode(output_type="stream", name="stdout", text=SKIPPED_NOTE)]
            cell.execution_count = None
            return cell, resources
        source, nonce = cell.source, None
        if is_test_cell(cell):
            cell.source = self._kernel_source(index, cell)  # the hidden block never reaches the kernel
        if self.guard and is_test_cell(cell):
            # the kernel runs the test from the source the grader gave it: the request names it, no more
            digest, nonce = sha256(cell.source), secrets.token_hex(16)
            cell.source = f"{STUB}{digest} {nonce}"
        self._sent[index] = cell.source
        try:
            cell, resources = super().preprocess_cell(cell, resources, index)
        except DeadKernelError:
            cause = self._folder_full or f"the kernel died while running cell {index}{self._exit_cause()}"
            self._stop("crash", index, cause)
            cell.outputs.append(_error_output("DeadKernelError", self._stopped))
        except CellTimeoutError:
            self._stop(
                "timeout",
                index,
                f"cell {index} kept running after the {self.timeout} s limit and an interrupt; the kernel was stopped",
            )
            self._kill_kernel()
            cell.outputs.append(_error_output("CellTimeoutError", self._stopped))
        finally:
            cell.source = source
        if cell.get("execution_count") is not None:
            self._count_to_cell[cell["execution_count"]] = index
        if nonce is not None and index not in self._judged and not self._stopped and not self._errors.get(index):
            got = self._evidence.get(index) or {}
            want = evidence_tag(self._key, digest, nonce)
            if not (
                got.get("test") == digest
                and got.get("nonce") == nonce
                and secrets.compare_digest(str(got.get("tag", "")), want)
            ):
                message = (
                    "the grader received no signed verdict from its guard for this test, so it counts as "
                    "failed: the kernel's test runner or its messages had been replaced"
                )
                self._event("tampered", index, message)
                err = _error_output("GraderIntegrityError", message)
                err.traceback = ["autograde: test cell line 0", f"GraderIntegrityError: {message}"]
                self._errors.setdefault(index, []).append(err)
        if index in self._judged and not self._stopped and not self._errors.get(index):
            # a course cell (setup, a given cell) that failed leaves the notebook without what the judges build on
            # (the course's data, its given names): the cell fails unjudged and the run reports that cell's error
            err = self._unjudged(cell) if self._record.locked_errors else self._judge(index, cell)
            if err is not None:
                self._errors.setdefault(index, []).append(err)
        # an error output can never be cleared or dropped (a test cell must not pass by losing it)
        for err in self._errors.get(index, []):
            if err not in cell.outputs:
                cell.outputs.append(err)
        if is_locked_cell(cell) and self._errors.get(index):
            err = self._errors[index][0]
            first = (str(err.get("evalue", "")).splitlines() or [""])[0][:ERROR_LINE_CHARS]
            self._record.locked_errors.append(
                {
                    "cell": index,
                    "grade_id": nbgrader_meta(cell).get("grade_id", "?"),
                    "ename": str(err.get("ename")),
                    "evalue": first,
                    "after_student_code": self._student_ran,
                }
            )
        elif not is_test_cell(cell) and sha256(cell.source) not in self._course_code:
            self._student_ran = True
        return cell, resources

    async def _async_handle_timeout(self, timeout, cell=None):
        self._event("timeout", self._current, f"cell {self._current} ran longer than {timeout} s and was interrupted")
        index = self._current
        if (
            cell is not None
            and index not in self._test_cells
            and sha256(cell.source) in self._course_code
            and not any(t["cell"] == index for t in self._record.course_timeouts)
        ):
            self._record.course_timeouts.append({"cell": index, "seconds": int(timeout)})
        return await super()._async_handle_timeout(timeout, cell)

    def _guard_message(self, data, cell_index):
        """The guard's own messages (audit records, a test's signed verdict): kept in the run record only."""
        try:
            if EVIDENCE_MIME in data:
                verdict = json.loads(data[EVIDENCE_MIME])
                if isinstance(verdict, dict):
                    self._evidence[cell_index] = verdict
            if AUDIT_MIME in data:
                kept = self._record.audit
                for event in json.loads(data[AUDIT_MIME]):
                    if len(kept) >= AUDIT_EVENTS_KEPT or not isinstance(event, dict):
                        break
                    origin = self._count_to_cell.get(event.get("origin"), cell_index)
                    kept.append(
                        {
                            "severity": "tamper" if event.get("severity") == "tamper" else "flag",
                            "what": str(event.get("what", ""))[:200],
                            "cell": origin,
                            "while_cell": cell_index,
                            "during_test": bool(event.get("during_test")),
                            "refused": bool(event.get("refused")),
                        }
                    )
        except (TypeError, ValueError):
            pass

    def output(self, outs, msg, display_id, cell_index):
        msg_type = msg["msg_type"]
        data = (msg.get("content") or {}).get("data") or {}
        if msg_type == "display_data" and isinstance(data, dict) and (AUDIT_MIME in data or EVIDENCE_MIME in data):
            self._guard_message(data, cell_index)
            return None
        if cell_index in self._test_cells and msg_type in ("execute_result", "display_data"):
            # nbgrader reads a number in a test cell's result as partial credit, even before an error output
            return None
        if cell_index in self._test_cells and msg_type == "stream" and msg.get("content", {}).get("name") == "stderr":
            # a warning the learner's code printed is not a failed test (nbgrader scores stderr as an error):
            # the verdict is the guard's error output alone
            msg = {**msg, "content": {**msg["content"], "name": "stdout"}}
        if msg_type == "error":
            out = super().output(outs, msg, display_id, cell_index)
            if out is not None:
                # kept whatever the caps (the error decides the grade), but not a 100 MB message
                out.evalue = str(out.get("evalue", ""))[:ERROR_TEXT_CHARS]
                out.traceback = [
                    str(line)[:ERROR_TEXT_CHARS] for line in list(out.get("traceback", []))[:TRACEBACK_LINES]
                ]
                self._errors.setdefault(cell_index, []).append(out)
            names = guard_rebound(msg.get("content") or {}) if cell_index in self._test_cells else []
            if names and not any(r["cell"] == cell_index for r in self._record.rebound):
                self._record.rebound.append({"cell": cell_index, "names": names})
            return out
        content = msg.get("content", {})
        size = len(content.get("text", "")) + sum(len(str(v)) for v in (content.get("data") or {}).values())
        cell_bytes = self._cell_bytes.get(cell_index, 0)
        if cell_bytes + size > self.max_output_bytes or self._out_bytes + size > self.max_total_output_bytes:
            if cell_index not in self._truncated:
                self._truncated.add(cell_index)
                limit = (
                    f"{self.max_output_bytes:,} bytes in one cell"
                    if cell_bytes + size > self.max_output_bytes
                    else f"{self.max_total_output_bytes:,} bytes in the notebook"
                )
                self._event("output", cell_index, f"output truncated: cell {cell_index} printed more than {limit}")
                outs.append(
                    NotebookNode(
                        output_type="stream", name="stderr", text=f"[autograde: output truncated: more than {limit}]\n"
                    )
                )
            return None
        self._out_bytes += size
        self._cell_bytes[cell_index] = cell_bytes + size
        return super().output(outs, msg, display_id, cell_index)
