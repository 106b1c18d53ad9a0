"""The log stage: the run to MLflow while it goes (every ``log_every`` seconds) and at its end.

MLflow down does not stop a run: the store keeps everything, the end retries once, and
``ndvm log --run ID`` logs what is still missing (flows/mlflow_log.py). A progress snapshot logs
the counters, the LLM spend and, when the leaderboard changed, its best ``PROGRESS_PODIUM``
entries light (no plots, no model); the end logs the top ``top_k`` whole, the test scores, the
LLM summary and the report card.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from flows.feedback import llm_summary, log_llm_summary
from flows.problem import entry_extras
from flows.stages.tasks import Submitted, TaskRunner, completed, log_progress_task

# Leaderboard entries a progress snapshot logs to MLflow while the run goes on: the best only, and
# light (no plots, no pyfunc model: those cost seconds of the flow process's CPU per entry; the end
# completes them). With the top 3 logged whole, the snapshots of a 2-minute run logged an entry
# every 4 s, back to back, beside the calibration (BENCHMARKS.md, "make run"). The end logs the
# top --top-k whatever this is.
PROGRESS_PODIUM = 1


class LogStage:
    """Owns the run's MLflow tracking (``RunTracking``), the count of logged entries, whether the
    leaderboard changed since the last snapshot, and the snapshot in flight."""

    def __init__(
        self,
        tracking: Any,
        *,
        store: Any,
        run_id: str,
        dataset: Any,
        task: Any,
        top_k: int,
        log_every: float,
        clock: Any,
        propose: Any,
        score: Any,
        log: Any,
    ):
        self.tracking, self.store, self.run_id, self.dataset, self.task = tracking, store, run_id, dataset, task
        self.top_k, self.log_every = top_k, log_every
        self.clock, self.propose, self.score, self.log = clock, propose, score, log
        self.logged_entries = 0
        self.leaderboard_changed = threading.Event()
        self.futures: list[Submitted] = []
        self.done: set[Submitted] = set()
        self.number = 0
        self.next_log = clock.started + log_every

    # ------------------------------------------------------------------ coordinator side
    def submit_due(self, runner: TaskRunner, wake: threading.Event) -> None:
        """One ``log-progress`` snapshot at a time, every ``log_every`` seconds."""
        self.futures = [f for f in self.futures if f not in self.done]
        if self.futures or time.monotonic() < self.next_log:
            return
        podium = min(PROGRESS_PODIUM, self.top_k) if self.leaderboard_changed.is_set() else 0
        self.leaderboard_changed.clear()
        self.number += 1
        future = runner.submit(log_progress_task, stage=self, number=self.number, podium=podium)
        future.add_done_callback(lambda f=future: self._done(f, wake))
        self.futures.append(future)
        self.next_log = time.monotonic() + self.log_every

    def _done(self, future: Submitted, wake: threading.Event) -> None:
        _, error = future.outcome()
        if error is not None:  # after Prefect's retries: a warning, the end retries (RunTracking)
            self.tracking.failures += 1
            self.tracking.error = f"{type(error).__name__}: {str(error)[:500]}"
            self.log.warning("MLflow logging failed (retried at the end): %s", self.tracking.error)
        self.done.add(future)
        wake.set()

    # ------------------------------------------------------------------ the ``log-progress`` task
    def log_progress(self, podium: int) -> Any:
        """The ``log-progress`` task: counters, LLM cost and tokens, and (``podium`` > 0) the
        current top entries to MLflow. Raises on failure: Prefect retries it; the coordinator
        records a final failure as a warning (the end logs everything again)."""
        tracker = self.tracking.tracker
        if tracker is None:
            return completed("MLflow unavailable since the start; everything is logged at the end", 0)
        status = self.store.run_status(self.run_id)
        tracker.log_progress(status)
        self._log_usage(tracker)
        if podium:
            self._log_leaderboard(tracker, podium, light=True)
        return completed(
            f"{status.calibrated} calibrated, best {status.metric} {status.best_score}; top {podium} logged",
            status.calibrated,
        )

    def _log_usage(self, tracker: Any) -> None:
        """The run's LLM cost and tokens (earlier sessions included) as metrics of the parent run."""
        import mlflow

        tokens = self.propose.tokens()
        cost = self.propose.cost()
        if tokens is None and cost is None:
            return
        values = {"llm_cost_usd": cost or 0.0}
        if tokens is not None:
            values.update(llm_tokens_prompt=float(tokens[0]), llm_tokens_completion=float(tokens[1]))
        stamp, step = int(time.time() * 1000), int(self.clock.elapsed())
        tracker.client.log_batch(
            tracker.parent_run_id, metrics=[mlflow.entities.Metric(k, float(v), stamp, step) for k, v in values.items()]
        )

    def _log_leaderboard(self, tracker: Any, k: int, light: bool = False) -> None:
        """The top ``k`` to MLflow; ``light`` (progress): new entries without their artifacts and
        model, which the end's call (not light) adds to every entry (``Tracker.log_leaderboard``)."""

        def extras(digest: str) -> dict[str, Any]:
            evaluation = self.store.evaluation(self.run_id, digest)
            source = self.store.candidate(digest)["source"]
            return entry_extras(self.dataset, self.task, source, evaluation["parameters"])

        logged = tracker.log_leaderboard(self.store, self.run_id, k=k, extras=extras, light=light)
        self.logged_entries += len(logged)

    # ------------------------------------------------------------------ the ``log-final`` task
    def log_final(self, mlflow_status: str) -> Any:
        ok = self.tracking.finish(self._log_final, self.top_k, mlflow_status)
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
        return completed(message, ok)

    def _log_final(self, tracker: Any, k: int) -> None:
        """The final leaderboard, then the test scores on the logged entries and the parent run."""
        from flows.final import log_test_scores
        from flows.report_mlflow import log_report

        self._log_leaderboard(tracker, k)
        log_test_scores(tracker, self.store, self.run_id)
        status = self.store.run_status(self.run_id)  # new candidates the proposer bought: not the seeded ones
        log_llm_summary(tracker, llm_summary(self.propose.proposer, status.new - status.seeded))
        if self.score.report_card is not None:  # report.md/.json on the parent, formulas on the entries
            log_report(tracker, self.store, self.run_id, self.score.report_card)


__all__ = ["PROGRESS_PODIUM", "LogStage"]
