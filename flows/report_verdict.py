"""The report card's verdict in words: the sentence a scientist can quote (``headline``), which
model to use (``best_model_note``), and how references and metrics are named. The paired test
it quotes, and that test's own sentence, are in flows/report_tests.py."""

from __future__ import annotations

import math
from typing import Any

from flows.report_tests import BY_GROUP, BY_LEAD, PRACTICAL_EQUALITY, SIGNIFICANCE, practically_equal
from flows.report_tests import format_number as _num

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
    # curve and regression references alike (a fade only for battery data): neutral words
    "constant": "the constant (the training mean)",
    "linear": "the linear model",
    "quadratic": "the quadratic model",
    "exponential": "the exponential model",
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
    interval = "low" in overall and "high" in overall  # a bootstrap interval (errors by group), or a p-value
    where = (BY_GROUP if interval else BY_LEAD).where
    what = f"{metric_label(report['metric'])} {champ:.3f} against {ref:.3f}"
    if interval:  # significant when the interval excludes 0
        lo, hi = overall["low"], overall["high"]
        significant = hi < 0 or lo > 0
        evidence = f"bootstrap interval of the difference, {int(overall['level'] * 100)}%: [{lo:+.3f}, {hi:+.3f}]"
        test_better = overall["estimate"] < 0
    else:  # a test with a p-value (Diebold-Mariano for forecasts)
        p = overall["p_value"]
        if p is None:  # too few test origins for the test over every lead (flows/report_tests.py)
            evidence = f"no Diebold-Mariano test: {overall['untestable']}"
        else:
            evidence = f"Diebold-Mariano p = {p:.2f}" if p >= 0.01 else f"Diebold-Mariano p = {p:.1g}"
        significant = p is not None and p < SIGNIFICANCE
        test_better = overall["mean_diff"] < 0
    better = champ < ref  # in the metric shown (the test may weigh errors otherwise: DM on squared errors)
    significant = significant and better == test_better
    name = reference_label(best)
    if practically_equal(champ, ref):  # the same law, two fits: no verdict either way
        sentence = (
            f"The champion scores as {name} does {where}: {what}, a difference under "
            f"{PRACTICAL_EQUALITY:.1%} of it ({evidence}); it does not beat it."
        )
    elif better and significant:
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
