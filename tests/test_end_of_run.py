"""The end of a run (flows/stages/end.py, issue 36): each step tried whatever the one before did,
a failure recorded with its class's exit code and retry, a search that calibrated nothing a failed
run with its most common error, and the Python API saying so (a DiscoveryError, or a warning)."""

from __future__ import annotations

import errno
import logging

import pytest

from flows.cli_failures import EXIT_DISK, EXIT_INPUT, EXIT_INTERNAL, EXIT_TRACKING
from flows.stages.end import EndOfRun
from storage import CandidateStore, EvaluationResult


class _Score:  # what score_and_report reads of the run's ScoreStage
    def __init__(self, store):
        self.store = store


class _Runner:  # runs a stage the way TaskRunner.call does outside a flow run: a plain call
    def __init__(self, outcomes):
        self.outcomes, self.calls = outcomes, []

    def call(self, task_obj, stage):
        self.calls.append(task_obj.name)
        outcome = self.outcomes.get(task_obj.name)
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome


@pytest.fixture
def store(tmp_path):
    with CandidateStore(tmp_path / "candidates.duckdb") as s:
        yield s


def _evaluated(store, run, ok: bool, error: str = "no restart produced a finite loss"):
    _evaluated.n += 1  # distinct programs: an exact integer is structure (not a duplicate)
    [c] = store.add([f"(param a 0.5) (* a (expt x {_evaluated.n}))"], run)
    store.record(
        [
            EvaluationResult(
                c.hash, run, "d", "curve", "s", {"a": 1.0} if ok else {}, {}, {"rmse": 0.1} if ok else {},
                0.01, status="ok" if ok else "error", error=None if ok else error,
            )
        ]
    )  # fmt: skip


_evaluated.n = 0  # type: ignore[attr-defined]


def test_every_step_is_tried_and_each_failure_keeps_its_class(store, tmp_path):
    run = store.start_run("r1", metric="rmse")
    _evaluated(store, run, ok=True)
    end = EndOfRun(str(tmp_path), logging.getLogger("test"))
    runner = _Runner({"score-test-split": OSError(errno.ENOSPC, "No space left on device"), "report-card": None})
    assert end.score_and_report(runner, _Score(store), run) is True
    assert runner.calls == ["score-test-split", "report-card"]  # the card is tried after the failure
    [failure] = end.failures
    assert failure["step"] == "test scoring" and failure["exit_code"] == EXIT_DISK
    assert "disk is full" in failure["message"] and failure["retry"].startswith(f"ndvm report --run {run}")
    end.step("report card", lambda: 1 / 0, "ndvm report --run r1")
    assert end.failures[-1]["exit_code"] == EXIT_INTERNAL and "ZeroDivisionError" in end.failures[-1]["message"]
    end.check_tracking(None, run)
    assert len(end.failures) == 2  # MLflow answered: nothing recorded
    end.check_tracking("ConnectionError: refused", run)
    assert end.failures[-1]["exit_code"] == EXIT_TRACKING and end.failures[-1]["retry"].startswith("ndvm log --run r1")


def test_a_search_that_calibrated_nothing_fails_with_its_most_common_error(store, tmp_path):
    run = store.start_run("r2", metric="rmse")
    for _ in range(3):
        _evaluated(store, run, ok=False)
    _evaluated(store, run, ok=False, error="the target has 200 values but the program returned 3")
    assert store.common_errors(run, 2) == [
        ("no restart produced a finite loss", 3),
        ("the target has 200 values but the program returned 3", 1),
    ]
    end = EndOfRun(str(tmp_path), logging.getLogger("test"))
    runner = _Runner({})
    assert end.score_and_report(runner, _Score(store), run) is False
    assert runner.calls == []  # nothing to score or report
    [failure] = end.failures
    assert failure["step"] == "search" and failure["exit_code"] == EXIT_INPUT
    assert "no candidate was calibrated (4 failed, 0 pending)" in failure["message"]
    assert "(3 of them): no restart produced a finite loss" in failure["message"]


def test_the_api_raises_for_an_empty_search_and_warns_for_a_failed_step():
    from flows.api import _say_end_failures
    from flows.errors import DiscoveryError

    search = {"step": "search", "exit_code": 1, "message": "no candidate was calibrated (4 failed, 0 pending)"}
    with pytest.raises(DiscoveryError, match=r"run r2: no candidate was calibrated \(4 failed"):
        _say_end_failures({"run_id": "r2", "end_failures": [{**search, "retry": "run it again"}]})
    card = {"step": "report card", "exit_code": 70, "message": "internal error: X", "retry": "ndvm report --run r3"}
    with pytest.warns(RuntimeWarning, match=r"end of run r3: report card failed .*ndvm report --run r3"):
        _say_end_failures({"run_id": "r3", "end_failures": [card]})
    _say_end_failures({"run_id": "r4", "end_failures": []})  # nothing to say
