"""The champion of a run: one documented rule, on validation only, that resists the winner's curse.

The candidate with the best validation score is the winner of thousands of noisy comparisons: its
score is biased low (the winner's curse), and the models just behind it are often as good on new
data while being simpler. So the champion is chosen by a **one-standard-error rule** (Breiman et
al. 1984; Hastie, Tibshirani and Friedman, *Elements of Statistical Learning*, 7.10), on paired
differences:

1. ``best`` = the candidate with the best validation score (the leaderboard's first entry);
2. a candidate ``c`` is **within noise** of ``best`` when its validation score is worse by at most
   one standard error of the difference. The task splits its validation into independent blocks
   and stores each block's score with the validation metrics (``<metric>_block1..n``: rolling-origin
   blocks for forecasts, validation cells for grouped curves, folds of rows for tables); the
   standard error of the difference is ``sd(d) / sqrt(n)`` over the per-block differences
   ``d_b = score_b(c) - score_b(best)``. Blocks differ far more in difficulty than models do on
   one block (Niño 1+2 validation blocks: AR(AIC) 0.27 to 1.68 deg C), so the pairing matters: the
   spread of ``best``'s own block scores (``<metric>_se``) would call persistence as good as AR.
   Without per-block scores for both, ``best``'s own ``<metric>_se`` is the threshold;
3. the champion is the **simplest** candidate (lowest complexity, ``storage.parsimony``) within
   noise (ties: the better score, then the hash).

Without either (a task that scores one block, a run stored before the rule) the champion is
``best``. The chosen model is always on the Pareto front of complexity vs validation score when the
threshold is one number; with paired thresholds it is at least never beaten by a simpler candidate
within noise. The test split plays no part; the report card, the end-of-run test scoring and the
model registry all take the champion from here, so they always name the same model.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

RULE = (
    "champion: the simplest candidate (lowest complexity) whose validation {metric} is worse than the best by at "
    "most one standard error of the difference{how}"
)


@dataclass(frozen=True)
class ChampionChoice:
    """What the one-standard-error rule chose, and from what."""

    hash: str
    score: float
    complexity: int | None
    best_hash: str
    best_score: float
    best_complexity: int | None
    standard_error: float | None  # of the chosen one's difference to the best (or of the best's score)
    paired: bool  # the standard error is of per-block differences (else: of the best's own score)
    n_blocks: int | None
    threshold: float  # the worst validation score accepted for the chosen candidate
    within: int  # candidates within noise of the best (the best included)
    metric: str

    @property
    def is_best(self) -> bool:
        return self.hash == self.best_hash

    @property
    def rule(self) -> str:
        if self.standard_error is None:
            return (
                f"champion: the best validation {self.metric} (the task reported no validation blocks, so the "
                "one-standard-error rule cannot weigh noise)"
            )
        how = (
            f" (paired over {self.n_blocks} validation blocks)"
            if self.paired
            else f" (the best's standard error over {self.n_blocks or 'its'} validation blocks)"
        )
        return RULE.format(metric=self.metric, how=how)

    def reason(self) -> str:
        """One sentence: why this champion (and not the best validation score, when they differ)."""
        if self.is_best:
            if self.standard_error is None:
                return f"{self.hash} has the best validation {self.metric} ({self.score:.4g})."
            return (
                f"{self.hash} has the best validation {self.metric} ({self.score:.4g}) and no simpler candidate "
                "is within one standard error of it."
            )
        return (
            f"{self.hash} (complexity {self.complexity}, validation {self.metric} {self.score:.4g}) is the simplest "
            f"of the {self.within} candidates within one standard error of the best, {self.best_hash} (complexity "
            f"{self.best_complexity}, {self.best_score:.4g}; standard error of the difference {self.standard_error:.3g}): "
            "the best's lead is within validation noise, and the simpler model is preferred."
        )

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "rule": self.rule, "reason": self.reason(), "is_best": self.is_best}


def _metrics(value: Any) -> dict[str, Any]:
    if isinstance(value, dict):
        return value
    try:
        return json.loads(value or "{}")
    except (TypeError, ValueError):
        return {}


def _finite(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def _blocks(metrics: dict[str, Any], metric: str) -> np.ndarray | None:
    """The per-block validation scores ``<metric>_block1..n`` (None when absent or not all finite)."""
    n = _finite(metrics.get("n_blocks"))
    if n is None or n < 2:
        return None
    values = [_finite(metrics.get(f"{metric}_block{i}")) for i in range(1, int(n) + 1)]
    if any(v is None for v in values):
        return None
    return np.array(values, dtype=float)


def choose_champion(
    rows: Iterable[tuple[str, float, int | None, Any]], metric: str, higher_is_better: bool = False
) -> ChampionChoice | None:
    """The one-standard-error choice among ``(hash, validation score, complexity, validation
    metrics)`` rows (the metrics as a dict or its JSON); None when no row has a finite score."""
    sign = -1.0 if higher_is_better else 1.0  # compare on a lower-is-better key
    usable = [(h, float(s), c, _metrics(m)) for h, s, c, m in rows if _finite(s) is not None]
    if not usable:
        return None
    best_hash, best_score, best_c, best_metrics = min(usable, key=lambda r: (sign * r[1], r[0]))
    best_blocks = _blocks(best_metrics, metric)
    own_se = _finite(best_metrics.get(f"{metric}_se"))
    if own_se is not None and own_se < 0:
        own_se = None

    def allowance(row_metrics: dict[str, Any]) -> tuple[float | None, bool]:
        """(standard error of the difference to the best, paired?) for one candidate."""
        blocks = _blocks(row_metrics, metric)
        if best_blocks is not None and blocks is not None and blocks.shape == best_blocks.shape:
            d = sign * (blocks - best_blocks)
            return float(np.std(d, ddof=1) / math.sqrt(d.size)), True
        return own_se, False

    within: list[tuple[str, float, int | None, float | None, bool]] = []
    for h, score, c, m in usable:
        se, paired = (None, False) if h == best_hash else allowance(m)
        if h == best_hash or (se is not None and sign * (score - best_score) <= se):
            within.append((h, score, c, se, paired))
    # A candidate without a complexity cannot be called simpler: it stays eligible only as the best.
    ranked = [r for r in within if r[2] is not None or r[0] == best_hash]
    pick = min(ranked, key=lambda r: (r[2] if r[2] is not None else math.inf, sign * r[1], r[0]))
    n_blocks = _finite(best_metrics.get("n_blocks"))
    if pick[0] == best_hash:
        se, paired = (None, False) if best_blocks is None and own_se is None else (own_se, best_blocks is not None)
        if best_blocks is not None and own_se is None:
            se = float(np.std(best_blocks, ddof=1) / math.sqrt(best_blocks.size))
    else:
        se, paired = pick[3], pick[4]
    return ChampionChoice(
        hash=pick[0],
        score=pick[1],
        complexity=pick[2],
        best_hash=best_hash,
        best_score=best_score,
        best_complexity=best_c,
        standard_error=se,
        paired=paired,
        n_blocks=None if n_blocks is None else int(n_blocks),
        threshold=best_score + sign * (se or 0.0),
        within=len(within),
        metric=metric,
    )


def champion_of_run(store: Any, run_id: str) -> ChampionChoice | None:
    """The champion of a run in a ``storage.CandidateStore`` (None when nothing was calibrated)."""
    status = store.run_status(run_id)
    rows = store.top(10**9, run_id=run_id)
    if rows.is_empty():
        return None
    complexities = store.complexities(rows.get_column("hash").to_list())
    return choose_champion(
        (
            (r["hash"], r["score"], complexities.get(r["hash"]), r["heldout_metrics"])
            for r in rows.iter_rows(named=True)
        ),
        metric=status.metric,
        higher_is_better=status.higher_is_better,
    )


__all__ = ["ChampionChoice", "choose_champion", "champion_of_run", "RULE"]
