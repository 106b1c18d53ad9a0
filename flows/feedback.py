"""What came of each proposal round, for the next round's prompt and for the stale-round stop.

A *round* is one proposal request of the discover flow (one ``apropose`` call: ``per_request``
programs from the LLM proposer, 16 from the mutation proposer). After the store has taken a round's
proposals, :meth:`RoundFeedback.record` notes which were new and which duplicated a stored program
(looked up in the store: its hash, and its validation score when it is calibrated). The discover
flow puts the last round's duplicates, the recent duplicate rate and the count of stale rounds
(rounds in a row with nothing new) into the next :class:`proposers.ProposalContext`, and stops
asking once ``max_stale_rounds`` rounds in a row gave nothing new.

:class:`ResidualNotes` keeps the text of where the best program fails on validation (refreshed when
the best changes) for the LLM prompt; :func:`llm_summary` is the LLM spend for the run summary and
MLflow (tokens, cached tokens, cost per new valid candidate).
"""

from __future__ import annotations

import collections
import logging
import threading
from typing import Any

from proposers.datacard import residual_text

log = logging.getLogger("ndvm.discover")


class RoundFeedback:
    """The duplicates the next prompt names, the duplicate rate over the last ``window`` rounds, and
    the stale-round count (thread-safe: rounds finish in worker threads).

    ``last_duplicates`` holds the last round's duplicates, then the stored programs proposed again
    most often earlier in the run (a model's favourites come back round after round, not only in
    the last one), at most ``max_named``, each with how many times it came back."""

    def __init__(self, max_stale_rounds: int, window: int = 8, name_duplicates: bool = True, max_named: int = 8):
        if max_stale_rounds < 0:
            raise ValueError(f"max_stale_rounds must be >= 0 (0: never stop), got {max_stale_rounds}")
        self.max_stale_rounds = max_stale_rounds
        self.name_duplicates = name_duplicates  # False: counted, named only when the caller hands them in
        self._lock = threading.Lock()
        self._recent: collections.deque[tuple[int, int]] = collections.deque(maxlen=window)  # (new, duplicates)
        self.last_duplicates: list[Any] = []
        self.max_named = max_named
        self._repeats: collections.Counter[str] = collections.Counter()  # stored hash -> times proposed again
        self._latest: dict[str, Any] = {}  # stored hash -> its latest duplicate
        self.stale_rounds = 0
        self.rounds = 0

    def record(
        self, store: Any, run_id: str, proposals: list[Any], new_sources: set[str], duplicates: list[Any] | None = None
    ) -> None:
        """One round's outcome: ``proposals`` were offered to the store, ``new_sources`` became
        candidates. ``duplicates``: the round's :class:`proposers.Duplicate` records when the caller
        has them (then the store is not asked)."""
        others = [p for p in proposals if _source(p) not in new_sources]
        named = self.name_duplicates or duplicates is not None
        if duplicates is not None:
            duplicates = list(duplicates)
        else:
            duplicates = []
            if others:
                try:  # one store query per round; invalid proposals are not counted as duplicates
                    duplicates = _duplicates(store, run_id, others)
                except Exception as exc:  # feedback is advice: a failed look-up must not stop the run
                    log.warning("looking up the round's duplicates failed: %s", exc)
        new = len(proposals) - len(others)
        with self._lock:
            self.rounds += 1
            self._recent.append((new, len(duplicates)))
            self.last_duplicates = self._named(duplicates) if named else []
            self.stale_rounds = 0 if new else self.stale_rounds + 1

    def _named(self, duplicates: list[Any]) -> list[Any]:
        """This round's duplicates, then the most repeated earlier ones, each with its count."""
        import dataclasses

        for d in duplicates:
            self._repeats[d.duplicate_of] += 1
            self._latest[d.duplicate_of] = d
        order = list(dict.fromkeys(d.duplicate_of for d in duplicates))
        order += [h for h, n in self._repeats.most_common() if n > 1 and h not in order]
        return [dataclasses.replace(self._latest[h], times=self._repeats[h]) for h in order[: self.max_named]]

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


