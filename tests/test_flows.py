"""The discovery flow end to end: enso + mutation proposer, the LLM proposer against a local fake
server, recalibration on new data, and the pieces (budgets, busy meters, configuration).

Real parts throughout: the ndvm runtime, the enso dataset and forecast task, the DuckDB store,
a sqlite MLflow store in a temporary folder, Prefect's test server.
"""

from __future__ import annotations

import json
import time

import numpy as np
import polars as pl
import pytest
from conftest import shared_file
from test_flows_support import ENSO_RUN_BUDGET, FakeOpenAI

from flows.discover import Budget, DiscoveryError, StageMeter, build_config, resolve_proposer

PNG = b"\x89PNG\r\n\x1a\n"


def _mlflow_runs(folder, run_name):
    from mlflow.tracking import MlflowClient

    from storage.tracking import default_tracking_uri, experiment_name

    client = MlflowClient(default_tracking_uri(folder))
    experiments = [e.experiment_id for e in client.search_experiments()]
    runs = client.search_runs(experiments, max_results=500)
    parent = [r for r in runs if r.data.tags.get("ndvm.run_id") == run_name]
    assert len(parent) == 1, [r.info.run_name for r in runs]
    # one experiment per dataset and task: ndvm-<dataset>-<task>
    params = parent[0].data.params
    assert client.get_experiment(parent[0].info.experiment_id).name == experiment_name(
        params["dataset"], params["task"]
    )
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent[0].info.run_id]
    return client, parent[0], children


# ------------------------------------------------------------------------------------------ end to end
def test_enso_run_fills_store_and_leaderboard(enso_run):
    from storage import CandidateStore
    from storage.leaderboard import show_leaderboard

    report, folder = enso_run
    assert report["status"] == "finished"
    assert report["stop_reason"].startswith("candidates (40)")
    # the candidate budget is exact; the task's three reference programs (AR(AIC), damped
    # persistence, seasonal AR) are added besides it, before any proposal
    assert report["new"] == ENSO_RUN_BUDGET["max_candidates"] + 3
    assert report["calibrated"] + report["failed"] == report["new"] and report["pending"] == 0
    assert report["calibrated"] >= 30
    assert report["proposed"] == report["new"] + report["duplicates"] + report["invalid"]
    assert 0 < report["calibration_busy"] <= 1 and 0 < report["proposal_busy"] <= 1
    assert report["calibration_batches"] >= 3  # batches of 16 for 40 candidates, streamed
    with CandidateStore(folder / "candidates.duckdb", read_only=True) as store:
        status = store.run_status("enso-e2e")
        assert (status.status, status.new, status.calibrated) == ("finished", 40 + 3, report["calibrated"])
        assert status.seeded == 3  # the references, not counted in --max-candidates
        top = store.top(5, run_id="enso-e2e")
        scores = top["score"].to_list()
        assert scores == sorted(scores) and np.isfinite(scores).all()
        assert report["best_score"] == pytest.approx(scores[0]) and report["best_hash"] == top["hash"][0]
        best = store.evaluation("enso-e2e", top["hash"][0])
        # held-out metrics of the forecast task, per lead, and the loss history of the fit
        assert {"mean_rmse", "mean_acc", "rmse_lead1", "rmse_lead12"} <= set(best["heldout_metrics"])
        assert best["heldout_metrics"]["mean_rmse"] == pytest.approx(best["score"])
        assert len(best["loss_history"]) >= 1
        history = store.history("enso-e2e")
        assert history.height == report["proposed"]
        # the final top 10, the one-standard-error champion when it ranks below them (it often does
        # with the forecast task's standard error over validation blocks) and the four references
        # were scored on the test split, once, at the end
        from storage.selection import champion_of_run

        tests = store.test_scores("enso-e2e")
        top10 = store.top(10, run_id="enso-e2e")["hash"].to_list()
        champion = champion_of_run(store, "enso-e2e").hash
        assert tests.filter(pl.col("entry_kind") == "candidate")["entry"].to_list() == top10 + (
            [] if champion in top10 else [champion]
        )
        candidates = tests.filter(pl.col("entry_kind") == "candidate")
        assert (candidates["status"] == "ok").all() and candidates["test_score"].is_finite().all()
        # five references; ARMA(2,1) and the seasonal ARIMA have no stable fit on Niño 1+2 (an MA
        # root at -1 from every start) and are recorded as failed with the reason, never as a score
        references = {r["entry"]: r for r in tests.filter(pl.col("entry_kind") == "reference").iter_rows(named=True)}
        assert {k for k, r in references.items() if r["status"] == "ok"} == {
            "persistence",
            "damped-persistence",
            "ar-aic",
        }
        failed = [r for r in references.values() if r["status"] != "ok"]
        assert len(failed) == 2 and all(r["error"] for r in failed)
        assert set(history["outcome"].to_list()) <= {"new", "duplicate_hash", "duplicate_semantic", "invalid"}
    shown = show_leaderboard(folder / "candidates.duckdb", run_id="enso-e2e", k=5)
    assert shown["hash"].to_list() == top["hash"].to_list()
    status_file = json.loads((folder / "status" / "enso-e2e.json").read_text())
    assert status_file["phase"] == "finished" and status_file["calibrated"] == report["calibrated"]


