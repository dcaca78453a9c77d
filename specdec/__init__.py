"""Infrastructure for the speculative decoding course: never the answer to a graded cell.

Every graded function is written by the learner in a notebook; this package holds what the notebooks call to
load, measure, train and serve. Its rooms, one job each; in brackets, a module and the notebooks whose solutions
import it (tests/test_specdec_layout.py holds the lists to the notebooks' imports; no list: no notebook does):

specdec.tables, .plotting, .checks   shared by every room: hardware and model tables from data/ (tables: 01, 02,
                   06-08, 10, 12), plot helpers (plotting: 01-03, 06-08, 10, 12), the exact-type conversions graded
                   tests compare with (checks: 04, 05, 07, 09-11); they import no room
specdec.core       the decoding core: the plain KV-cached decoder and its plumbing (decoding: 04, 05, 09-12), the
                   shipped pair and the padded target (models: 04, 05, 09-12), Medusa heads and the EAGLE draft
                   (drafters: 09), the lean Llama forward (lean: 09), token trees priced at batch (trees: 10),
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
import importlib
import importlib.abc
import importlib.util
import os
import sys
import warnings
from pathlib import Path

# the repository and its data/ folder (the package is installed editable from the repository)
REPO = Path(__file__).resolve().parent.parent
DATA_DIR = REPO / "data"

# set by the test suite to shrink measurement sweeps; a learner never needs it
QUICK = os.environ.get("SPECDEC_QUICK", "") == "1"

# set by `python -m specdec.measure.cpu_speedup`: the benchmark's larger fixed test set (4 prompts per domain in 09)
BENCH = os.environ.get("SPECDEC_BENCH", "") == "1"

# where each module of the flat layout went (specdec.engines, a module then, is the package of its room now)
MOVED = {"decoding": "core.decoding", "models": "core.models", "drafters": "core.drafters", "trees": "core.trees",
         "lean": "core.lean", "rounds": "measure.rounds", "bench": "measure.bench", "kernels": "measure.kernels",
         "timing": "measure.timing", "cpu_model": "measure.cpu_step_model", "cpu_speedup": "measure.cpu_speedup",
         "profiling": "measure.profiling", "insights": "measure.my_measurements", "train_pair": "training.train_pair",
         "train_drafters": "training.train_drafters", "train": "training.train", "corpus": "training.corpus",
         "llama_server": "engines.llama_server", "vllm_bench": "engines.vllm_bench",
         "vllm_client": "engines.vllm_client", "load": "engines.load", "processes": "engines.processes",
         "cards": "training.cards"}


# names that moved from one module to another: (old module, name) -> the module that holds it now
MOVED_NAMES = {("specdec.core.lean", "time_step_parts"): "specdec.measure.profiling"}


def moved_name(module, name):
    """A moved name, for the old module's ``__getattr__``: loaded from its new module, with a FutureWarning, so that a
    notebook saved before the move still imports it; AttributeError for any other name."""
    new = MOVED_NAMES.get((module, name))
    if new is None:
        raise AttributeError(f"module {module!r} has no attribute {name!r}")
    warnings.warn(f"{module}.{name} is now {new}.{name}: this notebook is older than the course's; change its import "
                  "(or take the course's update)", FutureWarning, stacklevel=3)
    return getattr(importlib.import_module(new), name)


class _Moved(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """A notebook saved before the move (a learner's own copy in my-work/) imports the flat names: they load the
    module from its room, with a FutureWarning naming it. Last on sys.meta_path: only names nothing else finds."""

    def find_spec(self, name, path=None, target=None):
        old = name[len("specdec."):] if name.startswith("specdec.") else None
        return importlib.util.spec_from_loader(name, self) if old in MOVED else None

    def create_module(self, spec):
        new = f"specdec.{MOVED[spec.name[len('specdec.'):]]}"
        warnings.warn(f"{spec.name} is now {new}: this notebook is older than the course's; change its import "
                      "(or take the course's update)", FutureWarning, stacklevel=2)
        return importlib.import_module(new)

    def exec_module(self, module):
        pass


if not any(isinstance(f, _Moved) for f in sys.meta_path):
    sys.meta_path.append(_Moved())
