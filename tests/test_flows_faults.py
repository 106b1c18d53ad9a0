"""Pipeline faults: a candidate that kills its worker process, one that runs far too long, the hard
deadline, a proposal the store cannot write, MLflow down. Every run is a real discovery run with
real worker processes; faults are injected with the test hooks of ``flows/faults.py`` (a worker
aborts, or sleeps, when handed a marked candidate hash).

The candidates come from a replay file of known programs, so the test knows their hashes (and the
batches: a replay run takes them in file order, ``batch_size`` at a time, after the batch of the
task's three reference programs, which every run starts from and hands out before any proposal).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request

import pytest
from test_flows_support import subprocess_env

# Structurally different forecast candidates (distinct canonical hashes and fingerprints).
TERMS = [
    "(tanh s)",
    "(sin s)",
    "(cos s)",
    "(exp (- (* s s)))",
    "(* s s)",
    "(* s s s)",
    "(abs s)",
    "(sigmoid s)",
    "(softplus s)",
    "(log (+ 1.0 (* s s)))",
    "(sqrt (+ 1.0 (* s s)))",
    "(atan s)",
]


def program(term: str) -> str:
    return (
        "(param phi 0.8 (between -1 1))\n(param c 0.01)\n(define (init) 0.0)\n"
        f"(define (predict s) (+ (* phi s) (* c {term})))\n(define (update s y) y)"
    )


def enso_task():
    from flows.problem import ProblemSpec, load_problem

    return load_problem(ProblemSpec(dataset="enso"))[1]


def replay_file(folder, sources: list[str]):
    path = folder / "candidates.jsonl"
    path.write_text("".join(json.dumps({"src": s}) + "\n" for s in sources))
    return path


def hashes_of(task, sources: list[str]) -> list[str]:
    import ndvm

    return [ndvm.compile(task.program_source(s)).canonical_hash for s in sources]


def store_rows(folder, run_id: str, query: str) -> list[tuple]:
    from storage import CandidateStore

    with CandidateStore(folder / "candidates.duckdb", read_only=True) as store:
        return store._con.sql(query, params=[run_id]).fetchall()


def evaluations(folder, run_id: str) -> dict[str, list[tuple]]:
    """candidate -> [(status, score, error)] of every evaluation of the run."""
    out: dict[str, list[tuple]] = {}
    for candidate, status, score, error in store_rows(
        folder, run_id, "SELECT candidate, status, score, error FROM evaluations WHERE run_id = $1 ORDER BY id"
    ):
        out.setdefault(candidate, []).append((status, score, error))
    return out


def states(folder, run_id: str) -> dict[str, str]:
    return dict(store_rows(folder, run_id, "SELECT hash, state FROM run_candidates WHERE run_id = $1"))


def references(folder, run_id: str) -> set[str]:
    """The task's reference programs the run started from (three on enso)."""
    rows = store_rows(folder, run_id, "SELECT hash FROM proposals WHERE run_id = $1 AND origin = 'reference'")
    return {h for (h,) in rows}