def test_enso_run_is_scored_like_the_task_scores_it(enso_run):
    """The flow's batched calibrate_many + scoring agrees with the task's own fit and score."""
    from datasets import load
    from datasets.tasks import make_task
    from flows.calibration import CalibrationOptions
    from storage import CandidateStore

    report, folder = enso_run
    with CandidateStore(folder / "candidates.duckdb", read_only=True) as store:
        row = store.top(1, run_id="enso-e2e").row(0, named=True)
        source = row["source"]
        params = json.loads(row["parameters"])
    task = make_task(load("enso"))
    run_fit = CalibrationOptions(steps=60, restarts=4)  # the run's fit: the pipeline's optimizer and lr
    fit = task.fit(  # the run's seed (drawn, recorded) fitted it
        source, optimizer=run_fit.optimizer, lr=run_fit.lr, steps=60, restarts=4, seed=report["seed"]
    )
    assert fit.ok
    assert fit.params == pytest.approx(params, rel=1e-6, abs=1e-9)
    assert task.score(fit)["mean_rmse"] == pytest.approx(row["score"], rel=1e-9)
    # the persistence reference on the same split, for scale: a discovered program should not be far off
    persistence = next(r for r in task.score_references() if r["model"] == "persistence")
    assert row["score"] < 1.5 * persistence["mean_rmse"]


