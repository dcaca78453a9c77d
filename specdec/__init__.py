"""Infrastructure for the speculative decoding course: never the answer to a graded cell.

Every graded function is written by the learner in a notebook; this package holds what the notebooks call to
load, measure, train and serve. Its rooms, one job each; in brackets, a module and the notebooks whose solutions
import it (tests/test_specdec_layout.py holds the lists to the notebooks' imports; no list: no notebook does):

specdec.tables, .plotting, .checks, .moved   shared by every room: hardware and model tables from data/ (tables:
                   01, 02, 06-08, 10, 12), plot helpers (plotting: 01-03, 06-08, 10, 12), the exact-type conversions
                   graded tests compare with (checks: 04, 05, 07, 09-11), and every shim of the course's moves with
                   the release after which they go (moved); they import no room
specdec.core       the decoding core: the plain KV-cached decoder and its plumbing (decoding: 04, 05, 09-12), the
                   shipped pair and the padded target (models: 04, 05, 09-12), Medusa heads and the EAGLE draft
                   (drafters: 09), the lean Llama forward (lean: 09, 12), token trees priced at batch (trees: 10),
                   the target's mixture-of-experts twin (moe_twin: 12)
specdec.measure    measuring this machine: timing and steadiness (timing: 01, 02, 05, 06, 09-12), round timing and
                   the fastest plain baseline (rounds: 05, 09), kernel paths (kernels: 09-12), torch.profiler
                   terms (profiling: 09), notebook 10's CPU step model (cpu_step_model: 10), the layer-slice
                   benchmark (bench: 06, 09), notebook 09 as a benchmark (cpu_speedup, a command),
                   my_measurements.json (my_measurements: 05, 09-11)
specdec.training   the course's own pair and drafters, trained offline from Python's own files (train,
                   train_pair, train_drafters, corpus), and their model card (cards): `python -m specdec.training.train`
specdec.engines    notebook 11's engines: built once (install: 11; `make engines`), llama-server (llama_server:
                   11), vLLM's worker (vllm_bench, run by vllm_client) and client (vllm_client: 11), a Poisson load
                   (load: 11), their processes (processes: 11)
"""

import os
from pathlib import Path

# the repository and its data/ folder (the package is installed editable from the repository)
REPO = Path(__file__).resolve().parent.parent
DATA_DIR = REPO / "data"

# set by the test suite to shrink measurement sweeps; a learner never needs it
QUICK = os.environ.get("SPECDEC_QUICK", "") == "1"

# set by `python -m specdec.measure.cpu_speedup`: the benchmark's larger fixed test set (4 prompts per domain in 09)
BENCH = os.environ.get("SPECDEC_BENCH", "") == "1"

# the shims of the course's moves (old names that still import, with their end): specdec.moved
from specdec.moved import MODULES as MOVED, NAMES as MOVED_NAMES, install as _install_shims  # noqa: E402, F401 (MOVED and MOVED_NAMES: re-exported)

_install_shims()
