"""The data card and the residual notes of the LLM prompt: short text from numbers.

The tasks (``datasets/tasks``) decide WHICH rows and errors go in (training and validation only,
never test) and expose them as facts (``datasets/tasks/facts.py``: ``Task.card_facts``,
``Task.residual_facts``); this module only turns those arrays into a few compact lines
(``card_text``, ``residual_text``), so that every task words its card the same way. Everything here is plain numpy and stays a few hundred tokens long:
numbers are printed with 3 significant digits, long lists are cut to the most telling entries.

- :func:`column_lines`: per column its unit, range, mean and spread (the scale a parameter needs).
- :func:`lag_line`, :func:`seasonal_lines`: lag structure (autocorrelation) and the calendar
  cycle of a monthly series.
- :func:`group_spread_lines`: how much the groups (battery cells) differ: value at the start,
  fade rate, life to a threshold.
- :func:`forecast_residual_lines`, :func:`group_residual_lines`: where the current best model
  fails on validation (by lead and calendar month; by group and x range).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from datasets.tasks.facts import (
    ColumnFacts,
    CovariateFacts,
    GroupFacts,
    GroupResidualFacts,
    InputCorrelationFacts,
    InputResidualFacts,
    LeadResidualFacts,
    NoteFact,
    SeriesFacts,
    UnscoredFact,
)

MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")


def num(value: Any) -> str:
    """A number in 3 significant digits (4 from 100, 6 from 1000 up), ``nan``/``inf`` spelled out."""
    value = float(value)
    if not math.isfinite(value):
        return str(value)
    if abs(value) >= 1000:  # years and cycle counts: every digit (1990.92 is not 1991)
        return f"{value:.6g}"
    return f"{value:.4g}" if abs(value) >= 100 else f"{value:.3g}"


def column_lines(columns: Sequence[Any], values: dict[str, np.ndarray]) -> list[str]:
    """One line per column: ``- name [unit]: min..max, mean m, sd s`` (numeric) or the number of
    distinct values (other). ``columns``: objects with ``name`` and ``unit``; ``values``: name ->
    the column's values over the rows the card may use."""
    lines = []
    for column in columns:
        if column.name not in values:
            continue
        data = np.asarray(values[column.name])
        unit = f" [{column.unit}]" if getattr(column, "unit", "") else ""
        if data.dtype.kind in "iuf" and data.size:
            as_float = data if data.dtype == np.float64 else data.astype(float)
            finite_mask = np.isfinite(as_float)
            finite = as_float if finite_mask.all() else as_float[finite_mask]  # (no copy of a clean column)
            if finite.size == 0:
                lines.append(f"- {column.name}{unit}: no finite values")
                continue
            lines.append(
                f"- {column.name}{unit}: {num(finite.min())}..{num(finite.max())}, "
                f"mean {num(finite.mean())}, sd {num(finite.std())}"
            )
        else:
            lines.append(f"- {column.name}{unit}: {len(set(data.tolist()))} distinct values")
    return lines


def autocorrelation(y: np.ndarray, lag: int) -> float:
    """Sample autocorrelation of ``y`` at ``lag`` (about the series mean)."""
    y = np.asarray(y, dtype=float)
    if lag <= 0 or lag >= y.size:
        raise ValueError(f"lag must be in 1..{y.size - 1}, got {lag}")
    d = y - y.mean()
    denominator = float(np.dot(d, d))
    return float(np.dot(d[lag:], d[:-lag]) / denominator) if denominator > 0 else float("nan")


def lag_line(y: np.ndarray, lags: Iterable[int] = (1, 2, 3, 6, 12, 24)) -> str:
    """``autocorrelation at lag 1: 0.93, 2: 0.84, ...`` over the lags shorter than the series."""
    y = np.asarray(y, dtype=float)
    parts = [f"{lag}: {autocorrelation(y, lag):.2f}" for lag in lags if lag < y.size - 1]
    return "autocorrelation at lag " + ", ".join(parts)


