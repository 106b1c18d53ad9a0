"""MLflow logging of a discovery run that never fails the run, and ``ndvm log --run ID``.

The candidate store (DuckDB) is the record of a run; MLflow is a view of it. So MLflow trouble
(an unreachable tracking server, a failing call) costs at most the view:

- connecting at the start is bounded (``CONNECT_SECONDS``): a run whose MLflow is down searches
  and stores as usual, without a parent run;
- a failing call during the run is logged as a warning and the run goes on;
- at the end, logging is retried once (connecting again if needed), bounded by ``FINISH_SECONDS``;
- whatever is still missing can be logged later from the store: ``ndvm log --run ID``
  (``log_stored_run``). It is idempotent: the parent run is found by its ``ndvm.run_id`` tag,
  entries already logged are skipped, half-logged ones are replaced (``Tracker.log_leaderboard``).
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

log = logging.getLogger("ndvm.mlflow")

CONNECT_SECONDS = 30.0  # the start of a run waits at most this long for MLflow
FINISH_SECONDS = 180.0  # the end of a run waits at most this long for the final logging


class LogRunError(RuntimeError):
    """``ndvm log`` cannot log a run (unknown run, store busy, MLflow unreachable)."""


def _bounded(fn: Callable[[], Any], seconds: float, what: str) -> Any:
    """Run ``fn`` in a daemon thread; its result, or raise TimeoutError after ``seconds`` (a hung
    MLflow call cannot be interrupted, only left behind)."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # handed to the caller
            box["error"] = exc

    thread = threading.Thread(target=target, name=f"ndvm-mlflow-{what}", daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        raise TimeoutError(f"MLflow {what} did not answer within {seconds:g} s")
    if "error" in box:
        raise box["error"]
    return box.get("value")


class RunTracking:
    """The MLflow side of one discovery run (see the module docstring). ``error`` holds the last
    failure, ``None`` once everything was logged."""

    def __init__(
        self,
        store: Any,
        run_id: str,
        *,
        tracking_uri: str | None,
        folder: str | Path,
        config: Mapping[str, Any],
        budget: Mapping[str, Any],
        names: Mapping[str, Any],
        entry_hook: Callable[[str], None] | None = None,
        logger: Any = None,
    ):
        self.store, self.run_id = store, run_id
        self.configured_uri, self.folder = tracking_uri, Path(folder)
        self.config, self.budget, self.names = dict(config), dict(budget), dict(names)
        self.entry_hook = entry_hook
        self.log = logger or log
        self.tracker: Any = None
        self.error: str | None = None
        self.failures = 0  # failed logging attempts during the run
        self.champion: Any = None  # storage.tracking.ChampionDecision of the final logging

    @property
    def tracking_uri(self) -> str:
        if self.tracker is not None:
            return self.tracker.tracking_uri
        from storage.tracking import default_tracking_uri

        return self.configured_uri or default_tracking_uri(self.folder)

    @property
    def parent_run_id(self) -> str | None:
        return None if self.tracker is None else self.tracker.parent_run_id

    @property
    def experiment_id(self) -> str | None:
        return None if self.tracker is None else self.tracker.experiment_id

    def _connect_now(self) -> Any:
        from storage.tracking import DEFAULT_EXPERIMENT, Tracker, experiment_name

        dataset, task = self.names.get("dataset"), self.names.get("task")
        experiment = experiment_name(str(dataset), str(task)) if dataset and task else DEFAULT_EXPERIMENT
        tracker = Tracker(self.configured_uri, run_folder=self.folder, experiment=experiment)
        tracker.entry_hook = self.entry_hook
        status = self.store.run_status(self.run_id)
        parent = tracker.start_run(
            self.run_id, config=self.config, budget=self.budget, mlflow_run_id=status.mlflow_run_id, **self.names
        )
        if parent != status.mlflow_run_id:
            self.store.set_mlflow_run(self.run_id, parent)
        self._log_dataset(tracker, status)
        return tracker

    def _log_dataset(self, tracker: Any, status: Any) -> None:
        """The run's dataset as the parent run's MLflow dataset input (digest: the store's fingerprint)."""
        problem = dict(self.config.get("problem") or {})
        name = str(self.names.get("dataset") or problem.get("data") or problem.get("dataset") or "data")
        if problem.get("data"):
            source = str(problem["data"])
        else:
            import datasets

            try:
                source = datasets.definition(str(problem.get("dataset") or name)).source
            except Exception:  # a dataset this installation no longer registers: its name is the source
                source = name
        tracker.log_dataset(name, digest=getattr(status, "dataset_fingerprint", None), source=source)

    def connect(self, seconds: float = CONNECT_SECONDS) -> bool:
        """Open (or reopen) the parent run; False, with ``error`` set, when MLflow does not answer."""
        if self.tracker is not None:
            return True
        try:
            self.tracker = _bounded(self._connect_now, seconds, "connection")
            self.error = None
            return True
        except Exception as exc:
            self.error = f"{type(exc).__name__}: {str(exc)[:500]}"
            self.log.warning(
                "MLflow at %s is unavailable (%s); the run goes on, results stay in the store; "
                "logging is retried at the end",
                self.tracking_uri,
                self.error,
            )
            return False

    def finish(
        self, leaderboard: Callable[[Any, int], Any], k: int, mlflow_status: str, seconds: float = FINISH_SECONDS
    ) -> bool:
        """The final leaderboard, the last progress snapshot and the parent's end status; retried
        once on failure. False (``error`` says why) when MLflow still fails: ``ndvm log`` later."""

        def final() -> None:
            if not self.connect(seconds=seconds / 2):
                raise ConnectionError(self.error)
            leaderboard(self.tracker, k)
            status = self.store.run_status(self.run_id)
            self._log_dataset(self.tracker, status)  # again: the fingerprint may be known only now
            if mlflow_status == "FINISHED" and k > 0:
                # the registry: this run's best becomes the champion only if it beats the current one
                self.champion = self.tracker.register_champion(self.store, self.run_id)
                self.log.info("MLflow registry: %s", self.champion.reason)
            self.tracker.log_progress(status)
            self.tracker.end_run(mlflow_status)

        for attempt in (1, 2):
            try:
                _bounded(final, seconds / 2, "final logging")
                self.error = None
                return True
            except Exception as exc:
                self.error = f"{type(exc).__name__}: {str(exc)[:500]}"
                self.log.warning("final MLflow logging failed (attempt %d of 2): %s", attempt, self.error)
        self.log.warning(
            "the run's results are in the store; log them to MLflow later with `ndvm log --run %s --folder %s`",
            self.run_id,
            self.folder,
        )
        return False


def _log_end_of_run_extras(tracker: Any, store: Any, run_id: str, folder: Path) -> None:
    """What the end of a run logs besides the leaderboard, from what it stored: the test-split
    scores (``flows.final``) and the report card written under ``<folder>/reports/<run>/``. Best
    effort: the leaderboard is what ``ndvm log`` promises; a failure here is a warning."""
    import json

    try:
        from flows.final import log_test_scores

        log_test_scores(tracker, store, run_id)
        card = folder / "reports" / run_id / "report.json"
        if card.is_file():
            from flows.report_mlflow import log_report

            log_report(tracker, store, run_id, json.loads(card.read_text()))
    except Exception as exc:
        log.warning(
            "ndvm log: the test scores or the report card of %s were not logged: %s: %s",
            run_id,
            type(exc).__name__,
            exc,
        )


@contextlib.contextmanager
def _stored_run(folder: str | Path, run_id: str | None) -> Iterator[tuple[Any, str, Any]]:
    """The run folder's store, opened, with the run (default: the latest) and its status; every
    way this can fail is a LogRunError that says what to pass."""
    from storage import CandidateStore, StoreError, default_store_path

    path = default_store_path(folder)
    if not path.is_file():
        raise LogRunError(f"no candidate store at {path}; pass the run folder with --folder")
    try:
        store = CandidateStore(path)
    except StoreError as exc:
        raise LogRunError(str(exc)) from exc
    with store:
        run_id = run_id or store.latest_run()
        if run_id is None:
            raise LogRunError(f"no runs in {path}")
        try:
            status = store.run_status(run_id)
        except StoreError as exc:
            raise LogRunError(str(exc)) from exc
        yield store, run_id, status


def log_stored_run(
    run_id: str | None, folder: str | Path = "runs", tracking_uri: str | None = None, top_k: int | None = None
) -> dict[str, Any]:
    """Log a stored run's results to MLflow (``ndvm log``): its parent run with the configuration
    and final counters, and its top-k leaderboard as nested runs. Safe to repeat: nothing is
    logged twice. ``tracking_uri``: default the run's own (stored) tracking URI."""
    from flows.problem import ProblemSpec, entry_extras, load_problem

    with _stored_run(folder, run_id) as (store, run_id, status):
        if status.status == "running":
            raise LogRunError(
                f"run {run_id} is marked running: it is still going (or was killed; "
                f"finish it first with `ndvm discover --resume {run_id}`)"
            )
        config = status.config
        k = top_k if top_k is not None else int(config.get("top_k", 10))
        problem = ProblemSpec(**config.get("problem", {}))
        dataset, task = load_problem(problem)

        def leaderboard(tracker: Any, n: int) -> Any:
            def extras(digest: str) -> dict[str, Any]:
                evaluation = store.evaluation(run_id, digest)
                return entry_extras(dataset, task, store.candidate(digest)["source"], evaluation["parameters"])

            done = tracker.log_leaderboard(store, run_id, k=n, extras=extras)
            _log_end_of_run_extras(tracker, store, run_id, Path(folder))
            return done

        tracking = RunTracking(
            store,
            run_id,
            tracking_uri=tracking_uri or config.get("tracking_uri"),
            folder=folder,
            config=config,
            budget=status.budget,
            names=dict(dataset=problem.label, task=status.task, proposer=status.proposer, model=status.model),
        )
        before = set(store.logged(run_id))
        mlflow_status = {"finished": "FINISHED", "failed": "FAILED", "interrupted": "KILLED"}.get(
            status.status, "FINISHED"
        )
        if not tracking.finish(leaderboard, k, mlflow_status):
            raise LogRunError(f"MLflow at {tracking.tracking_uri} failed: {tracking.error}")
        after = store.logged(run_id)
        return {
            "run_id": run_id,
            "tracking_uri": tracking.tracking_uri,
            "mlflow_run_id": tracking.parent_run_id,
            "experiment_id": tracking.experiment_id,
            "entries": len(after),
            "newly_logged": len(set(after) - before),
            "champion": None if tracking.champion is None else tracking.champion.reason,
        }


def promote_stored_run(run_id: str | None, folder: str | Path = "runs", tracking_uri: str | None = None) -> Any:
    """Make a finished run's best program the champion of its dataset and task (``ndvm promote``),
    without comparing validation scores: for when they cannot be compared (the champion was chosen
    on other data, fit settings or runtime: another dataset fingerprint). The run must have been
    logged (``ndvm log``). Returns the registry's ``ChampionDecision``."""
    from flows.problem import ProblemSpec
    from storage.tracking import Tracker, experiment_name

    with _stored_run(folder, run_id) as (store, run_id, status):
        if status.status != "finished":
            raise LogRunError(f"run {run_id} is {status.status}: only a finished run's best can be promoted")
        if not store.logged(run_id):
            raise LogRunError(f"run {run_id} is not logged to MLflow: log it first with `ndvm log --run {run_id}`")
        problem = ProblemSpec(**status.config.get("problem", {}))
        tracker = Tracker(
            tracking_uri or status.config.get("tracking_uri"),
            run_folder=folder,
            experiment=experiment_name(problem.label, str(status.task)),
        )
        tracker.parent_run_id = status.mlflow_run_id  # the decision is tagged on the run's parent
        try:
            return tracker.register_champion(store, run_id, promote=True)
        except ValueError as exc:  # the best entry is not logged, or has no model
            raise LogRunError(str(exc)) from exc


__all__ = ["CONNECT_SECONDS", "FINISH_SECONDS", "LogRunError", "RunTracking", "log_stored_run", "promote_stored_run"]
