"""Issue 15 parts 1-3 and 8: three splits owned by the task, a search that never sees the test
split, test metrics once at the end, the multi-step training loss, the task as an interface.

The central check: a discovery run (mutation proposer, fixed seed, serial) on a series whose test
targets are permuted proposes exactly the same programs and ranks them in exactly the same order as
on the original series; only the test metrics, computed at the end, differ.
"""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from conftest import shared_file

import datasets
import ndvm
from datasets.errors import SplitError
from datasets.schema import TEST, TEST_FIT, TRAIN, VALIDATION
from datasets.tasks import ForecastTask, TaskError, make_task
from datasets.tasks.forecast import AR1_SOURCE, KALMAN_AR1_SOURCE, SERIES

REPO = Path(__file__).resolve().parents[1]


def _permute_split(frame: pl.DataFrame, column: str, split: str, seed: int = 1) -> pl.DataFrame:
    """``frame`` with the values of ``column`` shuffled among the rows of ``split``."""
    rows = np.flatnonzero(frame.get_column("split").to_numpy() == split)
    values = frame.get_column(column).to_numpy().copy()
    values[rows] = values[rows][np.random.default_rng(seed).permutation(rows.size)]
    assert not np.array_equal(values, frame.get_column(column).to_numpy())
    return frame.with_columns(pl.Series(column, values))


# ---------------------------------------------------------------------------- part 1: the splits
def test_enso_default_split_is_three_contiguous_periods():
    ds = datasets.load("enso")
    years = {part: ds.frame.filter(pl.col("split") == part).get_column("year") for part in (TRAIN, VALIDATION, TEST)}
    assert (years[TRAIN].min(), years[TRAIN].max()) == (1950, 1980)
    assert (years[VALIDATION].min(), years[VALIDATION].max()) == (1981, 1990)
    assert (years[TEST].min(), years[TEST].max()) == (1991, 2010)
    task = make_task(ds)
    assert (task.n_train, task.n_validation, task.n_test) == (372, 120, 240)
    # validation origins start at the last training month; no validation target lies in the test years
    idx = task.origins(VALIDATION)[:, None] + np.arange(1, task.leads + 1)[None, :]
    assert task.origins(VALIDATION)[0] == 371 and idx[~np.isnan(task.targets(VALIDATION))].max() == 491
    assert task.origins(TEST)[0] == 491 and task.origins(TEST)[-1] == 730
    with pytest.raises(SplitError, match="must be after"):
        datasets.load("enso", train_end_year=1990, validation_end_year=1990)
    with pytest.raises(SplitError, match="no test rows"):
        datasets.load("enso", train_end_year=1990, validation_end_year=2010)


def test_forecast_fit_and_validation_never_read_the_test_years():
    ds = datasets.load("enso")
    task = make_task(ds)
    other = make_task(replace(ds, frame=_permute_split(ds.frame, "anom_c", TEST)))
    fit_a, fit_b = task.fit(KALMAN_AR1_SOURCE, steps=60, restarts=4), other.fit(KALMAN_AR1_SOURCE, steps=60, restarts=4)
    assert fit_a.params == fit_b.params and fit_a.train_loss == fit_b.train_loss
    assert task.score(fit_a, VALIDATION)["rmse_by_lead"] == other.score(fit_b, VALIDATION)["rmse_by_lead"]
    assert task.score(fit_a, TEST)["mean_rmse"] != other.score(fit_b, TEST)["mean_rmse"]
    ref_a = {r["model"]: r["mean_rmse"] for r in task.score_references(VALIDATION)}
    ref_b = {r["model"]: r["mean_rmse"] for r in other.score_references(VALIDATION)}
    assert ref_a == ref_b
    # and the fit never reads validation either
    third = make_task(replace(ds, frame=_permute_split(ds.frame, "anom_c", VALIDATION)))
    assert third.fit(KALMAN_AR1_SOURCE, steps=60, restarts=4).params == fit_a.params