def test_enso_run_mlflow_parent_nested_artifacts_and_model(enso_run):
    import mlflow.pyfunc
    import pandas as pd

    from datasets import load
    from datasets.tasks import TaskFit, make_task
    from storage import CandidateStore

    report, folder = enso_run
    client, parent, children = _mlflow_runs(folder, "enso-e2e")
    assert parent.info.run_id == report["mlflow_run_id"] and parent.info.status == "FINISHED"
    assert parent.data.params["proposer"] == "mutation" and parent.data.params["dataset"] == "enso"
    assert parent.data.params["budget.max_candidates"] == "40"
    assert parent.data.metrics["best_heldout_mean_rmse"] == pytest.approx(report["best_score"])
    assert parent.data.metrics["calibrated"] == report["calibrated"]
    assert len(client.get_metric_history(parent.info.run_id, "proposals")) >= 1
    assert len(children) == report["logged_entries"] >= 3
    with CandidateStore(folder / "candidates.duckdb", read_only=True) as store:
        top3 = store.top(3, run_id="enso-e2e")["hash"].to_list()
        logged = store.logged("enso-e2e")
    assert set(top3) <= {c.data.tags["ndvm.hash"] for c in children}  # the final top 3 are all logged
    assert set(logged.values()) == {c.info.run_id for c in children}
    for child in children:  # entries logged light during the run were completed at its end
        assert "ndvm.light" not in child.data.tags and child.data.tags["ndvm.model_uri"].startswith("models:/")
        assert {"program.scm", "fit.json", "plots"} <= {a.path for a in client.list_artifacts(child.info.run_id)}
    best = next(c for c in children if c.data.tags["ndvm.hash"] == report["best_hash"])
    assert best.data.metrics["heldout_mean_rmse"] == pytest.approx(report["best_score"])
    assert "loss" in best.data.metrics and best.data.tags["ndvm.origin"].startswith("mutation")
    files = {a.path for a in client.list_artifacts(best.info.run_id)}
    assert {"program.scm", "fit.json", "plots"} <= files
    plots = {a.path for a in client.list_artifacts(best.info.run_id, "plots")}
    # the champion's run also carries the test-years and per-lead plots (the best validation score
    # is often the champion too)
    champion_plots = {"plots/test_years.png", "plots/rmse_per_lead.png"}
    assert plots - champion_plots == {"plots/fit.png", "plots/forecast.png", "plots/loss_curve.png"}
    local = client.download_artifacts(best.info.run_id, "plots/forecast.png")
    assert open(local, "rb").read(8) == PNG

    # The pyfunc model: one-step-ahead predictions of the anomaly series; the predictions at the
    # held-out origins equal the task's lead-1 forecasts (computed by the task's own driver).
    from storage.tracking import default_tracking_uri

    # the model URI resolves through the global tracking URI, which another test may have moved
    mlflow.set_tracking_uri(default_tracking_uri(folder))
    model = mlflow.pyfunc.load_model(best.data.tags["ndvm.model_uri"])
    task = make_task(load("enso"))
    predicted = np.asarray(model.predict(pd.DataFrame({"anom_c": task.y})))
    # (the first rows may be NaN: the fit skips a burn-in, so the initial state need not forecast)
    assert predicted.shape == task.y.shape and np.isfinite(predicted[task.burn_in :]).all()
    with open(client.download_artifacts(best.info.run_id, "fit.json")) as handle:
        evaluation_params = json.load(handle)["params"]
    program_source = open(client.download_artifacts(best.info.run_id, "program.scm")).read()
    fit = TaskFit(task.name, "best", program_source, evaluation_params, 0.0, 0.0)
    lead1 = task.forecasts(fit, "validation")[:, 0]
    np.testing.assert_allclose(predicted[task.origins("validation") + 1], lead1, rtol=1e-9, atol=1e-12)
    # the test split, scored once at the end: on the nested run of every final top-k entry
    assert best.data.metrics["test_mean_rmse"] == pytest.approx(task.score(fit, "test")["mean_rmse"], rel=1e-9)
    assert "ref_ar-aic_test_mean_rmse" in parent.data.metrics