def test_a_candidate_that_kills_its_worker_is_retried_alone_then_marked_crashed(prefect_api, tmp_path, monkeypatch):
    from flows.calibration import BatchItem, CalibrationOptions, calibrate_batch
    from flows.discover import discover

    task = enso_task()
    sources = [program(t) for t in TERMS]
    hashes = hashes_of(task, sources)
    bad = hashes[5]  # in the second batch of four: hashes[4:8]
    monkeypatch.setenv("NDVM_TEST_CRASH_HASHES", bad)
    common = dict(
        task="enso",
        proposer="replay",
        replay=str(replay_file(tmp_path, sources)),
        runner="processes",
        workers=2,
        batch_size=4,
        steps=30,
        restarts=2,
        top_k=2,
        log_every=30.0,
        folder=str(tmp_path),
    )
    report = discover(**common, budget={"minutes": 2.0, "max_candidates": 12}, run_id="crash-run")

    # the 12 programs and the three references (their own first batch)
    assert report["status"] == "finished" and report["new"] == 12 + 3 and report["pending"] == 0
    assert report["crashed"] == 1 and report["calibrated"] + report["failed"] == 11 + 3
    # the batch died (its worker aborted), its four members were retried alone, the bad one died again
    assert report["worker_deaths"] == 2 and report["retried_alone"] == 4 and report["workers_replaced"] == 2
    assert str(os.getpid()) not in {w.rsplit(":", 1)[1] for w in report["workers"]}
    runs = evaluations(tmp_path, "crash-run")
    refs = references(tmp_path, "crash-run")
    assert len(refs) == 3 and sorted(runs) == sorted([*hashes, *refs])
    assert all(len(v) == 1 for v in runs.values())  # each calibrated once
    [(status, score, error)] = runs[bad]
    assert status == "crashed" and score is None and "SIGABRT" in error and "never retried" in error
    assert states(tmp_path, "crash-run")[bad] == "crashed"
    # The batch-mates were calibrated alone and kept their own results: the same as a fit of each
    # candidate by itself in this process.
    options = CalibrationOptions(steps=30, restarts=2, threads=1, seed=report["seed"])  # the run's (drawn) seed
    for i in (4, 6, 7):
        [alone] = calibrate_batch(task, [BatchItem(hashes[i], sources[i], task.program_source(sources[i]))], options)
        [(status, score, _)] = runs[hashes[i]]
        assert status == alone.status
        if status == "ok":
            assert score == alone.heldout_metrics[task.primary_metric]

    # A resume never calibrates the crashed candidate again (it would crash every resume).
    again = discover(**common, budget={"minutes": 0.05}, resume="crash-run")
    assert again["status"] == "finished" and again["crashed"] == 1 and again["worker_deaths"] == 0
    assert evaluations(tmp_path, "crash-run")[bad] == runs[bad]


@pytest.mark.heavy  # end-to-end, timing-bound: make test-heavy
def test_a_candidate_over_candidate_seconds_is_marked_timeout_and_the_run_goes_on(prefect_api, tmp_path, monkeypatch):
    from flows.discover import discover

    task = enso_task()
    sources = [program(t) for t in TERMS[:3]]
    hashes = hashes_of(task, sources)
    monkeypatch.setenv("NDVM_TEST_SLOW_HASHES", hashes[1])  # its worker sleeps an hour on it
    started = time.monotonic()
    report = discover(
        task="enso",
        proposer="replay",
        replay=str(replay_file(tmp_path, sources)),
        batch_size=3,
        steps=30,
        restarts=2,
        top_k=1,
        log_every=30.0,
        folder=str(tmp_path),
        run_id="slow-run",
        candidate_seconds=2.5,
        budget={"minutes": 2.0},
    )
    took = time.monotonic() - started
    assert report["status"] == "finished" and report["pending"] == 0 and report["timeout"] == 1
    # (and the three references, calibrated in their own batch before the replayed ones)
    assert report["calibrated"] + report["failed"] == 2 + 3 and report["retried_alone"] == 3
    assert report["workers_replaced"] == 2  # the worker of the batch, then the one of the slow candidate alone
    runs = evaluations(tmp_path, "slow-run")
    assert all(len(v) == 1 for v in runs.values()) and len(runs) == 3 + 3
    [(status, _, error)] = runs[hashes[1]]
    assert status == "timeout" and "2.5 s" in error and "--candidate-seconds" in error
    assert states(tmp_path, "slow-run")[hashes[1]] == "timeout"
    assert took < 90  # the batch limit (2.5 s x (ceil(3/threads) + 1)), then 2.5 s alone: not an hour


