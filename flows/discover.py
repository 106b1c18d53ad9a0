"""The discovery flow: propose, deduplicate, calibrate, score, rank and log, all at once.

    from flows.discover import discover
    report = discover(task="enso", proposer="mutation", budget={"minutes": 2})

Every stage of a run is a Prefect task, so the Prefect UI shows the pipeline with each stage's
duration and counts (the final state's message): ``propose-N`` (one LLM request or mutation
round, then its proposals into the store, which drops duplicates and invalid programs; retried on
a transient failure), ``calibrate-batch-N`` (one batch in a supervised
worker, its results recorded as they come), ``log-progress-N`` (counters, LLM cost and a new best
to MLflow; retried), then ``score-test-split``, ``report-card`` and ``log-final``. The flow's own
thread coordinates them (``Discovery._coordinate``) with task submission and futures:

- **proposal**: up to ``concurrency`` ``propose`` tasks in flight (mutation: one round at a time).
  When the calibration queue is longer than a few batches, no new request starts (calibration is
  behind; the context will have better parents once it catches up).
- **calibration**: whenever a worker slot is free, what is queued (up to ``batch_size``; it never
  waits for the next proposals) goes to a supervised worker (``flows.supervisor``: threads, worker
  processes or Dask) and a ``calibrate-batch`` task records its results (``ndvm.calibrate_many``
  on the training part, held-out scoring by the task, one store transaction per result piece), so
  a killed run loses no calibrated candidate, and ``resume=RUN_ID`` continues it.
- **logging**: every ``log_every`` seconds one ``log-progress`` task; at the end every top-``top_k``
  candidate not logged yet.

Budgets: wall time (``minutes``: proposing stops then, queued candidates are calibrated within a
drain allowance, the rest stay pending for a resume), number of new candidates
(``max_candidates``), and LLM cost (``max_cost_usd``, earlier sessions of a resumed run included).
The report gives the busy fraction of the proposal and calibration stages: the share of the run's
wall time during which at least one proposal request, or one calibration batch, was in flight.

The flow's keyword arguments, ``build_config`` and the command-line options of ``ndvm discover``
are generated from ``DiscoverConfig``'s fields (flows/options.py).
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import dataclasses
import inspect
import json
import logging
import math
import os
import queue
import socket
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger, task
from prefect.cache_policies import NO_CACHE

from flows import faults
from flows.calibration import BatchItem, BatchResult, CalibrationOptions
from flows.config import (  # the configuration of a run (re-exported: the flow's callers import it from here)
    LLM_MODEL_ENV,
    PROPOSERS,
    Budget,
    DiscoverConfig,
    DiscoveryError,
    build_config,
    discover_options,
    resolve_proposer,
)
from flows.feedback import ResidualNotes, RoundFeedback, llm_summary, log_llm_summary
from flows.mlflow_log import RunTracking
from flows.night import open_run_library, with_seed
from flows.options import flow_signature
from flows.problem import entry_extras, load_problem, probe_inputs, task_spec
from flows.report import finish_report
from flows.runners import worker_environment
from flows.status import status_path
from flows.supervisor import CalibrationSupervisor
from proposers.base import LLMFatalError
from proposers.niches import NicheArchive, store_programs
from storage.health import is_disk_full

log = logging.getLogger("ndvm.discover")
# Leaderboard entries a progress snapshot logs to MLflow while the run goes on: the best only, and
# light (no plots, no pyfunc model: those cost seconds of the flow process's CPU per entry; the end
# completes them). With the top 3 logged whole, the snapshots of a 2-minute run logged an entry
# every 4 s, back to back, beside the calibration (BENCHMARKS.md, "make run"). The end logs the
# top --top-k whatever this is.
PROGRESS_PODIUM = 1


def make_proposer(config: DiscoverConfig, seed_offset: int = 0) -> Any:
    if config.proposer == "mutation":
        from proposers import MutationProposer

        # A resumed run starts the generator elsewhere: the same seed would re-propose known programs.
        return MutationProposer(seed=config.seed + seed_offset)
    if config.proposer == "replay":
        from proposers import ReplayProposer

        if not config.replay:
            raise DiscoveryError("the replay proposer needs --replay FILE.jsonl")
        return ReplayProposer(config.replay)
    from proposers import LLMProposer

    return LLMProposer(
        config.model,
        temperature=config.temperature,
        concurrency=config.concurrency,
        timeout=config.llm_timeout,
        api_base=config.api_base,
        api_key_env=config.llm_env,
        per_request=config.per_request,
        seed=config.seed + seed_offset,
        price_per_token=None if config.price_per_token is None else tuple(config.price_per_token),
    )


# ---------------------------------------------------------------------------- measuring
# Near the hard deadline a batch gets only as many candidates as one worker calibrates before it,
# at DEADLINE_SAFETY times the recent seconds per candidate, DEADLINE_MARGIN_SECONDS ahead: a
# batch cancelled at the deadline loses all of its fits (results come back per batch).
DEADLINE_SAFETY = 1.5
DEADLINE_MARGIN_SECONDS = 1.0
# Rounds of the mutation or replay proposer (16 programs each) one `propose` task run may make.
OFFLINE_ROUNDS_PER_REQUEST = 4
# The longest a proposal round waits for results already back from a worker to be recorded.
RECORD_WAIT_SECONDS = 2.0


def deadline_batch_size(batch_size: int, seconds_left: float, seconds_per_candidate: float) -> int:
    """How many candidates a batch handed over now may hold so that it ends before a deadline
    ``seconds_left`` away (0: none would); ``batch_size`` when the deadline is far."""
    usable = seconds_left - DEADLINE_MARGIN_SECONDS
    if usable <= 0:
        return 0
    if seconds_per_candidate <= 0 or math.isinf(usable):  # (no wall-time budget: an infinite drain)
        return batch_size
    return max(0, min(batch_size, int(usable / (DEADLINE_SAFETY * seconds_per_candidate))))


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
    llm: dict[str, Any] | None = (
        None  # this session's LLM spend: tokens, cached tokens, cost per new (flows/feedback.py)
    )

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


# ---------------------------------------------------------------------------- the pipeline's Prefect tasks
# Each stage of a run is a Prefect task, so the Prefect UI shows the pipeline: every proposal
# request, its deduplication into the store, every calibration batch, the periodic MLflow logging
# and the end (test split, report card, final logging), each with its duration and its counts (the
# final state's message, e.g. "16 proposals: 12 new"). The bodies are methods of ``Discovery``;
# the task functions only name them. Inputs are live objects and results are recorded by the run
# itself, so nothing is cached or persisted by Prefect.
_TASK = dict(cache_policy=NO_CACHE, persist_result=False, log_prints=False)


class ProposalsNotRecorded(RuntimeError):
    """A proposal request's reply arrived but recording its proposals failed (deduplication,
    library reuse, feedback). Never retried: a retry would send the request, and pay for it, again."""


def _retry_request(task: Any, task_run: Any, state: Any) -> bool:
    """A failed proposal request is retried unless the proposer said retrying cannot help (a
    wrong key or model: LLMFatalError) or the request itself succeeded (ProposalsNotRecorded)."""
    try:
        state.result()
    except (LLMFatalError, ProposalsNotRecorded):
        return False
    except Exception:
        return True
    return True


@task(
    name="propose",
    task_run_name="propose-{number}",
    retries=2,
    retry_delay_seconds=2.0,
    retry_condition_fn=_retry_request,
    **_TASK,
)
def propose_task(run: Discovery, number: int, n: int) -> Any:
    """One proposal request (an LLM request, a mutation round), then its proposals into the store."""
    return run.propose_request(number, n)


@task(name="calibrate-batch", task_run_name="calibrate-batch-{number}", **_TASK)
def calibrate_task(run: Discovery, number: int, batch: _Batch) -> Any:
    """One calibration batch, from its hand-over to a supervised worker until all its results are
    recorded (validation scores included: the worker scores each fit on the validation split)."""
    return run.await_batch(batch)


@task(name="log-progress", task_run_name="log-progress-{number}", retries=2, retry_delay_seconds=2.0, **_TASK)
def log_progress_task(run: Discovery, number: int, podium: int) -> Any:
    """The run's counters, LLM cost and (when it changed) the podium to MLflow; retried on failure."""
    return run.log_progress(podium)


