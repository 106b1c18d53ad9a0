"""The ``forecast`` task: state-space candidates, a task-owned driver, lead-time scores.

A candidate defines three functions and any parameters it needs::

    (param phi 0.9 (between -1 1))
    (define (init) 0.0)              ; the state before the first observation
    (define (predict s) (* phi s))   ; the one-step prediction of the next value from the state
    (define (update s y) y)          ; the state after observing y

The task appends its own driver, written in the NDVM language, which walks the series in time
order: at step t it scores ``(predict s)`` against y[t] and only then calls ``(update s y[t])``.
The candidate never sees the series itself (the series input has a reserved name that candidate
source may not mention, and the compiled program must have no other input), so a prediction can
only use the past: no leakage by construction.

Splits: contiguous periods, train < validation < test (the dataset's ``split`` column).

Fit: ``ndvm.calibrate(..., loss="value")`` on the TRAINING part only. The loss is what the score
measures: the mean squared MULTI-STEP error over leads 1..``leads``. From every ``fit_stride``-th
origin t = burn, burn + stride, ... of the training series (the state has seen y[0..t-1]; default
stride 5, coprime to 12 so every calendar month is an origin), the forecasts f_{t,1..leads} of
y[t], ..., y[t+leads-1] are made by iterating ``s <- (update s (predict s))``; the loss is the mean
of the squared errors of every forecast whose target lies in the training series:

    loss = sum_{t in origins} sum_{k=1}^{min(leads, n_train-t)} (y[t+k-1] - f_{t,k})^2  /  count

(``loss="gaussian_nll"`` keeps the one-step Gaussian NLL: ``(predict-var s)`` is a one-step variance.)

Score on a split (validation during the search, test once at the end): from every origin t from
the last month before the split to its second-to-last month, forecasts at leads 1..``leads``; RMSE
and anomaly correlation (ACC) per lead over the targets inside that split only, compared with
persistence. The validation driver receives the series up to the end of validation only, so the
test years cannot enter a validation score.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl

from ..schema import TEST, TRAIN, VALIDATION, Dataset
from . import runtime
from .base import Errors, Task, TaskFit
from .errors import CandidateError, ReferenceFitError, TaskError
from .facts import CovariateFacts, LeadResidualFacts, SeriesFacts, UnscoredFact
from .forecast_inputs import (
    ForecastInputs,
    check_update_arity,
    default_leads,
    input_seed_programs,
    plural,
    update_arity,
)
from .metrics import anomaly_correlation, rmse
from .runtime import require_ndvm

SERIES = "ndvm-task-series"  # the only input; reserved, candidates may not mention it
# Origins of the multi-step training loss: every FIT_STRIDE-th month after the burn-in. Each
# origin costs `leads` predict/update steps, so every month as an origin made a fit an order of
# magnitude dearer than the one-step loss, every 5th month less than 1.5x (BENCHMARKS.md, "Figures
# behind choices in the code"). 5 is coprime to 12, so the origins still cycle through every
# calendar month, and every lead 1..leads is scored from each of them.
FIT_STRIDE = 5
# Validation blocks: by default one block per BLOCK_LEADS x leads validation origins (enso and
# enso-nino34: 120 validation months, leads 12 -> 5 blocks of 24 origins). The champion rule reads
# the standard error of the validation mean RMSE over these blocks (contract C2).
BLOCK_LEADS = 2
RESERVED_PREFIX = "ndvm-task-"
REQUIRED = ("init", "predict", "update")
INF = float("inf")

_ONE_STEP_DRIVER = """
;; ---- forecast task driver (appended by the task; the candidate cannot see the series) ----
(define (ndvm-task-one-step-loss series burn)
  (let ndvm-task-walk ((t 0) (s (init)) (total 0.0) (count 0))
    (if (= t (size series))
        (/ total count)
        (let* ((y (ref series t)) (e (- y (predict s))))
          (ndvm-task-walk (+ t 1) {update_y}
                          (if (< t burn) total (+ total {term}))
                          (if (< t burn) count (+ count 1)))))))
