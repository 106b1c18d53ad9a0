"""MLflow tracking of discovery runs: what a scientist browses in the morning.

One parent MLflow run per discovery run holds the configuration (dataset, task, proposer, model,
budget) and progress metrics over time (proposals and calibrations per minute, best held-out
score, duplicates rejected, invalid proposals). Each leaderboard entry becomes a nested run with
the fitted parameters, train and held-out metrics, tags (canonical hash, origin, rank), artifacts
(the program source, a fit plot with the held-out region marked, a forecast plot for time series,
the loss curve) and a pyfunc model that predicts from a DataFrame of new inputs.

The default store is a local sqlite database, ``sqlite:///<run folder>/mlflow.db``, with artifacts
in ``<run folder>/mlartifacts``; any MLflow tracking URI works (a server on 127.0.0.1, ...).
The tracker uses MLflow's fluent API for model logging, so it sets the process-wide tracking URI.
"""
from __future__ import annotations

import datetime as _dt
import json
import tempfile
import threading
import time
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import mlflow
import mlflow.pyfunc
import numpy as np
from mlflow.tracking import MlflowClient

from storage.pyfunc_model import NDVMProgramModel
from storage.plots import FitPlot, ForecastPlot, plot_fit, plot_forecast, plot_loss
from storage.store import RunStatus, redact

# The models-from-code script logged with each entry; it builds an NDVMProgramModel.
MODEL_CODE = Path(__file__).with_name("model_code.py")
DEFAULT_EXPERIMENT = "ndvm-discovery"
# MLflow limits a parameter value to 6000 characters; longer configuration values are truncated
# in the parameter and kept whole in the run's config.json artifact.
_MAX_PARAM = 6000


def default_tracking_uri(run_folder: str | Path = "runs") -> str:
    """``sqlite:////abs/<run folder>/mlflow.db`` (four slashes: an absolute path)."""
    return "sqlite:///" + str((Path(run_folder).resolve() / "mlflow.db"))


@dataclass
class LeaderboardEntry:
    """What is logged for one leaderboard candidate (build it from the store with ``entry_from_store``)."""

    hash: str
    source: str
    parameters: dict[str, float]
    train_metrics: dict[str, float]
    heldout_metrics: dict[str, float]
    origin: str | None = None
    rank: int | None = None
    loss_history: Sequence[float] | None = None
    fit_plot: FitPlot | None = None
    forecast_plot: ForecastPlot | None = None
    input_example: Any = None          # pandas DataFrame (columns = input names): signature + example
    static_inputs: dict[str, Any] = field(default_factory=dict)  # inputs the model keeps (not columns)
    model_source: str | None = None    # the program the pyfunc model runs, when not ``source`` itself
                                       # (e.g. a forecast candidate with the task's forecasting driver)


def entry_from_store(store: Any, run_id: str, candidate: str, **extra: Any) -> LeaderboardEntry:
    """A ``LeaderboardEntry`` for a candidate's best evaluation in the store; ``extra`` sets the
    plots, the input example and static inputs, which the store does not keep."""
    evaluation = store.evaluation(run_id, candidate)
    row = store.candidate(candidate)
    top = store.top(10_000, run_id=run_id)
    ranks = dict(zip(top["hash"].to_list(), top["rank"].to_list()))
    return LeaderboardEntry(
        hash=candidate, source=row["source"], origin=row["origin"], rank=ranks.get(candidate),
        parameters=evaluation["parameters"], train_metrics=evaluation["train_metrics"],
        heldout_metrics=evaluation["heldout_metrics"], loss_history=evaluation["loss_history"], **extra)


def _flatten(prefix: str, value: Any, out: dict[str, str]) -> None:
    if isinstance(value, Mapping):
        for key, item in value.items():
            _flatten(f"{prefix}.{key}" if prefix else str(key), item, out)
    else:
        text = value if isinstance(value, str) else json.dumps(value, default=str)
        out[prefix] = text[:_MAX_PARAM]


def _pip_requirements() -> list[str]:
    try:
        project = f"ndvm-discovery=={metadata.version('ndvm-discovery')}"
    except metadata.PackageNotFoundError:
        project = "ndvm-discovery"
    return [project, f"numpy=={np.__version__}", f"mlflow=={mlflow.__version__}"]


