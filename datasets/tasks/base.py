"""What every task shares: the task interface, the fit record and the least-squares helper.

The discovery flows (``flows/``) talk to a task only through the methods of :class:`Task`; they
never branch on its kind. A new kind of task is a new subclass in ``datasets/tasks`` (plus an entry
in ``datasets.tasks.TASKS``), and touches nothing else.
"""

from __future__ import annotations

import math
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass
class TaskFit:
    """The outcome of fitting one candidate (or one reference model) on a task's training part.

    ``params``: name -> value for a single fit; for a per-group curve fit, group -> (name -> value).
    ``fits``: the underlying ``ndvm.Fit`` objects (one per group), or an empty list for references.
    ``error``: None, or why the fit failed (the score is then infinite, never silently zero).
    """

    task: str
    name: str
    source: str | None
    params: dict[Any, Any]
    train_loss: float
    seconds: float
    fits: list[Any] = field(default_factory=list)
    error: str | None = None
    n_params: int = 0
    # (group or None, inputs dict) -> prediction; set by the task that made the fit
    predictor: Callable[..., np.ndarray] | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


def least_squares_multistart(func, x, y, starts, lower, upper, max_nfev: int = 400) -> tuple[np.ndarray, float]:
    """Best of several ``scipy.optimize.least_squares`` runs (one per start), as (params, mse)."""
    from scipy.optimize import least_squares

    best_p, best = None, np.inf
    lo, hi = np.asarray(lower, float), np.asarray(upper, float)
    for start in starts:
        # strictly inside finite bounds (least_squares rejects a start on or outside a bound)
        margin_lo = lo.copy()
        margin_lo[np.isfinite(lo)] += 1e-9 * (np.abs(lo[np.isfinite(lo)]) + 1)
        margin_hi = hi.copy()
        margin_hi[np.isfinite(hi)] -= 1e-9 * (np.abs(hi[np.isfinite(hi)]) + 1)
        p0 = np.clip(np.asarray(start, float), margin_lo, margin_hi)

        def residual(p):
            r = func(x, *p) - y
            return np.where(np.isfinite(r), r, 1e6)

        try:
            res = least_squares(residual, p0, bounds=(lo, hi), method="trf", max_nfev=max_nfev)
        except (ValueError, FloatingPointError):
            continue
        mse = float(np.mean(res.fun**2))
        if mse < best:
            best_p, best = res.x, mse
    if best_p is None:
        raise RuntimeError("every start of the least-squares fit failed")
    return best_p, best


SIGNIFICANCE = 0.05  # the level the report card's verdicts speak of


def format_number(value: Any, fmt: str = ".4g") -> str:
    """A number for the report card's Markdown: ``-`` for None, inf/nan spelled out."""
    if value is None:
        return "-"
    try:
        return format(float(value), fmt) if math.isfinite(float(value)) else str(value)
    except (TypeError, ValueError):
        return str(value)


@dataclass
class Errors:
    """Errors (prediction - observation) of one model on one split, in the structure its task gives
    them (``Task.test_errors``); ``kind`` names that task kind, whose class interprets them.

    ``kind="forecast"``: ``values`` is [n_origins, leads] (NaN where the target lies outside the split).
    ``kind="curve"``: ``groups`` maps each scored group to its error vector (key None: no groups).
    ``error``: why the model could not be scored (its primary score is then inf).
    """

    name: str
    kind: str
    values: np.ndarray | None = None
    groups: dict[Any, np.ndarray] | None = None
    error: str | None = None

    def primary(self) -> float:
        """The task's primary metric from these errors (``Task.primary_of_errors``)."""
        if self.error:
            return math.inf
        from . import task_class

        return task_class(self.kind).primary_of_errors(self)


