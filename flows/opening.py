"""Opening a run: a new run in the store, or the continuation of a stopped or killed one; the
program library of earlier runs on the same data (flows/night.py); the MLflow parent run.

``open_run`` is what ``flows.discover.Discovery`` does first, before it builds its stages.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import asdict, dataclass
from typing import Any

from flows import faults
from flows.calibration import BatchItem
from flows.errors import DiscoveryError
from flows.mlflow_log import RunTracking
from flows.night import open_run_library
from flows.problem import probe_inputs
from storage import StoreError


@dataclass
class OpenedRun:
    """A run ready to go: its id, the stored status it continues (None: a new run), the
    candidates to calibrate first (pending ones of a resumed run, then library seeds), the
    program library and the MLflow tracking."""

    run_id: str
    resumed_from: Any
    queue_initial: list[BatchItem]
    library: Any
    tracking: RunTracking


def open_run(
    store: Any,
    config: Any,
    budget: Any,
    dataset: Any,
    task: Any,
    spec: Any,
    folder: Any,
    run_id: str | None,
    resume: str | None,
    logger: Any,
) -> OpenedRun:
    """Start ``run_id`` (or a fresh id) in the store, or continue ``resume``; open the library of
    earlier runs on the same data (reuse their evaluations, start from their best programs) and
    connect MLflow (down does not stop a run: the store keeps everything, the end retries)."""
    resumed_from = None
    if resume:
        try:
            resumed_from = store.resume(resume)
        except StoreError as exc:
            raise DiscoveryError(f"cannot resume: {exc}") from exc
        run_id = resume
        queue_initial = [BatchItem(c.hash, c.source, c.program_source or c.source) for c in store.pending(resume)]
        if queue_initial:
            logger.info("resuming %s: %d candidates were pending", run_id, len(queue_initial))
    else:
        queue_initial = []
        run_id = run_id or f"run-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}-{uuid.uuid4().hex[:6]}"
        store.start_run(
            run_id,
            dataset=config.problem.label,
            task=task.kind,
            proposer=config.proposer,
            model=config.model,
            config=config.to_dict(),
            budget=asdict(budget),
            metric=task.primary_metric,
            probe_inputs=probe_inputs(task),
        )
    library, seeds_left = open_run_library(
        store,
        run_id,
        dataset,
        task,
        config,
        resumed=bool(resume),
        program_source=spec.program_source,
        log=logger,
    )
    tracking = RunTracking(
        store,
        run_id,
        tracking_uri=config.tracking_uri,
        folder=folder,
        config=config.to_dict(),
        budget=asdict(budget),
        names=dict(dataset=config.problem.label, task=task.kind, proposer=config.proposer, model=config.model),
        entry_hook=lambda digest: faults.checkpoint("logging", hash=digest),
        logger=logger,
    )
    tracking.connect()
    return OpenedRun(run_id, resumed_from, queue_initial + seeds_left, library, tracking)


__all__ = ["OpenedRun", "open_run"]
