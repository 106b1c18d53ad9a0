"""What every task shares: the fit record and the multi-start least-squares helper for references."""
from __future__ import annotations

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
