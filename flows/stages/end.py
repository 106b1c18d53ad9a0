"""The end of a run: its steps after the search (test scoring, the report card, MLflow and its
registry) are each tried whatever the one before did, since the search's results are stored. A
step that fails is recorded here with its failure class's exit code (flows/cli_failures.py) and
the command that retries it; ``ndvm discover`` says so in its last lines and exits with the first
one's code (flows/cli_display.py ``run_exit_code``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from flows.cli_failures import EXIT_INPUT, EXIT_TRACKING, classify_failure


class EndOfRun:
    """The failed end-of-run steps of one run, in order (``failures``: JSON-ready dicts)."""

    def __init__(self, folder: str, logger: Any):
        self.folder, self.logger = folder, logger
        self.failures: list[dict[str, Any]] = []

    def score_and_report(self, runner: Any, score: Any, run_id: str) -> bool:
        """The test split, scored once, then the report card (``score``: the run's ScoreStage).
        False, with the failure recorded, when the search calibrated no candidate at all: then
        there is nothing to score or report, and the run is a failed one."""
        from flows.stages.tasks import report_card_task, score_test_task

        status = score.store.run_status(run_id)
        if status.calibrated == 0:
            errors = score.store.common_errors(run_id, 1)
            common = f"; the most common error ({errors[0][1]} of them): {errors[0][0][:300]}" if errors else ""
            self.failed(
                "search",
                EXIT_INPUT,
                f"no candidate was calibrated ({status.failed} failed, {status.pending} pending){common}",
                "run the discovery again (the data or the proposer's programs changed)",
            )
            return False
        rebuild = f"ndvm report --run {run_id} --folder {self.folder} --rebuild"
        self.step("test scoring", lambda: runner.call(score_test_task, stage=score), rebuild)
        self.step("report card", lambda: runner.call(report_card_task, stage=score), rebuild)
        return True

    def check_tracking(self, error: str | None, run_id: str) -> None:
        """The final MLflow logging (and the registry's decision in it) failed: ``error`` says why."""
        if error:
            self.failed("MLflow logging", EXIT_TRACKING, error, f"ndvm log --run {run_id} --folder {self.folder}")

    def step(self, name: str, call: Callable[[], Any], retry: str) -> None:
        """Run one step; a failure is recorded (with its class's exit code), never raised."""
        try:
            call()
        except Exception as exc:
            code, message = classify_failure(exc, self.folder)
            self.failed(name, code, message, retry)

    def failed(self, name: str, code: int, message: str, retry: str) -> None:
        self.failures.append({"step": name, "exit_code": code, "message": message, "retry": retry})
        self.logger.warning("end of run: %s failed: %s (retry: %s)", name, message, retry)


__all__ = ["EndOfRun"]
