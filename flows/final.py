"""The end of a run: the test split, read once, for the final top k and the references.

During the search nothing reads the test split: candidates are fitted on train and ranked by their
validation metrics (flows/calibration.py). When a run finishes, ``score_final`` takes the final
top ``k`` of the leaderboard (validation order) and the run's champion (``storage.selection``: the
simplest candidate within one standard error of the best validation score, which may rank below
k), rebuilds each fit from its stored parameters (``task.restore_fit``), lets the task complete it for the test split (``task.prepare_test_fit``:
for whole held-out battery cells, a fit on each cell's own ``test_fit`` rows) and scores it with
``task.score(fit, "test")``. The task's reference models are fitted and scored on validation and on
test alike. Everything goes into the store's ``test_scores`` table in one transaction (a resumed
run's end replaces the rows); ``log_test_scores`` puts them on MLflow as ``test_*`` metrics.

Nothing here writes to what the search reads (evaluations, the leaderboard order, the run's best).
"""

from __future__ import annotations

import json
import math
import warnings
from typing import Any

import polars as pl

from flows.calibration import CalibrationOptions, heldout_metrics
from storage.selection import champion_of_run


def _metrics(task: Any, score: dict[str, Any]) -> tuple[dict[str, float], str | None]:
    """Flat finite metrics of a score, and why it failed (None when its primary metric is finite)."""
    metrics = heldout_metrics(task, score)
    primary = metrics.get(task.primary_metric)
    if score.get("error") or primary is None or not math.isfinite(primary):
        return metrics, str(score.get("error") or f"{task.primary_metric} is not finite")[:2000]
    return metrics, None


def score_final(store: Any, run_id: str, task: Any, options: CalibrationOptions, k: int = 10) -> list[Any]:
    """Score the run's final top ``k`` and the task's references on the test split; record them in
    ``test_scores`` and return the ``FinalTestScore`` rows (candidates in validation order first)."""
    from datasets.schema import TEST, VALIDATION
    from storage import FinalTestScore

    rows: list[Any] = []
    calibrate_kwargs = options.as_kwargs()
    with warnings.catch_warnings():  # all-NaN correlations (a constant forecast) warn in numpy
        warnings.simplefilter("ignore", RuntimeWarning)
        top = store.top(k, run_id=run_id)
        choice = champion_of_run(store, run_id)
        if choice is not None and choice.hash not in top["hash"].to_list():  # the champion is always scored
            top = pl.concat([top, store.top(10**9, run_id=run_id).filter(pl.col("hash") == choice.hash)])
        for row in top.iter_rows(named=True):
            parameters = json.loads(row["parameters"] or "{}")
            validation = json.loads(row["heldout_metrics"] or "{}")
            try:
                fit = task.prepare_test_fit(
                    task.restore_fit(row["source"], parameters, name=row["hash"]), **calibrate_kwargs
                )
                metrics, error = _metrics(task, task.score(fit, TEST))
                if fit.ok:  # held-out groups fitted at test time: keep their parameters with the score
                    parameters = task.flat_parameters(fit.params)
            except Exception as exc:  # a candidate failing on the test years is reported, not fatal
                metrics, error = {}, f"{type(exc).__name__}: {exc}"[:2000]
            rows.append(
                FinalTestScore(
                    row["hash"],
                    "candidate",
                    metrics,
                    validation,
                    parameters=parameters,
                    validation_rank=int(row["rank"]),
                    status="error" if error else "ok",
                    error=error,
                )
            )
        by_name = {r["model"]: r for r in task.score_references(VALIDATION)}
        for ref in task.score_references(TEST):
            metrics, error = _metrics(task, ref)
            validation, _ = _metrics(task, by_name[ref["model"]])
            rows.append(
                FinalTestScore(
                    ref["model"], "reference", metrics, validation, status="error" if error else "ok", error=error
                )
            )
    store.record_test_scores(run_id, rows)
    return rows


def log_test_scores(tracker: Any, store: Any, run_id: str) -> int:
    """Log the run's test scores to MLflow: ``test_<metric>`` on each logged entry's nested run,
    ``ref_<name>_test_<metric>`` and ``ref_<name>_validation_<metric>`` on the parent run. Returns
    the number of metrics logged. (Entries not logged to MLflow keep their scores in the store.)"""
    import time

    from mlflow.entities import Metric

    stamp = int(time.time() * 1000)
    logged = store.logged(run_id)
    count = 0
    parent: list[Any] = []
    for row in store.test_scores(run_id).iter_rows(named=True):
        test = json.loads(row["test_metrics"] or "{}")
        if row["entry_kind"] == "candidate":
            nested = logged.get(row["entry"])
            if nested is not None and test:
                metrics = [Metric(f"test_{name}", float(value), stamp, 0) for name, value in test.items()]
                tracker.client.log_batch(nested, metrics=metrics)
                count += len(metrics)
            continue
        validation = json.loads(row["validation_metrics"] or "{}")
        parent += [Metric(f"ref_{row['entry']}_test_{name}", float(v), stamp, 0) for name, v in test.items()]
        parent += [
            Metric(f"ref_{row['entry']}_validation_{name}", float(v), stamp, 0) for name, v in validation.items()
        ]
    if parent and tracker.parent_run_id is not None:
        for start in range(0, len(parent), 500):  # MLflow takes at most 1000 metrics per batch
            tracker.client.log_batch(tracker.parent_run_id, metrics=parent[start : start + 500])
        count += len(parent)
    return count


__all__ = ["score_final", "log_test_scores"]
