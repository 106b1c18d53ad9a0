"""What a run tells the world while it goes and when it ends: the busy meter of a stage, the
progress snapshot (status file, progress listeners) and the final report.

The status file (``flows/status.py``) is rewritten about once a second with the snapshot, the pid,
the host and a heartbeat: ``ndvm status`` reads it (the store is locked by the run), and a
scheduled night tells a killed run from a live one by it (``flows/schedule.py``).
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from flows.feedback import llm_summary
from flows.status import status_path


class StageMeter:
    """Wall time during which a stage had at least one operation in flight."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._active = 0
        self._since = 0.0
        self._busy = 0.0
        self.operations = 0

    def enter(self) -> None:
        with self._lock:
            if self._active == 0:
                self._since = time.monotonic()
            self._active += 1
            self.operations += 1

    def exit(self) -> None:
        with self._lock:
            self._active -= 1
            if self._active == 0:
                self._busy += time.monotonic() - self._since

    def busy_seconds(self) -> float:
        with self._lock:
            return self._busy + (time.monotonic() - self._since if self._active else 0.0)

    @property
    def active(self) -> int:
        return self._active


@dataclass
class Progress:
    """A snapshot for progress displays (``on_progress``) and the status file."""

    run_id: str
    elapsed: float
    proposed: int
    new: int
    duplicates: int
    invalid: int
    calibrated: int
    failed: int
    pending: int
    queued: int
    best_score: float | None
    best_hash: str | None
    metric: str
    proposal_busy: float
    calibration_busy: float
    cost_usd: float | None
    phase: str
    reused: int = 0  # evaluations taken from earlier runs on the same data (storage/library.py)


@dataclass
class DiscoveryReport:
    """What a finished (or stopped) run reports."""

    run_id: str
    status: str
    stop_reason: str
    elapsed_seconds: float
    proposed: int
    new: int
    duplicates: int
    invalid: int
    calibrated: int
    failed: int
    pending: int
    metric: str
    best_score: float | None
    best_hash: str | None
    proposal_busy: float
    calibration_busy: float
    proposal_requests: int
    calibration_batches: int
    cost_usd: float | None  # LLM cost of the whole run, earlier sessions (resumes) included
    tokens: tuple[int, int] | None  # (prompt, completion) tokens of the whole run
    earlier_cost_usd: float  # the part of cost_usd spent before this session (from the store)
    store_path: str
    tracking_uri: str
    mlflow_run_id: str | None
    mlflow_experiment_id: str | None
    champion: str | None  # the model registry's decision on this run's best (None: not logged)
    logged_entries: int
    runner: str
    workers: list[str]
    proposer: str
    model: str | None
    # Pipeline faults (flows/supervisor.py, flows/mlflow_log.py): what the run survived.
    crashed: int = 0  # candidates that killed their worker, then again alone
    timeout: int = 0  # candidates over --candidate-seconds alone
    retried_alone: int = 0  # candidates retried alone after their batch failed
    worker_deaths: int = 0  # worker processes that died under a batch
    workers_replaced: int = 0
    cancelled_at_deadline: int = 0  # in calibration at the hard deadline: left pending
    store_errors: int = 0  # proposals the store could not write (recorded with the error)
    mlflow_error: str | None = None  # why MLflow logging is incomplete (None: all logged)
    # The program library (storage/library.py, flows/night.py)
    seed: int | None = None  # the run's seed (drawn unless given): --seed S --serial --fresh replays it
    dataset_fingerprint: str | None = None
    reused: int = 0  # evaluations taken from earlier runs on the same fingerprint
    library_seeds: list[str] = field(default_factory=list)  # earlier runs' best programs it started from
    # The task's reference programs it started from (origin "reference"), in the task's order:
    # {"name", "hash", "status", "score"} (score: validation, None unless calibrated ok)
    reference_programs: list[dict[str, Any]] = field(default_factory=list)
    llm: dict[str, Any] | None = (
        None  # this session's LLM spend: tokens, cached tokens, cost per new (flows/feedback.py)
    )
    # End-of-run steps that failed (test scoring, report card, MLflow and its registry), in order:
    # {"step", "exit_code" (the failure class's, flows/cli_failures.py), "message", "retry"}. The
    # candidates are stored whatever fails here; ``ndvm discover`` exits with the first one's code.
    end_failures: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# Progress callbacks are process-wide listeners rather than flow parameters (Prefect records and
# validates parameters; a callable is neither serializable nor meaningful in the UI).
_listeners: list[Callable[[Progress], None]] = []
_listeners_lock = threading.Lock()


def add_progress_listener(callback: Callable[[Progress], None]) -> Callable[[], None]:
    """Call ``callback(Progress)`` about once a second during runs of this process; returns a remover."""
    with _listeners_lock:
        _listeners.append(callback)

    def remove() -> None:
        with _listeners_lock:
            if callback in _listeners:
                _listeners.remove(callback)

    return remove


