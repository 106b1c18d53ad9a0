"""Calibration on a Dask cluster (prefect-dask's DaskTaskRunner): a local cluster of two worker
processes calibrates the batches; the results come back to the flow, the store's only writer."""

from __future__ import annotations

import os

import pytest


@pytest.mark.heavy  # (a discovery run of its own: make test-heavy, run by CI)
def test_discover_on_a_local_dask_cluster_with_two_workers(prefect_api, tmp_path):
    from distributed import LocalCluster

    from flows.discover import discover
    from storage import CandidateStore

    # Workers report their task runs to the session's Prefect server (else each starts its own).
    with LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None, env={"PREFECT_API_URL": prefect_api}
    ) as cluster:
        report = discover(
            task="enso",
            proposer="mutation",
            budget={"minutes": 2.0, "max_candidates": 24},
            dask_address=cluster.scheduler_address,
            workers=2,
            batch_size=6,
            steps=40,
            restarts=4,
            top_k=2,
            log_every=30.0,
            folder=str(tmp_path),
            run_id="dask-run",
        )
    assert report["runner"].startswith("dask (tcp://")
    # 24 proposals and the task's three reference programs (enso: AR(AIC), damped persistence, seasonal AR)
    assert report["new"] == 24 + 3 and report["pending"] == 0
    assert report["calibrated"] + report["failed"] == 24 + 3 and report["calibrated"] >= 18 + 3
    assert report["calibration_batches"] >= 4
    pids = {w.rsplit(":", 1)[1] for w in report["workers"]}
    assert len(pids) == 2 and str(os.getpid()) not in pids  # both workers, neither of them this process
    with CandidateStore(tmp_path / "candidates.duckdb", read_only=True) as store:
        assert store.run_status("dask-run").calibrated == report["calibrated"]
        assert store.top(1, run_id="dask-run")["score"][0] == report["best_score"]
