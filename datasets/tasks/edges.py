"""Models that hold outside the data: the regression task's extrapolation block and growth check.

A random validation split asks whether a candidate interpolates: its rows lie inside the box the
training rows fill. A law should also hold beyond it; a long fit bends there (BENCHMARKS.md,
symreg-discovery: a tiny ``exp(exp(m2))`` term kept by the one-standard-error rule explodes at
masses 5-8 of a [1, 5] training box). Two questions, both answered from the training split alone
(never from test):

- **The edge block** (``EdgeBlock``): the training rows at the edges of the training ranges, about
  ``fraction`` of them (default ``EDGE_FRACTION``), are held out of fitting and scored like the
  validation rows: a row is at the edge when one of its inputs lies in that input's lower or upper
  tail, the tails of every input at the same quantile level ``q``, the largest for which the
  union holds at most ``fraction`` of the training rows (found by bisection on a seeded sample).
  Candidates (and the references) are fitted on the inner rows, and the test split scores that
  fit: the parameters scored are the ones the report card prints and the MLflow model serves.
- **The growth check** (``GrowthGrid``): each candidate is evaluated on seeded points just beyond
  the training box (each input's range widened by ``GROWTH_WIDEN`` of its width on each side, an
  input positive on every training row never below half its smallest value, a non-negative one
  never below zero); a prediction there that is not finite, or further from the training target's
  mean than ``GROWTH_LIMIT`` times the target's training range, refuses the candidate (its
  validation score is infinite, with the reason).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

EDGE_FRACTION = 0.1  # of the training rows, held out at the edges of the training box
EDGE_MIN_ROWS = 50  # training rows below which a table gets no edge block
GROWTH_WIDEN = 0.25  # of each input's training range, on each side
GROWTH_POINTS = 512
GROWTH_LIMIT = 10.0  # times the training target's range, from its mean
EDGE_SAMPLE_ROWS = 200_000  # training rows the block's quantiles are found on (a seeded sample beyond)
_SEED = 0


@dataclass(frozen=True)
class EdgeBlock:
    """Per-input thresholds: a row is at the edge when any input is below its ``low`` or above its
    ``high`` (strictly). Plain numbers, so a worker process applies the same block to its rows."""

    low: tuple[float, ...]
    high: tuple[float, ...]
    level: float  # the tail quantile q of every input
    fraction: float  # of the training rows the block holds (measured on the sample)

    @classmethod
    def of(cls, columns: list[np.ndarray], fraction: float = EDGE_FRACTION) -> EdgeBlock | None:
        """The block of training ``columns`` (one array per input: every training row, or a seeded
        sample of ``EDGE_SAMPLE_ROWS`` of a large table), or None when there is none to
        hold out (``fraction`` 0, too few rows, or no tail small enough: inputs of few values)."""
        if not 0.0 <= fraction < 0.5:
            raise ValueError(f"the edge fraction must be in [0, 0.5), got {fraction!r}")
        n = columns[0].size if columns else 0
        if fraction == 0.0 or n < EDGE_MIN_ROWS:
            return None
        stacked = np.column_stack(columns)

        def block(q: float) -> tuple[np.ndarray, np.ndarray, float]:
            low, high = np.quantile(stacked, [q, 1.0 - q], axis=0)
            share = float(np.mean(np.any((stacked < low) | (stacked > high), axis=1)))
            return low, high, share

        lo_q, hi_q = 0.0, 0.5
        best = None
        for _ in range(40):  # the share grows with q (in steps, for inputs of few values)
            q = (lo_q + hi_q) / 2
            low, high, share = block(q)
            if share <= fraction:
                lo_q, best = q, (low, high, share, q)
            else:
                hi_q = q
        if best is None or best[2] == 0.0:
            return None
        low, high, share, q = best
        return cls(tuple(map(float, low)), tuple(map(float, high)), float(q), share)

    def mask(self, columns: list[np.ndarray]) -> np.ndarray:
        """True for the rows at the edge (``columns`` in the order the block was made from)."""
        out = np.zeros(columns[0].size, dtype=bool)
        for column, low, high in zip(columns, self.low, self.high):
            out |= (column < low) | (column > high)
        return out

    def describe(self, names: list[str]) -> str:
        bounds = ", ".join(f"{n} {lo:.4g}..{hi:.4g}" for n, lo, hi in zip(names, self.low, self.high))
        return (
            f"edge block: the {self.fraction:.0%} of training rows with an input outside its "
            f"{self.level:.1%}..{1 - self.level:.1%} quantiles ({bounds}), held out of fitting"
        )


@dataclass(frozen=True)
class GrowthGrid:
    """Seeded points just beyond the training box, and the band a candidate's predictions must stay in."""

    points: dict[str, np.ndarray]
    centre: float
    limit: float

    @classmethod
    def of(cls, ranges: dict[str, tuple[float, float]], target: np.ndarray) -> GrowthGrid | None:
        """The grid beyond the box ``ranges`` (input -> training min, max); None without a target range."""
        span = float(np.max(target) - np.min(target)) if target.size else 0.0
        if not ranges or not np.isfinite(span) or span <= 0.0:
            return None
        rng = np.random.default_rng(_SEED)
        names = list(ranges)
        lows, highs = [], []
        for lo, hi in ranges.values():
            width = hi - lo
            wide_lo, wide_hi = lo - GROWTH_WIDEN * width, hi + GROWTH_WIDEN * width
            if lo > 0:  # a positive quantity (a mass, a distance) stays positive
                wide_lo = max(wide_lo, lo / 2)
            elif lo == 0:
                wide_lo = 0.0
            if hi < 0:
                wide_hi = min(wide_hi, hi / 2)
            elif hi == 0:
                wide_hi = 0.0
            lows.append(wide_lo)
            highs.append(wide_hi)
        low, high = np.array(lows), np.array(highs)
        inside_lo = np.array([r[0] for r in ranges.values()])
        inside_hi = np.array([r[1] for r in ranges.values()])
        # points of the widened box outside the training box: every point has at least one input
        # pushed into the margin (an input drawn at random, to a random side that has a margin:
        # a non-negative input has none below zero)
        pts = rng.uniform(low, high, size=(GROWTH_POINTS, len(names)))
        which = rng.integers(0, len(names), size=GROWTH_POINTS)
        upper = rng.random(GROWTH_POINTS) < 0.5
        upper = np.where(low[which] >= inside_lo[which], True, np.where(high[which] <= inside_hi[which], False, upper))
        rows = np.arange(GROWTH_POINTS)
        margin_lo = rng.uniform(low[which], inside_lo[which])
        margin_hi = rng.uniform(inside_hi[which], high[which])
        pts[rows, which] = np.where(upper, margin_hi, margin_lo)
        return cls(
            {name: np.ascontiguousarray(pts[:, i]) for i, name in enumerate(names)},
            float(np.mean(target)),
            GROWTH_LIMIT * span,
        )

    def refusal(self, prediction: np.ndarray) -> str | None:
        """Why a candidate predicting ``prediction`` on the grid is refused, or None."""
        p = np.broadcast_to(np.asarray(prediction, dtype=float), (GROWTH_POINTS,))
        bad = ~np.isfinite(p)
        if bad.any():
            i = int(np.argmax(bad))
            return f"non-finite prediction just beyond the training box (at {self._at(i)})"
        far = np.abs(p - self.centre)
        i = int(np.argmax(far))
        if far[i] > self.limit:
            return (
                f"grows without bound just beyond the training box: {p[i]:.4g} at {self._at(i)}, "
                f"more than {GROWTH_LIMIT:g} times the training target's range from its mean"
            )
        return None

    def _at(self, i: int) -> str:
        return ", ".join(f"{k} = {v[i]:.4g}" for k, v in self.points.items())
