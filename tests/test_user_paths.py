"""Every path a user takes, end to end (issue 36): for each kind of problem a user can reach, a
tiny ``ndvm discover`` from the command line (a real process, as a user starts it), then every
command a user runs after it, each checked for what it says, not only for its exit code:

    ndvm report / report --json / report --rebuild     the card: a verdict and test scores
    ndvm leaderboard / leaderboard --pareto            the champion is listed
    ndvm log / ndvm promote                            the registered pyfunc model, loaded and
                                                       predicting what the program computes
    ndvm recalibrate                                   the top programs re-fitted
    flows.api.DiscoveryResult                          equations, sympy, latex, predict

The cases are ``CASES``; ``test_every_task_kind_is_in_the_matrix`` fails when a task kind is
registered (datasets.tasks.TASKS) without a case here. Heavy (about a minute a case on 2 cores):
marked ``heavy``, run by ``make test-heavy`` (and by CI, .ci/run), not by ``make test``.
"""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest
from test_flows_support import subprocess_env

import ndvm
from ndvm.cli import main

if not hasattr(ndvm, "compile"):
    pytest.skip("the ndvm runtime (ndvm.compile) is not built yet", allow_module_level=True)

pytestmark = pytest.mark.heavy

# A tiny run: a handful of proposal rounds, short fits. Reproducible (--serial --seed).
TINY_RUN = [
    "--proposer", "mutation", "--minutes", "1", "--max-candidates", "24", "--serial", "--seed", "1",
    "--fresh", "--steps", "40", "--restarts", "2", "--top-k", "3", "--test-top-k", "3",
]  # fmt: skip


# ---------------------------------------------------------------------------- the data of each case
def _yearly_series(folder: Path, covariate: bool) -> Path:
    rng = np.random.default_rng(3)
    n = 160
    c = rng.normal(size=n)
    v = np.zeros(n)
    for t in range(1, n):
        v[t] = 0.6 * v[t - 1] + (2.0 * c[t - 1] if covariate else np.sin(2 * np.pi * t / 11)) + 0.3 * rng.normal()
    path = folder / ("cycles.csv" if covariate else "yearly.csv")
    pl.DataFrame({"year": np.arange(1850, 1850 + n), "v": v, **({"c": c} if covariate else {})}).write_csv(path)
    return path


def _curve(folder: Path) -> Path:
    rng = np.random.default_rng(4)
    x = np.linspace(0, 10, 200)
    path = folder / "decay.csv"
    pl.DataFrame({"t": x, "signal": 3 * np.exp(-0.3 * x) + 0.5 + 0.02 * rng.normal(size=x.size)}).write_csv(path)
    return path


def _cells(folder: Path) -> Path:
    """Six battery-like cells (cell_id, cycle): the curve task seeds its shared-exponent laws."""
    rng = np.random.default_rng(5)
    rows = []
    for i in range(6):
        rate = 0.05 + 0.01 * i
        for cycle in range(1, 400, 6):
            q = 1.1 * (1 - rate * (cycle / 100) ** 0.7) + 0.002 * rng.normal()
            rows.append({"cell_id": f"c{i}", "cycle": cycle, "capacity_ah": q})
    path = folder / "cells.csv"
    pl.DataFrame(rows).write_csv(path)
    return path


def _table(folder: Path, n_inputs: int, split: bool = False, group: bool = False) -> Path:
    rng = np.random.default_rng(6)
    n = 400
    a, b = rng.uniform(1, 3, n), rng.uniform(0, 2, n)
    columns: dict[str, Any] = {"a": a}
    y = 2 * a**2 + 1 if n_inputs == 1 else 2 * a**2 / (1 + b)
    if n_inputs > 1:
        columns["temp (C)"] = b  # a column name that is not a program name
    columns["y"] = y + 0.05 * rng.normal(size=n)
    if split:
        columns["split"] = ["train"] * 200 + ["validation"] * 100 + ["test"] * 100
    if group:
        columns["site"] = [f"s{i % 8}" for i in range(n)]
    path = folder / f"table{n_inputs}{'_split' if split else ''}{'_group' if group else ''}.csv"
    pl.DataFrame(columns).write_csv(path)
    return path


