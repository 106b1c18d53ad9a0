"""MLflow tracking on a real sqlite store in tmp_path: parent and nested runs, progress metrics,
artifacts (valid PNG plots), and a pyfunc model that predicts what ``fit.predict`` predicts."""

from __future__ import annotations

import os

for _key, _value in {
    "DO_NOT_TRACK": "true",
    "MLFLOW_DISABLE_TELEMETRY": "true",
    "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false",
}.items():
    os.environ.setdefault(_key, _value)

from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import pytest  # noqa: E402

import ndvm  # noqa: E402

if not hasattr(ndvm, "calibrate"):
    pytest.skip("the ndvm runtime (ndvm.compile / ndvm.calibrate) is not built yet", allow_module_level=True)

import mlflow  # noqa: E402
import pandas as pd  # noqa: E402
from rich.console import Console  # noqa: E402

from storage import CandidateStore, EvaluationResult  # noqa: E402
from storage.leaderboard import show_leaderboard  # noqa: E402
from storage.plots import PNG_SIGNATURE, FitPlot, ForecastPlot  # noqa: E402
from storage.tracking import Tracker, default_tracking_uri, entry_from_store  # noqa: E402

# The co-search target of the published benchmark: y = exp(-0.3 x) cos(2 x) + noise on [0.1, 6].
X = np.linspace(0.1, 6.0, 64)
Y = np.exp(-0.3 * X) * np.cos(2.0 * X) + 0.02 * np.random.default_rng(0).standard_normal(64)
HELD = X > 4.5  # temporal-style split: the tail is held out
PROGRAM = "(param a 1.0) (param b 0.3) (param c 2.0) (* a (* (exp (- 0.0 (* b x))) (cos (* c x))))"


def assert_png(path: Path) -> None:
    data = Path(path).read_bytes()
    assert data[:8] == PNG_SIGNATURE, path
    assert len(data) > 2000, (path, len(data))  # a real figure, not an empty canvas
    assert data[12:16] == b"IHDR"


@pytest.fixture(scope="module")
def logged(tmp_path_factory):
    """One discovery run, stored and tracked end to end (module scope: MLflow logging costs ~1 s)."""
    root = tmp_path_factory.mktemp("tracking")
    store = CandidateStore(root / "candidates.duckdb")
    run = store.start_run(
        "disc-1",
        dataset="cosearch-toy",
        task="curve",
        proposer="replay",
        model="none",
        config={"steps": 200, "restarts": 8},
        budget={"minutes": 1},
        probe_inputs={"x": X[:8]},
    )
    (cand,) = store.add([{"source": PROGRAM, "origin": "replay"}], run)
    fit = ndvm.calibrate(
        cand.program,
        {"x": X[~HELD]},
        target=Y[~HELD],
        loss="mse",
        optimizer="adam",
        steps=200,
        lr=0.05,
        restarts=8,
        seed=0,
    )
    assert fit.error is None, fit.error
    prediction = np.asarray(fit.predict({"x": X}))
    rmse = float(np.sqrt(np.mean((prediction[HELD] - Y[HELD]) ** 2)))
    store.record(
        [
            EvaluationResult.from_fit(
                fit,
                candidate=cand.hash,
                run_id=run,
                dataset="cosearch-toy",
                task="curve",
                split="x>4.5",
                train_metrics={"mse": float(fit.loss)},
                heldout_metrics={"rmse": rmse},
            )
        ]
    )

    tracker = Tracker(run_folder=root / "runs")
    parent = tracker.start_run(
        run,
        dataset="cosearch-toy",
        task="curve",
        proposer="replay",
        model="none",
        config={"steps": 200, "restarts": 8},
        budget={"minutes": 1},
    )
    store.set_mlflow_run(run, parent)
    first = tracker.log_progress(store.run_status(run))
    second = tracker.log_progress(store.run_status(run))
    t = np.arange(64.0)
    entry = entry_from_store(
        store,
        run,
        cand.hash,
        fit_plot=FitPlot(X, Y, prediction, HELD, x_label="x", y_label="y", title=cand.hash),
        forecast_plot=ForecastPlot(t, Y, np.where(HELD, prediction, np.nan), split=float(t[HELD][0])),
        input_example=pd.DataFrame({"x": X[:5]}),
    )
    nested, model_uri = tracker.log_entry(entry)
    store.mark_logged(run, cand.hash, nested)
    tracker.end_run()
    state = dict(
        root=root,
        store=store,
        run=run,
        cand=cand,
        fit=fit,
        tracker=tracker,
        parent=parent,
        nested=nested,
        model_uri=model_uri,
        progress=(first, second),
    )
    yield state
    state["store"].close()


