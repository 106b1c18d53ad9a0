"""The Prefect task a Dask worker runs for one calibration batch (the ``dask`` runner,
flows/runners.py), and its submission (``flows.supervisor.PrefectBackend``).

Apart from flows/runners.py so that the supervisor, which submits batches, and the runners, which
build the supervisor's backends, do not import each other.
"""

from __future__ import annotations

import functools
from typing import Any

from flows import faults
from flows.calibration import BatchItem, BatchResult, CalibrationOptions, calibrate_batch


def calibrate_batch_on_worker(task: Any, items: list[BatchItem], options: CalibrationOptions) -> list[BatchResult]:
    """``calibrate_batch`` behind the fault-injection hooks a worker checks (flows/faults.py)."""
    faults.crash_if_marked([item.hash for item in items])
    faults.sleep_if_marked([item.hash for item in items])
    return calibrate_batch(task, items, options)


@functools.lru_cache(maxsize=1)
def dask_batch_task() -> Any:
    """The Prefect task a Dask worker runs for one batch (``calibrate-on-dask``; the flow's own
    ``calibrate-batch`` task records its results). Made on first use: this module is imported when
    ``ndvm``'s parser is built, which must not import Prefect. Inputs are large (the task object)
    and results are recorded by the flow, not cached by Prefect. No Prefect retries: the supervisor
    retries the candidates of a failed batch alone."""
    from prefect import task
    from prefect.cache_policies import NO_CACHE

    return task(
        calibrate_batch_on_worker,
        name="calibrate-on-dask",
        cache_policy=NO_CACHE,
        retries=0,
        persist_result=False,
        log_prints=False,
    )


def submit_batch(runner: Any, task_obj: Any, items: list[BatchItem], options: CalibrationOptions) -> Any:
    """Submit one batch to ``runner``; returns a Prefect future whose result is list[BatchResult]."""
    return runner.submit(dask_batch_task(), parameters={"task": task_obj, "items": items, "options": options})


__all__ = ["calibrate_batch_on_worker", "dask_batch_task", "submit_batch"]
