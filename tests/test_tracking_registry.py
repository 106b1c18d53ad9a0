"""The MLflow experiment of a dataset and task, and the registry, on a real sqlite store in tmp_path.

Four discovery runs on one toy curve dataset, each stored in the DuckDB store and tracked: the
experiment is named ``ndvm-toy-curve`` and is a model-training experiment with the shared view
``leaderboard``; the dataset is the parent run's dataset input with the store's fingerprint as
digest; candidate runs are named by hash and tagged. The registry: the first run's best becomes
``champion``; a worse run leaves it; a better run moves it and the former champion becomes
``previous``; a run on another fingerprint is not compared. ``models:/ndvm-toy-curve@champion``
loads in a fresh Python process outside the repository and predicts what the fit predicts.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

for _key, _value in {
    "DO_NOT_TRACK": "true",
    "MLFLOW_DISABLE_TELEMETRY": "true",
    "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false",
}.items():
    os.environ.setdefault(_key, _value)

import numpy as np  # noqa: E402
import pytest  # noqa: E402

import ndvm  # noqa: E402

if not hasattr(ndvm, "calibrate"):
    pytest.skip("the ndvm runtime (ndvm.compile / ndvm.calibrate) is not built yet", allow_module_level=True)

import pandas as pd  # noqa: E402

from storage import CandidateStore, EvaluationResult  # noqa: E402
from storage.tracking import (  # noqa: E402
    CHAMPION,
    EXPERIMENT_KIND_TAG,
    MODEL_TRAINING,
    PREVIOUS,
    VIEW_TAG,
    Tracker,
    experiment_name,
    leaderboard_path,
    model_name,
)

# y = 2 exp(-0.4 x) + 0.5 + noise; the last quarter validates.
X = np.linspace(0.0, 8.0, 80)
Y = 2.0 * np.exp(-0.4 * X) + 0.5 + 0.01 * np.random.default_rng(1).standard_normal(80)
TRAIN = X < 6.0
NO_OFFSET = "(param a 1.0) (param b 0.3 positive) (* a (exp (- (* b x))))"  # misses the offset
LINEAR = "(param a 1.0) (param b -0.1) (+ a (* b x))"  # worse still
WITH_OFFSET = "(param a 1.0) (param b 0.3 positive) (param c 0.0) (+ c (* a (exp (- (* b x)))))"  # the true form
FINGERPRINT = "f00dfeedf00dfeed"
NAME = "ndvm-toy-curve"


def discovery_run(store: CandidateStore, folder, run_id: str, source: str, fingerprint: str = FINGERPRINT) -> dict:
    """One stored and tracked run with a single candidate; returns what the tests look at."""
    store.start_run(
        run_id,
        dataset="toy",
        task="curve",
        proposer="replay",
        model="none",
        config={"calibration": {"optimizer": "adam", "steps": 300, "lr": 0.05, "restarts": 4, "seed": 0}},
        budget={"minutes": 1},
        probe_inputs={"x": X[:8]},
    )
    store.set_run_library(run_id, seed=0, dataset_fingerprint=fingerprint)
    (cand,) = store.add([{"source": source, "origin": "replay"}], run_id)
    fit = ndvm.calibrate(
        cand.program,
        {"x": X[TRAIN]},
        target=Y[TRAIN],
        loss="mse",
        optimizer="adam",
        steps=300,
        lr=0.05,
        restarts=4,
        seed=0,
    )
    assert fit.error is None, fit.error
    rmse = float(np.sqrt(np.mean((np.asarray(fit.predict({"x": X[~TRAIN]})) - Y[~TRAIN]) ** 2)))
    store.record(
        [
            EvaluationResult.from_fit(
                fit,
                candidate=cand.hash,
                run_id=run_id,
                dataset="toy",
                task="curve",
                split="x>=6",
                train_metrics={"mse": float(fit.loss)},
                heldout_metrics={"rmse": rmse},
            )
        ]
    )
    tracker = Tracker(run_folder=folder, experiment=experiment_name("toy", "curve"))
    parent = tracker.start_run(
        run_id, dataset="toy", task="curve", proposer="replay", model="none", config=store.run_status(run_id).config
    )
    tracker.log_dataset("toy", digest=fingerprint, source="generated in tests/test_tracking_registry.py")
    tracker.log_leaderboard(store, run_id, k=3, extras=lambda digest: {"input_example": pd.DataFrame({"x": X[:5]})})
    decision = tracker.register_champion(store, run_id)
    tracker.end_run()
    return dict(tracker=tracker, parent=parent, cand=cand, fit=fit, score=rmse, decision=decision)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("registry")
    folder = root / "runs"
    with CandidateStore(root / "candidates.duckdb") as store:
        first = discovery_run(store, folder, "night-1", NO_OFFSET)
        worse = discovery_run(store, folder, "night-2", LINEAR)
        better = discovery_run(store, folder, "night-3", WITH_OFFSET)
        other_data = discovery_run(store, folder, "night-4", LINEAR, fingerprint="0123456789abcdef")
        again = better["tracker"].register_champion(store, "night-3")  # a retried final logging
    yield dict(root=root, folder=folder, first=first, worse=worse, better=better, other=other_data, again=again)


def test_names_of_experiments_and_models():
    assert experiment_name("enso", "forecast") == model_name("enso", "forecast") == "ndvm-enso-forecast"
    assert experiment_name("battery-severson", "curve") == "ndvm-battery-severson-curve"
    assert experiment_name("/data/My Cells.csv", "curve") == "ndvm-my-cells-curve"
    with pytest.raises(ValueError, match="dataset and a task"):
        experiment_name("", "curve")


def test_experiment_is_a_model_training_experiment_with_the_leaderboard_view(runs):
    tracker = runs["first"]["tracker"]
    experiment = tracker.client.get_experiment_by_name(NAME)
    assert experiment.experiment_id == tracker.experiment_id
    assert experiment.tags[EXPERIMENT_KIND_TAG] == MODEL_TRAINING
    view = json.loads(experiment.tags[VIEW_TAG])
    assert view["orderByKey"] == "metrics.`heldout_rmse`" and view["orderByAsc"] is True
    assert {"metrics.`heldout_rmse`", "metrics.`test_rmse`", "tags.`formula`"} <= set(view["selectedColumns"])
    assert leaderboard_path(tracker.experiment_id) == (
        f"#/experiments/{tracker.experiment_id}/runs?workflowType=machine_learning&viewStateShareKey=leaderboard"
    )
    # every run of this dataset and task went to this one experiment
    parents = tracker.client.search_runs([tracker.experiment_id], "tags.`ndvm.kind` = 'discovery'")
    assert sorted(r.info.run_name for r in parents) == ["night-1", "night-2", "night-3", "night-4"]


def test_dataset_input_carries_the_fingerprint(runs):
    tracker = runs["first"]["tracker"]
    inputs = tracker.client.get_run(runs["first"]["parent"]).inputs.dataset_inputs
    assert len(inputs) == 1
    dataset = inputs[0].dataset
    assert (dataset.name, dataset.digest, dataset.source_type) == ("toy", FINGERPRINT, "code")
    assert "tests/test_tracking_registry.py" in dataset.source
    assert {t.key: t.value for t in inputs[0].tags}["mlflow.data.context"] == "training"
    other = tracker.client.get_run(runs["other"]["parent"]).inputs.dataset_inputs
    assert other[0].dataset.digest == "0123456789abcdef"
    # the candidate runs carry it too (the runs table's Dataset column)
    nested = runs["first"]["tracker"].client.get_run(
        tracker.client.search_runs([tracker.experiment_id], f"tags.`ndvm.hash` = '{runs['first']['cand'].hash}'")[
            0
        ].info.run_id
    )
    assert [(d.dataset.name, d.dataset.digest) for d in nested.inputs.dataset_inputs] == [("toy", FINGERPRINT)]


def test_candidate_runs_are_named_by_hash_and_tagged(runs):
    tracker, cand = runs["better"]["tracker"], runs["better"]["cand"]
    (run,) = tracker.client.search_runs([tracker.experiment_id], f"tags.`ndvm.hash` = '{cand.hash}'")
    assert run.info.run_name == cand.hash
    tags = run.data.tags
    assert (tags["dataset"], tags["task"], tags["origin"], tags["ndvm.rank"]) == ("toy", "curve", "replay", "1")
    assert int(tags["complexity"]) > 0
    b, c = (runs["better"]["fit"].params[n] for n in "bc")
    assert tags["formula"].startswith("y = ") and f"{c:.4g}" in tags["formula"] and f"{b:.4g}" in tags["formula"]
    assert tags["ndvm.champion"] == f"{NAME} version 2"


def test_champion_moves_only_when_validation_improves(runs):
    first, worse, better, other = runs["first"], runs["worse"], runs["better"], runs["other"]
    assert worse["score"] > first["score"] > better["score"]  # the data make the order plain
    assert first["decision"].registered and first["decision"].version == "1" and first["decision"].previous is None
    assert not worse["decision"].registered and worse["decision"].version == "1"
    assert "does not beat" in worse["decision"].reason
    assert better["decision"].registered and (better["decision"].version, better["decision"].previous) == ("2", "1")
    assert not other["decision"].registered and "not compared" in other["decision"].reason
    assert not runs["again"].registered and "already registered" in runs["again"].reason

    client = first["tracker"].client
    versions = {str(v.version): v for v in client.search_model_versions(f"name = '{NAME}'")}
    assert sorted(versions) == ["1", "2"]  # the worse runs registered nothing
    champion, previous = (client.get_model_version_by_alias(NAME, alias) for alias in (CHAMPION, PREVIOUS))
    assert (str(champion.version), str(previous.version)) == ("2", "1")
    assert champion.tags["ndvm.fingerprint"] == FINGERPRINT and champion.tags["ndvm.run_id"] == "night-3"
    assert float(champion.tags["ndvm.validation_score"]) == better["score"]
    assert float(previous.tags["ndvm.validation_score"]) == first["score"]
    assert champion.tags["ndvm.hash"] == better["cand"].hash and champion.tags["ndvm.metric"] == "rmse"
    parent = client.get_run(worse["parent"])
    assert "the champion stays" in parent.data.tags["ndvm.champion"]


def test_champion_loads_in_a_fresh_process(runs, tmp_path):
    """Only the installed project: the child runs outside the repository, without PYTHONPATH."""
    new_x = np.linspace(-1.0, 12.0, 27)
    script = (
        "import json, sys, mlflow, pandas as pd\n"
        "mlflow.set_tracking_uri(sys.argv[1])\n"
        f"model = mlflow.pyfunc.load_model('models:/{NAME}@champion')\n"
        "x = json.loads(sys.argv[2])\n"
        "print(json.dumps([float(v) for v in model.predict(pd.DataFrame({'x': x}))]))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    result = subprocess.run(
        [sys.executable, "-c", script, runs["first"]["tracker"].tracking_uri, json.dumps(new_x.tolist())],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    got = np.array(json.loads(result.stdout.strip().splitlines()[-1]))
    want = np.asarray(runs["better"]["fit"].predict({"x": new_x}))
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=0)


def test_enso_champion_of_a_discovery_run_loads_in_a_fresh_process(enso_run, tmp_path):
    """The ``make run`` dataset: the run registers ``ndvm-enso-forecast``; its champion, loaded in a
    fresh process, forecasts what the task's own driver forecasts with the stored parameters."""
    from mlflow.tracking import MlflowClient

    from datasets import load
    from datasets.tasks import make_task
    from datasets.tasks.base import TaskFit
    from storage.selection import champion_of_run
    from storage.tracking import default_tracking_uri

    report, folder = enso_run
    with CandidateStore(folder / "candidates.duckdb", read_only=True) as store:
        choice = champion_of_run(store, "enso-e2e")  # the one-standard-error rule picks what is registered
    assert choice is not None and choice.best_hash == report["best_hash"]
    uri = default_tracking_uri(folder)
    champion = MlflowClient(uri).get_model_version_by_alias("ndvm-enso-forecast", CHAMPION)
    assert champion.tags["ndvm.run_id"] == "enso-e2e" and champion.tags["ndvm.hash"] == choice.hash
    assert float(champion.tags["ndvm.validation_score"]) == pytest.approx(choice.score, rel=1e-12)
    task = make_task(load("enso"))
    script = (
        "import json, sys, mlflow, pandas as pd\n"
        "mlflow.set_tracking_uri(sys.argv[1])\n"
        "model = mlflow.pyfunc.load_model('models:/ndvm-enso-forecast@champion')\n"
        "frame = pd.DataFrame(json.loads(sys.argv[2]))\n"
        "print(json.dumps([float(v) for v in model.predict(frame)]))\n"
    )
    # the series and its calendar month: a champion that reads the calendar (update s y x) needs both
    months = [float(m) for m in task.dataset.frame.sort(task.dataset.x).get_column("month").to_list()]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    result = subprocess.run(
        [sys.executable, "-c", script, uri, json.dumps({"anom_c": np.asarray(task.y).tolist(), "month": months})],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    predicted = np.array(json.loads(result.stdout.strip().splitlines()[-1]))
    with CandidateStore(folder / "candidates.duckdb", read_only=True) as store:
        parameters = store.evaluation("enso-e2e", choice.hash)["parameters"]
        source = store.candidate(choice.hash)["source"]
    fit = TaskFit(task.name, "champion", source, parameters, 0.0, 0.0)
    lead1 = task.forecasts(fit, "validation")[:, 0]
    np.testing.assert_allclose(predicted[task.origins("validation") + 1], lead1, rtol=1e-9, atol=1e-12)


def test_promote_replaces_a_champion_of_other_data_by_hand(tmp_path):
    """A champion chosen on another dataset fingerprint is never compared, so no run on the new data
    could replace it: ``ndvm promote`` does, by a person's decision, and keeps the former as
    ``previous``; promoting back reuses the version the run already registered."""
    from flows.mlflow_log import LogRunError, promote_stored_run
    from storage import default_store_path

    folder = tmp_path / "runs"
    with CandidateStore(default_store_path(folder)) as store:
        old = discovery_run(store, folder, "old-data", WITH_OFFSET)
        new = discovery_run(store, folder, "new-data", LINEAR, fingerprint="0123456789abcdef")
        for run_id, run in (("old-data", old), ("new-data", new)):
            store.set_run_status(run_id, "finished")
            store.set_mlflow_run(run_id, run["parent"])
    assert old["decision"].registered and not new["decision"].registered
    assert "ndvm promote --run new-data" in new["decision"].reason
    client = old["tracker"].client

    def aliases() -> tuple[str, str | None]:
        champion = client.get_model_version_by_alias(NAME, CHAMPION)
        try:
            previous = str(client.get_model_version_by_alias(NAME, PREVIOUS).version)
        except Exception:  # no previous yet
            previous = None
        return str(champion.version), previous

    assert aliases() == ("1", None)
    promoted = promote_stored_run("new-data", folder=folder)
    assert (
        promoted.registered
        and "promoted to champion by hand" in promoted.reason
        and "over version 1" in promoted.reason
    )
    assert aliases() == ("2", "1")
    assert client.get_model_version(NAME, "2").tags["ndvm.run_id"] == "new-data"
    assert "promoted" in client.get_run(new["parent"]).data.tags["ndvm.champion"]
    again = promote_stored_run("new-data", folder=folder)
    assert not again.registered and aliases() == ("2", "1")
    back = promote_stored_run("old-data", folder=folder)  # the version old-data registered, not a new one
    assert back.registered and aliases() == ("1", "2")
    assert len(client.search_model_versions(f"name = '{NAME}'")) == 2
    with pytest.raises(LogRunError, match="no runs|no candidate store"):
        promote_stored_run(None, folder=tmp_path / "elsewhere")
    with CandidateStore(default_store_path(folder)) as store:
        store.set_run_status("new-data", "running")
    with pytest.raises(LogRunError, match="new-data is running"):
        promote_stored_run("new-data", folder=folder)