@dataclass(frozen=True)
class Case:
    name: str
    kind: str  # the task kind the run must get (datasets.tasks.TASKS)
    data: Callable[[Path], list[str]]  # writes the case's file into a folder; the data options
    shape: str  # how a model of it is asked to predict: "forecast", "curve", "grouped" or "table"


CASES = [
    Case("enso", "forecast", lambda folder: ["--task", "enso"], "forecast"),
    Case(
        "yearly-forecast",
        "forecast",
        lambda f: ["--data", str(_yearly_series(f, False)), "--x", "year", "--y", "v", "--task-kind", "forecast"],
        "forecast",
    ),
    Case(
        "forecast-covariate",
        "forecast",
        lambda f: [
            "--data",
            str(_yearly_series(f, True)),
            "--x",
            "year",
            "--y",
            "v",
            "--task-kind",
            "forecast",
            "--covariate",
            "c",
        ],
        "forecast",
    ),  # fmt: skip
    Case("curve", "curve", lambda f: ["--data", str(_curve(f)), "--x", "t", "--y", "signal"], "curve"),
    Case(
        "grouped-shared",
        "curve",
        lambda f: ["--data", str(_cells(f)), "--x", "cycle", "--y", "capacity_ah", "--group", "cell_id"],
        "grouped",
    ),
    Case(
        "regression-1",
        "regression",
        lambda f: ["--data", str(_table(f, 1)), "--x", "a", "--y", "y", "--task-kind", "regression"],
        "table",
    ),
    Case(
        "regression-split",
        "regression",
        lambda f: ["--data", str(_table(f, 2, split=True)), "--x", "a", "--x", "temp (C)", "--y", "y"],
        "table",
    ),
    Case(
        "regression-random",
        "regression",
        lambda f: ["--data", str(_table(f, 2)), "--x", "a,temp (C)", "--y", "y"],
        "table",
    ),
    Case(
        "regression-group",
        "regression",
        lambda f: [
            "--data",
            str(_table(f, 2, group=True)),
            "--x",
            "a",
            "--x",
            "temp (C)",
            "--y",
            "y",
            "--group",
            "site",
            "--split",
            "grouped",
        ],
        "table",
    ),  # fmt: skip
]


def test_every_task_kind_is_in_the_matrix():
    """A new task kind joins CASES (with a pyfunc shape the checks below know) or this fails."""
    from datasets.tasks import TASKS

    assert {case.kind for case in CASES} == set(TASKS)
    assert {case.shape for case in CASES} <= {"forecast", "curve", "grouped", "table"}
    assert len({case.name for case in CASES}) == len(CASES)


# ---------------------------------------------------------------------------- one run per case
@dataclass
class Run:
    case: Case
    folder: Path
    run_id: str
    data_args: list[str]
    output: str
    code: int

    @property
    def store(self) -> Path:
        return self.folder / "runs" / "candidates.duckdb"

    @property
    def runs(self) -> str:
        return str(self.folder / "runs")

    def card(self) -> dict[str, Any]:
        return json.loads((self.folder / "runs" / "reports" / self.run_id / "report.json").read_text())


@pytest.fixture(scope="module", params=CASES, ids=[case.name for case in CASES])
def run(request, prefect_api, tmp_path_factory) -> Run:
    case: Case = request.param
    folder = tmp_path_factory.mktemp(case.name)
    data_args = case.data(folder)
    run_id = f"e2e-{case.name}"
    command = [sys.executable, "-m", "ndvm.cli", "discover", *data_args, *TINY_RUN]
    command += ["--folder", str(folder / "runs"), "--run-id", run_id]
    done = subprocess.run(
        command, cwd=folder, env=subprocess_env(prefect_api, COLUMNS="200"), capture_output=True, text=True, timeout=600
    )
    return Run(case, folder, run_id, data_args, done.stdout + done.stderr, done.returncode)