def test_llm_proposer_against_a_local_fake_server(prefect_api, tmp_path, monkeypatch):
    from flows.discover import discover
    from storage import CandidateStore

    secret = "sk-fake-0123456789abcdef"
    monkeypatch.setenv("NDVM_TEST_FAKE_KEY", secret)
    fake = FakeOpenAI(delay=0.3)
    try:
        report = discover(
            task="enso",
            proposer="auto",
            model="openai/fake-model",
            api_base=fake.api_base,
            api_key_env="NDVM_TEST_FAKE_KEY",
            budget={"minutes": 2.0, "max_candidates": 6},
            concurrency=4,
            per_request=2,
            batch_size=4,
            steps=40,
            restarts=4,
            top_k=2,
            log_every=2.0,
            folder=str(tmp_path),
            run_id="llm-run",
        )
    finally:
        fake.close()
    assert report["proposer"] == "llm" and report["model"] == "openai/fake-model"
    # 6 proposals and the three reference programs (enso: AR(AIC), damped persistence, seasonal AR)
    assert report["new"] == 6 + 3 and report["pending"] == 0 and report["calibrated"] >= 5 + 3
    assert fake.max_inflight >= 2  # several requests in flight at once
    assert all(a == f"Bearer {secret}" for a in fake.authorization)
    prompt = json.dumps(fake.requests[-1]["messages"])
    assert "(define (predict s)" in prompt and "mean_rmse" in prompt  # the task contract and its metric
    assert report["cost_usd"] is not None
    with CandidateStore(tmp_path / "candidates.duckdb", read_only=True) as store:
        origins = set(store.history("llm-run")["origin"].to_list())
    assert origins == {"llm:openai/fake-model", "reference"}
    client, parent, children = _mlflow_runs(tmp_path, "llm-run")
    assert parent.data.params["model"] == "openai/fake-model" and len(children) >= 2
    # the key is read from the environment only: it is in neither store
    for name in ("candidates.duckdb", "mlflow.db"):
        assert secret.encode() not in (tmp_path / name).read_bytes()


def test_recalibrate_top_programs_on_new_data(enso_run, tmp_path):
    from flows.recalibrate import recalibrate

    nino34 = str(shared_file("enso/raw/cpc_detrend.nino34.ascii.txt"))
    report, folder = enso_run
    result = recalibrate("enso-e2e", data=nino34, top=3, steps=40, restarts=4, folder=str(folder), run_id="recal-1")
    assert result["from_run"] == "enso-e2e" and result["refitted"] == 3 and result["dataset"] == nino34
    assert [r["old_rank"] for r in result["rows"]] == sorted(r["old_rank"] for r in result["rows"])
    assert all(r["status"] == "ok" and np.isfinite(r["new_score"]) for r in result["rows"])
    # a different series: the scores change
    assert any(abs(r["new_score"] - r["old_mean_rmse"]) > 1e-6 for r in result["rows"])
    client, parent, children = _mlflow_runs(folder, "recal-1")
    assert parent.data.params["proposer"] == "recalibrate" and len(children) == 3
    from storage import CandidateStore

    with CandidateStore(folder / "candidates.duckdb", read_only=True) as store:
        assert set(store.history("recal-1")["origin"].to_list()) == {"recalibrate:enso-e2e"}
        assert store.run_status("recal-1").calibrated == 3


# ------------------------------------------------------------------------------------------ units
def test_budget_and_proposer_resolution(monkeypatch):
    monkeypatch.delenv("NDVM_LLM_MODEL", raising=False)
    assert resolve_proposer("auto", None) == ("mutation", None)
    assert resolve_proposer("auto", "openai/x") == ("llm", "openai/x")
    monkeypatch.setenv("NDVM_LLM_MODEL", "ollama_chat/llama3.1")
    assert resolve_proposer("auto", None) == ("llm", "ollama_chat/llama3.1")
    assert resolve_proposer("mutation", None) == ("mutation", None)
    monkeypatch.delenv("NDVM_LLM_MODEL")
    with pytest.raises(DiscoveryError, match="needs a model"):
        resolve_proposer("llm", None)
    with pytest.raises(DiscoveryError, match="unknown proposer"):
        resolve_proposer("gpt", None)
    with pytest.raises(DiscoveryError, match="needs a budget"):
        Budget(minutes=None).check()
    assert Budget(minutes=2).drain_seconds() == 18.0 and Budget(minutes=120).drain_seconds() == 120.0
    with pytest.raises(ValueError, match="tcp://HOST:PORT"):
        build_config(dask_address="localhost:8786")
    config = build_config(runner="processes", workers=2, api_key_env="MY_KEY")
    assert config.runner.batches_in_flight() == 2
    from flows.discover import DiscoverConfig

    again = DiscoverConfig.from_dict(config.to_dict())
    assert again == config


