import os

# nothing in the course may reach a model hub, and plots render without a display
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("MPLBACKEND", "Agg")
