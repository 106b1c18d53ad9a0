"""The calibration supervisor on real worker processes, without a flow: a worker that aborts is
replaced and only its own job fails, an idle worker killed from outside is replaced before the
next job, a job past its limit has its worker killed, and the supervisor turns a failed batch into
retries alone and then ``crashed`` / ``timeout`` results (flows/supervisor.py)."""

from __future__ import annotations

import os
import signal
import time

import pytest
from test_flows_faults import TERMS, enso_task, hashes_of, program


@pytest.fixture(scope="module")
def task():
    return enso_task()


def _items(task, n: int):
    from flows.calibration import BatchItem

    sources = [program(t) for t in TERMS[:n]]
    return [BatchItem(h, s, task.program_source(s)) for h, s in zip(hashes_of(task, sources), sources)]


def _until(pool, jobs: int, seconds: float = 60):
    outcomes, deadline = [], time.monotonic() + seconds
    while len(outcomes) < jobs and time.monotonic() < deadline:
        outcomes += pool.poll(0.2)
    return outcomes


OPTIONS = dict(steps=20, restarts=2, threads=1)


def test_a_dead_worker_is_replaced_and_only_its_job_fails(task, monkeypatch):
    from flows.calibration import CalibrationOptions
    from flows.supervisor import Job, WorkerPool

    items = _items(task, 3)
    monkeypatch.setenv("NDVM_TEST_CRASH_HASHES", items[0].hash)  # read by the spawned workers
    pool = WorkerPool(task, CalibrationOptions(**OPTIONS), workers=2)
    try:
        pool.submit(Job(1, [items[0]], alone=False, seconds=None))
        pool.submit(Job(2, items[1:], alone=False, seconds=None))
        outcomes = {o.job.id: o for o in _until(pool, 2)}
        assert outcomes[1].kind == "crashed" and "SIGABRT" in outcomes[1].detail
        assert outcomes[2].kind == "done" and [r.hash for r in outcomes[2].results] == [i.hash for i in items[1:]]
        assert pool.replaced == 1 and pool.free_slots() == 2
        # Both workers work, the replacement too; then an idle worker killed from outside is
        # replaced before the next job.
        pool.submit(Job(3, [items[1]], alone=True, seconds=None))
        pool.submit(Job(5, [items[2]], alone=True, seconds=None))
        third, fifth = _until(pool, 2)
        assert third.kind == fifth.kind == "done"
        assert len({third.worker, fifth.worker}) == 2 and outcomes[1].worker not in {third.worker, fifth.worker}
        pid = int(third.worker.rsplit(":", 1)[1])
        os.kill(pid, signal.SIGKILL)
        time.sleep(0.5)
        pool.submit(Job(4, [items[2]], alone=True, seconds=None))
        [fourth] = _until(pool, 1)
        assert fourth.kind == "done" and pool.replaced == 2
    finally:
        pool.close()


def test_a_job_past_its_limit_has_its_worker_killed(task, monkeypatch):
    from flows.calibration import CalibrationOptions
    from flows.supervisor import Job, WorkerPool

    items = _items(task, 2)
    monkeypatch.setenv("NDVM_TEST_SLOW_HASHES", items[0].hash)
    pool = WorkerPool(task, CalibrationOptions(**OPTIONS), workers=1)
    try:
        started = time.monotonic()
        pool.submit(Job(1, [items[0]], alone=True, seconds=1.0))
        [outcome] = _until(pool, 1)
        assert outcome.kind == "timeout" and time.monotonic() - started < 30
        pool.submit(Job(2, [items[1]], alone=True, seconds=30.0))  # the replacement calibrates
        [outcome] = _until(pool, 1)
        assert outcome.kind == "done" and outcome.results[0].status in ("ok", "error")
    finally:
        pool.close()


def test_the_supervisor_retries_a_failed_batch_alone_then_marks_the_culprit(task, monkeypatch):
    from flows.calibration import CalibrationOptions
    from flows.supervisor import CalibrationSupervisor, WorkerPool

    items = _items(task, 4)
    monkeypatch.setenv("NDVM_TEST_CRASH_HASHES", items[1].hash)
    monkeypatch.setenv("NDVM_TEST_SLOW_HASHES", items[2].hash)
    supervisor = CalibrationSupervisor(
        WorkerPool(task, CalibrationOptions(**OPTIONS), workers=1), candidate_seconds=2.0, threads=1
    )
    queue = [items]
    recorded = {}
    try:
        deadline = time.monotonic() + 120
        while (queue or supervisor.busy()) and time.monotonic() < deadline:
            supervisor.fill(lambda: queue.pop() if queue else [])
            for _batch, results in supervisor.collect(0.2):
                recorded.update({r.hash: r for r in results})
    finally:
        supervisor.close()
    assert sorted(recorded) == sorted(i.hash for i in items)
    assert recorded[items[1].hash].status == "crashed" and "SIGABRT" in recorded[items[1].hash].error
    assert recorded[items[2].hash].status == "timeout"
    assert {recorded[items[i].hash].status for i in (0, 3)} <= {"ok", "error"}
    counts = supervisor.counts
    assert (counts.batches, counts.retried_alone, counts.crashed, counts.timeout) == (1, 4, 1, 1)
    assert supervisor.seconds_per_candidate() is None  # a failed batch and candidates alone time nothing


