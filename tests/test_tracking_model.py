"""The pyfunc model class on its own (no MLflow store): vector programs, static inputs, programs
evaluated one row per lane, and a clear error for a missing input."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

import ndvm

if not hasattr(ndvm, "compile"):
    pytest.skip("the ndvm runtime (ndvm.compile) is not built yet", allow_module_level=True)

from mlflow.pyfunc import PythonModelContext  # noqa: E402

from storage.pyfunc_model import NDVMProgramModel  # noqa: E402


def load(tmp_path, source, params, static=None):
    (tmp_path / "program.scm").write_text(source)
    (tmp_path / "fit.json").write_text(json.dumps({"params": params, "static_inputs": static or {}}))
    model = NDVMProgramModel()
    model.load_context(
        PythonModelContext(
            artifacts={"program": str(tmp_path / "program.scm"), "fit": str(tmp_path / "fit.json")}, model_config=None
        )
    )
    return model


def test_vector_program_with_a_static_input(tmp_path):
    model = load(tmp_path, "(param a 0.5) (+ (* a x) t)", {"a": 2.0}, static={"t": 10.0})
    got = model.predict(None, pd.DataFrame({"x": [1.0, 2.0, 3.0]}))
    np.testing.assert_array_equal(got, [12.0, 14.0, 16.0])


def test_branching_program_is_evaluated_one_row_per_lane(tmp_path):
    source = "(param a 0.5) (param b 2.0) (if (> x 1) (* a x) (* b x))"
    model = load(tmp_path, source, {"a": 0.5, "b": 2.0})
    x = np.array([0.5, 2.0, 3.0, 1.0])
    got = model.predict(None, pd.DataFrame({"x": x}))
    program = ndvm.compile(source)
    want = [program.run({"a": 0.5, "b": 2.0}, {"x": float(v)}) for v in x]
    np.testing.assert_array_equal(got, want)


def test_missing_input_and_missing_parameter_are_errors(tmp_path):
    model = load(tmp_path, "(param a 0.5) (+ (* a x) t)", {"a": 2.0})
    with pytest.raises(ValueError, match="input 't'"):
        model.predict(None, pd.DataFrame({"x": [1.0]}))
    with pytest.raises(ValueError, match="lack"):
        load(tmp_path, "(param a 0.5) (param b 1.0) (* a b x)", {"a": 2.0})


# ---- the battery model: every cell, raw cycles, new cells calibrated on the fly ---------------
SQRT_FADE = "(param a 1.0) (param b 0.05 positive) (param c -0.01) (+ a (* b (- 0.0 (sqrt x))) (* c x))"
# the settings as the flow logs them (CalibrationOptions: the pipeline searches every parameter)
CALIBRATION = {"optimizer": "adam", "steps": 300, "lr": 0.05, "restarts": 4, "solve_linear": False, "seed": 0}


@pytest.fixture(scope="module")
def battery(tmp_path_factory):
    """A per-cell fit on battery-synthetic (6 cells), logged by the tracker as the flow logs it."""
    import mlflow

    from flows.problem import ProblemSpec, entry_extras, load_problem
    from storage.tracking import LeaderboardEntry, Tracker

    dataset, task = load_problem(ProblemSpec(dataset="battery-synthetic"))
    fit = task.fit(SQRT_FADE, **CALIBRATION)
    assert fit.ok, fit.error
    parameters = task.flat_parameters(fit.params)
    tracker = Tracker(run_folder=tmp_path_factory.mktemp("battery") / "runs", experiment="ndvm-battery-synthetic-curve")
    tracker.start_run(
        "battery-1", dataset="battery-synthetic", task="curve", config={"calibration": {**CALIBRATION, "threads": None}}
    )
    entry = LeaderboardEntry(
        hash="battery-entry",
        source=SQRT_FADE,
        parameters=parameters,
        train_metrics={"mse": fit.train_loss},
        heldout_metrics={"rmse": 0.0},
        **entry_extras(dataset, task, SQRT_FADE, parameters),
    )
    _, uri = tracker.log_entry(entry)
    tracker.end_run()
    return dict(dataset=dataset, task=task, fit=fit, model=mlflow.pyfunc.load_model(uri), tracker=tracker)


def cell_rows(dataset, cell) -> pd.DataFrame:
    import polars as pl

    frame = dataset.frame.filter(pl.col("cell_id") == cell).sort("cycle")
    return pd.DataFrame(
        {"cell_id": frame["cell_id"].to_list(), "cycle": frame["cycle"].to_numpy(), "soh": frame["soh"].to_numpy()}
    )


def test_battery_model_predicts_every_cell_from_raw_cycles(battery):
    dataset, task, fit, model = battery["dataset"], battery["task"], battery["fit"], battery["model"]
    cells = task.groups()
    assert len(cells) == 6 and len(fit.params) == 6
    frames = []
    for cell in cells:
        rows = cell_rows(dataset, cell)[["cell_id", "cycle"]]
        want = fit.predictor(cell, {"x": rows["cycle"].to_numpy() / task.x_scale})
        np.testing.assert_allclose(model.predict(rows), want, rtol=1e-12, atol=0)
        frames.append(rows.assign(want=want))
    # all cells in one frame, rows shuffled: each row gets its own cell's parameters
    mixed = pd.concat(frames).sample(frac=1.0, random_state=3)
    np.testing.assert_allclose(model.predict(mixed[["cell_id", "cycle"]]), mixed["want"].to_numpy(), rtol=1e-12, atol=0)
    # the cells really differ: one cell's parameters would not give these predictions
    assert np.ptp([fit.params[c]["a"] for c in cells]) > 1e-3


def test_battery_model_refuses_unknown_cells_and_scaled_input(battery):
    model = battery["model"]
    from storage.pyfunc_model import UnknownGroupError

    with pytest.raises(UnknownGroupError, match="unknown cell_id 'b9c9'.*synthetic-00, synthetic-01"):
        model.predict(pd.DataFrame({"cell_id": ["b9c9"], "cycle": [100]}))
    with pytest.raises(UnknownGroupError, match="2 rows with 'soh' cannot determine 3 parameters"):
        model.predict(pd.DataFrame({"cell_id": ["b9c9"] * 3, "cycle": [1, 2, 300], "soh": [1.0, 0.99, np.nan]}))
    # x / 100 is not an input of this model: the raw cycle column is required, by name and type
    import mlflow

    with pytest.raises(mlflow.exceptions.MlflowException, match="cycle"):
        model.predict(pd.DataFrame({"cell_id": ["synthetic-00"], "x": [1.0]}))


def test_battery_model_calibrates_a_new_cell_from_its_early_cycles(battery):
    """A cell the model has not seen: its first 40% of cycles with their state of health, the rest
    without. The model fits it with the run's calibration settings and predicts its whole life."""
    import ndvm

    dataset, task, model = battery["dataset"], battery["task"], battery["model"]
    rows = cell_rows(dataset, task.groups()[2]).assign(cell_id="new-cell")
    early = int(0.4 * len(rows))
    given = rows.assign(soh=np.where(np.arange(len(rows)) < early, rows["soh"], np.nan))
    got = model.predict(given)

    x = rows["cycle"].to_numpy() / task.x_scale
    direct = ndvm.calibrate(
        ndvm.compile(SQRT_FADE), {"x": x[:early]}, target=rows["soh"].to_numpy()[:early], loss="mse", **CALIBRATION
    )
    np.testing.assert_allclose(got, np.asarray(direct.predict({"x": x})), rtol=1e-12, atol=0)
    soh = rows["soh"].to_numpy()
    fitted = np.sqrt(np.mean((got[:early] - soh[:early]) ** 2))
    assert fitted < 0.25 * np.std(soh[:early]), (fitted, np.std(soh[:early]))  # it fits the new cell's own fade
    # a known cell in the same frame keeps its stored parameters
    known = cell_rows(dataset, task.groups()[0])
    both = pd.concat([given, known])
    np.testing.assert_allclose(
        model.predict(both)[len(given) :],
        battery["fit"].predictor(task.groups()[0], {"x": known["cycle"].to_numpy() / 100.0}),
        rtol=1e-12,
        atol=0,
    )
