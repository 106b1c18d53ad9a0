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

from .facts import ColumnFacts
from .metrics import rms

# The data card of a larger table describes a seeded sample of this many of its training and
# validation rows (ranges, spreads and correlations to three digits; the card of a 10-million-row
# table cost 1.5 GB of memory over all rows)
CARD_ROWS = 200_000


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


@dataclass
class Errors:
    """Errors (prediction - observation) of one model on one split, in the layout its task gives
    them (``Task.test_errors``); ``kind`` names the task kind that made them (for the record).

    By forecast origin and lead: ``values`` is [n_origins, leads] (NaN where the target lies outside
    the split). By group: ``groups`` maps each scored group to its error vector (key None: no
    groups). The report card's paired test follows from this layout (flows/report_tests.py).
    ``error``: why the model could not be scored (its primary score is then inf).
    """

    name: str
    kind: str
    values: np.ndarray | None = None
    groups: dict[Any, np.ndarray] | None = None
    error: str | None = None

    def breakdown(self) -> list[float] | dict[str, float]:
        """The RMSE per unit of the layout: per lead (a list: lead 1 first, each over the origins
        whose target lies in the split) or per group (group as text -> RMSE)."""
        if self.values is not None:
            return [rms(self.values[:, k], skip_nan=True) for k in range(self.values.shape[1])]
        if self.groups is not None:
            return {str(g): rms(v) for g, v in self.groups.items()}
        raise ValueError(f"errors of {self.name!r} hold neither values by lead nor groups")

    def primary(self) -> float:
        """The primary metric these errors give: the mean over leads or over groups of the RMSE
        (inf when the model could not be scored)."""
        if self.error:
            return math.inf
        breakdown = self.breakdown()
        return float(np.mean(breakdown if isinstance(breakdown, list) else list(breakdown.values())))