def test_the_supervisor_times_its_batches_per_candidate(task):
    """The wall time per candidate of the batches that ended well: what sizes the batches handed
    over near the hard deadline (flows.discover.deadline_batch_size)."""
    from flows.calibration import CalibrationOptions
    from flows.supervisor import CalibrationSupervisor, WorkerPool

    supervisor = CalibrationSupervisor(WorkerPool(task, CalibrationOptions(**OPTIONS), workers=1), threads=1)
    queue = [_items(task, 3)]
    try:
        started, deadline = time.monotonic(), time.monotonic() + 120
        while (queue or supervisor.busy()) and time.monotonic() < deadline:
            supervisor.fill(lambda: queue.pop() if queue else [])
            supervisor.collect(0.2)
        took = time.monotonic() - started  # (the worker's start-up included: the estimate leaves it out)
    finally:
        supervisor.close()
    per_candidate = supervisor.seconds_per_candidate()
    assert per_candidate is not None and 0 < per_candidate < took / 3


def test_batches_near_the_deadline_hold_only_what_finishes_before_it():
    from flows.discover import DEADLINE_MARGIN_SECONDS, DEADLINE_SAFETY, deadline_batch_size

    assert deadline_batch_size(32, 600.0, 0.1) == 32  # far from the deadline: the configured size
    per_batch_of_10 = DEADLINE_MARGIN_SECONDS + 10 * DEADLINE_SAFETY * 0.1
    assert deadline_batch_size(32, per_batch_of_10 + 1e-9, 0.1) == 10
    assert deadline_batch_size(32, per_batch_of_10 - 0.1, 0.1) == 9
    assert deadline_batch_size(32, DEADLINE_MARGIN_SECONDS + 0.1, 0.1) == 0  # not even one would finish
    assert deadline_batch_size(32, -5.0, 0.1) == 0
    assert deadline_batch_size(32, float("inf"), 0.1) == 32  # no wall-time budget: the drain is unbounded


def test_batch_limit_grows_with_the_batch_and_shrinks_with_threads():
    from flows.supervisor import GRACE_SECONDS, MIN_BATCH_SECONDS, batch_seconds

    assert batch_seconds(None, 32, 4) is None
    assert batch_seconds(10.0, 1, 4) == 10.0 + GRACE_SECONDS
    assert batch_seconds(10.0, 32, 4) == 10.0 * (8 + 1)
    assert batch_seconds(10.0, 32, 32) == 20.0
    assert batch_seconds(0.1, 2, 1) == MIN_BATCH_SECONDS


def test_an_evaluation_over_candidate_seconds_is_stopped_by_the_runtime_without_killing_the_worker(task):
    import ndvm
    from flows.calibration import BatchItem, CalibrationOptions
    from flows.supervisor import CalibrationSupervisor, WorkerPool

    # init counts to three million once per evaluation: about 0.1 s, twice the 0.05 s allowed (a
    # well-behaved candidate's evaluation takes a few milliseconds)
    slow = (
        "(param phi 0.8 (between -1 1))\n(define (init) (let loop ((i 0)) (if (< i 3000000) (loop (+ i 1)) 0.0)))\n"
        "(define (predict s) (* phi s))\n(define (update s y) y)"
    )
    wrapped = task.program_source(slow)
    items = [BatchItem(ndvm.compile(wrapped).canonical_hash, slow, wrapped), *_items(task, 1)]
    pool = WorkerPool(task, CalibrationOptions(**OPTIONS, max_seconds=0.05), workers=1)
    supervisor = CalibrationSupervisor(pool, candidate_seconds=0.05, threads=1)
    queue, recorded = [items], {}
    try:
        deadline = time.monotonic() + 60
        while (queue or supervisor.busy()) and time.monotonic() < deadline:
            supervisor.fill(lambda: queue.pop() if queue else [])
            for _, results in supervisor.collect(0.2):
                recorded.update({r.hash: r for r in results})
    finally:
        supervisor.close()
    slow_result = recorded[items[0].hash]
    assert slow_result.status == "timeout" and "Limits.max_seconds" in slow_result.error
    assert recorded[items[1].hash].status == "ok"  # its batch-mate, in the same batch
    assert pool.replaced == 0 and supervisor.counts.retried_alone == 0 and supervisor.counts.timeout == 1
