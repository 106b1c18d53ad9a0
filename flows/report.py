"""The report card of a discovery run: ``ndvm report [--run ID] [--json]``, and ``report.md`` +
``report.json`` on the run's MLflow parent run (written at the end of every run).

What it says, all on the **test split** (read here after the search, as the end-of-run test scores
are; nothing here feeds back into the search):

- the **champion** (``storage.selection``: the simplest candidate within one standard error of the
  best validation score; the report says why when it is not the best) and every reference
  model of the task (persistence, damped persistence, AR, SARIMAX; the battery fade laws), per
  lead (forecasts) or per group (curves);
- a **paired test** of the champion against the best reference (the reference with the best test
  score, the hardest one to beat): for forecasts the Diebold-Mariano test with the
  Harvey-Leybourne-Newbold correction, per lead h (autocovariances up to lag h-1) and overall (the
  per-origin mean of the squared-error differential over all leads, h = the number of leads); for
  curves a paired bootstrap interval of the RMSE difference (whole groups resampled when there are
  several, a moving-block bootstrap of one series otherwise; ``storage.stats``). The verdict is a
  sentence with the interval or p-value, never a bare "beats AR";
- the **Pareto front** of complexity vs validation loss (``storage.parsimony``), on which the
  champion is the recommended model (one best model), and the **formulas** (``storage.formula``) of the champion, the recommended
  model and the front;
- the champion's **standard errors** (``ndvm.stderr``), flagged where not identifiable;
- how well validation predicted test: Spearman's rank correlation of the validation and test
  scores of the entries scored on test (the final top k).

The task computes the errors (``datasets.tasks.base.Task``: ``test_errors``,
``reference_test_errors``, ``references_to_refit``); the paired test, its verdict and its Markdown
follow from the errors' layout (by lead or by group: flows/report_tests.py), so these modules never
branch on the kind of task.

The card is built here (``build_report``, at the end of a run: ``finish_report``); its verdict in
words is flows/report_verdict.py, its paired tests flows/report_tests.py, its Markdown and JSON flows/report_render.py, its plots and
MLflow artifacts flows/report_mlflow.py.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from datasets.tasks import Errors
from flows.report_render import write_report
from flows.report_tests import paired_test_for
from flows.report_verdict import best_model_note, headline, reference_label
from storage.selection import champion_of_run


class ReportError(RuntimeError):
    """The report cannot be built (no such run, nothing calibrated, a task without test data)."""


# ---------------------------------------------------------------------------- errors
# The task computes the errors of a model on a split; what is said of them depends only on their
# layout (flows/report_tests.py): no branch here on the kind of task.
def model_errors(
    task: Any, source: str, parameters: dict, name: str, split: str, calibrate_options: dict | None = None
) -> Errors:
    """Errors of a stored candidate (source + stored parameters) on ``split``."""
    return task.test_errors(source, parameters, name, split, **(calibrate_options or {}))


def reference_errors(task: Any, split: str, only: set[str] | None = None) -> list[Errors]:
    """Errors of the reference models of the task on ``split`` (fitted on the training part; only
    those named in ``only``, when given)."""
    return task.reference_test_errors(split, only=only)


# ---------------------------------------------------------------------------- the report
def task_of_run(store: Any, run_id: str) -> Any:
    """Rebuild a run's task from its stored configuration."""
    from flows.config import DiscoverConfig
    from flows.problem import load_problem

    config = DiscoverConfig.from_dict(store.run_status(run_id).config)
    return load_problem(config.problem)[1], config


