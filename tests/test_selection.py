"""The champion's selection rule (storage/selection.py): the simplest candidate within one standard
error of the best validation score, read from the stored validation metrics."""

import json

import pytest

from storage.selection import choose_champion


def rows(*entries):
    """(hash, score, complexity, se) -> the rows choose_champion reads (metrics as stored JSON)."""
    return [
        (h, score, c, json.dumps({"rmse": score, **({"rmse_se": se, "n_blocks": 5} if se is not None else {})}))
        for h, score, c, se in entries
    ]


def test_simplest_within_one_standard_error_of_the_best():
    choice = choose_champion(
        rows(("best", 1.00, 40, 0.05), ("near", 1.04, 12, 0.06), ("simplest-out", 1.06, 5, 0.05), ("mid", 1.03, 20, 0)),
        metric="rmse",
    )
    assert choice.hash == "near" and choice.best_hash == "best" and not choice.is_best
    assert choice.threshold == pytest.approx(1.05) and choice.within == 3 and choice.n_blocks == 5
    assert "simplest of the 3 candidates within one standard error" in choice.reason()
    assert choice.to_dict()["rule"].startswith("champion: the simplest candidate")


def test_the_best_stays_when_nothing_simpler_is_within_noise():
    choice = choose_champion(rows(("best", 1.00, 10, 0.01), ("simpler", 1.2, 5, 0.01)), metric="rmse")
    assert choice.hash == "best" and choice.is_best and "no simpler candidate" in choice.reason()


def test_without_a_standard_error_the_best_validation_score_wins():
    choice = choose_champion(rows(("best", 1.00, 40, None), ("simple", 1.0001, 3, None)), metric="rmse")
    assert choice.hash == "best" and choice.standard_error is None
    assert "reported no standard error" in choice.rule


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


def test_the_champion_is_on_the_pareto_front():
    from storage.parsimony import pareto_front

    entries = [(f"h{i}", 1.0 + 0.013 * ((i * 7) % 11), 3 + (i * 5) % 17, 0.04) for i in range(40)]
    choice = choose_champion(rows(*entries), metric="rmse")
    front = pareto_front([(h, c, s, None) for h, s, c, _ in entries])
    assert choice.hash in {e.hash for e in front}
