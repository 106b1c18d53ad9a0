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

Fit: ``ndvm.calibrate(..., loss="value")`` on the TRAINING part only, minimising the mean squared
one-step error after a burn-in (or the Gaussian NLL when the candidate also defines
``(predict-var s)``). Score: from every origin t in the held-out period (t >= last training
month), forecasts at leads 1..12 by iterating ``s <- (update s (predict s))``; RMSE and anomaly
correlation (ACC) per lead, over targets that all lie in the held-out years, compared with
persistence and damped persistence.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import polars as pl

from ..schema import TEST, TRAIN, Dataset
from . import sexpr
from .base import TaskFit
from .errors import CandidateError, TaskError
from .metrics import anomaly_correlation, rmse
from .runtime import require_ndvm

SERIES = "ndvm-task-series"  # the only input; reserved, candidates may not mention it
RESERVED_PREFIX = "ndvm-task-"
REQUIRED = ("init", "predict", "update")
INF = float("inf")

_FIT_DRIVER = """
;; ---- forecast task driver (appended by the task; the candidate cannot see the series) ----
(define (ndvm-task-one-step-loss series burn)
  (let ndvm-task-walk ((t 0) (s (init)) (total 0.0) (count 0))
    (if (= t (size series))
        (/ total count)
        (let* ((y (ref series t)) (e (- y (predict s))))
          (ndvm-task-walk (+ t 1) (update s y)
                          (if (< t burn) total (+ total {term}))
                          (if (< t burn) count (+ count 1)))))))
(ndvm-task-one-step-loss ndvm-task-series {burn})
"""
_MSE_TERM = "(* e e)"
# 0.5 * (log(2 pi v) + e^2 / v), v = (predict-var s)
_NLL_TERM = "(let ((v (predict-var s))) (* 0.5 (+ 1.8378770664093453 (log v) (/ (* e e) v))))"

_FORECAST_DRIVER = """
;; ---- forecast task driver: forecasts at leads 1..h from every origin t in [first, last) ----
(define (ndvm-task-path s h)
  (let ndvm-task-step ((k 0) (s s) (acc '()))
    (if (= k h)
        (reverse acc)
        (let ((p (predict s)))
          (ndvm-task-step (+ k 1) (update s p) (cons p acc))))))
(define (ndvm-task-forecasts series first last h)
  (let ndvm-task-walk ((t 0) (s (init)) (acc '()))
    (if (= t last)
        (reverse acc)
        (let ((s2 (update s (ref series t))))
          (ndvm-task-walk (+ t 1) s2 (if (>= t first) (cons (ndvm-task-path s2 h) acc) acc))))))
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
    """Lag-1 autocorrelation of the training anomalies (regression through the origin)."""
    return float(np.dot(y[1:], y[:-1]) / np.dot(y[:-1], y[:-1]))


def _damped_forecast(phi, y, origins, leads):
    return y[origins][:, None] * phi ** np.arange(1, leads + 1)[None, :]


def _ar_design(y, p):
    rows = np.column_stack([np.ones(len(y) - p)] + [y[p - i - 1 : len(y) - i - 1] for i in range(p)])
    return rows, y[p:]


def _ar_fit_p(y, p):
    X, target = _ar_design(y, p)
    coef, *_ = np.linalg.lstsq(X, target, rcond=None)
    resid = target - X @ coef
    return coef, float(np.mean(resid ** 2))


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


def _sarimax_fit(y):
    """A linear Gaussian state-space model, ARMA(2,1) + constant, fitted by statsmodels' MLE."""
    import warnings

    from statsmodels.tsa.statespace.sarimax import SARIMAX

    with warnings.catch_warnings(), _single_blas_thread():
        warnings.simplefilter("ignore")
        result = SARIMAX(y, order=(2, 0, 1), trend="c").fit(disp=False, cov_type="none")
    return np.asarray(result.params)


def _sarimax_forecast(params, y, origins, leads):
    """Filter the whole series with the training-fitted parameters, then propagate each origin's
    predicted state a_{t+1|t} (which uses y[0..t] only) through the transition matrix."""
    import warnings

    from statsmodels.tsa.statespace.sarimax import SARIMAX

    model = SARIMAX(y, order=(2, 0, 1), trend="c")
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

ENSO_REFERENCES = (
    ForecastReference("persistence", "forecast = last observed anomaly", _persistence_fit, _persistence_forecast, 0),
    ForecastReference("damped-persistence", "forecast = phi^lead * last anomaly, phi = training lag-1 autocorrelation",
                      _damped_fit, _damped_forecast, 1, AR1_SOURCE),
    ForecastReference("ar-aic", "AR(p) with intercept, least squares, p <= 12 by AIC on the training years",
                      _ar_fit_aic, _ar_forecast, None),
    ForecastReference("statsmodels-arma21", "linear state-space ARMA(2,1) + constant, Kalman filter MLE (statsmodels SARIMAX)",
                      _sarimax_fit, _sarimax_forecast, 5),
)