def _stderr_of(task: Any, source: str, parameters: dict) -> dict[str, Any]:
    """Standard errors of a stored fit at its stored parameters, per fit group (see ndvm.stderr)."""
    import ndvm

    program = ndvm.compile(task.program_source(source))
    names = list(program.param_names)
    loss = task.calibration_loss
    out: dict[str, Any] = {}
    for group in task.fit_groups():
        key = "" if group is None else f"{group}/"
        try:
            params = {n: float(parameters[f"{key}{n}"]) for n in names}
        except KeyError as exc:
            return {"error": f"stored parameters lack {exc}"}
        inputs, target = task.fit_inputs(group), task.fit_target(group)
        fit = ndvm.Fit(program=program, params=params, status="ok")
        try:
            if loss == "value":
                # a program-computed training loss: standard errors need it to be a mean of n squared errors
                count = task.value_loss_squared_errors()
                if count is None:
                    return {
                        "error": "standard errors need a squared-error training loss (this task fits "
                        f"{getattr(task, 'loss', loss)})"
                    }
                fit.loss = float(program.evaluate([[params[n] for n in names]], inputs)[0])
                se = ndvm.stderr(fit, inputs, None, "value", value_scale="mse", n=count)
            else:
                fit.loss = float(program.loss_and_grad([[params[n] for n in names]], inputs, target, loss)[0][0])
                se = ndvm.stderr(fit, inputs, target, loss)
        except (ndvm.NDVMError, ValueError, np.linalg.LinAlgError) as exc:
            out[str(group)] = {"error": str(exc)}
            continue
        out[str(group)] = se.to_dict()
        if loss == "value":  # overlapping multi-step errors are correlated: the errors are optimistic
            out[str(group)]["note"] = "; ".join(
                x
                for x in (
                    out[str(group)]["note"],
                    (
                        "the multi-step training errors overlap and are correlated, treated here as independent: "
                        "these standard errors are optimistic"
                    ),
                )
                if x
            )
    return out


def _front(store: Any, run_id: str) -> list[dict[str, Any]]:
    from storage.parsimony import run_front

    out = []
    for entry in run_front(store, run_id):
        row = entry.extra
        out.append(
            {
                **entry.to_dict(),
                "rank": int(row["rank"]),
                "source": row["source"],
                "parameters": json.loads(row["parameters"] or "{}"),
            }
        )
    return out


def _formula(source: str, parameters: dict) -> dict[str, Any]:
    from storage.formula import render

    plain = {k: v for k, v in parameters.items() if "/" not in k}
    return render(source, plain).to_dict()


def _validation_parts(heldout_metrics: str | None, metric: str) -> dict[str, float] | None:
    """The champion's validation score inside the training box and at its edges, when the task
    scored an edge block (the regression task: datasets/tasks/edges.py)."""
    held = json.loads(heldout_metrics or "{}")
    keys = {"in_range": f"{metric}_in_range", "edge": f"{metric}_edge"}
    if not all(k in held for k in keys.values()):
        return None
    return {part: float(held[k]) for part, k in keys.items()}