def test_battery_split_per_cell_and_whole_test_cells():
    ds = datasets.load("battery-synthetic", test_cells="synthetic-05")
    assert ds.test_groups == ["synthetic-05"]
    for cell, part in ds.frame.group_by("cell_id", maintain_order=True):
        splits = part.sort("cycle").get_column("split").to_list()
        if cell[0] == "synthetic-05":
            assert splits == [TEST_FIT] * 280 + [TEST] * 120  # 0.5 + 0.2 of 400 cycles fit, the rest scored
        else:
            assert splits == [TRAIN] * 200 + [VALIDATION] * 80 + [TEST] * 120
    task = make_task(ds)
    assert "synthetic-05" not in task.groups() and task.test_groups() == ["synthetic-05"]
    # permuting every row of the test cell and the test tails of the others changes nothing the search sees
    perturbed = _permute_split(_permute_split(ds.frame, "soh", TEST), "soh", TEST_FIT, seed=2)
    other = make_task(replace(ds, frame=perturbed))
    source = "(param a 1.0)\n(param b 0.05 positive)\n(- a (* b (sqrt x)))"
    [fa] = task.fit_batch([ndvm.compile(source)], [source], ["sqrt"], steps=80, restarts=4)
    [fb] = other.fit_batch([ndvm.compile(source)], [source], ["sqrt"], steps=80, restarts=4)
    assert fa.params == fb.params
    assert task.score(fa, VALIDATION)["rmse"] == other.score(fb, VALIDATION)["rmse"]
    # the test score needs the held-out cell fitted on its own test_fit rows first
    assert "fit_test_groups" in task.score(fa, TEST)["error"]
    test_a = task.score(task.prepare_test_fit(fa, steps=80, restarts=4), TEST)
    test_b = other.score(other.prepare_test_fit(fb, steps=80, restarts=4), TEST)
    assert np.isfinite(test_a["rmse_test_groups"]) and test_a["per_group"]["synthetic-05"]["held_out_group"]
    assert test_a["rmse"] != test_b["rmse"]
    with pytest.raises(SplitError, match="must be < 1"):
        datasets.load("battery-synthetic", train_fraction=0.7, validation_fraction=0.3)


def test_severson_batch3_cells_are_test_cells():
    path = shared_file("battery/severson.csv")
    ds = datasets.load(path)
    b3 = [c for c in ds.groups if c.startswith("b3")]
    assert b3 and sorted(ds.test_groups) == sorted(b3)
    assert set(ds.frame.filter(pl.col("cell_id").str.starts_with("b3")).get_column("split").unique()) == {
        TEST_FIT,
        TEST,
    }
    task = make_task(ds)
    assert not any(g.startswith("b3") for g in task.groups())
    assert {g[:2] for g in task.groups()} == {"b1", "b2"}


def test_user_file_fractions_from_manifest_and_arguments(tmp_path):
    path = tmp_path / "series.csv"
    pl.DataFrame({"t": np.arange(100.0), "v": np.sin(np.arange(100.0) / 5)}).write_csv(path)
    ds = datasets.load(path, x="t", y="v")
    assert [ds.train.height, ds.validation.height, ds.test.height] == [60, 20, 20]
    path.with_suffix(".toml").write_text('x = "t"\ny = "v"\ntrain_fraction = 0.5\nvalidation_fraction = 0.3\n')
    ds = datasets.load(path)
    assert [ds.train.height, ds.validation.height, ds.test.height] == [50, 30, 20]
    ds = datasets.load(path, train_fraction=0.7, validation_fraction=0.1)  # the command line wins
    assert [ds.train.height, ds.validation.height, ds.test.height] == [70, 10, 20]
    assert ds.frame.get_column("split").to_list() == [TRAIN] * 70 + [VALIDATION] * 10 + [TEST] * 20
    with pytest.raises(SplitError, match="validation_fraction must be in"):
        datasets.load(path, validation_fraction=0.0)


def test_fractions_refused_for_a_dataset_split_by_periods():
    from flows.problem import ProblemSpec, load_problem

    with pytest.raises(SplitError, match="does not take"):
        load_problem(ProblemSpec(dataset="enso", train_fraction=0.5))
    _, task = load_problem(ProblemSpec(dataset="battery-synthetic", train_fraction=0.4, validation_fraction=0.3))
    assert task.dataset.train.height == 6 * 160 and task.dataset.validation.height == 6 * 120


