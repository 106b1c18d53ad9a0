"""Calibration and held-out scoring of a batch of candidates: the work the flow hands to workers.

``calibrate_batch`` is a plain function of picklable arguments (the task object, the candidates'
sources, the calibration options) that returns plain dictionaries. It runs wherever the flow's
task runner puts it: a thread of the flow process (the default; ``ndvm.calibrate_many`` releases
the GIL and uses every core), a worker process (``ProcessPoolTaskRunner``) or a Dask worker
(``DaskTaskRunner``). Workers never open the candidate store: the flow's process is its only
writer (DuckDB allows one) and records what the workers return.

One batch is one ``ndvm.calibrate_many`` call per group of the task (a forecast task and an
ungrouped curve task have one group), so the native thread pool fits all programs of the batch at
once; each fitted candidate is then scored on the held-out part by the task itself.
"""
from __future__ import annotations

import math
import time
import warnings
from dataclasses import dataclass, field
from typing import Any

import numpy as np

# The held-out metrics of the forecast task kept per lead (all twelve would crowd the UI).
FORECAST_LEADS_LOGGED = (1, 3, 6, 12)


@dataclass(frozen=True)
class CalibrationOptions:
    """How each candidate is fitted (``ndvm.calibrate_many`` keyword arguments)."""

    optimizer: str = "adam"
    steps: int = 100
    lr: float = 0.05
    restarts: int = 8
    seed: int = 0
    threads: int | None = None  # None: every core of the worker

    def as_kwargs(self) -> dict[str, Any]:
        from flows.dask_worker import batch_threads

        # threads=None on a Dask worker: the worker's share of the cores, not all of them
        return {"optimizer": self.optimizer, "steps": self.steps, "lr": self.lr, "restarts": self.restarts,
                "seed": self.seed, "threads": batch_threads(self.threads)}


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


def worker_identity() -> str:
    import os
    import socket

    return f"{socket.gethostname()}:{os.getpid()}"


def calibration_loss(task: Any) -> str:
    """The ``ndvm`` loss for a task: the forecast driver returns its own loss ("value")."""
    return "value" if task.kind == "forecast" else task.loss


def _finite(metrics: dict[str, Any]) -> dict[str, float]:
    """Numeric, finite metrics only (JSON has no NaN or infinity; MLflow rejects them too)."""
    out = {}
    for key, value in metrics.items():
        if isinstance(value, (int, float, np.floating, np.integer)) and not isinstance(value, bool):
            if math.isfinite(float(value)):
                out[key] = float(value)
    return out


def heldout_metrics(task: Any, score: dict[str, Any]) -> dict[str, float]:
    """The task's score as flat held-out metrics (per-lead lists become ``rmse_lead3`` ...)."""
    metrics = {k: v for k, v in score.items() if k not in ("model", "n_params", "train_loss", "fit_seconds",
                                                           "error", "per_group", "n_origins")}
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


def _curve_predictor(program: Any, per_group: bool):
    """(group, inputs) -> one prediction per row, for a curve TaskFit built from ndvm fits."""
    def predict(params: dict[str, float], inputs: dict[str, np.ndarray]) -> np.ndarray:
        theta = np.array([[params[n] for n in program.param_names]], dtype=float) if program.param_names else None
        values = np.asarray(program.evaluate(theta=theta, inputs=inputs), dtype=float)[0]
        n = len(inputs["x"])
        if values.ndim == 0 or values.size == 1:
            return np.full(n, float(values.reshape(-1)[0]))
        if values.size != n:
            raise ValueError(f"the program returned {values.size} values for {n} rows of x")
        return values.reshape(-1)

    return lambda fit, group, inputs: predict(fit.params[group] if per_group else fit.params, inputs)


