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

    from flows.problem import ProblemSpec, load_problem
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
            **task.entry_extras(source, dict(fit.params)),
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
