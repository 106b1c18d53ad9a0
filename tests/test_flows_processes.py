"""Calibration in worker processes (Prefect's ProcessPoolTaskRunner, ``--runner processes``): the
batches run in two spawned processes and come back to the flow, the store's only writer."""

from __future__ import annotations

import os

import pytest


@pytest.mark.heavy  # (a discovery run of its own: make test-heavy, run by CI)
def test_discover_with_two_worker_processes(prefect_api, tmp_path):
    from flows.discover import discover
    from storage import CandidateStore

    report = discover(
        task="enso",
        proposer="mutation",
        budget={"minutes": 2.0, "max_candidates": 24},
        runner="processes",
        workers=2,
        batch_size=6,
        steps=40,
        restarts=4,
        top_k=2,
        log_every=30.0,
        folder=str(tmp_path),
        run_id="process-run",
    )
    assert report["runner"] == "processes (2 workers)"
    # 24 proposals and the task's three reference programs (enso: AR(AIC), damped persistence, seasonal AR)
    assert report["new"] == 24 + 3 and report["pending"] == 0 and report["calibrated"] + report["failed"] == 24 + 3
    pids = {w.rsplit(":", 1)[1] for w in report["workers"]}
    assert len(pids) == 2 and str(os.getpid()) not in pids
    with CandidateStore(tmp_path / "candidates.duckdb", read_only=True) as store:
        assert store.run_status("process-run").calibrated == report["calibrated"]
