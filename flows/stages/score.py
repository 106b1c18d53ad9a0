"""The score stage: the validation scores the workers return, into the store; at the end, the
test split, once, and the report card.

Workers fit each candidate on the training split and score it on validation (flows/calibration.py);
this stage records each piece of a batch's results as it arrives (one store transaction each), so
the next proposal round ranks them. The test split is read only here, after the search has
stopped: nothing the search reads depends on it (flows/final.py).
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable
from typing import Any

from flows import faults
from flows.calibration import BatchItem, BatchResult
from flows.report import finish_report
from flows.stages.tasks import completed

# The longest a proposal round waits for results already back from a worker to be recorded.
RECORD_WAIT_SECONDS = 2.0


class ScoreStage:
    """Owns the count of results back from the workers but not recorded yet (a proposal round
    waits for them: ``await_recorded``) and, at the end, the report card."""

    def __init__(
        self,
        *,
        store: Any,
        run_id: str,
        label: str,
        task: Any,
        options: Any,
        test_top_k: int,
        folder: Any,
        finished: threading.Event,
        log: Any,
    ):
        self.store, self.run_id, self.label, self.task = store, run_id, label, task
        self.options, self.test_top_k, self.folder, self.log = options, test_top_k, folder, log
        self.finished = finished
        self.results_in_transit = 0
        self.recorded = threading.Condition()
        self.report_card: dict[str, Any] | None = None  # flows/report.py, built at the end of a finished run
        # Set by the coordinator: the recent failures the proposers' context names (ProposeStage.failures),
        # and what to tell once results are recorded (the admit stage's count, the log stage, the coordinator).
        self.failures: collections.deque[Any] = collections.deque(maxlen=8)
        self.on_recorded: list[Callable[[int], None]] = []
        self._references_fitted: threading.Thread | None = None

    def fit_references_early(self) -> None:
        """Fit the task's reference models on a background thread while the search runs: they read
        the training split only, and the end of the run scores them (a forecast task's state-space
        references take 5-10 s, which a short run's user otherwise waits for after the search;
        ``Task.fit_references``: a no-op for tasks whose reference fits are cheap or not kept). The
        calibration runs in worker processes, so this thread mostly uses an idle core."""

        def fit() -> None:
            try:
                self.task.fit_references()
            except Exception as exc:  # the end scores them again and reports what fails there
                self.log.debug("early reference fits: %s", exc)

        self._references_fitted = threading.Thread(target=fit, name="ndvm-reference-fits", daemon=True)
        self._references_fitted.start()

    @property
    def split_label(self) -> str:
        return self.task.split_label()

    def in_transit(self, n: int) -> None:
        """``n`` results are back from a worker, on their way to ``record_batch``."""
        with self.recorded:
            self.results_in_transit += n

    def await_recorded(self) -> None:
        """Wait (at most RECORD_WAIT_SECONDS) until the results back from the workers are in the
        store, so that a round's context ranks them: a worker that frees up takes the next batch
        at once, the queue falls below its limit and a round starts, while its batch's task is
        still recording what it returned."""
        with self.recorded:
            self.recorded.wait_for(
                lambda: self.results_in_transit == 0 or self.finished.is_set(), timeout=RECORD_WAIT_SECONDS
            )

    def record(self, items: list[BatchItem], results: list[BatchResult]) -> None:
        from proposers import Failure

        sources = {item.hash: item.source for item in items}
        faults.checkpoint("recording", hashes=[r.hash for r in results])
        self.store.record([r.evaluation(self.run_id, self.label, self.task.kind, self.split_label) for r in results])
        with self.recorded:
            self.results_in_transit = max(0, self.results_in_transit - len(results))
            self.recorded.notify_all()
        for r in results:
            if r.status != "ok":
                self.failures.append(
                    Failure(
                        "eval",
                        f"calibration/scoring failed: {r.error}"[:500],
                        source=sources.get(r.hash),
                        proposer="calibration",
                    )
                )
        for callback in self.on_recorded:
            callback(len(results))

    def record_batch(self, batch: Any) -> Any:
        """The ``calibrate-batch`` task: record each piece of the batch's results as it arrives
        (one store transaction each), until all are in or the batch is released."""
        counts: collections.Counter[str] = collections.Counter()
        while True:
            what, piece = batch.pieces.get()
            if what != "results":
                break
            items, results = piece
            self.record(items, results)
            counts.update(r.status for r in results)
        left = len(batch.items) - sum(counts.values())
        summary = ", ".join(f"{n} {status}" for status, n in sorted(counts.items())) or "none recorded"
        if left:
            summary += f"; {left} left pending ({what})"
        return completed(f"{len(batch.items)} candidates: {summary}", dict(counts, pending=left))

    # ------------------------------------------------------------------ the end
    def score_test_split(self) -> Any:
        """The ``score-test-split`` task: the final top ``test_top_k`` and the references on the
        test split (flows/final.py), once, after the search has stopped."""
        from flows.final import score_final

        if self._references_fitted is not None:  # the early fits: wait for them, never fit twice at once
            self._references_fitted.join()
        started = time.monotonic()
        rows = score_final(self.store, self.run_id, self.task, self.options, k=self.test_top_k)
        self.log.info("test split: %d entries and references scored in %.1f s", len(rows), time.monotonic() - started)
        return completed(f"{len(rows)} entries and references scored on the test split", len(rows))

    def write_report_card(self) -> Any:
        self.report_card = finish_report(
            self.store, self.run_id, self.task, self.folder, self.log, calibrate_options=self.options.as_kwargs()
        )
        return completed("report card written" if self.report_card else "no report card", self.report_card is not None)


__all__ = ["RECORD_WAIT_SECONDS", "ScoreStage"]
