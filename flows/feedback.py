"""What came of each proposal round, for the next round's prompt and for the stale-round stop.

A *round* is one proposal request of the discover flow (one ``apropose`` call: ``per_request``
programs from the LLM proposer, 16 from the mutation proposer). After the store has taken a round's
proposals, :meth:`RoundFeedback.record` notes which were new and which duplicated a stored program
(looked up in the store: its hash, and its validation score when it is calibrated). The discover
flow puts the last round's duplicates, the recent duplicate rate and the count of stale rounds
(rounds in a row with nothing new) into the next :class:`proposers.ProposalContext`, and stops
asking once ``max_stale_rounds`` rounds in a row gave nothing new.
"""
from __future__ import annotations

import collections
import logging
import threading
from typing import Any

log = logging.getLogger("ndvm.discover")


class RoundFeedback:
    """Duplicates of the last round, the duplicate rate over the last ``window`` rounds, and the
    stale-round count (thread-safe: rounds finish in worker threads)."""

    def __init__(self, max_stale_rounds: int, window: int = 8, name_duplicates: bool = True):
        if max_stale_rounds < 0:
            raise ValueError(f"max_stale_rounds must be >= 0 (0: never stop), got {max_stale_rounds}")
        self.max_stale_rounds = max_stale_rounds
        self.name_duplicates = name_duplicates  # False: count them only (no store look-up per duplicate)
        self._lock = threading.Lock()
        self._recent: collections.deque[tuple[int, int]] = collections.deque(maxlen=window)  # (new, duplicates)
        self.last_duplicates: list[Any] = []
        self.stale_rounds = 0
        self.rounds = 0

    def record(self, store: Any, run_id: str, proposals: list[Any], new_sources: set[str]) -> None:
        """One round's outcome: ``proposals`` were offered to the store, ``new_sources`` became candidates."""
        others = [p for p in proposals if _source(p) not in new_sources]
        duplicates: list[Any] = []
        if self.name_duplicates and others:
            try:
                duplicates = _duplicates(store, run_id, others)
            except Exception as exc:  # feedback is advice: a failed look-up must not stop the run
                log.warning("looking up the round's duplicates failed: %s", exc)
        new = len(proposals) - len(others)
        with self._lock:
            self.rounds += 1
            self._recent.append((new, len(duplicates) if self.name_duplicates else len(others)))
            self.last_duplicates = duplicates
            self.stale_rounds = 0 if new else self.stale_rounds + 1

    @property
    def duplicate_rate(self) -> float:
        with self._lock:
            new = sum(n for n, _ in self._recent)
            dup = sum(d for _, d in self._recent)
        return dup / (new + dup) if new + dup else 0.0

    def stale(self) -> bool:
        return self.max_stale_rounds > 0 and self.stale_rounds >= self.max_stale_rounds

    def stop_message(self) -> str:
        return f"stopped proposing: {self.stale_rounds} rounds in a row gave nothing new"


def _source(proposal: Any) -> str:
    return proposal if isinstance(proposal, str) else getattr(proposal, "source", "")


def _duplicates(store: Any, run_id: str, proposals: list[Any]) -> list[Any]:
    """The proposals the store recorded as duplicates, each with the stored program it duplicates.
    Read from the store's own record of the round (the proposals table and the leaderboard), so a
    semantic duplicate names its stored twin, not its own hash."""
    from proposers import Duplicate

    out = []
    for proposal in proposals:
        source = _source(proposal)
        with store._lock:  # the store's connection is shared by threads: its lock, as its methods do
            rows = store._con.sql(
                "SELECT outcome, duplicate_of FROM proposals WHERE run_id = $1 AND source = $2 "
                "ORDER BY id DESC LIMIT 1", params=[run_id, source]).fetchall()
            row = rows[0] if rows else None
            if row is None or not str(row[0]).startswith("duplicate") or row[1] is None:
                continue  # invalid or not stored: the proposer's failures say why
            scores = store._con.sql("SELECT score FROM leaderboard WHERE run_id = $1 AND hash = $2",
                                    params=[run_id, row[1]]).fetchall()
            scored = scores[0] if scores else None
        out.append(Duplicate(source, row[1], None if scored is None or scored[0] is None else float(scored[0]),
                             semantic=row[0] == "duplicate_semantic"))
    return out


__all__ = ["RoundFeedback"]
