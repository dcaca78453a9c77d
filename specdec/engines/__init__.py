"""Notebook 11's real engines: llama.cpp's llama-server and vLLM, built once and driven from Python
(module map: specdec/__init__.py)."""


def __getattr__(name):
    """Notebooks saved before the move imported specdec.engines' functions from here: they live in .install now
    (specdec.moved, with a FutureWarning)."""
    from specdec.moved import moved_name

    return moved_name(__name__, name)
