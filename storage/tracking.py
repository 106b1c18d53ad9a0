"""MLflow tracking of discovery runs: what a scientist browses in the morning.

One MLflow experiment per dataset and task (``ndvm-<dataset>-<task>``, e.g. ``ndvm-enso-forecast``),
created as a model-training experiment (tag ``mlflow.experimentKind``) so that the UI opens on its
runs, not on the GenAI overview. Its shared view ``leaderboard`` (the UI's own "share view" tag,
``mlflow.sharedViewState.leaderboard``) lists the candidates with their validation and test
metrics and formula, best first: ``#/experiments/<id>/runs?viewStateShareKey=leaderboard``.

One parent MLflow run per discovery run holds the configuration (dataset, task, proposer, model,
budget), the dataset as an MLflow dataset input (name, digest = the store's dataset fingerprint,
source) and progress metrics over time (proposals and calibrations per minute, best validation
score, duplicates rejected, invalid proposals). Each leaderboard entry becomes a nested run named
by its program hash, tagged with dataset, task, complexity, formula, origin and its current rank,
with the fitted parameters, train and validation metrics (``heldout_*``), artifacts (the program
source, a fit plot with the validation region marked, a forecast plot for time series, the loss
curve) and a pyfunc model that predicts from a DataFrame of new inputs.

The registry: the champion of a run (``storage.selection``: the simplest candidate within one
standard error of the best validation score) is registered per dataset and task as the model
``ndvm-<dataset>-<task>`` with alias ``champion`` (``register_champion``). A later run moves the
alias only when its champion beats the registered one's validation score on the same dataset fingerprint;
the former champion keeps its version and gets the alias ``previous``.

The default store is a local sqlite database, ``sqlite:///<run folder>/mlflow.db``, with artifacts
in ``<run folder>/mlartifacts``; any MLflow tracking URI works (a server on 127.0.0.1, ...).
The tracker uses MLflow's fluent API for model logging, so it sets the process-wide tracking URI.
"""

from __future__ import annotations

import datetime as _dt
import json
import re
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

import mlflow
import mlflow.pyfunc
import numpy as np
from mlflow.tracking import MlflowClient

from storage.fingerprint import GROUP_FIT_SETTINGS
from storage.plots import FitPlot, ForecastPlot, plot_fit, plot_forecast, plot_loss
from storage.pyfunc_model import NDVMProgramModel
from storage.selection import champion_of_run
from storage.store import RunStatus, redact

# The models-from-code script logged with each entry; it builds an NDVMProgramModel.
MODEL_CODE = Path(__file__).with_name("model_code.py")
# The experiment of a tracker made without a dataset and task (library use, tests).
DEFAULT_EXPERIMENT = "ndvm-discovery"
# MLflow 3's UI opens an experiment by its kind: a model-training one on its runs table.
EXPERIMENT_KIND_TAG, MODEL_TRAINING = "mlflow.experimentKind", "custom_model_development"
# The UI's shared view state ("share" button): an experiment tag the URL names by its key.
VIEW_KEY = "leaderboard"
VIEW_TAG = "mlflow.sharedViewState." + VIEW_KEY
CHAMPION, PREVIOUS = "champion", "previous"
# MLflow limits a parameter value to 6000 characters; longer configuration values are truncated
# in the parameter and kept whole in the run's config.json artifact.
_MAX_PARAM = 6000
_MAX_TAG = 5000
# An entry logged while its run goes on: parameters and metrics, no artifacts nor model yet.
LIGHT_TAG = "ndvm.light"


def _slug(text: str) -> str:
    """A name part MLflow URIs take as is: lower case letters, digits, '.', '_' and '-'."""
    slug = re.sub(r"[^a-z0-9._-]+", "-", text.lower()).strip("-.")
    return slug or "data"


def experiment_name(dataset: str, task: str) -> str:
    """``ndvm-<dataset>-<task>``: the experiment, and the registered model, of a dataset and task.
    A file given with ``--data`` is named by its stem (``/data/cells.csv`` -> ``cells``)."""
    if not dataset or not task:
        raise ValueError(f"experiment_name needs a dataset and a task, got {dataset!r} and {task!r}")
    label = Path(dataset).stem if ("/" in dataset or "." in Path(dataset).name) else dataset
    return f"ndvm-{_slug(label)}-{_slug(task)}"


model_name = experiment_name  # the registered model of a dataset and task has the experiment's name


