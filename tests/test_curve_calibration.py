"""Curve fits reach the least-squares optimum: the run's calibration (the pipeline's default is Adam,
100 steps x 8 lanes), then L-BFGS from the same starts, the lower training loss kept
(``CurveTask._calibrate``), for the training cells, the whole validation cells and the whole test
cells alike. Without the L-BFGS pass a candidate is judged by a fit far from its optimum while the
reference laws (fitted by scipy's least squares) are not: on these power-law cells Adam's training
loss is about 100 times the optimum's."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from datasets.battery import tidy_dataset
from datasets.schema import TEST_FIT, VALIDATION_FIT
from datasets.tasks import BATTERY_REFERENCES, CurveTask
from datasets.tasks.runtime import ndvm_available

pytestmark = pytest.mark.skipif(not ndvm_available(), reason="the ndvm runtime (ndvm.compile/calibrate) is not built")

# the pipeline's calibration defaults (flows/calibration.py CalibrationOptions)
PIPELINE = {"optimizer": "adam", "steps": 100, "lr": 0.05, "restarts": 8, "seed": 0}
POWER_LAW = BATTERY_REFERENCES[2]


def power_cells(n_cells: int = 8, seed: int = 0, **split):
    """Fade curves soh = 1 - b (cycle/100)^z with per-cell b and z (600-1000 cycles, noise 0.001)."""
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n_cells):
        b, z = rng.uniform(0.002, 0.01), rng.uniform(2.0, 3.0)
        n = np.arange(1, int(rng.integers(600, 1000)) + 1, dtype=float)
        cap = 1.05 * (1.0 - b * (n / 100.0) ** z) + rng.normal(0.0, 0.001, n.size)
        rows.append(pl.DataFrame({"cell_id": f"c{i:02d}", "cycle": n.astype(np.int64), "capacity_ah": cap}))
    return tidy_dataset(pl.concat(rows).lazy(), name="battery-synthetic", min_cycles=1, **split)


def adam_only(task: CurveTask, part_of, groups) -> list[float]:
    """Each group's loss after the run's Adam calibration alone, every parameter searched (what the
    task did before: solved linear parameters take Adam much closer to the optimum)."""
    import ndvm

    program = task.compile(POWER_LAW.source)
    data = [({"x": task._xy(g, part_of(g))[0]}, task._xy(g, part_of(g))[1]) for g in groups]
    return [f.loss for f in ndvm.calibrate_groups([program], data, loss="mse", solve_linear=False, **PIPELINE)[0]]


def test_a_candidate_fit_reaches_the_least_squares_optimum_of_the_reference():
    task = CurveTask(power_cells())
    fit = task.fit(POWER_LAW.source, **PIPELINE)
    scipy_fit = task.fit_reference(POWER_LAW)
    assert fit.ok, fit.error
    assert fit.train_loss == pytest.approx(scipy_fit.train_loss, rel=1e-6)
    # the data ask for it: Adam's 100 steps stop far from the optimum on these cells
    assert np.mean(adam_only(task, lambda g: "train", task.groups())) > 10 * scipy_fit.train_loss
    # the validation scores follow: the candidate's equal the reference's
    assert task.score(fit)["rmse"] == pytest.approx(task.score(scipy_fit)["rmse"], rel=1e-4)


def test_whole_held_out_cells_are_fitted_to_the_optimum_too():
    task = CurveTask(power_cells(10, validation_cells=["c03", "c07"], test_cells=["c05", "c09"]))
    fit = task.prepare_test_fit(task.fit(POWER_LAW.source, **PIPELINE), **PIPELINE)
    assert fit.ok, fit.error
    for cells, part in ((["c03", "c07"], VALIDATION_FIT), (["c05", "c09"], TEST_FIT)):
        adam = adam_only(task, lambda g, part=part: part, cells)
        for cell, adam_loss in zip(cells, adam):
            x, y = task._xy(cell, part)
            p = fit.params[cell]
            loss = float(np.mean((p["a"] - p["b"] * x ** p["z"] - y) ** 2))
            assert loss < adam_loss / 10, (cell, loss, adam_loss)


def test_a_joint_fit_keeps_one_shared_value_and_the_lower_total_loss():
    import ndvm

    task = CurveTask(power_cells(6))
    shared_law = dict(task.reference_programs())["power-law-shared-exponent"]
    fit = task.fit(shared_law, **PIPELINE)
    assert fit.ok, fit.error
    assert len({p["z"] for p in fit.params.values()}) == 1  # one joint solution, not a mix of two
    program = task.compile(shared_law)
    data = [(task.train_inputs(g), task.train_target(g)) for g in task.groups()]
    (adam,) = ndvm.calibrate_shared([program], data, loss="mse", **PIPELINE)
    assert sum(f.loss for f in fit.fits) <= sum(f.loss for f in adam)


def test_a_run_with_lbfgs_is_fitted_once():
    import ndvm

    task = CurveTask(power_cells(4))
    options = {**PIPELINE, "optimizer": "lbfgs"}
    fit = task.fit(POWER_LAW.source, **options)
    program = task.compile(POWER_LAW.source)
    data = [(task.train_inputs(g), task.train_target(g)) for g in task.groups()]
    (alone,) = ndvm.calibrate_groups([program], data, loss="mse", **options)
    assert [f.params for f in fit.fits] == [f.params for f in alone]