@task(name="score-test-split", task_run_name="score-test-split", **_TASK)
def score_test_task(run: Discovery) -> Any:
    """The final top ``test_top_k`` and the references on the test split, once, at the end."""
    return run.score_test_split()


@task(name="report-card", task_run_name="report-card", **_TASK)
def report_card_task(run: Discovery) -> Any:
    return run.write_report_card()


@task(name="log-final", task_run_name="log-final", **_TASK)
def log_final_task(run: Discovery, mlflow_status: str) -> Any:
    """The final leaderboard, test scores, report card, cost and end status to MLflow (bounded;
    it retries once itself; what fails is logged later by ``ndvm log``)."""
    return run.log_final(mlflow_status)


class _Submitted:
    """A submitted stage: a Prefect future in a flow run, a thread-pool future outside one."""

    def __init__(self, future: Any, prefect: bool):
        self.future, self.prefect = future, prefect

    def add_done_callback(self, callback: Callable[[], None]) -> None:
        self.future.add_done_callback(lambda _: callback())

    def outcome(self) -> tuple[Any, BaseException | None]:
        """(value, None) or (None, the exception) of a finished stage."""
        if self.prefect:
            value = self.future.result(raise_on_failure=False)
            return (None, value) if isinstance(value, BaseException) else (value, None)
        error = self.future.exception()
        return (None, error) if error is not None else (_unwrap(self.future.result()), None)


def _unwrap(value: Any) -> Any:
    """The data of a State a task body returned (its message is for the Prefect UI)."""
    from prefect.results import ResultRecord, ResultRecordMetadata
    from prefect.states import State

    if not isinstance(value, State):
        return value
    if isinstance(value.data, ResultRecordMetadata):  # persisted elsewhere: Prefect reads it back
        return value.result()
    return value.data.result if isinstance(value.data, ResultRecord) else value.data


class _Stages:
    """Runs the pipeline's tasks: as Prefect task runs inside a flow run (the ``discover`` flow),
    as plain calls on a thread pool when ``Discovery`` is used without one (no retries then)."""

    def __init__(self) -> None:
        from prefect.context import FlowRunContext

        self.prefect = FlowRunContext.get() is not None
        self.pool = None if self.prefect else concurrent.futures.ThreadPoolExecutor(thread_name_prefix="ndvm-stage")

    def submit(self, task_obj: Any, **parameters: Any) -> _Submitted:
        if self.prefect:
            return _Submitted(task_obj.submit(**parameters), True)
        return _Submitted(self.pool.submit(task_obj.fn, **parameters), False)

    def call(self, task_obj: Any, **parameters: Any) -> Any:
        """Run a stage now, in this thread (a nested task run inside another task)."""
        if self.prefect:
            return _unwrap(task_obj(**parameters, return_state=True).result())
        return _unwrap(task_obj.fn(**parameters))

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=False, cancel_futures=True)


@dataclass
class _Batch:
    """A calibration batch between the coordinator (which hands it to the supervisor and routes
    the results back by hash: a failed batch's candidates come back one by one) and its
    ``calibrate-batch`` task, which records each piece as it arrives."""

    items: list[BatchItem]
    waiting: set[str] = field(default_factory=set)
    pieces: queue.Queue[tuple[str, Any]] = field(default_factory=queue.Queue)

    def __post_init__(self) -> None:
        self.waiting = {item.hash for item in self.items}

    def __repr__(self) -> str:  # Prefect records task inputs by repr; keep it short
        return f"_Batch({len(self.items)} candidates)"