class Task(ABC):
    """The interface every task implements (the flows use nothing else).

    Attributes: ``kind``, ``name``, ``primary_metric`` (lower is better), ``dataset``.

    Splits: candidates are fitted on ``train``; ``score(fit, "validation")`` is what the search
    ranks and selects by; ``score(fit, "test")`` is called once, at the end of a run, for the final
    top k, after ``prepare_test_fit`` (which may fit held-out groups on their own ``test_fit`` rows).

    Subclasses implement: ``program_source(candidate)`` (the text the store compiles),
    ``fit_groups()``, ``fit_inputs(group)``, ``fit_target(group)``, ``calibration_loss``,
    ``collect_params(groups, fits)``, ``attach_predictor(fit, program)``, ``score(fit, split)``,
    ``score_references(split)``, ``restore_fit(source, parameters, name)``, ``probe_inputs()``,
    ``proposer_inputs()``, ``split_label()``, ``entry_extras(source, parameters)``,
    ``check_program(program)``, ``seed_programs()``, ``contract_text()``; optionally
    ``reference_programs()`` (the references as candidates that seed every run).

    The end-of-run report card (``flows/report.py``) uses: ``test_errors`` and
    ``reference_test_errors`` (the split's :class:`Errors`), ``references_to_refit``, and the class
    methods ``primary_of_errors``, ``error_breakdown`` (under the report key ``breakdown_key``),
    ``paired_test``, ``verdict`` and the Markdown pieces ``breakdown_markdown``,
    ``paired_test_markdown`` and ``versus_row_markdown``.
    """

    kind = "task"
    name = "task"
    primary_metric = "rmse"
    calibration_loss = "mse"

    # ---------------------------------------------------------------- fitting a batch
    def fit_batch(
        self, programs: list[Any], sources: list[str], names: list[str], **calibrate_options
    ) -> list[TaskFit]:
        """Fit every compiled program on the training part of every fit group, in one
        ``ndvm.calibrate_groups`` call: programs x groups are the jobs of one native batch on every
        core (a grouped curve task: every battery cell of every candidate at once, each cell on its
        own rows). Never raises for a bad program: its TaskFit carries ``error`` (and an infinite
        training loss), naming the group it failed on."""
        from .runtime import require_ndvm

        ndvm = require_ndvm()
        started = time.perf_counter()
        groups = self.fit_groups()
        data = [(self.fit_inputs(g), self.fit_target(g)) for g in groups]
        by_program = self.calibrate_programs(ndvm, programs, data, **calibrate_options) if programs else []
        seconds = (time.perf_counter() - started) / max(len(programs), 1)
        out = []
        for program, source, name, fits in zip(programs, sources, names, by_program):
            errors = [
                f"{'group ' + str(g) + ': ' if g is not None else ''}{f.error}" for g, f in zip(groups, fits) if f.error
            ]
            error = "; ".join(errors) or None
            if error is None and not all(math.isfinite(f.loss) for f in fits):
                error = "non-finite training loss"
            params = self.collect_params(groups, fits) if error is None else {}
            loss = float(np.mean([f.loss for f in fits])) if error is None else math.inf
            fit = TaskFit(
                self.name,
                name,
                source,
                params,
                loss,
                seconds,
                fits=fits,
                error=error,
                n_params=len(program.param_names),
            )
            if error is None:
                self.attach_predictor(fit, program)
            out.append(fit)
        return out

    def calibrate_programs(self, ndvm: Any, programs: list[Any], data: list[tuple], **calibrate_options) -> list[list]:
        """One list of per-group ``ndvm.Fit`` per program, fitted on ``data`` (one (inputs, target)
        per fit group): ``ndvm.calibrate_groups`` (a task whose groups share parameters overrides it)."""
        return ndvm.calibrate_groups(programs, data, loss=self.calibration_loss, **calibrate_options)

    def reference_programs(self) -> list[tuple[str, str]]:
        """Contract C1: the task's reference models as (name, candidate source in the task's own
        candidate form), calibrated like any candidate; every run is seeded with them. Default: none."""
        return []

    def attach_predictor(self, fit: TaskFit, program: Any) -> None:  # noqa: B027 (an optional hook)
        """Give ``fit`` whatever ``score`` needs besides its parameters (default: nothing)."""

    def prepare_test_fit(self, fit: TaskFit, **calibrate_options) -> TaskFit:
        """The fit to score on the test split (default: ``fit`` itself)."""
        return fit

    def flat_parameters(self, params: dict[Any, Any]) -> dict[str, float]:
        """Fitted parameters as name -> float (what the store and MLflow keep)."""
        return {str(k): float(v) for k, v in params.items()}

    # ---------------------------------------------------------------- what the LLM prompt shows
    def seen_frame(self):
        """The rows the search may look at: training and validation (never test, never the rows a
        held-out group is fitted on at the end)."""
        import polars as pl

        from ..schema import TRAIN, VALIDATION

        return self.dataset.frame.filter(pl.col("split").is_in([TRAIN, VALIDATION]))

    def data_card(self) -> str:
        """A short description of the data for the LLM prompt, from the training and validation
        rows only: per column its unit, range and spread. Tasks add their structure (lags and
        season of a series, spread across groups). Computed once per run; a few hundred tokens."""
        from proposers.datacard import column_lines

        frame = self.seen_frame()
        values = {name: frame.get_column(name).to_numpy() for name in frame.columns if name != "split"}
        lines = [
            f"Data card (the {frame.height} training and validation rows only):",
            *column_lines([c for c in self.dataset.columns if c.name != "split"], values),
        ]
        return "\n".join(lines)

    def validation_residuals(self, source: str, parameters: dict[str, float]) -> str:
        """Where a stored candidate fails on the validation split, in a few lines for the LLM prompt
        ("" when the task has no breakdown). Never looks at the test split."""
        return ""

    # ---------------------------------------------------------------- the report card (test split)
    @abstractmethod
    def test_errors(
        self, source: str, parameters: dict[str, float], name: str, split: str, **calibrate_options
    ) -> Errors:
        """Errors of a stored candidate (source + stored parameters) on ``split``; a candidate that
        fails there gives an :class:`Errors` with ``error`` set, never an exception."""

    @abstractmethod
    def reference_test_errors(self, split: str, only: set[str] | None = None) -> list[Errors]:
        """Errors of the task's reference models on ``split`` (fitted on the training part; only the
        ones named in ``only`` when given)."""

    def references_to_refit(self, stored: dict[str, float | None]) -> set[str] | None:
        """Which references the report refits, given the test scores the end-of-run scoring stored
        (name -> score, None where it failed): None means all of them (default)."""
        return None

    def value_loss_squared_errors(self) -> int | None:
        """With ``calibration_loss == "value"`` (the program computes its own training loss): how
        many squared errors that loss averages, or None when it is not a mean of squared errors
        (then the report card gives no standard errors). Default: None."""
        return None

    breakdown_key = "breakdown"

    @classmethod
    @abstractmethod
    def primary_of_errors(cls, errors: Errors) -> float:
        """The primary metric computed from a model's (error-free) :class:`Errors`."""

    @classmethod
    @abstractmethod
    def error_breakdown(cls, errors: Errors) -> Any:
        """The report's per-unit RMSE of a model (per lead, per group, ...), JSON-ready."""

    @classmethod
    @abstractmethod
    def paired_test(cls, champion: Errors, reference: Errors, replicates: int = 2000, seed: int = 0) -> dict[str, Any]:
        """The paired test of the champion against a reference: ``{"test": how, "overall": {...}, ...}``."""

    @classmethod
    @abstractmethod
    def verdict(cls, champion: Errors, reference: Errors, test: dict[str, Any]) -> str:
        """One sentence: the difference with its p-value or interval, and what it means at 5%."""

    @classmethod
    def breakdown_markdown(cls, breakdown: dict[str, Any], max_groups: int = 12) -> list[str]:
        """Markdown lines of the report's ``breakdown_key`` section (model name -> breakdown)."""
        return []

    @classmethod
    def paired_test_markdown(cls, test: dict[str, Any]) -> list[str]:
        """Markdown lines detailing the paired test beyond its description (default: none)."""
        return []

    @classmethod
    @abstractmethod
    def versus_row_markdown(cls, row: dict[str, Any]) -> str:
        """One row ``| reference | statistic | p | interval |`` of the paired test against each reference."""
