"""The Python API (flows/api.py): ``discover(...)`` returns the run's hall of fame as a polars
frame, the champion, sympy and LaTeX forms, predictions and the MLflow run id, each checked
against what the store, the formula renderer and the logged MLflow model say on their own."""

from __future__ import annotations

import json

import numpy as np
import polars as pl
import pytest


@pytest.fixture(scope="module")
def api_run(prefect_api, tmp_path_factory):
    from flows.api import discover

    folder = tmp_path_factory.mktemp("api-run")
    result = discover(
        "enso",
        "mutation",
        max_candidates=32,
        seed=3,
        serial=True,
        batch_size=16,
        steps=30,
        restarts=2,
        top_k=2,
        test_top_k=3,
        log_every=3600.0,
        folder=str(folder),
        run_id="api-run",
    )
    return result, folder


def test_the_hall_of_fame_is_the_runs_pareto_front_with_the_champion(api_run):
    from storage import CandidateStore
    from storage.formula import render
    from storage.selection import champion_of_run

    result, folder = api_run
    eq = result.equations
    assert result.run_id == "api-run" and result.report["status"] == "finished" and result.metric == "mean_rmse"
    assert eq.columns[:6] == ["index", "complexity", "validation", "test", "formula", "parameters"]
    assert eq["index"].to_list() == list(range(eq.height)) and eq.height >= 1
    # simplest first, and each row of the front better than every simpler one (the champion is
    # listed even when it is off the front: then it is no better than a simpler row)
    assert eq["complexity"].to_list() == sorted(eq["complexity"].to_list())
    scores, champion = eq["validation"].to_list(), eq["champion"].to_list()
    front = [v for i, v in enumerate(scores) if not (champion[i] and any(u <= v for u in scores[:i]))]
    assert all(a > b for a, b in zip(front, front[1:]))
    assert eq["validation"].min() == pytest.approx(result.report["best_score"], rel=1e-12)
    with CandidateStore(folder / "candidates.duckdb", read_only=True) as store:
        choice = champion_of_run(store, "api-run")
        tests = {r["entry"]: r["test_score"] for r in store.test_scores("api-run").iter_rows(named=True)}
        stored = {h: store.evaluation("api-run", h)["parameters"] for h in eq["hash"]}
    best = result.best
    assert best["champion"] and best["hash"] == choice.hash and eq["champion"].sum() == 1
    assert best["test"] == tests[choice.hash]  # the champion is always scored on test
    for row in eq.iter_rows(named=True):
        params = {p["name"]: p["value"] for p in row["parameters"]}
        assert params == stored[row["hash"]]
        assert row["test"] == tests.get(row["hash"])
        assert row["formula"] == render(row["source"], params).text


def test_sympy_and_latex_of_an_equation(api_run):
    import sympy

    from storage.formula import render

    result, _ = api_run
    parts = result.sympy()
    assert set(parts) == {"init", "predict", "update"}
    free = set().union(*(sympy.sympify(e).free_symbols for e in parts.values()))
    names = {"s", "y"} | {f"s_{i}" for i in range(8)} | {f"x_{i}" for i in range(8)}
    assert {str(s) for s in free} <= names  # every parameter substituted
    last = result.equations.height - 1
    params = result.parameters(last)
    assert result.latex(last) == render(result.equations["source"][last], params).latex
    from flows.api import ResultError

    with pytest.raises(ResultError, match=f"has no equation {last + 1}"):
        result.latex(last + 1)


def test_predict_is_what_the_logged_mlflow_model_predicts(api_run):
    import mlflow.pyfunc
    from mlflow.tracking import MlflowClient

    result, folder = api_run
    uri = f"sqlite:///{folder / 'mlflow.db'}"
    client = MlflowClient(uri)
    parent = client.get_run(result.mlflow_run_id)
    assert parent.data.tags["ndvm.run_id"] == "api-run"
    mlflow.set_tracking_uri(uri)
    model = mlflow.pyfunc.load_model("models:/ndvm-enso-forecast@champion")
    series = np.sin(np.arange(24) / 3.0)
    column = next(iter(model.metadata.get_input_schema().input_names()))
    expected = np.asarray(model.predict(pl.DataFrame({column: series}).to_pandas()), dtype=float)
    got = result.predict(pl.DataFrame({column: series}))
    assert got.shape == expected.shape and np.array_equal(got, expected)


def test_a_finished_run_opens_again_from_its_folder(api_run):
    from flows.api import DiscoveryResult, ResultError

    result, folder = api_run
    again = DiscoveryResult.open(folder)  # the latest run of the store
    assert again.run_id == "api-run" and again.equations.equals(result.equations)
    assert again.mlflow_run_id == result.mlflow_run_id and json.dumps(again.best, default=str)
    with pytest.raises(ResultError, match="no candidate store"):
        DiscoveryResult.open(folder / "nowhere")