REFUSED = re.compile(r"^reference fit failed: SARIMAX\(.*\) has no stable fit from \d+ starts")


def _cli(capsys, *argv: str) -> str:
    code = main(list(argv))
    out = capsys.readouterr()
    assert code == 0, f"ndvm {' '.join(argv)} exited {code}: {out.err[-2000:]}"
    return " ".join(out.out.split())


def _task_and_champion(run: Run) -> tuple[Any, dict[str, Any], Any]:
    """The run's task (as the store rebuilds it), the card's champion and its fit."""
    from flows.report import task_of_run
    from storage import CandidateStore

    with CandidateStore(run.store, read_only=True) as store:
        task, _ = task_of_run(store, run.run_id)
    champion = run.card()["champion"]
    fit = task.restore_fit(champion["source"], champion["parameters"], name=champion["hash"])
    return task, champion, fit


def _prediction_case(run: Run) -> tuple[pl.DataFrame, np.ndarray, Callable[[np.ndarray], np.ndarray]]:
    """(a frame a user gives the model, what the program itself computes for it, the rows of a
    prediction to compare): the task's own evaluation of the champion, not the model's."""
    task, _, fit = _task_and_champion(run)
    assert fit.ok, fit.error
    shape = run.case.shape
    if shape == "table":
        frame = task.dataset.test.select(list(task.dataset.inputs))
        return frame, task.predict(fit, None, "test"), lambda p: p
    if shape == "curve":
        frame = task.dataset.test.select(task.dataset.x)
        return frame, task.predict(fit, None, "test"), lambda p: p
    if shape == "grouped":
        group = task.groups()[0]  # a cell the run fitted: its test rows, with its own parameters
        frame = task.dataset.test.filter(pl.col(task.dataset.group) == group).select(task.dataset.group, task.dataset.x)
        return frame, task.predict(fit, group, "test"), lambda p: p
    # a forecast: the whole series as history; row o + 1 holds the lead-1 forecast from origin o
    columns = {task.dataset.y: task.y, **(task.model_x_columns(len(task.y)) if task.takes_x(fit.source) else {})}
    origins = task.origins("validation")
    want = task.forecasts(fit, "validation")[:, 0]
    return pl.DataFrame(columns), want, lambda p: p[origins + 1]


# ---------------------------------------------------------------------------- the checks
def test_discover_ends_with_its_summary_the_card_and_exit_0(run):
    assert run.code == 0, run.output[-3000:]
    flat = " ".join(run.output.split())
    assert f"{run.run_id} finished" in flat and "end of run:" not in flat
    assert "report card:" in flat and (Path(run.runs) / "reports" / run.run_id / "report.md").is_file()
    assert "model registry:" in flat
    from storage import CandidateStore

    with CandidateStore(run.store, read_only=True) as store:
        status = store.run_status(run.run_id)
    assert status.task == run.case.kind and status.status == "finished" and status.calibrated >= 10


def test_the_card_has_a_verdict_test_scores_and_every_reference(run, capsys):
    card = run.card()
    champion = card["champion"]
    assert champion["source"].strip() and champion["parameters"]
    assert champion["error"] is None and math.isfinite(champion["test_score"])
    assert card["verdict"] and card["best_reference"] in {r["name"] for r in card["references"]}
    # A reference may be refused only for the documented reason (a state-space fit whose every start
    # ends on a unit root: datasets/tasks/forecast.py); any other error is a bug in the path.
    failed = {r["name"]: r["error"] for r in card["references"] if r["error"] and not REFUSED.search(r["error"])}
    assert not failed, f"references reported as errors: {failed}"
    assert all(math.isfinite(r["test_score"]) for r in card["references"] if not r["error"])
    text = _cli(capsys, "report", "--run", run.run_id, "--folder", run.runs)
    assert "Verdict" in text and champion["hash"] in text and card["verdict"].split(":")[0] in text
    if run.case.kind == "regression":  # a table's champion is validated inside the box and at its edges
        parts = champion["validation_parts"]
        assert math.isfinite(parts["in_range"]) and math.isfinite(parts["edge"])
        assert "inside the training box" in " ".join(text.split()) and "edge block" in card["data_split"]
    else:
        assert "validation_parts" not in champion