class Task(ABC):
    """The interface every task implements (the flows use nothing else, and never branch on the kind).

    A task owns a dataset's splits: candidates are fitted on ``train``; ``score(fit, "validation")``
    is what the search ranks and selects by; ``score(fit, "test")`` is called once, at the end of a
    run, for the final top k, after ``prepare_test_fit`` (which may fit held-out groups on their own
    ``test_fit`` rows). It computes fits and scores; what is said of them (the report card's paired
    tests and plots, the prompt's data card) is worded elsewhere from what it exposes.

    **Every task implements** (abstract here): ``fit_inputs(group)`` and ``fit_target(group)`` (the
    training data of a fit group), ``score(fit, split)`` (a dict holding ``primary_metric``, lower
    is better; ``"error"`` when the fit cannot be scored), ``test_errors(source, parameters, name,
    split)`` (the :class:`Errors` the report card tests) and ``contract_text()`` (what a proposer
    must write). Attributes: ``kind``, ``name``, ``primary_metric``, ``calibration_loss``, ``dataset``.

    **Everything else has a default** a task overrides when it needs to: ``program_source``
    (the candidate as is), ``fit_groups`` (one group, None), ``collect_params``, ``attach_predictor``,
    ``restore_fit`` (one group: the stored parameters), ``check_program``, ``probe_inputs`` (the
    training inputs), ``proposer_inputs``, ``split_label``, ``seed_programs``,
    ``reference_programs``, ``score_references`` and ``reference_test_errors`` (no references),
    ``observed_x`` (no x; the forecast task: calendar and covariates) and ``state_space`` (False),
    ``references_to_refit``, ``value_loss_squared_errors``, ``prepare_test_fit``,
    ``flat_parameters``, ``entry_extras`` (nothing more to log), ``card_facts`` (the columns) and
    ``residual_facts`` (none); ``fit_batch`` and ``calibrate_programs`` fit every group of every
    program in one native batch. ``docs/architecture.md`` ("Add a task") has the recipe.
    """

    kind = "task"
    name = "task"
    primary_metric = "rmse"
    calibration_loss = "mse"
    dataset: Any = None
    # candidates are state-space forecasters (init, predict, update): proposers' TaskSpec.state_space
    state_space = False

    # ---------------------------------------------------------------- what every task implements
    @abstractmethod
    def fit_inputs(self, group: Any = None) -> dict[str, np.ndarray]:
        """The named inputs of a fit on ``group``'s training rows (``fit_groups()``)."""

    @abstractmethod
    def fit_target(self, group: Any = None) -> Any:
        """The target of a fit on ``group``'s training rows (None when the program computes its loss)."""

    @abstractmethod
    def score(self, fit: TaskFit, split: str) -> dict[str, Any]:
        """Scores of ``fit`` on ``split`` ("validation" during the search, "test" once at the end):
        ``primary_metric`` (inf for a failed fit, never silently zero) and whatever else the task
        reports; ``"error"`` says why a fit could not be scored."""

    @abstractmethod
    def test_errors(
        self, source: str, parameters: dict[str, float], name: str, split: str, **calibrate_options
    ) -> Errors:
        """Errors of a stored candidate (source + stored parameters) on ``split``; a candidate that
        fails there gives an :class:`Errors` with ``error`` set, never an exception."""

    @abstractmethod
    def contract_text(self) -> str:
        """What a proposer must write: the program's inputs, its output, an example."""

    # ---------------------------------------------------------------- the program and its fit
    def program_source(self, candidate: str) -> str:
        """The text the store compiles from a candidate (default: the candidate as is)."""
        return candidate

    def check_program(self, program: Any) -> None:  # noqa: B027 (an optional hook)
        """Refuse a compiled program this task cannot fit (raise ``CandidateError``); default: accept."""

    def fit_groups(self) -> list[Any]:
        """The groups fitted apart (one set of parameters each); default: one, named None."""
        return [None]

    def collect_params(self, groups: list[Any], fits: list[Any]) -> dict[Any, Any]:
        """A fit's parameters from its per-group ``ndvm.Fit``: name -> value for one group, else
        group -> (name -> value)."""
        if groups == [None]:
            return dict(fits[0].params)
        return {g: dict(f.params) for g, f in zip(groups, fits)}

    def restore_fit(self, source: str, parameters: dict[str, float], name: str = "entry") -> TaskFit:
        """A stored candidate's fit back from its stored (flat) parameters, ready to score. The
        default serves a task of one fit group; a task with several overrides it."""
        from .runtime import require_ndvm

        program = require_ndvm().compile(self.program_source(source))
        params = {n: float(parameters[n]) for n in program.param_names}
        fit = TaskFit(self.name, name, source, params, math.nan, 0.0, n_params=len(program.param_names))
        self.attach_predictor(fit, program)
        return fit

    # ---------------------------------------------------------------- what the proposers see
    def probe_inputs(self) -> dict[str, np.ndarray]:
        """Inputs for the store's semantic fingerprint, inside the data's domain (default: the
        training inputs of the first fit group)."""
        return self.fit_inputs(self.fit_groups()[0])

    def proposer_inputs(self) -> dict[str, str]:
        """The program's inputs as a proposer sees them: name -> description."""
        return {name: "an input of the program" for name in self.fit_inputs(self.fit_groups()[0])}

    def split_label(self) -> str:
        """How the rows were split, in words (default: none given)."""
        return ""

    def seed_programs(self) -> list[str]:
        """Valid starting programs for the mutation proposer (default: none)."""
        return []

    def score_references(self, split: str) -> list[dict[str, Any]]:
        """The reference models' scores on ``split`` (``score``'s dicts, with ``model``); default: none."""
        return []

    def fit_references(self) -> None:  # noqa: B027 (an optional hook)
        """Fit the reference models now and keep the fits (on the training split only), so that
        scoring them later is cheap: the pipeline calls it on a background thread at the start of a
        run. Default: nothing (the task refits its references when it scores them)."""

    def reference_test_errors(self, split: str, only: set[str] | None = None) -> list[Errors]:
        """Errors of the task's reference models on ``split`` (fitted on the training part; only the
        ones named in ``only`` when given). Default: no references."""
        return []

    def entry_extras(self, source: str, parameters: dict[str, float]) -> dict[str, Any]:
        """What MLflow logs for a leaderboard entry besides the store's row: the data of its plots
        (``fit_series``, ``forecast_series``), an input example, a model program. Default: nothing."""
        return {}

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

    def observed_x(self) -> list[tuple[str, int | None]]:
        """What a candidate's ``(ref x i)`` holds, in order: (name, period) for the calendar
        position, (name, None) for a covariate (the forecast task); default: no x."""
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

    def card_frame(self):
        """(frame, rows): the rows the data card describes: the training and validation rows, or of
        a table with more than ``CARD_ROWS`` of them a seeded sample of that many (in row order),
        cut by row index without copying the whole table; ``rows`` counts all of them."""
        from ..schema import TRAIN, VALIDATION

        frame = self.dataset.frame
        seen = np.flatnonzero(frame.get_column("split").is_in([TRAIN, VALIDATION]).to_numpy())
        rows = int(seen.size)
        if rows > CARD_ROWS:
            seen = seen[np.sort(np.random.default_rng(0).choice(rows, CARD_ROWS, replace=False))]
        return frame[seen], rows

    def card_facts(self) -> list[Any]:
        """What the LLM prompt's data card says (``datasets/tasks/facts.py``; worded by
        ``proposers.datacard.card_text``), from the training and validation rows only: per column
        its unit, range and spread. Tasks add their structure (lags and season of a series, spread
        across groups). Computed once per run; a few hundred tokens once worded."""
        frame, rows = self.card_frame()
        values = {name: frame.get_column(name).to_numpy() for name in frame.columns if name != "split"}
        columns = [c for c in self.dataset.columns if c.name != "split"]
        return [ColumnFacts(columns, values, rows, sampled=frame.height if frame.height < rows else None)]

    def residual_facts(self, source: str, parameters: dict[str, float]) -> list[Any]:
        """Where a stored candidate fails on the validation split, as facts for the LLM prompt
        (worded by ``proposers.datacard.residual_text``; none when the task has no breakdown).
        Never looks at the test split."""
        return []

    # ---------------------------------------------------------------- the report card (test split)
    def references_to_refit(self, stored: dict[str, float | None]) -> set[str] | None:
        """Which references the report refits, given the test scores the end-of-run scoring stored
        (name -> score, None where it failed): None means all of them (default)."""
        return None

    def scored_rows(self, split: str) -> dict[Any, dict[str, Any]]:
        """The rows a per-cell plot of ``split`` draws (the report card's test-cells plot), by group:
        ``fit_x``, ``fit_y``, ``x``, ``y`` (one-dimensional, in the data's units) and
        ``held_out_group``. Default: none (a task without cells along one x draws no such plot)."""
        return {}

    def value_loss_squared_errors(self) -> int | None:
        """With ``calibration_loss == "value"`` (the program computes its own training loss): how
        many squared errors that loss averages, or None when it is not a mean of squared errors
        (then the report card gives no standard errors). Default: None."""
        return None
