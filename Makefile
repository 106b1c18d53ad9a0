# NDVM discovery: the two commands are `make run` and `make test`; both create .venv on first use.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.ndvm-installed

# Telemetry and network look-ups at start-up, switched off (see README "Offline and quiet").
export DO_NOT_TRACK := true
export PREFECT_SERVER_ANALYTICS_ENABLED := false
export PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS := 120
export PREFECT_HOME ?= $(CURDIR)/runs/prefect
export MLFLOW_DISABLE_TELEMETRY := true
export MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR := false
export MLFLOW_SERVER_ENABLE_JOB_EXECUTION := false
export LITELLM_LOCAL_MODEL_COST_MAP := True
export DASK_LOGGING__DISTRIBUTED := warning

.PHONY: run test test-all bench build native-test venv clean distclean help

help:
	@echo "make run        the main job (offline discovery on the embedded default)"
	@echo "make test       the test suite (C++ unit tests included)"
	@echo "make test-all   the test suite including slow checks"
	@echo "make bench      the benchmark suites (writes BENCHMARKS.json)"
	@echo "make build      rebuild the native extension after a C++ edit"
	@echo "make clean      remove build folders (keeps .venv)"

venv: $(STAMP)

# pip is upgraded first (much faster resolver), torch is installed explicitly from its exact
# CPU build, then the project (compiling native/ into ndvm._native) with its dev extras.
$(STAMP): pyproject.toml native/CMakeLists.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q -U pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[dev]'
	touch $(STAMP)

build: $(STAMP)
	$(PY) -m pip install -q --no-deps --no-build-isolation -e .

run: $(STAMP)
	$(VENV)/bin/ndvm demo

test: $(STAMP)
	$(PY) -m pytest -q

test-all: $(STAMP)
	$(PY) -m pytest -q -m ''

bench: $(STAMP)
	$(VENV)/bin/ndvm bench --json BENCHMARKS.json

clean:
	rm -rf build native/build

distclean: clean
	rm -rf $(VENV) runs
