"""Grouped fits: every group (battery cell) of every candidate in one native batch.

``ndvm.calibrate_groups`` runs programs x groups as the jobs of one ``calibrate_many``, each group
on its own rows. The curve task's ``fit_batch`` (and ``fit``, and the fits of whole held-out
groups) go through it. These tests hold it to the per-group loop it replaced: the same parameters
and losses bit for bit, the same held-out scores, the failing group named, the test rows unread.
Every curve fit is two calibrations, the run's (Adam here) and L-BFGS from the same starts, the lower
loss kept per cell (``CurveTask._calibrate``): ``calibrate_alone`` is that rule for one cell.
"""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from datasets.battery import synthetic_frame, tidy_dataset
from datasets.schema import TEST, TEST_FIT, TRAIN, VALIDATION, Dataset
from datasets.tasks import BATTERY_REFERENCES, CurveTask
from datasets.tasks.runtime import ndvm_available

pytestmark = pytest.mark.skipif(not ndvm_available(), reason="the ndvm runtime (ndvm.compile/calibrate) is not built")

# Cells of very different lengths: 360 cycles down to 24 (12 training rows); the last is held out whole.
CYCLES = {"synthetic-00": 360, "synthetic-01": 250, "synthetic-02": 180, "synthetic-03": 24, "synthetic-04": 300}
HELD_OUT = "synthetic-04"
OPTIONS = {"optimizer": "adam", "steps": 60, "lr": 0.05, "restarts": 4, "seed": 3}
# fails on a cell with at most 50 training rows (the short one) (an index past the end of x), fits the others
FAILS_ON_SHORT = "(param a 1.0)\n(param b -0.05)\n(+ a (* b x) (* 0.0 (ref x 50)))"


def calibrate_alone(program, inputs, target):
    """One cell's fit as the curve task makes it: ``OPTIONS`` (Adam), then L-BFGS with the same
    restarts and seed (``LBFGS_STEPS`` evaluations, its own first step); the lower loss wins."""
    import ndvm
    from datasets.tasks.curve import LBFGS_STEPS

    adam = ndvm.calibrate(program, inputs, target=target, loss="mse", **OPTIONS)
    lbfgs_options = {**{k: v for k, v in OPTIONS.items() if k != "lr"}, "optimizer": "lbfgs", "steps": LBFGS_STEPS}
    lbfgs = ndvm.calibrate(program, inputs, target=target, loss="mse", **lbfgs_options)
    return lbfgs if lbfgs.loss < adam.loss else adam


def uneven_cells(frame_transform=None) -> Dataset:
    frame = synthetic_frame(len(CYCLES), max(CYCLES.values()), 0, 0.002)
    frame = frame.filter(pl.col("cycle") <= pl.col("cell_id").replace_strict(CYCLES, return_dtype=pl.Int64))
    ds = tidy_dataset(frame.lazy(), name="uneven", min_cycles=1, test_cells=[HELD_OUT])
    if frame_transform is not None:
        ds = Dataset(ds.name, frame_transform(ds.frame), ds.x, ds.y, ds.group, ds.definition, ds.columns, dict(ds.meta))
    return ds


@pytest.fixture(scope="module")
def task() -> CurveTask:
    return CurveTask(uneven_cells())


def candidates(task: CurveTask) -> list[str]:
    """The seeds without shared parameters (those are fitted jointly: tests/test_shared_params.py)."""
    import ndvm

    sources = [ref.source for ref in BATTERY_REFERENCES] + task.seed_programs()[len(BATTERY_REFERENCES) :]
    return [s for s in dict.fromkeys(sources) if not ndvm.compile(s).shared_names]


def test_the_cells_differ_in_length(task):
    rows = {g: task.train_target(g).size for g in task.groups()}
    assert set(rows) == set(CYCLES) - {HELD_OUT}
    assert min(rows.values()) * 10 < max(rows.values()), rows  # one cell much shorter than the others


