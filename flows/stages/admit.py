"""The admit stage: a round's proposals into the store, which keeps every program once.

Every proposal is simplified first (``simplified``); the store drops duplicates (canonical hash, semantic fingerprint) and invalid programs and counts
them; with a candidate budget the proposals go in slices so the run accepts exactly that many;
a program an earlier run on the same data evaluated is recorded from the library instead of
being queued (storage/library.py); the new candidates join the calibration queue. What each
round gave (new, duplicates, stale rounds) is noted for the next round's context
(``RoundFeedback``, flows/feedback.py).
"""

from __future__ import annotations

import dataclasses
import threading
from typing import Any

from flows import faults
from flows.calibration import BatchItem
from flows.feedback import RoundFeedback
from proposers.simplify import simplify_source
from storage.health import is_disk_full


def simplified(proposal: Any) -> Any:
    """A proposal of any proposer, simplified before it is deduplicated and fitted
    (proposers/simplify.py: constant folding, zero terms, parameters that cannot be told apart):
    the store then hashes, fits and counts the complexity of the simplified program, and keeps the
    text as proposed (``proposals.simplified_from``). The mutation engine's proposals are
    simplified already; an LLM's or a replay's are not."""
    source = getattr(proposal, "source", None)
    if not isinstance(source, str) or not dataclasses.is_dataclass(proposal):
        return proposal
    text, result = simplify_source(source)
    if result is None:
        return proposal
    changes = {"canonical_hash": None, "simplified_from": source}
    if hasattr(proposal, "param_names"):
        changes["param_names"] = result.param_names
    return dataclasses.replace(proposal, source=text, **changes)


class AdmitStage:
    """Owns the candidate count (``accepted``: exact under a candidate budget), the count of
    accepted candidates whose results are not recorded yet (``unrecorded``: a serial run proposes
    again only at 0), the round feedback and the store errors it could not even record."""

    def __init__(
        self,
        *,
        store: Any,
        run_id: str,
        program_source: Any,
        library: Any,
        max_candidates: int | None,
        feedback: RoundFeedback,
        enqueue: Any,
        folder: Any,
        accepted: int,
        unrecorded: int,
        log: Any,
    ):
        self.store, self.run_id, self.program_source, self.library = store, run_id, program_source, library
        self.max_candidates = max_candidates
        self.feedback = feedback
        self.enqueue = enqueue  # the calibrate stage's queue (CalibrateStage.enqueue)
        self.folder = folder
        self.log = log
        self.accepted = accepted  # new candidates of the run so far (library seeds not counted)
        self.unrecorded = unrecorded  # accepted, not recorded yet
        self.store_errors = 0  # proposals whose store error could not be recorded either
        self.lock = threading.Lock()  # replies of concurrent requests arrive in worker threads

    def deduplicate(self, proposals: list[Any], already_simplified: bool = False) -> dict[str, int]:
        """A request's proposals into the store: simplified (unless the proposer's traits say it
        simplifies them itself), duplicates and invalid programs dropped (and counted), the new
        candidates queued for calibration."""
        if not already_simplified:
            proposals = [simplified(p) for p in proposals]
        with self.lock:
            new = self._accept(proposals)
            self.feedback.record(self.store, self.run_id, proposals, {c.proposed_source or c.source for c in new})
        return {"proposals": len(proposals), "new": len(new)}

    def empty_round(self) -> None:
        """A round that gave nothing (no valid proposal, or a failed request)."""
        self.feedback.record(self.store, self.run_id, [], set())

    def recorded(self, n: int) -> None:
        """``n`` results of accepted candidates are in the store (the score stage)."""
        with self.lock:  # last: a serial run proposes again once this reaches 0
            self.unrecorded -= n

    def _accept(self, proposals: list[Any]) -> list[Any]:
        accepted: list[Any] = []
        while proposals:
            take = len(proposals)
            if self.max_candidates is not None:
                take = min(take, self.max_candidates - self.accepted)
                if take <= 0:
                    return accepted
            chunk, proposals = proposals[:take], proposals[take:]
            new = self._add_or_record(chunk)
            accepted += new
            self.accepted += len(new)
            new = self.library.reuse(new)  # evaluated by an earlier run on this data: recorded, not queued
            self.unrecorded += len(new)
            self.enqueue([BatchItem(c.hash, c.source, c.program_source or c.source) for c in new])
        return accepted

    def _add_or_record(self, chunk: list[Any]) -> list[Any]:
        """``store.add`` of a chunk of proposals. A chunk the store cannot write is retried one
        proposal at a time; a proposal that still fails is recorded (outcome ``store_error``, with
        its error) and logged, never dropped silently."""
        try:
            new = self.store.add(chunk, self.run_id, program_source=self.program_source)
        except Exception as exc:
            if is_disk_full(exc):  # nothing more can be written: the run stops (run_discovery says how to resume)
                raise
            new = []
            for proposal in chunk:
                try:
                    new += self.store.add([proposal], self.run_id, program_source=self.program_source)
                except Exception as error:
                    self._store_error(proposal, error if len(chunk) > 1 else exc)
        faults.checkpoint("proposal", new=[c.hash for c in new])
        return new

    def _store_error(self, proposal: Any, error: Exception) -> None:
        source = proposal if isinstance(proposal, str) else getattr(proposal, "source", None) or repr(proposal)
        self.log.warning(
            "proposal not stored (%s: %s); source: %r", type(error).__name__, str(error)[:300], source[:200]
        )
        try:
            self.store.record_store_error(self.run_id, proposal, error)
        except Exception as again:  # the store cannot write at all: keep the count in memory
            self.store_errors += 1
            self.log.warning("recording the store error failed too: %s", again)

    def keep_unrecorded(self, proposals: list[Any]) -> str:
        """Proposals whose recording failed, appended to the run folder's replay file (they may
        have been paid for: ``--proposer replay --replay FILE`` feeds them to a later run)."""
        from proposers.base import write_jsonl

        path = self.folder / f"unrecorded-{self.run_id}.jsonl"
        try:
            write_jsonl(proposals, path)
        except OSError as error:
            return f"they could not be kept either ({error})"
        return f"kept in {path}"


__all__ = ["AdmitStage"]
