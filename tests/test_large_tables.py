"""Large tables (issue 36, part 3): the search fits and scores a seeded sample of a big table's rows,
a worker process gets only those rows, and the finalists are refitted on every training row and
scored on the whole test split. The rows budget is set small here (``max_fit_rows``) so that a
table of a few thousand rows behaves as a ten-million-row one does with the measured budget;
the figures of the real thing are in BENCHMARKS.md ("Large tables", ``ndvm bench --suite large-tables``)."""

from __future__ import annotations

import cloudpickle
import numpy as np
import polars as pl
import pytest

from datasets.schema import TEST, TRAIN, VALIDATION
from datasets.tasks.curve import CurveTask
from datasets.tasks.regression import RegressionTask
from datasets.userfile import load_file
from proposers.datacard import card_text
from storage import fingerprint

pytest.importorskip("ndvm._native")

LAW = "(param a 0.5)(param b 1.0)(param c 0.5)\n(+ (* a x) (* b (exp (- (* c x)))))"
FIT = dict(optimizer="adam", steps=150, lr=0.05, restarts=4, seed=0, threads=1)


@pytest.fixture
def curve_csv(tmp_path):
    rng = np.random.default_rng(3)
    x = np.sort(rng.uniform(0.0, 20.0, 20_000))
    y = 0.1 * x + 2.5 * np.exp(-0.3 * x) + rng.normal(0.0, 0.05, x.size)
    path = tmp_path / "curve.csv"
    pl.DataFrame({"x": x, "y": y}).write_csv(path)
    return path


@pytest.fixture
def table_csv(tmp_path):
    rng = np.random.default_rng(4)
    a, b = rng.uniform(0.5, 2.0, 30_000), rng.uniform(0.5, 2.0, 30_000)
    y = a * b / (1.0 + b) + rng.normal(0.0, 0.01, a.size)
    path = tmp_path / "table.csv"
    pl.DataFrame({"a": a, "b": b, "y": y}).write_csv(path)
    return path


def test_a_large_curve_is_searched_on_a_seeded_sample(curve_csv):
    dataset = load_file(curve_csv, x="x", y="y")
    task = CurveTask(dataset, max_fit_rows=500)
    again = CurveTask(load_file(curve_csv, x="x", y="y"), max_fit_rows=500)
    all_train = task._all_xy(None, TRAIN)[1]
    assert task.sampled() and all_train.size > 500
    assert task.fit_target().size == 500
    np.testing.assert_array_equal(task.fit_target(), again.fit_target())  # the same rows every run
    assert np.all(np.diff(task.fit_inputs()["x"]) >= 0)  # a sample in x order
    assert task.split_target(VALIDATION).size == min(task._all_xy(None, VALIDATION)[1].size, 5_000)
    # the test split is never sampled
    assert task.split_target(TEST).size == dataset.frame.filter(pl.col("split") == TEST).height


def test_a_worker_gets_the_sampled_rows_only_and_fits_the_same(curve_csv):
    task = CurveTask(load_file(curve_csv, x="x", y="y"), max_fit_rows=500)
    worker = cloudpickle.loads(cloudpickle.dumps(task))  # as flows/supervisor.py sends it
    frame = worker.dataset.frame
    assert TEST not in set(frame.get_column("split").to_list())  # no test rows leave the run
    assert frame.height <= 500 + task.max_score_rows
    np.testing.assert_array_equal(worker.fit_target(), task.fit_target())
    here, there = task.fit(LAW, **FIT), worker.fit(LAW, **FIT)
    assert here.params == there.params
    assert task.score(here)["rmse"] == worker.score(there)["rmse"]