# ---------------------------------------------------------------------------- part 3: the training loss
def test_forecast_training_loss_is_the_multi_step_error_over_the_scored_leads():
    task = make_task(datasets.load("enso"))
    program = ndvm.compile(task.program_source(AR1_SOURCE))
    y, phi = task.y[: task.n_train], 0.8
    total, count = 0.0, 0
    # every 5th month from the burn-in: every calendar month is an origin, every lead is scored
    assert task.fit_stride == 5 and list(task.fit_origins()[:3]) == [12, 17, 22]
    assert set(task.fit_origins() % 12) == set(range(12))
    for t in task.fit_origins():  # the state has seen y[..t-1]: AR(1) forecasts phi^k y[t-1]
        for k in range(1, task.leads + 1):
            if t + k - 1 >= task.n_train:
                break
            total += (y[t + k - 1] - phi**k * y[t - 1]) ** 2
            count += 1
    assert count == task.fit_count() == 855
    every = ForecastTask(task.dataset, fit_stride=1)  # all origins: the same formula
    assert every.fit_count() == 4254
    with pytest.raises(TaskError, match="fit_stride"):
        ForecastTask(task.dataset, fit_stride=0)
    assert program.run(params={"phi": phi}, inputs={SERIES: y.copy()}) == pytest.approx(total / count, rel=1e-12)
    # the gradient is exact too (NDVM against a central difference of the same loss)
    _, grad = program.value_and_grad([[phi]], inputs={SERIES: y.copy()})
    h = 1e-6
    up = program.run(params={"phi": phi + h}, inputs={SERIES: y.copy()})
    down = program.run(params={"phi": phi - h}, inputs={SERIES: y.copy()})
    assert float(np.asarray(grad).ravel()[0]) == pytest.approx((up - down) / (2 * h), rel=1e-5)


# ---------------------------------------------------------------------------- part 8: the task interface
# The modules of the flows that issue 15 part 8 moved behind the task's methods (report.py: the
# report card's errors, breakdown, paired test and verdict come from the task class).
TASK_FREE_FLOWS = (
    "calibration.py",
    "problem.py",
    "discover.py",
    "recalibrate.py",
    "cli.py",
    "cli_commands.py",
    "cli_display.py",
    "cli_failures.py",
    "cli_options.py",
    "final.py",
    "report.py",
    "report_verdict.py",
    "report_render.py",
    "report_mlflow.py",
    "stages/propose.py",
    "stages/admit.py",
    "stages/calibrate.py",
    "stages/score.py",
    "stages/log.py",
)


def test_flows_never_branch_on_the_task_kind():
    # task.kind tests, any comparison of a kind with a string, and duck typing of the task object
    pattern = re.compile(r"task\.kind\s*(==|!=|in\b)|\bkind\s*(==|!=)\s*[\"']|hasattr\(task\b")
    offenders = [
        f"{name}:{i}"
        for name in TASK_FREE_FLOWS
        for i, line in enumerate((REPO / "flows" / name).read_text().splitlines(), 1)
        if pattern.search(line)
    ]
    assert offenders == []


@pytest.mark.parametrize("name", ["enso", "battery-synthetic"])
def test_restore_fit_gives_back_the_fit_the_store_keeps(name):
    task = make_task(datasets.load(name))
    source = AR1_SOURCE if task.kind == "forecast" else "(param a 1.0)\n(param b -0.05)\n(+ a (* b x))"
    [fit] = task.fit_batch([ndvm.compile(task.program_source(source))], [source], ["c"], steps=50, restarts=4)
    restored = task.restore_fit(source, task.flat_parameters(fit.params))
    assert restored.params == fit.params
    assert task.score(restored, VALIDATION)[task.primary_metric] == task.score(fit, VALIDATION)[task.primary_metric]


# ---------------------------------------------------------------------------- part 2: the search never sees test
def _write_series(path: Path, frame: pl.DataFrame) -> Path:
    frame.select("t", "anom_c").write_csv(path)
    path.with_suffix(".toml").write_text(
        'x = "t"\ny = "anom_c"\ntask = "forecast"\ntrain_fraction = 0.5\nvalidation_fraction = 0.2\n'
    )
    return path


def _discover(folder: Path, data: Path, resume: str | None = None):
    from flows.discover import Budget, build_config, run_discovery
    from storage import CandidateStore

    config = build_config(
        "enso",
        "mutation",
        data=str(data),
        seed=3,
        serial=True,
        batch_size=32,
        steps=40,
        restarts=4,
        top_k=2,
        test_top_k=5,
        log_every=3600.0,
        folder=str(folder),
    )
    report = run_discovery(
        config,
        Budget(minutes=None, max_candidates=48 if resume is None else 112),
        run_id=None if resume else "honest",
        resume=resume,
    )
    assert report.status == "finished" and report.pending == 0
    with CandidateStore(folder / "candidates.duckdb", read_only=True) as store:
        history = store.history(report.run_id)
        top = store.top(100, run_id=report.run_id)
        tests = store.test_scores(report.run_id)
    return report, history, top, tests


