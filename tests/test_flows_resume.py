"""Crash safety: ``kill -9`` of a running ``ndvm discover`` loses no calibrated candidate, and
``ndvm discover --resume RUN_ID`` continues the run (pending candidates first, same MLflow parent).

Both runs are real subprocesses of the ``ndvm`` command on the session's Prefect test server.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from test_flows_support import prefect_api, subprocess_env  # noqa: F401  (fixture)

RUN = "killed-run"


def _ndvm(*args: str) -> list[str]:
    return [sys.executable, "-m", "ndvm.cli", *args]


def _evaluations(folder):
    from storage import CandidateStore

    with CandidateStore(folder / "candidates.duckdb", read_only=True) as store:
        rows = store._con.sql("SELECT candidate, status, score FROM evaluations WHERE run_id = $1",
                              params=[RUN]).fetchall()
        return {c: (s, score) for c, s, score in rows}, store.run_status(RUN)


def test_kill_9_then_resume_loses_nothing(prefect_api, tmp_path):
    folder = tmp_path / "runs"
    status_file = folder / "status" / f"{RUN}.json"
    env = subprocess_env(prefect_api)
    common = ["--folder", str(folder), "--batch-size", "8", "--steps", "60", "--restarts", "4", "--top-k", "2"]
    proc = subprocess.Popen(_ndvm("discover", "--run-id", RUN, "--minutes", "5", *common), env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    heartbeat = None
    try:
        deadline = time.monotonic() + 150
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                pytest.fail(f"discover exited early ({proc.returncode}): {proc.stderr.read().decode()[-3000:]}")
            if status_file.is_file():
                heartbeat = json.loads(status_file.read_text())
                if heartbeat["calibrated"] + heartbeat["failed"] >= 24:
                    break
            time.sleep(0.2)
        else:
            pytest.fail("the run did not calibrate 24 candidates in time")
    finally:
        os.kill(proc.pid, signal.SIGKILL)  # no clean-up of any kind
        proc.wait()
    assert proc.returncode == -signal.SIGKILL

    before, status = _evaluations(folder)
    # Everything the last heartbeat reported was committed (the heartbeat follows the commit).
    assert len(before) >= heartbeat["calibrated"] + heartbeat["failed"] >= 24
    assert status.status == "running"  # it never got to say otherwise
    assert status.calibrated + status.failed == len(before)
    pending_at_kill = status.pending
    assert status.new == len(before) + pending_at_kill
    mlflow_parent = status.mlflow_run_id
    assert mlflow_parent

    done = subprocess.run(_ndvm("discover", "--resume", RUN, "--minutes", "0.2", *common), env=env,
                          capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"{RUN} finished" in " ".join(done.stdout.split())

    after, resumed = _evaluations(folder)
    for candidate, result in before.items():  # nothing calibrated before the kill was lost or redone
        assert after[candidate] == result
    assert resumed.status == "finished" and resumed.pending == 0
    assert resumed.calibrated + resumed.failed == len(after) == resumed.new
    assert len(after) >= len(before) + pending_at_kill  # the pending ones were calibrated first
    assert resumed.proposed > status.proposed and resumed.mlflow_run_id == mlflow_parent

    from mlflow.tracking import MlflowClient

    from storage.tracking import default_tracking_uri

    client = MlflowClient(default_tracking_uri(folder))
    parent = client.get_run(mlflow_parent)
    assert parent.info.status == "FINISHED"
    experiment = client.get_experiment_by_name("ndvm-discovery")
    children = client.search_runs([experiment.experiment_id], f"tags.mlflow.parentRunId = '{mlflow_parent}'")
    hashes = [c.data.tags["ndvm.hash"] for c in children]
    assert len(hashes) == len(set(hashes)) >= 2  # a resumed run does not log an entry twice