(ndvm-task-one-step-loss ndvm-task-series {burn})
"""
_MSE_TERM = "(* e e)"

# The pyfunc model of a forecast candidate: one-step-ahead predictions over a DataFrame column.
# Row t gets the forecast of y[t] made from y[0..t-1] only (the candidate's own state-space step).
_ONE_STEP_MODEL = """
;; ---- one-step-ahead model (appended by ndvm discover for the MLflow pyfunc model) ----
(define (ndvm-model-one-step ndvm-model-series)
  (let ndvm-model-walk ((t 0) (s (init)) (acc '()))
    (if (= t (size ndvm-model-series))
        (apply vec (reverse acc))
        (ndvm-model-walk (+ t 1) (update s (ref ndvm-model-series t) {x}) (cons (predict s) acc)))))
(ndvm-model-one-step {column})
"""
MODEL_SERIES_FALLBACK = "series"  # model input name when a candidate defines the dataset's column name itself

# The pyfunc model's forecasts (``predict(history, params={"horizon": h})``): the candidate's state
# walks the whole history with ``update``, then its path over leads 1..h iterates ``update`` on its
# own predictions, as the task's forecast driver does from every origin.
MODEL_HORIZON_INPUT = "ndvm-model-horizon"
_FORECAST_MODEL = """
;; ---- forecasts at leads 1..h after a history (appended by ndvm discover for the pyfunc model) ----
{x_define}(define (ndvm-model-forecast ndvm-model-history ndvm-model-h)
  (let ndvm-model-walk ((t 0) (s (init)))
    (if (= t (size ndvm-model-history))
        (let ndvm-model-lead ((k 0) (s s) (acc '()))
          (if (>= k ndvm-model-h)
              (apply vec (reverse acc))
              (let ((p (predict s)))
                (ndvm-model-lead (+ k 1) (update s p{x_lead}) (cons p acc)))))
        (ndvm-model-walk (+ t 1) (update s (ref ndvm-model-history t){x_walk})))))
(ndvm-model-forecast {column} {horizon})
"""
# A candidate that takes x gets x of step j with the covariates observed at step i, as the task's
# forecast driver passes it (an observation: i = j; a forecast step: i = the origin, the history's
# last step); the calendar column reaches beyond the history (the model extends it).
_FORECAST_MODEL_X_SLOTS = {
    "x_define": "(define (ndvm-model-x j i) (vec {x}))\n",
    "x_lead": " (ndvm-model-x (+ t k) (- t 1))",
    "x_walk": " (ndvm-model-x t t)",
}
_FORECAST_MODEL_NO_X = {"x_define": "", "x_lead": "", "x_walk": ""}

# Multi-step loss: from every ``stride``-th origin t in [burn, n), the forecast path over leads
# 1..h (iterating the candidate's own update on its predictions), squared errors against
# y[t..t+h-1] within the series. The count of terms is a constant, computed by the task (fit_count).
_MULTI_STEP_DRIVER = """
;; ---- forecast task driver: mean squared error over leads 1..h (the candidate cannot see the series) ----
(define (ndvm-task-path-loss series s t h total)
  (let ndvm-task-lead ((k 0) (s s) (total total))
    (if (or (= k h) (= (+ t k) (size series)))
        total
        (let* ((p (predict s)) (e (- (ref series (+ t k)) p)))
          (ndvm-task-lead (+ k 1) {update_p} (+ total (* e e)))))))
(define (ndvm-task-multi-step-loss series burn stride h count)
  (let ndvm-task-walk ((t 0) (s (init)) (total 0.0))
    (if (= t (size series))
        (/ total count)
        (ndvm-task-walk (+ t 1) {update_y}
                        (if (or (< t burn) (> (modulo (- t burn) stride) 0))
                            total
                            (ndvm-task-path-loss series s t h total))))))
(ndvm-task-multi-step-loss ndvm-task-series {burn} {stride} {leads} {count})
"""
# The update calls of the drivers: ``(update s y)``, or with x (forecast_inputs.py) the calendar of
# the step and the covariates observed at it; a forecast step from origin t holds them at step t
# (the multi-step loss: its state has seen steps 0..t-1, so t-1).
_UPDATES = {
    "one_step": {False: {"update_y": "(update s y)"}, True: {"update_y": "(update s y (ndvm-task-x t t))"}},
    "multi_step": {
        False: {"update_y": "(update s (ref series t))", "update_p": "(update s p)"},
        True: {
            "update_y": "(update s (ref series t) (ndvm-task-x t t))",
            "update_p": "(update s p (ndvm-task-x (+ t k) (- t 1)))",
        },
    },
    "forecast": {
        False: {"update_y": "(update s (ref series t))", "update_p": "(update s p)"},
        True: {
            "update_y": "(update s (ref series t) (ndvm-task-x t t))",
            "update_p": "(update s p (ndvm-task-x (+ t k 1) t))",
        },
    },
}
# 0.5 * (log(2 pi v) + e^2 / v), v = (predict-var s)
_NLL_TERM = "(let ((v (predict-var s))) (* 0.5 (+ 1.8378770664093453 (log v) (/ (* e e) v))))"

_FORECAST_DRIVER = """
;; ---- forecast task driver: forecasts at leads 1..h from every origin t in [first, last) ----
(define (ndvm-task-path s t h)
  (let ndvm-task-step ((k 0) (s s) (acc '()))
    (if (= k h)
        (reverse acc)
        (let ((p (predict s)))
          (ndvm-task-step (+ k 1) {update_p} (cons p acc))))))
(define (ndvm-task-forecasts series first last h)
  (let ndvm-task-walk ((t 0) (s (init)) (acc '()))
    (if (= t last)
        (reverse acc)
        (let ((s2 {update_y}))
          (ndvm-task-walk (+ t 1) s2 (if (>= t first) (cons (ndvm-task-path s2 t h) acc) acc))))))
(ndvm-task-forecasts ndvm-task-series {first} {last} {leads})
"""


@dataclass(frozen=True)
class ForecastReference:
    """A reference forecaster: ``fit(y_train) -> state``; ``forecast(state, y_all, origins, leads)``
    -> array [len(origins), leads] where row i holds forecasts of y[origins[i] + 1 .. + leads]."""

    name: str
    description: str
    fit: Callable[[np.ndarray], Any]
    forecast: Callable[[Any, np.ndarray, np.ndarray, int], np.ndarray]
    n_params: int | None  # None: the number of fitted coefficients (len of the fitted state)
    source: str | None = None  # the same model as an NDVM candidate, where one exists


# ---------------------------------------------------------------- reference forecasters (numpy/statsmodels)


def _persistence_fit(y):
    return None


def _persistence_forecast(_, y, origins, leads):
    return np.repeat(y[origins][:, None], leads, axis=1)


def _damped_fit(y):
    """(mean, phi): the training mean and the lag-1 autocorrelation of the deviations from it
    (regression through the origin), so the forecast decays toward the series' own mean (not 0)."""
    mean = float(np.mean(y))
    x = y - mean
    return mean, float(np.dot(x[1:], x[:-1]) / np.dot(x[:-1], x[:-1]))


def _damped_forecast(state, y, origins, leads):
    mean, phi = state
    return mean + (y[origins][:, None] - mean) * phi ** np.arange(1, leads + 1)[None, :]


def _ar_design(y, p):
    rows = np.column_stack([np.ones(len(y) - p)] + [y[p - i - 1 : len(y) - i - 1] for i in range(p)])
    return rows, y[p:]


def _ar_fit_p(y, p):
    X, target = _ar_design(y, p)
    coef, *_ = np.linalg.lstsq(X, target, rcond=None)
    resid = target - X @ coef
    return coef, float(np.mean(resid**2))


def _ar_fit_aic(y, max_p=12):
    """AR(p) by least squares with intercept; p in 1..max_p chosen by AIC on a common sample."""
    best = None
    for p in range(1, max_p + 1):
        X, target = _ar_design(y[max_p - p :], p)  # same targets for every p
        coef, *_ = np.linalg.lstsq(X, target, rcond=None)
        sigma2 = float(np.mean((target - X @ coef) ** 2))
        aic = len(target) * np.log(sigma2) + 2 * (p + 1)
        if best is None or aic < best[0]:
            best = (aic, p)
    return _ar_fit_p(y, best[1])[0]


def _ar_forecast(coef, y, origins, leads):
    p = len(coef) - 1
    out = np.empty((len(origins), leads))
    for i, t in enumerate(origins):
        history = list(y[max(0, t - p + 1) : t + 1])
        history = [0.0] * (p - len(history)) + history
        for k in range(leads):
            nxt = coef[0] + sum(coef[j + 1] * history[-1 - j] for j in range(p))
            out[i, k] = nxt
            history.append(nxt)
    return out


def _single_blas_thread():
    """Small matrices: a multi-threaded BLAS only adds overhead (20x slower on a loaded 2-core machine)."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # optional: without it the fit is just slower
        import contextlib

        return contextlib.nullcontext()
    return threadpool_limits(1)


# An ARMA fit is degenerate when a root of its AR or MA polynomial lies this close to the unit circle
# (an inverse root of modulus >= ROOT_MARGIN): maximum likelihood on the Nino 1+2 training years puts
# the ARMA(2,1)'s MA root at -1.0 (non-invertible, on the boundary statsmodels' transform allows), and
# that fit forecast worse than persistence. Such a fit is reported as failed, never as a score.
ROOT_MARGIN = 0.98
_SARIMAX_STARTS = 3  # statsmodels' own start, then its AR part with MA terms at 0, then all halved


def _inverse_root_modulus(coefs: list[float], ma: bool) -> float:
    """Largest modulus of the inverse roots of 1 - sum a_i z^i (AR) or 1 + sum b_i z^i (MA)."""
    if not coefs:
        return 0.0
    poly = np.r_[1.0, coefs if ma else -np.asarray(coefs, float)]
    return float(np.max(np.abs(np.roots(poly)))) if len(poly) > 1 else 0.0


def _sarimax_worst_root(names: list[str], params: np.ndarray) -> tuple[float, str]:
    """(largest inverse-root modulus, which polynomial) over the AR, MA, seasonal AR and seasonal MA
    polynomials of a SARIMAX fit (a seasonal polynomial in its own lag variable B^period)."""
    value = dict(zip(names, params))
    worst, which = 0.0, ""
    for label, prefix, ma in (
        ("AR", "ar.L", False),
        ("MA", "ma.L", True),
        ("seasonal AR", "ar.S.L", False),
        ("seasonal MA", "ma.S.L", True),
    ):
        coefs = [value[n] for n in names if n.startswith(prefix)]
        modulus = _inverse_root_modulus(coefs, ma)
        if modulus > worst:
            worst, which = modulus, label
    return worst, which


def _sarimax_model(y, order, seasonal):
    from statsmodels.tsa.statespace.sarimax import SARIMAX

    return SARIMAX(
        y, order=order, seasonal_order=seasonal, trend="c", enforce_stationarity=True, enforce_invertibility=True
    )


def _stable_sarimax_fit(y, order=(2, 0, 1), seasonal=(0, 0, 0, 0)):
    """Maximum likelihood (statsmodels SARIMAX, stationarity and invertibility enforced) from several
    starts; the best likelihood among the fits whose roots all stay inside ``ROOT_MARGIN``. Raises
    :class:`ReferenceFitError` when every start ends degenerate or fails."""
    import warnings

    model = _sarimax_model(y, order, seasonal)
    names = list(model.param_names)
    with warnings.catch_warnings():  # statsmodels warns when its own start is outside the region
        warnings.simplefilter("ignore")
        base = np.asarray(model.start_params, float)
    arma = np.array([n.startswith(("ar.", "ma.")) for n in names])
    no_ma = base.copy()
    no_ma[[n.startswith("ma.") for n in names]] = 0.0
    halved = base.copy()
    halved[arma] *= 0.5
    best, problems = None, []
    for start in (base, no_ma, halved)[:_SARIMAX_STARTS]:
        with warnings.catch_warnings(), _single_blas_thread():
            warnings.simplefilter("ignore")
            try:
                result = model.fit(start_params=start, disp=False, cov_type="none", maxiter=200)
            except (ValueError, np.linalg.LinAlgError) as exc:
                problems.append(f"{type(exc).__name__}: {exc}")
                continue
        params = np.asarray(result.params, float)
        if not (np.all(np.isfinite(params)) and np.isfinite(result.llf)):
            problems.append("non-finite parameters or likelihood")
            continue
        worst, which = _sarimax_worst_root(names, params)
        if worst >= ROOT_MARGIN:
            problems.append(f"{which} inverse root of modulus {worst:.3f}")
            continue
        if best is None or result.llf > best[0]:
            best = (float(result.llf), params)
    if best is None:
        raise ReferenceFitError(
            f"SARIMAX{tuple(order)}x{tuple(seasonal)} has no stable fit from {_SARIMAX_STARTS} starts "
            f"(an AR or MA inverse root at or beyond {ROOT_MARGIN} is degenerate): " + "; ".join(problems)
        )
    return (tuple(order), tuple(seasonal), best[1])


def _sarimax_fit(y):
    """ARMA(2,1) + constant by statsmodels' MLE (stable fit: see ``_stable_sarimax_fit``)."""
    return _stable_sarimax_fit(y, (2, 0, 1))


def _sarimax_forecast(state, y, origins, leads):
    """Filter the whole series with the training-fitted parameters, then propagate each origin's
    predicted state a_{t+1|t} (which uses y[0..t] only) through the transition matrix."""
    import warnings

    order, seasonal, params = state
    model = _sarimax_model(y, order, seasonal)
    with warnings.catch_warnings(), _single_blas_thread():
        warnings.simplefilter("ignore")
        filtered = model.filter(params)
    ssm = model.ssm  # time-invariant system matrices, set to the fitted parameters by filter()

    def matrix(name, ndim):
        value = np.asarray(ssm[name])
        return value[..., 0] if value.ndim > ndim else value

    Z, d = matrix("design", 2), matrix("obs_intercept", 1)
    T, c = matrix("transition", 2), matrix("state_intercept", 1)
    out = np.empty((len(origins), leads))
    for i, t in enumerate(origins):
        a = filtered.predicted_state[:, t + 1].copy()
        for k in range(leads):
            out[i, k] = float((Z @ a + d)[0])
            a = T @ a + c
    return out


SARIMA_MAX_P = 3  # the seasonal reference's AR order: the AIC order, at most 3 (each order adds fit time)


def sarima_reference(y_train: np.ndarray, period: int) -> ForecastReference:
    """SARIMAX(p,0,0)(1,0,1)_period + constant, p = min(AIC order of the training years, 3)."""
    p = min(len(_ar_fit_aic(y_train)) - 1, SARIMA_MAX_P)
    order, seasonal = (p, 0, 0), (1, 0, 1, period)
    return ForecastReference(
        f"sarima-{p}00-101x{period}",
        f"seasonal ARIMA({p},0,0)(1,0,1) period {period} + constant, Kalman filter MLE (statsmodels SARIMAX), "
        "stable fit from several starts",
        lambda y: _stable_sarimax_fit(y, order, seasonal),
        _sarimax_forecast,
        p + 4,  # constant, p AR, seasonal AR and MA, innovation variance
    )


AR1_SOURCE = """(param phi 0.9 (between -1 1))
(define (init) 0.0)
(define (predict s) (* phi s))
(define (update s y) y)"""

AR2_SOURCE = """(param a1 1.0)
(param a2 -0.2)
(define (init) (list 0.0 0.0))
(define (predict s) (+ (* a1 (car s)) (* a2 (cadr s))))
(define (update s y) (list y (car s)))"""

KALMAN_AR1_SOURCE = """(param phi 0.9 (between -1 1))
(param q 0.1 positive)
(param r 0.05 positive)
;; state: (mean variance) of a latent AR(1) signal observed with noise
(define (init) (list 0.0 1.0))
(define (predict s) (* phi (car s)))
(define (update s y)
  (let* ((m (* phi (car s)))
         (p (+ (* phi phi (cadr s)) q))
         (k (/ p (+ p r))))
    (list (+ m (* k (- y m))) (* (- 1.0 k) p))))"""

SEASONAL_AR1_SOURCE = """(param phi 0.9 (between -1 1))
(param amp 0.05)
(param phase 0.0)
;; state: (last value, month counter); persistence strength varies with the calendar month
(define (init) (list 0.0 0))
(define (rho s) (- phi (* amp (cos (+ phase (* 0.5235987755982988 (cadr s)))))))
(define (predict s) (* (rho s) (car s)))
(define (update s y) (list y (+ (cadr s) 1)))"""

# ---------------------------------------------------------------- references as candidate programs
# The references the search starts from (``ForecastTask.reference_programs``): the same models as
# the numpy/statsmodels references, written in the candidate form, their declared starting values
# fitted to the training years (so calibration starts at the reference itself; restart 0 of
# ``ndvm.calibrate`` starts at the declared values and the best iterate is kept).


def _number(value: float) -> str:
    """A float literal the reader takes back exactly."""
    return repr(float(value))


def _ar_program(coef: np.ndarray, mean: float) -> str:
    """AR(p) with intercept: y[t+1] = c + a1 y[t] + ... + ap y[t-p+1]. The state is the list of the
    last p values, newest first, starting as p copies of the training mean."""
    p = len(coef) - 1
    lines = [f"(param c {_number(coef[0])})"]
    lines += [f"(param a{i + 1} {_number(coef[i + 1])})" for i in range(p)]
    lags = " ".join(f"(* a{i + 1} {'(car s)' if i == 0 else f'(list-ref s {i})'})" for i in range(p))
    keep = " ".join(f"(list-ref s {i})" for i in range(p - 1))
    lines += [
        f";; AR({p}) with intercept; state: the last {p} values, newest first",
        f"(define (init) (list {' '.join([_number(mean)] * p)}))",
        f"(define (predict s) (+ c {lags}))",
        f"(define (update s y) (list y{' ' + keep if keep else ''}))",
    ]
    return "\n".join(lines)


def _damped_program(mean: float, phi: float) -> str:
    """Damped persistence toward the training mean: y[t+1] = mu + phi (y[t] - mu)."""
    phi = float(np.clip(phi, -0.999, 0.999))  # strictly inside the declared interval
    return f"""(param mu {_number(mean)})
(param phi {_number(phi)} (between -1 1))
;; damped persistence: the forecast decays from the last value toward the mean mu
(define (init) mu)
(define (predict s) (+ mu (* phi (- s mu))))
(define (update s y) y)"""


def _seasonal_ar_fit(y: np.ndarray, period: int) -> tuple[float, float, float]:
    """(mean, phi, Phi) of the multiplicative seasonal AR (1 - phi B)(1 - Phi B^period)(y - mean) = e
    by least squares on the training years (a linear regression on lags 1, period and period + 1,
    its lag-1 and lag-period coefficients taken as phi and Phi)."""
    mean = float(np.mean(y))
    x = y - mean
    if len(x) <= period + 3:
        return mean, 0.0, 0.0
    target = x[period + 1 :]
    design = np.column_stack([x[period:-1], x[1 : len(x) - period], x[: len(x) - period - 1]])
    coef, *_ = np.linalg.lstsq(design, target, rcond=None)
    return mean, float(np.clip(coef[0], -0.99, 0.99)), float(np.clip(coef[1], -0.99, 0.99))


def _seasonal_ar_program(mean: float, phi: float, seasonal: float, period: int) -> str:
    """Seasonal AR(1)(1)_period around the mean mu:
    y[t+1] - mu = phi (y[t] - mu) + Phi (y[t+1-period] - mu) - phi Phi (y[t-period] - mu).
    The state is the list of the last period + 1 values, newest first."""
    return f"""(param mu {_number(mean)})
(param phi {_number(phi)} (between -1 1))
(param sphi {_number(seasonal)} (between -1 1))
;; seasonal AR(1)(1) with period {period}; state: the last {period + 1} values, newest first
(define (first-n l n) (if (= n 0) '() (cons (car l) (first-n (cdr l) (- n 1)))))
(define (init) (list {" ".join(["mu"] * (period + 1))}))
(define (predict s)
  (+ mu (* phi (- (car s) mu)) (* sphi (- (list-ref s {period - 1}) mu))
     (- (* phi sphi (- (list-ref s {period}) mu)))))
(define (update s y) (cons y (first-n s {period})))"""


ENSO_REFERENCES = (
    ForecastReference("persistence", "forecast = last observed anomaly", _persistence_fit, _persistence_forecast, 0),
    ForecastReference(
        "damped-persistence",
        "forecast = mean + phi^lead * (last value - mean); mean and lag-1 autocorrelation of the training years",
        _damped_fit,
        _damped_forecast,
        2,
    ),
    ForecastReference(
        "ar-aic",
        "AR(p) with intercept, least squares, p <= 12 by AIC on the training years",
        _ar_fit_aic,
        _ar_forecast,
        None,
    ),
    ForecastReference(
        "statsmodels-arma21",
        "linear state-space ARMA(2,1) + constant, Kalman filter MLE (statsmodels SARIMAX), stable fit from "
        "several starts (failed when every fit has a root near the unit circle)",
        _sarimax_fit,
        _sarimax_forecast,
        5,
    ),
)


class ForecastTask(Task):
    """Fit a state-space candidate by its multi-step error on the training years; score leads 1..12
    on the validation years during the search and on the test years once at the end."""

    kind = "forecast"
    primary_metric = "mean_rmse"
    calibration_loss = "value"  # the fitting driver returns the loss itself
    state_space = True  # candidates define (init), (predict s), (update s y [x])

    def __init__(
        self,
        dataset: Dataset,
        *,
        leads: int | None = None,
        burn_in: int = 12,
        loss: str = "mse",
        fit_stride: int = FIT_STRIDE,
        validation_blocks: int | None = None,
    ):
        if loss not in ("mse", "gaussian_nll"):
            raise TaskError(f"forecast task: loss must be 'mse' or 'gaussian_nll', got {loss!r}")
        if dataset.group is not None:
            raise TaskError(f"forecast task: {dataset.name} has groups; give a single series")
        frame = dataset.frame.sort(dataset.x)
        split = frame.get_column("split").to_list()
        n_train, n_val = split.count(TRAIN), split.count(VALIDATION)
        n_test = len(split) - n_train - n_val
        if split != [TRAIN] * n_train + [VALIDATION] * n_val + [TEST] * n_test:
            raise TaskError(
                f"{dataset.name}: the split is not temporal (train, then validation, then test rows; "
                "a forecast task has no test_fit rows)"
            )
        if n_train <= burn_in + 2 or n_val < 2 or n_test < 2:
            raise TaskError(
                f"{dataset.name}: {n_train} training, {n_val} validation and {n_test} test points are "
                f"too few for burn_in={burn_in} (each scored split needs at least 2 points)"
            )
        if int(fit_stride) < 1 or int(burn_in) < 1:
            raise TaskError(f"forecast task: fit_stride and burn_in must be >= 1, got {fit_stride} and {burn_in}")
        # the calendar and covariates a candidate may take as x (forecast_inputs.py); the period,
        # the leads and the time-step unit come from the dataset (a manifest), else its time step
        self.inputs = ForecastInputs.of(dataset, frame, leads)
        if leads is None:
            leads = default_leads(dataset, self.inputs.period)
        if int(leads) < 1:
            raise TaskError(f"forecast task: leads must be >= 1, got {leads}")
        self.period, self.time_step = self.inputs.period, self.inputs.time_step
        self.dataset, self.leads, self.burn_in, self.loss = dataset, int(leads), int(burn_in), loss
        self.fit_stride = int(fit_stride)
        self.y = frame.get_column(dataset.y).cast(pl.Float64).to_numpy()
        self.n_train, self.n_validation, self.n_test = n_train, n_val, n_test
        # The end (exclusive) of what a split's forecasts may see, and its origins: from the month
        # before the split up to its second-to-last month. Targets outside the split are not scored.
        self.split_end = {VALIDATION: n_train + n_val, TEST: len(self.y)}
        self.split_start = {VALIDATION: n_train, TEST: n_train + n_val}
        self.first_month = int(frame.get_column("month")[0]) if "month" in frame.columns else None
        self.name = f"forecast:{dataset.name}"
        self.n_blocks = self._count_blocks(validation_blocks)

    # ------------------------------------------------------------------ data
    def train_inputs(self) -> dict[str, np.ndarray]:
        """The program inputs for fitting: the training part of the series only (and of the
        covariates, with the calendar, for candidates that take x; others ignore them)."""
        return self.driver_inputs(self.n_train)

    def driver_inputs(self, end: int) -> dict[str, np.ndarray]:
        """Every input of a driver that sees the series' first ``end`` points, and nothing later."""
        return {SERIES: self.y[:end].copy(), **self.inputs.driver_inputs(end)}

    def train_target(self):
        return None  # the driver returns the loss itself (calibrate with loss="value")

    @staticmethod
    def _check_split(split: str) -> str:
        if split not in (VALIDATION, TEST):
            raise TaskError(f"a forecast task scores the 'validation' or the 'test' split, not {split!r}")
        return split

    def origins(self, split: str = VALIDATION) -> np.ndarray:
        """Forecast origins of ``split``: the state has seen y[0..t]; forecasts target y[t+1..t+leads]."""
        split = self._check_split(split)
        return np.arange(self.split_start[split] - 1, self.split_end[split] - 1)

    def targets(self, split: str = VALIDATION) -> np.ndarray:
        """[n_origins, leads] observed values y[t + k]; NaN where t + k lies outside ``split``."""
        origins = self.origins(split)
        idx = origins[:, None] + np.arange(1, self.leads + 1)[None, :]
        out = np.full(idx.shape, np.nan)
        valid = idx < self.split_end[split]
        out[valid] = self.y[idx[valid]]
        return out

    # ------------------------------------------------------------------ validation blocks (contract C2)
    def _count_blocks(self, requested: int | None) -> int:
        """How many contiguous blocks the validation origins are cut into: ``requested``, or by
        default one block per ``BLOCK_LEADS * leads`` origins, at least 2 (a standard error needs
        two blocks) and at most one per ``leads`` origins (every lead scored in every block)."""
        n = len(self.origins(VALIDATION))
        if requested is None:
            requested = max(2, n // (BLOCK_LEADS * self.leads))
        requested = int(requested)
        if requested < 1 or requested > max(1, n // 2):
            raise TaskError(
                f"forecast task: validation_blocks={requested} does not fit {n} validation origins "
                f"(use 1..{max(1, n // 2)}: each block needs at least 2 origins)"
            )
        return requested

    def validation_blocks(self) -> list[np.ndarray]:
        """Row indices (into ``origins("validation")``) of each validation block: the validation
        origins in time order, cut into ``n_blocks`` contiguous runs of (nearly) equal length. A
        block's forecasts keep every target inside the validation split (a path may cross into the
        next block), so the blocks together score exactly the forecasts of the pooled score."""
        return [b for b in np.array_split(np.arange(len(self.origins(VALIDATION))), self.n_blocks) if len(b)]

    def fit_origins(self) -> np.ndarray:
        """The origins of the multi-step training loss: every ``fit_stride``-th month after the burn-in."""
        return np.arange(self.burn_in, self.n_train, self.fit_stride)

    def fit_count(self) -> int:
        """Number of squared-error terms of the multi-step training loss (see the module docstring)."""
        return int(sum(min(self.leads, self.n_train - t) for t in self.fit_origins()))

    def value_loss_squared_errors(self) -> int | None:
        """The multi-step MSE averages ``fit_count()`` squared errors; the Gaussian NLL is no MSE."""
        return self.fit_count() if self.loss == "mse" else None

    # ------------------------------------------------------------------ programs
    def check_candidate(self, candidate: str) -> None:
        names = runtime.defined_names(candidate)
        missing = [n for n in REQUIRED if names.get(n) != "function"]
        if missing:
            raise CandidateError(
                f"a forecast candidate must define the functions (init), (predict s) and (update s y); "
                f"missing: {', '.join(missing)}"
            )
        if self.loss == "gaussian_nll" and names.get("predict-var") != "function":
            raise CandidateError(
                "loss gaussian_nll needs (define (predict-var s) ...) returning the predictive variance"
            )
        used = [s for s in runtime.symbols(candidate) if s.startswith(RESERVED_PREFIX)]
        if used:
            raise CandidateError(f"names starting with {RESERVED_PREFIX!r} are reserved for the task driver: {used}")

    def takes_x(self, candidate: str) -> bool:
        """Whether the candidate defines ``(update s y x)`` (CandidateError for another arity, or
        for x on a dataset with no period and no covariates)."""
        return check_update_arity(update_arity(runtime.read_candidate(candidate)), self.inputs)

    def _with_driver(self, candidate: str, driver: str, kind: str, **fields: Any) -> str:
        """Candidate + x's helper (when it takes x) + ``driver`` with the update calls of ``kind``."""
        self.check_candidate(candidate)
        uses_x = self.takes_x(candidate)
        helper = self.inputs.helper_source() if uses_x else ""
        return candidate.rstrip() + "\n" + helper + driver.format(**_UPDATES[kind][uses_x], **fields)

    def program_source(self, candidate: str) -> str:
        """Candidate + the fitting driver: the program's value is the training loss (multi-step MSE
        over leads 1..leads; one-step NLL with loss="gaussian_nll")."""
        if self.loss == "gaussian_nll":
            return self._with_driver(candidate, _ONE_STEP_DRIVER, "one_step", term=_NLL_TERM, burn=self.burn_in)
        return self._with_driver(
            candidate,
            _MULTI_STEP_DRIVER,
            "multi_step",
            burn=self.burn_in,
            stride=self.fit_stride,
            leads=self.leads,
            count=f"{float(self.fit_count())!r}",
        )

    def forecast_source(self, candidate: str, split: str = VALIDATION) -> str:
        """Candidate + the forecasting driver: its value is a list of lead-1..h forecast lists."""
        origins = self.origins(split)
        return self._with_driver(
            candidate, _FORECAST_DRIVER, "forecast", first=int(origins[0]), last=int(origins[-1]) + 1, leads=self.leads
        )

    def compile(self, candidate: str, forecast: bool = False, split: str = VALIDATION):
        ndvm = require_ndvm()
        source = self.forecast_source(candidate, split) if forecast else self.program_source(candidate)
        program = ndvm.compile(source)
        self.check_program(program)
        return program

    # ------------------------------------------------------------------ fitting
    def fit(self, candidate: str, *, name: str = "candidate", **calibrate_options) -> TaskFit:
        """Calibrate on the training years (the program only ever receives the training series)."""
        ndvm = require_ndvm()
        start = time.perf_counter()
        try:
            program = self.compile(candidate)
        except (CandidateError, ndvm.NDVMError) as exc:
            return TaskFit(self.name, name, candidate, {}, INF, time.perf_counter() - start, error=str(exc))
        try:
            fit = ndvm.calibrate(program, self.train_inputs(), loss="value", **calibrate_options)
        except ndvm.NDVMError as exc:  # the candidate fails while walking the training series
            return TaskFit(
                self.name,
                name,
                candidate,
                {},
                INF,
                time.perf_counter() - start,
                error=str(exc),
                n_params=len(program.param_names),
            )
        error = fit.error or (None if np.isfinite(fit.loss) else "non-finite training loss")
        return TaskFit(
            self.name,
            name,
            candidate,
            dict(fit.params) if not error else {},
            float(fit.loss) if not error else INF,
            time.perf_counter() - start,
            fits=[fit],
            error=error,
            n_params=len(program.param_names),
        )

    def forecasts(self, fit: TaskFit, split: str = VALIDATION) -> np.ndarray:
        """[n_origins, leads] forecasts of a fitted candidate from every origin of ``split``. The
        program receives the series up to the end of ``split`` only."""
        program = self.compile(fit.source, forecast=True, split=split)
        value = program.run(params=fit.params, inputs=self.driver_inputs(self.split_end[split]))
        out = np.asarray(value, dtype=float)
        expected = (len(self.origins(split)), self.leads)
        if out.shape != expected:
            raise CandidateError(
                f"forecast driver returned shape {out.shape}, expected {expected}; "
                "(predict s) must return a single number"
            )
        return out

    # ------------------------------------------------------------------ the task interface (see Task)
    def fit_groups(self) -> list[None]:
        return [None]

    def fit_inputs(self, group=None) -> dict[str, np.ndarray]:
        return self.train_inputs()

    def fit_target(self, group=None):
        return self.train_target()

    def collect_params(self, groups: list[Any], fits: list[Any]) -> dict[str, float]:
        return dict(fits[0].params)

    def restore_fit(self, source: str, parameters: dict[str, float], name: str = "entry") -> TaskFit:
        """A fit rebuilt from stored parameters (what the end-of-run test scoring uses)."""
        program = self.compile(source)
        missing = [n for n in program.param_names if n not in parameters]
        if missing:
            raise TaskError(f"stored parameters of {name!r} lack {missing}")
        return TaskFit(
            self.name,
            name,
            source,
            {n: float(parameters[n]) for n in program.param_names},
            float("nan"),
            0.0,
            n_params=len(program.param_names),
        )

    def probe_inputs(self) -> dict[str, np.ndarray]:
        """Inputs for the store's semantic fingerprint: a stretch of the training series."""
        return self.driver_inputs(min(60, self.n_train))

    def observed_x(self) -> list[tuple[str, int | None]]:
        """``(ref x 0)``: the calendar position 1..period (when the dataset has a period), then each
        declared covariate (datasets/tasks/forecast_inputs.py)."""
        calendar = (
            [(self.inputs.calendar_name or "calendar", self.inputs.period)] if self.inputs.calendar is not None else []
        )
        return calendar + [(name, None) for name in self.inputs.covariate_names]

    def proposer_inputs(self) -> dict[str, str]:
        """The program inputs a proposer may use (none: the driver passes state and observation)."""
        return {}

    def split_label(self) -> str:
        return (
            f"temporal: fit on {self.n_train} training points (multi-step loss, leads 1..{self.leads}); "
            f"validation = the next {self.n_validation} points"
        )

    def check_program(self, program: Any) -> None:
        """Raise CandidateError when a compiled (wrapped) program has inputs the task does not give."""
        extra = sorted(set(program.inputs) - {SERIES, *self.inputs.input_names()})
        if extra:
            raise CandidateError(
                f"unknown input(s) {extra}: a forecast candidate may use only its params, "
                "its own definitions and the state/observation passed to it"
            )

    def model_source(self, candidate: str, column: str) -> tuple[str, str]:
        """(program, input name) of the one-step-ahead pyfunc model of a candidate. A candidate that
        takes x also reads the columns ``model_x_columns()`` (calendar, covariates) of the frame."""
        ndvm = require_ndvm()
        x_names = list(self.model_x_columns(len(self.y))) if self.takes_x(candidate) else []
        observed = f"(vec {' '.join(f'(ref {n} t)' for n in x_names)})" if x_names else ""
        for name in (column, MODEL_SERIES_FALLBACK):
            source = candidate.rstrip() + "\n" + _ONE_STEP_MODEL.format(column=name, x=observed)
            inputs = ndvm.compile(source).inputs
            if sorted(inputs) == sorted([name, *x_names]) and len(inputs) == 1 + len(x_names):  # none defined by it
                return source, name
        raise TaskError(
            f"the candidate defines both {column!r} and {MODEL_SERIES_FALLBACK!r}; cannot name the model input"
        )

    def model_x_columns(self, end: int) -> dict[str, np.ndarray]:
        """The columns x is built from in the pyfunc model (the calendar under its own name, e.g.
        ``month``, then the covariates), over the series' first ``end`` points."""
        out = {}
        if self.inputs.calendar is not None and self.inputs.calendar_name is not None:
            out[self.inputs.calendar_name] = self.inputs.calendar[:end].copy()
        for i, name in enumerate(self.inputs.covariate_names):
            out[name] = self.inputs.covariates[:end, i].copy()
        return out

    def forecast_model(self, candidate: str, column: str) -> dict[str, Any] | None:
        """The pyfunc model's forecasting program (fit.json's ``forecast`` section, see
        storage/pyfunc_model.py): the history is the input ``column``, the horizon the scalar input
        ``MODEL_HORIZON_INPUT``; its value is the forecasts at leads 1..horizon. None for a
        candidate that reads x (calendar, covariates) takes those columns too: the calendar (1..period)
        is extended past the history by the model, the covariates are held at the last observed step
        (as the task's forecasts hold them at the origin)."""
        ndvm = require_ndvm()
        calendar, covariates = None, []
        if self.takes_x(candidate):
            names = list(self.model_x_columns(len(self.y)))
            if self.inputs.calendar is not None and self.inputs.calendar_name is not None:
                calendar, covariates = names[0], names[1:]
            else:
                covariates = names
            x = ([f"(ref {calendar} j)"] if calendar else []) + [f"(ref {n} i)" for n in covariates]
            slots = {**_FORECAST_MODEL_X_SLOTS, "x_define": _FORECAST_MODEL_X_SLOTS["x_define"].format(x=" ".join(x))}
        else:
            slots = _FORECAST_MODEL_NO_X
        source = candidate.rstrip() + "\n" + _FORECAST_MODEL.format(column=column, horizon=MODEL_HORIZON_INPUT, **slots)
        expected = sorted([column, MODEL_HORIZON_INPUT, *([calendar] if calendar else []), *covariates])
        inputs = sorted(ndvm.compile(source).inputs)
        if inputs != expected:
            raise TaskError(f"the forecasting model of this candidate has inputs {inputs}, expected {expected}")
        return {
            "program": source,
            "input": column,
            "horizon_input": MODEL_HORIZON_INPUT,
            "leads": self.leads,
            "calendar": calendar,
            "period": int(self.inputs.period) if calendar else None,
            "covariates": covariates,
        }

    def entry_extras(self, source: str, parameters: dict[str, float]) -> dict[str, Any]:
        """What MLflow logs for a leaderboard entry besides the store's row: the data of the one-step
        plot over train + validation (``fit_series``) and of the lead-1 validation forecasts
        (``forecast_series``; flows/problem.py has them drawn), an input example and the model program."""
        import pandas as pd

        ndvm = require_ndvm()
        dataset = self.dataset
        model_source, column = self.model_source(source, dataset.y)
        program = ndvm.compile(model_source)
        seen = self.split_end[VALIDATION]  # MLflow shows what the search saw: nothing of the test years
        theta = [[parameters[n] for n in program.param_names]] if program.param_names else None
        x_columns = {n: v for n, v in self.model_x_columns(seen).items() if n in program.inputs}
        one_step = np.asarray(program.evaluate(theta, {column: self.y[:seen], **x_columns}), dtype=float)[0]
        t = dataset.frame.sort(dataset.x).get_column(dataset.x).cast(pl.Float64).to_numpy()[:seen]
        held = np.arange(seen) >= self.n_train
        fit = self.restore_fit(source, parameters)
        lead1 = np.full(t.shape, np.nan)
        lead1[self.origins(VALIDATION) + 1] = self.forecasts(fit, VALIDATION)[:, 0]
        return {
            "fit_series": {
                "x": t,
                "y": self.y[:seen],
                "prediction": one_step,
                "heldout": held,
                "x_label": dataset.x,
                "y_label": dataset.y,
                "title": "one-step-ahead predictions (train + validation)",
            },
            "forecast_series": {
                "time": t,
                "observed": self.y[:seen],
                "forecast": lead1,
                "split": float(t[self.n_train]),
                "label": "lead-1 forecast (validation)",
                "time_label": dataset.x,
                "y_label": dataset.y,
            },
            "input_example": pd.DataFrame({column: self.y[:24], **{n: v[:24] for n, v in x_columns.items()}}),
            "model_source": model_source,
            "model_forecast": self.forecast_model(source, column),
        }

    # ------------------------------------------------------------------ scoring
    def score_forecasts(self, forecasts: np.ndarray, name: str, split: str = VALIDATION, **extra) -> dict[str, Any]:
        """RMSE and ACC per lead over the targets inside ``split``, with skill against persistence.
        On validation, also the standard error over the validation blocks (``block_scores``)."""
        obs = self.targets(split)
        origins = self.origins(split)
        persistence = _persistence_forecast(None, self.y, origins, self.leads)
        rmse_by_lead, acc_by_lead, skill = [], [], []
        for k in range(self.leads):
            valid = ~np.isnan(obs[:, k])
            f, o = forecasts[valid, k], obs[valid, k]
            if not np.all(np.isfinite(f)):
                rmse_by_lead.append(INF)
                acc_by_lead.append(float("nan"))
                skill.append(-INF)
                continue
            r = rmse(f, o)
            rmse_by_lead.append(r)
            acc_by_lead.append(anomaly_correlation(f, o))
            skill.append(1.0 - r / rmse(persistence[valid, k], o))
        finite = all(np.isfinite(rmse_by_lead))
        # ACC is NaN at a lead where the forecasts are constant; the mean is over the other leads
        defined_acc = [a for a in acc_by_lead if not np.isnan(a)]
        if split == VALIDATION:  # its standard error over the validation blocks (contract C2)
            extra = {**self.block_scores(forecasts, obs), **extra}
        return {
            "model": name,
            "mean_rmse": float(np.mean(rmse_by_lead)) if finite else INF,
            "mean_acc": float(np.mean(defined_acc)) if finite and defined_acc else float("nan"),
            "rmse_by_lead": rmse_by_lead,
            "acc_by_lead": acc_by_lead,
            "skill_vs_persistence": skill,  # 1 - RMSE / RMSE(persistence), per lead
            "n_origins": int(len(origins)),
            "error": None if finite else "non-finite forecasts",
            **extra,
        }

    def block_scores(self, forecasts: np.ndarray, obs: np.ndarray) -> dict[str, Any]:
        """The validation figures of contract C2 beside the pooled ``mean_rmse`` (the mean over leads
        of the RMSE over every validation origin, the same figure the test split reports, so the
        search ranks by the test's own metric): ``mean_rmse_se``, the jackknife standard error of
        that pooled figure over the ``n_blocks`` validation blocks (each block left out in turn;
        NaN with one block), and ``mean_rmse_block1..n``, each block's own mean RMSE (a paired
        comparison of two models can difference these). Infinite when a forecast is not finite."""

        # squared errors summed per block and lead (NaN: target outside the split, not counted), so
        # each block's and each leave-one-block-out figure is a few array operations
        blocks = self.validation_blocks()
        sq = (forecasts - obs) ** 2
        counted = ~np.isnan(obs)
        sq = np.where(counted & ~np.isfinite(forecasts), np.inf, sq)  # a non-finite forecast: inf
        sse = np.array([np.nansum(np.where(counted[rows], sq[rows], 0.0), axis=0) for rows in blocks])
        cnt = np.array([counted[rows].sum(axis=0) for rows in blocks], dtype=float)

        def mean_rmse(sse_k: np.ndarray, cnt_k: np.ndarray) -> float:
            scored = cnt_k > 0  # leads with at least one target
            return float(np.mean(np.sqrt(sse_k[scored] / cnt_k[scored])))

        out: dict[str, Any] = {f"mean_rmse_block{i + 1}": mean_rmse(sse[i], cnt[i]) for i in range(len(blocks))}
        n = len(blocks)
        if not np.all(np.isfinite(sse)):
            se = INF
        elif n < 2:
            se = float("nan")
        else:
            left_out = np.array([mean_rmse(sse.sum(0) - sse[i], cnt.sum(0) - cnt[i]) for i in range(n)])
            se = float(np.sqrt((n - 1) / n * np.sum((left_out - left_out.mean()) ** 2)))
        return {"mean_rmse_se": se, "n_blocks": n, **out}

    def score(self, fit: TaskFit, split: str = VALIDATION) -> dict[str, Any]:
        """Scores of a fit on ``split`` ("validation" during the search, "test" once at the end)."""
        split = self._check_split(split)
        base = {"n_params": fit.n_params, "train_loss": fit.train_loss, "fit_seconds": fit.seconds}
        if not fit.ok:
            return {"model": fit.name, "mean_rmse": INF, "mean_acc": float("nan"), "error": fit.error, **base}
        try:
            forecasts = self.forecasts(fit, split)
        except Exception as exc:  # a candidate failing on the scored years scores inf, with the reason
            return {
                "model": fit.name,
                "mean_rmse": INF,
                "mean_acc": float("nan"),
                "error": f"forecasting failed: {exc}",
                **base,
            }
        return self.score_forecasts(forecasts, fit.name, split, **base)

    # ------------------------------------------------------------------ references and prompts
    def reference_models(self) -> tuple[ForecastReference, ...]:
        """The numpy/statsmodels references: ``ENSO_REFERENCES`` (persistence, damped persistence
        toward the training mean, AR(AIC), ARMA(2,1)), plus the seasonal ARIMA when the series has
        a period (``reference_period``)."""
        period = self.reference_period()
        if period is None or period < 2:
            return ENSO_REFERENCES
        return (*ENSO_REFERENCES, sarima_reference(self.y[: self.n_train].copy(), period))

    def reference_period(self) -> int | None:
        """The seasonal period the references use: the task's ``period`` where it has one (a
        manifest's), else 12 for a monthly series (one with a calendar month column), else None."""
        period = getattr(self, "period", None)
        if period:
            return int(period)
        return 12 if self.first_month else None

    def reference_programs(self) -> list[tuple[str, str]]:
        """The references as candidates (see ``Task.reference_programs``), their starting values
        fitted to this task's training years: AR(p) with intercept at the AIC order, damped
        persistence toward the training mean, and (with a period) the seasonal AR(1)(1)."""
        y = self.y[: self.n_train].copy()
        mean = float(np.mean(y))
        coef = _ar_fit_aic(y)
        out = [
            (f"ar-aic-program (AR({len(coef) - 1}))", _ar_program(coef, mean)),
            ("damped-persistence-program", _damped_program(*_damped_fit(y))),
        ]
        period = self.reference_period()
        if period is not None and period >= 2:
            out.append(
                (f"seasonal-ar-program (period {period})", _seasonal_ar_program(*_seasonal_ar_fit(y, period), period))
            )
        return out

    def fit_reference(self, ref: ForecastReference):
        """The reference fitted on the training years, once per task (the end of a run scores the
        references on validation and on test): its state, or raises :class:`ReferenceFitError`."""
        cache = self.__dict__.setdefault("_reference_fits", {})
        if ref.name not in cache:
            start = time.perf_counter()
            try:
                cache[ref.name] = (ref.fit(self.y[: self.n_train].copy()), None, time.perf_counter() - start)
            except ReferenceFitError as exc:
                cache[ref.name] = (None, exc, time.perf_counter() - start)
        state, error, _ = cache[ref.name]
        if error is not None:
            raise error
        return state

    def __getstate__(self) -> dict[str, Any]:
        """What a worker process gets: without the reference fits (workers never score references;
        the run fits them on a thread of its own while it sends the task: flows/stages/score.py)."""
        state = dict(self.__dict__)  # one atomic copy, whatever that thread adds meanwhile
        state.pop("_reference_fits", None)
        return state

    def fit_references(self) -> None:
        """Every reference fitted on the training years and cached (``fit_reference``); a fit that
        fails is cached as failed and reported when the references are scored."""
        for ref in self.reference_models():
            try:
                self.fit_reference(ref)
            except ReferenceFitError:
                pass

    def score_references(self, split: str = VALIDATION) -> list[dict[str, Any]]:
        """Fit every reference on the training years and score it on ``split``. A reference's
        forecast from origin t uses y[0..t] only, so passing the series up to the split's end is
        enough (and keeps later years out). A reference whose fit failed (``ReferenceFitError``)
        gets an infinite score and its ``error``: reported as failed, never as a number."""
        split = self._check_split(split)
        rows = []
        for ref in self.reference_models():
            start = time.perf_counter()
            try:
                state = self.fit_reference(ref)
            except ReferenceFitError as exc:
                rows.append(
                    {
                        "model": ref.name,
                        "mean_rmse": INF,
                        "mean_acc": float("nan"),
                        "n_params": ref.n_params,
                        "fit_seconds": self._reference_fits[ref.name][2],
                        "n_origins": int(len(self.origins(split))),
                        "error": f"reference fit failed: {exc}",
                    }
                )
                continue
            forecasts = ref.forecast(state, self.y[: self.split_end[split]].copy(), self.origins(split), self.leads)
            n_params = ref.n_params if ref.n_params is not None else len(state)
            seconds = self._reference_fits[ref.name][2] + time.perf_counter() - start
            rows.append(self.score_forecasts(forecasts, ref.name, split, n_params=n_params, fit_seconds=seconds))
        return rows

    # ------------------------------------------------------------------ the report card
    # Errors are [n_origins, leads] matrices (their breakdown: the RMSE per lead); the report card
    # runs its paired test on them (flows/report_tests.py).

    def test_errors(
        self, source: str, parameters: dict[str, float], name: str, split: str, **calibrate_options
    ) -> Errors:
        """Forecast errors of a stored candidate from every origin of ``split`` (no refitting: the
        ``calibrate_options`` are not needed)."""
        obs = self.targets(split)
        try:
            fit = self.restore_fit(source, parameters, name=name)
            forecasts = self.forecasts(fit, split)
        except Exception as exc:  # a candidate failing on the test years: reported, not fatal
            return Errors(name, self.kind, error=f"{type(exc).__name__}: {exc}")
        if not np.all(np.isfinite(forecasts[~np.isnan(obs)])):
            return Errors(name, self.kind, error="non-finite forecasts")
        return Errors(name, self.kind, values=forecasts - obs)

    def reference_test_errors(self, split: str, only: set[str] | None = None) -> list[Errors]:
        obs = self.targets(split)
        series = self.y[: self.split_end[split]].copy()
        out = []
        for ref in self.reference_models():
            if only is not None and ref.name not in only:
                continue
            try:
                state = self.fit_reference(ref)
            except ReferenceFitError as exc:
                out.append(Errors(ref.name, self.kind, error=f"reference fit failed: {exc}"))
                continue
            forecasts = ref.forecast(state, series, self.origins(split), self.leads)
            out.append(Errors(ref.name, self.kind, values=forecasts - obs))
        return out

    # ------------------------------------------------------------------ the LLM prompt
    def calendar_months(self) -> np.ndarray | None:
        """Calendar month (1-12) of every point of the series, in time order (None: not monthly)."""
        frame = self.dataset.frame.sort(self.dataset.x)
        return frame.get_column("month").cast(pl.Int64).to_numpy() if "month" in frame.columns else None

    def card_facts(self) -> list[Any]:
        """The columns, then the series (its lag structure and calendar cycle) and each covariate
        against it, over the training and validation points only (the first
        ``split_end[validation]`` points of the sorted series)."""
        seen = self.split_end[VALIDATION]
        y = self.y[:seen]
        months = self.calendar_months()
        series = SeriesFacts(self.dataset.y, y, None if months is None else months[:seen])
        covariates = [
            CovariateFacts(name, self.inputs.names.index(name), self.inputs.covariates[:seen, i], self.dataset.y, y)
            for i, name in enumerate(self.inputs.covariate_names)
        ]
        return [*super().card_facts(), series, *covariates]

    def residual_facts(self, source: str, parameters: dict[str, float]) -> list[Any]:
        """The candidate's validation forecast errors by lead, with the calendar month of each
        target (the validation driver sees the series up to the end of validation only)."""
        errors = self.test_errors(source, parameters, "best", VALIDATION)
        if errors.error:
            return [UnscoredFact(errors.error)]
        months = self.calendar_months()
        target_months = None
        if months is not None:
            idx = self.origins(VALIDATION)[:, None] + np.arange(1, self.leads + 1)[None, :]
            target_months = months[np.minimum(idx, self.split_end[VALIDATION] - 1)]
        return [LeadResidualFacts(errors.values, target_months)]

    def seed_programs(self) -> list[str]:
        """The mutation proposer's parents besides the run's best: the reference programs (fitted
        to this series), then the small textbook forms and the seeds that read the task's inputs."""
        return [source for _, source in self.reference_programs()] + [
            AR1_SOURCE,
            AR2_SOURCE,
            KALMAN_AR1_SOURCE,
            SEASONAL_AR1_SOURCE,
            *input_seed_programs(self.inputs),
        ]

    def contract_text(self) -> str:
        ds = self.dataset
        units = {c.name: c.unit for c in ds.columns}.get(ds.y, "?")
        steps = plural(self.time_step)
        start = (
            f" The series starts in calendar month {self.first_month} (1 = January) and is monthly."
            if self.first_month and self.time_step == "month"
            else f" One step is one {self.time_step}."
            if self.time_step != "step"
            else ""
        )
        nll = (
            " With the Gaussian likelihood, also define (predict-var s) returning the predictive variance (> 0)."
            if self.loss == "gaussian_nll"
            else ""
        )
        fit_text = (
            "Gaussian negative log-likelihood of the one-step forecasts"
            if self.loss == "gaussian_nll"
            else f"mean squared error of the forecasts at leads 1..{self.leads} {steps}"
        )
        if self.inputs.available:
            inputs = f"""Optionally define (update s y x) instead: x is a vec of what is observed with y:
  {self.inputs.describe()}.
Multi-step forecasts iterate s <- (update s (predict s) x), x with the calendar of that future step
and the covariates held at their last observed values (keep your own forecast of a covariate in the
state if you need one). Nothing after the forecast origin is ever revealed."""
        else:
            inputs = """It has no other inputs. To track a position in time, keep a counter in the state.
Multi-step forecasts iterate s <- (update s (predict s))."""
        example = f"\n\nExample using x:\n{input_seed_programs(self.inputs)[-1]}" if self.inputs.available else ""
        return f"""Task: one-step state-space forecasting of `{ds.y}` ({units}) from the dataset `{ds.name}`.{start}
Write a program in the NDVM language (a Scheme subset) that defines exactly these three functions:
  (define (init) ...)        the state before any observation: a number, a list or a vector
  (define (predict s) ...)   the forecast of the next value (a single number) from state s
  (define (update s y) ...)  the new state after observing value y
plus any `(param name init [positive | (between lo hi)])` declarations and helper definitions.{nll}
Do not write a top-level expression that uses the data: the task appends its own driver that walks
the series in time order, calling (predict s) before revealing each value, so your program can never
see future values. {inputs}
Fit: {fit_text} on the training part (after a {self.burn_in}-{self.time_step} burn-in).
Score: RMSE and anomaly correlation of forecasts at leads 1..{self.leads} {steps} on the validation
part that follows, compared with persistence; lower mean RMSE is better.
Allowed: define, lambda, let, let*, if, cond, and, or, list car cdr cadr cons, vec ref, + - * / exp
log sqrt tanh sin cos expt abs min max modulo. No strings, no set!, no I/O.

Example (an AR(1) state-space model):
{AR1_SOURCE}{example}
"""
