"""llama.cpp's ``llama-server`` started and stopped from Python (notebook 11), on 127.0.0.1 only.

``with LlamaServer(target_gguf, draft=draft_gguf, k=3) as server: server.complete(ids, 64)`` starts the server on
a free port, waits until it answers ``/health``, and on leaving (an error or an interrupted cell included) ends
the server's whole process group; an ``atexit`` hook ends any still running when Python exits, and the server
gets SIGTERM from the kernel if the Python that started it is killed outright. A server that does not come up
gives one RuntimeError with the end of its log, never a hang.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

from specdec.engines.install import llama_binary
from specdec.engines.processes import end, log_tail, start

HOST = "127.0.0.1"


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


class LlamaServer:
    """One llama-server process: the target, optionally a draft (speculative decoding, k drafts per round)."""

    def __init__(
        self, model, draft=None, k=3, p_min=None, parallel=1, threads=1, ctx_size=2048, start_timeout=60.0, extra=()
    ):
        self.model, self.draft, self.k, self.p_min = Path(model), draft and Path(draft), k, p_min
        self.parallel, self.threads, self.ctx_size = parallel, threads, ctx_size
        self.start_timeout, self.extra = start_timeout, list(extra)
        self.proc, self.port, self.log_path = None, None, None

    def command(self):
        cmd = [
            str(llama_binary("llama-server")),
            "-m",
            str(self.model),
            "--host",
            HOST,
            "--port",
            str(self.port),
            "-t",
            str(self.threads),
            "-tb",
            str(self.threads),
            "-c",
            str(self.ctx_size * self.parallel),
            "-np",
            str(self.parallel),
            "--no-webui",
            "--metrics",
            "--seed",
            "0",
        ]
        if self.draft is not None:
            cmd += [
                "-md",
                str(self.draft),
                "--spec-type",
                "draft-simple",
                "--spec-draft-n-max",
                str(self.k),
                "--spec-draft-n-min",
                "0",
                "-td",
                str(self.threads),
                "-tbd",
                str(self.threads),
            ]
            if self.p_min is not None:
                cmd += ["--spec-draft-p-min", str(self.p_min)]
        return cmd + self.extra

    @property
    def url(self):
        return f"http://{HOST}:{self.port}"

    def log_tail(self, n=3000):
        return log_tail(self.log_path, n)

    def __enter__(self):
        for path in [self.model] + ([self.draft] if self.draft else []):
            if not path.is_file():
                raise FileNotFoundError(f"{path} is missing: run `make engines`")
        if not llama_binary("llama-server").is_file():
            raise FileNotFoundError(f"{llama_binary('llama-server')} is missing: run `make engines`")
        self.port = free_port()
        fd, self.log_path = tempfile.mkstemp(prefix="llama-server-", suffix=".log")
        with os.fdopen(fd, "w") as log:
            self.proc = start(self.command(), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + self.start_timeout
        try:
            while True:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"llama-server exited with code {self.proc.returncode}:\n{self.log_tail()}")
                try:
                    with urllib.request.urlopen(self.url + "/health", timeout=2) as r:
                        if r.status == 200:
                            return self
                except (urllib.error.URLError, ConnectionError, TimeoutError):
                    pass
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"llama-server did not answer /health within {self.start_timeout:.0f} s:\n{self.log_tail()}"
                    )
                time.sleep(0.2)
        except BaseException:
            self.close()
            raise

    def close(self):
        if self.proc is not None:
            end(self.proc)

    def __exit__(self, *exc):
        self.close()
        return False

    def post(self, path, body, timeout=120):
        req = urllib.request.Request(
            self.url + path, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return json.loads(r.read())

    def complete(self, prompt_ids, n_predict, temperature=0.0, seed=0):
        """One non-streamed completion of token ids: (new token ids, the response's timings)."""
        body = {
            "prompt": [int(t) for t in prompt_ids],
            "n_predict": int(n_predict),
            "temperature": temperature,
            "cache_prompt": False,
            "return_tokens": True,
            "seed": seed,
            "ignore_eos": True,
        }
        if temperature == 0:
            body["top_k"] = 1
        out = self.post("/completion", body)
        return [int(t) for t in out["tokens"]], out.get("timings", {})

    def metrics(self):
        """The Prometheus text of /metrics."""
        with urllib.request.urlopen(self.url + "/metrics", timeout=10) as r:
            return r.read().decode()
