"""The forecast pyfunc model forecasts (issue 30, part 5): loaded back from MLflow, it takes a
history and returns the forecasts at leads 1..h after its last value, exactly what the task's own
forecast driver computes from that origin; without a horizon it keeps the one-step-ahead rows."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import ndvm

if not hasattr(ndvm, "compile"):
    pytest.skip("the ndvm runtime (ndvm.compile) is not built yet", allow_module_level=True)

from datasets.tasks.forecast import AR2_SOURCE, SEASONAL_AR1_SOURCE  # noqa: E402

CALIBRATION = {"optimizer": "lbfgs", "steps": 60, "restarts": 2, "seed": 0}
# a candidate that takes x (the calendar month, (ref x 0)): its model reads the month column too
MONTHLY_X_SOURCE = """(param a 0.9) (param b 0.05)
(define (init) 0.0)
(define (predict s) (* a s))
(define (update s y x) (+ y (* b (cos (* 0.5235987755982988 (ref x 0))))))"""


@pytest.fixture(scope="module")
def logged(tmp_path_factory):
    """AR(2) and a seasonal AR(1) fitted on the embedded ENSO task and logged as the flow logs them."""
    import mlflow

    from flows.problem import ProblemSpec, entry_extras, load_problem
    from storage.tracking import LeaderboardEntry, Tracker

    dataset, task = load_problem(ProblemSpec(dataset="enso"))
    tracker = Tracker(run_folder=tmp_path_factory.mktemp("fc") / "runs", experiment="ndvm-enso-forecast-test")
    tracker.start_run("fc-1", dataset="enso", task="forecast")
    out = {"dataset": dataset, "task": task}
    for name, source in (("ar2", AR2_SOURCE), ("seasonal", SEASONAL_AR1_SOURCE), ("monthly-x", MONTHLY_X_SOURCE)):
        fit = task.fit(source, **CALIBRATION)
        assert fit.ok, fit.error
        entry = LeaderboardEntry(
            hash=name,
            source=source,
            parameters=dict(fit.params),
            train_metrics={"loss": fit.train_loss},
            heldout_metrics={"mean_rmse": 1.0},
            **entry_extras(dataset, task, source, dict(fit.params)),
        )
        _, uri = tracker.log_entry(entry)
        out[name] = (fit, mlflow.pyfunc.load_model(uri))
    tracker.end_run()
    return out


@pytest.mark.parametrize("name", ["ar2", "seasonal", "monthly-x"])
def test_forecasts_at_leads_1_to_h_equal_the_task_driver(logged, name):
    task, (fit, model) = logged["task"], logged[name]
    column = logged["dataset"].y
    origins = task.origins("validation")
    want = task.forecasts(fit, "validation")  # [origin, lead]
    x = name == "monthly-x"
    assert task.takes_x(fit.source) == x

    def past(end: int) -> pd.DataFrame:  # the history up to step end - 1, with x's columns when it reads x
        return pd.DataFrame({column: task.y[:end], **(task.model_x_columns(end) if x else {})})

    for row in (0, len(origins) // 2, len(origins) - 1):
        history = past(origins[row] + 1)
        got = model.predict(history, params={"horizon": task.leads})
        assert list(got.columns) == ["lead", "forecast"] and got["lead"].tolist() == list(range(1, task.leads + 1))
        np.testing.assert_allclose(got["forecast"].to_numpy(), want[row], rtol=1e-12, atol=1e-14)
    # a shorter and a longer horizon: the same path, cut or continued
    history = past(origins[-1] + 1)
    three = model.predict(history, params={"horizon": 3})["forecast"].to_numpy()
    np.testing.assert_allclose(three, want[-1][:3], rtol=1e-12, atol=1e-14)
    assert len(model.predict(history, params={"horizon": 24})) == 24


def test_without_a_horizon_the_model_predicts_one_step_per_row(logged):
    task, (fit, model) = logged["task"], logged["ar2"]
    column = logged["dataset"].y
    one_step = np.asarray(model.predict(pd.DataFrame({column: task.y})))
    assert one_step.shape == task.y.shape
    lead1 = task.forecasts(fit, "validation")[:, 0]
    np.testing.assert_allclose(one_step[task.origins("validation") + 1], lead1, rtol=1e-9, atol=1e-12)


def test_bad_histories_and_horizons_are_clear_errors(logged):
    model = logged["ar2"][1]
    column = logged["dataset"].y
    with pytest.raises(Exception, match="missing or infinite"):
        model.predict(pd.DataFrame({column: [0.1, np.nan, 0.2]}), params={"horizon": 3})
    with pytest.raises(Exception, match="whole number"):
        model.predict(pd.DataFrame({column: [0.1, 0.2]}), params={"horizon": -2})


# ---- what a user naturally passes: an int calendar column, covariates by name (issue 30, part 5) ----
# reads the calendar (ref x 0) and the covariate c (ref x 1); every term moves the forecasts
CALENDAR_COVARIATE_SOURCE = """(param a 0.6) (param b 1.0) (param k 0.01)
(define (init) 0.0)
(define (predict s) s)
(define (update s y x) (+ (* a y) (* b (ref x 1)) (* k (ref x 0))))"""


@pytest.fixture(scope="module")
def with_covariate(tmp_path_factory):
    """A yearly user file with an 11-step calendar and the covariate ``c`` (a manifest declares
    both); the candidate above fitted on it and logged as the flow logs it, loaded back."""
    import mlflow
    import polars as pl

    import datasets
    from datasets.tasks import make_task
    from flows.problem import entry_extras
    from storage.tracking import LeaderboardEntry, Tracker

    folder = tmp_path_factory.mktemp("cov")
    n, rng = 160, np.random.default_rng(0)
    c = rng.normal(size=n)
    v = np.zeros(n)
    for t in range(1, n):
        v[t] = 0.6 * v[t - 1] + 2.0 * c[t - 1] + 0.5 * rng.normal()
    path = folder / "cycles.csv"
    pl.DataFrame({"year": np.arange(1850, 1850 + n), "v": v, "c": c}).write_csv(path)
    path.with_suffix(".toml").write_text(
        'x = "year"\ny = "v"\ntask = "forecast"\nperiod = 11\nleads = 4\ncovariates = ["c"]\n'
    )
    dataset = datasets.load(path)
    task = make_task(dataset)
    fit = task.fit(CALENDAR_COVARIATE_SOURCE, **CALIBRATION)
    assert fit.ok, fit.error
    tracker = Tracker(run_folder=folder / "runs", experiment="ndvm-cycles-forecast-test")
    tracker.start_run("cov-1", dataset="cycles", task="forecast")
    entry = LeaderboardEntry(
        hash="cal-cov",
        source=CALENDAR_COVARIATE_SOURCE,
        parameters=dict(fit.params),
        train_metrics={"loss": fit.train_loss},
        heldout_metrics={"mean_rmse": 1.0},
        **entry_extras(dataset, task, CALENDAR_COVARIATE_SOURCE, dict(fit.params)),
    )
    _, uri = tracker.log_entry(entry)
    tracker.end_run()
    return task, fit, mlflow.pyfunc.load_model(uri)


def test_int_calendar_and_covariates_by_name_forecast_as_the_task_does(with_covariate):
    task, fit, model = with_covariate
    assert list(task.model_x_columns(1)) == ["calendar", "c"]
    origins, want = task.origins("validation"), task.forecasts(fit, "validation")
    row = len(origins) // 2
    end = origins[row] + 1
    cols = task.model_x_columns(end)
    calendar = cols["calendar"].astype(np.int64)  # what a user types: 1, 2, ..., 11, 1, ...
    assert np.array_equal(calendar, cols["calendar"])
    # columns in any order, the calendar as int64, extra columns (a label, the year) ignored
    history = pd.DataFrame(
        {"label": ["a"] * end, "c": cols["c"], "calendar": calendar, "year": np.arange(end), "v": task.y[:end]}
    )
    got = model.predict(history, params={"horizon": task.leads})["forecast"].to_numpy()
    np.testing.assert_allclose(got, want[row], rtol=1e-12, atol=1e-14)
    as_float = model.predict(history.astype({"calendar": float}), params={"horizon": task.leads})
    np.testing.assert_array_equal(as_float["forecast"].to_numpy(), got)
    # the covariate moves the forecast: it is read by name, not by position
    shifted = model.predict(history.assign(c=cols["c"] + 1.0), params={"horizon": task.leads})["forecast"]
    assert not np.allclose(shifted.to_numpy(), got)
    # one step ahead per row takes the int calendar too: row o + 1 is the lead-1 forecast from origin o
    one_step = np.asarray(model.predict(history))
    assert one_step.shape == (end,)
    np.testing.assert_allclose(one_step[origins[:row] + 1], want[:row, 0], rtol=1e-9, atol=1e-12)


def test_a_missing_or_unreadable_x_column_is_named(with_covariate):
    from storage.pyfunc_model import HistoryError

    task, _, model = with_covariate
    end = 40
    cols = task.model_x_columns(end)
    history = pd.DataFrame({"v": task.y[:end], "calendar": cols["calendar"].astype(int), "c": cols["c"]})
    with pytest.raises(HistoryError, match=r"lacks the column\(s\) 'c' \(a covariate"):
        model.predict(history.drop(columns="c"), params={"horizon": 3})
    with pytest.raises(HistoryError, match=r"'calendar' \(the calendar position of each row, 1\.\.11\)"):
        model.predict(history.drop(columns="calendar"))  # the one-step path checks the same columns
    with pytest.raises(HistoryError, match="'c' .* is not numeric"):
        model.predict(history.assign(c=["high"] * end), params={"horizon": 3})
    with pytest.raises(HistoryError, match="holds 12 at row 5: each value must be a whole number from 1 to 11"):
        model.predict(history.assign(calendar=np.where(np.arange(end) == 5, 12, history["calendar"])))
    with pytest.raises(HistoryError, match="'c' has 1 missing"):
        model.predict(history.assign(c=np.where(np.arange(end) == 7, np.nan, cols["c"])), params={"horizon": 3})