class ResidualNotes:
    """Where the current best program fails on validation, for the LLM prompt: the task's
    ``validation_residuals`` of the best stored candidate, recomputed only when the best changes
    (a new hash), so a request costs a dictionary look-up. Thread-safe."""

    def __init__(self, task: Any):
        self.task = task
        self._lock = threading.Lock()
        self._hash: str | None = None
        self._text = ""

    def text(self, best: Any) -> str:
        """``best``: the best leaderboard row (``hash``, ``source``, ``parameters`` JSON) or None."""
        if best is None or not best.get("hash"):
            return ""
        with self._lock:
            if best["hash"] != self._hash:
                import json

                try:
                    facts = self.task.residual_facts(best["source"], json.loads(best["parameters"] or "{}"))
                    text = residual_text(facts)
                except Exception as exc:  # advice for a prompt: a failed breakdown must not stop the run
                    log.warning("residuals of the best program failed: %s", exc)
                    text = ""
                self._hash, self._text = best["hash"], text
            return self._text


def llm_summary(proposer: Any, new: int) -> dict[str, Any] | None:
    """The LLM spend of this session for the run summary and MLflow: requests, tokens (prompt,
    of them cached, completion), cost, and cost per new valid candidate. ``new``: what the caller
    counts as new (``ndvm discover`` passes the run's new candidates, so a resumed run's earlier
    sessions and the library's seed programs are in it while the spend is this session's).
    None for proposers without usage."""
    usage = getattr(proposer, "usage", None)
    if usage is None:
        return None
    cost = float(usage.cost_usd) if usage.cost_known else None
    return {
        "requests": int(usage.calls),
        "tokens_in": int(usage.tokens_in),
        "tokens_cached": int(getattr(usage, "tokens_cached", 0)),
        "tokens_out": int(usage.tokens_out),
        "cached_share": usage.tokens_cached / usage.tokens_in if usage.tokens_in else 0.0,
        "cost_usd": cost,
        "new_candidates": int(new),
        "cost_per_new_usd": cost / new if cost is not None and new else None,
        "tokens_per_new": (usage.tokens_in + usage.tokens_out) / new if new else None,
    }


def llm_summary_line(summary: dict[str, Any] | None) -> str | None:
    """The run summary's line about this session's LLM requests (None when there were none)."""
    if not summary or not summary["requests"]:
        return None
    per_new = (
        f"${summary['cost_per_new_usd']:.4f} per new valid candidate"
        if summary["cost_per_new_usd"] is not None
        else "cost per new valid candidate unknown"
        if summary["cost_usd"] is None or summary["new_candidates"]
        else "no new valid candidate"
    )
    return (
        f"LLM requests: {summary['requests']}, {summary['tokens_in']} prompt tokens "
        f"({summary['tokens_cached']} from the provider's prompt cache, {100 * summary['cached_share']:.0f}%), "
        f"{summary['tokens_out']} completion tokens; {summary['new_candidates']} new valid candidates, {per_new}"
    )


def log_llm_summary(tracker: Any, summary: dict[str, Any] | None) -> None:
    """The summary's numbers as metrics of the MLflow parent run (``llm_requests``,
    ``llm_tokens_cached``, ``llm_cached_share``, ``llm_cost_per_new_usd``, ...) through the tracker's
    client (the generic ``log_batch``). The run's cost and token totals are logged during the run
    already (``llm_cost_usd``, ``llm_tokens_prompt``, ``llm_tokens_completion``): not repeated here."""
    if not summary or getattr(tracker, "parent_run_id", None) is None:
        return
    import time

    import mlflow

    stamp = int(time.time() * 1000)
    metrics = [
        mlflow.entities.Metric(f"llm_{key}", float(value), stamp, 0)
        for key, value in summary.items()
        if value is not None and key not in ("cost_usd", "tokens_in", "tokens_out")
    ]
    tracker.client.log_batch(tracker.parent_run_id, metrics=metrics)


def _source(proposal: Any) -> str:
    return proposal if isinstance(proposal, str) else getattr(proposal, "source", "")


def _duplicates(store: Any, run_id: str, proposals: list[Any]) -> list[Any]:
    """The proposals the store recorded as duplicates, each with the stored program it duplicates.
    Read from the store's own record of the round (the proposals table and the leaderboard), so a
    semantic duplicate names its stored twin, not its own hash. Invalid proposals are not
    duplicates: the proposer's failures say why they failed."""
    from proposers import Duplicate

    found = store.duplicates_of(run_id, [_source(p) for p in proposals])
    out = []
    for proposal in proposals:
        source = _source(proposal)
        if source in found:
            outcome, of, score = found[source]
            out.append(Duplicate(source, of, score, semantic=outcome == "duplicate_semantic"))
    return out


__all__ = ["ResidualNotes", "RoundFeedback", "llm_summary", "llm_summary_line", "log_llm_summary"]
