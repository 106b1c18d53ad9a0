"""Standard errors of fitted parameters from the curvature of the loss at the optimum.

``fit.stderr`` (or ``ndvm.stderr(fit, inputs, target, loss)``) computes the observed information:

1. The Hessian of the calibration loss in the optimizer's **unconstrained** coordinates u
   (softplus for ``positive``, logistic for ``between``), by central differences of the exact
   NDVM gradients: row i is (g(u + h e_i) - g(u - h e_i)) / 2h with h = ``step`` (1e-4); all 2P
   points are evaluated as lanes of one walk. Differencing exact gradients (not values) keeps the
   error O(h^2) on the gradient scale, and working in u keeps every point inside the constraints.
2. Scaling into the information of a log-likelihood:
   - ``mse``: the loss L = mean of n squared residuals is the Gaussian log-likelihood with
     sigma^2 estimated as n L / (n - P) (as ordinary least squares does); cov = 2 sigma^2 / n H^-1.
     For a linear model this is exactly OLS's sigma^2 (X'X)^-1.
   - ``gaussian_nll``: the native loss is the mean negative log-likelihood per point; cov = (n H)^-1
     (with sigma profiled out, the profile likelihood gives the other parameters' covariance).
   - ``value``: the program returns a negative log-likelihood itself (a Kalman filter); cov = H^-1.
     ``value_scale="mse"`` with ``n=`` says it returns a mean of n squared errors instead.
3. The delta method back to natural units: theta = g(u), cov_theta = J cov_u J with J =
   diag(dtheta/du). At an interior optimum this equals inverting the Hessian in natural units.
4. Identifiability: H is scaled to unit diagonal; an eigenvalue <= ``rcond`` times the largest
   (1e-7, or a non-positive diagonal) marks the parameters with weight > 0.1 in its eigenvector as not
   identifiable (flat or nearly flat directions of the loss). Their standard error is NaN, and the
   others are computed with the flagged ones held fixed (the inverse of the remaining block).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .errors import EvalError
from .program import Param, _natural, _unconstrained

# Eigenvalue ratio below which a direction of the unit-diagonal information counts as flat. Central
# differences of exact gradients carry a relative error of about step^2 = 1e-8, so a smaller ratio
# cannot be told apart from zero; a larger one would flag merely correlated parameters.
RCOND = 1e-7


@dataclass(frozen=True)
class StdErr:
    """Standard errors of a fit's parameters (natural units).

    ``values``: name -> standard error (NaN when not identifiable); ``identifiable``: name -> bool;
    ``cov``: [P, P] covariance in natural units (NaN rows/columns for flagged parameters);
    ``condition``: the condition number of the unit-diagonal information; ``method`` and ``note``
    say how it was computed and anything to beware of.
    """

    names: tuple[str, ...]
    estimates: dict[str, float]
    values: dict[str, float]
    identifiable: dict[str, bool]
    cov: np.ndarray
    condition: float
    method: str
    note: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def all_identifiable(self) -> bool:
        return all(self.identifiable.values())

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: estimates, standard errors (None for NaN), flags, condition, method, note."""

        def num(v: float) -> float | None:
            return None if not math.isfinite(v) else float(v)

        return {
            "estimates": {k: num(v) for k, v in self.estimates.items()},
            "stderr": {k: num(v) for k, v in self.values.items()},
            "identifiable": dict(self.identifiable),
            "condition": num(self.condition),
            "method": self.method,
            "note": self.note,
        }