@pytest.mark.heavy  # end-to-end, timing-bound: make test-heavy
def test_minutes_is_a_hard_deadline_what_is_in_calibration_stays_pending(prefect_api, tmp_path, monkeypatch):
    from flows.discover import discover

    task = enso_task()
    sources = [program(t) for t in TERMS[:3]]
    hashes = hashes_of(task, sources)
    monkeypatch.setenv("NDVM_TEST_SLOW_HASHES", hashes[0])  # the only batch never ends by itself
    common = dict(
        task="enso",
        proposer="replay",
        replay=str(replay_file(tmp_path, sources)),
        batch_size=3,
        steps=30,
        restarts=2,
        top_k=1,
        log_every=30.0,
        folder=str(tmp_path),
    )
    report = discover(**common, budget={"minutes": 0.05, "drain_minutes": 0.05}, run_id="deadline-run")
    # the three programs and the three references (their own batch, handed out first: it may or may
    # not end within the 6 s; the batch of the three programs never does)
    assert report["status"] == "finished" and report["new"] == 3 + 3
    refs = references(tmp_path, "deadline-run")
    refs_pending = sum(states(tmp_path, "deadline-run")[h] == "pending" for h in refs)
    assert report["cancelled_at_deadline"] == 3 + refs_pending and report["pending"] == 3 + refs_pending
    assert "hard deadline" in report["stop_reason"]
    assert report["elapsed_seconds"] < 3 + 3 + 15  # proposal window + drain + the cancelling and clean-up
    assert set(evaluations(tmp_path, "deadline-run")) <= refs  # none of the three programs
    assert {states(tmp_path, "deadline-run")[h] for h in hashes} == {"pending"}

    monkeypatch.delenv("NDVM_TEST_SLOW_HASHES")
    resumed = discover(**common, budget={"minutes": 0.05}, resume="deadline-run")
    assert resumed["pending"] == 0 and resumed["calibrated"] + resumed["failed"] == 3 + 3
    assert all(len(v) == 1 for v in evaluations(tmp_path, "deadline-run").values())


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_http(url: str, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2) as reply:
                if reply.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    pytest.fail(f"{url} did not answer within {seconds} s")


