"""Supervised calibration: candidates that crash or hang a worker cannot stop a discovery run.

Candidate programs are written by a language model; one of them may kill the process that
calibrates it (a native crash) or run far longer than the others. So calibration never runs in
the flow's own process:

- ``WorkerPool``: ndvm's own pool of spawned worker processes (``--runner threads``: two workers
  by default, each batch on every core; ``--runner processes``: N workers, cores split between
  them). Unlike a ``concurrent.futures`` process pool, where one dead worker breaks the whole pool, it watches
  each worker: a worker that dies is replaced and only its own batch is affected; a batch past its
  time limit has its worker killed (and replaced).
- ``PrefectBackend``: batches submitted to a Prefect task runner (``--runner dask``); a failed or
  overdue batch is cancelled, and its candidates are isolated in a local ``WorkerPool``.

``CalibrationSupervisor`` decides what a failure means. A batch whose worker died, raised, or ran
past its limit is split: each of its candidates is retried once, alone (batch-mates get their
own results). A candidate that kills its worker again when alone is ``crashed``; one that runs
past ``--candidate-seconds`` alone is ``timeout``. Both are recorded like any result, so a
resumed run never calibrates them again.
"""

from __future__ import annotations

import collections
import math
import multiprocessing
import os
import pickle
import signal
import threading
import time
import traceback
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from multiprocessing.connection import wait as wait_for
from typing import Any

from flows.calibration import BatchItem, BatchResult, CalibrationOptions
from flows.dask_task import submit_batch

# How long a batch may take per candidate-seconds of its members: a batch of n candidates on t
# native threads, each within the limit, ends within (ceil(n / t) + 1) limits (the +1 covers an
# unlucky split of the work over the threads); below this floor start-up noise dominates.
MIN_BATCH_SECONDS = 5.0
# A candidate alone has its worker killed GRACE_SECONDS after its limit: within the limit the
# runtime's own wall clock (Limits.max_seconds, per evaluation) usually ends it first, cleanly.
GRACE_SECONDS = 2.0
WALL_CLOCK_ERROR = "wall-clock limit (max_seconds="  # how the runtime's LimitError starts
STARTUP_FAILURES = 3  # workers that die before they are ready, in a row, before the pool gives up
RECENT_BATCHES = 4  # batches whose time per candidate sizes the batches near the deadline


class CalibrationPoolError(RuntimeError):
    """Worker processes cannot start (e.g. the package does not import in a fresh process)."""


def describe_exit(exitcode: int | None) -> str:
    """'killed by SIGSEGV' / 'exit status 3' for a worker's exit code."""
    if exitcode is None:
        return "still running"
    if exitcode < 0:
        try:
            return f"killed by {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"killed by signal {-exitcode}"
    return f"exit status {exitcode}"


def batch_seconds(candidate_seconds: float | None, n: int, threads: int | None) -> float | None:
    """The time limit of a batch of ``n`` candidates given the per-candidate limit."""
    if candidate_seconds is None:
        return None
    t = max(1, threads or os.cpu_count() or 1)
    if n <= 1:
        return candidate_seconds + GRACE_SECONDS
    return max(MIN_BATCH_SECONDS, candidate_seconds * (math.ceil(n / t) + 1))


# ---------------------------------------------------------------------------- the worker process
def _exit_with_parent(parent_pid: int) -> None:
    """A worker outlives a killed flow otherwise (kill -9 runs no clean-up): poll the parent."""

    def watch() -> None:
        while True:
            time.sleep(0.5)
            if os.getppid() != parent_pid:
                os._exit(0)

    threading.Thread(target=watch, name="ndvm-parent-watch", daemon=True).start()


def _worker_main(conn: Any, task_blob: bytes, options: CalibrationOptions, parent_pid: int) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the flow's to handle; it stops the pool
    _exit_with_parent(parent_pid)
    import cloudpickle  # noqa: F401  (unpickles what cloudpickle wrote: lambdas of curve tasks)

    import ndvm  # noqa: F401  (a runtime that does not import kills the worker before it is ready:

    #              the pool reports that, instead of every candidate failing one by one)
    from flows import faults
    from flows.calibration import calibrate_batch, worker_identity

    task = pickle.loads(task_blob)
    conn.send(("ready", worker_identity()))
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):  # the flow closed the pipe or died
            return
        if message is None:
            return
        job_id, items = message
        faults.crash_if_marked([item.hash for item in items])
        faults.sleep_if_marked([item.hash for item in items])
        faults.checkpoint("calibration", job=job_id, hashes=[item.hash for item in items])
        try:
            results = calibrate_batch(task, items, options)
        except Exception:  # calibrate_batch handles bad candidates; this is a bug, reported whole
            conn.send(("error", job_id, traceback.format_exc()[-4000:]))
            continue
        faults.checkpoint("scoring", job=job_id, hashes=[item.hash for item in items])
        conn.send(("done", job_id, results))


