"""Scores used by the tasks (numpy only)."""

from __future__ import annotations

import numpy as np


def rms(errors: np.ndarray, skip_nan: bool = False) -> float:
    """Root mean square of ``errors`` (NaN entries left out with ``skip_nan``). Finite errors whose
    squares exceed the float range give inf, without an overflow warning: an infinite score is
    what every caller checks for (a failed candidate). No errors at all (an empty split or lead)
    give NaN, which callers treat as not finite too."""
    errors = np.asarray(errors, float)
    if (np.count_nonzero(~np.isnan(errors)) if skip_nan else errors.size) == 0:
        return float("nan")
    with np.errstate(over="ignore"):
        return float(np.sqrt((np.nanmean if skip_nan else np.mean)(errors**2)))


def rmse(pred: np.ndarray, obs: np.ndarray) -> float:
    pred, obs = np.asarray(pred, float), np.asarray(obs, float)
    return rms(pred - obs)


def mae(pred: np.ndarray, obs: np.ndarray) -> float:
    return float(np.mean(np.abs(np.asarray(pred, float) - np.asarray(obs, float))))


def anomaly_correlation(pred: np.ndarray, obs: np.ndarray) -> float:
    """Anomaly correlation coefficient (ACC): the Pearson correlation of forecast and observed
    anomalies over the verification set. NaN when either side is constant."""
    pred, obs = np.asarray(pred, float), np.asarray(obs, float)
    dp, do = pred - pred.mean(), obs - obs.mean()
    denom = np.sqrt(np.sum(dp * dp) * np.sum(do * do))
    return float(np.sum(dp * do) / denom) if denom > 0 else float("nan")
