"""Measuring this machine: timings that survive a noisy 2-core CPU, round terms, kernel paths, profiles,
benchmarks and the learner's saved measurements (module map: specdec/__init__.py)."""
