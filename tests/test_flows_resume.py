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
from test_flows_support import subprocess_env

RUN = "killed-run"


def _ndvm(*args: str) -> list[str]:
    return [sys.executable, "-m", "ndvm.cli", *args]


def _evaluations(folder):
    from storage import CandidateStore

    with CandidateStore(folder / "candidates.duckdb", read_only=True) as store:
        rows = store._con.sql(
            "SELECT candidate, status, score FROM evaluations WHERE run_id = $1", params=[RUN]
        ).fetchall()
        return {c: (s, score) for c, s, score in rows}, store.run_status(RUN)


@pytest.mark.heavy  # end-to-end, timing-bound: make test-heavy
def test_kill_9_then_resume_loses_nothing(prefect_api, tmp_path):
    folder = tmp_path / "runs"
    status_file = folder / "status" / f"{RUN}.json"
    env = subprocess_env(prefect_api)
    common = ["--folder", str(folder), "--batch-size", "8", "--steps", "60", "--restarts", "4", "--top-k", "2"]
    proc = subprocess.Popen(
        _ndvm("discover", "--run-id", RUN, "--minutes", "5", *common),
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
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

    done = subprocess.run(
        _ndvm("discover", "--resume", RUN, "--minutes", "0.2", *common),
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
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
    experiment = client.get_experiment_by_name("ndvm-enso-forecast")  # one experiment per dataset and task
    children = client.search_runs([experiment.experiment_id], f"tags.mlflow.parentRunId = '{mlflow_parent}'")
    hashes = [c.data.tags["ndvm.hash"] for c in children]
    assert len(hashes) == len(set(hashes)) >= 2  # a resumed run does not log an entry twice


def test_llm_cost_is_stored_and_max_cost_bounds_the_run_across_resumes(prefect_api, tmp_path, monkeypatch):
    """A run's LLM spend is in the store; a resume starts its cost accounting from it, so a
    --max-cost below what the run already spent stops proposing at once (no LLM call)."""
    from test_flows_support import FakeOpenAI

    from flows.discover import discover
    from storage import CandidateStore

    monkeypatch.setenv("NDVM_TEST_FAKE_KEY", "sk-fake-resume")
    price = (1e-6, 4e-6)  # USD per token: the fake model is unpriced in litellm
    options = dict(
        task="enso",
        model="openai/fake-model",
        api_base=None,
        api_key_env="NDVM_TEST_FAKE_KEY",
        price_per_token=price,
        concurrency=2,
        per_request=2,
        batch_size=4,
        steps=30,
        restarts=2,
        top_k=1,
        log_every=30.0,
        folder=str(tmp_path),
        run_id=None,
    )
    fake = FakeOpenAI(delay=0.05)
    try:
        options["api_base"] = fake.api_base
        first = discover(**{**options, "run_id": "cost-resume"}, budget={"minutes": 2.0, "max_candidates": 4})
        calls = len(fake.requests)
        with CandidateStore(tmp_path / "candidates.duckdb", read_only=True) as store:
            stored = store.run_status("cost-resume")
        # every answered call is 900 prompt + 120 completion tokens (tests/test_flows_support.py)
        assert calls >= 2 and (stored.llm_tokens_in, stored.llm_tokens_out) == (900 * calls, 120 * calls)
        assert stored.llm_cost_usd == pytest.approx(calls * (900 * price[0] + 120 * price[1]), rel=1e-9)
        assert first["cost_usd"] == pytest.approx(stored.llm_cost_usd, rel=1e-12)

        limit = stored.llm_cost_usd / 2
        second = discover(**{**options, "resume": "cost-resume"}, budget={"minutes": 2.0, "max_cost_usd": limit})
    finally:
        fake.close()
    assert second["stop_reason"] == f"LLM cost (${limit:g})"
    assert len(fake.requests) == calls  # not one more call
    assert second["cost_usd"] == pytest.approx(stored.llm_cost_usd, rel=1e-12)
    assert second["earlier_cost_usd"] == pytest.approx(stored.llm_cost_usd, rel=1e-12)
    with CandidateStore(tmp_path / "candidates.duckdb", read_only=True) as store:
        assert store.run_status("cost-resume").llm_cost_usd == pytest.approx(stored.llm_cost_usd, rel=1e-12)