# ---------------------------------------------------------------------------- jobs and outcomes
@dataclass
class Job:
    """One submission: a batch, or one candidate retried alone (``alone``)."""

    id: int
    items: list[BatchItem]
    alone: bool
    seconds: float | None  # time limit once started; None: no limit
    started: float | None = None  # monotonic time it reached a ready worker
    handle: Any = None  # the backend's own reference (worker, future)

    def overdue(self, now: float) -> bool:
        return self.seconds is not None and self.started is not None and now - self.started > self.seconds


@dataclass
class Outcome:
    """How a job ended: done (results), error (the worker raised), crashed (the worker died),
    timeout (past its limit, worker killed)."""

    job: Job
    kind: str
    results: list[BatchResult] | None = None
    detail: str = ""
    worker: str = ""


class _Worker:
    def __init__(self, ctx: Any, task_blob: bytes, options: CalibrationOptions, index: int):
        self.conn, child = ctx.Pipe()
        self.process = ctx.Process(
            target=_worker_main,
            args=(child, task_blob, options, os.getpid()),
            name=f"ndvm-calibrate-{index}",
            daemon=True,
        )
        self.process.start()
        child.close()
        self.identity = ""
        self.ready = False
        self.job: Job | None = None

    def send_job(self) -> None:
        assert self.job is not None
        try:
            self.conn.send((self.job.id, self.job.items))
        except OSError:  # the worker died since it was last seen: the pool's poll reassigns the job
            return
        self.job.started = time.monotonic()

    def kill(self) -> None:
        if self.process.is_alive():
            self.process.kill()
        self.process.join(5)
        self.conn.close()


