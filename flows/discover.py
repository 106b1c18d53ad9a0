"""The discovery flow: propose, deduplicate, calibrate, score, rank and log, all at once.

    from flows.discover import discover
    report = discover(task="enso", proposer="mutation", budget={"minutes": 2})

Three stages run concurrently inside one Prefect flow run:

- **proposal** (a thread with an asyncio loop): up to ``concurrency`` proposal requests in flight
  (LLM requests, or mutation rounds). As each one returns, its proposals go straight into the
  candidate store, which drops duplicates and invalid programs at once, and the new candidates
  join the calibration queue. When the queue is longer than a few batches, no new request
  starts (calibration is behind; the context will have better parents once it catches up).
- **calibration** (the flow's main thread): whenever a worker slot is free it takes what is
  queued (up to ``batch_size``; it never waits for the next proposals) and submits a batch
  (``flows.calibration.calibrate_batch``: ``ndvm.calibrate_many`` on the training part, held-out
  scoring by the task) to the Prefect task runner (threads, worker processes or Dask). Results
  are recorded in the store as soon as a batch returns: each batch is one transaction, so a
  killed run loses no calibrated candidate, and ``resume=RUN_ID`` continues it.
- **tracking** (a thread): every ``log_every`` seconds it logs the run's counters to the MLflow
  parent run and each new top-3 candidate as a nested run (plots, pyfunc model); at the end, every
  top-``top_k`` candidate not logged yet.

Budgets: wall time (``minutes``: proposing stops then, queued candidates are calibrated within a
drain allowance, the rest stay pending for a resume), number of new candidates
(``max_candidates``), and LLM cost (``max_cost_usd``). The report gives the busy fraction of the
proposal and calibration stages: the share of the run's wall time during which at least one
proposal request, or one calibration batch, was in flight.
"""
from __future__ import annotations

import asyncio
import collections
import json
import logging
import math
import os
import sys
import threading
import time
import uuid
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Callable

from prefect import flow, get_run_logger

from flows.calibration import BatchItem, BatchResult, CalibrationOptions
from flows.problem import ProblemSpec, entry_extras, load_problem, probe_inputs, task_spec
from flows import faults
from flows.feedback import ResidualNotes, RoundFeedback, llm_summary, log_llm_summary
from flows.mlflow_log import RunTracking
from flows.night import open_run_library, with_seed
from flows.report import finish_report
from flows.runners import RunnerChoice, worker_environment
from flows.supervisor import CalibrationSupervisor
from proposers.niches import NicheArchive, store_programs

log = logging.getLogger("ndvm.discover")

PROPOSERS = ("auto", "mutation", "llm", "replay")
LLM_MODEL_ENV = "NDVM_LLM_MODEL"


class DiscoveryError(RuntimeError):
    """A discovery run that cannot start or continue (bad configuration, unknown run to resume)."""