def build_report(
    store: Any,
    run_id: str | None = None,
    task: Any = None,
    *,
    replicates: int = 2000,
    split: str = "test",
    calibrate_options: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The report card of ``run_id`` (default: the latest run) as a JSON-ready dict."""
    from storage.stats import spearman

    run_id = run_id or store.latest_run()
    if run_id is None:
        raise ReportError("the store has no runs yet")
    status = store.run_status(run_id)
    config = None
    if task is None:
        task, config = task_of_run(store, run_id)
    choice = champion_of_run(store, run_id)  # the one-standard-error rule, validation only
    if choice is None:
        raise ReportError(f"run {run_id}: no calibrated candidate, nothing to report")
    champ = store.top(10**9, run_id=run_id).filter(pl.col("hash") == choice.hash).row(0, named=True)
    parameters = json.loads(champ["parameters"] or "{}")
    if calibrate_options is None:  # held-out groups are fitted as the run fitted (curve tasks)
        calibrate_options = config.calibration.as_kwargs() if config is not None else {}
    champion = model_errors(task, champ["source"], parameters, champ["hash"], split, calibrate_options)
    # The end-of-run scoring stored every reference's test score: a curve task with many groups
    # (Severson: 120 cells) then refits only the best reference, the one the paired test needs.
    stored = _stored_reference_scores(store, run_id) if split == "test" else {}
    only = task.references_to_refit(stored) if stored else None
    references = reference_errors(task, split, only=only)
    usable = [r for r in references if not r.error]
    report: dict[str, Any] = {
        "run_id": run_id,
        "dataset": status.dataset,
        "task": status.task,
        "kind": champion.kind,
        "split": split,
        "data_split": task.split_label(),  # how the rows were split (the user's column, random, temporal...)
        "metric": status.metric,
        "counts": {
            "proposed": status.proposed,
            "new": status.new,
            "calibrated": status.calibrated,
            "failed": status.failed,
        },
        "champion": {
            "hash": champ["hash"],
            "source": champ["source"],
            "parameters": parameters,
            "validation_score": champ["score"],
            "test_score": champion.primary(),
            "error": champion.error,
            "formula": _formula(champ["source"], parameters),
            "complexity": store.complexities([champ["hash"]]).get(champ["hash"]),
            "validation_rank": int(champ["rank"]),
        },
        "selection": choice.to_dict(),
        "references": [{"name": r.name, "test_score": r.primary(), "error": r.error} for r in references],
    }
    if only is not None:  # the others as the end-of-run scoring stored them
        report["references"] += [
            {
                "name": k,
                "test_score": v if v is not None else math.inf,
                "error": None if v is not None else "failed at the end-of-run scoring",
            }
            for k, v in sorted(stored.items())
            if k not in only
        ]
    report["champion"]["stderr"] = _stderr_of(task, champ["source"], parameters)
    parts = _validation_parts(champ["heldout_metrics"], status.metric)
    if parts:
        report["champion"]["validation_parts"] = parts
    kind = paired_test_for(champion)
    if not champion.error:
        report[kind.breakdown_key] = {"champion": champion.breakdown(), **{r.name: r.breakdown() for r in usable}}
    if usable and not champion.error:
        best = min(usable, key=lambda r: r.primary())
        test = kind.run(champion, best, replicates=replicates)
        report["best_reference"] = best.name
        report["paired_test"] = test
        report["verdict_detail"] = kind.verdict(champion, best, test)  # the test's own figures
        series = _test_series(task, split, champion, best)
        if series is not None:
            report["test_series"] = series
        cells = _test_cells(task, split, champion, best)
        if cells is not None:
            report["test_cells"] = cells
        report["versus_each_reference"] = [
            {"reference": r.name, **kind.run(champion, r, replicates=replicates)["overall"]} for r in usable
        ]
    else:
        report["verdict"] = (
            f"No paired test: {champion.error}"
            if champion.error
            else "No paired test: no reference model could be scored."
        )
    front = _front(store, run_id)
    for entry in front:
        entry["formula"] = _formula(entry["source"], entry["parameters"])
    for entry in front:  # one best model: the front recommends the champion (always on the front)
        entry["recommended"] = entry["hash"] == choice.hash
    report["pareto_front"] = front
    report["pareto_rule"] = f"recommended: the champion ({choice.rule})"
    report["recommended"] = choice.hash
    try:
        scored = store.test_scores(run_id)
        cand = scored.filter(scored["entry_kind"] == "candidate") if not scored.is_empty() else scored
        for row in cand.iter_rows(named=True):
            if row["entry"] == report["recommended"] and row["status"] == "ok":
                report["recommended_test_score"] = row["test_score"]
        if cand.height >= 3:
            report["validation_test_spearman"] = {
                "n": cand.height,
                "rho": spearman(cand["validation_score"].to_list(), cand["test_score"].to_list()),
                "over": "the final top k scored on test at the end of the run",
            }
    except Exception:  # a store without test scores (older runs): the report goes on without it
        pass
    if "paired_test" in report:
        report["verdict"] = headline(report)
    report["best_model"] = best_model_note(report)
    return report


def _test_series(task: Any, split: str, champion: Errors, best: Errors) -> dict[str, Any] | None:
    """What the test-years plot draws (forecasts): for leads 1, 6 and the last, the target times,
    the observations and the forecasts of the champion and of the best reference. None for other
    kinds of task (curves: the per-group RMSE is in the card): only a task with forecast origins and
    per-origin errors has test years to draw."""
    targets, origins = getattr(task, "targets", None), getattr(task, "origins", None)
    if targets is None or origins is None:
        return None
    if champion.values is None or best.values is None:
        return None
    obs = np.asarray(targets(split), dtype=float)
    starts = np.asarray(origins(split), dtype=int)
    dataset = task.dataset
    t = dataset.frame.sort(dataset.x).get_column(dataset.x).cast(pl.Float64).to_numpy()
    leads = obs.shape[1]
    panels = []
    for k in sorted({1, min(6, leads), leads}):
        index = starts + k  # lead k from origin o forecasts y[o + k]
        valid = ~np.isnan(obs[:, k - 1]) & (index < t.size)
        panels.append(
            {
                "lead": k,
                "time": t[index[valid]].tolist(),
                "observed": obs[valid, k - 1].tolist(),
                "models": {
                    "champion": (champion.values[valid, k - 1] + obs[valid, k - 1]).tolist(),
                    f"{reference_label(best.name)} (best reference)": (
                        best.values[valid, k - 1] + obs[valid, k - 1]
                    ).tolist(),
                },
            }
        )
    return {"panels": panels, "time_label": dataset.x, "y_label": dataset.y}


TEST_CELLS_SHOWN = 48  # panels of the test-cells plot (more cells: an even spread over their names)
POINTS_PER_PANEL = 150  # rows of each part of a cell drawn (and kept in report.json): a panel is ~3 cm


def _natural(name: Any) -> list[Any]:
    """Sort key: ``b3c2`` before ``b3c10``."""
    import re

    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", str(name))]


def _thin(n: int, k: int = POINTS_PER_PANEL) -> np.ndarray:
    """At most ``k`` indices of ``n`` rows, evenly spread, first and last kept."""
    return np.unique(np.linspace(0, n - 1, num=min(n, k)).round().astype(int)) if n else np.zeros(0, dtype=int)


def _test_cells(task: Any, split: str, champion: Errors, best: Errors) -> dict[str, Any] | None:
    """What the test-cells plot draws (curves: errors per group): one panel per whole held-out
    cell of ``split`` (every scored cell when none is held out whole), with the rows it was fitted
    on, the scored rows and the champion's and the best reference's predictions of them. None when
    the task has no per-cell rows to draw (``Task.scored_rows``) or the errors are not per group."""
    if champion.groups is None or best.groups is None:
        return None
    rows = task.scored_rows(split)
    names = sorted((g for g in rows if g in champion.groups and g in best.groups), key=_natural)
    if not names:
        return None
    shown = [names[i] for i in _thin(len(names), TEST_CELLS_SHOWN)]
    reference = f"{reference_label(best.name)} (best reference)"
    panels = []
    for group in shown:
        r = rows[group]
        observed, fit_keep, keep = np.asarray(r["y"], float), _thin(len(r["fit_y"])), _thin(len(r["y"]))
        errors = {"champion": champion.groups[group], reference: best.groups[group]}
        panels.append(
            {
                "group": str(group),
                "fit_x": np.asarray(r["fit_x"], float)[fit_keep].tolist(),
                "fit_y": np.asarray(r["fit_y"], float)[fit_keep].tolist(),
                "x": np.asarray(r["x"], float)[keep].tolist(),
                "observed": observed[keep].tolist(),
                "models": {label: (observed + e)[keep].tolist() for label, e in errors.items()},
                "rmse": {label: float(np.sqrt(np.mean(np.square(e)))) for label, e in errors.items()},
            }
        )
    held = all(rows[g]["held_out_group"] for g in names)
    return {
        "panels": panels,
        "cells": len(names),
        "held_out_cells": held,
        "x_label": task.dataset.x,
        "y_label": task.dataset.y,
    }


def _stored_reference_scores(store: Any, run_id: str) -> dict[str, float | None]:
    """name -> test score of each reference, from the end-of-run scoring (empty when absent)."""
    try:
        rows = store.test_scores(run_id)
    except Exception:  # a store from before the test_scores table
        return {}
    return {
        r["entry"]: (r["test_score"] if r["status"] == "ok" else None)
        for r in rows.iter_rows(named=True)
        if r["entry_kind"] == "reference"
    }


def rescore_missing_test_split(folder: str | Path, run_id: str) -> int | None:
    """For ``ndvm report --rebuild``: when the end of a finished run failed to score the test split
    (no ``test_scores`` rows), score it now as the run's end would have (flows/final.py) and return
    the number of rows recorded; None when the scores are there (nothing is scored twice)."""
    from flows.final import score_final
    from storage import CandidateStore, default_store_path

    with CandidateStore(default_store_path(folder)) as store:
        if store.run_status(run_id).status != "finished" or store.test_scores(run_id).height:
            return None
        task, config = task_of_run(store, run_id)
        return len(score_final(store, run_id, task, config.calibration, k=config.test_top_k))


def finish_report(
    store: Any, run_id: str, task: Any, folder: str | Path, log: Any, calibrate_options: dict[str, Any] | None = None
) -> dict[str, Any] | None:
    """The end of a finished run: build the report card and write it under ``folder/reports/<run>``.
    A failure is raised: the run records it as a failed end-of-run step (its candidates are stored,
    ``ndvm report --run`` builds the card again)."""
    import time

    started = time.monotonic()
    report = build_report(store, run_id, task=task, calibrate_options=calibrate_options)
    md, _ = write_report(report, folder)
    log.info("report card %s in %.1f s: %s", md, time.monotonic() - started, report["verdict"])
    return report
