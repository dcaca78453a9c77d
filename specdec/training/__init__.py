"""Training the course's own target/draft pair and its drafters, offline (module map: specdec/__init__.py)."""