# ---------------------------------------------------------------------------- the engine
class Discovery:
    """One discovery run (or the continuation of one). ``run()`` blocks until the budget is spent."""

    def __init__(
        self,
        config: DiscoverConfig,
        budget: Budget,
        run_id: str | None = None,
        resume: str | None = None,
        logger: Any = None,
    ):
        from storage import CandidateStore, default_store_path
        from storage.store import SNAPSHOT_SECONDS

        config = with_seed(config)  # a run without --seed draws one (flows/night.py)
        self.config, self.budget = config, budget.check()
        self.log = logger or log
        self.runner_choice = config.runner.check()
        self.dataset, self.task = load_problem(config.problem)
        self.spec = task_spec(self.dataset, self.task)
        self.options = CalibrationOptions(
            **{
                **asdict(config.calibration),
                "threads": config.calibration.threads or self.runner_choice.native_threads(),
                "max_seconds": config.candidate_seconds,
            }
        )
        self.folder = Path(config.folder)
        self.store_path = default_store_path(self.folder)
        # readers (ndvm leaderboard, report) open the snapshot it keeps while this run writes
        self.store = CandidateStore(self.store_path, snapshot_seconds=SNAPSHOT_SECONDS)
        try:
            self._open_run(run_id, resume)
            # earlier runs on the same data: reuse their evaluations, start from their best programs
            self.library, seeds_left = open_run_library(
                self.store,
                self.run_id,
                self.dataset,
                self.task,
                config,
                resumed=bool(resume),
                program_source=self.spec.program_source,
                log=self.log,
            )
            self.queue_initial += seeds_left
            # MLflow down does not stop a run: the store keeps everything, the end retries.
            self.tracking = RunTracking(
                self.store,
                self.run_id,
                tracking_uri=config.tracking_uri,
                folder=self.folder,
                config=self.config.to_dict(),
                budget=asdict(self.budget),
                names=dict(
                    dataset=self.config.problem.label, task=self.task.kind, proposer=config.proposer, model=config.model
                ),
                entry_hook=lambda digest: faults.checkpoint("logging", hash=digest),
                logger=self.log,
            )
            self.tracking.connect()
        except BaseException:
            self.store.close()
            raise
        # The LLM spend of the run's earlier sessions, from the store: --max-cost bounds the whole run.
        earlier = self.resumed_from
        self.earlier_cost = (earlier.llm_cost_usd or 0.0) if earlier else 0.0
        self.earlier_tokens = (earlier.llm_tokens_in or 0, earlier.llm_tokens_out or 0) if earlier else (0, 0)
        self.earlier_cached = (getattr(earlier, "llm_tokens_cached", None) or 0) if earlier else 0
        self.proposer = make_proposer(config, seed_offset=self.resumed_from.proposed if self.resumed_from else 0)
        # An unpriced model makes --max-cost toothless: say so at the start, not after the bill.
        self.cost_warning = (
            self.proposer.cost_limit_problem()
            if self.budget.max_cost_usd is not None and hasattr(self.proposer, "cost_limit_problem")
            else None
        )
        if self.cost_warning:
            self.log.warning("--max-cost: %s", self.cost_warning)
            print(f"ndvm discover: warning: {self.cost_warning}", file=sys.stderr)
        status = self.store.run_status(self.run_id)
        self.accepted = status.new - status.seeded  # new candidates of the run so far (library seeds not counted)
        self.unrecorded = len(self.queue_initial)  # accepted, not recorded yet (serial mode waits for 0)
        self.leaderboard_changed = threading.Event()
        self.proposal_meter, self.calibration_meter = StageMeter(), StageMeter()
        self.queue: collections.deque[BatchItem] = collections.deque()
        self.queue_lock = threading.Lock()
        self.accept_lock = threading.Lock()  # keeps the candidate budget exact
        self.failures: collections.deque[Any] = collections.deque(maxlen=8)  # recent, for the proposers' context
        # results back from a worker, not recorded yet (their batch's task records them): a
        # proposal round waits for them (_await_recorded), under this condition
        self.results_in_transit = 0
        self.recorded = threading.Condition()
        # duplicates and stale rounds (flows/feedback.py); only the LLM's prompt names the duplicates
        self.feedback = RoundFeedback(config.max_stale_rounds, name_duplicates=config.proposer == "llm")
        self.niches = NicheArchive(config.seed)  # parents drawn across structural niches (proposers/niches.py)
        self.residuals = ResidualNotes(self.task)  # where the best fails on validation, for the LLM prompt
        self.stop_proposing = threading.Event()
        self.finished = threading.Event()
        self.stop_reason = ""
        self.started = time.monotonic()
        self.drain_deadline: float | None = None  # the hard deadline, set when proposing stops
        self.supervisor: CalibrationSupervisor | None = None
        self.cancelled_at_deadline = 0
        self.report_card: dict[str, Any] | None = None  # flows/report.py, built at the end of a finished run
        self.store_errors = 0
        self.logged_entries = 0
        self.errors: list[BaseException] = []
        # The pipeline's stages (Prefect tasks, coordinated by run()): futures and their hand-offs.
        self.stages: _Stages | None = None
        self.wake = threading.Event()  # set when a task ends: the coordinator looks again
        self.proposal_futures: list[_Submitted] = []
        self.requests_done: set[_Submitted] = set()
        self.batch_futures: list[_Submitted] = []
        self.batches_done: set[_Submitted] = set()
        self.log_futures: list[_Submitted] = []
        self.logs_done: set[_Submitted] = set()
        self.batch_of: dict[str, _Batch] = {}  # candidate hash -> the batch it was handed over in
        self.batches_lock = threading.Lock()
        self.request_number = self.batch_number = self.log_number = 0
        self.live_requests: set[tuple[Any, Any]] = set()  # (event loop, asyncio task) of requests in flight
        self.requests_lock = threading.Lock()
        self.elapsed_final = 0.0

    def _open_run(self, run_id: str | None, resume: str | None) -> None:
        from storage import StoreError

        self.resumed_from = None
        if resume:
            try:
                self.resumed_from = self.store.resume(resume)
            except StoreError as exc:
                raise DiscoveryError(f"cannot resume: {exc}") from exc
            self.run_id = resume
            pending = self.store.pending(resume)
            self.queue_initial = [BatchItem(c.hash, c.source, c.program_source or c.source) for c in pending]
            return
        self.queue_initial = []
        self.run_id = run_id or f"run-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}-{uuid.uuid4().hex[:6]}"
        self.store.start_run(
            self.run_id,
            dataset=self.config.problem.label,
            task=self.task.kind,
            proposer=self.config.proposer,
            model=self.config.model,
            config=self.config.to_dict(),
            budget=asdict(self.budget),
            metric=self.task.primary_metric,
            probe_inputs=probe_inputs(self.task),
        )

    # ------------------------------------------------------------------ budget
    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def cost(self) -> float | None:
        """The run's LLM cost in USD, earlier sessions included (None: a proposer without usage)."""
        usage = getattr(self.proposer, "usage", None)
        if usage is None:
            return self.earlier_cost or None
        return self.earlier_cost + float(usage.cost_usd)

    def tokens(self) -> tuple[int, int] | None:
        """(prompt, completion) tokens of the run's LLM calls, earlier sessions included."""
        usage = getattr(self.proposer, "usage", None)
        if usage is None:
            return None
        return self.earlier_tokens[0] + int(usage.tokens_in), self.earlier_tokens[1] + int(usage.tokens_out)

    def _save_usage(self) -> None:
        """The spend so far into the store (after each proposal request and at the end), so a
        resumed run starts its cost accounting from it. A failed write is logged, not fatal."""
        tokens = self.tokens()
        if tokens is None:
            return
        try:
            cached = self.earlier_cached + int(getattr(self.proposer.usage, "tokens_cached", 0))
            self.store.set_llm_usage(self.run_id, self.cost(), *tokens, tokens_cached=cached)
        except Exception as exc:
            self.log.warning("could not store the LLM cost so far: %s", exc)

    def _budget_reason(self) -> str | None:
        b = self.budget
        if b.minutes is not None and self.elapsed() >= 60.0 * b.minutes:
            return f"wall time ({b.minutes:g} min)"
        if b.max_candidates is not None and self.accepted >= b.max_candidates:
            return f"candidates ({b.max_candidates})"
        cost = self.cost()
        if b.max_cost_usd is not None and cost is not None and cost >= b.max_cost_usd:
            return f"LLM cost (${b.max_cost_usd:g})"
        if getattr(self.proposer, "exhausted", False):
            return "replay file exhausted"
        return None

    def _stop(self, reason: str) -> None:
        if not self.stop_proposing.is_set():
            self.stop_reason = reason
            self.log.info("discovery %s: stops proposing: %s", self.run_id, reason)
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

    def _batch_size_now(self) -> int:
        """``batch_size``, or fewer near the hard deadline (``deadline_batch_size``)."""
        deadline = self.hard_deadline()
        per_candidate = self.supervisor.seconds_per_candidate() if self.supervisor is not None else None
        if deadline is None or per_candidate is None:
            return self.config.batch_size
        return deadline_batch_size(self.config.batch_size, deadline - time.monotonic(), per_candidate)

    # ------------------------------------------------------------------ proposal stage
    def _context(self) -> Any:
        from proposers import Budget as ProposalBudget
        from proposers import ProposalContext

        # the best program, then one per structural niche; as duplicates rise, the less-visited niches
        best = self.niches.select(store_programs(self.store, self.run_id), 5, explore=self.feedback.duplicate_rate)
        b = self.budget
        left = ProposalBudget(
            proposals_left=None if b.max_candidates is None else max(0, b.max_candidates - self.accepted),
            seconds_left=None if b.minutes is None else max(0.0, 60.0 * b.minutes - self.elapsed()),
            cost_left_usd=None if b.max_cost_usd is None else max(0.0, b.max_cost_usd - (self.cost() or 0.0)),
        )
        fb = self.feedback
        return ProposalContext(
            self.spec,
            best=best,
            failures=list(self.failures),
            budget=left,
            duplicates=list(fb.last_duplicates),
            duplicate_rate=fb.duplicate_rate,
            stale_rounds=fb.stale_rounds,
            residuals=self._residuals(),
        )

    def _residuals(self) -> str:
        """Where the run's best program fails on validation (LLM prompt only; refreshed when the best changes)."""
        if self.config.proposer != "llm":
            return ""
        return self.residuals.text(next(self.store.top(1, run_id=self.run_id).iter_rows(named=True), None))

    def _queue_limit(self) -> int:
        return self.config.batch_size * self.runner_choice.queued_batches()

    def _may_propose(self) -> bool:
        if self.stop_proposing.is_set():
            return False
        if self.config.serial and self.unrecorded > 0:  # serial: the last round is not all recorded yet
            return False
        reason = self._budget_reason()
        if reason:
            self._stop(reason)
            return False
        with self.queue_lock:
            return len(self.queue) < self._queue_limit()

    def _accept(self, proposals: list[Any]) -> list[Any]:
        """Into the store at once; the new candidates join the calibration queue. With a candidate
        budget the proposals are added in slices so the run accepts exactly that many."""
        with self.accept_lock:  # replies of concurrent requests arrive in worker threads
            new = self._accept_locked(proposals)
            self.feedback.record(self.store, self.run_id, proposals, {c.proposed_source or c.source for c in new})
        return new

    def _accept_locked(self, proposals: list[Any]) -> list[Any]:
        program_source = self.spec.program_source
        accepted: list[Any] = []
        while proposals:
            take = len(proposals)
            if self.budget.max_candidates is not None:
                take = min(take, self.budget.max_candidates - self.accepted)
                if take <= 0:
                    return accepted
            chunk, proposals = proposals[:take], proposals[take:]
            new = self._add_or_record(chunk, program_source)
            accepted += new
            self.accepted += len(new)
            new = self.library.reuse(new)  # evaluated by an earlier run on this data: recorded, not queued
            self.unrecorded += len(new)
            with self.queue_lock:
                self.queue.extend(BatchItem(c.hash, c.source, c.program_source or c.source) for c in new)
        return accepted

    def _add_or_record(self, chunk: list[Any], program_source: Any) -> list[Any]:
        """``store.add`` of a chunk of proposals. A chunk the store cannot write is retried one
        proposal at a time; a proposal that still fails is recorded (outcome ``store_error``, with
        its error) and logged, never dropped silently."""
        try:
            new = self.store.add(chunk, self.run_id, program_source=program_source)
        except Exception as exc:
            if is_disk_full(exc):  # nothing more can be written: the run stops (run_discovery says how to resume)
                raise
            new = []
            for proposal in chunk:
                try:
                    new += self.store.add([proposal], self.run_id, program_source=program_source)
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

    def _request_shape(self) -> tuple[int, int]:
        """(requests in flight, programs per request): mutation and replay one round of 16 at a time."""
        if self.config.proposer in ("mutation", "replay"):
            return 1, 16
        return self.config.concurrency, self.config.per_request

    def propose_request(self, number: int, n: int) -> Any:
        """The ``propose`` task: one request for ``n`` programs, then its proposals into the store
        (``deduplicate``, in the same task run: a task run costs the flow and Prefect's server as
        much CPU as a calibration). The mutation and replay proposers go on with further rounds, each
        from a fresh context, while the queue and the budget allow (``_rounds_per_request``): the
        rounds the coordinator would have submitted next, without a task run each. Raises what the
        proposer did not absorb (Prefect retries it)."""
        from prefect.states import Completed

        proposed = new = 0
        self.proposal_meter.enter()
        try:
            for round_number in range(self._rounds_per_request()):
                if round_number and not self._may_propose():
                    break
                counts = self._propose_round(number, n)
                if counts is None:
                    return Completed(message="cancelled at the hard deadline", data=proposed)
                if self.finished.is_set():  # the run ended while this request was out: the store is closing
                    return Completed(
                        message=f"{counts['proposals']} proposals arrived after the end of the run; dropped", data=0
                    )
                proposed, new = proposed + counts["proposals"], new + counts["new"]
        finally:
            self.proposal_meter.exit()
        return Completed(
            message=f"{proposed} proposals: {new} new, {proposed - new} duplicate, invalid or over the candidate budget",
            data=proposed,
        )

    def _rounds_per_request(self) -> int:
        """Proposal rounds one ``propose`` task run may make: the offline proposers' rounds take a
        tenth of a second, less than the task run around them; one LLM request per task run (its
        retries are per request); one round in a serial run (calibrated before the next)."""
        if self.config.proposer in ("mutation", "replay") and not self.config.serial:
            return OFFLINE_ROUNDS_PER_REQUEST
        return 1

    def _await_recorded(self) -> None:
        """Wait (at most RECORD_WAIT_SECONDS) until the results back from the workers are in the
        store, so that a round's context ranks them: a worker that frees up takes the next batch
        at once, the queue falls below its limit and a round starts, while its batch's task is
        still recording what it returned."""
        with self.recorded:
            self.recorded.wait_for(
                lambda: self.results_in_transit == 0 or self.finished.is_set(), timeout=RECORD_WAIT_SECONDS
            )

    def _propose_round(self, number: int, n: int) -> dict[str, int] | None:
        """One proposal round of ``n`` programs (request ``number``) into the store; None: cancelled
        at the hard deadline. Raises ProposalsNotRecorded when the reply cannot be recorded."""
        self._await_recorded()
        try:
            proposals = self._cancellable(self.proposer.apropose(self._context(), n))
        except asyncio.CancelledError:  # the hard deadline (_cancel_requests)
            return None
        finally:
            for failure in self.proposer.drain_failures():
                self.failures.append(failure)
            self._save_usage()  # a failed request may have cost too
        if self.finished.is_set():
            return {"proposals": len(proposals), "new": 0}
        if proposals:
            try:
                counts = self.deduplicate(proposals)
            except Exception as exc:
                kept = self._keep_unrecorded(proposals)
                raise ProposalsNotRecorded(
                    f"request {number}: {len(proposals)} proposals arrived but recording them failed "
                    f"({type(exc).__name__}: {exc}); {kept}"
                ) from exc
        else:  # a round with no valid proposal at all gave nothing new either
            self.feedback.record(self.store, self.run_id, [], set())
            counts = {"proposals": 0, "new": 0}
        self._check_stale()
        return counts

    def _keep_unrecorded(self, proposals: list[Any]) -> str:
        """Proposals whose recording failed, appended to the run folder's replay file (they may
        have been paid for: ``--proposer replay --replay FILE`` feeds them to a later run)."""
        from proposers.base import write_jsonl

        path = self.folder / f"unrecorded-{self.run_id}.jsonl"
        try:
            write_jsonl(proposals, path)
        except OSError as error:
            return f"they could not be kept either ({error})"
        return f"kept in {path}"

    def deduplicate(self, proposals: list[Any]) -> dict[str, int]:
        """A request's proposals into the store (``_accept``): duplicates and invalid programs are
        dropped (and counted), the new candidates join the calibration queue."""
        new = self._accept(proposals)
        return {"proposals": len(proposals), "new": len(new)}

    def _request_failed(self, error: BaseException) -> None:
        """A proposal request that failed after its retries: recorded for the proposers' context
        (the next prompt names it), counted as a round with nothing new; the run goes on."""
        from proposers import Failure

        if isinstance(error, LLMFatalError) or is_disk_full(error):  # a wrong key or model, a full disk:
            raise error  # going on all night helps nobody
        self.log.warning("proposal request failed: %s", error)
        if not isinstance(error, ProposalsNotRecorded):  # the pipeline's own fault is not the model's to hear
            self.failures.append(
                Failure("api", f"{type(error).__name__}: {error}"[:500], proposer=self.config.proposer)
            )
        self.feedback.record(self.store, self.run_id, [], set())
        self._check_stale()

    def _check_stale(self) -> None:
        if self.feedback.stale() and not self.stop_proposing.is_set():
            # the proposer only repeats itself (or fails): stop paying for it (what is queued may
            # still use the wall time the run was given: _stop)
            self._stop(self.feedback.stop_message())

    def _cancellable(self, coro: Any) -> Any:
        """Run the proposer's coroutine on an event loop of this thread, registered so that the
        hard deadline can cancel it from the coordinator (``_cancel_requests``)."""

        async def main() -> Any:
            me = (asyncio.get_running_loop(), asyncio.current_task())
            with self.requests_lock:
                self.live_requests.add(me)
            try:
                return await coro
            finally:
                with self.requests_lock:
                    self.live_requests.discard(me)

        return asyncio.run(main())

    def _cancel_requests(self) -> None:
        with self.requests_lock:
            live = list(self.live_requests)
        for loop, request in live:
            loop.call_soon_threadsafe(request.cancel)

    # ------------------------------------------------------------------ calibration stage
    def _take_batch(self) -> list[BatchItem]:
        size = self._batch_size_now()
        with self.queue_lock:
            items = []
            while self.queue and len(items) < size:
                items.append(self.queue.popleft())
            return items

    def _record(self, items: list[BatchItem], results: list[BatchResult]) -> None:
        from proposers import Failure

        sources = {item.hash: item.source for item in items}
        faults.checkpoint("recording", hashes=[r.hash for r in results])
        self.store.record(
            [r.evaluation(self.run_id, self.config.problem.label, self.task.kind, self.split_label) for r in results]
        )
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
        with self.accept_lock:  # last: a serial run proposes again once this reaches 0
            self.unrecorded -= len(results)

    @property
    def split_label(self) -> str:
        return self.task.split_label()

    # ------------------------------------------------------------------ the end: the test split, once
    def _score_test_split(self) -> int:
        """Score the final top ``test_top_k`` and the references on the test split (flows/final.py).
        Only here, after the search has stopped: nothing the search reads depends on it."""
        from flows.final import score_final

        started = time.monotonic()
        rows = score_final(self.store, self.run_id, self.task, self.options, k=self.config.test_top_k)
        self.log.info("test split: %d entries and references scored in %.1f s", len(rows), time.monotonic() - started)
        return len(rows)

    def _log_final(self, tracker: Any, k: int) -> None:
        """The final leaderboard, then the test scores on the logged entries and the parent run."""
        from flows.final import log_test_scores
        from flows.report import log_report

        self._log_leaderboard(tracker, k)
        log_test_scores(tracker, self.store, self.run_id)
        log_llm_summary(tracker, llm_summary(self.proposer, self.store.run_status(self.run_id).new))
        if self.report_card is not None:  # report.md/.json on the parent, formulas on the entries
            log_report(tracker, self.store, self.run_id, self.report_card)

    def _hand_over(self) -> list[BatchItem]:
        """``take_batch`` of the supervisor: what is queued (up to ``batch_size``), handed to a
        worker now, with its ``calibrate-batch`` task submitted to record the results."""
        items = self._take_batch()
        if items:
            batch = _Batch(items)
            with self.batches_lock:
                for item in items:
                    self.batch_of[item.hash] = batch
            self.batch_number += 1
            future = self.stages.submit(calibrate_task, run=self, number=self.batch_number, batch=batch)
            future.add_done_callback(lambda f=future: self._batch_done(f))
            self.batch_futures.append(future)
        return items

    def _route(self, items: list[BatchItem], results: list[BatchResult]) -> None:
        """Results from the supervisor to the batch each candidate was handed over in."""
        by_batch: dict[int, tuple[_Batch, list[BatchItem], list[BatchResult]]] = {}
        for item, result in zip(items, results):
            with self.batches_lock:
                batch = self.batch_of.pop(result.hash)
            entry = by_batch.setdefault(id(batch), (batch, [], []))
            entry[1].append(item)
            entry[2].append(result)
        for batch, its, res in by_batch.values():
            with self.recorded:
                self.results_in_transit += len(res)
            batch.pieces.put(("results", (its, res)))
            batch.waiting -= {r.hash for r in res}
            if not batch.waiting:
                batch.pieces.put(("done", None))

    def _release(self, left: list[BatchItem], why: str) -> None:
        """Candidates that will not be calibrated in this session (the hard deadline, a failure):
        their batches' tasks end with them counted (they stay pending; a resume continues)."""
        with self.batches_lock:
            batches = {id(b): b for b in (self.batch_of.pop(item.hash, None) for item in left) if b is not None}
            if why == "stopped":  # every batch still open
                batches.update({id(b): b for b in self.batch_of.values()})
                self.batch_of.clear()
        for batch in batches.values():
            batch.pieces.put((why, None))

    def await_batch(self, batch: _Batch) -> Any:
        """The ``calibrate-batch`` task: record each piece of the batch's results as it arrives
        (one store transaction each), until all are in or the batch is released."""
        from prefect.states import Completed

        counts = collections.Counter()
        while True:
            what, piece = batch.pieces.get()
            if what != "results":
                break
            items, results = piece
            self._record(items, results)
            self.leaderboard_changed.set()
            self.wake.set()  # a serial run may propose again
            counts.update(r.status for r in results)
        left = len(batch.items) - sum(counts.values())
        summary = ", ".join(f"{n} {status}" for status, n in sorted(counts.items())) or "none recorded"
        if left:
            summary += f"; {left} left pending ({what})"
        return Completed(message=f"{len(batch.items)} candidates: {summary}", data=dict(counts, pending=left))

    # ------------------------------------------------------------------ tracking stage
    def _log_leaderboard(self, tracker: Any, k: int, light: bool = False) -> None:
        """The top ``k`` to MLflow; ``light`` (progress): new entries without their artifacts and
        model, which the end's call (not light) adds to every entry (``Tracker.log_leaderboard``)."""

        def extras(digest: str) -> dict[str, Any]:
            evaluation = self.store.evaluation(self.run_id, digest)
            source = self.store.candidate(digest)["source"]
            return entry_extras(self.dataset, self.task, source, evaluation["parameters"])

        logged = tracker.log_leaderboard(self.store, self.run_id, k=k, extras=extras, light=light)
        self.logged_entries += len(logged)

    # ------------------------------------------------------------------ logging stage (Prefect tasks)
    def log_progress(self, podium: int) -> Any:
        """The ``log-progress`` task: counters, LLM cost and tokens, and (``podium`` > 0) the
        current top entries to MLflow. Raises on failure: Prefect retries it; the coordinator
        records a final failure as a warning (the end logs everything again)."""
        from prefect.states import Completed

        tracker = self.tracking.tracker
        if tracker is None:
            return Completed(message="MLflow unavailable since the start; everything is logged at the end", data=0)
        status = self.store.run_status(self.run_id)
        tracker.log_progress(status)
        self._log_usage(tracker)
        if podium:
            self._log_leaderboard(tracker, podium, light=True)
        return Completed(
            message=f"{status.calibrated} calibrated, best {status.metric} {status.best_score}; top {podium} logged",
            data=status.calibrated,
        )

    def _log_usage(self, tracker: Any) -> None:
        """The run's LLM cost and tokens (earlier sessions included) as metrics of the parent run."""
        import mlflow

        tokens = self.tokens()
        cost = self.cost()
        if tokens is None and cost is None:
            return
        values = {"llm_cost_usd": cost or 0.0}
        if tokens is not None:
            values.update(llm_tokens_prompt=float(tokens[0]), llm_tokens_completion=float(tokens[1]))
        stamp, step = int(time.time() * 1000), int(self.elapsed())
        tracker.client.log_batch(
            tracker.parent_run_id, metrics=[mlflow.entities.Metric(k, float(v), stamp, step) for k, v in values.items()]
        )

    def _logging_done(self, future: _Submitted) -> None:
        _, error = future.outcome()
        if error is not None:  # after Prefect's retries: a warning, the end retries (RunTracking)
            self.tracking.failures += 1
            self.tracking.error = f"{type(error).__name__}: {str(error)[:500]}"
            self.log.warning("MLflow logging failed (retried at the end): %s", self.tracking.error)

    def score_test_split(self) -> Any:
        from prefect.states import Completed

        rows = self._score_test_split()
        return Completed(message=f"{rows} entries and references scored on the test split", data=rows)

    def write_report_card(self) -> Any:
        from prefect.states import Completed

        self.report_card = finish_report(
            self.store, self.run_id, self.task, self.folder, self.log, calibrate_options=self.options.as_kwargs()
        )
        return Completed(
            message="report card written" if self.report_card else "no report card", data=self.report_card is not None
        )

    def log_final(self, mlflow_status: str) -> Any:
        from prefect.states import Completed

        ok = self.tracking.finish(self._log_final, self.config.top_k, mlflow_status)
        if ok and self.tracking.tracker is not None:
            try:
                self._log_usage(self.tracking.tracker)
            except Exception as exc:  # the store has the figures; the run does not fail for them
                self.log.warning("could not log the LLM cost to MLflow: %s", exc)
        message = (
            f"{self.logged_entries} leaderboard entries logged"
            if ok
            else f"MLflow logging incomplete ({self.tracking.error}); `ndvm log --run {self.run_id}` later"
        )
        return Completed(message=message, data=ok)

    # ------------------------------------------------------------------ progress
    def progress(self, phase: str) -> Progress:
        status = self.store.run_status(self.run_id)
        elapsed = max(self.elapsed(), 1e-9)
        with self.queue_lock:
            queued = len(self.queue)
        return Progress(
            run_id=self.run_id,
            elapsed=elapsed,
            proposed=status.proposed,
            new=status.new,
            duplicates=status.duplicates,
            invalid=status.invalid,
            calibrated=status.calibrated,
            failed=status.failed,
            pending=status.pending,
            queued=queued,
            best_score=status.best_score,
            best_hash=status.best_hash,
            metric=status.metric,
            proposal_busy=self.proposal_meter.busy_seconds() / elapsed,
            calibration_busy=self.calibration_meter.busy_seconds() / elapsed,
            cost_usd=self.cost(),
            phase=phase,
            reused=status.reused,
        )

    def _publish(self, phase: str) -> Progress:
        snapshot = self.progress(phase)
        path = status_path(self.folder, self.run_id)
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
                self.log.warning("progress listener failed: %s", exc)
        return snapshot

    # ------------------------------------------------------------------ the run
    def run(self) -> DiscoveryReport:
        """Run the pipeline until the budget is spent. Inside the ``discover`` flow every stage is a
        Prefect task; the flow's own thread coordinates them (``_coordinate``)."""
        with self.queue_lock:
            self.queue.extend(self.queue_initial)
        if self.queue_initial:
            self.log.info("resuming %s: %d candidates were pending", self.run_id, len(self.queue_initial))
        self.stages = _Stages()
        status, mlflow_status = "failed", "FAILED"
        try:
            with (
                worker_environment(self.runner_choice) as api_url,
                self.runner_choice.backend(self.task, self.options, api_url) as (backend, isolation),
            ):
                self.supervisor = CalibrationSupervisor(
                    backend,
                    candidate_seconds=self.config.candidate_seconds,
                    threads=self.runner_choice.cores_per_batch(self.options.threads),
                    isolation=isolation,
                    meter=self.calibration_meter,
                    log=self.log,
                )
                try:
                    self._coordinate()
                    self._wait(self.batch_futures, None)  # the last results recorded before the end reads them
                finally:
                    self._release(self.supervisor.cancel() if self.supervisor.busy() else [], "stopped")
                    self.supervisor.close()
            self.stages.call(score_test_task, run=self)
            self.stages.call(report_card_task, run=self)
            status, mlflow_status = "finished", "FINISHED"  # only once the end's stages succeeded
        except KeyboardInterrupt:
            status, mlflow_status = "interrupted", "KILLED"
            self._stop("interrupted")
            raise
        finally:
            self._stop(self.stop_reason or "stopped")
            self.finished.set()
            self._release([], "stopped")
            self._cancel_requests()
            self._wait(self.proposal_futures, 30.0)
            self._wait(self.batch_futures, 30.0)
            logging_stuck = not self._wait(self.log_futures, 60.0)
            self.elapsed_final = self.elapsed()
            try:
                if logging_stuck:  # MLflow is stuck in a call: the final logging would wait behind it
                    self.tracking.error = "MLflow did not answer within 60 s at the end of the run"
                    self.log.warning(
                        "%s; log the results later with `ndvm log --run %s`", self.tracking.error, self.run_id
                    )
                else:  # bounded, never raises: the results are in the store whatever MLflow does
                    self._final_stage(log_final_task, mlflow_status)
            finally:
                self._save_usage()
                self.store.set_run_status(self.run_id, status)
                self._publish(status)
                self._summary_artifact(status)
                self.stages.close()
        return self.report(status)

    def _final_stage(self, task_obj: Any, mlflow_status: str) -> None:
        """The final logging as a task; after an interrupt (no more task runs) as a plain call."""
        if self.stop_reason == "interrupted":
            task_obj.fn(run=self, mlflow_status=mlflow_status)
        else:
            self.stages.call(task_obj, run=self, mlflow_status=mlflow_status)

    @staticmethod
    def _wait(futures: list[_Submitted], seconds: float | None) -> bool:
        """Wait for submitted stages to end (True), at most ``seconds`` for all of them together."""
        pending = [f.future for f in futures]
        if not pending:
            return True
        if futures[0].prefect:
            from prefect.futures import wait

            return not wait(pending, timeout=seconds).not_done
        return not concurrent.futures.wait(pending, timeout=seconds).not_done

    def _coordinate(self) -> None:
        """The flow's thread: submit proposal requests while the budget and the calibration queue
        allow, hand batches to free workers (never waiting for the next proposals), submit the
        periodic logging; woken by every finished task and by the workers (``supervisor.collect``)."""
        supervisor = self.supervisor
        assert supervisor is not None
        in_flight, per_request = self._request_shape()
        last_progress = 0.0
        next_log = self.started + self.config.log_every
        while True:
            self.wake.clear()
            # proposal: finished requests first (a fatal error stops the run), then new ones
            for future in [f for f in self.proposal_futures if f in self.requests_done]:
                self.proposal_futures.remove(future)
                self.requests_done.discard(future)
                _, error = future.outcome()
                if error is not None:
                    self._request_failed(error)
            if not self.stop_proposing.is_set():
                reason = self._budget_reason()
                if reason:
                    self._stop(reason)
            while len(self.proposal_futures) < in_flight and self._may_propose():
                self.request_number += 1
                future = self.stages.submit(propose_task, run=self, number=self.request_number, n=per_request)
                self.proposal_futures.append(future)
                future.add_done_callback(lambda f=future: self._request_done(f))
            # calibration: results to their batches, then every free worker gets what is queued
            for items, results in supervisor.collect(0.05):
                self._route(items, results)
            past_drain = self.drain_deadline is not None and time.monotonic() > self.drain_deadline
            supervisor.fill(self._hand_over, new_batches=not past_drain)
            # logging: one snapshot at a time, every log_every seconds
            self.log_futures = [f for f in self.log_futures if f not in self.logs_done]
            if self.batches_done:  # a night hands over thousands of batches: keep only those in flight
                done, self.batches_done = self.batches_done, set()
                self.batch_futures = [f for f in self.batch_futures if f not in done]
            if not self.log_futures and time.monotonic() >= next_log:
                podium = min(PROGRESS_PODIUM, self.config.top_k) if self.leaderboard_changed.is_set() else 0
                self.leaderboard_changed.clear()
                self.log_number += 1
                future = self.stages.submit(log_progress_task, run=self, number=self.log_number, podium=podium)
                future.add_done_callback(lambda f=future: self._log_done(f))
                self.log_futures.append(future)
                next_log = time.monotonic() + self.config.log_every
            if time.monotonic() - last_progress >= 1.0:
                last_progress = time.monotonic()
                self._publish("proposing" if not self.stop_proposing.is_set() else "draining")
            with self.queue_lock:
                queued = len(self.queue)
            if past_drain:
                left = supervisor.cancel()
                self._release(left, "hard deadline")
                self.cancelled_at_deadline = len(left)
                self._cancel_requests()
                if left or queued:
                    self.stop_reason += (
                        f"; hard deadline: {len(left)} candidates in calibration cancelled and "
                        f"{queued} queued, left pending (resume continues)"
                    )
                return
            proposing_done = self.stop_proposing.is_set() and not self.proposal_futures
            if proposing_done and not supervisor.busy() and (queued == 0 or self._batch_size_now() == 0):
                if queued:  # not even one would finish before the hard deadline: no need to wait for it
                    self.stop_reason += (
                        f"; {queued} queued left pending: they would not be calibrated before the hard "
                        "deadline (resume continues)"
                    )
                return
            if not supervisor.busy():  # (collect() above waited for the workers)
                # idle until a task ends; short, so the deadline and the progress display stay on time
                self.wake.wait(0.2)

    def _request_done(self, future: _Submitted) -> None:
        self.requests_done.add(future)
        self.wake.set()

    def _batch_done(self, future: _Submitted) -> None:
        self.batches_done.add(future)
        self.wake.set()

    def _log_done(self, future: _Submitted) -> None:
        self._logging_done(future)
        self.logs_done.add(future)
        self.wake.set()

    def _summary_artifact(self, status: str) -> None:
        """A table of the run's stages in the Prefect UI (the flow run's Artifacts tab)."""
        if not self.stages.prefect:
            return
        from prefect.artifacts import create_markdown_artifact

        s = self.store.run_status(self.run_id)
        elapsed = max(self.elapsed_final, 1e-9)
        rows = [
            (
                "propose",
                self.request_number,
                f"{s.proposed} proposals: {s.new} new, {s.duplicates} duplicates, {s.invalid} invalid",
                self.proposal_meter.busy_seconds(),
            ),
            (
                "calibrate-batch",
                self.batch_number,
                f"{s.calibrated} calibrated, {s.failed} failed, {s.pending} pending",
                self.calibration_meter.busy_seconds(),
            ),
            ("log-progress", self.log_number, f"{self.tracking.failures} failed after retries", None),
        ]
        table = "\n".join(
            f"| {name} | {n} | {what} | {'' if busy is None else f'{100 * busy / elapsed:.0f}%'} |"
            for name, n, what, busy in rows
        )
        key = "".join(c if c.isalnum() else "-" for c in self.run_id.lower()).strip("-")[:60] or "run"
        try:
            create_markdown_artifact(
                key=f"ndvm-{key}",
                description=f"discovery run {self.run_id}",
                markdown=f"### {self.run_id}: {status} ({self.stop_reason})\n\n| stage | task runs | counts | busy |\n"
                f"|---|---|---|---|\n{table}\n\nbest validation {s.metric}: {s.best_score} ({s.best_hash})",
            )
        except Exception as exc:  # the UI's table is a convenience; the store has the figures
            self.log.warning("could not create the run's summary artifact: %s", exc)

    def report(self, status: str) -> DiscoveryReport:
        from flows.supervisor import SupervisorCounts

        s = self.store.run_status(self.run_id)
        elapsed = max(self.elapsed_final, 1e-9)
        counts = self.supervisor.counts if self.supervisor is not None else SupervisorCounts()
        return DiscoveryReport(
            run_id=self.run_id,
            status=status,
            stop_reason=self.stop_reason,
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
            proposal_busy=self.proposal_meter.busy_seconds() / elapsed,
            calibration_busy=self.calibration_meter.busy_seconds() / elapsed,
            proposal_requests=self.proposal_meter.operations,
            calibration_batches=counts.batches,
            cost_usd=self.cost(),
            tokens=self.tokens(),
            earlier_cost_usd=self.earlier_cost,
            store_path=str(self.store_path.resolve()),
            tracking_uri=self.tracking.tracking_uri,
            mlflow_run_id=self.tracking.parent_run_id or s.mlflow_run_id,
            mlflow_experiment_id=self.tracking.experiment_id,
            champion=None if self.tracking.champion is None else self.tracking.champion.reason,
            logged_entries=self.logged_entries,
            runner=self.runner_choice.describe(),
            workers=sorted(counts.workers),
            proposer=self.config.proposer,
            model=self.config.model,
            crashed=s.crashed,
            timeout=s.timeout,
            retried_alone=counts.retried_alone,
            worker_deaths=counts.worker_deaths,
            workers_replaced=counts.workers_replaced,
            cancelled_at_deadline=self.cancelled_at_deadline,
            store_errors=s.store_errors + self.store_errors,
            mlflow_error=self.tracking.error,
            seed=self.config.seed,
            dataset_fingerprint=self.library.fingerprint,
            reused=s.reused,
            library_seeds=list(self.library.seeds),
            llm=llm_summary(self.proposer, s.new),
        )

    def close(self) -> None:
        self.store.close()