# ---------------------------------------------------------------------------- configuration
@dataclass(frozen=True)
class Budget:
    """When a run stops proposing: whichever limit comes first (None: no limit of that kind)."""

    minutes: float | None = 2.0
    max_candidates: int | None = None   # new (unique, valid) candidates accepted by the run
    max_cost_usd: float | None = None   # LLM cost as litellm reports it
    drain_minutes: float | None = None  # calibrating what is queued after the deadline; None: auto

    def check(self) -> "Budget":
        if self.minutes is None and self.max_candidates is None and self.max_cost_usd is None:
            raise DiscoveryError("a run needs a budget: minutes, max_candidates or max_cost_usd")
        for name in ("minutes", "max_candidates", "max_cost_usd", "drain_minutes"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise DiscoveryError(f"budget {name} must be >= 0, got {value}")
        return self

    def drain_seconds(self) -> float:
        """How long queued candidates may still be calibrated after the wall-time deadline."""
        if self.drain_minutes is not None:
            return 60.0 * self.drain_minutes
        if self.minutes is None:
            return math.inf
        return min(120.0, max(15.0, 0.15 * 60.0 * self.minutes))


@dataclass(frozen=True)
class DiscoverConfig:
    """Everything that defines a run (stored with it, so ``resume`` continues it the same way)."""

    problem: ProblemSpec = field(default_factory=ProblemSpec)
    proposer: str = "mutation"          # mutation | llm | replay
    model: str | None = None            # litellm model for the llm proposer
    api_base: str | None = None         # OpenAI-compatible server, Ollama, ...
    llm_env: str | None = None          # environment variable holding the API key (its name only)
    replay: str | None = None           # JSONL file for the replay proposer
    seed: int | None = None             # None: drawn at the start of the run (flows/night.py), then stored
    fresh: bool = False                 # no reuse of earlier runs' evaluations, no seeds from them (storage/library.py)
    concurrency: int = 8                # proposal requests in flight (mutation: 1)
    per_request: int = 4                # programs per request (mutation: 16 per round)
    temperature: float | None = None    # None: the provider's default (some models accept no other)
    llm_timeout: float = 60.0           # seconds per LLM request (--request-timeout)
    price_per_token: tuple[float, float] | None = None  # (input, output) USD per token, for unpriced models
    batch_size: int = 32
    calibration: CalibrationOptions = field(default_factory=CalibrationOptions)
    candidate_seconds: float | None = None  # per-candidate time limit (calibration + scoring, alone)
    runner: RunnerChoice = field(default_factory=RunnerChoice)
    top_k: int = 10                     # leaderboard entries logged to MLflow
    test_top_k: int = 10                # final leaderboard entries scored on the test split at the end
    max_stale_rounds: int = 5           # stop proposing after this many rounds in a row with nothing new (0: never)
    serial: bool = False                # one proposal round at a time, each calibrated before the next
                                        # (reproducible: same seed -> same proposals, whatever the timing)
    log_every: float = 10.0             # seconds between MLflow progress snapshots
    folder: str = "runs"
    tracking_uri: str | None = None     # None: sqlite under the run folder

    def to_dict(self) -> dict[str, Any]:
        return json.loads(json.dumps(asdict(self), default=str))

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "DiscoverConfig":
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in data.items() if k in known}
        values["problem"] = ProblemSpec(**data.get("problem", {}))
        values["calibration"] = CalibrationOptions(**data.get("calibration", {}))
        values["runner"] = RunnerChoice(**data.get("runner", {}))
        if values.get("llm_env") == "***":  # redacted by an older store; fall back to the provider's variable
            values["llm_env"] = None
        return cls(**values)


def resolve_proposer(proposer: str, model: str | None) -> tuple[str, str | None]:
    """``auto``: the LLM proposer when a model is given (``--model`` or $NDVM_LLM_MODEL), else mutation."""
    if proposer not in PROPOSERS:
        raise DiscoveryError(f"unknown proposer {proposer!r}; use one of {', '.join(PROPOSERS)}")
    model = model or os.environ.get(LLM_MODEL_ENV) or None
    if proposer == "auto":
        proposer = "llm" if model else "mutation"
    if proposer == "llm" and not model:
        raise DiscoveryError(f"the llm proposer needs a model: --model or ${LLM_MODEL_ENV} (e.g. openai/gpt-4o-mini)")
    return proposer, model if proposer == "llm" else None


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

    return LLMProposer(config.model, temperature=config.temperature, concurrency=config.concurrency,
                       timeout=config.llm_timeout, api_base=config.api_base, api_key_env=config.llm_env,
                       per_request=config.per_request, seed=config.seed + seed_offset,
                       price_per_token=None if config.price_per_token is None else tuple(config.price_per_token))


# ---------------------------------------------------------------------------- measuring
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
    cost_usd: float | None           # LLM cost of the whole run, earlier sessions (resumes) included
    tokens: tuple[int, int] | None   # (prompt, completion) tokens of the whole run
    earlier_cost_usd: float          # the part of cost_usd spent before this session (from the store)
    store_path: str
    tracking_uri: str
    mlflow_run_id: str | None
    mlflow_experiment_id: str | None
    logged_entries: int
    runner: str
    workers: list[str]
    proposer: str
    model: str | None
    # Pipeline faults (flows/supervisor.py, flows/mlflow_log.py): what the run survived.
    crashed: int = 0                 # candidates that killed their worker, then again alone
    timeout: int = 0                 # candidates over --candidate-seconds alone
    retried_alone: int = 0           # candidates retried alone after their batch failed
    worker_deaths: int = 0           # worker processes that died under a batch
    workers_replaced: int = 0
    cancelled_at_deadline: int = 0   # in calibration at the hard deadline: left pending
    store_errors: int = 0            # proposals the store could not write (recorded with the error)
    mlflow_error: str | None = None  # why MLflow logging is incomplete (None: all logged)
    # The program library (storage/library.py, flows/night.py)
    seed: int | None = None          # the run's seed (drawn unless given): --seed S --serial --fresh replays it
    dataset_fingerprint: str | None = None
    reused: int = 0                  # evaluations taken from earlier runs on the same fingerprint
    library_seeds: list[str] = field(default_factory=list)  # earlier runs' best programs it started from
    llm: dict[str, Any] | None = None  # this session's LLM spend: tokens, cached tokens, cost per new (flows/feedback.py)

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


