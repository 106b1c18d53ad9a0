"""``kill -9`` of a whole discovery run at each stage in turn, each time followed by ``--resume``:
nothing committed is lost, nothing is calibrated twice, and the run finishes.

One run is started and killed five times, once per stage, by a pause hook (``flows/faults.py``:
the run writes a marker file when it reaches the stage and waits there): right after a batch of
proposals was committed, in a worker before it calibrates a batch, in a worker after a batch was
calibrated and scored (before the flow has it), in the flow before a batch of results is committed,
and in the middle of logging a leaderboard entry to MLflow. The process group is killed with
SIGKILL (the flow and its workers, no clean-up of any kind), the store is checked, and the next
resume pauses at the next stage. A last resume runs to the end.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from test_flows_support import subprocess_env

RUN = "kill-every-stage"
STAGES = ["proposal:2", "calibration:2", "scoring:2", "recording:2", "logging:1"]


def _snapshot(folder) -> dict:
    from storage import CandidateStore

    with CandidateStore(folder / "candidates.duckdb", read_only=True) as store:
        con = store._con
        evaluations = con.sql(
            "SELECT candidate, id, status, score FROM evaluations WHERE run_id = $1", params=[RUN]
        ).fetchall()
        proposals = con.sql("SELECT id, outcome, hash FROM proposals WHERE run_id = $1", params=[RUN]).fetchall()
        members = dict(con.sql("SELECT hash, state FROM run_candidates WHERE run_id = $1", params=[RUN]).fetchall())
        status = store.run_status(RUN)
    per_candidate: dict[str, list] = {}
    for candidate, *rest in evaluations:
        per_candidate.setdefault(candidate, []).append(tuple(rest))
    return {"evaluations": per_candidate, "proposals": set(proposals), "members": members, "status": status}


def _check(before: dict | None, now: dict) -> None:
    evaluations, members = now["evaluations"], now["members"]
    twice = {c: v for c, v in evaluations.items() if len(v) > 1}
    assert not twice, f"calibrated twice: {twice}"
    assert set(evaluations) <= set(members)
    for digest, state in members.items():  # every state agrees with the evaluations
        assert (state == "pending") == (digest not in evaluations), (digest, state)
    status = now["status"]
    assert status.pending + status.calibrated + status.failed + status.crashed + status.timeout == status.new
    if before is not None:  # nothing committed before the kill is lost or changed
        assert before["proposals"] <= now["proposals"]
        assert set(before["members"]) <= set(members)
        for digest, rows in before["evaluations"].items():
            assert evaluations[digest] == rows


def _run_until_paused(command: list[str], env: dict, marker) -> dict:
    proc = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    try:
        deadline = time.monotonic() + 180
        while not marker.is_file():
            if proc.poll() is not None:
                pytest.fail(
                    f"the run exited ({proc.returncode}) before it paused: {proc.stderr.read().decode()[-3000:]}"
                )
            if time.monotonic() > deadline:
                pytest.fail(f"the run did not reach {env['NDVM_TEST_PAUSE']} within 180 s")
            time.sleep(0.2)
        time.sleep(0.3)  # the other threads go on for a moment, as they would
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the flow and its worker processes, no clean-up
        proc.wait()
    assert proc.returncode == -signal.SIGKILL
    info = json.loads(marker.read_text())
    marker.unlink()
    return info


@pytest.mark.heavy  # end-to-end, timing-bound: make test-heavy
def test_kill_9_at_every_stage_then_resume_loses_nothing_and_calibrates_nothing_twice(prefect_api, tmp_path):
    folder = tmp_path / "runs"
    marker = tmp_path / "paused.json"
    common = [
        "--folder",
        str(folder),
        "--batch-size",
        "8",
        "--steps",
        "30",
        "--restarts",
        "2",
        "--top-k",
        "2",
        "--minutes",
        "5",
    ]
    base = [sys.executable, "-m", "ndvm.cli", "discover"]
    before = None
    for i, stage in enumerate(STAGES):
        env = subprocess_env(prefect_api, NDVM_TEST_PAUSE=stage, NDVM_TEST_PAUSE_FILE=str(marker))
        start = ["--run-id", RUN] if i == 0 else ["--resume", RUN]
        info = _run_until_paused(base + start + common, env, marker)
        assert info["stage"] == stage.split(":")[0]
        now = _snapshot(folder)
        assert now["status"].status == "running"  # it never got to say otherwise
        _check(before, now)
        before = now
    assert before["status"].mlflow_run_id and before["evaluations"]

    finish = base + ["--resume", RUN] + common[:-1] + ["0.1"]
    done = subprocess.run(finish, env=subprocess_env(prefect_api), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    final = _snapshot(folder)
    _check(before, final)
    status = final["status"]
    assert status.status == "finished" and status.pending == 0
    assert len(final["evaluations"]) == status.new == status.calibrated + status.failed

    from mlflow.tracking import MlflowClient

    from storage.tracking import default_tracking_uri

    client = MlflowClient(default_tracking_uri(folder))
    experiment = client.get_experiment_by_name("ndvm-enso-forecast")  # one experiment per dataset and task
    parents = client.search_runs([experiment.experiment_id], f"tags.`ndvm.run_id` = '{RUN}'")
    assert [p.info.run_id for p in parents] == [status.mlflow_run_id]  # one parent run through six processes
    assert parents[0].info.status == "FINISHED"
    children = client.search_runs([experiment.experiment_id], f"tags.mlflow.parentRunId = '{status.mlflow_run_id}'")
    hashes = [c.data.tags["ndvm.hash"] for c in children]
    assert len(hashes) == len(set(hashes)) >= 2  # the entry half-logged at the kill was replaced, not doubled
    assert all(c.info.status == "FINISHED" for c in children)