def publish(snapshot: Progress, folder: Path, log: logging.Logger | Any) -> Progress:
    """Write ``snapshot`` to the run's status file (atomically, with pid, host and heartbeat) and
    hand it to every progress listener; a broken listener is logged, never raised."""
    path = status_path(folder, snapshot.run_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    # pid, host and heartbeat: a scheduled run tells a killed run from a live one by them
    tmp.write_text(
        json.dumps({**asdict(snapshot), "pid": os.getpid(), "host": socket.gethostname(), "heartbeat": time.time()})
    )
    os.replace(tmp, path)  # atomic: a reader never sees half a file
    with _listeners_lock:
        listeners = list(_listeners)
    for callback in listeners:
        try:
            callback(snapshot)
        except Exception as exc:  # a broken display must not stop the run
            log.warning("progress listener failed: %s", exc)
    return snapshot


def summary_artifact(
    run_id: str, status: str, stop_reason: str, rows: list[tuple], elapsed: float, run_status: Any, log: Any
) -> None:
    """A table of the run's stages in the Prefect UI (the flow run's Artifacts tab): ``rows`` of
    (stage, task runs, counts, busy seconds or None)."""
    from prefect.artifacts import create_markdown_artifact

    s = run_status
    table = "\n".join(
        f"| {name} | {n} | {what} | {'' if busy is None else f'{100 * busy / elapsed:.0f}%'} |"
        for name, n, what, busy in rows
    )
    key = "".join(c if c.isalnum() else "-" for c in run_id.lower()).strip("-")[:60] or "run"
    try:
        create_markdown_artifact(
            key=f"ndvm-{key}",
            description=f"discovery run {run_id}",
            markdown=f"### {run_id}: {status} ({stop_reason})\n\n| stage | task runs | counts | busy |\n"
            f"|---|---|---|---|\n{table}\n\nbest validation {s.metric}: {s.best_score} ({s.best_hash})",
        )
    except Exception as exc:  # the UI's table is a convenience; the store has the figures
        log.warning("could not create the run's summary artifact: %s", exc)


def reference_programs(store: Any, run_id: str, task: Any) -> list[dict[str, Any]]:
    """The task's reference programs the run started from, named as the task names them, with
    their validation results (storage/library.py ``reference_results``)."""
    from storage.library import reference_results

    names = {source: name for name, source in task.reference_programs()}
    return [
        {"name": names.get(r.source, "reference"), "hash": r.hash, "status": r.status, "score": r.score}
        for r in reference_results(store, run_id)
    ]


def build_report(run: Any, status: str) -> DiscoveryReport:
    """The report of ``run`` (a ``flows.discover.Discovery`` that has ended with ``status``),
    from the store's counts and what its stages hold."""
    from flows.supervisor import SupervisorCounts

    s = run.store.run_status(run.run_id)
    elapsed = max(run.elapsed_final, 1e-9)
    supervisor = run.calibrate.supervisor
    counts = supervisor.counts if supervisor is not None else SupervisorCounts()
    tracking = run.log.tracking
    return DiscoveryReport(
        run_id=run.run_id,
        status=status,
        stop_reason=run.clock.stop_reason,
        elapsed_seconds=elapsed,
        proposed=s.proposed,
        new=s.new,
        duplicates=s.duplicates,
        invalid=s.invalid,
        calibrated=s.calibrated,
        failed=s.failed,
        pending=s.pending,
        metric=s.metric,
        best_score=s.best_score,
        best_hash=s.best_hash,
        proposal_busy=run.propose.meter.busy_seconds() / elapsed,
        calibration_busy=run.calibrate.meter.busy_seconds() / elapsed,
        proposal_requests=run.propose.meter.operations,
        calibration_batches=counts.batches,
        cost_usd=run.propose.cost(),
        tokens=run.propose.tokens(),
        earlier_cost_usd=run.propose.earlier_cost,
        store_path=str(run.store_path.resolve()),
        tracking_uri=tracking.tracking_uri,
        mlflow_run_id=tracking.parent_run_id or s.mlflow_run_id,
        mlflow_experiment_id=tracking.experiment_id,
        champion=None if tracking.champion is None else tracking.champion.reason,
        logged_entries=run.log.logged_entries,
        runner=run.runner_choice.describe(),
        workers=sorted(counts.workers),
        proposer=run.config.proposer,
        model=run.config.model,
        crashed=s.crashed,
        timeout=s.timeout,
        retried_alone=counts.retried_alone,
        worker_deaths=counts.worker_deaths,
        workers_replaced=counts.workers_replaced,
        cancelled_at_deadline=run.calibrate.cancelled_at_deadline,
        store_errors=s.store_errors + run.admit.store_errors,
        mlflow_error=tracking.error,
        end_failures=list(run.end.failures),
        seed=run.config.seed,
        dataset_fingerprint=run.library.fingerprint,
        reused=s.reused,
        library_seeds=list(run.library.seeds),
        reference_programs=reference_programs(run.store, run.run_id, run.task),
        # (the cost per new candidate counts what the proposer bought: not the references nor library seeds)
        llm=llm_summary(run.propose.proposer, s.new - s.seeded),
    )


__all__ = [
    "DiscoveryReport",
    "Progress",
    "StageMeter",
    "add_progress_listener",
    "build_report",
    "publish",
    "summary_artifact",
]
