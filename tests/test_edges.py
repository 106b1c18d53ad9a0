"""Models that hold outside the data (issue 37 part 4): the regression task's edge block (training
rows at the edges of the training ranges, held out of fitting and scored with validation) and its
growth check (a prediction that explodes just beyond the training box refuses the candidate)."""

from __future__ import annotations

import argparse
import json
import pickle

import numpy as np
import polars as pl
import pytest

import datasets
import ndvm
from datasets.tasks import RegressionTask, TaskError, make_task
from datasets.tasks.edges import EDGE_FRACTION, GROWTH_LIMIT, EdgeBlock, GrowthGrid

if not hasattr(ndvm, "compile"):
    pytest.skip("the ndvm runtime (ndvm.compile) is not built yet", allow_module_level=True)

LAW = "(param c 1.0)(* c (/ (* m1 m2) (square r)))"
EXPLODING = "(param c 1.0)(param d 0.0)(+ (* c (/ (* m1 m2) (square r))) (* d (exp (exp m2))))"


def gravity(path, n=2000, seed=0):
    """F = m1 m2 / r^2 with 1% noise; m1, m2 in [1, 5], r in [1, 3]; a seeded random split."""
    rng = np.random.default_rng(seed)
    m1, m2, r = rng.uniform(1, 5, n), rng.uniform(1, 5, n), rng.uniform(1, 3, n)
    f = m1 * m2 / r**2 * (1 + 0.01 * rng.normal(size=n))
    split = rng.choice(["train", "validation", "test"], size=n, p=[0.6, 0.2, 0.2])
    pl.DataFrame({"m1": m1, "m2": m2, "r": r, "F": f, "split": split}).write_csv(path)
    return datasets.load(str(path), x=["m1", "m2", "r"], y="F")


@pytest.fixture
def task(tmp_path):
    return RegressionTask(gravity(tmp_path / "g.csv"))


# ---------------------------------------------------------------------------- the block
def test_the_edge_block_holds_the_outer_tenth_of_the_training_rows_and_nothing_else(task):
    edge = task.edge_block
    assert edge is not None
    all_rows = task.split_target("all_training").size
    inner, outer = task.fit_inputs(), task.split_inputs("edge")
    assert task.fit_target().size + task.split_target("edge").size == all_rows
    assert 0.07 * all_rows <= outer["m1"].size <= EDGE_FRACTION * all_rows * 1.02
    for i, name in enumerate(("m1", "m2", "r")):
        # the inner rows lie inside every input's thresholds; every edge row outside one of them
        assert inner[name].min() >= edge.low[i] and inner[name].max() <= edge.high[i]
    outside = np.zeros(outer["m1"].size, bool)
    for i, name in enumerate(("m1", "m2", "r")):
        outside |= (outer[name] < edge.low[i]) | (outer[name] > edge.high[i])
    assert outside.all()
    # the box the proposers are told is the whole training box, the edge block's rows too
    assert task._ranges()["m1"][1] == pytest.approx(task.split_inputs("all_training")["m1"].max())


def test_inputs_of_few_values_and_small_tables_get_the_block_they_can():
    rng = np.random.default_rng(1)
    levels = rng.choice([0.0, 1.0, 2.0], size=5000)  # a categorical input: its tails are whole levels
    smooth = rng.uniform(0, 1, 5000)
    block = EdgeBlock.of([levels, smooth], 0.1)
    assert block is not None and block.fraction <= 0.1
    assert block.low[0] == 0.0 and block.high[0] == 2.0  # no level held out: that would be a third
    assert EdgeBlock.of([smooth[:20]], 0.1) is None  # too few rows
    assert EdgeBlock.of([smooth], 0.0) is None
    with pytest.raises(ValueError, match="edge fraction"):
        EdgeBlock.of([smooth], 0.6)


def test_candidates_are_fitted_inside_the_block_and_scored_inside_and_at_the_edges(task):
    fit = task.fit(LAW, steps=200)
    score = task.score(fit)
    assert score["error"] is None and score["n_blocks"] == 5 and "rmse_block6" not in score
    # each block pools a fold of the validation rows and a fold of the edge rows
    val, edge = task.split_target("validation"), task.split_target("edge")
    p_val, p_edge = task.predict(fit, None, "validation"), task.predict(fit, None, "edge")
    first = np.concatenate([np.array_split(p_val - val, 5)[0], np.array_split(p_edge - edge, 5)[0]])
    assert score["rmse_block1"] == pytest.approx(float(np.sqrt(np.mean(first**2))), rel=1e-12)
    assert score["nmse_in_range"] < 1e-3 and score["nmse_edge"] < 1e-3  # the law holds at the edges
    # a fit that bends outside its rows: a cubic in r is as good inside, worse at the edges
    bend = task.fit(
        "(param a 1.0)(param b 0.0)(param c 0.0)(param d 0.0)(* m1 m2 (+ a (* b r) (* c (square r)) (* d r r r)))",
        steps=300,
    )
    bent = task.score(bend)
    assert bent["rmse_edge"] > score["rmse_edge"] and bent["rmse_edge"] / bent["rmse_in_range"] > 1.2
    # the references are scored on the same rows, fitted on the same inner rows
    refs = {r["model"]: r for r in task.score_references()}
    assert refs["quadratic"]["n_blocks"] == 5 and refs["quadratic"]["rmse_edge"] > refs["quadratic"]["rmse_in_range"]