def leaderboard_path(experiment_id: str) -> str:
    """The UI route (after ``http://HOST:PORT/``) of an experiment's leaderboard view. MLflow 3.17's
    UI picks GenAI or model-training pages by a switch of its own (remembered by the browser, GenAI
    at first), not by the experiment's kind tag; ``workflowType`` in the URL sets the switch."""
    return f"#/experiments/{experiment_id}/runs?workflowType=machine_learning&viewStateShareKey={VIEW_KEY}"


def default_tracking_uri(run_folder: str | Path = "runs") -> str:
    """``sqlite:////abs/<run folder>/mlflow.db`` (four slashes: an absolute path)."""
    return "sqlite:///" + str(Path(run_folder).resolve() / "mlflow.db")


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
    input_example: Any = None  # pandas DataFrame (columns = input names): signature + example
    static_inputs: dict[str, Any] = field(default_factory=dict)  # inputs the model keeps (not columns)
    model_source: str | None = None  # the program the pyfunc model runs, when not ``source`` itself
    # (e.g. a forecast candidate with the task's forecasting driver)
    model_groups: dict[str, Any] | None = None  # per-group curves: every group's parameters, the columns
    # and the x scaling (storage/pyfunc_model.py)
    model_columns: dict[str, dict[str, Any]] | None = None  # a curve: data column -> {"input", "scale"}:
    # the column in the data's units reaches the program as input = column / scale (storage/pyfunc_model.py)
    model_forecast: dict[str, Any] | None = None  # forecasts: the program that forecasts leads 1..h after
    # a history, its input names and the task's leads (storage/pyfunc_model.py)
    complexity: int | None = None  # atoms of the canonical form (storage/parsimony.py)
    formula: str | None = None  # None: rendered from the source and parameters when logged


@dataclass(frozen=True)
class ChampionDecision:
    """What ``Tracker.register_champion`` did: ``registered`` (a new version that now holds the
    alias ``champion``), or why the champion stayed (``reason``)."""

    model: str
    registered: bool
    version: str | None  # the champion's version number after the decision (None: no champion)
    previous: str | None  # the version number that holds ``previous`` after the decision
    score: float | None  # this run's best validation score
    champion_score: float | None  # the champion's validation score before the decision
    reason: str

    @property
    def uri(self) -> str:
        return f"models:/{self.model}@{CHAMPION}"


def entry_from_store(store: Any, run_id: str, candidate: str, **extra: Any) -> LeaderboardEntry:
    """A ``LeaderboardEntry`` for a candidate's best evaluation in the store; ``extra`` sets the
    plots, the input example and static inputs, which the store does not keep."""
    evaluation = store.evaluation(run_id, candidate)
    row = store.candidate(candidate)
    top = store.top(10_000, run_id=run_id)
    ranks = dict(zip(top["hash"].to_list(), top["rank"].to_list()))
    complexity = row.get("complexity")
    return LeaderboardEntry(
        hash=candidate,
        source=row["source"],
        origin=row["origin"],
        rank=ranks.get(candidate),
        parameters=evaluation["parameters"],
        train_metrics=evaluation["train_metrics"],
        heldout_metrics=evaluation["heldout_metrics"],
        loss_history=evaluation["loss_history"],
        complexity=None if complexity is None else int(complexity),
        **extra,
    )


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


def _formula(entry: LeaderboardEntry) -> str:
    """The entry's formula with its fitted values (storage/formula.py), or why it has none."""
    from storage.formula import render

    plain = {k: v for k, v in entry.parameters.items() if "/" not in k}  # per-group fits: the first group's
    formula = render(entry.source, plain)
    return formula.text if formula.ok else formula.reason


def _group_signature(entry: LeaderboardEntry) -> Any:
    """The signature of a per-group model: the input example's columns (group and raw x), plus the
    y column as optional (rows of a new group that carry y calibrate it)."""
    from mlflow.models import infer_signature
    from mlflow.types.schema import ColSpec, Schema

    if entry.input_example is None:
        raise ValueError(f"entry {entry.hash}: a per-group model needs an input example (group and x columns)")
    import warnings

    with warnings.catch_warnings():  # raw cycle numbers are integers on purpose (no missing values)
        warnings.filterwarnings("ignore", message=".*integer column", category=UserWarning)
        inputs = infer_signature(entry.input_example).inputs
    y = entry.model_groups["y"]
    return mlflow.models.ModelSignature(inputs=Schema([*inputs.inputs, ColSpec("double", y, required=False)]))


