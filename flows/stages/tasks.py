"""The pipeline's Prefect tasks, and how the coordinator runs them.

Each stage of a run is a Prefect task, so the Prefect UI shows the pipeline: every proposal
request with its admission into the store (``propose-N``), every calibration batch with its
recording (``calibrate-batch-N``), the periodic MLflow logging (``log-progress-N``) and the end
(``score-test-split``, ``report-card``, ``log-final``), each with its duration and its counts (the
final state's message, e.g. "16 proposals: 12 new"). The bodies are methods of the stage objects
(flows/stages/); the task functions only name them. Inputs are live objects and results are
recorded by the run itself, so nothing is cached or persisted by Prefect.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Callable
from typing import Any

from prefect import task
from prefect.cache_policies import NO_CACHE

from proposers.base import LLMFatalError

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
def propose_task(stage: Any, number: int, n: int) -> Any:
    """One proposal request (an LLM request, a mutation round), then its proposals into the store
    (``ProposeStage.request``, which hands them to the admit stage)."""
    return stage.request(number, n)


@task(name="calibrate-batch", task_run_name="calibrate-batch-{number}", **_TASK)
def calibrate_task(stage: Any, number: int, batch: Any) -> Any:
    """One calibration batch, from its hand-over to a supervised worker until all its results are
    recorded (validation scores included: the worker scores each fit on the validation split;
    ``ScoreStage.record_batch``)."""
    return stage.record_batch(batch)


@task(name="log-progress", task_run_name="log-progress-{number}", retries=2, retry_delay_seconds=2.0, **_TASK)
def log_progress_task(stage: Any, number: int, podium: int) -> Any:
    """The run's counters, LLM cost and (when it changed) the podium to MLflow; retried on failure."""
    return stage.log_progress(podium)


@task(name="score-test-split", task_run_name="score-test-split", **_TASK)
def score_test_task(stage: Any) -> Any:
    """The final top ``test_top_k`` and the references on the test split, once, at the end."""
    return stage.score_test_split()


@task(name="report-card", task_run_name="report-card", **_TASK)
def report_card_task(stage: Any) -> Any:
    return stage.write_report_card()


@task(name="log-final", task_run_name="log-final", **_TASK)
def log_final_task(stage: Any, mlflow_status: str) -> Any:
    """The final leaderboard, test scores, report card, cost and end status to MLflow (bounded;
    it retries once itself; what fails is logged later by ``ndvm log``)."""
    return stage.log_final(mlflow_status)


class Submitted:
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


class TaskRunner:
    """Runs the pipeline's tasks: as Prefect task runs inside a flow run (the ``discover`` flow),
    as plain calls on a thread pool when ``Discovery`` is used without one (no retries then)."""

    def __init__(self) -> None:
        from prefect.context import FlowRunContext

        self.prefect = FlowRunContext.get() is not None
        self.pool = None if self.prefect else concurrent.futures.ThreadPoolExecutor(thread_name_prefix="ndvm-stage")

    def submit(self, task_obj: Any, **parameters: Any) -> Submitted:
        if self.prefect:
            return Submitted(task_obj.submit(**parameters), True)
        assert self.pool is not None
        return Submitted(self.pool.submit(task_obj.fn, **parameters), False)

    def call(self, task_obj: Any, **parameters: Any) -> Any:
        """Run a stage now, in this thread (a nested task run inside another task)."""
        if self.prefect:
            return _unwrap(task_obj(**parameters, return_state=True).result())
        return _unwrap(task_obj.fn(**parameters))

    @staticmethod
    def wait(futures: list[Submitted], seconds: float | None) -> bool:
        """Wait for submitted stages to end (True), at most ``seconds`` for all of them together."""
        pending = [f.future for f in futures]
        if not pending:
            return True
        if futures[0].prefect:
            from prefect.futures import wait

            return not wait(pending, timeout=seconds).not_done
        return not concurrent.futures.wait(pending, timeout=seconds).not_done

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=False, cancel_futures=True)


def completed(message: str, data: Any) -> Any:
    """A task's final state: ``message`` for the Prefect UI, ``data`` for the coordinator."""
    from prefect.states import Completed

    return Completed(message=message, data=data)


__all__ = [
    "ProposalsNotRecorded",
    "Submitted",
    "TaskRunner",
    "calibrate_task",
    "completed",
    "log_final_task",
    "log_progress_task",
    "propose_task",
    "report_card_task",
    "score_test_task",
]
