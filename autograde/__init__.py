"""The course's grading tool: release learner notebooks, self-check one notebook, grade a class."""
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SOLUTIONS = REPO / "solutions"
NOTEBOOKS = REPO / "notebooks"
COURSE_ID = "speculative-decoding"           # nbgrader_config.py says the same (tests/test_exchange.py)
EXCHANGE = REPO / "autograde" / "work" / "exchange"   # the learner's local exchange (notebooks/nbgrader_config.py)


def assignments():
    """Names of the assignments (folders of solutions/ holding a notebook), in course order."""
    return sorted(p.name for p in SOLUTIONS.iterdir() if p.is_dir() and any(p.glob("*.ipynb")))
