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

Everything that depends on the kind of task comes from the task (``datasets.tasks.base.Task``:
``test_errors``, ``reference_test_errors``, ``references_to_refit``, ``error_breakdown``,
``paired_test``, ``verdict`` and their Markdown), so this module never branches on the kind.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from datasets.tasks import CurveTask, Errors, ForecastTask, task_class
from datasets.tasks.base import SIGNIFICANCE
from datasets.tasks.base import format_number as _num
from storage.selection import champion_of_run


class ReportError(RuntimeError):
    """The report cannot be built (no such run, nothing calibrated, a task without test data)."""


# ---------------------------------------------------------------------------- errors and paired tests
# What is kind-specific (the errors' structure, the per-lead or per-group breakdown, which paired
# test, the verdict's wording, their Markdown) belongs to the task classes (datasets/tasks): this
# module only asks the task, and has no branch on its kind.
def model_errors(
    task: Any, source: str, parameters: dict, name: str, split: str, calibrate_options: dict | None = None
) -> Errors:
    """Errors of a stored candidate (source + stored parameters) on ``split``."""
    return task.test_errors(source, parameters, name, split, **(calibrate_options or {}))


def reference_errors(task: Any, split: str, only: set[str] | None = None) -> list[Errors]:
    """Errors of the reference models of the task on ``split`` (fitted on the training part; only
    those named in ``only``, when given)."""
    return task.reference_test_errors(split, only=only)


def paired_test(champion: Errors, reference: Errors, replicates: int = 2000, seed: int = 0) -> dict[str, Any]:
    """The paired test the champion's task runs (``Task.paired_test``)."""
    return task_class(champion.kind).paired_test(champion, reference, replicates=replicates, seed=seed)


def paired_forecast_test(champion: Errors, reference: Errors) -> dict[str, Any]:
    """Diebold-Mariano (HLN) per lead and overall; ``mean_diff`` < 0: the champion has lower MSE."""
    return ForecastTask.paired_test(champion, reference)


def paired_curve_test(champion: Errors, reference: Errors, replicates: int = 2000, seed: int = 0) -> dict[str, Any]:
    """Paired bootstrap interval of RMSE(champion) - RMSE(reference) (negative: champion better)."""
    return CurveTask.paired_test(champion, reference, replicates=replicates, seed=seed)


def verdict(kind: str, champion: Errors, reference: Errors, test: dict[str, Any]) -> str:
    """One sentence: the difference with its p-value or interval, and what it means at 5%."""
    return task_class(kind).verdict(champion, reference, test)


# ---------------------------------------------------------------------------- the verdict in words
# How a scientist names the references (the stored names are identifiers); others: "-" -> " ".
REFERENCE_NAMES = {
    "ar-aic": "AR(AIC)",
    "damped-persistence": "damped persistence",
    "statsmodels-arma21": "ARMA(2,1)",
    "sqrt-sei": "the square-root (SEI) law",
    "knee-bacon-watts": "the Bacon-Watts knee",
    "power-law": "the power law",
    "double-exponential": "the double exponential",
    "linear": "the linear fade",
    "quadratic": "the quadratic fade",
    "exponential": "the exponential fade",
}


def reference_label(name: str) -> str:
    return REFERENCE_NAMES.get(name, name.replace("-", " "))


def metric_label(metric: str) -> str:
    """``mean_rmse`` -> "mean RMSE", ``rmse`` -> "RMSE"."""
    words = metric.split("_")
    return " ".join(w.upper() if w in {"rmse", "mse", "mae", "acc", "nll"} else w for w in words)


