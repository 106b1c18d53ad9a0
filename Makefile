# NDVM discovery: the two commands are `make run` and `make test`; both create .venv on first use.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.ndvm-installed

# Telemetry and network look-ups at start-up, switched off (see README "Offline and quiet"): the
# KEY=value lines of flows/offline.env, the one list that ndvm's Python side reads as well.
include flows/offline.env
export $(shell sed -n 's/^\([A-Z][A-Z0-9_]*\)=.*/\1/p' flows/offline.env)
export PREFECT_HOME ?= $(CURDIR)/runs/prefect

.PHONY: run test test-heavy test-all lint bench build fuzz sanitize ui venv clean distclean help

help:
	@echo "make run        the main job (offline discovery on the embedded default)"
	@echo "make test       the test suite (C++ unit tests included)"
	@echo "make test-heavy the end-to-end and slow checks make test leaves out (CI runs both)"
	@echo "make test-all   every test: make test and make test-heavy in one run"
	@echo "make lint       ruff (lint + format check), mypy --strict on ndvm/, clang-format check"
	@echo "make bench      the benchmark suites (writes BENCHMARKS.json)"
	@echo "make build      rebuild the native extension after a C++ edit"
	@echo "make ui         open the MLflow UI over runs/ (http://127.0.0.1:5000)"
	@echo "make fuzz       coverage-guided fuzzing of the runtime (FUZZ_SECONDS, default 60)"
	@echo "make sanitize   AddressSanitizer + UBSan build, C++ tests and a Python smoke"
	@echo "make clean      remove build folders (keeps .venv)"

venv: $(STAMP)

# pip is upgraded first (much faster resolver), torch is installed explicitly in its exact CPU
# build (on Linux from the PyTorch CPU wheel index, as the Dockerfile does; when that index cannot
# be reached, from the default index with a warning: scripts/install_torch.sh), then the project
# (compiling native/ into ndvm._native) with its dev extras.
# Each step says what it does and when it started: the last one compiles native/ for minutes.
$(STAMP): pyproject.toml native/CMakeLists.txt scripts/install_torch.sh
	@echo "[venv 1/4 $$(date +%T)] creating $(VENV) with $(PYTHON)"
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@echo "[venv 2/4 $$(date +%T)] upgrading pip"
	$(PY) -m pip install -q -U pip
	@echo "[venv 3/4 $$(date +%T)] installing torch's CPU build (about 750 MB)"
	scripts/install_torch.sh $(PY)
	@echo "[venv 4/4 $$(date +%T)] installing the project and its dev extras; compiling native/ into"
	@echo "            ndvm._native takes 2-6 minutes on 2 cores (pip's progress below)"
	set -o pipefail; $(PY) -m pip install -e '.[dev]' | { grep -E --line-buffered '^(Collecting|Building|Successfully)' || true; }
	touch $(STAMP)
	@echo "[venv done $$(date +%T)] $(VENV) is ready: call .venv/bin/ndvm, or source .venv/bin/activate"

build: $(STAMP)
	$(PY) -m pip install -q --no-deps --no-build-isolation -e .

# The main job: an offline discovery run on the embedded default (ENSO, mutation proposer).
run: $(STAMP)
	$(VENV)/bin/ndvm discover

ui: $(STAMP)
	$(VENV)/bin/ndvm ui

test: $(STAMP)
	$(PY) -m pytest -q

# What `make test` leaves out to stay under 15 minutes: the end-to-end paths and kill/disk chains
# (heavy) and the long randomized checks (slow). CI (.ci/run) runs it after `make test`.
test-heavy: $(STAMP)
	$(PY) -m pytest -q -m 'heavy or slow'

test-all: $(STAMP)
	$(PY) -m pytest -q -m ''

# mypy reads the binding's types from a stub generated from the built extension (not kept in git,
# so it cannot drift from native/python/module.cc).
lint: $(STAMP)
	$(VENV)/bin/pybind11-stubgen ndvm._native -o build/stubs
	cp build/stubs/ndvm/_native.pyi ndvm/_native.pyi
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	$(VENV)/bin/clang-format --dry-run -Werror $$(git ls-files 'native/*.cc' 'native/*.h')

bench: $(STAMP)
	$(VENV)/bin/ndvm bench --json BENCHMARKS.json

fuzz:
	scripts/fuzz.sh

sanitize: $(STAMP)
	scripts/sanitize.sh

clean:
	rm -rf build native/build

distclean: clean
	rm -rf $(VENV) runs
