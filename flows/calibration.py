"""Calibration and held-out scoring of a batch of candidates: the work the flow hands to workers.

``calibrate_batch`` is a plain function of picklable arguments (the task object, the candidates'
sources, the calibration options) that returns plain dictionaries. It runs wherever the flow's
runner puts it (``flows.runners``): a supervised worker process (the default, two of them, each
batch on every core), or a Dask worker. Workers never open the candidate store: the flow's process
is its only writer (DuckDB allows one) and records what the workers return.

One batch is one ``ndvm.calibrate_groups`` call (``task.fit_batch``): every candidate x every
group of the task (a battery cell; a forecast task and an ungrouped curve task have one group) is
a job of one native ``calibrate_many``, so the native thread pool fits all of them at once, each
group on its own rows; each fitted candidate is then scored on the VALIDATION split by the task
itself. The test split is scored once, at the end of a run (``flows.final``).
"""

from __future__ import annotations

import math
import os
import socket
import time
import warnings
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from flows.dask_worker import WORKER_THREADS_ENV, batch_threads, current_worker, host_slots
from flows.options import option
from ndvm.calibrate import OPTIMIZERS

# The held-out metrics of the forecast task kept per lead (all twelve would crowd the UI).
FORECAST_LEADS_LOGGED = (1, 3, 6, 12)


@dataclass(frozen=True)
class CalibrationOptions:
    """How each candidate is fitted (``ndvm.calibrate_many`` keyword arguments).

    The pipeline's calibration defaults, the one place for them (the CLI options, the discover and
    recalibrate flows read these): fewer steps and restarts than ``ndvm.calibrate``'s own defaults
    (ndvm/calibrate.py), since a run fits thousands of candidates and re-fits only the best."""

    optimizer: str = field(
        default="adam", metadata=option("optimizer of every fit", group="calibration", choices=OPTIMIZERS)
    )
    steps: int = field(default=100, metadata=option("optimizer steps per fit", group="calibration"))
    lr: float = field(default=0.05, metadata=option("learning rate (adam, gd)", group="calibration"))
    restarts: int = field(default=8, metadata=option("multi-start lanes per fit", group="calibration"))
    # Off in the pipeline: on the LLM-SR problems a projected evaluation's cost (2-4x, not tiled)
    # bought no better champions at equal wall clock (BENCHMARKS.md, "Linear parameters solved")
    solve_linear: bool = field(
        default=False,
        metadata=option(
            "solve the parameters the result is linear in by least squares at every step (variable "
            "projection; ndvm.calibrate's default) instead of searching them with the optimizer",
            group="calibration",
        ),
    )
    seed: int = 0  # the run's seed (DiscoverConfig.seed sets it)
    threads: int | None = None  # None: every core of the worker
    # Wall-clock seconds per evaluation (ndvm.Limits.max_seconds), set from --candidate-seconds: one
    # evaluation longer than a candidate's whole allowance ends that candidate at once (a typed
    # LimitError), without killing the worker; the supervisor still bounds the total (flows/supervisor.py).
    max_seconds: float | None = None

    def limits(self) -> Any:
        import ndvm

        return None if self.max_seconds is None else ndvm.Limits(max_seconds=self.max_seconds)

    def as_kwargs(self) -> dict[str, Any]:
        # threads=None on a Dask worker: the worker's share of the cores, not all of them
        return {
            "optimizer": self.optimizer,
            "steps": self.steps,
            "lr": self.lr,
            "restarts": self.restarts,
            "solve_linear": self.solve_linear,
            "seed": self.seed,
            "threads": batch_threads(self.threads),
        }


@dataclass
class BatchItem:
    """One candidate to calibrate: its hash, the source as proposed, the program compiled."""

    hash: str
    source: str
    program_source: str


@dataclass
class BatchResult:
    """What a worker returns for one candidate (plain data: it crosses process boundaries)."""

    hash: str
    status: str  # "ok" | "error"
    parameters: dict[str, float] = field(default_factory=dict)
    train_metrics: dict[str, float] = field(default_factory=dict)
    heldout_metrics: dict[str, float] = field(default_factory=dict)
    seconds: float = 0.0
    error: str | None = None
    loss_history: list[float] | None = None
    worker: str = ""  # host:pid of the process that computed it

    def evaluation(self, run_id: str, dataset: str, task: str, split: str) -> Any:
        """The store's record of this result (``storage.EvaluationResult``) in run ``run_id``."""
        from storage import EvaluationResult

        return EvaluationResult(
            candidate=self.hash,
            run_id=run_id,
            dataset=dataset,
            task=task,
            split=split,
            parameters=self.parameters,
            train_metrics=self.train_metrics,
            heldout_metrics=self.heldout_metrics,
            seconds=self.seconds,
            status=self.status,
            error=self.error,
            loss_history=self.loss_history,
        )