def headline(report: dict[str, Any]) -> str:
    """The verdict in words, one sentence a scientist can quote, then the references the champion
    also loses to: "The champion does not beat AR(AIC) on the test years: mean RMSE 1.100 against
    1.022 (Diebold-Mariano p = 0.13)." Both sides in the same metric and digits (3 decimals)."""
    c = report["champion"]
    best = report["best_reference"]
    scores = {r["name"]: r["test_score"] for r in report["references"] if not r["error"]}
    champ, ref = float(c["test_score"]), float(scores[best])
    overall = report["paired_test"]["overall"]
    where = "on the test years" if report["kind"] == "forecast" else "on the held-out test data"
    what = f"{metric_label(report['metric'])} {champ:.3f} against {ref:.3f}"
    if "low" in overall and "high" in overall:  # a bootstrap interval (curves): significant when it excludes 0
        lo, hi = overall["low"], overall["high"]
        significant = hi < 0 or lo > 0
        evidence = f"bootstrap interval of the difference, {int(overall['level'] * 100)}%: [{lo:+.3f}, {hi:+.3f}]"
        test_better = overall["estimate"] < 0
    else:  # a test with a p-value (Diebold-Mariano for forecasts)
        p = overall["p_value"]
        evidence = f"Diebold-Mariano p = {p:.2f}" if p >= 0.01 else f"Diebold-Mariano p = {p:.1g}"
        significant = p < SIGNIFICANCE
        test_better = overall["mean_diff"] < 0
    better = champ < ref  # in the metric shown (the test may weigh errors otherwise: DM on squared errors)
    significant = significant and better == test_better
    name = reference_label(best)
    if better and significant:
        sentence = f"The champion beats {name} {where}: {what} ({evidence})."
    elif better:
        sentence = f"The champion does not significantly beat {name} {where}: {what} ({evidence})."
    elif significant:
        sentence = f"The champion does not beat {name} {where}; it is significantly worse: {what} ({evidence})."
    else:
        sentence = f"The champion does not beat {name} {where}: {what} ({evidence})."
    others = sorted(
        ((v, k) for k, v in scores.items() if k != best and math.isfinite(v) and v < champ), key=lambda t: t[0]
    )
    if others:
        listed = ", ".join(f"{reference_label(k)} ({v:.3f})" for v, k in others)
        sentence += f" It also scores worse than {listed}."
    return sentence