def status_path(folder: str | Path, run_id: str) -> Path:
    """The run's status file, rewritten every second: the store itself is locked by the writer."""
    return Path(folder) / "status" / f"{run_id}.json"


# ---------------------------------------------------------------------------- the engine
class Discovery:
    """One discovery run (or the continuation of one). ``run()`` blocks until the budget is spent."""

    def __init__(self, config: DiscoverConfig, budget: Budget, run_id: str | None = None, resume: str | None = None,
                 logger: Any = None):
        from storage import CandidateStore, default_store_path

        config = with_seed(config)  # a run without --seed draws one (flows/night.py)
        self.config, self.budget = config, budget.check()
        self.log = logger or log
        self.runner_choice = config.runner.check()
        self.dataset, self.task = load_problem(config.problem)
        self.spec = task_spec(self.dataset, self.task)
        self.options = CalibrationOptions(**{**asdict(config.calibration),
                                             "threads": config.calibration.threads or self.runner_choice.native_threads(),
                                             "max_seconds": config.candidate_seconds})
        self.folder = Path(config.folder)
        self.store_path = default_store_path(self.folder)
        self.store = CandidateStore(self.store_path)
        try:
            self._open_run(run_id, resume)
            # earlier runs on the same data: reuse their evaluations, start from their best programs
            self.library, seeds_left = open_run_library(self.store, self.run_id, self.dataset, self.task, config,
                                                        resumed=bool(resume), program_source=self.spec.program_source,
                                                        log=self.log)
            self.queue_initial += seeds_left
            # MLflow down does not stop a run: the store keeps everything, the end retries.
            self.tracking = RunTracking(
                self.store, self.run_id, tracking_uri=config.tracking_uri, folder=self.folder,
                config=self.config.to_dict(), budget=asdict(self.budget),
                names=dict(dataset=self.config.problem.label, task=self.task.kind, proposer=config.proposer,
                           model=config.model),
                entry_hook=lambda digest: faults.checkpoint("logging", hash=digest), logger=self.log)
            self.tracking.connect()
        except BaseException:
            self.store.close()
            raise
        # The LLM spend of the run's earlier sessions, from the store: --max-cost bounds the whole run.
        earlier = self.resumed_from
        self.earlier_cost = (earlier.llm_cost_usd or 0.0) if earlier else 0.0
        self.earlier_tokens = ((earlier.llm_tokens_in or 0, earlier.llm_tokens_out or 0) if earlier else (0, 0))
        self.earlier_cached = (getattr(earlier, "llm_tokens_cached", None) or 0) if earlier else 0
        self.proposer = make_proposer(config, seed_offset=self.resumed_from.proposed if self.resumed_from else 0)
        # An unpriced model makes --max-cost toothless: say so at the start, not after the bill.
        self.cost_warning = (self.proposer.cost_limit_problem() if self.budget.max_cost_usd is not None
                             and hasattr(self.proposer, "cost_limit_problem") else None)
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
        self.store.start_run(self.run_id, dataset=self.config.problem.label, task=self.task.kind,
                             proposer=self.config.proposer, model=self.config.model, config=self.config.to_dict(),
                             budget=asdict(self.budget), metric=self.task.primary_metric,
                             probe_inputs=probe_inputs(self.task))

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
            self.stop_proposing.set()

    # ------------------------------------------------------------------ proposal stage
    def _context(self) -> Any:
        from proposers import Budget as ProposalBudget, ProposalContext

        # the best program, then one per structural niche; as duplicates rise, the less-visited niches
        best = self.niches.select(store_programs(self.store, self.run_id), 5, explore=self.feedback.duplicate_rate)
        b = self.budget
        left = ProposalBudget(
            proposals_left=None if b.max_candidates is None else max(0, b.max_candidates - self.accepted),
            seconds_left=None if b.minutes is None else max(0.0, 60.0 * b.minutes - self.elapsed()),
            cost_left_usd=None if b.max_cost_usd is None else max(0.0, b.max_cost_usd - (self.cost() or 0.0)))
        fb = self.feedback
        return ProposalContext(self.spec, best=best, failures=list(self.failures), budget=left,
                               duplicates=list(fb.last_duplicates), duplicate_rate=fb.duplicate_rate,
                               stale_rounds=fb.stale_rounds, residuals=self._residuals())

    def _residuals(self) -> str:
        """Where the run's best program fails on validation (LLM prompt only; refreshed when the best changes)."""
        if self.config.proposer != "llm":
            return ""
        return self.residuals.text(next(self.store.top(1, run_id=self.run_id).iter_rows(named=True), None))

    def _queue_limit(self) -> int:
        return 2 * self.config.batch_size * self.runner_choice.batches_in_flight()

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

    def _accept(self, proposals: list[Any]) -> None:
        """Into the store at once; the new candidates join the calibration queue. With a candidate
        budget the proposals are added in slices so the run accepts exactly that many."""
        with self.accept_lock:  # replies of concurrent requests arrive in worker threads
            new = self._accept_locked(proposals)
            self.feedback.record(self.store, self.run_id, proposals, {c.proposed_source or c.source for c in new})

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
        self.log.warning("proposal not stored (%s: %s); source: %r", type(error).__name__, str(error)[:300],
                         source[:200])
        try:
            self.store.record_store_error(self.run_id, proposal, error)
        except Exception as again:  # the store cannot write at all: keep the count in memory
            self.store_errors += 1
            self.log.warning("recording the store error failed too: %s", again)

    async def _one_request(self, n: int) -> None:
        from proposers import Failure

        self.proposal_meter.enter()
        try:
            proposals = await self.proposer.apropose(self._context(), n)
        except Exception as exc:  # a proposer bug or an API failure it did not absorb: record, go on
            if type(exc).__name__ == "LLMFatalError":  # a wrong key or model: retrying all night helps nobody
                raise
            self.log.warning("proposal request failed: %s", exc)
            self.failures.append(Failure("api", f"{type(exc).__name__}: {exc}"[:500], proposer=self.config.proposer))
            proposals = []
        finally:
            self.proposal_meter.exit()
        for failure in self.proposer.drain_failures():
            self.failures.append(failure)
        await asyncio.to_thread(self._save_usage)  # a failed request may have cost too
        if proposals:
            await asyncio.to_thread(self._accept, proposals)
        else:  # a round with no valid proposal at all gave nothing new either
            self.feedback.record(self.store, self.run_id, [], set())
        if self.feedback.stale() and not self.stop_proposing.is_set():
            # the proposer only repeats itself (or fails): stop paying for it. What is queued may
            # still use the wall time the run was given (the usual drain counts from the stop).
            self._stop(self.feedback.stop_message())
            if self.budget.minutes is not None and self.drain_deadline is not None:
                self.drain_deadline = max(self.drain_deadline, self.started + 60.0 * self.budget.minutes
                                          + self.budget.drain_seconds())

    async def _propose_loop(self) -> None:
        mutation_like = self.config.proposer in ("mutation", "replay")
        in_flight = 1 if mutation_like else self.config.concurrency
        n = 16 if mutation_like else self.config.per_request
        tasks: set[asyncio.Task] = set()
        while True:
            while len(tasks) < in_flight and self._may_propose():
                tasks.add(asyncio.create_task(self._one_request(n)))
            if not tasks:
                if self.stop_proposing.is_set():
                    break
                await asyncio.sleep(0.05)  # the calibration queue is full: wait for it to drain
                continue
            done, tasks = await asyncio.wait(tasks, timeout=0.25, return_when=asyncio.FIRST_COMPLETED)
            # only a fatal proposer error escapes _one_request: stop the run with it (every finished
            # request's error is taken, so asyncio does not log the others as never retrieved)
            fatal = [r.exception() for r in done if not r.cancelled() and r.exception() is not None]
            if fatal:
                for other in tasks:
                    other.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)  # collected, not logged as lost
                raise fatal[0]
            if self.stop_proposing.is_set() and tasks:
                # Requests already in flight finish (their proposals are paid for), then stop; not
                # beyond the hard deadline, though: late ones are cancelled.
                left = None if self.drain_deadline is None else max(0.0, self.drain_deadline - time.monotonic())
                _, late = await asyncio.wait(tasks, timeout=left)
                for request in late:
                    request.cancel()
                tasks = set()

    def _proposal_thread(self) -> None:
        try:
            asyncio.run(self._propose_loop())
        except BaseException as exc:  # surfaced by run()
            self.errors.append(exc)
            self._stop(f"proposal stage failed: {exc}")

    # ------------------------------------------------------------------ calibration stage
    def _take_batch(self) -> list[BatchItem]:
        with self.queue_lock:
            items = []
            while self.queue and len(items) < self.config.batch_size:
                items.append(self.queue.popleft())
            return items

    def _record(self, items: list[BatchItem], results: list[BatchResult]) -> None:
        from proposers import Failure
        from storage import EvaluationResult

        sources = {item.hash: item.source for item in items}
        faults.checkpoint("recording", hashes=[r.hash for r in results])
        self.store.record([EvaluationResult(
            candidate=r.hash, run_id=self.run_id, dataset=self.config.problem.label, task=self.task.kind,
            split=self.split_label, parameters=r.parameters, train_metrics=r.train_metrics,
            heldout_metrics=r.heldout_metrics, seconds=r.seconds, status=r.status, error=r.error,
            loss_history=r.loss_history) for r in results])
        for r in results:
            if r.status != "ok":
                self.failures.append(Failure("eval", f"calibration/scoring failed: {r.error}"[:500],
                                             source=sources.get(r.hash), proposer="calibration"))
        with self.accept_lock:  # last: a serial run proposes again once this reaches 0
            self.unrecorded -= len(results)

    @property
    def split_label(self) -> str:
        return self.task.split_label()

    # ------------------------------------------------------------------ the end: the test split, once
    def _score_test_split(self) -> None:
        """Score the final top ``test_top_k`` and the references on the test split (flows/final.py).
        Only here, after the search has stopped: nothing the search reads depends on it."""
        from flows.final import score_final

        started = time.monotonic()
        rows = score_final(self.store, self.run_id, self.task, self.options, k=self.config.test_top_k)
        self.log.info("test split: %d entries and references scored in %.1f s", len(rows), time.monotonic() - started)

    def _log_final(self, tracker: Any, k: int) -> None:
        """The final leaderboard, then the test scores on the logged entries and the parent run."""
        from flows.final import log_test_scores
        from flows.report import log_report

        self._log_leaderboard(tracker, k)
        log_test_scores(tracker, self.store, self.run_id)
        log_llm_summary(tracker, llm_summary(self.proposer, self.store.run_status(self.run_id).new))
        if self.report_card is not None:  # report.md/.json on the parent, formulas on the entries
            log_report(tracker, self.store, self.run_id, self.report_card)

    def _calibration_loop(self) -> None:
        """Submit batches whenever a worker is free, record results as they come (the supervisor
        turns crashes and overruns into retries alone, then ``crashed``/``timeout`` results). The
        hard deadline (``drain_deadline``) cancels what is still in calibration: it stays pending."""
        supervisor = self.supervisor
        assert supervisor is not None
        last_progress = 0.0
        while True:
            for items, results in supervisor.collect(0.05):  # one transaction per batch
                self._record(items, results)
                self.leaderboard_changed.set()
            if self.errors:
                raise self.errors[0]
            if not self.stop_proposing.is_set():
                reason = self._budget_reason()
                if reason:
                    self._stop(reason)
            past_drain = self.drain_deadline is not None and time.monotonic() > self.drain_deadline
            # Never wait for the next proposals: a free slot takes whatever is queued now.
            supervisor.fill(self._take_batch, new_batches=not past_drain)
            if time.monotonic() - last_progress >= 1.0:
                last_progress = time.monotonic()
                self._publish("proposing" if not self.stop_proposing.is_set() else "draining")
            with self.queue_lock:
                queued = len(self.queue)
            if past_drain:
                left = supervisor.cancel()
                self.cancelled_at_deadline = len(left)
                if left or queued:
                    self.stop_reason += (f"; hard deadline: {len(left)} candidates in calibration cancelled and "
                                         f"{queued} queued, left pending (resume continues)")
                return
            if not self.proposal_thread.is_alive() and not supervisor.busy() and queued == 0:
                return

    # ------------------------------------------------------------------ tracking stage
    def _log_leaderboard(self, tracker: Any, k: int) -> None:
        def extras(digest: str) -> dict[str, Any]:
            evaluation = self.store.evaluation(self.run_id, digest)
            source = self.store.candidate(digest)["source"]
            return entry_extras(self.dataset, self.task, source, evaluation["parameters"])

        logged = tracker.log_leaderboard(self.store, self.run_id, k=k, extras=extras)
        self.logged_entries += len(logged)

    def _tracking_thread(self) -> None:
        while not self.finished.is_set():
            self.leaderboard_changed.wait(timeout=self.config.log_every)
            if self.finished.is_set():
                return
            # During the run only the podium: the top 10 churns while the search improves, and
            # each entry costs MLflow about a second of CPU. The end logs the top k. A failure is
            # a warning (RunTracking): MLflow trouble must not stop the search.
            podium = min(3, self.config.top_k) if self.leaderboard_changed.is_set() else 0
            self.leaderboard_changed.clear()
            self.tracking.log_during_run(self.store.run_status(self.run_id), self._log_leaderboard, podium)
            self.finished.wait(timeout=self.config.log_every)

    # ------------------------------------------------------------------ progress
    def progress(self, phase: str) -> Progress:
        status = self.store.run_status(self.run_id)
        elapsed = max(self.elapsed(), 1e-9)
        with self.queue_lock:
            queued = len(self.queue)
        return Progress(
            run_id=self.run_id, elapsed=elapsed, proposed=status.proposed, new=status.new,
            duplicates=status.duplicates, invalid=status.invalid, calibrated=status.calibrated, failed=status.failed,
            pending=status.pending, queued=queued, best_score=status.best_score, best_hash=status.best_hash,
            metric=status.metric, proposal_busy=self.proposal_meter.busy_seconds() / elapsed,
            calibration_busy=self.calibration_meter.busy_seconds() / elapsed, cost_usd=self.cost(), phase=phase,
            reused=status.reused)

    def _publish(self, phase: str) -> Progress:
        snapshot = self.progress(phase)
        path = status_path(self.folder, self.run_id)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(snapshot)))
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
        with self.queue_lock:
            self.queue.extend(self.queue_initial)
        if self.queue_initial:
            self.log.info("resuming %s: %d candidates were pending", self.run_id, len(self.queue_initial))
        self.proposal_thread = threading.Thread(target=self._proposal_thread, name="ndvm-propose", daemon=True)
        tracking = threading.Thread(target=self._tracking_thread, name="ndvm-tracking", daemon=True)
        status, mlflow_status = "failed", "FAILED"
        try:
            with worker_environment(self.runner_choice) as api_url, \
                    self.runner_choice.backend(self.task, self.options, api_url) as (backend, isolation):
                self.supervisor = CalibrationSupervisor(
                    backend, candidate_seconds=self.config.candidate_seconds, threads=self.options.threads,
                    isolation=isolation, meter=self.calibration_meter, log=self.log)
                self.proposal_thread.start()
                tracking.start()
                try:
                    self._calibration_loop()
                finally:
                    self.supervisor.close()
            status, mlflow_status = "finished", "FINISHED"
            self._score_test_split()
            self.report_card = finish_report(self.store, self.run_id, self.task, self.folder, self.log,
                                             calibrate_options=self.options.as_kwargs())
        except KeyboardInterrupt:
            status, mlflow_status = "interrupted", "KILLED"
            self._stop("interrupted")
            raise
        finally:
            self._stop(self.stop_reason or "stopped")
            self.finished.set()
            self.leaderboard_changed.set()  # wakes the tracking thread, which then sees `finished`
            if self.proposal_thread.is_alive():
                self.proposal_thread.join(timeout=30)
            if tracking.is_alive():
                tracking.join(timeout=60)
            self.elapsed_final = self.elapsed()
            try:
                if tracking.is_alive():  # MLflow is stuck in a call: the final logging would wait behind it
                    self.tracking.error = "MLflow did not answer within 60 s at the end of the run"
                    self.log.warning("%s; log the results later with `ndvm log --run %s`", self.tracking.error,
                                     self.run_id)
                else:  # bounded, never raises: the results are in the store whatever MLflow does
                    self.tracking.finish(self._log_final, self.config.top_k, mlflow_status)
            finally:
                self._save_usage()
                self.store.set_run_status(self.run_id, status)
                self._publish(status)
        return self.report(status)

    def report(self, status: str) -> DiscoveryReport:
        from flows.supervisor import SupervisorCounts

        s = self.store.run_status(self.run_id)
        elapsed = max(self.elapsed_final, 1e-9)
        counts = self.supervisor.counts if self.supervisor is not None else SupervisorCounts()
        return DiscoveryReport(
            run_id=self.run_id, status=status, stop_reason=self.stop_reason, elapsed_seconds=elapsed,
            proposed=s.proposed, new=s.new, duplicates=s.duplicates, invalid=s.invalid, calibrated=s.calibrated,
            failed=s.failed, pending=s.pending, metric=s.metric, best_score=s.best_score, best_hash=s.best_hash,
            proposal_busy=self.proposal_meter.busy_seconds() / elapsed,
            calibration_busy=self.calibration_meter.busy_seconds() / elapsed,
            proposal_requests=self.proposal_meter.operations, calibration_batches=counts.batches,
            cost_usd=self.cost(), tokens=self.tokens(), earlier_cost_usd=self.earlier_cost,
            store_path=str(self.store_path.resolve()), tracking_uri=self.tracking.tracking_uri,
            mlflow_run_id=self.tracking.parent_run_id or s.mlflow_run_id,
            mlflow_experiment_id=self.tracking.experiment_id, logged_entries=self.logged_entries,
            runner=self.runner_choice.describe(), workers=sorted(counts.workers), proposer=self.config.proposer,
            model=self.config.model, crashed=s.crashed, timeout=s.timeout, retried_alone=counts.retried_alone,
            worker_deaths=counts.worker_deaths, workers_replaced=counts.workers_replaced,
            cancelled_at_deadline=self.cancelled_at_deadline, store_errors=s.store_errors + self.store_errors,
            mlflow_error=self.tracking.error, seed=self.config.seed, dataset_fingerprint=self.library.fingerprint,
            reused=s.reused, library_seeds=list(self.library.seeds), llm=llm_summary(self.proposer, s.new))

    def close(self) -> None:
        self.store.close()