@pytest.mark.heavy  # end-to-end, timing-bound: make test-heavy
def test_mlflow_down_and_a_store_error_do_not_fail_the_run_then_ndvm_log_logs_it(prefect_api, tmp_path, monkeypatch):
    from mlflow.tracking import MlflowClient

    from flows.cli_failures import EXIT_TRACKING
    from flows.discover import Budget, Discovery, build_config
    from proposers import ReplayProposer

    enso_task()  # loads the data set once before the run
    # The third line is a program with a lone surrogate (what json.loads makes of "\ud800" in a
    # model's reply): the runtime cannot take it and DuckDB cannot write it, a real store error.
    sources = [program(t) for t in TERMS[:4]]
    sources.insert(2, sources[2] + " ; \ud800")
    path = replay_file(tmp_path, sources)
    port = _free_port()
    uri = f"http://127.0.0.1:{port}"  # nothing listens there (yet)
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "5")
    config = build_config(
        "enso",
        "replay",
        replay=str(path),
        batch_size=4,
        steps=30,
        restarts=2,
        top_k=2,
        log_every=1.0,
        folder=str(tmp_path),
        tracking_uri=uri,
    )
    discovery = Discovery(config, Budget(minutes=1.0), run_id="down-run")
    # Without validation, so the unstorable proposal reaches the store (the validating replay
    # proposer would reject it itself).
    discovery.propose.proposer = ReplayProposer(str(path), validate=False)
    try:
        report = discovery.run().to_dict()
    finally:
        discovery.close()
    # four programs and the task's three reference programs (the fifth line cannot be stored)
    assert report["status"] == "finished" and report["new"] == 4 + 3 and report["pending"] == 0
    assert report["calibrated"] == 4 + 3 and report["best_score"] is not None
    assert report["store_errors"] == 1 and report["mlflow_run_id"] is None and report["logged_entries"] == 0
    assert report["mlflow_error"] and str(port) in report["tracking_uri"]
    # said last by `ndvm discover`, which exits with the tracking failure's code (issue 36)
    [failure] = report["end_failures"]
    assert failure["step"] == "MLflow logging" and failure["exit_code"] == EXIT_TRACKING
    assert failure["message"] == report["mlflow_error"] and failure["retry"].startswith("ndvm log --run down-run")
    [(outcome, error_kind, error, source)] = store_rows(
        tmp_path,
        "down-run",
        "SELECT outcome, error_kind, error, source FROM proposals WHERE run_id = $1 AND outcome NOT IN ('new')",
    )
    assert outcome == "store_error" and "surrogate" in error and source.endswith("\\ud800")

    # MLflow comes back: a real tracking server on that port. `ndvm log` logs the stored run.
    server = subprocess.Popen(
        [
            str(os.path.join(os.path.dirname(sys.executable), "mlflow")),
            "server",
            "--backend-store-uri",
            f"sqlite:///{tmp_path / 'server.db'}",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--workers",
            "1",
        ],
        cwd=tmp_path,
        env=subprocess_env(prefect_api),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        _wait_http(f"{uri}/health", 120)
        env = subprocess_env(prefect_api)
        command = [sys.executable, "-m", "ndvm.cli", "log", "--run", "down-run", "--folder", str(tmp_path)]
        first = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
        assert first.returncode == 0, first.stderr[-3000:]
        assert "2 leaderboard entries logged (2 new this time)" in first.stdout
        second = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
        assert second.returncode == 0 and "(0 new this time)" in second.stdout, second.stderr[-3000:]

        client = MlflowClient(uri)
        experiment = client.get_experiment_by_name("ndvm-enso-forecast")  # one experiment per dataset and task
        parents = client.search_runs([experiment.experiment_id], "tags.`ndvm.run_id` = 'down-run'")
        assert len(parents) == 1 and parents[0].info.status == "FINISHED"  # idempotent: one parent ...
        children = client.search_runs(
            [experiment.experiment_id], f"tags.mlflow.parentRunId = '{parents[0].info.run_id}'"
        )
        hashes = sorted(c.data.tags["ndvm.hash"] for c in children)
        assert len(hashes) == 2 == len(set(hashes))  # ... and each entry once
        best = store_rows(tmp_path, "down-run", "SELECT hash FROM leaderboard WHERE run_id = $1 ORDER BY rank LIMIT 2")
        assert hashes == sorted(h for (h,) in best)
        assert parents[0].data.metrics["calibrated"] == 4 + 3
        # what the end of the run could not log: the report card and the test-split scores
        assert "report.md" in {a.path for a in client.list_artifacts(parents[0].info.run_id)}
        assert any(k.startswith("test_") for c in children for k in client.get_run(c.info.run_id).data.metrics)
    finally:
        os.killpg(server.pid, 15)
        server.wait(timeout=30)


def test_on_dask_a_batch_that_kills_its_worker_is_retried_alone_locally(prefect_api, tmp_path, monkeypatch):
    import dask
    from distributed import LocalCluster

    from flows.discover import discover

    task = enso_task()
    sources = [program(t) for t in TERMS[:4]]
    hashes = hashes_of(task, sources)
    monkeypatch.setenv("NDVM_TEST_CRASH_HASHES", hashes[2])  # the Dask worker, then the local worker, abort
    # allowed-failures 0: Dask gives up on the task at the first dead worker (default: 3 more tries)
    with (
        dask.config.set({"distributed.scheduler.allowed-failures": 0}),
        LocalCluster(
            n_workers=1,
            threads_per_worker=1,
            processes=True,
            dashboard_address=None,
            env={"PREFECT_API_URL": prefect_api, "NDVM_TEST_CRASH_HASHES": hashes[2]},
        ) as cluster,
    ):
        report = discover(
            task="enso",
            proposer="replay",
            replay=str(replay_file(tmp_path, sources)),
            dask_address=cluster.scheduler_address,
            workers=1,
            batch_size=4,
            steps=30,
            restarts=2,
            top_k=1,
            log_every=30.0,
            folder=str(tmp_path),
            run_id="dask-crash-run",
        )
    assert report["status"] == "finished" and report["pending"] == 0
    # (the references' batch first, then the four programs, whose batch dies)
    assert report["crashed"] == 1 and report["retried_alone"] == 4
    assert report["calibrated"] + report["failed"] == 3 + 3
    runs = evaluations(tmp_path, "dask-crash-run")
    assert all(len(v) == 1 for v in runs.values()) and runs[hashes[2]][0][0] == "crashed"