# ---------------------------------------------------------------------------- the Prefect flow
def run_discovery(
    config: DiscoverConfig, budget: Budget, run_id: str | None = None, resume: str | None = None, logger: Any = None
) -> DiscoveryReport:
    """The engine without Prefect's flow wrapper (the flow calls this). ``resume``: continue that run
    with its stored configuration (only the budget is new)."""
    if resume:
        from storage import CandidateStore, StoreError, default_store_path

        try:
            with CandidateStore(default_store_path(config.folder)) as store:
                stored = store.run_status(resume).config
        except StoreError as exc:
            raise DiscoveryError(f"cannot resume {resume!r}: {exc}") from exc
        config = DiscoverConfig.from_dict(
            {**stored, "folder": config.folder, "tracking_uri": config.tracking_uri or stored.get("tracking_uri")}
        )
    discovery = Discovery(config, budget, run_id=run_id, resume=resume, logger=logger)
    try:
        return discovery.run()
    except Exception as exc:
        from storage.health import DiskFullError

        if is_disk_full(exc):  # the store keeps what was committed: say so, and how to go on
            raise DiskFullError.stopped_run(discovery.run_id, config.folder, exc) from exc
        raise
    finally:
        discovery.close()


def _discover(
    task: str = "enso",
    proposer: str = "auto",
    budget: dict[str, Any] | None = None,
    *,
    run_id: str | None = None,
    resume: str | None = None,
    **options: Any,
) -> dict[str, Any]:
    """Discover model programs for ``task`` (a registered dataset, or ``data=FILE`` with x/y columns).

    ``proposer``: auto | mutation | llm | replay. ``budget``: {"minutes", "max_candidates",
    "max_cost_usd", "drain_minutes"}. The other keywords are the options of ``ndvm discover``
    (``discover_options()``; e.g. ``runner="processes"``, ``steps=60``). Results go to
    ``<folder>/candidates.duckdb`` and MLflow (``<folder>/mlflow.db`` by default). A run of a
    deployment (``ndvm serve``) first continues a killed run of the same deployment. Returns the
    report as a dict (see ``DiscoveryReport``).
    """
    from flows.schedule import deployment_name, killed_run_of

    config = build_config(task, proposer, **options)
    deployment = deployment_name()
    if deployment and not resume:  # a scheduled night: continue the night that was killed, if any
        config = dataclasses.replace(config, deployment=deployment)
        resume = killed_run_of(config.folder, deployment)
        if resume:
            get_run_logger().warning(
                "run %s of deployment %s was killed: this run continues it (its configuration, this run's budget)",
                resume,
                deployment,
            )
    report = run_discovery(config, Budget(**(budget or {})), run_id=run_id, resume=resume, logger=get_run_logger())
    get_run_logger().info(
        "run %s %s (%s): %d proposed, %d new, %d calibrated (reused %d evaluations from earlier runs), best %s %s; "
        "busy: proposal %.0f%%, calibration %.0f%%; seed %s",
        report.run_id,
        report.status,
        report.stop_reason,
        report.proposed,
        report.new,
        report.calibrated,
        report.reused,
        report.metric,
        report.best_score,
        100 * report.proposal_busy,
        100 * report.calibration_busy,
        report.seed,
    )
    return report.to_dict()


