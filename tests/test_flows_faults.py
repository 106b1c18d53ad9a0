"""Pipeline faults in the calibration stage: a batch whose worker fails is retried once, a batch
that fails again is recorded as failed, and the run goes on with the other batches."""
from __future__ import annotations

from test_flows_support import prefect_api  # noqa: F401  (fixture)


def test_a_failing_calibration_worker_is_retried_then_marked_and_the_run_continues(prefect_api, tmp_path,
                                                                                   monkeypatch):
    from flows import runners
    from flows.discover import discover
    from storage import CandidateStore

    real = runners.calibrate_batch_task.fn
    calls = []  # the candidate hashes of each call, in order

    def faulty_worker(task, items, options):  # the signature Prefect binds the call to
        # batch 1 fails once (its retry succeeds); batch 2 fails on both tries; the rest are healthy
        calls.append(sorted(item.hash for item in items))
        if len(calls) in (1, 3, 4):
            raise RuntimeError("injected worker crash")
        return real(task, items, options)

    monkeypatch.setattr(runners.calibrate_batch_task, "fn", faulty_worker)
    report = discover(task="enso", proposer="mutation", budget={"minutes": 2.0, "max_candidates": 24},
                      runner="threads", batch_size=6, steps=30, restarts=2, top_k=2, log_every=30.0,
                      folder=str(tmp_path), run_id="fault-run")
    assert report["new"] == 24 and report["pending"] == 0
    assert report["calibrated"] + report["failed"] == 24
    assert calls[0] == calls[1] and calls[2] == calls[3]  # the retries re-ran the same batches
    assert len(calls) >= 5  # and the run went on to later batches
    with CandidateStore(tmp_path / "candidates.duckdb", read_only=True) as store:
        history = store.history("fault-run")
        crashed = sorted(row[0] for row in store._con.sql(
            "SELECT candidate FROM evaluations WHERE run_id = 'fault-run' AND error LIKE '%injected worker crash%'"
        ).fetchall())
    assert crashed == calls[2]  # exactly the batch that failed twice, marked failed and kept
    retried = history.filter(history["hash"].is_in(calls[0]))
    assert retried["eval_status"].null_count() == 0  # the batch whose retry succeeded was recorded ...
    assert not set(calls[0]) & set(crashed) and (retried["eval_status"] == "ok").any()  # ... as calibrated
    assert (history["eval_status"] == "ok").sum() > len(calls[0])  # later batches too
