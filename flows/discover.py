"""The discovery flow: propose, admit, calibrate, score and log, all at once.

    from flows.discover import discover
    report = discover(task="enso", proposer="mutation", budget={"minutes": 2})

A run is five stages, each an object that owns its state (flows/stages/), in the order data moves
through them:

- **propose** (``ProposeStage``): proposal requests (an LLM request, mutation rounds), up to
  ``concurrency`` in flight, none while the calibration queue is full;
- **admit** (``AdmitStage``): each request's proposals into the store, which drops duplicates and
  invalid programs; the new candidates join the calibration queue;
- **calibrate** (``CalibrateStage``): what is queued, in batches, to free supervised workers
  (worker processes or Dask), which fit on the training split and score on validation;
- **score** (``ScoreStage``): each batch's results into the store as they come back (so a killed
  run loses no calibrated candidate and ``resume=RUN_ID`` continues it); at the end the test
  split, once, and the report card;
- **log** (``LogStage``): MLflow every ``log_every`` seconds, and at the end.

Every stage's unit of work is a Prefect task (``propose-N``, ``calibrate-batch-N``,
``log-progress-N``, then ``score-test-split``, ``report-card``, ``log-final``: flows/stages/tasks.py),
so the Prefect UI shows the pipeline with each stage's duration and counts. ``Discovery`` is the
small coordinator: the flow's own thread runs ``Discovery.coordinate``, which names the stages in
that order, and the run's budget lives in its ``RunClock`` (flows/stages/clock.py). The report
gives the busy fraction of the proposal and calibration stages: the share of the run's wall time
during which at least one proposal request, or one calibration batch, was in flight.

The flow's keyword arguments, ``build_config`` and the command-line options of ``ndvm discover``
are generated from ``DiscoverConfig``'s fields (flows/options.py).
"""

from __future__ import annotations

import dataclasses
import inspect
import logging
import sys
import threading
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger

from flows import schedule  # (schedule.deployment_name is looked up per run: tests stand in for Prefect)
from flows.calibration import CalibrationOptions
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
from flows.feedback import RoundFeedback
from flows.night import with_seed
from flows.opening import open_run
from flows.options import flow_signature
from flows.problem import load_problem, task_spec
from flows.progress import (
    DiscoveryReport,
    Progress,
    StageMeter,
    add_progress_listener,
    build_report,
    publish,
    summary_artifact,
)
from flows.proposer_registry import make_proposer
from flows.stages.admit import AdmitStage
from flows.stages.calibrate import CalibrateStage
from flows.stages.clock import DEADLINE_MARGIN_SECONDS, DEADLINE_SAFETY, RunClock, deadline_batch_size
from flows.stages.end import EndOfRun
from flows.stages.log import PROGRESS_PODIUM, LogStage
from flows.stages.propose import OFFLINE_ROUNDS_PER_REQUEST, ProposeStage
from flows.stages.score import RECORD_WAIT_SECONDS, ScoreStage
from flows.stages.tasks import TaskRunner, log_final_task
from flows.status import status_path
from storage import CandidateStore, StoreError, default_store_path
from storage.health import is_disk_full
from storage.store import SNAPSHOT_SECONDS

log = logging.getLogger("ndvm.discover")


