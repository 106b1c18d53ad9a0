"""The propose stage: proposal requests, each with its proposals handed to the admit stage.

Up to ``concurrency`` ``propose`` tasks are in flight (an offline proposer: one at a time, of
``round_size`` programs, and one task run makes up to ``OFFLINE_ROUNDS_PER_REQUEST`` rounds).
No new request starts while the calibration queue is full (calibration is behind; the context
will have better parents once it catches up). What a proposer needs beyond the defaults it
declares in its ``traits`` (proposers/base.py ``ProposerTraits``); nothing here names a proposer.
"""

from __future__ import annotations

import asyncio
import collections
import threading
from collections.abc import Callable
from typing import Any

from flows.feedback import ResidualNotes
from flows.progress import StageMeter
from flows.stages.tasks import ProposalsNotRecorded, Submitted, TaskRunner, completed, propose_task
from proposers.base import LLMFatalError
from proposers.niches import NicheArchive, store_programs
from storage.health import is_disk_full

# Rounds of an offline proposer (mutation, replay) one `propose` task run may make.
OFFLINE_ROUNDS_PER_REQUEST = 4


class ProposeStage:
    """Owns the proposer, its spend (this session's and the run's earlier sessions'), the recent
    failures the next context names, the niche archive parents are drawn from, the residual
    notes, and the requests in flight (so the hard deadline can cancel them)."""

    def __init__(
        self,
        proposer: Any,
        *,
        config: Any,
        store: Any,
        run_id: str,
        spec: Any,
        task: Any,
        clock: Any,
        admit: Any,
        score: Any,
        earlier: Any,
        log: Any,
    ):
        self.proposer = proposer
        self.config, self.store, self.run_id, self.spec = config, store, run_id, spec
        self.clock, self.admit, self.score, self.log = clock, admit, score, log
        # The LLM spend of the run's earlier sessions, from the store: --max-cost bounds the whole run.
        self.earlier_cost = (earlier.llm_cost_usd or 0.0) if earlier else 0.0
        self.earlier_tokens = (earlier.llm_tokens_in or 0, earlier.llm_tokens_out or 0) if earlier else (0, 0)
        self.earlier_cached = (getattr(earlier, "llm_tokens_cached", None) or 0) if earlier else 0
        self.failures: collections.deque[Any] = collections.deque(maxlen=8)  # recent, for the proposers' context
        self.niches = NicheArchive(config.seed)  # parents drawn across structural niches (proposers/niches.py)
        self.residuals = ResidualNotes(task)  # where the best fails on validation (proposers that want it)
        self.task = task
        self.reference_names: dict[str, str] | None = None  # reference program text -> the task's name for it
        self.meter = StageMeter()
        self.may_propose: Callable[[], bool] = lambda: False  # set by the coordinator
        self.live_requests: set[tuple[Any, Any]] = set()  # (event loop, asyncio task) of requests in flight
        self.requests_lock = threading.Lock()
        self.futures: list[Submitted] = []
        self.done: set[Submitted] = set()
        self.number = 0

    @property
    def traits(self) -> Any:
        return self.proposer.traits

    # ------------------------------------------------------------------ spend
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

    def exhausted(self) -> bool:
        """The proposer has nothing more to give (a replay file read to its end)."""
        return bool(getattr(self.proposer, "exhausted", False))

    def cost_warning(self) -> str | None:
        """Why ``--max-cost`` cannot bound this proposer (an unpriced model), or None."""
        check = getattr(self.proposer, "cost_limit_problem", None)
        return check() if check is not None else None

    def save_usage(self) -> None:
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

    # ------------------------------------------------------------------ the context of a round
    def context(self) -> Any:
        from proposers import Budget as ProposalBudget
        from proposers import ProposalContext

        feedback = self.admit.feedback
        # the best program, then one per structural niche; as duplicates rise, the less-visited niches
        programs = store_programs(self.store, self.run_id)
        best = self.niches.select(programs, 5, explore=feedback.duplicate_rate)
        b = self.clock.budget
        left = ProposalBudget(
            proposals_left=None if b.max_candidates is None else max(0, b.max_candidates - self.admit.accepted),
            seconds_left=self.clock.seconds_left(),
            cost_left_usd=None if b.max_cost_usd is None else max(0.0, b.max_cost_usd - (self.cost() or 0.0)),
        )
        return ProposalContext(
            self.spec,
            best=best,
            failures=list(self.failures),
            budget=left,
            duplicates=list(feedback.last_duplicates),
            duplicate_rate=feedback.duplicate_rate,
            stale_rounds=feedback.stale_rounds,
            residuals=self._residuals(),
            references=self._references(programs),
        )

    def _references(self, programs: list[Any]) -> list[Any]:
        """The task's reference programs the run started from, named as the task names them, with
        their validation scores and fitted values once calibrated (``programs``: the run's
        calibrated programs, ``store_programs``)."""
        from proposers import ReferenceProgram
        from storage.library import reference_results

        if self.reference_names is None:
            self.reference_names = {source: name for name, source in self.task.reference_programs()}
        calibrated = {p.canonical_hash: p for p in programs}
        out = []
        for ref in reference_results(self.store, self.run_id):
            name = self.reference_names.get(ref.source, "reference")
            scored = calibrated.get(ref.hash)
            if scored is None:  # pending or failed: the task's own text
                out.append(ReferenceProgram(name, ref.source, status=ref.status, canonical_hash=ref.hash))
            else:  # the stored text, whose parameter names the fitted values use
                out.append(ReferenceProgram(name, scored.source, scored.score, scored.params, ref.status, ref.hash))
        return out

    def _residuals(self) -> str:
        """Where the run's best program fails on validation (for a proposer that wants it;
        refreshed when the best changes)."""
        if not self.traits.wants_residuals:
            return ""
        return self.residuals.text(next(self.store.top(1, run_id=self.run_id).iter_rows(named=True), None))

    # ------------------------------------------------------------------ requests (coordinator side)
    def shape(self) -> tuple[int, int]:
        """(requests in flight, programs per request): an offline proposer one round at a time."""
        if self.traits.offline:
            return 1, self.traits.round_size
        return self.config.concurrency, self.config.per_request

    def collect_finished(self) -> None:
        """The requests that ended: a failure is noted for the next context (a fatal one raises)."""
        for future in [f for f in self.futures if f in self.done]:
            self.futures.remove(future)
            self.done.discard(future)
            _, error = future.outcome()
            if error is not None:
                self.request_failed(error)

    def submit_more(self, runner: TaskRunner, wake: threading.Event) -> None:
        """New requests while ``may_propose`` allows, up to the proposer's requests in flight."""
        in_flight, per_request = self.shape()
        while len(self.futures) < in_flight and self.may_propose():
            self.number += 1
            future = runner.submit(propose_task, stage=self, number=self.number, n=per_request)
            self.futures.append(future)
            future.add_done_callback(lambda f=future: self._done(f, wake))

    def _done(self, future: Submitted, wake: threading.Event) -> None:
        self.done.add(future)
        wake.set()

    def request_failed(self, error: BaseException) -> None:
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
        self.admit.empty_round()
        self.check_stale()

    def check_stale(self) -> None:
        feedback = self.admit.feedback
        if feedback.stale() and not self.clock.stop_proposing.is_set():
            # the proposer only repeats itself (or fails): stop paying for it (what is queued may
            # still use the wall time the run was given: RunClock.stop)
            self.clock.stop(feedback.stop_message(), self.run_id)

    # ------------------------------------------------------------------ the ``propose`` task
    def request(self, number: int, n: int) -> Any:
        """The ``propose`` task: one request for ``n`` programs, then its proposals into the store
        (the admit stage, in the same task run: a task run costs the flow and Prefect's server as
        much CPU as a calibration). An offline proposer goes on with further rounds, each from a
        fresh context, while the queue and the budget allow (``rounds_per_request``): the rounds
        the coordinator would have submitted next, without a task run each. Raises what the
        proposer did not absorb (Prefect retries it)."""
        proposed = new = 0
        self.meter.enter()
        try:
            for round_number in range(self.rounds_per_request()):
                if round_number and not self.may_propose():
                    break
                counts = self._round(number, n)
                if counts is None:
                    return completed("cancelled at the hard deadline", proposed)
                if self.clock.finished.is_set():  # the run ended while this request was out: the store is closing
                    return completed(f"{counts['proposals']} proposals arrived after the end of the run; dropped", 0)
                proposed, new = proposed + counts["proposals"], new + counts["new"]
        finally:
            self.meter.exit()
        return completed(
            f"{proposed} proposals: {new} new, {proposed - new} duplicate, invalid or over the candidate budget",
            proposed,
        )

    def rounds_per_request(self) -> int:
        """Proposal rounds one ``propose`` task run may make: an offline proposer's rounds take a
        tenth of a second, less than the task run around them; one request of any other per task
        run (its retries are per request); one round in a serial run (calibrated before the next)."""
        if self.traits.offline and not self.config.serial:
            return OFFLINE_ROUNDS_PER_REQUEST
        return 1

    def _round(self, number: int, n: int) -> dict[str, int] | None:
        """One proposal round of ``n`` programs (request ``number``) into the store; None: cancelled
        at the hard deadline. Raises ProposalsNotRecorded when the reply cannot be recorded."""
        self.score.await_recorded()
        try:
            proposals = self._cancellable(self.proposer.apropose(self.context(), n))
        except asyncio.CancelledError:  # the hard deadline (cancel_requests)
            return None
        finally:
            for failure in self.proposer.drain_failures():
                self.failures.append(failure)
            self.save_usage()  # a failed request may have cost too
        if self.clock.finished.is_set():
            return {"proposals": len(proposals), "new": 0}
        if proposals:
            try:
                counts = self.admit.deduplicate(proposals, already_simplified=self.traits.simplifies)
            except Exception as exc:
                kept = self.admit.keep_unrecorded(proposals)
                raise ProposalsNotRecorded(
                    f"request {number}: {len(proposals)} proposals arrived but recording them failed "
                    f"({type(exc).__name__}: {exc}); {kept}"
                ) from exc
        else:  # a round with no valid proposal at all gave nothing new either
            self.admit.empty_round()
            counts = {"proposals": 0, "new": 0}
        self.check_stale()
        return counts

    def _cancellable(self, coro: Any) -> Any:
        """Run the proposer's coroutine on an event loop of this thread, registered so that the
        hard deadline can cancel it from the coordinator (``cancel_requests``)."""

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

    def cancel_requests(self) -> None:
        with self.requests_lock:
            live = list(self.live_requests)
        for loop, request in live:
            loop.call_soon_threadsafe(request.cancel)


__all__ = ["OFFLINE_ROUNDS_PER_REQUEST", "ProposeStage"]
