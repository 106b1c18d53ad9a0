"""The champion's selection rule (storage/selection.py): the simplest candidate within one standard
error of the best validation score, read from the stored validation metrics."""

import json

import numpy as np
import pytest

from storage.selection import choose_champion


def row(digest, blocks, complexity, metric="rmse"):
    """A stored candidate with per-block validation scores (its score: the mean of the blocks)."""
    metrics = {metric: float(np.mean(blocks)), "n_blocks": len(blocks)}
    metrics.update({f"{metric}_block{i + 1}": float(b) for i, b in enumerate(blocks)})
    metrics[f"{metric}_se"] = float(np.std(blocks, ddof=1) / np.sqrt(len(blocks)))
    return (digest, metrics[metric], complexity, json.dumps(metrics))


def test_paired_differences_decide_not_the_spread_of_the_blocks():
    # Blocks differ a lot in difficulty (as ENSO's do); "steady" is worse by a constant 0.02 on every
    # block (a tiny paired standard error), "noisy" by 0.02 on average with a spread of +-0.3.
    hard_easy = np.array([1.7, 0.9, 0.8, 0.7, 0.3])
    best = row("best", hard_easy, 40)
    steady = row("steady", hard_easy + 0.02, 10)
    noisy = row("noisy", hard_easy + np.array([0.32, -0.28, 0.3, -0.26, 0.02]), 12)
    persistence = row("persistence", hard_easy * 1.2, 3)  # within best's own SE (0.24), far outside paired
    choice = choose_champion([best, steady, persistence], metric="rmse")
    assert choice.hash == "best" and choice.is_best  # steady is significantly worse on every block
    choice = choose_champion([best, noisy, persistence], metric="rmse")
    assert choice.hash == "noisy" and choice.paired and choice.within == 2 and choice.n_blocks == 5
    assert choice.standard_error == pytest.approx(np.std([0.32, -0.28, 0.3, -0.26, 0.02], ddof=1) / np.sqrt(5))
    assert "simplest of the 2 candidates within one standard error" in choice.reason()
    assert "paired over 5 validation blocks" in choice.to_dict()["rule"]


def test_without_blocks_the_best_own_standard_error_is_the_allowance():
    rows = [
        ("best", 1.00, 40, {"rmse_se": 0.05}),
        ("near", 1.04, 12, {}),
        ("simplest-out", 1.06, 5, {}),
        ("mid", 1.03, 20, {}),
    ]
    choice = choose_champion(rows, metric="rmse")
    assert choice.hash == "near" and not choice.paired and choice.within == 3
    assert choice.threshold == pytest.approx(1.05)


def test_the_best_stays_when_nothing_simpler_is_within_noise():
    choice = choose_champion([("best", 1.00, 10, {"rmse_se": 0.01}), ("simpler", 1.2, 5, {})], metric="rmse")
    assert choice.hash == "best" and choice.is_best and "no simpler candidate" in choice.reason()


def test_without_a_standard_error_the_best_validation_score_wins():
    choice = choose_champion([("best", 1.00, 40, {}), ("simple", 1.0001, 3, {})], metric="rmse")
    assert choice.hash == "best" and choice.standard_error is None
    assert "reported no validation blocks" in choice.rule


def test_higher_is_better_metrics_and_ties():
    choice = choose_champion(
        [("a", 0.90, 30, {"r2_se": 0.05}), ("b", 0.86, 8, {}), ("c", 0.86, 8, {}), ("d", 0.80, 2, {})],
        metric="r2",
        higher_is_better=True,
    )
    assert choice.best_hash == "a" and choice.hash == "b"  # equal complexity and score: the hash decides


def test_candidates_without_complexity_or_finite_score():
    assert choose_champion([("x", float("nan"), 3, {})], metric="rmse") is None
    choice = choose_champion(
        [("best", 1.0, None, {"rmse_se": 0.5}), ("other", 1.2, 9, {}), ("bad", float("inf"), 1, {})], metric="rmse"
    )
    assert choice.hash == "other"  # the best has no complexity: a candidate with one within noise is simpler
    only = choose_champion([("best", 1.0, None, {"rmse_se": 0.1}), ("far", 3.0, 2, {})], metric="rmse")
    assert only.hash == "best"
    negative = choose_champion([("best", 1.0, 9, {"rmse_se": -1.0}), ("s", 1.0001, 2, {})], metric="rmse")
    assert negative.hash == "best" and negative.standard_error is None  # a negative SE is no SE


def test_with_one_allowance_the_champion_is_on_the_pareto_front():
    from storage.parsimony import pareto_front

    entries = [(f"h{i}", 1.0 + 0.013 * ((i * 7) % 11), 3 + (i * 5) % 17, {"rmse_se": 0.04}) for i in range(40)]
    choice = choose_champion(entries, metric="rmse")
    front = pareto_front([(h, c, s, None) for h, s, c, _ in entries])
    assert choice.hash in {e.hash for e in front}