def _forecast_signature(entry: LeaderboardEntry) -> Any:
    """The signature of a forecast model: the history column, the columns its x reads (calendar,
    covariates, by name), and the parameter ``horizon`` (0, the default: one-step-ahead predictions
    per row; h: forecasts at leads 1..h).

    The columns take any type: a user's month column is naturally int64, which MLflow will not
    cast to double ("not safely"), and a series of counts is integer too; the model converts them
    and says which column is not numeric (storage/pyfunc_model.py). The x columns are optional to
    MLflow so that a missing one reaches the model, whose error says what the column is (the
    calendar, a covariate) instead of MLflow's dump of the frame."""
    from mlflow.types.schema import AnyType, ColSpec, ParamSchema, ParamSpec, Schema

    spec = entry.model_forecast
    if entry.input_example is None or spec is None:
        raise ValueError(f"entry {entry.hash}: a forecast model needs an input example (the history column)")
    x_columns = [*([spec["calendar"]] if spec.get("calendar") else []), *spec.get("covariates", [])]
    inputs = Schema(
        [ColSpec(AnyType(), spec["input"]), *(ColSpec(AnyType(), name, required=False) for name in x_columns)]
    )
    return mlflow.models.ModelSignature(inputs=inputs, params=ParamSchema([ParamSpec("horizon", "long", 0)]))