def test_report_json_scripts_the_champion(run, capsys):
    out = _cli(capsys, "report", "--run", run.run_id, "--folder", run.runs, "--json")
    parsed = json.loads(out)
    assert parsed["champion"]["hash"] == run.card()["champion"]["hash"]
    assert parsed["champion"]["source"] and parsed["champion"]["parameters"] == run.card()["champion"]["parameters"]
    assert parsed["run_id"] == run.run_id and parsed["task"] == run.case.kind


def test_report_rebuild_computes_the_same_card(run, capsys):
    stored = run.card()
    main(["report", "--run", run.run_id, "--folder", run.runs, "--json", "--rebuild"])
    rebuilt = json.loads(capsys.readouterr().out)
    assert rebuilt["champion"]["hash"] == stored["champion"]["hash"]
    assert rebuilt["champion"]["test_score"] == pytest.approx(stored["champion"]["test_score"], rel=1e-9)
    assert [r["name"] for r in rebuilt["references"]] == [r["name"] for r in stored["references"]]
    assert rebuilt["verdict"] == stored["verdict"]


def test_leaderboard_and_its_pareto_front_list_the_champion(run, capsys):
    champion = run.card()["champion"]["hash"]
    board = _cli(capsys, "leaderboard", "--run", run.run_id, "--folder", run.runs)
    assert champion[:10] in board
    front = _cli(capsys, "leaderboard", "--run", run.run_id, "--folder", run.runs, "--pareto")
    assert champion[:10] in front and "complexity" in front.lower()


def test_log_promote_and_the_registered_model_predict_what_the_program_computes(run, capsys):
    import mlflow

    logged = _cli(capsys, "log", "--run", run.run_id, "--folder", run.runs)
    assert f"{run.run_id}: MLflow run" in logged and "leaderboard entries logged (0 new this time)" in logged
    promoted = _cli(capsys, "promote", "--run", run.run_id, "--folder", run.runs)
    uri = re.search(r"load_model\('([^']+)'\)", promoted)
    assert uri, promoted
    mlflow.set_tracking_uri(f"sqlite:///{run.runs}/mlflow.db")
    model = mlflow.pyfunc.load_model(uri.group(1))
    frame, want, rows = _prediction_case(run)
    got = np.asarray(model.predict(frame.to_pandas()), dtype=float).reshape(-1)
    assert got.shape == (frame.height,)
    np.testing.assert_allclose(rows(got), want, rtol=1e-9, atol=1e-12)


def test_recalibrate_refits_the_top_programs(run, capsys):
    out = _cli(
        capsys, "recalibrate", "--from-run", run.run_id, "--top", "2", "--run-id", f"{run.run_id}-recal",
        "--steps", "20", "--restarts", "2", "--folder", run.runs, *run.data_args,
    )  # fmt: skip
    assert f"{run.run_id} re-fitted on" in out and f"{run.run_id}-recal" in out
    from storage import CandidateStore

    with CandidateStore(run.store, read_only=True) as store:
        refitted = store.top(10, run_id=f"{run.run_id}-recal")
    assert refitted.height == 2 and refitted["score"].is_finite().all()