def seasonal_lines(y: np.ndarray, months: np.ndarray) -> list[str]:
    """The calendar cycle of a monthly series: mean and sd per calendar month (1-12), and the
    lag-1 autocorrelation by calendar month of the later value (persistence that depends on the
    season, as ENSO's spring barrier)."""
    y, months = np.asarray(y, dtype=float), np.asarray(months, dtype=int)
    present = [m for m in range(1, 13) if np.any(months == m)]
    means = " ".join(f"{MONTHS[m - 1]} {num(y[months == m].mean())}" for m in present)
    sds = " ".join(f"{MONTHS[m - 1]} {num(y[months == m].std())}" for m in present)
    persistence = []
    for m in present:
        later = np.flatnonzero(months[1:] == m) + 1  # index of a month-m value with a predecessor
        if later.size > 2:
            a, b = y[later], y[later - 1]
            if a.std() > 0 and b.std() > 0:
                persistence.append(f"{MONTHS[m - 1]} {np.corrcoef(a, b)[0, 1]:.2f}")
    lines = [f"mean by calendar month: {means}", f"sd by calendar month: {sds}"]
    if persistence:
        lines.append("correlation of each month with the month before: " + " ".join(persistence))
    return lines


def _slope(x: np.ndarray, y: np.ndarray) -> float:
    if x.size < 2 or np.ptp(x) == 0:
        return float("nan")
    return float(np.polyfit(x, y, 1)[0])


def spread_line(label: str, values: list[float]) -> str:
    """``- label: min a, quartiles q1 / q2 / q3, max b (over n)`` over the finite values."""
    finite = np.asarray([v for v in values if math.isfinite(v)], dtype=float)
    if finite.size == 0:
        return f"- {label}: not defined"
    q = np.percentile(finite, [0, 25, 50, 75, 100])
    return (
        f"- {label}: min {num(q[0])}, quartiles {num(q[1])} / {num(q[2])} / {num(q[3])}, "
        f"max {num(q[4])} (over {finite.size})"
    )


def group_spread_lines(
    groups: dict[Any, tuple[np.ndarray, np.ndarray]],
    *,
    group_label: str,
    x_label: str,
    y_label: str,
    x_per_unit: float,
    thresholds: Sequence[float] = (0.8,),
) -> list[str]:
    """How the groups differ, over the rows the card may use (``groups``: group -> (x, y), x in the
    dataset's own units, sorted). Per group: y at its first row, the last x, the fade rate
    (least-squares slope of y per ``x_per_unit`` of x), and for each of ``thresholds`` the x at
    which y first falls below that fraction of its start (its life; groups that stay above it in
    these rows are counted)."""
    kept = [(x, y) for x, y in groups.values() if y.size]
    lines = [
        f"Spread across the {len(kept)} {group_label} groups (training and validation rows):",
        spread_line(f"{y_label} at the first row", [float(y[0]) for _, y in kept]),
        spread_line(f"last {x_label} seen", [float(x[-1]) for x, _ in kept]),
        spread_line(
            f"fade rate, change of {y_label} per {x_per_unit:g} {x_label}", [_slope(x / x_per_unit, y) for x, y in kept]
        ),
    ]
    for threshold in thresholds:
        lives = []
        for x, y in kept:
            below = np.flatnonzero(y < threshold * y[0])
            if below.size:
                lives.append(float(x[below[0]]))
        beyond = len(kept) - len(lives)
        life = spread_line(f"{x_label} at which {y_label} first falls below {threshold:g} x its start", lives)
        lines.append(life + (f"; {beyond} groups stay above it in these rows" if beyond else ""))
    return lines


def _rmse_bias(errors: np.ndarray) -> tuple[float, float]:
    errors = np.asarray(errors, dtype=float)
    errors = errors[np.isfinite(errors)]
    if errors.size == 0:
        return float("nan"), float("nan")
    return float(np.sqrt(np.mean(errors**2))), float(np.mean(errors))


