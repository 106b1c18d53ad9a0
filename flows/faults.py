"""Test hooks for fault injection: deterministic crashes and pauses at a named stage of a run.

They exist so the fault tests (tests/test_flows_faults.py, tests/test_flows_kill.py) can kill a
real run at a chosen moment. Each hook reads an environment variable and does nothing when it is
unset (one dictionary look-up per call). Do not set them outside tests.

``NDVM_TEST_CRASH_HASHES=h1,h2``
    A calibration worker process handed a batch that contains one of these candidate hashes calls
    ``os.abort()`` (SIGABRT) before calibrating it, as a native crash would. Only worker processes
    check it (``flows.supervisor`` workers, and Dask workers through
    ``flows.dask_task.calibrate_batch_on_worker``), never the flow's own process.

``NDVM_TEST_SLOW_HASHES=h1,h2``
    A calibration worker handed a batch that contains one of these hashes sleeps for an hour
    before calibrating it, as a candidate that runs far too long would (``--candidate-seconds``).

``NDVM_TEST_PAUSE=STAGE[:N]`` and ``NDVM_TEST_PAUSE_FILE=PATH``
    The N-th time (default 1) a process of the run reaches STAGE it writes PATH (a JSON object:
    stage, pid, details) and then sleeps until it is killed. Stages:

    - ``proposal``: the flow, right after a batch of proposals was committed to the store;
    - ``calibration``: a worker, before ``ndvm.calibrate_many`` of a batch;
    - ``scoring``: a worker, after a batch was fitted and scored, before its results reach the flow;
    - ``recording``: the flow, before a batch of results is committed to the store;
    - ``logging``: the flow, after a leaderboard entry's nested MLflow run was created and before
      its contents are logged (a half-logged entry).
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterable
from typing import Any

CRASH_ENV = "NDVM_TEST_CRASH_HASHES"
SLOW_ENV = "NDVM_TEST_SLOW_HASHES"
PAUSE_ENV = "NDVM_TEST_PAUSE"
PAUSE_FILE_ENV = "NDVM_TEST_PAUSE_FILE"
STAGES = ("proposal", "calibration", "scoring", "recording", "logging")

_counts: dict[str, int] = {}
_lock = threading.Lock()


class FaultHookError(ValueError):
    """A malformed test-hook variable (an unknown stage, a count that is not a positive integer)."""


def crash_if_marked(hashes: Iterable[str]) -> None:
    """Abort this process (SIGABRT) when one of ``hashes`` is listed in $NDVM_TEST_CRASH_HASHES."""
    marked = os.environ.get(CRASH_ENV)
    if not marked:
        return
    if set(marked.split(",")) & set(hashes):
        os.abort()


def sleep_if_marked(hashes: Iterable[str]) -> None:
    """Sleep an hour when one of ``hashes`` is listed in $NDVM_TEST_SLOW_HASHES."""
    marked = os.environ.get(SLOW_ENV)
    if marked and set(marked.split(",")) & set(hashes):
        time.sleep(3600)


def _pause_target() -> tuple[str, int] | None:
    spec = os.environ.get(PAUSE_ENV)
    if not spec:
        return None
    stage, _, count = spec.partition(":")
    if stage not in STAGES:
        raise FaultHookError(f"${PAUSE_ENV}={spec!r}: unknown stage {stage!r}; use one of {', '.join(STAGES)}")
    try:
        n = int(count) if count else 1
    except ValueError:
        n = 0
    if n < 1:
        raise FaultHookError(f"${PAUSE_ENV}={spec!r}: the count after ':' must be a positive integer")
    return stage, n


def checkpoint(stage: str, **details: Any) -> None:
    """Pause here (forever) when $NDVM_TEST_PAUSE names this stage and this is its N-th arrival."""
    target = _pause_target()
    if target is None or target[0] != stage:
        return
    with _lock:
        _counts[stage] = _counts.get(stage, 0) + 1
        if _counts[stage] != target[1]:
            return
    path = os.environ.get(PAUSE_FILE_ENV)
    if path:
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w") as handle:
            json.dump({"stage": stage, "pid": os.getpid(), "details": details}, handle, default=str)
        os.replace(tmp, path)  # a reader never sees half a file
    while True:  # until the test kills the run
        time.sleep(3600)


__all__ = [
    "CRASH_ENV",
    "FaultHookError",
    "PAUSE_ENV",
    "PAUSE_FILE_ENV",
    "SLOW_ENV",
    "STAGES",
    "checkpoint",
    "crash_if_marked",
    "sleep_if_marked",
]
