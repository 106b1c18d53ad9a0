"""The run's clock and budget: when proposing stops, and the hard deadline after it.

Budgets: wall time (``minutes``: proposing stops then, queued candidates are calibrated within a
drain allowance, the rest stay pending for a resume), number of new candidates
(``max_candidates``), and LLM cost (``max_cost_usd``, earlier sessions of a resumed run included).
Every stage reads the one ``RunClock`` of its run; only the coordinator and the propose stage
(a stale proposer) stop it.
"""

from __future__ import annotations

import math
import threading
import time
from typing import Any

from flows.config import Budget

# Near the hard deadline a batch gets only as many candidates as one worker calibrates before it,
# at DEADLINE_SAFETY times the recent seconds per candidate, DEADLINE_MARGIN_SECONDS ahead: a
# batch cancelled at the deadline loses all of its fits (results come back per batch).
DEADLINE_SAFETY = 1.5
DEADLINE_MARGIN_SECONDS = 1.0


def deadline_batch_size(batch_size: int, seconds_left: float, seconds_per_candidate: float) -> int:
    """How many candidates a batch handed over now may hold so that it ends before a deadline
    ``seconds_left`` away (0: none would); ``batch_size`` when the deadline is far."""
    usable = seconds_left - DEADLINE_MARGIN_SECONDS
    if usable <= 0:
        return 0
    if seconds_per_candidate <= 0 or math.isinf(usable):  # (no wall-time budget: an infinite drain)
        return batch_size
    return max(0, min(batch_size, int(usable / (DEADLINE_SAFETY * seconds_per_candidate))))


class RunClock:
    """The budget of one session of a run, and the events every stage watches: ``stop_proposing``
    (the budget is spent, the proposer is stale, or the run was interrupted) and ``finished`` (the
    run has ended: replies still arriving are dropped)."""

    def __init__(self, budget: Budget, log: Any):
        self.budget = budget
        self.log = log
        self.started = time.monotonic()
        self.stop_proposing = threading.Event()
        self.finished = threading.Event()
        self.stop_reason = ""
        self.drain_deadline: float | None = None  # the hard deadline, set when proposing stops

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def budget_reason(self, accepted: int, cost: float | None, exhausted: bool) -> str | None:
        """Why the budget is spent (None: it is not), given the candidates accepted so far, the
        LLM cost so far and whether the proposer has nothing more to give."""
        b = self.budget
        if b.minutes is not None and self.elapsed() >= 60.0 * b.minutes:
            return f"wall time ({b.minutes:g} min)"
        if b.max_candidates is not None and accepted >= b.max_candidates:
            return f"candidates ({b.max_candidates})"
        if b.max_cost_usd is not None and cost is not None and cost >= b.max_cost_usd:
            return f"LLM cost (${b.max_cost_usd:g})"
        if exhausted:
            return "replay file exhausted"
        return None

    def stop(self, reason: str, run_id: str) -> None:
        """Stop proposing (once; the first reason is kept) and set the hard deadline."""
        if not self.stop_proposing.is_set():
            self.stop_reason = reason
            self.log.info("discovery %s: stops proposing: %s", run_id, reason)
            self.drain_deadline = time.monotonic() + self.budget.drain_seconds()
            if self.budget.minutes is not None and reason != "interrupted":
                # proposing stopped before its wall time (candidates, cost, the proposer exhausted
                # or stale): what is queued may still use the wall time the run was given
                self.drain_deadline = max(self.drain_deadline, self._planned_deadline())
            self.stop_proposing.set()

    def _planned_deadline(self) -> float:
        """--minutes plus the drain, from the start (a run with a wall-time budget only)."""
        assert self.budget.minutes is not None
        return self.started + 60.0 * self.budget.minutes + self.budget.drain_seconds()

    def hard_deadline(self) -> float | None:
        """When whatever is still in calibration is cancelled (monotonic clock); None: no wall-time
        budget and proposing goes on."""
        if self.drain_deadline is not None:
            return self.drain_deadline
        return self._planned_deadline() if self.budget.minutes is not None else None

    def past_drain(self) -> bool:
        """Proposing has stopped and its drain allowance is spent: cancel what is in calibration."""
        return self.drain_deadline is not None and time.monotonic() > self.drain_deadline

    def seconds_left(self) -> float | None:
        """Wall time left for proposing (None: no wall-time budget)."""
        return None if self.budget.minutes is None else max(0.0, 60.0 * self.budget.minutes - self.elapsed())


__all__ = ["DEADLINE_MARGIN_SECONDS", "DEADLINE_SAFETY", "RunClock", "deadline_batch_size"]
