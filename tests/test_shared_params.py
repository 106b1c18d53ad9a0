"""Parameters shared across groups: `(param NAME INIT [CONSTRAINT] shared)`, fitted jointly over
every group's data by one native fit (ndvm.calibrate_shared), the other parameters per group."""

from __future__ import annotations

import numpy as np
import pytest

import ndvm
from ndvm.errors import CheckError

POWER = "(param a 1.0)\n(param b 0.05 positive)\n(param z 1.0 positive shared)\n(- a (* b (expt x z)))"


def synthetic_cells(n_cells: int = 40, z: float = 1.7, seed: int = 0, noise: float = 0.002):
    """n_cells fade curves soh = a - b x^z with one exponent z and known per-cell a and b."""
    rng = np.random.default_rng(seed)
    cells, truth = [], []
    for _ in range(n_cells):
        a, b = rng.uniform(0.98, 1.02), rng.uniform(0.01, 0.05)
        n = int(rng.integers(60, 200))
        x = np.linspace(0.05, rng.uniform(2.0, 6.0), n)
        y = a - b * x**z + rng.normal(0.0, noise, n)
        cells.append(({"x": x}, y))
        truth.append((a, b))
    return cells, truth


# ---------------------------------------------------------------- the declaration


def test_declaration_marks_shared_parameters():
    program = ndvm.compile(POWER)
    assert [p.shared for p in program.params] == [False, False, True]
    assert program.shared_names == ["z"]
    assert program.params[2].constraint == "positive"
    free = ndvm.compile("(param k 0.5 shared) (param c 1.0 (between 0 2) shared) (* k c x)")
    assert free.shared_names == ["k", "c"]
    assert free.params[0].constraint is None and free.params[1].constraint == ("between", 0.0, 2.0)


@pytest.mark.parametrize(
    "source, words",
    [
        ("(param z 1.0 shared positive) (* z x)", "`shared` is given once, last"),
        ("(param z 1.0 shared shared) (* z x)", "`shared` is given once, last"),
        ("(param z 1.0 positive shared extra) (* z x)", "`shared` is given once, last"),
        ("(param z 1.0 sharred) (* z x)", "unknown constraint"),
        ("(param z shared) (* z x)", "initial value must be a number"),
        ("(param z -1.0 positive shared) (* z x)", "must be > 0"),
    ],
)
def test_bad_shared_declarations_are_typed_errors(source, words):
    with pytest.raises(CheckError, match=words):
        ndvm.compile(source)


def test_shared_changes_the_canonical_form():
    per_group = ndvm.compile("(param a 1.0) (param z 1.0 positive) (* a (expt x z))")
    shared = ndvm.compile("(param a 1.0) (param z 1.0 positive shared) (* a (expt x z))")
    assert per_group.canonical_form != shared.canonical_form
    assert "positive shared" in shared.canonical_form


# ---------------------------------------------------------------- the joint fit


def test_shared_exponent_recovered_from_40_cells():
    cells, truth = synthetic_cells()
    (fits,) = ndvm.calibrate_shared([POWER], cells, restarts=4, steps=2000)
    assert len(fits) == 40 and all(f.error is None for f in fits)
    zs = {f.params["z"] for f in fits}
    assert len(zs) == 1  # one value for every cell
    assert abs(zs.pop() - 1.7) < 0.02
    a_err = [abs(f.params["a"] - a) for f, (a, _) in zip(fits, truth)]
    b_rel = [abs(f.params["b"] - b) / b for f, (_, b) in zip(fits, truth)]
    assert max(a_err) < 0.005
    assert max(b_rel) < 0.1
    # each cell's own loss is that of its residuals at the joint optimum (noise 0.002: mse ~4e-6)
    for (inputs, y), fit in zip(cells, fits):
        pred = fit.params["a"] - fit.params["b"] * inputs["x"] ** fit.params["z"]
        assert fit.loss == pytest.approx(float(np.mean((pred - y) ** 2)), rel=1e-9)
        assert fit.loss < 1e-5