def _champion_below_top(folder: Path, run_id: str, top: pl.DataFrame, k: int = 5) -> list[str]:
    """[the run's champion] when it is not among the top ``k`` (the end-of-run scoring adds it), else []."""
    from storage import CandidateStore
    from storage.selection import champion_of_run

    with CandidateStore(folder / "candidates.duckdb", read_only=True) as store:
        choice = champion_of_run(store, run_id)
    return [] if choice is None or choice.hash in top["hash"].to_list()[:k] else [choice.hash]


@pytest.mark.heavy  # (a discovery run of its own: make test-heavy, run by CI)
def test_permuted_test_targets_leave_the_search_bit_identical(tmp_path):
    frame = datasets.load("enso").frame
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    original = _write_series(tmp_path / "a" / "series.csv", frame)
    n = frame.height
    n_fit = int(n * 0.5) + int(n * 0.2)
    values = frame.get_column("anom_c").to_numpy().copy()
    values[n_fit:] = values[n_fit:][np.random.default_rng(7).permutation(n - n_fit)]
    permuted = _write_series(tmp_path / "b" / "series.csv", frame.with_columns(pl.Series("anom_c", values)))

    rep_a, hist_a, top_a, test_a = _discover(tmp_path / "a" / "runs", original)
    rep_b, hist_b, top_b, test_b = _discover(tmp_path / "b" / "runs", permuted)
    assert rep_a.calibrated > 20
    # the proposal stream: the same programs, in the same order, with the same outcomes
    assert (
        hist_a.select("source", "outcome", "hash").to_dicts() == hist_b.select("source", "outcome", "hash").to_dicts()
    )
    # the leaderboard: the same order and bit-identical validation scores and parameters
    assert (
        top_a.select("hash", "rank", "score", "parameters", "heldout_metrics").to_dicts()
        == top_b.select("hash", "rank", "score", "parameters", "heldout_metrics").to_dicts()
    )
    assert rep_a.best_hash == rep_b.best_hash and rep_a.best_score == rep_b.best_score
    # the test scores: the top 5 and the references, scored once at the end -- and they differ
    cands = test_a.filter(pl.col("entry_kind") == "candidate")
    # the final top 5, and the one-standard-error champion (storage/selection.py) when it ranks below
    # them: with the forecast task's standard error over validation blocks it often does
    assert cands["entry"].to_list()[:5] == top_a["hash"].to_list()[:5]
    assert cands["entry"].to_list()[5:] == _champion_below_top(tmp_path / "a" / "runs", rep_a.run_id, top_a)
    cands = cands.head(5)
    assert cands["validation_rank"].to_list() == top_a["rank"].to_list()[:5]  # (equal scores share a rank)
    assert sorted(test_a.filter(pl.col("entry_kind") == "reference")["entry"].to_list()) == [
        "ar-aic",
        "damped-persistence",
        "persistence",
        "sarima-200-101x12",  # fails on Niño 1+2 (seasonal MA root at -1): recorded as failed, never scored
        "statsmodels-arma21",  # fails likewise (MA root at -1)
    ]
    assert test_a["test_score"].to_list() != test_b["test_score"].to_list()
    assert test_a["validation_score"].to_list() == test_b["validation_score"].to_list()
    assert json.loads(test_a["test_metrics"][0]).keys() >= {"mean_rmse", "rmse_lead1", "rmse_lead12"}
    assert top_a["test_score"].to_list()[:5] == cands["test_score"].to_list()

    # A resumed run reads the store the first end wrote (test scores included): it still proposes
    # and ranks the same on both series, and scores its own final top 5 on test at its end.
    rep_a2, hist_a2, top_a2, test_a2 = _discover(tmp_path / "a" / "runs", original, resume="honest")
    rep_b2, hist_b2, top_b2, test_b2 = _discover(tmp_path / "b" / "runs", permuted, resume="honest")
    # 112 candidates and the task's three reference programs (AR(AIC), damped persistence and the
    # seasonal AR: the series is monthly, period 12)
    assert rep_a2.new == 112 + 3 and hist_a2.height > hist_a.height
    assert (
        hist_a2.select("source", "outcome", "hash").to_dicts() == hist_b2.select("source", "outcome", "hash").to_dicts()
    )
    assert (
        top_a2.select("hash", "rank", "score", "parameters").to_dicts()
        == top_b2.select("hash", "rank", "score", "parameters").to_dicts()
    )
    cands2 = test_a2.filter(pl.col("entry_kind") == "candidate")["entry"].to_list()
    assert cands2[:5] == top_a2["hash"].to_list()[:5]
    assert cands2[5:] == _champion_below_top(tmp_path / "a" / "runs", rep_a2.run_id, top_a2)
    assert test_a2["test_score"].to_list() != test_b2["test_score"].to_list()