def test_default_store_is_sqlite_under_the_run_folder(logged):
    tracker = logged["tracker"]
    db = logged["root"] / "runs" / "mlflow.db"
    assert tracker.tracking_uri == default_tracking_uri(logged["root"] / "runs") == f"sqlite:///{db}"
    assert db.is_file()
    experiment = tracker.client.get_experiment(tracker.experiment_id)
    assert experiment.artifact_location == (logged["root"] / "runs" / "mlartifacts").as_uri()


def test_parent_run_has_configuration_and_metrics_over_time(logged):
    client = logged["tracker"].client
    parent = client.get_run(logged["parent"])
    assert parent.info.run_name == "disc-1" and parent.info.status == "FINISHED"
    params = parent.data.params
    assert params["dataset"] == "cosearch-toy" and params["proposer"] == "replay" and params["model"] == "none"
    assert params["config.restarts"] == "8" and params["budget.minutes"] == "1"
    for key in (
        "proposals_per_min",
        "calibrations_per_min",
        "duplicates_rejected",
        "invalid_proposals",
        "best_heldout_rmse",
    ):
        assert len(client.get_metric_history(logged["parent"], key)) == 2, key
    assert parent.data.metrics["best_heldout_rmse"] == pytest.approx(logged["store"].run_status("disc-1").best_score)
    assert [a.path for a in client.list_artifacts(logged["parent"])] == ["config.json"]


def test_nested_run_has_params_metrics_tags_and_artifacts(logged, tmp_path):
    client, cand = logged["tracker"].client, logged["cand"]
    run = client.get_run(logged["nested"])
    assert run.data.tags["mlflow.parentRunId"] == logged["parent"]
    assert run.data.tags["ndvm.hash"] == cand.hash and run.data.tags["ndvm.origin"] == "replay"
    assert run.data.tags["ndvm.rank"] == "1"
    for name, value in logged["fit"].params.items():
        assert float(run.data.params[name]) == pytest.approx(value, rel=1e-12)
    assert {"train_mse", "heldout_rmse"} <= set(run.data.metrics)
    assert len(client.get_metric_history(logged["nested"], "loss")) == len(np.asarray(logged["fit"].history))
    local = Path(client.download_artifacts(logged["nested"], "", str(tmp_path)))
    assert (local / "program.scm").read_text().strip() == PROGRAM
    for png in ("fit.png", "forecast.png", "loss_curve.png"):
        assert_png(local / "plots" / png)
    assert logged["store"].logged("disc-1") == {cand.hash: logged["nested"]}


def test_pyfunc_model_predicts_like_fit_predict(logged):
    model = mlflow.pyfunc.load_model(logged["model_uri"])
    new_x = np.linspace(0.0, 8.0, 33)  # new inputs, beyond the data range too
    got = np.asarray(model.predict(pd.DataFrame({"x": new_x})))
    want = np.asarray(logged["fit"].predict({"x": new_x}))
    assert got.shape == want.shape == (33,)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=0)


def test_resumed_tracker_reopens_the_parent_run(logged):
    tracker = Tracker(run_folder=logged["root"] / "runs")
    status = logged["store"].run_status("disc-1")
    assert tracker.start_run("disc-1", mlflow_run_id=status.mlflow_run_id) == logged["parent"]
    tracker.log_progress(status)
    tracker.end_run()
    assert len(tracker.client.get_metric_history(logged["parent"], "proposals")) == 3


def test_leaderboard_prints_the_top_candidates(logged):
    store = logged["store"]
    store.close()  # the CLI opens the store read-only: no writer may hold it
    console = Console(record=True, width=200)
    top = show_leaderboard(logged["root"] / "candidates.duckdb", run_id="disc-1", console=console)
    text = console.export_text()
    assert top["hash"].to_list() == [logged["cand"].hash]
    assert logged["cand"].hash in text and "validation rmse" in text and "1 calibrated" in text
    assert "never used to rank" in text  # the test column: scored once at the end, not here
    logged["store"] = CandidateStore(logged["root"] / "candidates.duckdb")