def _du_dtheta_jacobian(params: list[Param], theta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(u, dtheta/du) at the natural values ``theta`` of ``params``."""
    u = np.array([float(_unconstrained(p, np.float64(t))) for p, t in zip(params, theta)])
    jac = np.array([float(_jac_at(p, np.array([uj]))[0]) for p, uj in zip(params, u)])
    return u, jac


def _natural_rows(params: list[Param], u_rows: np.ndarray) -> np.ndarray:
    out = np.empty_like(u_rows)
    for j, p in enumerate(params):
        out[:, j] = _natural(p, u_rows[:, j])
    return out


def stderr(
    fit: Any,
    inputs: Mapping[str, Any] | None = None,
    target: Any = None,
    loss: str | None = None,
    *,
    value_scale: str = "nll",
    n: int | None = None,
    step: float = 1e-4,
    rcond: float = RCOND,
) -> StdErr:
    """Standard errors of ``fit``'s parameters; see the module docstring.

    ``inputs``, ``target`` and ``loss`` default to those the fit was calibrated with (``calibrate``
    and ``calibrate_many`` remember them). Grouped fits (``lane_inputs``/``lane_target``) fit one
    series per lane and are not supported: compute the standard errors of each group's fit.
    """
    problem = getattr(fit, "_problem", None) or {}
    if problem.get("lane_inputs") or problem.get("lane_target") is not None:
        raise EvalError(
            "stderr: this fit used lane_inputs/lane_target (one series per lane); "
            "calibrate each group separately to get its standard errors"
        )
    inputs = problem.get("inputs") if inputs is None else inputs
    target = problem.get("target") if target is None else target
    loss = loss or problem.get("loss")
    if loss is None:
        raise EvalError("stderr: give the loss the fit minimised ('mse', 'gaussian_nll' or 'value')")
    if loss not in ("mse", "gaussian_nll", "value"):
        raise EvalError(f"stderr: unknown loss {loss!r}; expected 'mse', 'gaussian_nll' or 'value'")
    if value_scale not in ("nll", "mse"):
        raise EvalError(f"stderr: value_scale must be 'nll' or 'mse', got {value_scale!r}")
    if fit.program is None or fit.status != "ok" or not fit.params:
        raise EvalError(f"stderr: the fit has no optimum to differentiate at ({fit.error or 'no parameters'})")
    program = fit.program
    params = list(program.params)
    names = tuple(program.param_names)
    P = len(params)
    theta = np.array([fit.params[nm] for nm in names], dtype=float)
    u, jac = _du_dtheta_jacobian(params, theta)
    # 2P points u +- h e_i, one walk with 2P lanes
    h = float(step)
    u_rows = np.repeat(u[None, :], 2 * P, axis=0)
    for i in range(P):
        u_rows[2 * i, i] += h
        u_rows[2 * i + 1, i] -= h
    th_rows = _natural_rows(params, u_rows)
    if loss == "value":
        _, g_theta = program.value_and_grad(th_rows, inputs)
    else:
        if target is None:
            raise EvalError(f"stderr: loss {loss!r} needs the target the fit was calibrated on")
        _, g_theta = program.loss_and_grad(th_rows, inputs, target=target, loss=loss)
    g_theta = np.asarray(g_theta, dtype=float)
    # chain rule into u coordinates at each perturbed point
    jac_rows = np.empty_like(u_rows)
    for j, p in enumerate(params):
        jac_rows[:, j] = _jac_at(p, u_rows[:, j])
    g_u = g_theta * jac_rows
    hess = np.empty((P, P))
    for i in range(P):
        hess[i] = (g_u[2 * i] - g_u[2 * i + 1]) / (2 * h)
    hess = 0.5 * (hess + hess.T)
    if not np.all(np.isfinite(hess)):
        raise EvalError("stderr: the loss or its gradient is not finite near the optimum")

    # information of the log-likelihood, in u coordinates
    n_points: int | None = None  # counted only for the losses that are means over the data points
    if loss in ("mse", "gaussian_nll") or value_scale == "mse":
        n_points = int(n if n is not None else np.asarray(target).size if target is not None else 0)
        if n_points <= P:
            raise EvalError(
                f"stderr: {n_points} data points for {P} parameters: no degrees of freedom left "
                "(pass n= for a 'value' loss that is a mean of squared errors)"
            )
    # information = c * H; an exact fit (zero residual variance) has infinite c and zero covariance
    if loss == "mse" or (loss == "value" and value_scale == "mse"):
        assert n_points is not None  # a mean of squared errors: its points were counted above
        sigma2 = n_points * float(fit.loss) / (n_points - P)
        c = n_points / (2.0 * sigma2) if sigma2 > 0 else math.inf
        method = f"Gauss likelihood of the mean squared error, sigma^2 = n L / (n - P) = {sigma2:.6g}"
    elif loss == "gaussian_nll":
        assert n_points is not None  # a mean negative log-likelihood: its points were counted above
        sigma2, c = None, float(n_points)
        method = "observed information n H of the mean Gaussian negative log-likelihood"
    else:
        sigma2, c = None, 1.0
        method = "observed information H of the program's negative log-likelihood"
    method += "; Hessian by central differences of exact NDVM gradients in unconstrained coordinates, delta method"
    info = hess

    flagged = _flat_directions(info, rcond)
    diag = np.diag(info)
    scale = np.sqrt(np.where(diag > 0, diag, 1.0))
    scaled = info / np.outer(scale, scale)
    eig = np.linalg.eigvalsh(scaled) if P else np.zeros(0)
    condition = float(eig[-1] / eig[0]) if P and eig[0] > 0 else math.inf
    keep = [i for i in range(P) if i not in flagged]
    cov_u = np.full((P, P), np.nan)
    if keep:
        sub = info[np.ix_(keep, keep)]
        cov_u[np.ix_(keep, keep)] = np.linalg.inv(sub) / c
    cov = cov_u * np.outer(jac, jac)
    se = np.sqrt(np.where(np.diag(cov) >= 0, np.diag(cov), np.nan))
    note = ""
    if flagged:
        note = (
            "not identifiable (flat direction of the loss): "
            + ", ".join(names[i] for i in sorted(flagged))
            + "; the others are computed with these held fixed"
        )
    if loss == "value" and value_scale == "nll":
        note = (note + "; " if note else "") + "assumes the program's value is a negative log-likelihood"
    return StdErr(
        names,
        dict(zip(names, theta.tolist())),
        dict(zip(names, se.tolist())),
        {nm: i not in flagged for i, nm in enumerate(names)},
        cov,
        condition,
        method,
        note,
        extra={"sigma2": sigma2, "n": n_points, "hessian_u": hess},
    )


def _jac_at(p: Param, u: np.ndarray) -> np.ndarray:
    """dtheta/du of one parameter at unconstrained values ``u`` (vector)."""
    if p.constraint == "positive":
        return np.where(u > 30, 1.0, 1.0 / (1.0 + np.exp(-np.minimum(u, 30))))
    if isinstance(p.constraint, tuple):
        lo, hi = p.constraint[1], p.constraint[2]
        s: np.ndarray = 1.0 / (1.0 + np.exp(-u))
        return (hi - lo) * s * (1.0 - s)
    return np.ones_like(u)


def _flat_directions(info: np.ndarray, rcond: float) -> set[int]:
    """Indices of parameters in (nearly) flat directions of the information matrix."""
    P = info.shape[0]
    flagged = {i for i in range(P) if not info[i, i] > 0}
    rest = [i for i in range(P) if i not in flagged]
    if not rest:
        return flagged
    sub = info[np.ix_(rest, rest)]
    d = np.sqrt(np.diag(sub))
    vals, vecs = np.linalg.eigh(sub / np.outer(d, d))
    top = max(vals[-1], 0.0)
    for k, lam in enumerate(vals):
        if lam <= rcond * top:
            for j in np.flatnonzero(np.abs(vecs[:, k]) > 0.1):
                flagged.add(rest[int(j)])
    return flagged


__all__ = ["StdErr", "stderr", "RCOND"]
