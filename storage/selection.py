"""The champion of a run: one documented rule, on validation only, that resists the winner's curse.

The candidate with the best validation score is the winner of thousands of noisy comparisons: its
score is biased low (the winner's curse), and the models just behind it are often as good on new
data while being simpler. So the champion is chosen by the **one-standard-error rule**
(Breiman et al. 1984; Hastie, Tibshirani and Friedman, *Elements of Statistical Learning*, 7.10):

1. ``best`` = the candidate with the best validation score (the leaderboard's first entry);
2. ``se`` = the standard error of ``best``'s validation score across the validation's independent
   units, as the task reports it in the stored validation metrics (``<metric>_se``: over
   rolling-origin validation blocks for forecasts, over validation cells for grouped curves, over
   folds of validation rows for tables; ``n_blocks`` of them);
3. the champion is the **simplest** candidate (lowest complexity, ``storage.parsimony``) whose
   validation score is within ``se`` of ``best``'s (ties: the better score, then the hash).

Without a finite ``se`` (a task that scores one block, a run stored before the rule) the threshold
is the best score itself, and the champion is ``best``. The chosen model is always on the Pareto
front of complexity vs validation score: every simpler candidate is outside the threshold, so worse.
The test split plays no part; the report card, the end-of-run test scoring and the model registry
all take the champion from here, so they always name the same model.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

RULE = (
    "champion: the simplest candidate (lowest complexity) whose validation {metric} is within one standard "
    "error of the best validation score (the standard error across the validation's {n} blocks)"
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
    standard_error: float | None  # of the best's validation score; None when the task gave none
    n_blocks: int | None
    threshold: float
    within: int  # candidates whose validation score is within the threshold (the best included)
    metric: str

    @property
    def is_best(self) -> bool:
        return self.hash == self.best_hash

    @property
    def rule(self) -> str:
        if self.standard_error is None:
            return (
                f"champion: the best validation {self.metric} (the task reported no standard error across "
                "validation blocks, so the one-standard-error rule cannot weigh noise)"
            )
        return RULE.format(metric=self.metric, n=self.n_blocks if self.n_blocks else "several")

    def reason(self) -> str:
        """One sentence: why this champion (and not the best validation score, when they differ)."""
        if self.is_best:
            if self.standard_error is None:
                return f"{self.hash} has the best validation {self.metric} ({self.score:.4g})."
            return (
                f"{self.hash} has the best validation {self.metric} ({self.score:.4g}) and no simpler candidate "
                f"is within one standard error ({self.standard_error:.3g}) of it."
            )
        return (
            f"{self.hash} (complexity {self.complexity}, validation {self.metric} {self.score:.4g}) is the simplest "
            f"of the {self.within} candidates within one standard error ({self.standard_error:.3g}) of the best, "
            f"{self.best_hash} (complexity {self.best_complexity}, {self.best_score:.4g}): the best's lead is "
            "within validation noise, and the simpler model is preferred."
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


def choose_champion(
    rows: Iterable[tuple[str, float, int | None, Any]], metric: str, higher_is_better: bool = False
) -> ChampionChoice | None:
    """The one-standard-error choice among ``(hash, validation score, complexity, validation
    metrics)`` rows (the metrics as a dict or its JSON); None when no row has a finite score."""
    sign = -1.0 if higher_is_better else 1.0  # compare on a lower-is-better key
    usable = [(h, float(s), c, m) for h, s, c, m in rows if _finite(s) is not None]
    if not usable:
        return None
    best_hash, best_score, best_c, best_metrics = min(usable, key=lambda r: (sign * r[1], r[0]))
    metrics = _metrics(best_metrics)
    se = _finite(metrics.get(f"{metric}_se"))
    if se is not None and se < 0:
        se = None
    n_blocks = _finite(metrics.get("n_blocks"))
    threshold = sign * best_score + (se or 0.0)  # on the lower-is-better key
    within = [r for r in usable if sign * r[1] <= threshold]
    # A candidate without a complexity cannot be called simpler: it stays eligible only as the best.
    ranked = [r for r in within if r[2] is not None] or [(best_hash, best_score, best_c, best_metrics)]
    if best_c is None and all(r[0] != best_hash for r in ranked):
        ranked.append((best_hash, best_score, best_c, best_metrics))
    pick = min(ranked, key=lambda r: (r[2] if r[2] is not None else math.inf, sign * r[1], r[0]))
    return ChampionChoice(
        hash=pick[0],
        score=pick[1],
        complexity=pick[2],
        best_hash=best_hash,
        best_score=best_score,
        best_complexity=best_c,
        standard_error=se,
        n_blocks=None if n_blocks is None else int(n_blocks),
        threshold=sign * threshold,
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