class Tracker:
    """Logs discovery runs to MLflow. Call ``start_run`` once per discovery run (or with
    ``mlflow_run_id`` to continue a resumed run), then ``log_progress`` and ``log_entry`` as the
    run goes, and ``end_run`` at the end. Safe to call from several threads of one process."""

    def __init__(
        self, tracking_uri: str | None = None, *, run_folder: str | Path = "runs", experiment: str = DEFAULT_EXPERIMENT
    ):
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
        self.experiment_name = experiment
        found = self.client.get_experiment_by_name(experiment)
        if found is None:
            self.experiment_id = self.client.create_experiment(
                experiment, artifact_location=artifact_location, tags={EXPERIMENT_KIND_TAG: MODEL_TRAINING}
            )
        else:
            self.experiment_id = found.experiment_id
            if found.tags.get(EXPERIMENT_KIND_TAG) != MODEL_TRAINING:  # made by an older version
                self.client.set_experiment_tag(self.experiment_id, EXPERIMENT_KIND_TAG, MODEL_TRAINING)
        self._view: str | None = found.tags.get(VIEW_TAG) if found is not None else None
        self._lock = threading.RLock()
        # What start_run was told: candidate runs are tagged with it, the registry keyed by it.
        self.dataset: str | None = None
        self.task: str | None = None
        self.calibration: dict[str, Any] = {}
        self._dataset_input: Any = None  # mlflow.entities.DatasetInput of log_dataset
        self.parent_run_id: str | None = None
        # Called with the candidate hash right after an entry's nested run is created (the flow's
        # fault-injection checkpoint "logging" uses it; see flows/faults.py).
        self.entry_hook: Callable[[str], None] | None = None
        self._last: tuple[float, int, int] | None = None  # (time, proposed, calibrations) at the last snapshot

    # ---- parent run ------------------------------------------------------------------------
    def start_run(
        self,
        run_id: str,
        *,
        dataset: str | None = None,
        task: str | None = None,
        proposer: str | None = None,
        model: str | None = None,
        config: Mapping[str, Any] | None = None,
        budget: Mapping[str, Any] | None = None,
        mlflow_run_id: str | None = None,
    ) -> str:
        """Open the parent run of discovery run ``run_id`` and return its MLflow run id; with
        ``mlflow_run_id`` (a resumed run) reopen that run instead of creating one. A parent run
        already tagged with ``run_id`` in this experiment is reopened too (logging redone after a
        crash, or by ``ndvm log``): a discovery run never gets two parent runs."""
        with self._lock:
            self.dataset, self.task = dataset, task
            self.discovery_run_id = run_id  # each entry's nested run names it (tag ndvm.discovery_run)
            # the settings a pyfunc model calibrates a new group (battery cell) with, as the run did
            calibration = dict((config or {}).get("calibration") or {})
            self.calibration = {k: calibration[k] for k in GROUP_FIT_SETTINGS if calibration.get(k) is not None}
            existing = self._find_parent(run_id, mlflow_run_id)
            if existing is not None:
                self.client.update_run(existing, status="RUNNING")
                self.parent_run_id = existing
                return existing
            tags = {"ndvm.run_id": run_id, "ndvm.kind": "discovery"}
            tags.update({k: str(v) for k, v in (("dataset", dataset), ("task", task)) if v is not None})
            run = self.client.create_run(self.experiment_id, run_name=run_id, tags=tags)
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
                self.client.log_batch(self.parent_run_id, params=items[start : start + 100])
            whole = {
                "run_id": run_id,
                "dataset": dataset,
                "task": task,
                "proposer": proposer,
                "model": model,
                "budget": budget,
                "config": config,
            }
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
        found = self.client.search_runs(
            [self.experiment_id],
            f"tags.`ndvm.run_id` = '{run_id}' and tags.`ndvm.kind` = 'discovery'",
            order_by=["attributes.start_time ASC"],
            max_results=1,
        )
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
            created = status.created.replace(tzinfo=_dt.UTC).timestamp()  # the store keeps naive UTC
            step = int(max(now - created, 0))
            stamp = int(now * 1000)
            self.client.log_batch(
                parent, metrics=[mlflow.entities.Metric(k, v, stamp, step) for k, v in metrics.items()]
            )
            return metrics

    def end_run(self, status: str = "FINISHED") -> None:
        """Close the parent run (FINISHED, FAILED or KILLED)."""
        with self._lock:
            self.client.set_terminated(self._require_parent(), status=status)

    def log_dataset(self, name: str, *, digest: str | None, source: str) -> None:
        """The run's dataset as an MLflow dataset input of the parent run (the runs table's Dataset
        column): ``digest`` is the store's dataset fingerprint (data, split, task and calibration
        settings; None: MLflow derives one from the name and source). ``source``: a file path, or
        the dataset's description of its origin (its first URL, if any, becomes the source).
        Logging the same dataset again is a no-op."""
        from mlflow.data.code_dataset_source import CodeDatasetSource
        from mlflow.data.http_dataset_source import HTTPDatasetSource
        from mlflow.data.meta_dataset import MetaDataset
        from mlflow.data.sources import LocalArtifactDatasetSource
        from mlflow.entities import DatasetInput, InputTag

        with self._lock:
            parent = self._require_parent()
            url = re.search(r"https?://[^\s;,()]+", source)
            if Path(source).is_file():
                origin: Any = LocalArtifactDatasetSource(str(Path(source).resolve()))
            elif url:
                origin = HTTPDatasetSource(url.group(0))
            else:  # bundled or generated data: the description is all there is
                origin = CodeDatasetSource({"description": source[:_MAX_TAG]})
            # (MLflow's fluent mlflow.log_input would need an active run; the client takes the entity)
            entity = MetaDataset(origin, name=name, digest=digest)._to_mlflow_entity()
            # candidate runs logged from now on get it too: the runs table's Dataset column
            self._dataset_input = DatasetInput(entity, tags=[InputTag("mlflow.data.context", "training")])
            self.client.log_inputs(parent, datasets=[self._dataset_input])

    # ---- leaderboard entries ---------------------------------------------------------------
    def log_entry(self, entry: LeaderboardEntry, *, light: bool = False) -> tuple[str, str]:
        """Log a leaderboard entry as a nested run named by its hash; return (nested run id, model
        URI). ``light``: tags, parameters and metrics only, tagged ``ndvm.light`` (model URI "");
        ``complete_entry`` adds the artifacts and the model later (the end of a run does)."""
        with self._lock:
            parent = self._require_parent()
            formula = entry.formula if entry.formula is not None else _formula(entry)
            tags = {
                "mlflow.parentRunId": parent,
                "ndvm.hash": entry.hash,
                "ndvm.origin": entry.origin or "",
                "ndvm.kind": "candidate",
                # the runs table shows the view's tag columns in the order the run's tags were
                # created (seen at 1600 px): the formula first, before it is cut at the right edge
                "formula": formula[:_MAX_TAG],
                "ndvm.discovery_run": getattr(self, "discovery_run_id", None) or "",
                "origin": entry.origin or "",
            }
            tags.update(
                {
                    k: str(v)
                    for k, v in (
                        ("dataset", self.dataset),
                        ("task", self.task),
                        ("complexity", entry.complexity),
                        ("ndvm.rank", entry.rank),
                    )
                    if v is not None
                }
            )
            if light:
                tags[LIGHT_TAG] = "true"
            run = self.client.create_run(self.experiment_id, run_name=entry.hash, tags=tags)
            run_id = run.info.run_id
            try:
                if self.entry_hook is not None:
                    self.entry_hook(entry.hash)
                self._log_entry_values(run_id, entry)
                model_uri = "" if light else self._log_entry_files(run_id, entry)
            except BaseException:
                self.client.set_terminated(run_id, status="FAILED")
                raise
            if model_uri:
                self.client.set_tag(run_id, "ndvm.model_uri", model_uri)
            if self._dataset_input is not None:
                self.client.log_inputs(run_id, datasets=[self._dataset_input])
            self.client.set_terminated(run_id, status="FINISHED")
            return run_id, model_uri

    def complete_entry(self, nested: str, entry: LeaderboardEntry) -> str:
        """Give a light entry (``log_entry(light=True)``) its artifacts and model, as a full entry
        has them; return the model URI. The tag ``ndvm.light`` goes last: an entry whose completion
        was interrupted is completed again."""
        with self._lock:
            model_uri = self._log_entry_files(nested, entry)
            self.client.set_tag(nested, "ndvm.model_uri", model_uri)
            self.client.set_terminated(nested, status="FINISHED")
            self.client.delete_tag(nested, LIGHT_TAG)
            return model_uri

    def log_leaderboard(
        self,
        store: Any,
        run_id: str,
        k: int = 10,
        extras: Callable[[str], Mapping[str, Any]] | None = None,
        *,
        light: bool = False,
    ) -> list[tuple[str, str]]:
        """Log the run's top ``k`` candidates that are not logged yet, and remember them in the
        store; return [(candidate hash, nested run id)]. ``extras(hash)`` supplies what the store
        does not keep: ``fit_plot``, ``forecast_plot``, ``input_example``, ``static_inputs``,
        ``model_source``, ``model_groups``. The ``ndvm.rank`` tag of every logged entry is brought
        up to date with the run's current ranking each time.

        ``light`` (progress snapshots while a run goes on): new entries get their tags, parameters
        and metrics only (``log_entry(light=True)``); plots and the pyfunc model cost seconds of
        CPU each. A call without ``light`` (the end of a run, ``ndvm log``) completes every light
        entry of the run, so a finished run's entries all have what a full entry has.

        What the tracking store holds is the truth: a finished nested run of an entry counts as
        logged (and is remembered in the store) even if the process died before it could say so;
        an unfinished one (the process died while logging it) is deleted and logged again."""
        with self._lock:  # one logger at a time: _reconcile would take another's entry for half-logged
            done, light_entries = self._reconcile(store, run_id)

            def entry_of(digest: str, files: bool = True) -> LeaderboardEntry:
                more = extras(digest) if extras and files else {}  # (plots and model inputs only)
                return entry_from_store(store, run_id, digest, **dict(more))

            logged = []
            digests = store.top(k, run_id=run_id)["hash"].to_list()
            choice = champion_of_run(store, run_id)
            if choice is not None and choice.hash not in digests:  # the registry needs it logged
                digests.append(choice.hash)
            for digest in digests:
                if digest in done:
                    continue
                nested, _ = self.log_entry(entry_of(digest, files=not light), light=light)
                store.mark_logged(run_id, digest, nested)
                logged.append((digest, nested))
                done[digest] = nested
            if not light:  # every entry logged light while the run went on gets what a full one has
                for digest in light_entries:
                    self.complete_entry(done[digest], entry_of(digest))
            if done:
                self._ensure_view(store.run_status(run_id))
            self._update_ranks(store, run_id, done)
            return logged

    def _update_ranks(self, store: Any, run_id: str, done: Mapping[str, str]) -> None:
        """The ``ndvm.rank`` tag of each logged entry: its rank in the run now (ranks move as
        better candidates arrive; the run name is the hash, so it never goes stale)."""
        if not done:
            return
        ranks = dict(zip(*(store.top(10_000, run_id=run_id)[c].to_list() for c in ("hash", "rank"))))
        for digest, nested in done.items():
            if digest in ranks:
                self.client.set_tag(nested, "ndvm.rank", str(ranks[digest]))

    def _ensure_view(self, status: RunStatus) -> None:
        """Keep the experiment's shared view ``leaderboard`` (see the module docstring): the
        candidates, sorted by the validation score of the ranking metric, with that metric on the
        validation and test splits, the formula, complexity, origin and rank as columns (the UI's
        table draws only the columns in view: a short list stays readable; the others are one
        click away under "Columns")."""
        metric = status.metric
        view = {
            # the latest run's entries: each program once (the same program in two runs is two
            # nested runs), each named with its discovery run; edit the run id in the filter box
            # for another run, or delete that part for all of them
            "searchFilter": f"tags.`ndvm.kind` = 'candidate' and tags.`ndvm.discovery_run` = '{status.run_id}'",
            "orderByKey": f"metrics.`heldout_{metric}`",
            "orderByAsc": not status.higher_is_better,
            "selectedColumns": [
                "tags.`ndvm.discovery_run`",
                f"metrics.`heldout_{metric}`",
                f"metrics.`test_{metric}`",
                "tags.`formula`",
                "tags.`complexity`",
                "tags.`origin`",
                "tags.`ndvm.rank`",
            ],
        }
        text = json.dumps(view)
        if text != self._view:
            self.client.set_experiment_tag(self.experiment_id, VIEW_TAG, text)
            self._view = text

    def _reconcile(self, store: Any, run_id: str) -> tuple[dict[str, str], list[str]]:
        """(candidate hash -> nested run id of the entries this parent run already has, finished;
        the hashes among them still light)."""
        parent = self._require_parent()
        children = self.client.search_runs(
            [self.experiment_id],
            f"tags.mlflow.parentRunId = '{parent}' and tags.`ndvm.kind` = 'candidate'",
            max_results=5000,
        )
        done: dict[str, str] = {}
        light: list[str] = []
        for child in children:
            digest = child.data.tags.get("ndvm.hash")
            if not digest:
                continue
            if child.info.status == "FINISHED" and digest not in done:
                done[digest] = child.info.run_id
                if child.data.tags.get(LIGHT_TAG):
                    light.append(digest)
            else:  # half-logged (its process died) or a duplicate: remove it
                self.client.delete_run(child.info.run_id)
        marked = store.logged(run_id)
        for digest, nested in done.items():
            if marked.get(digest) != nested:
                store.mark_logged(run_id, digest, nested)
        return done, light

    def _log_entry_values(self, run_id: str, entry: LeaderboardEntry) -> None:
        """An entry's parameters and metrics (the loss curve as the metric ``loss`` over steps)."""
        stamp = int(time.time() * 1000)
        params = [mlflow.entities.Param(k, repr(float(v))) for k, v in entry.parameters.items()]
        for start in range(0, len(params), 100):  # MLflow's batch limit for params
            self.client.log_batch(run_id, params=params[start : start + 100])
        metrics = [mlflow.entities.Metric(f"train_{k}", float(v), stamp, 0) for k, v in entry.train_metrics.items()]
        metrics += [
            mlflow.entities.Metric(f"heldout_{k}", float(v), stamp, 0) for k, v in entry.heldout_metrics.items()
        ]
        if entry.loss_history is not None:
            metrics += [
                mlflow.entities.Metric("loss", float(v), stamp, i)
                for i, v in enumerate(np.asarray(entry.loss_history, float).ravel())
                if np.isfinite(v)
            ]
        for start in range(0, len(metrics), 1000):  # MLflow's batch limit
            self.client.log_batch(run_id, metrics=metrics[start : start + 1000])

    def _log_entry_files(self, run_id: str, entry: LeaderboardEntry) -> str:
        """An entry's artifacts (program, fit.json, plots) and its pyfunc model; returns the model URI."""
        with tempfile.TemporaryDirectory(prefix="ndvm-entry-") as tmp:
            folder = Path(tmp)
            program = folder / "program.scm"
            program.write_text(entry.source if entry.source.endswith("\n") else entry.source + "\n")
            if entry.model_source is not None:
                (folder / "model_program.scm").write_text(entry.model_source)
            fitted = folder / "fit.json"
            contents: dict[str, Any] = {
                "params": {k: float(v) for k, v in entry.parameters.items()},
                "static_inputs": {k: np.asarray(v, float).tolist() for k, v in entry.static_inputs.items()},
            }
            if entry.model_columns is not None:
                contents["columns"] = dict(entry.model_columns)
            signature = None
            if entry.model_groups is not None:
                contents["groups"] = {**entry.model_groups, "calibration": dict(self.calibration)}
                signature = _group_signature(entry)
            if entry.model_forecast is not None:
                contents["forecast"] = dict(entry.model_forecast)
                signature = _forecast_signature(entry)
            fitted.write_text(json.dumps(contents, indent=1))
            self.client.log_artifact(run_id, str(program))
            self.client.log_artifact(run_id, str(fitted))
            if entry.fit_plot is not None:
                self.client.log_artifact(run_id, str(plot_fit(entry.fit_plot, folder / "fit.png")), "plots")
            if entry.forecast_plot is not None:
                self.client.log_artifact(
                    run_id, str(plot_forecast(entry.forecast_plot, folder / "forecast.png")), "plots"
                )
            if entry.loss_history is not None and len(entry.loss_history):
                self.client.log_artifact(run_id, str(plot_loss(entry.loss_history, folder / "loss_curve.png")), "plots")
            with mlflow.start_run(run_id=run_id, nested=True):
                # "Models from code": the model is the script below, not a pickled object.
                info = mlflow.pyfunc.log_model(
                    name="model",
                    python_model=str(MODEL_CODE),
                    artifacts={
                        "program": str(folder / "model_program.scm")
                        if entry.model_source is not None
                        else str(program),
                        "fit": str(fitted),
                    },
                    input_example=entry.input_example,
                    signature=signature,
                    pip_requirements=_pip_requirements(),
                )
        return info.model_uri

    # ---- the registry ----------------------------------------------------------------------
    def register_champion(self, store: Any, run_id: str, *, promote: bool = False) -> ChampionDecision:
        """Register the run's champion (``storage.selection.champion_of_run``) as the champion of its dataset and task when
        it beats the current one (see the module docstring); return what was decided.

        The best entry must have been logged (``log_leaderboard``). Its version carries the tags
        ``ndvm.fingerprint`` (the store's dataset fingerprint, ``unknown`` when the run has none),
        ``ndvm.validation_score``, ``ndvm.metric``, ``ndvm.run_id`` and ``ndvm.hash``, and what the
        end of the run logged before (``_version_card``): ``ndvm.formula``, ``ndvm.test_score``,
        ``ndvm.best_reference``, ``ndvm.best_reference_test_score``, ``ndvm.verdict`` and a
        description saying the same in words. A champion on
        another fingerprint scored another validation split: no comparison, the alias stays.
        Calling it again for the same run changes nothing.

        ``promote`` (``ndvm promote``): a person's decision, for when the scores cannot decide (the
        data, the fit settings or the runtime changed, so the fingerprints differ): the run's best
        becomes the champion without comparison, the former one ``previous``; a version this run
        already registered is reused."""
        with self._lock:
            status = store.run_status(run_id)
            if not status.dataset or not status.task:
                raise ValueError(f"run {run_id} has no dataset or task recorded: no registered model to name")
            name = model_name(status.dataset, status.task)
            fingerprint = getattr(status, "dataset_fingerprint", None) or "unknown"
            choice = champion_of_run(store, run_id)  # the one-standard-error rule (storage/selection.py)
            current = self._alias_version(name, CHAMPION)
            held = None if current is None else float(current.tags.get("ndvm.validation_score", "nan"))

            def decision(registered: bool, reason: str, score: float | None = None) -> ChampionDecision:
                now = self._alias_version(name, CHAMPION)
                before = self._alias_version(name, PREVIOUS)
                result = ChampionDecision(
                    name,
                    registered,
                    None if now is None else str(now.version),
                    None if before is None else str(before.version),
                    score,
                    held,
                    reason,
                )
                if self.parent_run_id is not None:
                    self.client.set_tag(self.parent_run_id, "ndvm.champion", reason[:_MAX_TAG])
                return result

            if choice is None:
                return decision(False, f"no validated program in run {run_id}: {name} unchanged")
            digest, score = choice.hash, choice.score
            nested = store.logged(run_id).get(digest)
            if nested is None:
                raise ValueError(
                    f"the champion {digest} of run {run_id} is not logged to MLflow: log the leaderboard first"
                )
            mine = self.client.search_model_versions(f"name = '{name}' and tags.`ndvm.run_id` = '{run_id}'")
            if mine and promote:
                if current is not None and str(current.version) == str(mine[0].version):
                    return decision(False, f"{name} version {current.version} of run {run_id} is the {CHAMPION}", score)
                return self._promote(name, mine[0], current, run_id, score, decision)
            if mine:  # a retried final logging, or `ndvm log` after the run had logged
                return decision(False, f"run {run_id} already registered {name} version {mine[0].version}", score)
            if current is not None and not promote:
                if current.tags.get("ndvm.fingerprint") != fingerprint:
                    return decision(
                        False,
                        f"{name}@{CHAMPION} (version {current.version}) was chosen on dataset "
                        f"fingerprint {current.tags.get('ndvm.fingerprint')}, this run on "
                        f"{fingerprint}: validation scores of different data are not "
                        f"compared; the champion stays (make this run's best the champion with "
                        f"`ndvm promote --run {run_id}`)",
                        score,
                    )
                better = score > held if status.higher_is_better else score < held
                if not better:
                    return decision(
                        False,
                        f"validation {status.metric} {score:.6g} does not beat {name}@{CHAMPION} "
                        f"(version {current.version}, {held:.6g}): the champion stays",
                        score,
                    )
            model_uri = self.client.get_run(nested).data.tags.get("ndvm.model_uri")
            if not model_uri:
                raise ValueError(f"the nested run {nested} of {digest} has no logged model (tag ndvm.model_uri)")
            try:
                self.client.get_registered_model(name)
            except mlflow.exceptions.MlflowException:
                self.client.create_registered_model(
                    name,
                    tags={"dataset": status.dataset, "task": status.task},
                    description=f"The best validated NDVM program for {status.dataset} ({status.task}); "
                    f"load it with mlflow.pyfunc.load_model('models:/{name}@{CHAMPION}').",
                )
            tags = {
                "ndvm.fingerprint": fingerprint,
                "ndvm.validation_score": repr(score),
                "ndvm.metric": status.metric,
                "ndvm.run_id": run_id,
                "ndvm.hash": digest,
            }
            card, description = self._version_card(store, run_id, digest, nested, status.metric, score)
            tags.update(card)
            version = self.client.create_model_version(
                name,
                source=model_uri,
                run_id=nested,
                tags=tags,
                model_id=model_uri.removeprefix("models:/"),
                description=description,
            )
            if current is not None:
                self.client.set_registered_model_alias(name, PREVIOUS, current.version)
            self.client.set_registered_model_alias(name, CHAMPION, version.version)
            self.client.set_tag(nested, "ndvm.champion", f"{name} version {version.version}")
            if current is None:
                reason = (
                    f"{name} version {version.version} is the first {CHAMPION} (validation {status.metric} {score:.6g})"
                )
            elif promote:
                reason = self._promoted_reason(name, version, current)
            else:
                reason = (
                    f"{name} version {version.version} is the new {CHAMPION}: validation {status.metric} "
                    f"{score:.6g} beats version {current.version} ({held:.6g}), now {PREVIOUS}"
                )
            return decision(True, reason, score)

    def _version_card(
        self, store: Any, run_id: str, digest: str, nested: str, metric: str, score: float
    ) -> tuple[dict[str, str], str]:
        """What a registered version says of itself (tags and description): the formula, the
        validation and test scores, the best reference's test score and the verdict of the report
        card (the end of the run logs them before it registers: the nested run's ``formula`` tag,
        the store's test scores, the parent's ``verdict`` tag). Missing parts are left out."""
        tags: dict[str, str] = {}
        formula = self.client.get_run(nested).data.tags.get("formula")
        if formula:
            tags["ndvm.formula"] = formula[:_MAX_TAG]
        test = best = None
        try:
            rows = list(store.test_scores(run_id).iter_rows(named=True))
        except Exception:  # a store from before the test scores: the version says less
            rows = []
        for row in rows:
            if row["status"] != "ok" or row["test_score"] is None:
                continue
            if row["entry_kind"] == "candidate" and row["entry"] == digest:
                test = float(row["test_score"])
            elif row["entry_kind"] == "reference" and (best is None or row["test_score"] < best[1]):
                best = (row["entry"], float(row["test_score"]))
        if test is not None:
            tags["ndvm.test_score"] = repr(test)
        if best is not None:
            tags["ndvm.best_reference"] = best[0]
            tags["ndvm.best_reference_test_score"] = repr(best[1])
        verdict = None
        if self.parent_run_id is not None:
            verdict = self.client.get_run(self.parent_run_id).data.tags.get("verdict")
        if verdict:
            tags["ndvm.verdict"] = verdict[:_MAX_TAG]
        # the description is Markdown: a formula's a*b*c would turn italic (seen on the version page)
        parts = [verdict or "", f"Formula: `{formula}`" if formula else ""]
        scores = f"Validation {metric} {score:.4f}"
        if test is not None:
            scores += f"; test {test:.4f}"
        if best is not None:
            scores += f"; best reference {best[0]} test {best[1]:.4f}"
        parts.append(scores + f" (run {run_id}, program {digest}).")
        return tags, "\n\n".join(p for p in parts if p)

    def _promote(self, name: str, version: Any, current: Any, run_id: str, score: float, decision: Any) -> Any:
        """Move ``champion`` to a version this run registered earlier; the former one becomes ``previous``."""
        if current is not None:
            self.client.set_registered_model_alias(name, PREVIOUS, current.version)
        self.client.set_registered_model_alias(name, CHAMPION, version.version)
        return decision(True, self._promoted_reason(name, version, current), score)

    @staticmethod
    def _promoted_reason(name: str, version: Any, current: Any) -> str:
        held = (
            ""
            if current is None
            else (
                f" over version {current.version} (fingerprint {current.tags.get('ndvm.fingerprint')}, validation "
                f"{current.tags.get('ndvm.validation_score')}), now {PREVIOUS}"
            )
        )
        return f"{name} version {version.version} was promoted to {CHAMPION} by hand (ndvm promote){held}"

    def _alias_version(self, name: str, alias: str) -> Any:
        try:
            return self.client.get_model_version_by_alias(name, alias)
        except mlflow.exceptions.MlflowException:  # no such model or alias
            return None


__all__ = [
    "Tracker",
    "LeaderboardEntry",
    "ChampionDecision",
    "NDVMProgramModel",
    "entry_from_store",
    "default_tracking_uri",
    "experiment_name",
    "model_name",
    "leaderboard_path",
    "CHAMPION",
    "PREVIOUS",
]