def forecast_residual_lines(errors: np.ndarray, target_months: np.ndarray | None) -> list[str]:
    """Where a forecaster fails: RMSE and bias (mean of forecast - observed) per lead, and per
    calendar month of the target when the months are known. ``errors``: [origins, leads] (NaN
    where the target is outside the split); ``target_months``: the same shape, 1-12."""
    errors = np.asarray(errors, dtype=float)
    leads = [_rmse_bias(errors[:, k]) for k in range(errors.shape[1])]
    lines = [
        "RMSE by lead: " + " ".join(f"{k + 1}:{num(r)}" for k, (r, _) in enumerate(leads)),
        "bias (forecast - observed) by lead: " + " ".join(f"{k + 1}:{num(b)}" for k, (_, b) in enumerate(leads)),
    ]
    if target_months is not None:
        months = np.asarray(target_months)
        by_month = []
        for m in range(1, 13):
            mask = (months == m) & np.isfinite(errors)
            if mask.any():
                by_month.append((m, *_rmse_bias(errors[mask])))
        lines.append(
            "RMSE by target calendar month (all leads): "
            + " ".join(f"{MONTHS[m - 1]} {num(r)}" for m, r, _ in by_month)
        )
        worst = sorted(by_month, key=lambda t: -t[1])[:3]
        lines.append(
            "worst target months: " + ", ".join(f"{MONTHS[m - 1]} (RMSE {num(r)}, bias {num(b)})" for m, r, b in worst)
        )
    return lines


def group_residual_lines(
    errors: dict[Any, np.ndarray],
    x: dict[Any, np.ndarray],
    *,
    group_label: str,
    x_label: str,
    bins: int = 4,
    worst: int = 5,
) -> list[str]:
    """Where a per-group curve fails: the worst groups by RMSE (with their bias), the spread of the
    per-group RMSE, and RMSE and bias by range of x (quantile bins of the pooled x)."""
    per_group = {g: _rmse_bias(e) for g, e in errors.items()}
    ranked = sorted(per_group.items(), key=lambda kv: -kv[1][0] if math.isfinite(kv[1][0]) else math.inf)
    rmses = [r for r, _ in per_group.values()]
    lines = []
    if len(per_group) > 1:
        lines.append(spread_line(f"RMSE per {group_label}", rmses)[2:])
        lines.append(
            f"worst {group_label}s: " + ", ".join(f"{g} (RMSE {num(r)}, bias {num(b)})" for g, (r, b) in ranked[:worst])
        )
    pooled_x = np.concatenate([np.asarray(x[g], dtype=float) for g in errors])
    pooled_e = np.concatenate([np.asarray(errors[g], dtype=float) for g in errors])
    if pooled_x.size:
        edges = np.unique(np.quantile(pooled_x, np.linspace(0, 1, bins + 1)))
        parts = []
        for i in range(len(edges) - 1):
            last = i == len(edges) - 2
            mask = (pooled_x >= edges[i]) & ((pooled_x <= edges[i + 1]) if last else (pooled_x < edges[i + 1]))
            if mask.any():
                r, b = _rmse_bias(pooled_e[mask])
                parts.append(f"{num(edges[i])}-{num(edges[i + 1])}: RMSE {num(r)}, bias {num(b)}")
        if parts:
            lines.append(f"by {x_label} range: " + "; ".join(parts))
    return lines


# ---------------------------------------------------------------------------- the task's facts in words
# A task exposes facts (datasets/tasks/facts.py: arrays it chose, training and validation only);
# each kind of fact has one renderer here. ``card_text`` and ``residual_text`` are what the prompt gets.
def _column_facts(f: ColumnFacts) -> list[str]:
    rows = f"the {f.rows} training and validation rows only"
    if f.sampled is not None:
        rows += f"; a seeded sample of {f.sampled} of them"
    return [f"Data card ({rows}):", *column_lines(f.columns, f.values)]


def _series_facts(f: SeriesFacts) -> list[str]:
    y = np.asarray(f.values, dtype=float)
    lines = [f"Series `{f.name}` ({y.size} points): {lag_line(y)}"]
    if f.months is not None:
        lines += seasonal_lines(y, f.months)
    return lines


def _covariate_facts(f: CovariateFacts, lags: tuple[int, ...] = (1, 3, 6)) -> list[str]:
    """How the covariate observed at step t correlates with the series at t + lag."""
    y = np.asarray(f.series, dtype=float)
    c = np.asarray(f.values, dtype=float)[: len(y)]
    parts = []
    for lag in lags:
        if len(y) > lag + 2 and np.std(c[:-lag]) > 0 and np.std(y[lag:]) > 0:
            parts.append(f"lag {lag}: r = {np.corrcoef(c[:-lag], y[lag:])[0, 1]:+.2f}")
    if not parts:
        return []
    return [f"Covariate `{f.name}` (x entry {f.entry}) at step t vs `{f.series_name}` at t + lag: " + ", ".join(parts)]