def test_joint_gradient_is_exact():
    """The joint fit's loss at its optimum cannot be lowered by moving the shared exponent: the sum
    of the cells' losses, computed here by numpy, is stationary in z (a central difference)."""
    cells, _ = synthetic_cells(n_cells=8, seed=3)
    (fits,) = ndvm.calibrate_shared([POWER], cells, restarts=4, steps=3000)

    def total(z):
        return sum(
            float(np.mean((f.params["a"] - f.params["b"] * i["x"] ** z - y) ** 2)) for (i, y), f in zip(cells, fits)
        )

    z = fits[0].params["z"]
    h = 1e-4
    slope = (total(z + h) - total(z - h)) / (2 * h)
    curvature = (total(z + h) - 2 * total(z) + total(z - h)) / h**2
    assert abs(slope / curvature) < 1e-4  # the Newton step to the minimum in z is negligible


def test_per_group_fits_against_a_joint_fit():
    """A shared exponent fits worse per cell than a free one but better than a wrong fixed one."""
    cells, _ = synthetic_cells(n_cells=10, seed=1)
    (joint,) = ndvm.calibrate_shared([POWER], cells, restarts=4, steps=2000)
    (fixed,) = ndvm.calibrate_shared([POWER], cells, restarts=4, steps=2000, shared_values=[{"z": 1.0}])
    assert all(f.params["z"] == 1.0 for f in fixed)
    assert sum(f.loss for f in joint) < 0.1 * sum(f.loss for f in fixed)


def test_held_out_cell_fits_only_its_own_parameters():
    cells, truth = synthetic_cells(n_cells=12, seed=2)
    train, held = cells[:10], cells[10:]
    (fits,) = ndvm.calibrate_shared([POWER], train, restarts=4, steps=2000)
    z = fits[0].params["z"]
    (held_fits,) = ndvm.calibrate_shared([POWER], held, restarts=4, steps=2000, shared_values=[{"z": z}])
    for fit, (a, b) in zip(held_fits, truth[10:]):
        assert fit.params["z"] == z  # kept, not refitted
        assert abs(fit.params["a"] - a) < 0.005 and abs(fit.params["b"] - b) / b < 0.1


def test_program_without_shared_parameters_equals_calibrate_groups():
    cells, _ = synthetic_cells(n_cells=5, seed=4)
    plain = "(param a 1.0)\n(param b 0.05 positive)\n(param z 1.0 positive)\n(- a (* b (expt x z)))"
    (shared_path,) = ndvm.calibrate_shared([plain], cells, restarts=4, steps=300)
    (groups_path,) = ndvm.calibrate_groups([plain], cells, restarts=4, steps=300)
    for f, g in zip(shared_path, groups_path):
        assert f.params == g.params and f.loss == g.loss


def test_bad_programs_and_options_in_a_shared_batch():
    cells, _ = synthetic_cells(n_cells=3, seed=5)
    broken = "(param z 1.0 shared) (+ z (car x))"  # fails at run time on a vector
    fits = ndvm.calibrate_shared([POWER, "(param z 1.0 shared positive) x", broken], cells, restarts=2, steps=50)
    assert all(f.error is None for f in fits[0])
    assert len(fits[1]) == 3 and all("`shared` is given once" in f.error for f in fits[1])
    assert len(fits[2]) == 3 and all(f.error for f in fits[2])
    with pytest.raises(ValueError, match="missing"):
        ndvm.calibrate_shared([POWER], cells, shared_values=[{}])
    with pytest.raises(ValueError, match="unknown"):
        ndvm.calibrate_shared([POWER], cells, shared_values=[{"z": 1.0, "a": 2.0}])
    with pytest.raises(ValueError, match="entries"):
        ndvm.calibrate_shared([POWER], cells, shared_values=[])


# ---------------------------------------------------------------- the curve task (battery cells)