class WorkerPool:
    """``workers`` spawned processes, each calibrating one job at a time (see the module docstring).
    The task object is sent once to each worker when it starts (cloudpickle), not with every batch."""

    def __init__(self, task: Any, options: CalibrationOptions, workers: int = 1):
        import cloudpickle

        self.slots = max(1, int(workers))
        self.options = options
        self._blob = cloudpickle.dumps(task)
        self._ctx = multiprocessing.get_context("spawn")
        self._workers: list[_Worker] = []
        self._started_total = 0
        self._startup_failures = 0
        self.replaced = 0  # workers started to replace one that died or was killed
        for _ in range(self.slots):
            self._start_worker()

    def _start_worker(self) -> _Worker:
        worker = _Worker(self._ctx, self._blob, self.options, self._started_total)
        self._started_total += 1
        self._workers.append(worker)
        return worker

    def describe(self) -> str:
        return f"{self.slots} worker process{'es' if self.slots > 1 else ''}"

    def free_slots(self) -> int:
        return sum(1 for w in self._workers if w.job is None)

    def in_flight(self) -> int:
        return sum(1 for w in self._workers if w.job is not None)

    def submit(self, job: Job) -> None:
        for idle in [w for w in self._workers if w.job is None and not w.process.is_alive()]:
            self._died(idle, [])  # an idle worker died (killed from outside): replace it first
        worker = next((w for w in self._workers if w.job is None), None)
        if worker is None:
            raise RuntimeError("WorkerPool.submit without a free worker (check free_slots first)")
        worker.job, job.handle = job, worker
        if worker.ready:
            worker.send_job()  # otherwise sent when the worker reports ready (its clock starts then)

    def poll(self, timeout: float) -> list[Outcome]:
        """Wait up to ``timeout`` seconds for something to happen; return the jobs that ended."""
        waitables: list[Any] = [w.conn for w in self._workers] + [w.process.sentinel for w in self._workers]
        if waitables:
            wait_for(waitables, timeout)
        outcomes: list[Outcome] = []
        for worker in list(self._workers):
            self._drain(worker, outcomes)
            if not worker.process.is_alive():
                self._died(worker, outcomes)
        now = time.monotonic()
        for worker in list(self._workers):
            job = worker.job
            if job is not None and job.overdue(now):
                worker.kill()
                self._workers.remove(worker)
                outcomes.append(
                    Outcome(
                        job,
                        "timeout",
                        detail=f"still running after {job.seconds:.3g} s; its worker process was killed",
                        worker=worker.identity,
                    )
                )
                self.replaced += 1
                self._start_worker()
        return outcomes

    def _drain(self, worker: _Worker, outcomes: list[Outcome]) -> None:
        try:
            while worker.conn.poll():
                message = worker.conn.recv()
                kind = message[0]
                if kind == "ready":
                    worker.ready, worker.identity = True, message[1]
                    self._startup_failures = 0
                    if worker.job is not None and worker.job.started is None:
                        worker.send_job()
                    continue
                job = worker.job
                if job is None or message[1] != job.id:
                    continue
                worker.job = None
                if kind == "done":
                    outcomes.append(Outcome(job, "done", results=message[2], worker=worker.identity))
                else:
                    outcomes.append(Outcome(job, "error", detail=message[2], worker=worker.identity))
        except (EOFError, OSError):
            pass  # the worker died; _died handles it

    def _died(self, worker: _Worker, outcomes: list[Outcome]) -> None:
        worker.process.join(1)
        code = worker.process.exitcode
        worker.conn.close()
        self._workers.remove(worker)
        job = worker.job
        if not worker.ready:
            self._startup_failures += 1
            if self._startup_failures >= STARTUP_FAILURES:
                raise CalibrationPoolError(
                    f"calibration worker processes die while starting ({describe_exit(code)}, "
                    f"{self._startup_failures} in a row); see the messages above"
                )
        if job is not None and job.started is None:  # never reached the worker: hand it to the replacement
            replacement = self._start_worker()
            replacement.job, job.handle = job, replacement
            self.replaced += 1
            return
        if job is not None:
            outcomes.append(
                Outcome(
                    job,
                    "crashed",
                    detail=f"worker process {worker.identity or worker.process.pid} {describe_exit(code)}",
                    worker=worker.identity,
                )
            )
        self.replaced += 1
        self._start_worker()

    def cancel_all(self) -> list[Job]:
        """Kill the workers that hold a job; return those jobs (their candidates were not calibrated)."""
        jobs = []
        for worker in list(self._workers):
            if worker.job is not None:
                jobs.append(worker.job)
                worker.job = None
                worker.kill()
                self._workers.remove(worker)
        return jobs

    def close(self) -> None:
        for worker in self._workers:
            try:
                if worker.process.is_alive():
                    worker.conn.send(None)
            except OSError:
                pass
        deadline = time.monotonic() + 5
        for worker in self._workers:
            worker.process.join(max(0.0, deadline - time.monotonic()))
            worker.kill()
        self._workers = []


class PrefectBackend:
    """Batches on a Prefect task runner (Dask): the same interface as ``WorkerPool``. A task that
    raises (including Dask's ``KilledWorker`` after a worker died) ends as ``error``; one past its
    limit is cancelled and ends as ``timeout``."""

    def __init__(self, runner: Any, task: Any, options: CalibrationOptions, slots: int):
        self.runner, self.task, self.options, self.slots = runner, task, options, max(1, slots)
        self._jobs: list[Job] = []
        self.replaced = 0

    def describe(self) -> str:
        return "Prefect task runner"

    def free_slots(self) -> int:
        return self.slots - len(self._jobs)

    def in_flight(self) -> int:
        return len(self._jobs)

    def submit(self, job: Job) -> None:

        job.handle = submit_batch(self.runner, self.task, job.items, self.options)
        job.started = time.monotonic()
        self._jobs.append(job)

    def poll(self, timeout: float) -> list[Outcome]:
        outcomes: list[Outcome] = []
        deadline = time.monotonic() + timeout
        while True:
            now = time.monotonic()
            for job in list(self._jobs):
                # the wrapped (Dask) future knows locally; future.state would ask the Prefect API
                wrapped = getattr(job.handle, "wrapped_future", None)
                finished = wrapped.done() if wrapped is not None else job.handle.state.is_final()
                if finished:
                    self._jobs.remove(job)
                    try:
                        results = job.handle.result()
                    except Exception as exc:
                        outcomes.append(Outcome(job, "error", detail=f"{type(exc).__name__}: {exc}"))
                        continue
                    worker = next((r.worker for r in results if r.worker), "")
                    outcomes.append(Outcome(job, "done", results=results, worker=worker))
                elif job.overdue(now):
                    self._jobs.remove(job)
                    self._cancel(job)
                    outcomes.append(
                        Outcome(job, "timeout", detail=f"still running after {job.seconds:.3g} s; cancelled")
                    )
            if outcomes or time.monotonic() >= deadline:
                return outcomes
            time.sleep(0.05)

    @staticmethod
    def _cancel(job: Job) -> None:
        wrapped = getattr(job.handle, "wrapped_future", None)
        try:
            (wrapped or job.handle).cancel()
        except Exception:  # already finished or the cluster is gone: nothing left to stop
            pass

    def cancel_all(self) -> list[Job]:
        jobs, self._jobs = self._jobs, []
        for job in jobs:
            self._cancel(job)
        return jobs

    def close(self) -> None:
        self.cancel_all()