def test_log_leaderboard_logs_each_entry_once(logged):
    store, run, tracker = logged["store"], logged["run"], logged["tracker"]
    tracker.start_run(run, mlflow_run_id=logged["parent"])
    assert tracker.log_leaderboard(store, run, k=5) == []  # the only entry is logged already
    (second,) = store.add(
        [{"source": "(param a 0.5) (param b 0.1) (* a (exp (- 0.0 (* b x))))", "origin": "replay"}], run
    )
    store.record(
        [
            EvaluationResult(
                candidate=second.hash,
                run_id=run,
                dataset="cosearch-toy",
                task="curve",
                split="x>4.5",
                parameters={"a": 0.5, "b": 0.1},
                train_metrics={"mse": 0.3},
                heldout_metrics={"rmse": 0.5},
                seconds=0.01,
            )
        ]
    )
    done = tracker.log_leaderboard(store, run, k=5, extras=lambda h: {"input_example": pd.DataFrame({"x": X[:3]})})
    assert [h for h, _ in done] == [second.hash]
    run_info = tracker.client.get_run(done[0][1])
    assert run_info.data.tags["ndvm.rank"] == "2" and run_info.data.tags["mlflow.parentRunId"] == logged["parent"]
    assert set(store.logged(run)) == {logged["cand"].hash, second.hash}
    assert tracker.log_leaderboard(store, run, k=5) == []
    tracker.end_run()


def test_light_entries_while_running_are_completed_like_full_ones_at_the_end(tmp_path):
    """A progress snapshot logs an entry light (tags, parameters, metrics; no artifacts, no model);
    the end's log_leaderboard completes it in place: the same nested run then has every artifact,
    the model and the metrics that an entry logged whole has, its loss curve logged once."""
    store = CandidateStore(tmp_path / "candidates.duckdb")
    run = store.start_run("light-1", dataset="toy", task="curve", proposer="replay", model="none", config={}, budget={})
    sources = [PROGRAM, "(param a 0.5) (param b 0.1) (* a (exp (- 0.0 (* b x))))"]
    cands = store.add([{"source": s, "origin": "replay"} for s in sources], run)
    fits = {}
    for rmse, cand in zip((0.1, 0.2), cands):
        fit = ndvm.calibrate(cand.program, {"x": X[~HELD]}, target=Y[~HELD], steps=50, restarts=2, seed=0)
        fits[cand.hash] = fit
        store.record(
            [
                EvaluationResult.from_fit(
                    fit,
                    candidate=cand.hash,
                    run_id=run,
                    dataset="toy",
                    task="curve",
                    split="x>4.5",
                    train_metrics={"mse": float(fit.loss)},
                    heldout_metrics={"rmse": rmse},
                )
            ]
        )
    tracker = Tracker(run_folder=tmp_path / "runs")
    tracker.start_run(run, dataset="toy", task="curve", proposer="replay", model="none", config={}, budget={})

    def extras(digest: str) -> dict:
        prediction = np.asarray(fits[digest].predict({"x": X}))
        return {
            "fit_plot": FitPlot(X, Y, prediction, HELD, x_label="x", y_label="y", title=digest),
            "input_example": pd.DataFrame({"x": X[:5]}),
        }

    [(best, light_run)] = tracker.log_leaderboard(store, run, k=1, extras=extras, light=True)
    client = tracker.client
    light = client.get_run(light_run)
    assert light.data.tags["ndvm.light"] == "true" and "ndvm.model_uri" not in light.data.tags
    assert light.info.status == "FINISHED" and client.list_artifacts(light_run) == []
    assert {"train_mse", "heldout_rmse"} <= set(light.data.metrics) and set(light.data.params) == {"a", "b", "c"}

    logged = dict(tracker.log_leaderboard(store, run, k=2, extras=extras))  # the end: not light
    assert list(logged) == [cands[1].hash]  # the best keeps its nested run; the second is logged whole
    assert store.logged(run) == {best: light_run, cands[1].hash: logged[cands[1].hash]}
    full_runs = {best: light_run, cands[1].hash: logged[cands[1].hash]}
    contents = {}
    for digest, nested in full_runs.items():
        entry = client.get_run(nested)
        assert "ndvm.light" not in entry.data.tags and entry.info.status == "FINISHED"
        files = {a.path for a in client.list_artifacts(nested)} | {
            a.path for a in client.list_artifacts(nested, "plots")
        }
        contents[digest] = files
        history = np.asarray(fits[digest].history)
        assert len(client.get_metric_history(nested, "loss")) == np.isfinite(history).sum() > 0
        model = mlflow.pyfunc.load_model(entry.data.tags["ndvm.model_uri"])
        got = np.asarray(model.predict(pd.DataFrame({"x": X})))
        np.testing.assert_allclose(got, np.asarray(fits[digest].predict({"x": X})), rtol=1e-12, atol=0)
    assert contents[best] == contents[cands[1].hash]
    assert {"program.scm", "fit.json", "plots/fit.png", "plots/loss_curve.png"} <= contents[best]
    assert tracker.log_leaderboard(store, run, k=2, extras=extras) == []  # nothing left to log or complete
    tracker.end_run()
    store.close()
