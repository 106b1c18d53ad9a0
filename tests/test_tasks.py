"""Tasks: references fit and score on the same split; held-out values never reach a fit.

The tests that need the NDVM runtime (ndvm.compile / ndvm.calibrate) are skipped while it is not
built; the driver programs are also checked under Guile (an independent R7RS implementation) when
it is installed.
"""

from __future__ import annotations

import re
import shutil
import subprocess

import numpy as np
import polars as pl
import pytest
from conftest import needs_shared, shared_data_dir  # noqa: E402

import datasets
from datasets import enso
from datasets.schema import Dataset
from datasets.tasks import (
    BATTERY_REFERENCES,
    CandidateError,
    CurveTask,
    ForecastTask,
    TaskError,
    make_task,
    ndvm_available,
)
from datasets.tasks import forecast as fc
from datasets.tasks import runtime as sexpr

DATA = shared_data_dir()  # ../shared/data or $NDVM_SHARED_DATA; read only inside tests
NASA = DATA / "battery" / "nasa_pcoe.csv"
needs_data = needs_shared("battery/nasa_pcoe.csv", "enso/raw/psl_nino34.long.data.txt")
needs_ndvm = pytest.mark.skipif(not ndvm_available(), reason="the ndvm runtime (ndvm.compile/calibrate) is not built")
needs_guile = pytest.mark.skipif(shutil.which("guile") is None, reason="guile not installed")


# ----------------------------------------------------------------------------- helpers


def perturbed_enso(delta: float = 3.0) -> Dataset:
    """The enso dataset with every test-year SST value shifted (training and validation untouched)."""
    frame = enso.elnino_frame().with_columns(
        pl.when(pl.col("year") > 1990)
        .then(pl.col("sst_c") + delta * np.sin(pl.col("month").cast(pl.Float64)))
        .otherwise(pl.col("sst_c"))
        .alias("sst_c")
    )
    return enso.sst_dataset("enso", frame, train_end_year=1980, validation_end_year=1990)


def perturbed_battery(ds: Dataset, factor: float = 0.7) -> Dataset:
    frame = ds.frame.with_columns(
        pl.when(pl.col("split") == "test").then(pl.col("soh") * factor).otherwise(pl.col("soh")).alias("soh"),
        pl.when(pl.col("split") == "test")
        .then(pl.col("capacity_ah") * factor)
        .otherwise(pl.col("capacity_ah"))
        .alias("capacity_ah"),
    )
    return Dataset(ds.name, frame, ds.x, ds.y, ds.group, ds.definition, ds.columns, dict(ds.meta))


# ----------------------------------------------------------------------------- task selection


def test_make_task_picks_by_dataset_kind():
    assert isinstance(make_task(datasets.load("enso")), ForecastTask)
    assert isinstance(make_task(datasets.load("battery-synthetic")), CurveTask)
    with pytest.raises(TaskError, match="unknown task"):
        make_task(datasets.load("enso"), kind="classify")
    with pytest.raises(TaskError, match="groups"):
        ForecastTask(datasets.load("battery-synthetic"))


# ----------------------------------------------------------------------------- forecast: references and leakage


def test_enso_references_score_on_held_out_years():
    task = make_task(datasets.load("enso"))
    assert task.n_train == 372 and task.origins("test")[0] == 491 and task.origins("test")[-1] == 730
    # every verified test target lies in the test years
    idx = task.origins("test")[:, None] + np.arange(1, 13)[None, :]
    assert idx.min() == task.n_train + task.n_validation == 492
    assert len(task.score_references("validation")[0]["rmse_by_lead"]) == 12
    assert task.score_references("validation")[0]["n_origins"] == 120
    rows = {r["model"]: r for r in task.score_references("test")}
    assert set(rows) == {"persistence", "damped-persistence", "ar-aic", "statsmodels-arma21", "sarima-200-101x12"}
    # Nino 1+2: maximum likelihood puts the ARMA(2,1)'s MA root and the seasonal model's seasonal MA
    # root on the unit circle from every start: both are reported as failed, never as a score
    for name in ("statsmodels-arma21", "sarima-200-101x12"):
        failed = rows.pop(name)
        assert (
            failed["mean_rmse"] == np.inf
            and "no stable fit" in failed["error"]
            and "MA inverse root" in failed["error"]
        )
    for row in rows.values():
        assert len(row["rmse_by_lead"]) == 12 and np.isfinite(row["mean_rmse"]) and row["n_origins"] == 240
        assert row["acc_by_lead"][0] > 0.85  # one month ahead is easy
        assert row["rmse_by_lead"][0] < row["rmse_by_lead"][11]  # skill decays with lead
    assert rows["persistence"]["skill_vs_persistence"] == [0.0] * 12
    assert rows["damped-persistence"]["mean_rmse"] < rows["persistence"]["mean_rmse"]
    assert rows["ar-aic"]["mean_rmse"] < rows["persistence"]["mean_rmse"]


