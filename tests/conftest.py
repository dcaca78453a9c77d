import os

# nothing in the course may reach a model hub, and plots render without a display
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("MPLBACKEND", "Agg")


import pytest  # noqa: E402

# which test modules need what (pyproject.toml registers the markers; `make test-fast` runs none of them)
MODULE_MARKS = {
    "test_notebooks": ("notebooks",),
    "test_workspace": ("notebooks",),
    "test_exchange": ("notebooks",),
    "test_autograde": ("notebooks",),
    "test_autograde_adversarial": ("notebooks",),
    "test_autograde_environment": ("notebooks",),
    "test_autograde_integrity": ("notebooks",),
    "test_autograde_introspection": ("notebooks",),
    "test_autograde_throughput": ("notebooks", "slow"),
    "test_grading_mode": ("notebooks",),
    "test_judge_grading": ("notebooks",),
    "test_judge_attacks": ("notebooks",),
    "test_judge_secrets": ("notebooks",),
    "test_browser": ("browser", "notebooks"),
    "test_classroom": ("e2e", "notebooks"),
    "test_wrong_implementations": ("slow",),
}


def pytest_collection_modifyitems(config, items):
    for item in items:
        for mark in MODULE_MARKS.get(item.module.__name__.rpartition(".")[2], ()):
            item.add_marker(mark)


@pytest.fixture(scope="session")
def pair():
    """The shipped pair (data/models): (target, draft, tokenizer), loaded once per run. Tests read it; one that
    changes a model works on a copy (copy.deepcopy)."""
    from specdec.core.models import load_pair

    return load_pair()


@pytest.fixture(scope="session")
def grader_cache(tmp_path_factory):
    """One XDG_CACHE_HOME for every `autograde check` a test runs: the prepared gradebook of an assignment is
    made once per test run, not once per check (a test of the cache itself makes its own)."""
    return tmp_path_factory.mktemp("grader-cache")


@pytest.fixture
def one_thread():
    """Tiny models on one torch thread for the test that asks for it (`pytestmark = usefixtures("one_thread")`):
    one thread is about as fast, and does not stall when other work shares the cores (two threads waiting on
    each other made single forwards of the tiny pair up to 30x slower under load)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
