"""Calibration for the Python baselines: torch Adam over the baseline's value and gradient.

This mirrors the protocol of ``ndvm.calibrate`` closely enough for timing comparisons (same loss,
steps, learning rate, initial values; constrained parameters optimized in unconstrained
coordinates: softplus for ``positive``, a scaled sigmoid for ``(between lo hi)``), but it runs
one restart and steps through Python and torch at every iteration, as a user of the baseline
would.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np
import torch

from ndvm.errors import EvalError
from ndvm_bench.baselines.interp import BaselineProgram


@dataclass
class BaselineFit:
    params: dict
    loss: float
    history: np.ndarray
    seconds: float
    error: str | None = None


def _to_unconstrained(value: float, constraint) -> float:
    if constraint == "positive":
        return value + math.log(-math.expm1(-value))  # inverse softplus
    if isinstance(constraint, tuple):
        _, lo, hi = constraint
        u = (value - lo) / (hi - lo)
        return math.log(u / (1.0 - u))
    return value


def _to_natural(u: torch.Tensor, constraint) -> torch.Tensor:
    if constraint == "positive":
        return torch.nn.functional.softplus(u, threshold=50.0)
    if isinstance(constraint, tuple):
        _, lo, hi = constraint
        return lo + (hi - lo) * torch.sigmoid(u)
    return u


def warm_up() -> None:
    """Pay torch.optim's one-time start-up (lazy imports, ~1-2 s on first use) before timing anything."""
    u = torch.zeros(1, dtype=torch.float64, requires_grad=True)
    opt = torch.optim.Adam([u], lr=0.1)
    (u * u).sum().backward()
    opt.step()


def calibrate(
    program: BaselineProgram,
    inputs: dict,
    target=None,
    loss: str = "mse",
    steps: int = 50,
    lr: float = 0.05,
    init: np.ndarray | None = None,
) -> BaselineFit:
    """Fit ``program``'s parameters with torch Adam; ``init`` (natural units) defaults to the declared
    initial values. Non-finite losses stop the fit with ``error`` set, like a frozen NDVM lane."""
    t0 = time.perf_counter()
    params = program.params
    start = [p.init for p in params] if init is None else list(np.asarray(init, dtype=np.float64).reshape(-1))
    u = torch.tensor(
        [[_to_unconstrained(v, p.constraint) for v, p in zip(start, params)]], dtype=torch.float64, requires_grad=True
    )
    target_t = None if target is None else torch.as_tensor(np.asarray(target, dtype=np.float64))
    if loss not in ("mse", "value"):
        raise ValueError(f"baseline calibrate supports loss 'mse' or 'value', not {loss!r}")
    if loss == "mse" and target_t is None:
        raise ValueError("loss 'mse' needs a target")
    opt = torch.optim.Adam([u], lr=lr)
    history = []
    best_loss, best_u, error = math.inf, u.detach().clone(), None
    for _ in range(steps):
        opt.zero_grad()
        theta = torch.stack([_to_natural(u[:, j], p.constraint) for j, p in enumerate(params)], dim=1)
        try:
            out = program.loss_and_grad_torch(theta, inputs)
        except EvalError as e:
            error = str(e)
            break
        value = out[0] if loss == "value" else torch.mean((out[0] - target_t) ** 2)
        lv = float(value.detach())
        history.append(lv)
        if not math.isfinite(lv):
            error = "non-finite loss"
            break
        if lv < best_loss:
            best_loss, best_u = lv, u.detach().clone()
        value.backward()
        opt.step()
    natural = {p.name: float(_to_natural(best_u[:, j], p.constraint)[0]) for j, p in enumerate(params)}
    return BaselineFit(natural, best_loss, np.asarray(history), time.perf_counter() - t0, error)


__all__ = ["BaselineFit", "calibrate", "warm_up"]