def _group_facts(f: GroupFacts) -> list[str]:
    lines = group_spread_lines(
        f.groups,
        group_label=f.group_label,
        x_label=f.x_label,
        y_label=f.y_label,
        x_per_unit=f.x_per_unit,
        thresholds=f.thresholds,
    )
    return lines + [spread_line(f"{column} at the first row", values) for column, values in f.first_rows.items()]


def _input_correlation_facts(f: InputCorrelationFacts) -> list[str]:
    y = np.asarray(f.values, dtype=float)
    lines = []
    for column, name, values in f.inputs:
        v = np.asarray(values, dtype=float)
        if np.std(v) > 0 and np.std(y) > 0:
            alias = f" (program input `{name}`)" if name != column else ""
            lines.append(f"- correlation of {f.target} with {column}{alias}: {num(float(np.corrcoef(v, y)[0, 1]))}")
    return lines


def _note_fact(f: NoteFact) -> list[str]:
    return [f.text]


def _unscored_fact(f: UnscoredFact) -> list[str]:
    return [f"The best program could not be scored on validation: {f.reason}"]


def _lead_residual_facts(f: LeadResidualFacts) -> list[str]:
    return forecast_residual_lines(f.errors, f.target_months)


def _group_residual_facts(f: GroupResidualFacts) -> list[str]:
    return group_residual_lines(f.errors, f.x, group_label=f.group_label, x_label=f.x_label)


def _input_residual_facts(f: InputResidualFacts) -> list[str]:
    """RMSE and bias of a table's model by range (thirds) of each input."""
    p, y = np.asarray(f.prediction, dtype=float), np.asarray(f.target, dtype=float)
    err = p - y
    if not np.all(np.isfinite(err)):
        return ["The best program gives non-finite predictions on some validation rows."]
    rmse = float(np.sqrt(np.mean(err**2)))
    lines = [f"Validation residuals of the best program (RMSE {num(rmse)}), by thirds of each input:"]
    for name, v in f.inputs.items():
        edges = np.quantile(v, [0, 1 / 3, 2 / 3, 1])
        cells = []
        for i in range(3):
            m = (v >= edges[i]) & (v <= edges[i + 1])
            if m.any():
                cells.append(
                    f"{num(edges[i])}..{num(edges[i + 1])}: rmse {num(np.sqrt(np.mean(err[m] ** 2)))}, "
                    f"bias {num(np.mean(err[m]))}"
                )
        lines.append(f"- {name}: " + "; ".join(cells))
    return lines


_RENDERERS: dict[type, Callable[[Any], list[str]]] = {
    ColumnFacts: _column_facts,
    SeriesFacts: _series_facts,
    CovariateFacts: _covariate_facts,
    GroupFacts: _group_facts,
    InputCorrelationFacts: _input_correlation_facts,
    NoteFact: _note_fact,
    UnscoredFact: _unscored_fact,
    LeadResidualFacts: _lead_residual_facts,
    GroupResidualFacts: _group_residual_facts,
    InputResidualFacts: _input_residual_facts,
}


def fact_lines(fact: Any) -> list[str]:
    """The lines of one fact; a fact of a kind with no renderer is a TypeError naming it."""
    render = _RENDERERS.get(type(fact))
    if render is None:
        raise TypeError(f"no data-card renderer for {type(fact).__name__} (add one in proposers/datacard.py)")
    return render(fact)


def card_text(facts: Sequence[Any]) -> str:
    """The data card of the LLM prompt from a task's ``card_facts()``."""
    return "\n".join(line for fact in facts for line in fact_lines(fact))


def residual_text(facts: Sequence[Any]) -> str:
    """Where the best program fails on validation, from a task's ``residual_facts(...)`` ("" when none)."""
    return "\n".join(line for fact in facts for line in fact_lines(fact))