# ---------------------------------------------------------------------------- the supervisor
@dataclass
class SupervisorCounts:
    batches: int = 0  # batches submitted (not counting candidates retried alone)
    retried_alone: int = 0  # candidates retried alone after their batch failed
    crashed: int = 0  # candidates marked crashed
    timeout: int = 0  # candidates marked timeout
    worker_deaths: int = 0  # jobs whose worker process died
    workers_replaced: int = 0
    workers: set[str] = field(default_factory=set)


class CalibrationSupervisor:
    """Submits batches to a backend, retries the candidates of a failed batch alone, and turns
    what happened into results to record. ``isolation`` makes the backend for the retries alone
    when ``backend`` cannot stop a single job itself (Dask); by default the backend is used."""

    def __init__(
        self,
        backend: Any,
        *,
        candidate_seconds: float | None = None,
        threads: int | None = None,
        isolation: Callable[[], Any] | None = None,
        meter: Any = None,
        log: Any = None,
    ):
        self.backend = backend
        self.candidate_seconds = candidate_seconds
        self.threads = threads
        self._isolation_factory = isolation
        self._isolation_backend: Any = None
        self.meter = meter
        self.log = log
        self.alone: collections.deque[tuple[BatchItem, str]] = collections.deque()  # (item, why its batch failed)
        self._jobs: dict[int, tuple[Any, Job, str]] = {}  # id -> (backend, job, why: "" or the batch failure)
        self._next_id = 0
        self.counts = SupervisorCounts()
        # wall seconds per candidate of the last batches that ended well (from reaching a worker)
        self._per_candidate: collections.deque[float] = collections.deque(maxlen=RECENT_BATCHES)

    # -- submitting
    def _isolation(self) -> Any:
        if self._isolation_factory is None:
            return self.backend
        if self._isolation_backend is None:
            self._isolation_backend = self._isolation_factory()
        return self._isolation_backend

    def _submit(self, backend: Any, items: list[BatchItem], alone: bool, why: str) -> None:
        self._next_id += 1
        limit = batch_seconds(self.candidate_seconds, 1 if alone else len(items), self.threads)
        job = Job(self._next_id, items, alone, limit)
        backend.submit(job)
        self._jobs[job.id] = (backend, job, why)
        if self.meter is not None:
            self.meter.enter()

    def fill(self, take_batch: Callable[[], list[BatchItem]], new_batches: bool = True) -> None:
        """Use every free slot: candidates waiting to be retried alone first, then new batches
        from ``take_batch`` (which returns [] when nothing is queued) if ``new_batches``."""
        while self.alone:
            backend = self._isolation()
            if backend.free_slots() <= 0:
                break
            item, why = self.alone.popleft()
            self._submit(backend, [item], True, why)
            self.counts.retried_alone += 1
        while new_batches and self.backend.free_slots() > 0:
            items = take_batch()
            if not items:
                break
            self._submit(self.backend, items, False, "")
            self.counts.batches += 1

    # -- collecting
    def seconds_per_candidate(self) -> float | None:
        """Wall seconds per candidate of a batch, the slowest of the last few (None: none yet)."""
        return max(self._per_candidate) if self._per_candidate else None

    def busy(self) -> bool:
        return bool(self._jobs or self.alone)

    def collect(self, timeout: float = 0.05) -> list[tuple[list[BatchItem], list[BatchResult]]]:
        """Wait up to ``timeout`` for jobs to end; return (items, results) ready to be recorded."""
        backends = {id(b): b for b, _, _ in self._jobs.values()}
        outcomes: list[Outcome] = []
        if not backends:
            time.sleep(timeout)
        for backend in backends.values():
            outcomes += backend.poll(timeout / len(backends))
        ready = []
        now = time.monotonic()
        for outcome in outcomes:
            _, job, why = self._jobs.pop(outcome.job.id)
            if outcome.kind == "done" and not job.alone and job.started is not None and job.items:
                self._per_candidate.append((now - job.started) / len(job.items))
            if self.meter is not None:
                self.meter.exit()
            if outcome.worker:
                self.counts.workers.add(outcome.worker)
            if outcome.kind == "crashed":
                self.counts.worker_deaths += 1
            results = self._judge(job, outcome, why)
            if results:
                ready.append((job.items, results))
        self.counts.workers_replaced = sum(getattr(b, "replaced", 0) for b in self._backends())
        return ready

    def _judge(self, job: Job, outcome: Outcome, why: str) -> list[BatchResult]:
        if outcome.kind == "done":
            results = outcome.results or []
            for result in results:  # an evaluation stopped by the runtime's wall clock: over the limit
                if (
                    self.candidate_seconds is not None
                    and result.status == "error"
                    and WALL_CLOCK_ERROR in (result.error or "")
                ):
                    self.counts.timeout += 1
                    result.status = "timeout"
                    result.error = (
                        f"one evaluation alone took over {self.candidate_seconds:g} s "
                        f"(--candidate-seconds, the runtime's Limits.max_seconds): {result.error}"
                    )[:2000]
            return results
        what = {
            "crashed": "its worker died",
            "timeout": "it ran past its time limit",
            "error": "its worker raised an error",
        }[outcome.kind]
        last_line = (outcome.detail.strip().splitlines() or [""])[-1][:300]
        if not job.alone:  # split the batch: every member gets one try alone
            reason = f"batch of {len(job.items)}: {what} ({last_line})"
            if self.log is not None:
                self.log.warning(
                    "calibration batch of %d failed (%s: %s); retrying each candidate alone",
                    len(job.items),
                    outcome.kind,
                    last_line,
                )
            self.alone.extend((item, reason) for item in job.items)
            return []
        [item] = job.items
        if outcome.kind == "crashed":
            self.counts.crashed += 1
            status = "crashed"
            error = (
                f"calibration killed its worker process twice: in its {why}; then alone ({outcome.detail}). "
                "Marked crashed, never retried"
            )
        elif outcome.kind == "timeout":
            self.counts.timeout += 1
            status = "timeout"
            error = (
                f"calibration and scoring alone took over {self.candidate_seconds:g} s (--candidate-seconds; "
                f"after its {why}); stopped"
            )
        else:
            status = "error"
            error = f"worker error when calibrated alone: {outcome.detail.strip()[-1500:]}"
        if self.log is not None:
            self.log.warning("candidate %s %s: %s", item.hash, status, error)
        return [BatchResult(item.hash, status, error=error[:2000], worker=outcome.worker)]

    # -- stopping
    def cancel(self) -> list[BatchItem]:
        """Stop everything in flight (the hard deadline): return the candidates left uncalibrated."""
        left = [item for item, _ in self.alone]
        self.alone.clear()
        for backend in self._backends():
            for job in backend.cancel_all():
                left.extend(job.items)
        for _ in self._jobs:
            if self.meter is not None:
                self.meter.exit()
        self._jobs.clear()
        return left

    def _backends(self) -> Iterable[Any]:
        return [b for b in (self.backend, self._isolation_backend) if b is not None]

    def close(self) -> None:
        for backend in self._backends():
            backend.close()
        if self._isolation_backend is not None and self._isolation_backend is not self.backend:
            self._isolation_backend = None


__all__ = [
    "CalibrationPoolError",
    "CalibrationSupervisor",
    "Job",
    "Outcome",
    "PrefectBackend",
    "SupervisorCounts",
    "WorkerPool",
    "batch_seconds",
    "describe_exit",
]
