"""What a forecast candidate sees besides the series: the calendar position and declared covariates.

A forecast candidate may define ``(update s y x)`` instead of ``(update s y)``. Then ``x`` is a
``vec`` of what is observed together with ``y``:

- ``(ref x 0)``: the calendar position of y's time step, 1..period (the month of the year, 1-12,
  for monthly data; the quarter for quarterly data; otherwise the step's place in the dataset's
  period counted from the first point), when the dataset has a period;
- then each covariate the dataset declares, in the declared order (SOI beside Niño 3.4;
  ``covariates = [...]`` in a user manifest, ``--covariate COL`` on the command line).

Nothing from after the forecast origin is revealed. The covariate inputs of every driver hold the
same points as its series (training points for the fit, up to the end of the scored split for a
score), and a multi-step forecast from origin t iterates ``s <- (update s (predict s) x)`` with
the **calendar advanced** (the calendar of a future step is known in advance: no data) and the
**covariates held at their last observed value** (those observed with y[t]); a candidate that wants
a forecast of a covariate keeps its own in its state. Old candidates, ``(update s y)``, work as
before and see nothing new.

This module decides the dataset-side facts (period, leads, time-step unit, calendar positions,
covariate columns) and writes the driver helper that builds ``x``; ``forecast.py`` uses them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from ..schema import Dataset
from .errors import CandidateError, TaskError

CALENDAR_INPUT = "ndvm-task-calendar"  # 1..period of every step (the series' steps and beyond)
COVARIATE_INPUT = "ndvm-task-covariate{}"  # one series input per declared covariate
X_HELPER = "ndvm-task-x"  # (ndvm-task-x j i): calendar of step j, covariates observed at step i

# Time-step names by the median spacing of a decimal-year x column (tolerance 5 %).
_STEPS_PER_YEAR = {12: "month", 4: "quarter", 1: "year", 52: "week"}
# The default period of a time step (a seasonal cycle); a year has none.
_PERIOD_OF_STEP = {"month": 12, "quarter": 4, "week": 52}
# The column that gives the calendar position directly, for a period.
_CALENDAR_COLUMN = {12: "month", 4: "quarter"}


def plural(step: str) -> str:
    return step if step.endswith("s") else f"{step}s"


def infer_time_step(dataset: Dataset) -> str:
    """The dataset's time step: ``meta["time_step"]`` when given (a manifest's ``time_step``), else
    "month" for a frame with a month column, else from the spacing of a decimal-year x column
    ("month", "quarter", "week", "year"), else "step"."""
    given = dataset.meta.get("time_step")
    if given:
        return str(given)
    frame = dataset.frame
    if "month" in frame.columns:
        return "month"
    x = frame.get_column(dataset.x).cast(pl.Float64).to_numpy()
    if len(x) > 2:
        step = float(np.median(np.diff(np.sort(x))))
        if step > 0 and 1000 <= np.median(x) <= 3000:  # an x measured in years
            for per_year, name in _STEPS_PER_YEAR.items():
                if abs(step * per_year - 1.0) < 0.05:
                    return name
    return "step"


def resolve_period(dataset: Dataset, time_step: str) -> int | None:
    """``meta["period"]`` (a manifest's ``period``; 0 or 1: none), else the time step's own cycle
    (12 for months, 4 for quarters, 52 for weeks), else None."""
    given = dataset.meta.get("period")
    if given is not None:
        try:
            period = int(given)
        except (TypeError, ValueError):
            raise TaskError(f"{dataset.name}: period must be a whole number of steps, got {given!r}") from None
        if period < 0 or period != float(given):
            raise TaskError(f"{dataset.name}: period must be a whole number of steps >= 0, got {given!r}")
        return period if period > 1 else None
    return _PERIOD_OF_STEP.get(time_step)


def default_leads(dataset: Dataset, period: int | None) -> int:
    """``meta["leads"]`` (a manifest's ``leads``), else one period for a period of 12 or more
    (at most 24), two periods for a shorter one (quarters: 8), and 12 steps without a period."""
    given = dataset.meta.get("leads")
    if given is not None:
        if int(given) != float(given) or int(given) < 1:
            raise TaskError(f"{dataset.name}: leads must be a whole number >= 1, got {given!r}")
        return int(given)
    if period is None:
        return 12
    return min(24, period if period >= 12 else 2 * period)


def calendar_positions(dataset: Dataset, frame: pl.DataFrame, period: int, n: int) -> np.ndarray:
    """The calendar position (1..period) of the first ``n`` steps from the series' start (n may
    exceed the series: later steps continue the cycle). Read from the month (period 12) or quarter
    (period 4) column when the frame has it; else the step's place in the period from the start."""
    column = _CALENDAR_COLUMN.get(period)
    first = 1
    if column is not None and column in frame.columns:
        first = int(frame.get_column(column)[0])
        if not 1 <= first <= period:
            raise TaskError(f"{dataset.name}: column {column!r} holds {first}, not 1..{period}")
    return ((first - 1 + np.arange(n)) % period + 1).astype(float)


def covariate_columns(dataset: Dataset) -> tuple[str, ...]:
    """The covariate columns the dataset declares (``meta["covariates"]``), checked: numeric,
    present, not the series itself, no missing value."""
    names = tuple(str(c) for c in dataset.meta.get("covariates") or ())
    frame = dataset.frame
    for name in names:
        if name not in frame.columns:
            raise TaskError(f"{dataset.name}: covariate {name!r} is not a column ({frame.columns})")
        if name in (dataset.y, dataset.x, "split"):
            raise TaskError(f"{dataset.name}: covariate {name!r} is the series' own x, y or split column")
        values = frame.get_column(name)
        if not values.dtype.is_numeric():
            raise TaskError(f"{dataset.name}: covariate {name!r} is not numeric ({values.dtype})")
        if values.null_count() or not np.all(np.isfinite(values.cast(pl.Float64).to_numpy())):
            raise TaskError(f"{dataset.name}: covariate {name!r} has missing or non-finite values")
    if len(set(names)) != len(names):
        raise TaskError(f"{dataset.name}: covariates {list(names)} name a column twice")
    return names


@dataclass(frozen=True)
class ForecastInputs:
    """The calendar and covariates of one forecast dataset, in the series' time order."""

    time_step: str  # "month", "quarter", "year", "step", ...
    period: int | None
    calendar_name: str | None  # what the contract calls (ref x 0): "month", "quarter", "calendar"
    calendar: np.ndarray | None  # 1..period of every step; len = the series' length + leads
    covariate_names: tuple[str, ...]
    covariates: np.ndarray  # [n, k] in time order

    @classmethod
    def of(cls, dataset: Dataset, frame: pl.DataFrame, leads: int | None = None) -> ForecastInputs:
        """``frame``: the dataset's frame sorted by time (what the task walks)."""
        step = infer_time_step(dataset)
        period = resolve_period(dataset, step)
        n = frame.height
        horizon = leads if leads is not None else default_leads(dataset, period)
        calendar = calendar_positions(dataset, frame, period, n + horizon + 1) if period else None
        name = _CALENDAR_COLUMN.get(period or 0) if period else None
        if period and (name is None or name not in frame.columns):
            name = "calendar"
        names = covariate_columns(dataset)
        covariates = (
            np.column_stack([frame.get_column(c).cast(pl.Float64).to_numpy() for c in names])
            if names
            else np.zeros((n, 0))
        )
        return cls(step, period, name, calendar, names, covariates)

    @property
    def names(self) -> list[str]:
        """What ``x`` holds, in order: the calendar (when there is a period), then the covariates."""
        return ([self.calendar_name] if self.calendar is not None else []) + list(self.covariate_names)

    @property
    def available(self) -> bool:
        return bool(self.names)

    def input_names(self) -> list[str]:
        """The driver inputs that carry them (reserved names)."""
        cal = [CALENDAR_INPUT] if self.calendar is not None else []
        return cal + [COVARIATE_INPUT.format(i) for i in range(len(self.covariate_names))]

    def driver_inputs(self, end: int) -> dict[str, np.ndarray]:
        """The inputs of a driver that sees the series' first ``end`` points: the covariates of
        those points only, and the calendar (no data: known for every step in advance)."""
        out: dict[str, np.ndarray] = {}
        if self.calendar is not None:
            out[CALENDAR_INPUT] = self.calendar.copy()
        for i in range(len(self.covariate_names)):
            out[COVARIATE_INPUT.format(i)] = self.covariates[:end, i].copy()
        return out

    def helper_source(self) -> str:
        """``(ndvm-task-x j i)``: x with the calendar of step j and the covariates observed at step i
        (the drivers pass i = j for an observation and i = the origin for a forecast step)."""
        parts = ([f"(ref {CALENDAR_INPUT} j)"] if self.calendar is not None else []) + [
            f"(ref {COVARIATE_INPUT.format(i)} i)" for i in range(len(self.covariate_names))
        ]
        return f"(define ({X_HELPER} j i) (vec {' '.join(parts)}))\n"

    def describe(self) -> str:
        """One line for the contract: what (ref x k) is."""
        parts = []
        for k, name in enumerate(self.names):
            if k == 0 and self.calendar is not None:
                what = (
                    "the calendar month of y, 1-12"
                    if name == "month"
                    else f"the {name} of y, 1-{self.period}"
                    if name == "quarter"
                    else f"y's position in the dataset's period of {self.period} {plural(self.time_step)}, "
                    f"1-{self.period}"
                )
            else:
                what = f"covariate `{name}` observed with y"
            parts.append(f"(ref x {k}) = {what}")
        return "; ".join(parts)


def update_arity(forms: list) -> int | None:
    """The number of arguments of the candidate's top-level ``(define (update ...) ...)``."""
    for form in forms:
        if (
            isinstance(form, list)
            and len(form) >= 2
            and isinstance(form[0], str)
            and str(form[0]) == "define"
            and isinstance(form[1], list)
            and form[1]
            and str(form[1][0]) == "update"
        ):
            return len(form[1]) - 1
    return None


def check_update_arity(arity: int | None, inputs: ForecastInputs) -> bool:
    """Whether the candidate takes x (``(update s y x)``); CandidateError for any other arity, or
    for x on a dataset with neither a period nor covariates."""
    if arity == 2:
        return False
    if arity == 3:
        if not inputs.available:
            raise CandidateError(
                "(update s y x): this dataset has no calendar period and no covariates, so there is no x; "
                "define (update s y)"
            )
        return True
    raise CandidateError(f"(update ...) must take 2 arguments (s y) or 3 (s y x), not {arity}")


def input_seed_programs(inputs: ForecastInputs) -> list[str]:
    """Seeds that take x, for a dataset that has a period or covariates: an AR(1) and an AR(2) whose
    lag-1 coefficient follows the calendar (a cosine of the calendar position: the seasonal cycle of
    ENSO's growth rate), and, with covariates, an AR(1) plus a linear term in each covariate
    observed with the last value (SOI beside Niño 3.4). On enso-nino34 the AR(2) one fitted by the
    task (L-BFGS 300 x 8) validates at 0.699 against AR(AIC)'s 0.743 (on enso, Niño 1+2: 1.128 against 1.054)."""
    seeds = []
    if inputs.calendar is not None:
        omega = 2 * np.pi / inputs.period if inputs.period else 0.0
        seeds.append(
            f"""(param phi 0.9 (between -1 1))
(param amp 0.05)
(param phase 0.0)
;; state: (last value, calendar position of it); persistence varies over the period
(define (init) (list 0.0 1))
(define (rho c) (- phi (* amp (cos (+ phase (* {omega!r} c))))))
(define (predict s) (* (rho (cadr s)) (car s)))
(define (update s y x) (list y (ref x 0)))"""
        )
        seeds.append(
            f"""(param a1 1.5)
(param a2 -0.6)
(param amp 0.05)
(param phase 0.0)
;; cyclostationary AR(2): the lag-1 coefficient follows the calendar position of the last value
;; state: (last value, the one before, calendar position of the last)
(define (init) (list 0.0 0.0 1))
(define (g c) (+ a1 (* amp (cos (+ phase (* {omega!r} c))))))
(define (predict s) (+ (* (g (caddr s)) (car s)) (* a2 (cadr s))))
(define (update s y x) (list y (car s) (ref x 0)))"""
        )
    if inputs.covariate_names:
        offset = 1 if inputs.calendar is not None else 0
        names = [f"b{i + 1}" for i in range(len(inputs.covariate_names))]
        params = "\n".join(f"(param {n} 0.0)  ; weight of covariate {c}" for n, c in zip(names, inputs.covariate_names))
        terms = " ".join(f"(* {n} (ref (cadr s) {offset + i}))" for i, n in enumerate(names))
        seeds.append(
            f"""(param phi 0.9 (between -1 1))
{params}
;; state: (last value, x observed with it); the covariates push the next value
(define (init) (list 0.0 (vec {" ".join(["0.0"] * (offset + len(names)))})))
(define (predict s) (+ (* phi (car s)) {terms}))
(define (update s y x) (list y x))"""
        )
    return seeds
