import os

# nothing in the course may reach a model hub, and plots render without a display
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("MPLBACKEND", "Agg")


import pytest  # noqa: E402


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
