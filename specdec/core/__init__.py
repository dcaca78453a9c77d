"""The decoding core: the plain decoder every speedup is measured against, the models, the drafters that
ride on the target, the lean forward and token trees (module map: specdec/__init__.py)."""