# ---------------------------------------------------------------------------- the Prefect flow
def build_config(task: str = "enso", proposer: str = "auto", *, model: str | None = None, api_base: str | None = None,
                 api_key_env: str | None = None, replay: str | None = None, data: str | None = None,
                 x: str | None = None, y: str | None = None, group: str | None = None, task_kind: str | None = None,
                 seed: int | None = None, concurrency: int = 8, per_request: int = 4, batch_size: int = 32, steps: int = 100,
                 restarts: int = 8, optimizer: str = "adam", lr: float = 0.05, runner: str = "threads",
                 workers: int | None = None, dask_address: str | None = None, top_k: int = 10,
                 log_every: float = 10.0, folder: str = "runs", tracking_uri: str | None = None,
                 candidate_seconds: float | None = None, test_top_k: int = 10,
                 serial: bool = False, train_fraction: float | None = None,
                 validation_fraction: float | None = None, dataset_options: dict[str, Any] | None = None,
                 temperature: float | None = None, request_timeout: float = 60.0,
                 price_per_token: tuple[float, float] | None = None, max_stale_rounds: int = 5,
                 fresh: bool = False) -> DiscoverConfig:
    kind, model = resolve_proposer(proposer, model)
    if max_stale_rounds < 0:
        raise DiscoveryError(f"max_stale_rounds must be >= 0 (0: never stop), got {max_stale_rounds}")
    if batch_size < 1 or concurrency < 1 or per_request < 1:
        raise DiscoveryError("batch_size, concurrency and per_request must be >= 1")
    if test_top_k < 0:
        raise DiscoveryError(f"test_top_k must be >= 0, got {test_top_k}")
    if candidate_seconds is not None and not candidate_seconds > 0:
        raise DiscoveryError(f"candidate_seconds must be > 0, got {candidate_seconds}")
    if not request_timeout > 0:
        raise DiscoveryError(f"request_timeout must be > 0 seconds, got {request_timeout}")
    return DiscoverConfig(
        problem=ProblemSpec(dataset=task, data=data, x=x, y=y, group=group, task_kind=task_kind,
                            train_fraction=train_fraction, validation_fraction=validation_fraction,
                            options=dict(dataset_options) if dataset_options else None), proposer=kind,
        temperature=temperature, llm_timeout=request_timeout,
        price_per_token=None if price_per_token is None else tuple(price_per_token),
        model=model, api_base=api_base, llm_env=api_key_env, replay=replay, seed=seed, concurrency=concurrency,
        per_request=per_request, batch_size=batch_size,
        calibration=CalibrationOptions(optimizer=optimizer, steps=steps, lr=lr, restarts=restarts, seed=seed),
        runner=RunnerChoice(runner, workers, dask_address).check(), top_k=top_k, log_every=log_every, folder=folder,
        tracking_uri=tracking_uri, candidate_seconds=candidate_seconds, test_top_k=test_top_k, serial=serial,
        max_stale_rounds=max_stale_rounds, fresh=fresh)