# ---------------------------------------------------------------------------- the coordinator
class Discovery:
    """One discovery run (or the continuation of one): its stages and the loop that drives them.
    ``run()`` blocks until the budget is spent."""

    def __init__(
        self,
        config: DiscoverConfig,
        budget: Budget,
        run_id: str | None = None,
        resume: str | None = None,
        logger: Any = None,
    ):
        config = with_seed(config)  # a run without --seed draws one (flows/night.py)
        self.config, self.budget = config, budget.check()
        self.logger = logger or log
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
            opened = open_run(
                self.store,
                config,
                self.budget,
                self.dataset,
                self.task,
                self.spec,
                self.folder,
                run_id,
                resume,
                self.logger,
            )
        except BaseException:
            self.store.close()
            raise
        self.run_id, self.resumed_from, self.library = opened.run_id, opened.resumed_from, opened.library
        self.queue_initial, tracking = opened.queue_initial, opened.tracking
        proposer = make_proposer(config, seed_offset=self.resumed_from.proposed if self.resumed_from else 0)
        self.clock = RunClock(self.budget, self.logger)
        self.wake = threading.Event()  # set when a task ends: the coordinator looks again
        self.runner: TaskRunner | None = None
        self.elapsed_final = 0.0
        self.end = EndOfRun(str(self.folder), self.logger)  # the end-of-run steps that failed
        status = self.store.run_status(self.run_id)
        common = dict(store=self.store, run_id=self.run_id, log=self.logger)
        # The stages, in the order data moves through them (flows/stages/).
        self.score = ScoreStage(
            label=config.problem.label,
            task=self.task,
            options=self.options,
            test_top_k=config.test_top_k,
            folder=self.folder,
            finished=self.clock.finished,
            **common,
        )
        self.calibrate = CalibrateStage(
            config=config,
            runner_choice=self.runner_choice,
            options=self.options,
            task=self.task,
            clock=self.clock,
            score=self.score,
            log=self.logger,
        )
        self.admit = AdmitStage(
            program_source=self.spec.program_source,
            library=self.library,
            max_candidates=self.budget.max_candidates,
            # duplicates and stale rounds (flows/feedback.py); named only to a proposer that reads them
            feedback=RoundFeedback(config.max_stale_rounds, name_duplicates=proposer.traits.names_duplicates),
            enqueue=self.calibrate.enqueue,
            folder=self.folder,
            accepted=status.new - status.seeded,  # new candidates of the run so far (library seeds not counted)
            unrecorded=len(self.queue_initial),  # accepted, not recorded yet (serial mode waits for 0)
            **common,
        )
        self.propose = ProposeStage(
            proposer,
            config=config,
            spec=self.spec,
            task=self.task,
            clock=self.clock,
            admit=self.admit,
            score=self.score,
            earlier=self.resumed_from,
            **common,
        )
        self.log = LogStage(
            tracking,
            dataset=self.dataset,
            task=self.task,
            top_k=config.top_k,
            log_every=config.log_every,
            clock=self.clock,
            propose=self.propose,
            score=self.score,
            **common,
        )
        # How the stages hear of each other's work.
        self.propose.may_propose = self._may_propose
        self.score.failures = self.propose.failures  # failed fits are named in the next context too
        self.score.on_recorded = [self.admit.recorded, lambda n: self.log.leaderboard_changed.set(), self._wake]
        # An unpriced model makes --max-cost toothless: say so at the start, not after the bill.
        self.cost_warning = self.propose.cost_warning() if self.budget.max_cost_usd is not None else None
        if self.cost_warning:
            self.logger.warning("--max-cost: %s", self.cost_warning)
            print(f"ndvm discover: warning: {self.cost_warning}", file=sys.stderr)

    def _wake(self, _: int = 0) -> None:
        self.wake.set()

    # ------------------------------------------------------------------ budget
    def _budget_reason(self) -> str | None:
        return self.clock.budget_reason(self.admit.accepted, self.propose.cost(), self.propose.exhausted())

    def _stop(self, reason: str) -> None:
        self.clock.stop(reason, self.run_id)

    def _may_propose(self) -> bool:
        """Another proposal round may start: the budget is not spent, a serial run's last round is
        all recorded, and the calibration queue has room."""
        if self.clock.stop_proposing.is_set():
            return False
        if self.config.serial and self.admit.unrecorded > 0:  # serial: the last round is not all recorded yet
            return False
        reason = self._budget_reason()
        if reason:
            self._stop(reason)
            return False
        return self.calibrate.has_room()

    # ------------------------------------------------------------------ the run
    def run(self) -> DiscoveryReport:
        """Run the pipeline until the budget is spent. Inside the ``discover`` flow every stage's
        work is a Prefect task; the flow's own thread coordinates them (``coordinate``)."""
        self.calibrate.enqueue(self.queue_initial)
        self.score.fit_references_early()  # scored at the end; fitted on the training split now
        self.runner = runner = TaskRunner()
        status, mlflow_status = "failed", "FAILED"
        try:
            with self.calibrate.workers(runner, self.wake):
                self.coordinate()
                runner.wait(self.calibrate.futures, None)  # the last results recorded before the end reads them
            # failures recorded, not raised; a search that calibrated nothing is a failed run
            searched = self.end.score_and_report(runner, self.score, self.run_id)
            status, mlflow_status = ("finished", "FINISHED") if searched else ("failed", "FAILED")
        except KeyboardInterrupt:
            status, mlflow_status = "interrupted", "KILLED"
            self._stop("interrupted")
            raise
        finally:
            self._stop(self.clock.stop_reason or "stopped")
            self.clock.finished.set()
            self.calibrate.release([], "stopped")
            self.propose.cancel_requests()
            runner.wait(self.propose.futures, 30.0)
            runner.wait(self.calibrate.futures, 30.0)
            logging_stuck = not runner.wait(self.log.futures, 60.0)
            self.elapsed_final = self.clock.elapsed()
            try:
                if logging_stuck:  # MLflow is stuck in a call: the final logging would wait behind it
                    self.log.tracking.error = "MLflow did not answer within 60 s at the end of the run"
                    self.logger.warning(
                        "%s; log the results later with `ndvm log --run %s`", self.log.tracking.error, self.run_id
                    )
                elif self.clock.stop_reason == "interrupted":  # no more task runs: a plain call
                    log_final_task.fn(stage=self.log, mlflow_status=mlflow_status)
                else:  # bounded, never raises: the results are in the store whatever MLflow does
                    runner.call(log_final_task, stage=self.log, mlflow_status=mlflow_status)
                if status in ("finished", "failed"):
                    self.end.check_tracking(self.log.tracking.error, self.run_id)
            finally:
                self.propose.save_usage()
                self.store.set_run_status(self.run_id, status)
                self._publish(status)
                self._summary_artifact(status)
                runner.close()
        return self.report(status)

    def coordinate(self) -> None:
        """The flow's thread: the stages in the order data moves through them, again and again.
        Proposal requests start while the budget and the calibration queue allow (each admits its
        own proposals), free workers get what is queued (never waiting for the next proposals),
        results go to their batches' tasks (which score them into the store), and the periodic
        logging is submitted; woken by every finished task and by the workers."""
        runner = self.runner
        assert runner is not None
        last_progress = 0.0
        while True:
            self.wake.clear()
            # propose (and admit, inside each request): finished requests first, then new ones
            self.propose.collect_finished()
            if not self.clock.stop_proposing.is_set() and (reason := self._budget_reason()):
                self._stop(reason)
            self.propose.submit_more(runner, self.wake)
            # calibrate (and score, in each batch's task): results to their batches, then new batches
            self.calibrate.collect()
            past_drain = self.clock.past_drain()
            self.calibrate.fill(new_batches=not past_drain)
            # log: one snapshot at a time, every log_every seconds
            self.log.submit_due(runner, self.wake)
            if time.monotonic() - last_progress >= 1.0:
                last_progress = time.monotonic()
                self._publish("proposing" if not self.clock.stop_proposing.is_set() else "draining")
            if self._ended(past_drain):
                return
            if not self.calibrate.busy():  # (collect() above waited for the workers)
                # idle until a task ends; short, so the deadline and the progress display stay on time
                self.wake.wait(0.2)

    def _ended(self, past_drain: bool) -> bool:
        """The hard deadline has passed (what is in calibration is cancelled and stays pending),
        or proposing is over and calibration has nothing left it could finish in time."""
        queued = self.calibrate.queued()
        if past_drain:
            cancelled = self.calibrate.cancel_at_deadline()
            self.propose.cancel_requests()
            if cancelled or queued:
                self.clock.stop_reason += (
                    f"; hard deadline: {cancelled} candidates in calibration cancelled and "
                    f"{queued} queued, left pending (resume continues)"
                )
            return True
        proposing_done = self.clock.stop_proposing.is_set() and not self.propose.futures
        if proposing_done and not self.calibrate.busy() and (queued == 0 or self.calibrate.batch_size_now() == 0):
            if queued:  # not even one would finish before the hard deadline: no need to wait for it
                self.clock.stop_reason += (
                    f"; {queued} queued left pending: they would not be calibrated before the hard "
                    "deadline (resume continues)"
                )
            return True
        return False

    # ------------------------------------------------------------------ progress and the report
    def progress(self, phase: str) -> Progress:
        status = self.store.run_status(self.run_id)
        elapsed = max(self.clock.elapsed(), 1e-9)
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
            queued=self.calibrate.queued(),
            best_score=status.best_score,
            best_hash=status.best_hash,
            metric=status.metric,
            proposal_busy=self.propose.meter.busy_seconds() / elapsed,
            calibration_busy=self.calibrate.meter.busy_seconds() / elapsed,
            cost_usd=self.propose.cost(),
            phase=phase,
            reused=status.reused,
        )

    def _publish(self, phase: str) -> Progress:
        return publish(self.progress(phase), self.folder, self.logger)

    def _summary_artifact(self, status: str) -> None:
        """A table of the run's stages in the Prefect UI (the flow run's Artifacts tab)."""
        if self.runner is None or not self.runner.prefect:
            return
        s = self.store.run_status(self.run_id)
        elapsed = max(self.elapsed_final, 1e-9)
        rows = [
            (
                "propose",
                self.propose.number,
                f"{s.proposed} proposals: {s.new} new, {s.duplicates} duplicates, {s.invalid} invalid",
                self.propose.meter.busy_seconds(),
            ),
            (
                "calibrate-batch",
                self.calibrate.number,
                f"{s.calibrated} calibrated, {s.failed} failed, {s.pending} pending",
                self.calibrate.meter.busy_seconds(),
            ),
            ("log-progress", self.log.number, f"{self.log.tracking.failures} failed after retries", None),
        ]
        summary_artifact(self.run_id, status, self.clock.stop_reason, rows, elapsed, s, self.logger)

    def report(self, status: str) -> DiscoveryReport:
        return build_report(self, status)

    def close(self) -> None:
        self.store.close()


# ---------------------------------------------------------------------------- the Prefect flow
def run_discovery(
    config: DiscoverConfig, budget: Budget, run_id: str | None = None, resume: str | None = None, logger: Any = None
) -> DiscoveryReport:
    """The engine without Prefect's flow wrapper (the flow calls this). ``resume``: continue that run
    with its stored configuration (only the budget is new)."""
    if resume:
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
    config = build_config(task, proposer, **options)
    deployment = schedule.deployment_name()
    if deployment and not resume:  # a scheduled night: continue the night that was killed, if any
        config = dataclasses.replace(config, deployment=deployment)
        resume = schedule.killed_run_of(config.folder, deployment)
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
    "DEADLINE_MARGIN_SECONDS",
    "DEADLINE_SAFETY",
    "LLM_MODEL_ENV",
    "OFFLINE_ROUNDS_PER_REQUEST",
    "PROGRESS_PODIUM",
    "PROPOSERS",
    "RECORD_WAIT_SECONDS",
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
