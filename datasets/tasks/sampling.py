"""Large tables: how many rows the search fits and scores a candidate on, and which ones.

Fitting a candidate costs time (and, in the native evaluator, memory: a payload buffer per
operation and lane) in proportion to its rows. A curve or regression table with more training rows
than ``fit_row_budget`` is searched on a seeded sample of that many (the same rows in every run
and every worker process), its validation part on ``SCORE_ROWS_PER_FIT_ROW`` times as many; the
finalists are refitted on every training row (``REFIT_STEPS`` L-BFGS steps from the sampled fit)
and scored on the whole test split. The standard error of an RMSE over hundreds of thousands of
rows is far below the differences that rank candidates, so the sample changes the ranking little
and the time per candidate a lot (BENCHMARKS.md, "Large tables").
"""

from __future__ import annotations

import time

import numpy as np

from .runtime import require_ndvm

SAMPLE_SEED = 0  # the samples of a large table: the same rows in every run
SCORE_ROWS_PER_FIT_ROW = 10  # validation rows scored per training row fitted (large tables)
REFIT_STEPS = 50  # L-BFGS steps of a finalist's refit on every training row
# A finalist's refit reads at most this many training rows (a seeded sample beyond): on the
# 10-million-row benchmark the refit on 6 million rows took 6-13 s per finalist and moved the test
# RMSE in its fourth significant digit (BENCHMARKS.md, "Large tables")
REFIT_MAX_ROWS = 1_000_000
MIN_FIT_ROWS = 2_000

_ROWS_PER_SECOND: float | None = None


def fit_row_budget(n_params: int = 4, seconds_per_candidate: float = 0.1) -> int:
    """How many training rows one candidate may be fitted on so that its fit at the pipeline's
    default calibration (Adam, 100 steps, 8 starts: flows/calibration.py) takes about
    ``seconds_per_candidate`` on one thread: measured here once per process on a typical candidate
    (a rational function of two inputs with 4 parameters, 5,000 rows), never less than
    ``MIN_FIT_ROWS``."""
    global _ROWS_PER_SECOND
    if _ROWS_PER_SECOND is None:
        ndvm = require_ndvm()
        n = 5_000
        rng = np.random.default_rng(0)
        a, b = rng.random(n), rng.random(n)
        program = ndvm.compile(
            "(param p0 0.5)(param p1 0.5)(param p2 0.5)(param p3 0.5)"
            "(+ p0 (/ (* p1 a b) (+ 1.0 (square (* p2 b)))) (* p3 (exp (- a))))"
        )
        y = 1.0 + a * b / (1.0 + b * b) + 0.3 * np.exp(-a)
        start = time.perf_counter()
        ndvm.calibrate(
            program, {"a": a, "b": b}, target=y, optimizer="adam", steps=100, lr=0.05, restarts=8, seed=0, threads=1
        )
        _ROWS_PER_SECOND = n / max(time.perf_counter() - start, 1e-6)
    return max(MIN_FIT_ROWS, int(_ROWS_PER_SECOND * seconds_per_candidate * 4 / max(n_params, 1)))


def sample_rows(n: int, size: int) -> np.ndarray:
    """The seeded sample of ``size`` of ``n`` rows, as sorted row indices (row order kept)."""
    return np.sort(np.random.default_rng(SAMPLE_SEED).choice(n, size, replace=False))


def lbfgs_from(program, inputs, target, start, *, loss: str, steps: int, threads: int | None = None):
    """One L-BFGS lane of ``program`` from the parameter values ``start`` (name -> value): the
    polish and the refit of a fitted candidate (a run's Adam settings find an optimum from the
    declared inits; they do not polish one). ``ndvm.calibrate``'s result."""
    init = np.array([[float(start[n]) for n in program.param_names]])
    return require_ndvm().calibrate(
        program,
        inputs,
        target=target,
        loss=loss,
        optimizer="lbfgs",
        steps=steps,
        restarts=1,
        init=init,
        threads=threads,
    )