class Tracker:
    """Logs discovery runs to MLflow. Call ``start_run`` once per discovery run (or with
    ``mlflow_run_id`` to continue a resumed run), then ``log_progress`` and ``log_entry`` as the
    run goes, and ``end_run`` at the end. Safe to call from several threads of one process."""

    def __init__(self, tracking_uri: str | None = None, *, run_folder: str | Path = "runs",
                 experiment: str = DEFAULT_EXPERIMENT):
        self.run_folder = Path(run_folder).resolve()
        if tracking_uri is None:
            self.run_folder.mkdir(parents=True, exist_ok=True)
            tracking_uri = default_tracking_uri(self.run_folder)
            artifact_location: str | None = (self.run_folder / "mlartifacts").as_uri()
        else:
            artifact_location = None  # the server or store decides
        self.tracking_uri = tracking_uri
        mlflow.set_tracking_uri(tracking_uri)
        self.client = MlflowClient(tracking_uri)
        found = self.client.get_experiment_by_name(experiment)
        self.experiment_id = (found.experiment_id if found is not None
                              else self.client.create_experiment(experiment, artifact_location=artifact_location))
        self._lock = threading.RLock()
        self.parent_run_id: str | None = None
        # Called with the candidate hash right after an entry's nested run is created (the flow's
        # fault-injection checkpoint "logging" uses it; see flows/faults.py).
        self.entry_hook: Callable[[str], None] | None = None
        self._last: tuple[float, int, int] | None = None  # (time, proposed, calibrations) at the last snapshot

    # ---- parent run ------------------------------------------------------------------------
    def start_run(self, run_id: str, *, dataset: str | None = None, task: str | None = None,
                  proposer: str | None = None, model: str | None = None,
                  config: Mapping[str, Any] | None = None, budget: Mapping[str, Any] | None = None,
                  mlflow_run_id: str | None = None) -> str:
        """Open the parent run of discovery run ``run_id`` and return its MLflow run id; with
        ``mlflow_run_id`` (a resumed run) reopen that run instead of creating one. A parent run
        already tagged with ``run_id`` in this experiment is reopened too (logging redone after a
        crash, or by ``ndvm log``): a discovery run never gets two parent runs."""
        with self._lock:
            existing = self._find_parent(run_id, mlflow_run_id)
            if existing is not None:
                self.client.update_run(existing, status="RUNNING")
                self.parent_run_id = existing
                return existing
            run = self.client.create_run(self.experiment_id, run_name=run_id,
                                         tags={"ndvm.run_id": run_id, "ndvm.kind": "discovery"})
            self.parent_run_id = run.info.run_id
            params: dict[str, str] = {}
            for key, value in (("dataset", dataset), ("task", task), ("proposer", proposer), ("model", model)):
                if value is not None:
                    params[key] = str(value)
            budget, config = redact(dict(budget or {})), redact(dict(config or {}))
            _flatten("budget", budget, params)
            _flatten("config", config, params)
            items = [mlflow.entities.Param(key, value) for key, value in params.items()]
            for start in range(0, len(items), 100):  # MLflow's batch limit for params
                self.client.log_batch(self.parent_run_id, params=items[start:start + 100])
            whole = {"run_id": run_id, "dataset": dataset, "task": task, "proposer": proposer, "model": model,
                     "budget": budget, "config": config}
            self.client.log_dict(self.parent_run_id, json.loads(json.dumps(whole, default=str)), "config.json")
            return self.parent_run_id

    def _find_parent(self, run_id: str, mlflow_run_id: str | None) -> str | None:
        if mlflow_run_id is not None:
            try:
                run = self.client.get_run(mlflow_run_id)
                if run.info.experiment_id == self.experiment_id and run.info.lifecycle_stage == "active":
                    return mlflow_run_id
            except mlflow.exceptions.MlflowException:
                pass  # not in this tracking store (another --tracking-uri): look it up by tag
        found = self.client.search_runs([self.experiment_id], f"tags.`ndvm.run_id` = '{run_id}' and "
                                        "tags.`ndvm.kind` = 'discovery'", order_by=["attributes.start_time ASC"],
                                        max_results=1)
        return found[0].info.run_id if found else None

    def _require_parent(self) -> str:
        if self.parent_run_id is None:
            raise RuntimeError("Tracker.start_run must be called before logging")
        return self.parent_run_id

    def log_progress(self, status: RunStatus) -> dict[str, float]:
        """Log the run's counters as metrics over time (step = seconds since the run started).
        Rates are per minute since the previous snapshot (since the run's start for the first)."""
        with self._lock:
            parent = self._require_parent()
            now = time.time()
            calibrations = status.calibrated + status.failed
            if self._last is None:
                elapsed = max(status.elapsed_seconds, 1e-9)
                d_prop, d_cal = status.proposed, calibrations
            else:
                elapsed = max(now - self._last[0], 1e-9)
                d_prop, d_cal = status.proposed - self._last[1], calibrations - self._last[2]
            self._last = (now, status.proposed, calibrations)
            metrics = {
                "proposals_per_min": 60.0 * d_prop / elapsed,
                "calibrations_per_min": 60.0 * d_cal / elapsed,
                "proposals": float(status.proposed),
                "candidates_new": float(status.new),
                "calibrated": float(status.calibrated),
                "calibration_failures": float(status.failed),
                "duplicates_rejected": float(status.duplicates),
                "duplicates_semantic": float(status.duplicate_semantic),
                "invalid_proposals": float(status.invalid),
            }
            if status.best_score is not None:
                metrics[f"best_heldout_{status.metric}"] = float(status.best_score)
            created = status.created.replace(tzinfo=_dt.timezone.utc).timestamp()  # the store keeps naive UTC
            step = int(max(now - created, 0))
            stamp = int(now * 1000)
            self.client.log_batch(parent, metrics=[mlflow.entities.Metric(k, v, stamp, step) for k, v in metrics.items()])
            return metrics

    def end_run(self, status: str = "FINISHED") -> None:
        """Close the parent run (FINISHED, FAILED or KILLED)."""
        with self._lock:
            self.client.set_terminated(self._require_parent(), status=status)

    # ---- leaderboard entries ---------------------------------------------------------------
    def log_entry(self, entry: LeaderboardEntry) -> tuple[str, str]:
        """Log a leaderboard entry as a nested run; return (nested run id, model URI)."""
        with self._lock:
            parent = self._require_parent()
            name = f"#{entry.rank} {entry.hash}" if entry.rank is not None else entry.hash
            tags = {"mlflow.parentRunId": parent, "ndvm.hash": entry.hash, "ndvm.origin": entry.origin or "",
                    "ndvm.kind": "candidate"}
            if entry.rank is not None:
                tags["ndvm.rank"] = str(entry.rank)
            run = self.client.create_run(self.experiment_id, run_name=name, tags=tags)
            run_id = run.info.run_id
            try:
                if self.entry_hook is not None:
                    self.entry_hook(entry.hash)
                model_uri = self._log_entry_contents(run_id, entry)
            except BaseException:
                self.client.set_terminated(run_id, status="FAILED")
                raise
            self.client.set_tag(run_id, "ndvm.model_uri", model_uri)
            self.client.set_terminated(run_id, status="FINISHED")
            return run_id, model_uri

    def log_leaderboard(self, store: Any, run_id: str, k: int = 10,
                        extras: Callable[[str], Mapping[str, Any]] | None = None) -> list[tuple[str, str]]:
        """Log the run's top ``k`` candidates that are not logged yet, and remember them in the
        store; return [(candidate hash, nested run id)]. ``extras(hash)`` supplies what the store
        does not keep: ``fit_plot``, ``forecast_plot``, ``input_example``, ``static_inputs``,
        ``model_source``. The ``ndvm.rank`` tag is the rank when the entry was logged.

        What the tracking store holds is the truth: a finished nested run of an entry counts as
        logged (and is remembered in the store) even if the process died before it could say so;
        an unfinished one (the process died while logging it) is deleted and logged again."""
        with self._lock:  # one logger at a time: _reconcile would take another's entry for half-logged
            done = self._reconcile(store, run_id)
            logged = []
            for digest in store.top(k, run_id=run_id)["hash"].to_list():
                if digest in done:
                    continue
                entry = entry_from_store(store, run_id, digest, **dict(extras(digest) if extras else {}))
                nested, _ = self.log_entry(entry)
                store.mark_logged(run_id, digest, nested)
                logged.append((digest, nested))
            return logged

    def _reconcile(self, store: Any, run_id: str) -> dict[str, str]:
        """candidate hash -> nested run id of the entries this parent run already has, finished."""
        parent = self._require_parent()
        children = self.client.search_runs([self.experiment_id], f"tags.mlflow.parentRunId = '{parent}' and "
                                           "tags.`ndvm.kind` = 'candidate'", max_results=5000)
        done: dict[str, str] = {}
        for child in children:
            digest = child.data.tags.get("ndvm.hash")
            if not digest:
                continue
            if child.info.status == "FINISHED" and digest not in done:
                done[digest] = child.info.run_id
            else:  # half-logged (its process died) or a duplicate: remove it
                self.client.delete_run(child.info.run_id)
        marked = store.logged(run_id)
        for digest, nested in done.items():
            if marked.get(digest) != nested:
                store.mark_logged(run_id, digest, nested)
        return done

    def _log_entry_contents(self, run_id: str, entry: LeaderboardEntry) -> str:
        stamp = int(time.time() * 1000)
        params = [mlflow.entities.Param(k, repr(float(v))) for k, v in entry.parameters.items()]
        for start in range(0, len(params), 100):  # MLflow's batch limit for params
            self.client.log_batch(run_id, params=params[start:start + 100])
        metrics = [mlflow.entities.Metric(f"train_{k}", float(v), stamp, 0) for k, v in entry.train_metrics.items()]
        metrics += [mlflow.entities.Metric(f"heldout_{k}", float(v), stamp, 0) for k, v in entry.heldout_metrics.items()]
        if entry.loss_history is not None:
            metrics += [mlflow.entities.Metric("loss", float(v), stamp, i)
                        for i, v in enumerate(np.asarray(entry.loss_history, float).ravel()) if np.isfinite(v)]
        for start in range(0, len(metrics), 1000):  # MLflow's batch limit
            self.client.log_batch(run_id, metrics=metrics[start:start + 1000])

        with tempfile.TemporaryDirectory(prefix="ndvm-entry-") as tmp:
            folder = Path(tmp)
            program = folder / "program.scm"
            program.write_text(entry.source if entry.source.endswith("\n") else entry.source + "\n")
            if entry.model_source is not None:
                (folder / "model_program.scm").write_text(entry.model_source)
            fitted = folder / "fit.json"
            fitted.write_text(json.dumps({
                "params": {k: float(v) for k, v in entry.parameters.items()},
                "static_inputs": {k: np.asarray(v, float).tolist() for k, v in entry.static_inputs.items()},
            }, indent=1))
            self.client.log_artifact(run_id, str(program))
            self.client.log_artifact(run_id, str(fitted))
            if entry.fit_plot is not None:
                self.client.log_artifact(run_id, str(plot_fit(entry.fit_plot, folder / "fit.png")), "plots")
            if entry.forecast_plot is not None:
                self.client.log_artifact(run_id, str(plot_forecast(entry.forecast_plot, folder / "forecast.png")),
                                         "plots")
            if entry.loss_history is not None and len(entry.loss_history):
                self.client.log_artifact(run_id, str(plot_loss(entry.loss_history, folder / "loss_curve.png")),
                                         "plots")
            with mlflow.start_run(run_id=run_id, nested=True):
                # "Models from code": the model is the script below, not a pickled object.
                info = mlflow.pyfunc.log_model(
                    name="model", python_model=str(MODEL_CODE),
                    artifacts={"program": str(folder / "model_program.scm") if entry.model_source is not None
                               else str(program), "fit": str(fitted)},
                    input_example=entry.input_example, pip_requirements=_pip_requirements(),
                )
        return info.model_uri


__all__ = ["Tracker", "LeaderboardEntry", "NDVMProgramModel", "entry_from_store", "default_tracking_uri"]