# The flow's keyword arguments are the options (one list: discover_options()), so Prefect shows,
# validates and coerces each of them (a deployment's parameters, the UI's run form).
_discover.__signature__ = flow_signature(  # type: ignore[attr-defined]
    list(discover_options()),
    leading=("task", "proposer"),
    extra=[
        inspect.Parameter(
            "budget", inspect.Parameter.POSITIONAL_OR_KEYWORD, default=None, annotation=dict[str, Any] | None
        ),
        inspect.Parameter("run_id", inspect.Parameter.KEYWORD_ONLY, default=None, annotation=str | None),
        inspect.Parameter("resume", inspect.Parameter.KEYWORD_ONLY, default=None, annotation=str | None),
    ],
)
_discover.__annotations__ = {
    **{p.name: p.annotation for p in _discover.__signature__.parameters.values()},
    "return": dict[str, Any],
}
discover = flow(name="ndvm-discover", persist_result=False)(_discover)


__all__ = [
    "LLM_MODEL_ENV",
    "PROPOSERS",
    "Budget",
    "DiscoverConfig",
    "Discovery",
    "DiscoveryError",
    "DiscoveryReport",
    "Progress",
    "StageMeter",
    "add_progress_listener",
    "build_config",
    "deadline_batch_size",
    "discover",
    "discover_options",
    "resolve_proposer",
    "run_discovery",
    "status_path",
]