def worker_identity() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def calibration_threads_here() -> dict:
    """What a calibration batch with default options would use in this process (submit it to a
    Dask worker to check its setting, flows/dask_worker.py): {"threads", "pid", "setting", "host_slots"}."""
    worker = current_worker()
    return {
        "threads": CalibrationOptions().as_kwargs()["threads"],
        "pid": os.getpid(),
        "setting": os.environ.get(WORKER_THREADS_ENV),
        "host_slots": host_slots(worker) if worker else None,
    }


def _finite(metrics: dict[str, Any]) -> dict[str, float]:
    """Numeric, finite metrics only (JSON has no NaN or infinity; MLflow rejects them too)."""
    out = {}
    for key, value in metrics.items():
        if isinstance(value, (int, float, np.floating, np.integer)) and not isinstance(value, bool):
            if math.isfinite(float(value)):
                out[key] = float(value)
    return out


def heldout_metrics(task: Any, score: dict[str, Any]) -> dict[str, float]:
    """A score of the task (on any split) as flat metrics (per-lead lists become ``rmse_lead3`` ...)."""
    metrics = {
        k: v
        for k, v in score.items()
        if k not in ("model", "n_params", "train_loss", "fit_seconds", "error", "per_group", "n_origins")
    }
    flat: dict[str, Any] = {}
    for key, value in metrics.items():
        if isinstance(value, (list, tuple)):
            base = key.replace("_by_lead", "")
            for lead in FORECAST_LEADS_LOGGED:
                if lead <= len(value):
                    flat[f"{base}_lead{lead}"] = value[lead - 1]
        else:
            flat[key] = value
    return _finite(flat)


def calibrate_batch(task: Any, items: list[BatchItem], options: CalibrationOptions) -> list[BatchResult]:
    """Fit every candidate of ``items`` on the task's training part (``task.fit_batch``) and score
    it on the VALIDATION split (the test split is never touched here). Never raises for a bad
    candidate: its result has ``status="error"`` and the reason."""
    import ndvm
    from datasets.schema import VALIDATION

    programs: list[Any] = []
    results: dict[str, BatchResult] = {}
    for item in items:
        try:
            programs.append(ndvm.compile(item.program_source, limits=options.limits()))
        except ndvm.NDVMError as exc:  # compiled once by the store; only a changed runtime gets here
            programs.append(None)
            results[item.hash] = BatchResult(item.hash, "error", error=f"compile: {exc}")
    live = [(item, prog) for item, prog in zip(items, programs) if prog is not None]
    fits = task.fit_batch(
        [prog for _, prog in live],
        [item.source for item, _ in live],
        [item.hash for item, _ in live],
        **options.as_kwargs(),
    )
    for (item, _), task_fit in zip(live, fits):
        score_started = time.perf_counter()
        with warnings.catch_warnings():  # all-NaN correlations (a constant forecast) warn in numpy
            warnings.simplefilter("ignore", RuntimeWarning)
            score = task.score(task_fit, VALIDATION)
        seconds = task_fit.seconds + (time.perf_counter() - score_started)
        error = task_fit.error
        primary = score.get(task.primary_metric)
        if error is None and (score.get("error") or primary is None or not math.isfinite(float(primary))):
            error = score.get("error") or f"validation {task.primary_metric} is not finite"
        history = task_fit.fits[0].history if task_fit.fits and task_fit.fits[0].history is not None else None
        if error is not None:
            results[item.hash] = BatchResult(
                item.hash,
                "error",
                seconds=seconds,
                error=str(error)[:2000],
                train_metrics=_finite({"loss": task_fit.train_loss}),
            )
            continue
        results[item.hash] = BatchResult(
            item.hash,
            "ok",
            parameters=task.flat_parameters(task_fit.params),
            seconds=seconds,
            train_metrics=_finite({"loss": task_fit.train_loss, "rmse": score.get("train_rmse", math.nan)}),
            heldout_metrics=heldout_metrics(task, score),
            loss_history=[float(v) for v in np.asarray(history).ravel()] if history is not None else None,
        )
    me = worker_identity()
    for result in results.values():
        result.worker = me
    return [results[item.hash] for item in items]


__all__ = [
    "BatchItem",
    "BatchResult",
    "CalibrationOptions",
    "calibrate_batch",
    "calibration_threads_here",
    "heldout_metrics",
]