def test_forecast_references_ignore_held_out_values():
    task, other = make_task(datasets.load("enso")), make_task(perturbed_enso())
    assert np.array_equal(task.train_inputs()[fc.SERIES], other.train_inputs()[fc.SERIES])
    for ref in task.reference_models()[1:]:
        try:
            a = task.fit_reference(ref)
        except fc.ReferenceFitError as exc:  # a failed fit fails the same way without the held-out years
            with pytest.raises(fc.ReferenceFitError, match=re.escape(str(exc))):
                other.fit_reference(ref)
            continue
        b = other.fit_reference(ref)
        flat = lambda state: np.concatenate([np.ravel(np.asarray(v, float)) for v in state])  # noqa: E731
        assert np.array_equal(flat(a), flat(b)), ref.name
    before = {r["model"]: r["mean_rmse"] for r in task.score_references("test")}
    after = {r["model"]: r["mean_rmse"] for r in other.score_references("test")}
    # the test scores do see the test values (a failed reference stays failed)
    assert all(before[m] != after[m] or before[m] == after[m] == np.inf for m in before)
    # and the validation scores do not
    assert {r["model"]: r["mean_rmse"] for r in task.score_references("validation")} == {
        r["model"]: r["mean_rmse"] for r in other.score_references("validation")
    }


@needs_data
def test_nino34_forecast_task_from_psl_file():
    task = make_task(datasets.load("enso-nino34", path=DATA / "enso" / "raw" / "psl_nino34.long.data.txt"))
    rows = {r["model"]: r for r in task.score_references("test")}
    # Niño 3.4 is smoother than Niño 1+2: persistence is good at lead 1 and damped persistence helps later
    assert rows["persistence"]["rmse_by_lead"][0] < 0.4
    assert rows["damped-persistence"]["mean_rmse"] < rows["persistence"]["mean_rmse"]


def test_forecast_candidate_contract():
    task = make_task(datasets.load("enso"))
    for seed in task.seed_programs():
        task.check_candidate(seed)
        assert task.program_source(seed).rstrip().endswith(f"(ndvm-task-multi-step-loss {fc.SERIES} 12 5 12 855.0)")
    with pytest.raises(CandidateError, match="missing: update"):
        task.check_candidate("(define (init) 0.0)\n(define (predict s) s)")
    with pytest.raises(CandidateError, match="reserved"):
        task.check_candidate(fc.AR1_SOURCE + f"\n(define (peek) (ref {fc.SERIES} 0))")
    with pytest.raises(CandidateError, match="predict-var"):
        ForecastTask(datasets.load("enso"), loss="gaussian_nll").check_candidate(fc.AR1_SOURCE)
    text = task.contract_text()
    assert "(define (predict s)" in text and "leads 1..12" in text and "calendar month 1" in text


def test_forecast_task_on_user_series(tmp_path):
    path = tmp_path / "series.csv"
    rng = np.random.default_rng(0)
    y = np.zeros(300)
    for t in range(1, 300):
        y[t] = 0.8 * y[t - 1] + rng.normal()
    pl.DataFrame({"t": np.arange(300.0), "v": y}).write_csv(path)
    task = make_task(datasets.load(path, x="t", y="v"), kind="forecast")
    assert (task.n_train, task.n_validation, task.n_test) == (180, 60, 60) and task.first_month is None
    rows = {r["model"]: r for r in task.score_references("test")}
    assert rows["damped-persistence"]["mean_rmse"] < rows["persistence"]["mean_rmse"]
    assert "calendar month" not in task.contract_text().split("\n")[0]


def test_sexpr_reader():
    src = "; comment\n(param a 1.0) #| block |# (define (f x) (* a x)) (define k 2) 'sym (f k)"
    assert sexpr.top_level_forms(src) == ["(param a 1.0)", "(define (f x) (* a x))", "(define k 2)", "'sym", "(f k)"]
    assert sexpr.defined_names(src) == {"a": "param", "f": "function", "k": "value"}
    assert sexpr.last_form_is_expression(src) and not sexpr.last_form_is_expression("(define k 2)")
    with pytest.raises(CandidateError):
        sexpr.top_level_forms("(+ 1 2")


GUILE_PRELUDE = """
(define-syntax param (syntax-rules () ((_ name value . constraint) (define name value))))
(define (size v) (vector-length v))
(define (ref v i) (vector-ref v i))
"""