def test_grouped_batch_equals_one_calibrate_per_cell(task):

    sources = candidates(task)
    programs = [task.compile(s) for s in sources]
    fits = task.fit_batch(programs, sources, [f"c{i}" for i in range(len(sources))], **OPTIONS)
    for program, fit in zip(programs, fits):
        assert fit.ok, fit.error
        for group, group_fit in zip(task.groups(), fit.fits):
            alone = calibrate_alone(program, task.train_inputs(group), task.train_target(group))
            # the same job as the loop's calibrate: the same arithmetic, so exactly the same numbers
            assert np.array_equal(group_fit.all_params, alone.all_params), (fit.source, group)
            assert np.array_equal(group_fit.all_losses, alone.all_losses, equal_nan=True), (fit.source, group)
            assert fit.params[group] == alone.params
        assert fit.train_loss == pytest.approx(np.mean([f.loss for f in fit.fits]), rel=0, abs=0)


def test_fit_of_one_candidate_is_the_batch_of_one(task):
    source = BATTERY_REFERENCES[2].source
    one = task.fit(source, **OPTIONS)
    (batch,) = task.fit_batch([task.compile(source)], [source], ["candidate"], **OPTIONS)
    assert one.ok and one.params == batch.params and one.train_loss == batch.train_loss


def test_held_out_scores_equal_those_of_the_per_cell_fits(task):

    for ref in BATTERY_REFERENCES[:3]:
        fit = task.prepare_test_fit(task.fit(ref.source, **OPTIONS), **OPTIONS)
        program = task.compile(ref.source)
        flat = {}
        for group in task.groups():  # the loop this replaced: one calibrate per cell
            alone = calibrate_alone(program, task.train_inputs(group), task.train_target(group))
            flat.update({f"{group}/{k}": v for k, v in alone.params.items()})
        looped = task.restore_fit(ref.source, flat, name=ref.name)
        x, y = task._xy(HELD_OUT, TEST_FIT)
        looped.params[HELD_OUT] = calibrate_alone(program, {"x": x}, y).params
        assert fit.params[HELD_OUT] == looped.params[HELD_OUT]
        for split in (VALIDATION, TEST):
            a, b = task.score(fit, split), task.score(looped, split)
            assert np.isfinite(a["rmse"])
            for key in ("rmse", "rmse_pooled", "mae", "train_rmse"):
                assert a[key] == b[key], (ref.name, split, key)


def test_a_candidate_failing_on_one_cell_names_that_cell(task):
    short = min(task.groups(), key=lambda g: task.train_target(g).size)
    fit = task.fit(FAILS_ON_SHORT, **OPTIONS)
    assert not fit.ok
    assert fit.error.startswith(f"group {short}: "), fit.error
    assert all(str(g) not in fit.error for g in task.groups() if g != short)  # the others fitted
    assert task.score(fit)["rmse"] == float("inf")
    assert [f.error is None for f in fit.fits] == [g != short for g in task.groups()]


def test_the_fit_never_reads_validation_or_test_rows():
    def scramble(frame: pl.DataFrame) -> pl.DataFrame:
        held = pl.col("split").is_in([VALIDATION, TEST]) | (pl.col("cell_id") == HELD_OUT)
        return frame.with_columns(pl.when(held).then(pl.col("soh") * 0.5 - 3.0).otherwise(pl.col("soh")).alias("soh"))

    plain, scrambled = CurveTask(uneven_cells()), CurveTask(uneven_cells(scramble))
    sources = candidates(plain)
    a = plain.fit_batch([plain.compile(s) for s in sources], sources, sources, **OPTIONS)
    b = scrambled.fit_batch([scrambled.compile(s) for s in sources], sources, sources, **OPTIONS)
    for fa, fb in zip(a, b):
        assert fa.ok and fa.params == fb.params and fa.train_loss == fb.train_loss
        assert plain.score(fa)["rmse"] != scrambled.score(fb)["rmse"]  # the scrambled rows are scored


