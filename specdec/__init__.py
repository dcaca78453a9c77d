"""Infrastructure for the speculative decoding course.

Tables of hardware and models, timing, plotting and loading. Never the answer to a graded cell:
every graded function is written by the learner in a notebook.
"""
import os
from pathlib import Path

# the repository's data/ folder (the package is installed editable from the repository)
DATA_DIR = Path(__file__).resolve().parent.parent / "data"

# set by the test suite to shrink measurement sweeps; a learner never needs it
QUICK = os.environ.get("SPECDEC_QUICK", "") == "1"

# set by `python -m specdec.cpu_speedup`: the benchmark's larger fixed test set (4 prompts per domain in 09)
BENCH = os.environ.get("SPECDEC_BENCH", "") == "1"