def _guile(source: str, series: np.ndarray, final: str) -> str:
    """Run a task program under Guile with the series bound, printing the last expression."""
    lines = source.rstrip().splitlines()
    assert lines[-1].startswith(final)
    lines[-1] = f"(write {lines[-1]})"
    vector = f"(define {fc.SERIES} (vector {' '.join(repr(float(v)) for v in series)}))"
    out = subprocess.run(
        ["guile", "-c", GUILE_PRELUDE + vector + "\n".join(lines)], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout


@needs_guile
def test_forecast_drivers_under_guile():
    """The drivers mean what the task says: checked against numpy on an AR(1) candidate."""
    task = make_task(datasets.load("enso"))
    phi = 0.8
    candidate = fc.AR1_SOURCE.replace("(param phi 0.9", f"(param phi {phi}")
    loss = float(_guile(task.program_source(candidate), task.y[: task.n_train], "(ndvm-task-multi-step-loss"))
    y = task.y[: task.n_train]
    errors = [
        y[t + k - 1] - phi**k * y[t - 1]
        for t in range(12, task.n_train, 5)
        for k in range(1, 13)
        if t + k - 1 < task.n_train
    ]  # multi-step AR(1) forecasts from every 5th origin after the burn-in
    assert loss == pytest.approx(np.mean(np.square(errors)), rel=1e-12)
    text = _guile(task.forecast_source(candidate, "test"), task.y, "(ndvm-task-forecasts")
    rows = text.strip()[2:-2].split(") (")  # Guile writes ((f1 ... f12) (f1 ... f12) ...)
    forecasts = np.array([[float(v) for v in row.split()] for row in rows])
    assert forecasts.shape == (240, 12)
    assert np.allclose(forecasts, task.y[task.origins("test")][:, None] * phi ** np.arange(1, 13), atol=1e-12)


# ----------------------------------------------------------------------------- curve: references and leakage


@needs_data
def test_battery_references_fit_and_score():
    task = make_task(datasets.load("battery", path=NASA))
    assert task.x_scale == 100.0 and task.groups() == ["B0005", "B0006", "B0007", "B0018"]
    # 168 cycles: 84 train, 33 validation, 51 test
    assert task.train_inputs("B0005")["x"].shape == (84,) and task.split_target("validation", "B0005").shape == (33,)
    assert task.split_target("test", "B0005").shape == (51,)
    counts = {(cell, split): n for cell, split, n in task.dataset.frame.group_by("cell_id", "split").len().iter_rows()}
    rows = {r["model"]: r for r in task.score_references("test")}
    assert set(rows) == {"linear", "sqrt-sei", "power-law", "knee-bacon-watts", "double-exponential"}
    for row in rows.values():
        assert set(row["per_group"]) == set(task.groups())
        assert row["train_rmse"] < 0.03 and np.isfinite(row["rmse"])
        assert all(
            g["n_fit"] == counts[c, "train"] and g["n_scored"] == counts[c, "test"] for c, g in row["per_group"].items()
        )
    assert rows["linear"]["rmse"] < 0.06


def test_battery_curve_fit_ignores_held_out_values():
    ds = datasets.load("battery-synthetic", n_cells=3, n_cycles=200)
    task, other = CurveTask(ds), CurveTask(perturbed_battery(ds))
    for group in task.groups():
        assert np.array_equal(task.train_inputs(group)["x"], other.train_inputs(group)["x"])
        assert np.array_equal(task.train_target(group), other.train_target(group))
    for ref in BATTERY_REFERENCES[:3]:
        a, b = task.fit_reference(ref), other.fit_reference(ref)
        assert a.params == b.params, ref.name
        assert task.score(a, "validation")["rmse"] == other.score(b, "validation")["rmse"]
        assert task.score(a, "test")["rmse"] != other.score(b, "test")["rmse"]


def test_curve_task_on_user_file(tmp_path):
    path = tmp_path / "d.csv"
    x = np.linspace(0, 10, 50)
    pl.DataFrame({"x": x, "y": 2.0 + 0.5 * x}).write_csv(path)
    task = make_task(datasets.load(path, x="x", y="y"))
    assert task.x_scale == 1.0 and task.groups() == [None]
    rows = {r["model"]: r for r in task.score_references("test")}
    assert rows["linear"]["rmse"] < 1e-8
    assert "`y`" in task.contract_text()
    with pytest.raises(CandidateError, match="end with an expression"):
        task.program_source("(param a 1.0)\n(define f a)")


# ----------------------------------------------------------------------------- with the NDVM runtime


@needs_ndvm
def test_seed_programs_compile():
    enso_task = make_task(datasets.load("enso"))
    curve_task = make_task(datasets.load("battery-synthetic"))
    for seed in enso_task.seed_programs():
        enso_task.compile(seed)
        enso_task.compile(seed, forecast=True)
    for seed in curve_task.seed_programs():
        curve_task.compile(seed)


@needs_ndvm
def test_forecast_fit_ar1_matches_closed_form_and_ignores_held_out_values():
    task = make_task(datasets.load("enso"))
    fit = task.fit(fc.AR1_SOURCE, name="ar1", optimizer="lbfgs", steps=100, restarts=4, seed=0)
    assert fit.ok, fit.error
    from scipy.optimize import minimize_scalar

    y = task.y[: task.n_train]
    origins = [(t, k) for t in range(12, task.n_train, 5) for k in range(1, 13) if t + k - 1 < task.n_train]
    target = np.array([y[t + k - 1] for t, k in origins])
    last, lead = np.array([y[t - 1] for t, _ in origins]), np.array([k for _, k in origins])
    # the multi-step least-squares AR(1) coefficient: phi^k y[t-1] forecasts y[t+k-1]
    phi = minimize_scalar(
        lambda p: np.mean((target - p**lead * last) ** 2), bounds=(-1, 1), method="bounded", options={"xatol": 1e-10}
    ).x
    assert fit.params["phi"] == pytest.approx(phi, abs=2e-3)
    score = task.score(fit)
    assert np.isfinite(score["mean_rmse"]) and len(score["rmse_by_lead"]) == 12
    other = make_task(perturbed_enso()).fit(fc.AR1_SOURCE, name="ar1", optimizer="lbfgs", steps=100, restarts=4, seed=0)
    assert other.params == fit.params and other.train_loss == fit.train_loss


@needs_ndvm
def test_forecast_seeds_fit_and_score():
    task = make_task(datasets.load("enso"))
    persistence = task.score_references()[0]["mean_rmse"]
    for seed in task.seed_programs():
        fit = task.fit(seed, steps=150, restarts=8, seed=0)
        assert fit.ok, fit.error
        score = task.score(fit)
        assert score["mean_rmse"] < persistence, seed


@needs_ndvm
@needs_data
def test_battery_ndvm_references_match_scipy_and_ignore_held_out_values():
    ds = datasets.load("battery", path=NASA)
    task, other = make_task(ds), make_task(perturbed_battery(ds))
    linear, sqrt_sei = BATTERY_REFERENCES[0], BATTERY_REFERENCES[1]
    for ref in (linear, sqrt_sei):
        fit = task.fit(ref.source, name=ref.name, optimizer="lbfgs", steps=200, restarts=4, seed=0)
        assert fit.ok, fit.error
        scipy_fit = task.fit_reference(ref)
        for group in task.groups():
            for name in ref.param_names:
                assert fit.params[group][name] == pytest.approx(scipy_fit.params[group][name], abs=1e-3)
        assert task.score(fit)["rmse"] == pytest.approx(task.score(scipy_fit)["rmse"], abs=1e-3)
        again = other.fit(ref.source, name=ref.name, optimizer="lbfgs", steps=200, restarts=4, seed=0)
        assert again.params == fit.params


@needs_ndvm
def test_broken_candidates_score_inf_with_a_reason():
    task = make_task(datasets.load("battery-synthetic", n_cells=2, n_cycles=100))
    bad = task.fit("(param a 1.0)\n(+ a (car x))", steps=10, restarts=2)
    score = task.score(bad)
    assert score["rmse"] == float("inf") and score["error"]
    unknown = task.fit("(param a 1.0)\n(+ a z)", steps=10, restarts=2)
    assert not unknown.ok and "z" in unknown.error


@needs_ndvm
def test_forecast_gaussian_nll_with_predict_var():
    task = ForecastTask(datasets.load("enso"), loss="gaussian_nll")
    source = fc.AR1_SOURCE + "\n(param v 0.2 positive)\n(define (predict-var s) v)"
    fit = task.fit(source, optimizer="lbfgs", steps=300, restarts=4, seed=0)
    assert fit.ok, fit.error
    # the Gaussian NLL stays one-step: with a constant variance the mean fit is the one-step least
    # squares AR(1) and v the mean squared one-step error (both after the 12-month burn-in)
    y = task.y[: task.n_train]
    phi = float(np.dot(y[12:], y[11:-1]) / np.dot(y[11:-1], y[11:-1]))
    assert fit.params["phi"] == pytest.approx(phi, abs=1e-5)
    assert fit.params["v"] == pytest.approx(np.mean((y[12:] - phi * y[11:-1]) ** 2), rel=1e-4)
    assert np.isfinite(task.score(fit)["mean_rmse"])