def test_a_finalist_is_refitted_on_every_training_row_and_scored_on_the_whole_test(curve_csv):
    task = CurveTask(load_file(curve_csv, x="x", y="y"), max_fit_rows=500)
    fit = task.fit(LAW, optimizer="adam", steps=30, lr=0.05, restarts=2, seed=0, threads=1)  # short: off the optimum
    final = task.prepare_test_fit(fit, threads=1)
    assert final.params != fit.params
    x, y = task._all_xy(None, TRAIN)
    sampled_mse = float(np.mean((task.predict(fit, None, TRAIN) - task.split_target(TRAIN)) ** 2))
    assert sampled_mse > 0
    # the refit lowers the loss over every training row
    full_before = float(np.mean((fit.predictor(None, {"x": x}) - y) ** 2))
    full_after = float(np.mean((final.predictor(None, {"x": x}) - y) ** 2))
    assert full_after < full_before
    assert abs(final.params["a"] - 0.1) < 0.01 and abs(final.params["c"] - 0.3) < 0.03
    assert task.prepare_test_fit(fit, threads=1) is final  # the refit is done once per finalist
    scored = task.score(final, TEST)
    test_x, test_y = task._all_xy(None, TEST)
    assert scored["per_group"][None]["n_scored"] == test_y.size
    assert scored["rmse"] == pytest.approx(np.sqrt(np.mean((final.predictor(None, {"x": test_x}) - test_y) ** 2)))


def test_a_large_regression_table_is_sampled_and_refitted(table_csv):
    task = RegressionTask(load_file(table_csv, x=["a", "b"], y="y"), max_fit_rows=1_000)
    assert task.sampled()
    assert task.fit_target().size == 1_000
    assert task.split_target(VALIDATION).size <= 10_000
    worker = cloudpickle.loads(cloudpickle.dumps(task))  # as flows/supervisor.py sends it
    assert TEST not in set(worker.dataset.frame.get_column("split").to_list())
    np.testing.assert_array_equal(worker.fit_target(), task.fit_target())
    source = "(param p 0.5)(param q 0.5)\n(/ (* p a b) (+ q b))"
    fit = task.fit(source, optimizer="adam", steps=40, lr=0.05, restarts=2, seed=0, threads=1)
    final = task.prepare_test_fit(fit, threads=1)
    assert abs(final.params["p"] - 1.0) < abs(fit.params["p"] - 1.0) or abs(final.params["p"] - 1.0) < 1e-3
    frame = task.dataset.frame.filter(pl.col("split") == TEST)
    assert task.split_target(TEST).size == frame.height  # every test row
    inputs = {name: frame.get_column(name).to_numpy() for name in ("a", "b")}
    expected = np.sqrt(np.mean((final.predictor(None, inputs) - frame.get_column("y").to_numpy()) ** 2))
    assert task.score(final, TEST)["rmse"] == pytest.approx(expected)


def test_the_data_card_says_when_it_describes_a_sample(table_csv, monkeypatch):
    from datasets.tasks import base

    task = RegressionTask(load_file(table_csv, x=["a", "b"], y="y"), max_fit_rows=1_000)
    seen = task.dataset.frame.filter(pl.col("split").is_in([TRAIN, VALIDATION])).height
    assert "of them" not in card_text(task.card_facts())  # (the card does name the fitting sample)
    monkeypatch.setattr(base, "CARD_ROWS", 2_000)
    text = card_text(task.card_facts())
    assert f"the {seen} training and validation rows only; a seeded sample of 2000 of them" in text


def test_the_data_digest_is_the_whole_frames_csv_hash_read_in_slices(table_csv, monkeypatch):
    import hashlib

    frame = load_file(table_csv, x=["a", "b"], y="y").frame
    whole = hashlib.sha256()
    whole.update(repr([(name, str(dtype)) for name, dtype in frame.schema.items()]).encode())
    whole.update(frame.write_csv().encode())
    for rows in (7, 1_000, 29_999, 10**6):
        monkeypatch.setattr(fingerprint, "DIGEST_ROWS", rows)
        assert fingerprint.data_digest(frame) == whole.hexdigest()
    assert fingerprint.data_digest(frame.head(0)) != fingerprint.data_digest(frame.head(1))
