"""JupyterLab in a real browser: start `jupyter lab` on a free localhost port, drive Debian's headless
Chromium through Playwright, open notebooks, run them, read back what the page shows.

Nothing here downloads a browser: Playwright only drives the Chromium that `apt-get install chromium`
put in /usr/bin. Everything the server and the kernels write (settings, workspaces, runtime files,
executed notebooks) lives in a temporary folder, never in the repository.
"""

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from autograde.release import tool_env

CHROMIUM = os.environ.get("SPECDEC_CHROMIUM", "/usr/bin/chromium")

# Without the background-networking flags, Chromium's own connections (updates, sync, field trials)
# are refused here many at a time; the page under test only talks to localhost.
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
]

# JupyterLab settings for a quiet, test-friendly page: no news or update pop-ups, every cell kept
# in the DOM (windowing would drop off-screen cells, and their images, from the page).
LAB_SETTINGS = {
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {
        "fetchNews": "false",
        "checkForUpdates": False,
        "doNotDisturbMode": True,
    },
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
    "@jupyterlab/docmanager-extension/plugin.jupyterlab-settings": {"autosave": False},
}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LabServer:
    """`jupyter lab` on 127.0.0.1:<free port>, no token, serving `root`; started from `cwd` so that
    nbgrader's validate handler reads the course's nbgrader_config.py."""

    def __init__(self, root, home, cwd, env_extra=None, log_path=None):
        self.root, self.home, self.cwd = Path(root), Path(home), Path(cwd)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env_extra = env_extra or {}
        self.log_path = Path(log_path or self.home / "jupyter-lab.log")
        self.proc = None

    def env(self):
        env = tool_env()
        # the kernel must pick matplotlib's inline backend: a test-suite MPLBACKEND=Agg would
        # silently turn every plt.show() into nothing
        env.pop("MPLBACKEND", None)
        for name, sub in (
            ("JUPYTER_CONFIG_DIR", "config"),
            ("JUPYTER_RUNTIME_DIR", "runtime"),
            ("JUPYTERLAB_SETTINGS_DIR", "settings"),
            ("JUPYTERLAB_WORKSPACES_DIR", "workspaces"),
            ("IPYTHONDIR", "ipython"),
        ):
            (self.home / sub).mkdir(parents=True, exist_ok=True)
            env[name] = str(self.home / sub)
        for rel, values in LAB_SETTINGS.items():
            path = self.home / "settings" / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(values))
        env.update(self.env_extra)
        return env

    def start(self, timeout=120):
        cmd = [
            sys.executable,
            "-m",
            "jupyterlab",
            "--no-browser",
            f"--port={self.port}",
            "--ip=127.0.0.1",
            "--port-retries=0",
            f"--ServerApp.root_dir={self.root}",
            "--IdentityProvider.token=",
            "--ServerApp.password=",
            "--ServerApp.disable_check_xsrf=True",
            "--LabApp.expose_app_in_browser=True",
            "--LabApp.news_url=None",
            "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
            "--MappingKernelManager.cull_idle_timeout=0",
            "--allow-root",
        ]
        env = self.env()
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(
            cmd, cwd=self.cwd, env=env, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"jupyter lab exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(self.url + "/api/status", timeout=5) as r:
                    if r.status == 200:
                        return self
            except (urllib.error.URLError, ConnectionError, socket.timeout):
                pass
            time.sleep(0.5)
        raise RuntimeError(f"jupyter lab did not answer within {timeout} s:\n{self.log_tail()}")

    def api(self, path, method="GET"):
        req = urllib.request.Request(self.url + path, method=method)
        with urllib.request.urlopen(req, timeout=30) as r:
            body = r.read()
        return json.loads(body) if body else None

    def shutdown_kernels(self):
        """Shut down every kernel the server runs (one notebook at a time keeps 2 cores free)."""
        for kernel in self.api("/api/kernels"):
            self.api(f"/api/kernels/{kernel['id']}", method="DELETE")

    def kernel_cpu_seconds(self):
        """CPU seconds (user + system, all threads) used so far by the kernels this server started:
        unlike wall time, this barely depends on what else the machine is doing. Linux /proc only."""
        total, tick = 0.0, os.sysconf("SC_CLK_TCK")
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
                cmdline = (stat.parent / "cmdline").read_bytes()
            except OSError:
                continue
            # fields[0] is the state; ppid, utime, stime, cutime, cstime follow at 1, 11, 12, 13, 14
            if int(fields[1]) == self.proc.pid and b"ipykernel" in cmdline:
                total += sum(int(f) for f in fields[11:15]) / tick
        return total

    def log_tail(self, n=4000):
        try:
            return self.log_path.read_text()[-n:]
        except OSError:
            return ""

    def stop(self):
        if self.proc is None or self.proc.poll() is not None:
            return
        # the server's own process group: jupyter lab and the kernels it started
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)
        self.log.close()


def launch_browser(playwright):
    if not Path(CHROMIUM).exists():
        raise FileNotFoundError(f"{CHROMIUM} is missing: `apt-get install chromium` (make test does it)")
    # Playwright gives every launch a fresh temporary user-data-dir of its own
    return playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
