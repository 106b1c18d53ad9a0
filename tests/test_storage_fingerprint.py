"""The pure parts of the semantic fingerprint (no runtime needed): probe parameters respect
constraints and are independent of declaration order; rounding is stable."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

from storage.fingerprint import MAX_PERMUTATIONS, PROBE_ROWS, probe_theta, round_significant
from storage.store import MetricDirectionError, metric_higher_is_better, redact


@dataclass
class Param:  # the shape of ndvm.Param: name, init, constraint
    name: str
    init: float
    constraint: object = None


def test_probe_values_respect_constraints():
    params = [Param("a", 0.0), Param("k", 1.0, "positive"), Param("p", 0.3, ("between", 0.2, 0.4))]
    theta, n_perm = probe_theta(params)
    assert n_perm == 1 and theta.shape == (PROBE_ROWS, 3)
    assert (np.abs(theta[:, 0]) >= 0.37).all()  # free values stay away from 0
    assert (theta[:, 1] > 0).all()
    assert ((theta[:, 2] > 0.2) & (theta[:, 2] < 0.4)).all()
    again, _ = probe_theta(params)
    assert np.array_equal(theta, again)  # deterministic


def test_probe_rows_cover_all_permutations_within_constraint_groups():
    params = [Param("a", 0), Param("b", 0), Param("c", 0), Param("k", 1, "positive")]
    theta, n_perm = probe_theta(params)
    assert n_perm == 6 and theta.shape == (PROBE_ROWS * 6, 4)
    for row in range(PROBE_ROWS):
        block = theta[row * 6 : (row + 1) * 6]
        assert len({tuple(r) for r in block[:, :3]}) == 6  # every ordering of the free values
        assert len(set(block[:, 3])) == 1  # the positive one never moves
    # declaring the same parameters in another order gives the same set of probe rows (reordered)
    shuffled, _ = probe_theta([params[3], params[1], params[0], params[2]])
    as_sets = lambda t, cols: {tuple(r) for r in t[:, cols]}  # noqa: E731
    assert as_sets(shuffled, [2, 1, 3, 0]) == as_sets(theta, [0, 1, 2, 3])


def test_too_many_permutations_fall_back_to_declaration_order():
    params = [Param(f"p{i}", 0) for i in range(7)]  # 7! = 5040 > MAX_PERMUTATIONS
    theta, n_perm = probe_theta(params)
    assert 5040 > MAX_PERMUTATIONS and n_perm == 1 and theta.shape == (PROBE_ROWS, 7)


def test_round_significant():
    v = np.array([1.234567891234, -0.0, 1e-15, -1e-13, np.nan, np.inf, 123456789.987, 0.1 + 0.2])
    r = round_significant(v)
    assert r[0] == 1.2345679 and r[6] == 123456790.0 and r[7] == 0.3
    assert r[1] == 0.0 and not np.signbit(r[1]) and r[2] == 0.0 and r[3] == 0.0
    assert np.isnan(r[4]) and r[5] == np.inf


def test_metric_direction_by_name():
    assert metric_higher_is_better("heldout.r2") and metric_higher_is_better("acc_lead6")
    assert not metric_higher_is_better("rmse") and not metric_higher_is_better("train.mse")
    assert not metric_higher_is_better("mean_rmse")  # the forecast task's primary metric
    with pytest.raises(MetricDirectionError, match="higher_is_better"):
        metric_higher_is_better("wiggle")


def test_redact_hides_secret_looking_values():
    config = {
        "model": "openai/gpt-x",
        "api_key": "sk-123",
        "llm": {"auth_token": "t", "timeout": 30},
        "proposers": [{"password": "p"}],
        "key_file": None,
    }
    assert redact(config) == {
        "model": "openai/gpt-x",
        "api_key": "***",
        "llm": {"auth_token": "***", "timeout": 30},
        "proposers": [{"password": "***"}],
        "key_file": None,
    }
