"""The calibrate stage: the queue of admitted candidates, handed in batches to free workers.

Whenever a worker slot is free, what is queued (up to ``batch_size``; it never waits for the next
proposals) goes to a supervised worker (``flows.supervisor``: worker processes, or Dask), which
fits each candidate on the training split (``ndvm.calibrate_many``) and scores it on validation.
Each batch has a ``calibrate-batch`` task that the score stage fills with the batch's results as
they come back (a failed batch's candidates come back one by one), so a killed run loses no
calibrated candidate. Near the hard deadline a batch holds only what one worker calibrates before
it (``deadline_batch_size``); at the deadline what is still in calibration is cancelled and stays
pending for a resume.
"""

from __future__ import annotations

import collections
import contextlib
import queue
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from flows.calibration import BatchItem, BatchResult
from flows.progress import StageMeter
from flows.runners import worker_environment
from flows.stages.clock import deadline_batch_size
from flows.stages.tasks import Submitted, TaskRunner, calibrate_task
from flows.supervisor import CalibrationSupervisor


@dataclass
class Batch:
    """A calibration batch between the coordinator (which hands it to the supervisor and routes
    the results back by hash) and its ``calibrate-batch`` task, which records each piece as it
    arrives (``ScoreStage.record_batch``)."""

    items: list[BatchItem]
    waiting: set[str] = field(default_factory=set)
    pieces: queue.Queue[tuple[str, Any]] = field(default_factory=queue.Queue)

    def __post_init__(self) -> None:
        self.waiting = {item.hash for item in self.items}

    def __repr__(self) -> str:  # Prefect records task inputs by repr; keep it short
        return f"Batch({len(self.items)} candidates)"