def calibrate_batch(task: Any, items: list[BatchItem], options: CalibrationOptions) -> list[BatchResult]:
    """Fit every candidate of ``items`` on the task's training part and score it on the held-out
    part. Never raises for a bad candidate: its result has ``status="error"`` and the reason."""
    import ndvm
    from datasets.tasks import TaskFit

    started = time.perf_counter()
    loss = calibration_loss(task)
    groups = task.groups() if task.kind == "curve" else [None]
    programs: list[Any] = []
    results: dict[str, BatchResult] = {}
    for item in items:
        try:
            programs.append(ndvm.compile(item.program_source))
        except ndvm.NDVMError as exc:  # compiled once by the store; only a changed runtime gets here
            programs.append(None)
            results[item.hash] = BatchResult(item.hash, "error", error=f"compile: {exc}")
    live = [(item, prog) for item, prog in zip(items, programs) if prog is not None]
    # fits_by_group[g][i]: the ndvm.Fit of live candidate i on group g
    fits_by_group = []
    for group in groups:
        inputs = task.train_inputs(group) if task.kind == "curve" else task.train_inputs()
        target = task.train_target(group) if task.kind == "curve" else task.train_target()
        fits_by_group.append(ndvm.calibrate_many([prog for _, prog in live], inputs, target=target, loss=loss,
                                                 **options.as_kwargs()))
    per_candidate_seconds = (time.perf_counter() - started) / max(len(items), 1)
    for i, (item, program) in enumerate(live):
        fits = [by_group[i] for by_group in fits_by_group]
        errors = [f"{'group ' + str(g) + ': ' if g is not None else ''}{f.error}" for g, f in zip(groups, fits)
                  if f.error]
        error = "; ".join(errors) or None
        if error is None and not all(math.isfinite(f.loss) for f in fits):
            error = "non-finite training loss"
        if task.kind == "curve" and task.per_group:
            params: dict[Any, Any] = {g: dict(f.params) for g, f in zip(groups, fits)}
        else:
            params = dict(fits[0].params)
        train_loss = float(np.mean([f.loss for f in fits])) if error is None else math.inf
        task_fit = TaskFit(task.name, item.hash, item.source, params if error is None else {}, train_loss,
                           per_candidate_seconds, fits=fits, error=error, n_params=len(program.param_names))
        if task.kind == "curve" and error is None:
            predictor = _curve_predictor(program, task.per_group)
            task_fit.predictor = lambda group, inputs, _f=task_fit, _p=predictor: _p(_f, group, inputs)
        score_started = time.perf_counter()
        with warnings.catch_warnings():  # all-NaN correlations (a constant forecast) warn in numpy
            warnings.simplefilter("ignore", RuntimeWarning)
            score = task.score(task_fit)
        seconds = per_candidate_seconds + (time.perf_counter() - score_started)
        primary = score.get(task.primary_metric)
        if error is None and (score.get("error") or primary is None or not math.isfinite(float(primary))):
            error = score.get("error") or f"held-out {task.primary_metric} is not finite"
        history = fits[0].history if len(fits) and fits[0].history is not None else None
        if error is not None:
            results[item.hash] = BatchResult(item.hash, "error", seconds=seconds, error=str(error)[:2000],
                                             train_metrics=_finite({"loss": train_loss}))
            continue
        results[item.hash] = BatchResult(
            item.hash, "ok", parameters=flat_parameters(params, task), seconds=seconds,
            train_metrics=_finite({"loss": train_loss, "rmse": score.get("train_rmse", math.nan)}),
            heldout_metrics=heldout_metrics(task, score),
            loss_history=[float(v) for v in np.asarray(history).ravel()] if history is not None else None)
    me = worker_identity()
    for result in results.values():
        result.worker = me
    return [results[item.hash] for item in items]


def flat_parameters(params: dict[Any, Any], task: Any) -> dict[str, float]:
    """Fitted parameters as name -> value. Per-group curve fits keep every group as ``group/name``
    and the first group's values under the plain names (what the logged MLflow model uses)."""
    if not (task.kind == "curve" and task.per_group):
        return {k: float(v) for k, v in params.items()}
    out: dict[str, float] = {}
    for i, (group, values) in enumerate(params.items()):
        for name, value in values.items():
            if i == 0:
                out[name] = float(value)
            out[f"{group}/{name}"] = float(value)
    return out


__all__ = ["BatchItem", "BatchResult", "CalibrationOptions", "calibrate_batch", "calibration_loss",
           "flat_parameters", "heldout_metrics"]