def test_stage_meter_counts_overlapping_operations_once():
    meter = StageMeter()
    meter.enter()
    meter.enter()  # a second request in flight does not double the busy time
    time.sleep(0.2)
    meter.exit()
    meter.exit()
    time.sleep(0.1)
    busy = meter.busy_seconds()
    assert 0.19 <= busy < 0.3 and meter.operations == 2


def test_curve_task_with_groups(prefect_api, tmp_path):
    """A grouped curve task (battery-synthetic: one fit per cell), its per-group parameters and the
    logged model (which predicts with the first cell's parameters)."""
    import mlflow.pyfunc
    import pandas as pd

    import ndvm
    from flows.discover import discover
    from storage import CandidateStore

    report = discover(
        task="battery-synthetic",
        proposer="mutation",
        budget={"minutes": 1.0, "max_candidates": 16},
        batch_size=8,
        steps=60,
        restarts=4,
        top_k=1,
        log_every=30.0,
        folder=str(tmp_path),
        run_id="curve-run",
    )
    # 16 proposals and the task's eight reference programs (the linear, square-root, power-law, knee
    # and double-exponential laws, and the power law, the knee and the square root + power law with
    # a shared parameter: models of their own, not duplicates of their per-cell twins)
    assert report["metric"] == "rmse" and report["new"] == 16 + 8 and report["pending"] == 0
    assert report["calibrated"] >= 12 + 8 and report["best_score"] < 0.05  # state of health, a fraction
    with CandidateStore(tmp_path / "candidates.duckdb", read_only=True) as store:
        best = store.evaluation("curve-run", report["best_hash"])
        source = store.candidate(report["best_hash"])["source"]
    program = ndvm.compile(source)
    first = {name: best["parameters"][name] for name in program.param_names}
    assert any(key.startswith("synthetic-00/") for key in best["parameters"])  # every cell, by group
    assert all(best["parameters"][f"synthetic-00/{n}"] == v for n, v in first.items())
    client, parent, children = _mlflow_runs(tmp_path, "curve-run")
    [entry] = [c for c in children if c.data.tags["ndvm.hash"] == report["best_hash"]]
    model = mlflow.pyfunc.load_model(entry.data.tags["ndvm.model_uri"])
    cycles = np.arange(10, 400, 45)  # raw cycle numbers: the model scales them (x = cycle / 100) itself
    expected = program.evaluate([[first[n] for n in program.param_names]], {"x": cycles / 100.0})[0]
    got = model.predict(pd.DataFrame({"cell_id": ["synthetic-00"] * len(cycles), "cycle": cycles}))
    np.testing.assert_allclose(got, np.broadcast_to(expected, cycles.shape), rtol=1e-12)
    plots = {a.path for a in client.list_artifacts(entry.info.run_id, "plots")}
    assert "plots/fit.png" in plots


def test_llm_cost_budget_stops_proposing(prefect_api, tmp_path, monkeypatch):
    """With a model litellm can price (gpt-4o-mini from its bundled price map, served here by the
    fake server), the run stops proposing once the reported cost reaches --max-cost."""
    from flows.discover import discover

    monkeypatch.setenv("NDVM_TEST_FAKE_KEY", "sk-fake-cost")
    fake = FakeOpenAI(delay=0.2)
    limit = 0.0005  # about three calls of 900 prompt + 120 completion tokens
    try:
        report = discover(
            task="enso",
            model="openai/gpt-4o-mini",
            api_base=fake.api_base,
            api_key_env="NDVM_TEST_FAKE_KEY",
            budget={"minutes": 2.0, "max_cost_usd": limit},
            concurrency=2,
            per_request=2,
            batch_size=4,
            steps=30,
            restarts=2,
            top_k=1,
            log_every=30.0,
            folder=str(tmp_path),
            run_id="cost-run",
        )
    finally:
        fake.close()
    assert report["stop_reason"].startswith("LLM cost")
    per_call = report["cost_usd"] / len(fake.requests)
    assert per_call > 0
    # requests already in flight when the limit is reached finish (at most `concurrency` of them)
    assert limit <= report["cost_usd"] <= limit + 2 * per_call + 1e-12
    assert report["pending"] == 0 and report["calibrated"] + report["failed"] == report["new"]


