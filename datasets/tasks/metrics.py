"""Scores used by the tasks (numpy only)."""
from __future__ import annotations

import numpy as np


def rmse(pred: np.ndarray, obs: np.ndarray) -> float:
    pred, obs = np.asarray(pred, float), np.asarray(obs, float)
    return float(np.sqrt(np.mean((pred - obs) ** 2)))


def mae(pred: np.ndarray, obs: np.ndarray) -> float:
    return float(np.mean(np.abs(np.asarray(pred, float) - np.asarray(obs, float))))


def anomaly_correlation(pred: np.ndarray, obs: np.ndarray) -> float:
    """Anomaly correlation coefficient (ACC): the Pearson correlation of forecast and observed
    anomalies over the verification set. NaN when either side is constant."""
    pred, obs = np.asarray(pred, float), np.asarray(obs, float)
    dp, do = pred - pred.mean(), obs - obs.mean()
    denom = np.sqrt(np.sum(dp * dp) * np.sum(do * do))
    return float(np.sum(dp * do) / denom) if denom > 0 else float("nan")
