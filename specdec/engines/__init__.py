"""Notebook 11's real engines: llama.cpp's llama-server and vLLM, built once and driven from Python
(module map: specdec/__init__.py)."""


def __getattr__(name):
    # notebooks saved before the move imported specdec.engines' functions from here: they live in .install now
    import importlib
    import warnings

    if name.startswith("__"):
        raise AttributeError(name)
    install = importlib.import_module("specdec.engines.install")
    if hasattr(install, name):
        warnings.warn(f"specdec.engines.{name} is now specdec.engines.install.{name}: change the import",
                      FutureWarning, stacklevel=2)
        return getattr(install, name)
    raise AttributeError(f"module 'specdec.engines' has no attribute {name!r}")
