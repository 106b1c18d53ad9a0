"""Re-fit the best programs of an earlier run on new data: the "re-run on new data" workflow.

    from flows.recalibrate import recalibrate
    report = recalibrate(from_run="run-...", data="nino34.txt", top=5)

The top ``top`` candidates of ``from_run`` (by its ranking metric) are added to a new run of the
store (origin ``recalibrate:<from_run>``), calibrated on the new dataset's training part, scored
on its validation part, scored once on its test part at the end (``flows.final``), and logged to
MLflow as a new parent run with a nested run per program. The report lists each program's score
on the old and on the new data (validation), and its test score on the new data.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import asdict
from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger

from flows.calibration import BatchItem, CalibrationOptions, calibrate_batch
from flows.final import log_test_scores, score_final
from flows.problem import ProblemSpec, entry_extras, load_problem


class RecalibrationError(RuntimeError):
    """Nothing to re-fit (no such run, or a run with no calibrated candidate)."""


def run_recalibration(
    problem: ProblemSpec,
    from_run: str | None = None,
    top: int = 5,
    options: CalibrationOptions | None = None,
    folder: str | Path = "runs",
    tracking_uri: str | None = None,
    run_id: str | None = None,
) -> dict[str, Any]:
    """The recalibration without Prefect's flow wrapper; returns the report (a dict)."""
    from storage import CandidateStore, StoreError, default_store_path
    from storage.tracking import Tracker, experiment_name

    options = options or CalibrationOptions()
    dataset, task = load_problem(problem)
    started = time.monotonic()
    with CandidateStore(default_store_path(folder)) as store:
        source_run = from_run or store.latest_run()
        if source_run is None:
            raise RecalibrationError(f"the store {default_store_path(folder)} has no runs to re-fit")
        try:
            old = store.top(top, run_id=source_run)
            old_metric = store.run_status(source_run).metric
        except StoreError as exc:
            raise RecalibrationError(str(exc)) from exc
        if old.is_empty():
            raise RecalibrationError(f"run {source_run!r} has no calibrated candidate to re-fit")
        run_id = run_id or f"recal-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}-{uuid.uuid4().hex[:6]}"
        config = {"from_run": source_run, "top": top, "problem": asdict(problem), "calibration": asdict(options)}
        store.start_run(
            run_id,
            dataset=problem.label,
            task=task.kind,
            proposer="recalibrate",
            config=config,
            metric=task.primary_metric,
        )
        proposals = [
            {"source": row["source"], "origin": f"recalibrate:{source_run}", "parents": [row["hash"]]}
            for row in old.iter_rows(named=True)
        ]
        new = store.add(proposals, run_id, program_source=task.program_source)
        items = [BatchItem(c.hash, c.source, c.program_source or c.source) for c in new]
        results = calibrate_batch(task, items, options) if items else []
        store.record([r.evaluation(run_id, problem.label, task.kind, task.split_label()) for r in results])

        tracker = Tracker(tracking_uri, run_folder=folder, experiment=experiment_name(problem.label, task.kind))
        parent = tracker.start_run(
            run_id, dataset=problem.label, task=task.kind, proposer="recalibrate", config=config, budget={"top": top}
        )
        store.set_mlflow_run(run_id, parent)
        # The end of this run: its re-fitted programs and the references on the new data's test split.
        tested = {
            r.entry: r.test_metrics.get(task.primary_metric)
            for r in score_final(store, run_id, task, options, k=top)
            if r.entry_kind == "candidate"
        }

        def extras(digest: str) -> dict[str, Any]:
            evaluation = store.evaluation(run_id, digest)
            return entry_extras(dataset, task, store.candidate(digest)["source"], evaluation["parameters"])

        try:
            logged = tracker.log_leaderboard(store, run_id, k=top, extras=extras)
            log_test_scores(tracker, store, run_id)
            tracker.log_progress(store.run_status(run_id))
            tracker.end_run("FINISHED")
        except BaseException:
            tracker.end_run("FAILED")
            raise
        store.set_run_status(run_id, "finished")
        by_hash = {r.hash: r for r in results}
        rows = []
        for row in old.iter_rows(named=True):
            result = by_hash.get(row["hash"])
            rows.append(
                {
                    "hash": row["hash"],
                    "old_rank": row["rank"],
                    f"old_{old_metric}": row["score"],
                    "new_score": None
                    if result is None or result.status != "ok"
                    else result.heldout_metrics.get(task.primary_metric),
                    "new_test_score": tested.get(row["hash"]),
                    "status": "duplicate" if result is None else result.status,
                    "error": None if result is None else result.error,
                }
            )
        status = store.run_status(run_id)
    return {
        "run_id": run_id,
        "from_run": source_run,
        "dataset": problem.label,
        "metric": task.primary_metric,
        "refitted": len(items),
        "calibrated": status.calibrated,
        "failed": status.failed,
        "best_score": status.best_score,
        "best_hash": status.best_hash,
        "logged_entries": len(logged),
        "mlflow_run_id": parent,
        "tracking_uri": tracker.tracking_uri,
        "rows": rows,
        "seconds": time.monotonic() - started,
    }


@flow(name="ndvm-recalibrate", persist_result=False)
def recalibrate(
    from_run: str | None = None,
    task: str = "enso",
    *,
    data: str | None = None,
    x: str | list[str] | None = None,
    y: str | None = None,
    group: str | None = None,
    task_kind: str | None = None,
    train_fraction: float | None = None,
    validation_fraction: float | None = None,
    edge_fraction: float | None = None,
    split: str | None = None,
    name: str | None = None,
    covariates: list[str] | None = None,
    top: int = 5,
    steps: int = CalibrationOptions.steps,
    restarts: int = CalibrationOptions.restarts,
    optimizer: str = CalibrationOptions.optimizer,
    lr: float = CalibrationOptions.lr,
    seed: int = 0,
    folder: str = "runs",
    tracking_uri: str | None = None,
    run_id: str | None = None,
) -> dict[str, Any]:
    """Re-fit the ``top`` programs of ``from_run`` (default: the latest run) on ``task`` / ``data``."""
    problem = ProblemSpec(
        dataset=task,
        data=data,
        x=x,
        y=y,
        group=group,
        task_kind=task_kind,
        train_fraction=train_fraction,
        validation_fraction=validation_fraction,
        edge_fraction=edge_fraction,
        split=split,
        name=name,
        covariates=list(covariates) if covariates else None,
    )
    options = CalibrationOptions(optimizer=optimizer, steps=steps, lr=lr, restarts=restarts, seed=seed)
    report = run_recalibration(problem, from_run, top, options, folder, tracking_uri, run_id)
    get_run_logger().info(
        "re-fitted %d programs of %s on %s: best %s %s",
        report["refitted"],
        report["from_run"],
        report["dataset"],
        report["metric"],
        report["best_score"],
    )
    return report


__all__ = ["recalibrate", "run_recalibration", "RecalibrationError"]
