"""Forecast validation blocks (contract C2): the validation origins cut into contiguous blocks, the
standard error of the validation mean RMSE over them, and the block count."""

from __future__ import annotations

import numpy as np
import pytest

import datasets
from datasets.tasks import ForecastTask, TaskError, make_task
from datasets.tasks import forecast as fc


def _mean_rmse(errors: np.ndarray) -> float:
    """Mean over leads of the RMSE over the rows (NaN: target outside the split)."""
    return float(np.mean([np.sqrt(np.nanmean(errors[:, k] ** 2)) for k in range(errors.shape[1])]))


def test_validation_blocks_partition_the_validation_origins():
    task = make_task(datasets.load("enso"))
    blocks = task.validation_blocks()
    assert task.n_blocks == 5 == len(blocks)  # 120 validation origins, one block per 24
    assert np.array_equal(np.concatenate(blocks), np.arange(len(task.origins("validation"))))
    assert [len(b) for b in blocks] == [24] * 5
    assert ForecastTask(datasets.load("enso"), validation_blocks=3).n_blocks == 3
    with pytest.raises(TaskError, match="validation_blocks=0"):
        ForecastTask(datasets.load("enso"), validation_blocks=0)
    with pytest.raises(TaskError, match="validation_blocks=61"):
        ForecastTask(datasets.load("enso"), validation_blocks=61)


def test_validation_score_carries_the_jackknife_se_over_blocks():
    task = make_task(datasets.load("enso"))
    ref = next(r for r in fc.ENSO_REFERENCES if r.name == "damped-persistence")
    row = next(r for r in task.score_references("validation") if r["model"] == ref.name)
    # the same figures from the reference's own forecast errors, computed here by hand
    split_end = task.split_end["validation"]
    errors = ref.forecast(task.fit_reference(ref), task.y[:split_end], task.origins("validation"), 12)
    errors = errors - task.targets("validation")
    blocks = np.array_split(np.arange(120), 5)
    assert row["mean_rmse"] == pytest.approx(_mean_rmse(errors))  # pooled: the test's own metric
    for i, rows in enumerate(blocks):
        assert row[f"mean_rmse_block{i + 1}"] == pytest.approx(_mean_rmse(errors[rows]))
    left_out = np.array([_mean_rmse(np.delete(errors, rows, axis=0)) for rows in blocks])
    jackknife = np.sqrt(4 / 5 * np.sum((left_out - left_out.mean()) ** 2))
    assert row["mean_rmse_se"] == pytest.approx(jackknife) and row["mean_rmse_se"] > 0
    assert row["n_blocks"] == 5
    # the test split keeps its pooled headline and no validation-block figures
    test_row = next(r for r in task.score_references("test") if r["model"] == ref.name)
    assert "mean_rmse_se" not in test_row and "n_blocks" not in test_row


def test_a_block_score_moves_only_with_its_own_validation_values():
    task = make_task(datasets.load("enso"))
    ref = next(r for r in fc.ENSO_REFERENCES if r.name == "persistence")
    state = task.fit_reference(ref)
    origins, obs = task.origins("validation"), task.targets("validation")
    forecasts = ref.forecast(state, task.y[: task.split_end["validation"]], origins, 12)
    base = task.block_scores(forecasts, obs)
    changed = forecasts.copy()
    changed[task.validation_blocks()[-1]] += 1.0  # worse forecasts from the last block's origins only
    after = task.block_scores(changed, obs)
    for i in range(1, 5):
        assert after[f"mean_rmse_block{i}"] == base[f"mean_rmse_block{i}"]
    assert after["mean_rmse_block5"] > base["mean_rmse_block5"]
    changed[0, 0] = np.inf
    assert task.block_scores(changed, obs)["mean_rmse_se"] == float("inf")