def _power_cells_dataset(n_cells: int, z: float, test_cells=None):
    """A battery dataset whose cells fade as 1 - b x^z with one exponent z (x in hundreds of cycles)."""
    import polars as pl

    from datasets.battery import tidy_dataset

    rng = np.random.default_rng(7)
    rows = []
    for i in range(n_cells):
        b = rng.uniform(0.01, 0.03)
        n = np.arange(1, int(rng.integers(300, 500)) + 1, dtype=float)
        cap = 1.05 * (1.0 - b * (n / 100.0) ** z) + rng.normal(0.0, 0.001, n.size)
        rows.append(pl.DataFrame({"cell_id": f"c{i:02d}", "cycle": n.astype(np.int64), "capacity_ah": cap}))
    return tidy_dataset(pl.concat(rows).lazy(), name="battery-synthetic", min_cycles=1, test_cells=test_cells)


def test_curve_task_fits_shared_parameters_jointly_and_held_out_cells_alone():
    from datasets.tasks import make_task

    task = make_task(_power_cells_dataset(12, 1.6, test_cells=["c10", "c11"]))
    shared_law = dict(task.reference_programs())["power-law-shared-exponent"]
    fit = task.fit(shared_law, restarts=4, steps=1500)
    assert fit.ok, fit.error
    zs = {params["z"] for params in fit.params.values()}
    assert len(zs) == 1 and abs(zs.pop() - 1.6) < 0.05
    assert len({params["b"] for params in fit.params.values()}) == len(task.groups())  # per cell
    full = task.prepare_test_fit(fit, restarts=4, steps=1500)
    assert full.ok, full.error
    for cell in ("c10", "c11"):
        assert full.params[cell]["z"] == fit.params[task.groups()[0]]["z"]  # kept from training
    scores = task.score(full, "test")
    assert scores["rmse_test_groups"] < 0.01
    # the stored parameters restore the same fit
    restored = task.restore_fit(shared_law, task.flat_parameters(fit.params))
    assert task.score(restored)["rmse"] == pytest.approx(task.score(fit)["rmse"], rel=1e-12)


def test_curve_validation_scores_carry_their_standard_error():
    from datasets.tasks import make_task

    task = make_task(_power_cells_dataset(6, 1.3))
    fit = task.fit(dict(task.reference_programs())["power-law"], restarts=4, steps=800)
    scores = task.score(fit, "validation")
    per_cell = [g["rmse"] for g in scores["per_group"].values()]
    assert scores["n_blocks"] == 6
    assert scores["rmse_se"] == pytest.approx(np.std(per_cell, ddof=1) / np.sqrt(6), rel=1e-12)
    # each cell's RMSE as a block score, in the cells' order: the champion's rule pairs on them
    assert [scores[f"rmse_block{i + 1}"] for i in range(6)] == per_cell


def test_battery_reference_programs_are_the_references_and_shared_laws():
    import datasets
    from datasets.tasks import make_task

    task = make_task(datasets.load("battery-synthetic", n_cells=3, n_cycles=200))
    names = [name for name, _ in task.reference_programs()]
    assert names[:5] == ["linear", "sqrt-sei", "power-law", "knee-bacon-watts", "double-exponential"]
    shared = [name for name, source in task.reference_programs() if ndvm.compile(source).shared_names]
    assert set(shared) == {"power-law-shared-exponent", "knee-shared-shape", "sqrt-power-shared-exponent"}
    for _, source in task.reference_programs():
        assert source in task.seed_programs()
        assert task.fit(source, restarts=2, steps=200).ok


# ---------------------------------------------------------------- validation cells (held out whole)