def test_a_prediction_that_explodes_just_beyond_the_box_is_refused_with_where(task):
    tame = task.restore_fit(EXPLODING, {"c": 1.0, "d": 0.0}, name="tame")
    assert task.score(tame)["error"] is None
    # exp(exp(m2)) is tiny on m2 <= 5 and astronomic at m2 = 6: the gravity champion of BENCHMARKS.md
    wild = task.restore_fit(EXPLODING, {"c": 1.0, "d": 1e-68}, name="wild")
    inside = np.abs(task.predict(wild, None, "validation") - task.predict(tame, None, "validation"))
    assert inside.max() < 1e-3  # indistinguishable on the validation rows
    score = task.score(wild)
    assert score["rmse"] == float("inf") and "grows without bound just beyond the training box" in score["error"]
    assert "m2 = " in score["error"]
    # the test split is scored as it is: the check asks the validation question only
    assert np.isfinite(task.score(wild, "test")["rmse"])


def test_the_growth_grid_keeps_positive_inputs_positive_and_refuses_non_finite_values():
    grid = GrowthGrid.of({"r": (1.0, 3.0), "x": (-1.0, 1.0), "z": (0.0, 2.0)}, np.array([0.0, 1.0]))
    assert grid is not None
    assert grid.points["r"].min() >= 0.5 and grid.points["r"].max() <= 3.5
    assert grid.points["x"].min() >= -1.5 and grid.points["z"].min() >= 0.0
    # every point is outside the training box in at least one input
    inside = (
        (grid.points["r"] >= 1) & (grid.points["r"] <= 3) & (np.abs(grid.points["x"]) <= 1) & (grid.points["z"] <= 2)
    )
    assert not inside.any()
    assert grid.refusal(1.0 / grid.points["r"]) is None  # 1/r at r = 0.5 is 2: a law, not a blow-up
    with np.errstate(invalid="ignore"):
        assert "non-finite" in grid.refusal(np.log(grid.points["x"]))
    assert "grows without bound" in grid.refusal(np.full(grid.points["r"].size, 2 * GROWTH_LIMIT))
    assert GrowthGrid.of({"r": (1.0, 3.0)}, np.array([1.0, 1.0])) is None  # a constant target


# ---------------------------------------------------------------------------- the test split
def test_the_test_split_scores_the_fit_the_search_validated(task):
    # not refitted with the edge rows: the parameters scored on test are the ones the report card
    # prints and the MLflow model serves (a sampled table's finalists are refitted, on every row)
    fit = task.fit(LAW, steps=200)
    assert task.prepare_test_fit(fit) is fit
    ref = task.fit_reference(task.references[1], test_groups=True)
    assert ref.params == task.fit_reference(task.references[1]).params


def test_a_worker_applies_the_same_block(task):
    worker = pickle.loads(pickle.dumps(task))
    np.testing.assert_array_equal(worker.split_target("edge"), task.split_target("edge"))
    np.testing.assert_array_equal(worker.fit_target(), task.fit_target())


# ---------------------------------------------------------------------------- the option
def test_the_edge_fraction_is_an_option_of_tables_only(tmp_path):
    from flows.cli_options import add_discover_options, discover_kwargs
    from flows.config import build_config
    from flows.problem import load_problem

    path = tmp_path / "g.csv"
    gravity(path, n=600)
    parser = argparse.ArgumentParser()
    add_discover_options(parser)
    args = parser.parse_args(["--data", str(path), "--x", "m1,m2,r", "--y", "F", "--edge-fraction", "0"])
    config = build_config(**discover_kwargs(args))
    assert config.problem.edge_fraction == 0.0
    again = type(config).from_dict(json.loads(json.dumps(config.to_dict())))
    assert again.problem == config.problem  # stored with the run: resume and report rebuild the same task
    _, task = load_problem(config.problem)
    assert task.edge_block is None and task.score(task.fit(LAW))["n_blocks"] == 5
    assert "edge block" not in task.split_label()
    with pytest.raises(TaskError, match="edge fraction must be in"):
        make_task(datasets.load(str(path), x=["m1", "m2", "r"], y="F"), edge_fraction=0.7)
    with pytest.raises(TaskError, match="applies to tables"):
        make_task(datasets.load("enso"), edge_fraction=0.1)
