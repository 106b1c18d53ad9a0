"""What every task shares: the task interface, the fit record and the least-squares helper.

The discovery flows (``flows/``) talk to a task only through the methods of :class:`Task`; they
never branch on its kind. A new kind of task is a new subclass in ``datasets/tasks`` (plus an entry
in ``datasets.tasks.TASKS``), and touches nothing else.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable

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
        mse = float(np.mean(res.fun ** 2))
        if mse < best:
            best_p, best = res.x, mse
    if best_p is None:
        raise RuntimeError("every start of the least-squares fit failed")
    return best_p, best


class Task:
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
    ``check_program(program)``, ``seed_programs()``, ``contract_text()``.
    """

    kind = "task"
    name = "task"
    primary_metric = "rmse"
    calibration_loss = "mse"

    # ---------------------------------------------------------------- fitting a batch
    def fit_batch(self, programs: list[Any], sources: list[str], names: list[str], **calibrate_options) -> list[TaskFit]:
        """Fit every compiled program on the training part: one ``ndvm.calibrate_many`` per fit
        group (all programs at once, on every core). Never raises for a bad program: its TaskFit
        carries ``error`` (and an infinite training loss)."""
        from .runtime import require_ndvm

        ndvm = require_ndvm()
        started = time.perf_counter()
        groups = self.fit_groups()
        by_group = [ndvm.calibrate_many(programs, self.fit_inputs(g), target=self.fit_target(g),
                                        loss=self.calibration_loss, **calibrate_options) if programs else []
                    for g in groups]
        seconds = (time.perf_counter() - started) / max(len(programs), 1)
        out = []
        for i, (program, source, name) in enumerate(zip(programs, sources, names)):
            fits = [fits_of_group[i] for fits_of_group in by_group]
            errors = [f"{'group ' + str(g) + ': ' if g is not None else ''}{f.error}"
                      for g, f in zip(groups, fits) if f.error]
            error = "; ".join(errors) or None
            if error is None and not all(math.isfinite(f.loss) for f in fits):
                error = "non-finite training loss"
            params = self.collect_params(groups, fits) if error is None else {}
            loss = float(np.mean([f.loss for f in fits])) if error is None else math.inf
            fit = TaskFit(self.name, name, source, params, loss, seconds, fits=fits, error=error,
                          n_params=len(program.param_names))
            if error is None:
                self.attach_predictor(fit, program)
            out.append(fit)
        return out

    def attach_predictor(self, fit: TaskFit, program: Any) -> None:
        """Give ``fit`` whatever ``score`` needs besides its parameters (default: nothing)."""

    def prepare_test_fit(self, fit: TaskFit, **calibrate_options) -> TaskFit:
        """The fit to score on the test split (default: ``fit`` itself)."""
        return fit

    def flat_parameters(self, params: dict[Any, Any]) -> dict[str, float]:
        """Fitted parameters as name -> float (what the store and MLflow keep)."""
        return {str(k): float(v) for k, v in params.items()}