def test_validation_cells_are_held_out_of_training_and_fitted_on_their_early_rows():
    import polars as pl

    import datasets
    from datasets.schema import TRAIN, VALIDATION, VALIDATION_FIT
    from datasets.tasks import make_task

    ds = datasets.load("battery-synthetic", n_cells=10, n_cycles=200, validation_cells=0.2)
    held = ds.validation_groups
    assert len(held) == 2
    rows = ds.frame.filter(pl.col("cell_id").is_in(held))
    assert set(rows.get_column("split").unique().to_list()) == {VALIDATION_FIT, VALIDATION}
    task = make_task(ds)
    assert not set(held) & set(task.groups()) and task.validation_groups() == held
    law = dict(task.reference_programs())["power-law-shared-exponent"]
    fit = task.fit(law, restarts=4, steps=400)
    assert fit.ok, fit.error
    z = fit.params[task.groups()[0]]["z"]
    for cell in held:
        assert fit.params[cell]["z"] == z  # kept from the training cells' joint fit
        x, y = task._xy(cell, VALIDATION_FIT)
        mine = fit.params[cell]
        assert float(np.mean((mine["a"] - mine["b"] * x ** mine["z"] - y) ** 2)) < 1e-3
    scores = task.score(fit, "validation")
    assert scores["n_blocks"] == 10 and set(scores["per_group"]) == set(task.groups()) | set(held)
    assert scores["rmse_validation_groups"] == pytest.approx(
        np.mean([scores["per_group"][c]["rmse"] for c in held]), rel=1e-12
    )
    # the training cells never saw the validation cells' rows: changing those rows changes no training fit
    assert all(task._xy(c, TRAIN)[0].size == 0 for c in held)
    # references are fitted on validation cells' early rows too, and restore keeps every group
    ref_scores = task.score(task.fit_reference(task.reference_models()[2]), "validation")
    assert ref_scores["n_blocks"] == 10 and np.isfinite(ref_scores["rmse"])
    restored = task.restore_fit(law, task.flat_parameters(fit.params))
    assert task.score(restored)["rmse"] == pytest.approx(scores["rmse"], rel=1e-12)


def test_validation_cells_option_errors():
    import datasets
    from datasets.errors import SplitError

    with pytest.raises(SplitError, match="fraction must be in"):
        datasets.load("battery-synthetic", n_cells=4, validation_cells=1.5)
    with pytest.raises(SplitError, match="matches none"):
        datasets.load("battery-synthetic", n_cells=4, validation_cells="nosuchcell")
    with pytest.raises(SplitError, match="leaves no training cell"):
        datasets.load("battery-synthetic", n_cells=2, validation_cells=0.9)


def test_logged_model_keeps_the_shared_values_for_a_new_cell(tmp_path):
    """The MLflow model of a shared law calibrates a new cell's own parameters only."""
    import json

    import pandas as pd
    from mlflow.pyfunc import PythonModelContext

    from storage.pyfunc_model import NDVMProgramModel

    known = {"a": 1.0, "b": 0.03, "z": 1.5}
    groups = {
        "column": "cell_id",
        "x": "cycle",
        "y": "soh",
        "input": "x",
        "x_scale": 100.0,
        "loss": "mse",
        "params": {"c0": known},
        "calibration": {"restarts": 4, "steps": 500},
    }
    (tmp_path / "program.scm").write_text(POWER)
    (tmp_path / "fit.json").write_text(json.dumps({"params": known, "groups": groups}))
    model = NDVMProgramModel()
    artifacts = {"program": str(tmp_path / "program.scm"), "fit": str(tmp_path / "fit.json")}
    model.load_context(PythonModelContext(artifacts=artifacts, model_config=None))
    cycle = np.arange(1, 121) * 3.0
    x = cycle / 100.0  # what the model computes from the raw cycles
    truth = 0.99 - 0.02 * x**2.0  # another exponent: a refitted z would move towards 2
    soh = np.where(np.arange(x.size) < 60, truth, np.nan)
    got = model.predict(None, pd.DataFrame({"cell_id": ["new"] * x.size, "cycle": cycle, "soh": soh}))
    ((direct,),) = ndvm.calibrate_shared(
        [POWER], [({"x": x[:60]}, truth[:60])], restarts=4, steps=500, shared_values=[{"z": 1.5}]
    )
    assert direct.params["z"] == 1.5
    np.testing.assert_allclose(got, np.asarray(direct.predict({"x": x})), rtol=1e-12, atol=0)