def test_a_repeating_llm_is_told_its_duplicates_changes_course_and_is_stopped(prefect_api, tmp_path, monkeypatch):
    """A server that only ever answers the same two programs: the next prompts name the duplicates
    and their stored hashes, the hints change, and the run stops asking after the stale rounds."""
    from test_flows_support import LLM_PROGRAMS

    from flows.discover import discover
    from proposers.llm import load_hints
    from storage import CandidateStore

    monkeypatch.setenv("NDVM_TEST_FAKE_KEY", "sk-fake-0123456789abcdef")
    fake = FakeOpenAI(delay=0.05, programs=LLM_PROGRAMS[:2])
    stale, concurrency, per_request, max_repairs = 3, 2, 2, 2
    try:
        report = discover(
            task="enso",
            model="openai/fake-model",
            api_base=fake.api_base,
            api_key_env="NDVM_TEST_FAKE_KEY",
            budget={"minutes": 1.0},
            concurrency=concurrency,
            per_request=per_request,
            batch_size=4,
            steps=20,
            restarts=2,
            top_k=1,
            test_top_k=1,
            log_every=5.0,
            folder=str(tmp_path),
            run_id="repeating",
            max_stale_rounds=stale,
        )
    finally:
        fake.close()
    assert report["stop_reason"] == f"stopped proposing: {stale} rounds in a row gave nothing new"
    # the two programs and the three reference programs the run started from
    assert report["new"] == 2 + 3 and report["elapsed_seconds"] < 60
    # every round is one request plus at most max_repairs repairs; at most one round gave something
    # new, then `stale` rounds did not, and up to `concurrency` more were in flight when it stopped
    bound = (1 + stale + concurrency) * (1 + max_repairs)
    assert len(fake.requests) <= bound, f"{len(fake.requests)} requests for 2 programs (bound {bound})"
    with CandidateStore(tmp_path / "candidates.duckdb", read_only=True) as store:
        history = store.history("repeating")
    stored = history.filter((pl.col("outcome") == "new") & (pl.col("origin") != "reference"))["hash"].to_list()
    assert len(stored) == 2
    prompts = [r["messages"][1]["content"] for r in fake.requests]
    told = [p for p in prompts if "duplicates of programs already stored" in p]
    assert told, "no prompt named the duplicates"
    assert all(h[:12] in "".join(told) for h in stored)  # each duplicate named with its stored hash
    diverge = load_hints("hints_diverge.md")
    assert any(h in p for p in told for h in diverge)  # the course changed
    assert not any(h in prompts[0] for h in diverge)
    hot = [r for r in fake.requests if "temperature" in r]
    assert hot and all(r["temperature"] > 1.0 for r in hot) and "temperature" not in fake.requests[0]


def test_the_stale_round_stop_applies_to_the_offline_proposers_too(prefect_api, tmp_path):
    """A replay file that repeats one program 200 times: one round of 16 gives it, then two rounds
    give nothing new and the run stops asking (max_stale_rounds=2) instead of reading all 200."""
    from test_flows_support import LLM_PROGRAMS

    from flows.discover import discover

    replay = tmp_path / "same.jsonl"
    replay.write_text((json.dumps({"src": LLM_PROGRAMS[0]}) + "\n") * 200)
    report = discover(
        task="enso",
        proposer="replay",
        replay=str(replay),
        budget={"minutes": 1.0},
        batch_size=4,
        steps=20,
        restarts=2,
        top_k=1,
        test_top_k=1,
        log_every=30.0,
        folder=str(tmp_path),
        run_id="stale-replay",
        max_stale_rounds=2,
    )
    assert report["stop_reason"] == "stopped proposing: 2 rounds in a row gave nothing new"
    # (and the three reference programs the run started from: new and proposed, not duplicates)
    assert report["new"] == 1 + 3 and report["proposed"] == 3 * 16 + 3 and report["duplicates"] == 3 * 16 - 1