class ForecastTask:
    """Fit a state-space candidate by one-step error on the training years; score leads 1..12 after."""

    kind = "forecast"
    primary_metric = "mean_rmse"

    def __init__(self, dataset: Dataset, *, leads: int = 12, burn_in: int = 12, loss: str = "mse"):
        if loss not in ("mse", "gaussian_nll"):
            raise TaskError(f"forecast task: loss must be 'mse' or 'gaussian_nll', got {loss!r}")
        if dataset.group is not None:
            raise TaskError(f"forecast task: {dataset.name} has groups; give a single series")
        frame = dataset.frame.sort(dataset.x)
        split = frame.get_column("split").to_list()
        n_train = split.count(TRAIN)
        if split[:n_train] != [TRAIN] * n_train:
            raise TaskError(f"{dataset.name}: the split is not temporal (training rows must precede test rows)")
        if n_train <= burn_in + 2 or len(split) - n_train < leads + 1:
            raise TaskError(f"{dataset.name}: {n_train} training and {len(split) - n_train} test points are too few "
                            f"for burn_in={burn_in}, leads={leads}")
        self.dataset, self.leads, self.burn_in, self.loss = dataset, int(leads), int(burn_in), loss
        self.y = frame.get_column(dataset.y).cast(pl.Float64).to_numpy()
        self.n_train = n_train
        # origins: the last training month up to the second-to-last month; every target t+k is held out
        self.origins = np.arange(n_train - 1, len(self.y) - 1)
        self.first_month = int(frame.get_column("month")[0]) if "month" in frame.columns else None
        self.name = f"forecast:{dataset.name}"

    # ------------------------------------------------------------------ data
    def train_inputs(self) -> dict[str, np.ndarray]:
        """The program input for fitting: the training part of the series only."""
        return {SERIES: self.y[: self.n_train].copy()}

    def train_target(self):
        return None  # the driver returns the loss itself (calibrate with loss="value")

    def targets(self) -> np.ndarray:
        """[n_origins, leads] observed values y[t + k] (NaN past the end); all in the held-out part."""
        idx = self.origins[:, None] + np.arange(1, self.leads + 1)[None, :]
        out = np.full(idx.shape, np.nan)
        valid = idx < len(self.y)
        out[valid] = self.y[idx[valid]]
        return out

    # ------------------------------------------------------------------ programs
    def check_candidate(self, candidate: str) -> None:
        names = sexpr.defined_names(candidate)
        missing = [n for n in REQUIRED if names.get(n) != "function"]
        if missing:
            raise CandidateError(
                f"a forecast candidate must define the functions (init), (predict s) and (update s y); "
                f"missing: {', '.join(missing)}")
        if self.loss == "gaussian_nll" and names.get("predict-var") != "function":
            raise CandidateError("loss gaussian_nll needs (define (predict-var s) ...) returning the predictive variance")
        used = [s for s in sexpr.symbols(candidate) if s.startswith(RESERVED_PREFIX)]
        if used:
            raise CandidateError(f"names starting with {RESERVED_PREFIX!r} are reserved for the task driver: {used}")

    def program_source(self, candidate: str) -> str:
        """Candidate + the fitting driver: the program's value is the one-step training loss."""
        self.check_candidate(candidate)
        term = _NLL_TERM if self.loss == "gaussian_nll" else _MSE_TERM
        return candidate.rstrip() + "\n" + _FIT_DRIVER.format(term=term, burn=self.burn_in)

    def forecast_source(self, candidate: str) -> str:
        """Candidate + the forecasting driver: its value is a list of lead-1..h forecast lists."""
        self.check_candidate(candidate)
        return candidate.rstrip() + "\n" + _FORECAST_DRIVER.format(
            first=int(self.origins[0]), last=int(self.origins[-1]) + 1, leads=self.leads)

    def compile(self, candidate: str, forecast: bool = False):
        ndvm = require_ndvm()
        source = self.forecast_source(candidate) if forecast else self.program_source(candidate)
        program = ndvm.compile(source)
        extra = sorted(set(program.inputs) - {SERIES})
        if extra:
            raise CandidateError(f"unknown input(s) {extra}: a forecast candidate may use only its params, "
                                 "its own definitions and the state/observation passed to it")
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
            return TaskFit(self.name, name, candidate, {}, INF, time.perf_counter() - start, error=str(exc),
                           n_params=len(program.param_names))
        error = fit.error or (None if np.isfinite(fit.loss) else "non-finite training loss")
        return TaskFit(self.name, name, candidate, dict(fit.params) if not error else {},
                       float(fit.loss) if not error else INF, time.perf_counter() - start, fits=[fit],
                       error=error, n_params=len(program.param_names))

    def forecasts(self, fit: TaskFit) -> np.ndarray:
        """[n_origins, leads] forecasts of a fitted candidate from every held-out origin."""
        program = self.compile(fit.source, forecast=True)
        value = program.run(params=fit.params, inputs={SERIES: self.y.copy()})
        out = np.asarray(value, dtype=float)
        if out.shape != (len(self.origins), self.leads):
            raise CandidateError(f"forecast driver returned shape {out.shape}, expected {(len(self.origins), self.leads)}; "
                                 "(predict s) must return a single number")
        return out

    # ------------------------------------------------------------------ scoring
    def score_forecasts(self, forecasts: np.ndarray, name: str, **extra) -> dict[str, Any]:
        """RMSE and ACC per lead over the held-out targets, with skill against persistence."""
        obs = self.targets()
        persistence = _persistence_forecast(None, self.y, self.origins, self.leads)
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
        return {
            "model": name,
            "mean_rmse": float(np.mean(rmse_by_lead)) if finite else INF,
            "mean_acc": float(np.nanmean(acc_by_lead)) if finite else float("nan"),
            "rmse_by_lead": rmse_by_lead,
            "acc_by_lead": acc_by_lead,
            "skill_vs_persistence": skill,  # 1 - RMSE / RMSE(persistence), per lead
            "n_origins": int(len(self.origins)),
            "error": None if finite else "non-finite forecasts",
            **extra,
        }

    def score(self, fit: TaskFit) -> dict[str, Any]:
        base = {"n_params": fit.n_params, "train_loss": fit.train_loss, "fit_seconds": fit.seconds}
        if not fit.ok:
            return {"model": fit.name, "mean_rmse": INF, "mean_acc": float("nan"), "error": fit.error, **base}
        try:
            forecasts = self.forecasts(fit)
        except Exception as exc:  # a candidate failing on the held-out years scores inf, with the reason
            return {"model": fit.name, "mean_rmse": INF, "mean_acc": float("nan"),
                    "error": f"forecasting failed: {exc}", **base}
        return self.score_forecasts(forecasts, fit.name, **base)

    # ------------------------------------------------------------------ references and prompts
    def reference_models(self) -> tuple[ForecastReference, ...]:
        return ENSO_REFERENCES

    def fit_reference(self, ref: ForecastReference):
        return ref.fit(self.y[: self.n_train].copy())

    def score_references(self) -> list[dict[str, Any]]:
        rows = []
        for ref in ENSO_REFERENCES:
            start = time.perf_counter()
            state = self.fit_reference(ref)
            forecasts = ref.forecast(state, self.y, self.origins, self.leads)
            n_params = ref.n_params if ref.n_params is not None else len(state)
            rows.append(self.score_forecasts(forecasts, ref.name, n_params=n_params,
                                             fit_seconds=time.perf_counter() - start))
        return rows

    def seed_programs(self) -> list[str]:
        return [AR1_SOURCE, AR2_SOURCE, KALMAN_AR1_SOURCE, SEASONAL_AR1_SOURCE]

    def contract_text(self) -> str:
        ds = self.dataset
        units = {c.name: c.unit for c in ds.columns}.get(ds.y, "?")
        start = f" The series starts in calendar month {self.first_month} (1 = January) and is monthly." if self.first_month else ""
        nll = (" With the Gaussian likelihood, also define (predict-var s) returning the predictive variance (> 0)."
               if self.loss == "gaussian_nll" else "")
        return f"""Task: one-step state-space forecasting of `{ds.y}` ({units}) from the dataset `{ds.name}`.{start}
Write a program in the NDVM language (a Scheme subset) that defines exactly these three functions:
  (define (init) ...)        the state before any observation: a number, a list or a vector
  (define (predict s) ...)   the forecast of the next value (a single number) from state s
  (define (update s y) ...)  the new state after observing value y
plus any `(param name init [positive | (between lo hi)])` declarations and helper definitions.{nll}
Do not write a top-level expression that uses the data: the task appends its own driver that walks
the series in time order, calling (predict s) before revealing each value, so your program can never
see future values. It has no other inputs. To track the calendar month, keep a counter in the state.
Multi-step forecasts iterate s <- (update s (predict s)).
Fit: mean squared one-step error on the training years (after a {self.burn_in}-step burn-in).
Score: RMSE and anomaly correlation of forecasts at leads 1..{self.leads} on held-out later years,
compared with persistence and damped persistence; lower mean RMSE is better.
Allowed: define, lambda, let, let*, if, cond, and, or, list car cdr cadr cons, vec ref, + - * / exp
log sqrt tanh sin cos expt abs min max modulo. No strings, no set!, no I/O.

Example (an AR(1) state-space model):
{AR1_SOURCE}
"""