def run_discovery(config: DiscoverConfig, budget: Budget, run_id: str | None = None, resume: str | None = None,
                  logger: Any = None) -> DiscoveryReport:
    """The engine without Prefect's flow wrapper (the flow calls this). ``resume``: continue that run
    with its stored configuration (only the budget is new)."""
    if resume:
        from storage import CandidateStore, StoreError, default_store_path

        try:
            with CandidateStore(default_store_path(config.folder)) as store:
                stored = store.run_status(resume).config
        except StoreError as exc:
            raise DiscoveryError(f"cannot resume {resume!r}: {exc}") from exc
        config = DiscoverConfig.from_dict({**stored, "folder": config.folder,
                                           "tracking_uri": config.tracking_uri or stored.get("tracking_uri")})
    discovery = Discovery(config, budget, run_id=run_id, resume=resume, logger=logger)
    try:
        return discovery.run()
    finally:
        discovery.close()


@flow(name="ndvm-discover", persist_result=False)
def discover(task: str = "enso", proposer: str = "auto", budget: dict[str, Any] | None = None, *,
             model: str | None = None, api_base: str | None = None, api_key_env: str | None = None,
             replay: str | None = None, data: str | None = None, x: str | None = None, y: str | None = None,
             group: str | None = None, task_kind: str | None = None, seed: int | None = None, concurrency: int = 8,
             per_request: int = 4, batch_size: int = 32, steps: int = 100, restarts: int = 8,
             optimizer: str = "adam", lr: float = 0.05, runner: str = "threads", workers: int | None = None,
             dask_address: str | None = None, top_k: int = 10, log_every: float = 10.0, folder: str = "runs",
             tracking_uri: str | None = None, run_id: str | None = None, resume: str | None = None,
             candidate_seconds: float | None = None, test_top_k: int = 10,
             serial: bool = False, train_fraction: float | None = None,
             validation_fraction: float | None = None, dataset_options: dict[str, Any] | None = None,
             temperature: float | None = None, request_timeout: float = 60.0,
             price_per_token: tuple[float, float] | None = None, max_stale_rounds: int = 5,
             fresh: bool = False) -> dict[str, Any]:
    """Discover model programs for ``task`` (a registered dataset, or ``data=FILE`` with x/y columns).

    ``proposer``: auto | mutation | llm | replay. ``budget``: {"minutes", "max_candidates",
    "max_cost_usd", "drain_minutes"}. ``runner``: threads | processes | dask (``dask_address``).
    Results go to ``<folder>/candidates.duckdb`` and MLflow (``<folder>/mlflow.db`` by default).
    Returns the report as a dict (see ``DiscoveryReport``).
    """
    config = build_config(task, proposer, model=model, api_base=api_base, api_key_env=api_key_env, replay=replay,
                          data=data, x=x, y=y, group=group, task_kind=task_kind, seed=seed, concurrency=concurrency,
                          per_request=per_request, batch_size=batch_size, steps=steps, restarts=restarts,
                          optimizer=optimizer, lr=lr, runner=runner, workers=workers, dask_address=dask_address,
                          top_k=top_k, log_every=log_every, folder=folder, tracking_uri=tracking_uri,
                          candidate_seconds=candidate_seconds, test_top_k=test_top_k, serial=serial,
                          train_fraction=train_fraction, validation_fraction=validation_fraction,
                          dataset_options=dataset_options, temperature=temperature, request_timeout=request_timeout,
                          price_per_token=price_per_token, max_stale_rounds=max_stale_rounds, fresh=fresh)
    report = run_discovery(config, Budget(**(budget or {})), run_id=run_id, resume=resume, logger=get_run_logger())
    get_run_logger().info(
        "run %s %s (%s): %d proposed, %d new, %d calibrated (reused %d evaluations from earlier runs), best %s %s; "
        "busy: proposal %.0f%%, calibration %.0f%%; seed %s", report.run_id, report.status, report.stop_reason,
        report.proposed, report.new, report.calibrated, report.reused, report.metric, report.best_score,
        100 * report.proposal_busy, 100 * report.calibration_busy, report.seed)
    return report.to_dict()


__all__ = ["Budget", "DiscoverConfig", "Discovery", "DiscoveryError", "DiscoveryReport", "Progress", "StageMeter",
           "add_progress_listener", "build_config", "discover", "resolve_proposer", "run_discovery", "status_path"]