def best_model_note(report: dict[str, Any]) -> str:
    """Which model to use: the champion (best validation score) and the Pareto front's
    recommended model are one model, or the card says how they differ."""
    c = report["champion"]
    rec = report.get("recommended")
    if rec is None:
        return "The Pareto front recommends no model (no complexity stored); use the champion."
    if rec == c["hash"]:
        return (
            f"One best model: the champion `{c['hash'][:10]}` is the Pareto front's recommended model and the "
            "registered one (see Selection)."
        )
    entry = next((e for e in report["pareto_front"] if e["hash"] == rec), None)
    size = f"complexity {entry['complexity']}, validation {_num(entry['loss'])}" if entry else "on the front"
    test = report.get("recommended_test_score")
    tested = f", test {test:.3f}" if test is not None else "; not scored on test, as only the final top k are"
    return (
        f"Two models answer 'which is best': the champion `{c['hash'][:10]}` has the best validation "
        f"score (complexity {c['complexity']}, validation {_num(c['validation_score'])}, test "
        f"{float(c['test_score']):.3f}); the Pareto front's recommended model `{rec[:10]}` ({size}{tested}) "
        "is simpler and within the front's tolerance of the best validation loss. The champion is the "
        "registered model; prefer the recommended one when a simpler formula matters more than the last "
        "few percent of validation error. (The champion rule is being replaced by one rule: the simplest "
        "model within one standard error of the best on validation.)"
    )


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
    kind = task_class(champion.kind)
    if not champion.error:
        report[kind.breakdown_key] = {
            "champion": kind.error_breakdown(champion),
            **{r.name: kind.error_breakdown(r) for r in usable},
        }
    if usable and not champion.error:
        best = min(usable, key=lambda r: r.primary())
        test = kind.paired_test(champion, best, replicates=replicates)
        report["best_reference"] = best.name
        report["paired_test"] = test
        report["verdict_detail"] = kind.verdict(champion, best, test)  # the test's own figures
        series = _test_series(task, split, champion, best)
        if series is not None:
            report["test_series"] = series
        report["versus_each_reference"] = [
            {"reference": r.name, **kind.paired_test(champion, r, replicates=replicates)["overall"]} for r in usable
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


def report_plots(report: dict[str, Any], folder: Path) -> list[Path]:
    """The card's plots as PNG files in ``folder``: the test years (observations, the champion and
    the best reference, forecasts) and the champion's error per lead against every reference."""
    from storage.plots import plot_per_lead, plot_test_years

    out = []
    if report.get("test_series"):
        ts = report["test_series"]
        out.append(
            plot_test_years(
                ts["panels"],
                folder / "test_years.png",
                time_label=ts["time_label"],
                y_label=ts["y_label"],
                title=f"{report['dataset']}: the test years, champion vs {reference_label(report['best_reference'])}",
            )
        )
    per_lead = report.get("per_lead")
    if isinstance(per_lead, dict) and "champion" in per_lead:
        series = {("champion" if k == "champion" else reference_label(k)): v for k, v in per_lead.items()}
        out.append(
            plot_per_lead(
                series,
                folder / "rmse_per_lead.png",
                metric="RMSE",
                title=f"{report['dataset']}: RMSE per lead on the test years, champion vs every reference",
            )
        )
    return out


def formula_markdown(digest: str, formula: Any, source: str) -> str:
    """``formula.md``: the formula as text and as LaTeX (a ``$$`` block), and the program."""
    lines = [f"# Formula of `{digest}`", ""]
    if formula.ok:
        lines += ["```text", formula.text, "```", "", "$$", formula.latex, "$$", ""]
    else:
        lines += [f"(no formula: {formula.reason})", ""]
    lines += ["```scheme", source.strip(), "```", ""]
    return "\n".join(lines)


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


# ---------------------------------------------------------------------------- rendering
def report_markdown(report: dict[str, Any], max_groups: int = 12) -> str:
    """The report card as Markdown (what ``ndvm report`` prints and report.md holds)."""
    c = report["champion"]
    lines = [
        f"# Report card: {report['run_id']}",
        "",
        f"{report['dataset']} / {report['task']}; metric {report['metric']} (lower is better); "
        f"{report['counts']['calibrated']} candidates calibrated. Scores below are on the **{report['split']}** split "
        "(never seen by the search); the champion is chosen on validation alone (see Selection).",
        "",
        *([f"Data split: {report['data_split']}.", ""] if report.get("data_split") else []),
        "## Verdict",
        "",
        report["verdict"],
        "",
        *([report["verdict_detail"], ""] if report.get("verdict_detail") else []),
        *([report["best_model"], ""] if report.get("best_model") else []),
        "## Champion",
        "",
        f"`{c['hash']}`, complexity {c['complexity']}, validation {_num(c['validation_score'])}, "
        f"test {_num(c['test_score'])}",
        "",
    ]
    if report.get("selection"):
        sel = report["selection"]
        lines += [f"Selection: {sel['reason']} ({sel['rule']}.)", ""]
    f = c["formula"]
    lines += [f"    {f['text']}", "", f"LaTeX: `{f['latex']}`", ""] if f["ok"] else [f"({f['reason']})", ""]
    lines += ["```scheme", c["source"].strip(), "```", ""]
    lines += _stderr_markdown(c["stderr"])
    lines += [
        "## Test scores",
        "",
        "| model | test " + report["metric"] + " |",
        "|---|--:|",
        f"| champion | {_num(c['test_score'])} |",
    ]
    for r in report["references"]:
        lines.append(f"| {r['name']} | {_num(r['test_score']) if not r['error'] else 'failed: ' + r['error']} |")
    lines.append("")
    kind = task_class(report["kind"])
    if kind.breakdown_key in report:
        lines += kind.breakdown_markdown(report[kind.breakdown_key], max_groups=max_groups)
    if "paired_test" in report:
        t = report["paired_test"]
        lines += ["## Paired test against the best reference (" + report["best_reference"] + ")", "", t["test"], ""]
        lines += kind.paired_test_markdown(t)
        lines += [
            "Against every reference (overall):",
            "",
            "| reference | statistic | p (two-sided) | interval |",
            "|---|--:|--:|---|",
        ]
        lines += [kind.versus_row_markdown(row) for row in report["versus_each_reference"]]
        lines.append("")
    if report.get("validation_test_spearman"):
        s = report["validation_test_spearman"]
        lines += [f"Validation vs test (Spearman, {s['over']}, n = {s['n']}): rho = {_num(s['rho'], '.3f')}.", ""]
    lines += [
        "## Pareto front (complexity vs validation " + report["metric"] + ")",
        "",
        report["pareto_rule"],
        "",
        "| complexity | validation | score | | hash | formula |",
        "|--:|--:|--:|---|---|---|",
    ]
    for e in report["pareto_front"]:
        formula = e["formula"]["text"] if e["formula"]["ok"] else e["formula"]["reason"]
        lines.append(
            f"| {e['complexity']} | {_num(e['loss'])} | {_num(e['score'], '.3g')} | "
            f"{'**recommended**' if e['recommended'] else ''} | `{e['hash']}` | {formula.replace('|', '/')} |"
        )
    lines.append("")
    return "\n".join(lines)


def progress_markdown(store: Any, run_id: str, k: int = 5) -> str:
    """What ``ndvm report`` says of a run that is still running: its counters, the best entries on
    validation so far and the Pareto front with the champion so far (``storage.selection``). No
    test score: the test split is read once, when the run finishes (the report card is written then)."""
    from storage.formula import render
    from storage.parsimony import run_front

    status = store.run_status(run_id)
    lines = [
        f"# Run {run_id}: still {status.status}",
        "",
        f"{status.dataset} / {status.task}; metric {status.metric}. So far: {status.proposed} proposed, "
        f"{status.new} new, {status.calibrated} calibrated, {status.failed} failed, {status.pending} pending. "
        "The report card (champion against the references on the test split, with the paired test) is "
        f"written when the run finishes: `ndvm report --run {run_id}` then.",
        "",
        f"## Best so far on validation {status.metric}",
        "",
        f"| rank | validation {status.metric} | hash | formula |",
        "|--:|--:|---|---|",
    ]
    top = store.top(k, run_id=run_id)
    for row in top.iter_rows(named=True):
        values = {n: v for n, v in json.loads(row["parameters"] or "{}").items() if "/" not in n}
        f = render(row["source"], values)
        text = f.text if f.ok else " ".join(row["source"].split())
        lines.append(f"| {row['rank']} | {_num(row['score'])} | `{row['hash']}` | {text.replace('|', '/')} |")
    if top.is_empty():
        lines.append("| | | | (no calibrated candidate yet) |")
    lines.append("")
    if not status.higher_is_better:
        front = run_front(store, run_id)
        choice = champion_of_run(store, run_id)
        if front:
            lines += [
                f"## Pareto front so far (complexity vs validation {status.metric})",
                "",
                "| complexity | validation | | hash |",
                "|--:|--:|---|---|",
            ]
            lines += [
                f"| {e.complexity} | {_num(e.loss)} | "
                f"{'**champion so far**' if choice is not None and e.hash == choice.hash else ''} | `{e.hash}` |"
                for e in front
            ]
            lines.append("")
    return "\n".join(lines)


def _stderr_markdown(se: dict[str, Any]) -> list[str]:
    if "error" in se:
        return [f"Standard errors: not computed ({se['error']}).", ""]
    groups = list(se)
    if not groups:
        return []
    lines = []
    if len(groups) == 1:
        s = se[groups[0]]
        if "error" in s:
            return [f"Standard errors: not computed ({s['error']}).", ""]
        lines += ["| parameter | estimate | std. error | |", "|---|--:|--:|---|"]
        for name, est in s["estimates"].items():
            flag = "" if s["identifiable"][name] else "not identifiable"
            lines.append(f"| {name} | {_num(est)} | {_num(s['stderr'][name], '.3g')} | {flag} |")
        lines += [
            "",
            f"({s['method']}; condition number {_num(s['condition'], '.3g')}"
            + (f"; {s['note']}" if s["note"] else "")
            + ")",
            "",
        ]
        return lines
    # one fit per group: a summary per parameter
    ok = [s for s in se.values() if "error" not in s]
    if not ok:
        return ["Standard errors: not computed for any group.", ""]
    lines += [
        f"Standard errors per group ({len(ok)} of {len(groups)} groups computed): median estimate, "
        "median standard error, groups where the parameter is not identifiable.",
        "",
        "| parameter | median estimate | median std. error | not identifiable |",
        "|---|--:|--:|--:|",
    ]
    for name in ok[0]["estimates"]:
        est = [s["estimates"][name] for s in ok]
        errs = [s["stderr"][name] for s in ok if s["stderr"][name] is not None]
        bad = sum(not s["identifiable"][name] for s in ok)
        lines.append(f"| {name} | {_num(np.median(est))} | {_num(np.median(errs) if errs else None, '.3g')} | {bad} |")
    lines.append("")
    return lines


def _json_default(value: Any) -> Any:
    if isinstance(value, (np.floating, np.integer)):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    return str(value)


def report_json(report: dict[str, Any]) -> str:
    def clean(v: Any) -> Any:
        if isinstance(v, float) and not math.isfinite(v):
            return None if math.isnan(v) else ("inf" if v > 0 else "-inf")
        if isinstance(v, dict):
            return {str(k): clean(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return [clean(x) for x in v]
        return v

    return json.dumps(clean(report), indent=2, default=_json_default)


def log_report(tracker: Any, store: Any, run_id: str, report: dict[str, Any]) -> None:
    """report.md + report.json on the parent run; on every logged entry's nested run a ``formula``
    tag and ``formula.tex``; the champion's standard errors as ``stderr_<param>`` metrics."""
    import tempfile

    from storage.formula import render
    from storage.plots import plot_formula

    client, parent = tracker.client, tracker.parent_run_id
    with tempfile.TemporaryDirectory() as tmp:
        Path(tmp, "report.md").write_text(report_markdown(report))
        Path(tmp, "report.json").write_text(report_json(report))
        if parent is not None:
            client.log_artifact(parent, str(Path(tmp, "report.md")))
            client.log_artifact(parent, str(Path(tmp, "report.json")))
            client.set_tag(parent, "verdict", report["verdict"][:5000])
        logged = store.logged(run_id)
        champion = report["champion"]["hash"]
        plots = Path(tmp, "plots")
        plots.mkdir()
        for path in report_plots(report, plots):
            for run in {parent, logged.get(champion)} - {None}:
                client.log_artifact(run, str(path), "plots")
        for digest, nested in logged.items():
            row = store.evaluation(run_id, digest)
            source = store.candidate(digest)["source"]
            plain = {k: v for k, v in row["parameters"].items() if "/" not in k}
            formula = render(source, plain)
            client.set_tag(nested, "formula", (formula.text if formula.ok else formula.reason)[:5000])
            entry_dir = Path(tmp, digest)
            entry_dir.mkdir()
            if formula.ok:
                path = entry_dir / "formula.tex"
                path.write_text(formula.latex + "\n")
                client.log_artifact(nested, str(path))
                # previewable in the UI: the image and the Markdown (text, LaTeX, program)
                client.log_artifact(nested, str(plot_formula(formula.text, entry_dir / "formula.png", title=digest)))
            (entry_dir / "formula.md").write_text(formula_markdown(digest, formula, source))
            client.log_artifact(nested, str(entry_dir / "formula.md"))
            if digest == champion:
                from mlflow.entities import Metric

                stamp = int(__import__("time").time() * 1000)
                metrics = []
                for group, se in report["champion"]["stderr"].items():
                    if not isinstance(se, dict) or "stderr" not in se:
                        continue
                    prefix = "stderr_" if group == "None" else f"stderr_{group}_"
                    metrics += [
                        Metric(f"{prefix}{name}", float(v), stamp, 0)
                        for name, v in se["stderr"].items()
                        if v is not None and math.isfinite(v)
                    ]
                for start in range(0, len(metrics), 500):
                    client.log_batch(nested, metrics=metrics[start : start + 500])


def finish_report(
    store: Any, run_id: str, task: Any, folder: str | Path, log: Any, calibrate_options: dict[str, Any] | None = None
) -> dict[str, Any] | None:
    """The end of a finished run: build the report card and write it under ``folder/reports/<run>``.
    A report that cannot be built is a warning, never a failed run (the results are in the store)."""
    import time

    started = time.monotonic()
    try:
        report = build_report(store, run_id, task=task, calibrate_options=calibrate_options)
        md, _ = write_report(report, folder)
    except Exception as exc:
        log.warning(
            "the report card could not be built: %s: %s (retry with `ndvm report --run %s`)",
            type(exc).__name__,
            exc,
            run_id,
        )
        return None
    log.info("report card %s in %.1f s: %s", md, time.monotonic() - started, report["verdict"])
    return report


def write_report(report: dict[str, Any], folder: str | Path) -> tuple[Path, Path]:
    """report.md and report.json under ``folder/reports/<run>/``."""
    out = Path(folder) / "reports" / report["run_id"]
    out.mkdir(parents=True, exist_ok=True)
    md, js = out / "report.md", out / "report.json"
    md.write_text(report_markdown(report))
    js.write_text(report_json(report))
    return md, js


__all__ = [
    "build_report",
    "finish_report",
    "report_markdown",
    "report_json",
    "progress_markdown",
    "log_report",
    "write_report",
    "ReportError",
    "Errors",
    "model_errors",
    "reference_errors",
    "paired_test",
    "paired_forecast_test",
    "paired_curve_test",
    "verdict",
]