def _stored_evaluations(folder, run_id):
    """hash -> (status, parameters, train metrics, validation metrics) of a run's evaluations."""
    import duckdb

    con = duckdb.connect(str(folder / "candidates.duckdb"), read_only=True)
    try:
        rows = con.execute(
            "SELECT candidate, status, parameters, train_metrics, heldout_metrics FROM evaluations WHERE run_id = ?",
            [run_id],
        ).fetchall()
    finally:
        con.close()
    return {h: (status, json.loads(p), json.loads(t), json.loads(v)) for h, status, p, t, v in rows}


@pytest.mark.heavy  # (a discovery run of its own: make test-heavy, run by CI)
def test_stored_metrics_do_not_depend_on_the_batches_in_flight(tmp_path):
    """The same serial run (same seed, so the same proposals) with one batch in flight and with two
    (the threads runner's default: two workers, each on every core): every candidate is stored with
    the same parameters, training loss and validation scores, to the last bit."""
    from flows.discover import run_discovery

    runner = build_config("enso", "mutation").runner
    assert runner.batches_in_flight() == 2 and runner.queued_batches() == 2  # the default: a batch ready per worker
    assert runner.native_threads() is None  # each batch on every core
    assert build_config("enso", "mutation", runner="processes", workers=2).runner.queued_batches() == 4
    settings = dict(serial=True, batch_size=4, steps=20, restarts=2, top_k=1, test_top_k=1, log_every=3600.0)
    stored, reports = {}, {}
    for workers in (1, 2):
        folder = tmp_path / f"in-flight-{workers}"
        config = build_config("enso", "mutation", seed=5, folder=str(folder), workers=workers, **settings)
        assert config.runner.kind == "threads" and config.runner.batches_in_flight() == workers
        reports[workers] = run_discovery(config, Budget(minutes=None, max_candidates=32), run_id="in-flight")
        stored[workers] = _stored_evaluations(folder, "in-flight")
    assert reports[1].status == reports[2].status == "finished"
    assert len(reports[2].workers) == 2  # both workers calibrated batches of the run
    assert reports[1].calibrated >= 16 and len(stored[1]) == reports[1].new
    assert stored[1] == stored[2]


def test_a_proposal_round_waits_for_the_results_back_from_a_worker_to_be_recorded():
    """The round's context must rank the batch a worker just returned: the round waits until the
    results in transit are recorded (here by another thread after 0.3 s), at most
    RECORD_WAIT_SECONDS when they never are."""
    import threading

    from flows.discover import RECORD_WAIT_SECONDS
    from flows.stages.score import ScoreStage

    run = ScoreStage.__new__(ScoreStage)  # only the hand-off between recording and proposing
    run.recorded, run.results_in_transit, run.finished = threading.Condition(), 32, threading.Event()

    def record() -> None:
        time.sleep(0.3)
        with run.recorded:
            run.results_in_transit = 0
            run.recorded.notify_all()

    recorder = threading.Thread(target=record)
    started = time.monotonic()
    recorder.start()
    run.await_recorded()
    waited = time.monotonic() - started
    recorder.join()
    assert run.results_in_transit == 0 and 0.3 <= waited < RECORD_WAIT_SECONDS
    run.results_in_transit = 5  # never recorded (a batch released at the deadline): bounded
    started = time.monotonic()
    run.await_recorded()
    assert RECORD_WAIT_SECONDS <= time.monotonic() - started < RECORD_WAIT_SECONDS + 1.0
