"""Every shim of the course's moves, in one place, with its end: old names that still import (with a FutureWarning)
so that a notebook a learner saved before a move (their own copy in my-work/) still runs.

- ``MODULES``: the flat layout's modules, now in rooms (``specdec.decoding`` is ``specdec.core.decoding``); a finder
  last on ``sys.meta_path`` loads them from their room;
- ``NAMES``: names that moved from one module to another; the old module's ``__getattr__`` calls ``moved_name``;
- ``PACKAGES``: a module that became a package, whose old functions now live in one of its modules
  (``specdec.engines.cache_dir`` is ``specdec.engines.install.cache_dir``).

They go with the course release ``SHIMS_END``: tests/test_specdec_layout.py fails once pyproject.toml's version
reaches it, until they are removed (and with them this module).
"""

import importlib
import importlib.abc
import importlib.util
import sys
import warnings

SHIMS_END = "0.2.0"  # the course release that removes the shims (pyproject.toml's version; now 0.1.0)

MODULES = {
    "decoding": "core.decoding",
    "models": "core.models",
    "drafters": "core.drafters",
    "trees": "core.trees",
    "lean": "core.lean",
    "rounds": "measure.rounds",
    "bench": "measure.bench",
    "kernels": "measure.kernels",
    "timing": "measure.timing",
    "cpu_model": "measure.cpu_step_model",
    "cpu_speedup": "measure.cpu_speedup",
    "profiling": "measure.profiling",
    "insights": "measure.my_measurements",
    "train_pair": "training.train_pair",
    "train_drafters": "training.train_drafters",
    "train": "training.train",
    "corpus": "training.corpus",
    "llama_server": "engines.llama_server",
    "vllm_bench": "engines.vllm_bench",
    "vllm_client": "engines.vllm_client",
    "load": "engines.load",
    "processes": "engines.processes",
    "cards": "training.cards",
}

NAMES = {("specdec.core.lean", "time_step_parts"): "specdec.measure.profiling"}

PACKAGES = {"specdec.engines": "specdec.engines.install"}


def _warn(old, new, stacklevel):
    warnings.warn(
        f"{old} is now {new}: this notebook is older than the course's; change its import (or take the "
        "course's update)",
        FutureWarning,
        stacklevel=stacklevel,
    )


def moved_name(module, name):
    """For the old module's ``__getattr__``: a moved name, loaded from where it lives now (NAMES, then PACKAGES),
    with a FutureWarning; AttributeError for any other name."""
    new = NAMES.get((module, name))
    if new is None and module in PACKAGES and not name.startswith("__"):
        holder = importlib.import_module(PACKAGES[module])
        new = PACKAGES[module] if hasattr(holder, name) else None
    if new is None:
        raise AttributeError(f"module {module!r} has no attribute {name!r}")
    _warn(f"{module}.{name}", f"{new}.{name}", 4)
    return getattr(importlib.import_module(new), name)


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """The flat layout's module names load the module from its room, with a FutureWarning naming it. Last on
    sys.meta_path: only names nothing else finds."""

    def find_spec(self, name, path=None, target=None):
        old = name[len("specdec.") :] if name.startswith("specdec.") else None
        return importlib.util.spec_from_loader(name, self) if old in MODULES else None

    def create_module(self, spec):
        new = f"specdec.{MODULES[spec.name[len('specdec.') :]]}"
        _warn(spec.name, new, 3)
        return importlib.import_module(new)

    def exec_module(self, module):
        pass


def install():
    """Put the finder on sys.meta_path, once."""
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.append(_Finder())