def test_discovery_result_equations_sympy_latex_predict(run):
    from flows.api import DiscoveryResult

    result = DiscoveryResult.open(run.runs, run.run_id)
    card = run.card()
    assert result.equations.height >= 1 and result.best["hash"] == card["champion"]["hash"]
    assert result.equations.filter(pl.col("champion")).height == 1
    expressions = result.sympy()
    if run.case.shape == "forecast":
        assert {"init", "predict", "update"} <= set(expressions)
    else:
        assert set(expressions) == {"y"} and expressions["y"].free_symbols
    assert result.latex().strip()
    frame, want, rows = _prediction_case(run)
    got = np.asarray(result.predict(frame), dtype=float).reshape(-1)
    assert got.shape == (frame.height,)
    np.testing.assert_allclose(rows(got), want, rtol=1e-9, atol=1e-12)


# ---------------------------------------------------------------------------- no silent end
def _tiny_discover(folder: Path, run_id: str) -> list[str]:
    data = _table(folder, 2, split=True)
    return ["discover", "--data", str(data), "--x", "a", "--x", "temp (C)", "--y", "y", *TINY_RUN,
            "--folder", str(folder / "runs"), "--run-id", run_id]  # fmt: skip


def _last_lines(text: str, n: int = 4) -> str:
    return " ".join(" ".join(text.strip().splitlines()[-n:]).split())


def test_a_failed_report_card_is_said_last_exits_70_and_report_builds_it_later(
    prefect_api, tmp_path, capsys, monkeypatch
):
    import flows.report
    from flows.cli_failures import EXIT_INTERNAL
    from storage import CandidateStore

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("injected: the card cannot be built")

    monkeypatch.setattr(flows.report, "build_report", broken)
    code = main(_tiny_discover(tmp_path, "card-fails"))
    out = capsys.readouterr().out
    assert code == EXIT_INTERNAL
    last = _last_lines(out)
    assert "end of run: report card failed" in last and "injected: the card cannot be built" in last
    assert "ndvm report --run card-fails" in last and "card-fails finished" in " ".join(out.split())
    with CandidateStore(tmp_path / "runs" / "candidates.duckdb", read_only=True) as store:
        status = store.run_status("card-fails")
        assert status.status == "finished" and status.calibrated >= 10  # the candidates are stored
        assert store.test_scores("card-fails").height > 0  # the step before it did its work
    assert not (tmp_path / "runs" / "reports" / "card-fails").exists()
    monkeypatch.undo()  # the cause fixed: the retry the line names builds the card
    text = _cli(capsys, "report", "--run", "card-fails", "--folder", str(tmp_path / "runs"))
    assert "Verdict" in text and (tmp_path / "runs" / "reports" / "card-fails" / "report.json").is_file()


def test_a_failed_test_scoring_exits_with_its_class_and_report_rebuild_scores_it(
    prefect_api, tmp_path, capsys, monkeypatch
):
    import errno

    import flows.final
    from flows.cli_failures import EXIT_DISK
    from storage import CandidateStore

    def full(*args: Any, **kwargs: Any) -> Any:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(flows.final, "score_final", full)
    code = main(_tiny_discover(tmp_path, "scoring-fails"))
    out = capsys.readouterr().out
    assert code == EXIT_DISK
    assert "end of run: test scoring failed" in _last_lines(out) and "disk is full" in _last_lines(out)
    store_path = tmp_path / "runs" / "candidates.duckdb"
    with CandidateStore(store_path, read_only=True) as store:
        assert store.test_scores("scoring-fails").height == 0
    # the report card does not depend on the stored scores: it was written
    assert (tmp_path / "runs" / "reports" / "scoring-fails" / "report.json").is_file()
    monkeypatch.undo()
    assert main(["report", "--run", "scoring-fails", "--folder", str(tmp_path / "runs"), "--rebuild"]) == 0
    err = capsys.readouterr().err
    assert "scored on the test split" in err
    with CandidateStore(store_path, read_only=True) as store:
        scores = store.test_scores("scoring-fails")
    assert scores.height > 3 and set(scores["entry_kind"]) == {"candidate", "reference"}