def test_rows_are_cut_once_and_match_the_frame(task):
    ds = task.dataset
    for group in task.groups() + task.test_groups():
        for part in (TRAIN, VALIDATION, TEST, TEST_FIT):
            frame = ds.frame.filter((pl.col("split") == part) & (pl.col(ds.group) == group)).sort(ds.x)
            x, y = task._xy(group, part)
            assert np.array_equal(x, frame.get_column(ds.x).to_numpy() / task.x_scale)
            assert np.array_equal(y, frame.get_column(ds.y).to_numpy())
            assert not x.flags.writeable and not y.flags.writeable
            assert task._xy(group, part)[0] is x  # kept
    # a task shipped to a worker process leaves the rows behind and cuts them again there
    cloudpickle = pytest.importorskip("cloudpickle")  # what the process and Dask runners pickle with
    again = cloudpickle.loads(cloudpickle.dumps(task))
    assert again._rows == {}
    first = task.groups()[0]
    assert np.array_equal(again.train_target(first), task.train_target(first))


# ----------------------------------------------------------------------------- ndvm.calibrate_groups itself


def _groups(lengths=(300, 7, 120, 41)):
    rng = np.random.default_rng(0)
    out = []
    for n in lengths:
        x = np.linspace(0.0, 3.0, n)
        out.append(({"x": x}, 1.0 - 0.03 * x**1.5 + 0.001 * rng.standard_normal(n)))
    return out


def test_calibrate_groups_equals_calibrate_many_per_group_on_any_thread_count():
    import ndvm

    sources = [
        "(param a 1.0)\n(param b 0.05 positive)\n(param z 1.0 (between 0.1 4.0))\n(- a (* b (expt x z)))",
        "(param a 1.0)\n(param b -0.1)\n(+ a (* b (tanh x)))",
        "(param a 1.0)\n(+ a x (* 0.0 (ref x 20)))",  # fails on the 7-row group only
    ]
    groups = _groups()
    options = {"optimizer": "lbfgs", "steps": 40, "restarts": 3, "seed": 1}
    for threads in (1, 2):
        by_program = ndvm.calibrate_groups(sources, groups, threads=threads, **options)
        assert [len(fits) for fits in by_program] == [len(groups)] * len(sources)
        for g, (inputs, target) in enumerate(groups):
            alone = ndvm.calibrate_many(sources, inputs, target=target, threads=1, **options)
            for i, fit in enumerate(alone):
                grouped = by_program[i][g]
                assert grouped.error == fit.error and grouped.status == fit.status
                if fit.error is None:
                    assert np.array_equal(grouped.all_params, fit.all_params)
                    assert np.array_equal(grouped.all_losses, fit.all_losses, equal_nan=True)
                    assert np.array_equal(grouped.history, fit.history, equal_nan=True)
    assert [f.error is None for f in by_program[2]] == [True, False, True, True]
    assert "index 20 out of range for a vector of 7" in by_program[2][1].error


def test_calibrate_groups_reports_bad_items_per_program_and_rejects_bad_groups():
    import ndvm

    groups = _groups((30, 10))
    fits = ndvm.calibrate_groups(["(param a 1.0)\n(+ a x", 42], groups, steps=5, restarts=2)
    assert [[f.status for f in per] for per in fits] == [["error", "error"], ["error", "error"]]
    assert issubclass(fits[0][0].error_type, ndvm.ParseError) and "not a program" in fits[1][1].error
    with pytest.raises(ValueError, match="group 1 must be an"):
        ndvm.calibrate_groups(["(param a 1.0)\n(+ a x)"], [groups[0], {"x": np.ones(3)}])
    with pytest.raises(ValueError, match="group 0 has none"):
        ndvm.calibrate_groups(["(param a 1.0)\n(+ a x)"], [({"x": np.ones(3)}, None)])
    assert ndvm.calibrate_groups(["(param a 1.0)\n(+ a x)"], []) == [[]]