class CalibrateStage:
    """Owns the calibration queue, the supervisor of the workers while the run goes, and which
    batch each candidate in calibration belongs to."""

    def __init__(self, *, config: Any, runner_choice: Any, options: Any, task: Any, clock: Any, score: Any, log: Any):
        self.config, self.runner_choice, self.options, self.task = config, runner_choice, options, task
        self.clock, self.score, self.log = clock, score, log
        self.meter = StageMeter()
        self.queue: collections.deque[BatchItem] = collections.deque()
        self.queue_lock = threading.Lock()
        self.supervisor: CalibrationSupervisor | None = None
        self.batch_of: dict[str, Batch] = {}  # candidate hash -> the batch it was handed over in
        self.batches_lock = threading.Lock()
        self.futures: list[Submitted] = []
        self.done: set[Submitted] = set()
        self.number = 0
        self.cancelled_at_deadline = 0
        self.runner: TaskRunner | None = None
        self.wake: threading.Event | None = None

    # ------------------------------------------------------------------ the queue
    def enqueue(self, items: list[BatchItem]) -> None:
        with self.queue_lock:
            self.queue.extend(items)

    def queued(self) -> int:
        with self.queue_lock:
            return len(self.queue)

    def has_room(self) -> bool:
        """The queue is short enough for another proposal request."""
        return self.queued() < self.config.batch_size * self.runner_choice.queued_batches()

    def batch_size_now(self) -> int:
        """``batch_size``, or fewer near the hard deadline (``deadline_batch_size``)."""
        deadline = self.clock.hard_deadline()
        per_candidate = self.supervisor.seconds_per_candidate() if self.supervisor is not None else None
        if deadline is None or per_candidate is None:
            return self.config.batch_size
        return deadline_batch_size(self.config.batch_size, deadline - time.monotonic(), per_candidate)

    def _take_batch(self) -> list[BatchItem]:
        size = self.batch_size_now()
        with self.queue_lock:
            items = []
            while self.queue and len(items) < size:
                items.append(self.queue.popleft())
            return items

    # ------------------------------------------------------------------ the workers
    @contextlib.contextmanager
    def workers(self, runner: TaskRunner, wake: threading.Event) -> Iterator[CalibrationSupervisor]:
        """The supervised workers of the run's runner; on the way out every open batch is
        released (its candidates stay pending) and the workers stop."""
        self.runner, self.wake = runner, wake
        with (
            worker_environment(self.runner_choice) as api_url,
            self.runner_choice.backend(self.task, self.options, api_url) as (backend, isolation),
        ):
            self.supervisor = CalibrationSupervisor(
                backend,
                candidate_seconds=self.config.candidate_seconds,
                threads=self.runner_choice.cores_per_batch(self.options.threads),
                isolation=isolation,
                meter=self.meter,
                log=self.log,
            )
            # What the run starts from (the task's reference programs, a resumed run's pending
            # candidates) goes out before any proposal is admitted: its own first batches, so the
            # proposals' batches are the proposals in order, batch_size at a time.
            self.fill(new_batches=True)
            try:
                yield self.supervisor
            finally:
                self.release(self.supervisor.cancel() if self.supervisor.busy() else [], "stopped")
                self.supervisor.close()

    def busy(self) -> bool:
        return self.supervisor is not None and self.supervisor.busy()

    def collect(self) -> None:
        """Results back from the workers (waiting up to 50 ms) to the batches they belong to."""
        assert self.supervisor is not None
        for items, results in self.supervisor.collect(0.05):
            self._route(items, results)

    def fill(self, new_batches: bool) -> None:
        """Every free worker gets what is queued (``new_batches`` False: past the drain, nothing
        new is handed over)."""
        assert self.supervisor is not None
        self.supervisor.fill(self._hand_over, new_batches=new_batches)
        if self.done:  # a night hands over thousands of batches: keep only those in flight
            done, self.done = self.done, set()
            self.futures = [f for f in self.futures if f not in done]

    def _hand_over(self) -> list[BatchItem]:
        """``take_batch`` of the supervisor: what is queued (up to ``batch_size``), handed to a
        worker now, with its ``calibrate-batch`` task submitted to record the results."""
        items = self._take_batch()
        if items:
            assert self.runner is not None
            batch = Batch(items)
            with self.batches_lock:
                for item in items:
                    self.batch_of[item.hash] = batch
            self.number += 1
            future = self.runner.submit(calibrate_task, stage=self.score, number=self.number, batch=batch)
            future.add_done_callback(lambda f=future: self._done(f))
            self.futures.append(future)
        return items

    def _done(self, future: Submitted) -> None:
        self.done.add(future)
        if self.wake is not None:
            self.wake.set()

    def _route(self, items: list[BatchItem], results: list[BatchResult]) -> None:
        """Results from the supervisor to the batch each candidate was handed over in."""
        by_batch: dict[int, tuple[Batch, list[BatchItem], list[BatchResult]]] = {}
        for item, result in zip(items, results):
            with self.batches_lock:
                batch = self.batch_of.pop(result.hash)
            entry = by_batch.setdefault(id(batch), (batch, [], []))
            entry[1].append(item)
            entry[2].append(result)
        for batch, its, res in by_batch.values():
            self.score.in_transit(len(res))
            batch.pieces.put(("results", (its, res)))
            batch.waiting -= {r.hash for r in res}
            if not batch.waiting:
                batch.pieces.put(("done", None))

    def release(self, left: list[BatchItem], why: str) -> None:
        """Candidates that will not be calibrated in this session (the hard deadline, a failure):
        their batches' tasks end with them counted (they stay pending; a resume continues)."""
        with self.batches_lock:
            batches = {id(b): b for b in (self.batch_of.pop(item.hash, None) for item in left) if b is not None}
            if why == "stopped":  # every batch still open
                batches.update({id(b): b for b in self.batch_of.values()})
                self.batch_of.clear()
        for batch in batches.values():
            batch.pieces.put((why, None))

    def cancel_at_deadline(self) -> int:
        """The hard deadline: cancel what is in calibration (it stays pending); returns how many."""
        assert self.supervisor is not None
        left = self.supervisor.cancel()
        self.release(left, "hard deadline")
        self.cancelled_at_deadline = len(left)
        return len(left)


__all__ = ["Batch", "CalibrateStage"]
