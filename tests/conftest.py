import os

# nothing in the course may reach a model hub, and plots render without a display
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("MPLBACKEND", "Agg")


import pytest  # noqa: E402


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
