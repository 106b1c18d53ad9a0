"""storage.stats: Diebold-Mariano with the HLN correction, the paired bootstrap, Spearman."""

import math

import numpy as np
import pytest
from scipy import stats as sps

from storage.stats import StatsError, diebold_mariano, paired_bootstrap_rmse, spearman


def test_dm_at_horizon_one_is_the_paired_t_test():
    """With h = 1 the HLN-corrected statistic is exactly the paired t statistic of the squared errors
    (a classical published test, computed independently by scipy)."""
    rng = np.random.default_rng(0)
    a, b = rng.normal(0, 1.0, 80), rng.normal(0, 1.2, 80)
    dm = diebold_mariano(a, b, h=1)
    t = sps.ttest_rel(a**2, b**2)
    assert dm.statistic == pytest.approx(t.statistic, rel=1e-12)
    assert dm.p_value == pytest.approx(t.pvalue, rel=1e-10)
    assert dm.mean_diff == pytest.approx(np.mean(a**2 - b**2))


def test_dm_hand_computation_horizon_three():
    """A worked example: d = e_a^2 - e_b^2 = (1, -1, 2, 0, 1, 3, -2, 1), h = 3, n = 8."""
    d = np.array([1.0, -1.0, 2.0, 0.0, 1.0, 3.0, -2.0, 1.0])
    e_a, e_b = np.where(d >= 0, np.sqrt(np.abs(d)), 0.0), np.where(d < 0, np.sqrt(np.abs(d)), 0.0)
    # by hand: mean = 5/8 = 0.625; centred c = d - 0.625
    c = [0.375, -1.625, 1.375, -0.625, 0.375, 2.375, -2.625, 0.375]
    g0 = sum(x * x for x in c) / 8  # 2.234375
    g1 = sum(c[t] * c[t - 1] for t in range(1, 8)) / 8  # lag-1
    g2 = sum(c[t] * c[t - 2] for t in range(2, 8)) / 8  # lag-2
    assert g0 == pytest.approx(2.234375)
    v = (g0 + 2 * g1 + 2 * g2) / 8
    if v <= 0:
        v, fallback = g0 / 8, True
    else:
        fallback = False
    dm_raw = 0.625 / math.sqrt(v)
    k = math.sqrt((8 + 1 - 6 + 3 * 2 / 8) / 8)
    res = diebold_mariano(e_a, e_b, h=3)
    assert res.variance_fallback is fallback
    assert res.statistic_uncorrected == pytest.approx(dm_raw, rel=1e-12)
    assert res.statistic == pytest.approx(dm_raw * k, rel=1e-12)
    assert res.p_value == pytest.approx(2 * sps.t.sf(abs(dm_raw * k), 7), rel=1e-10)


def test_dm_size_under_the_null_with_overlapping_forecasts():
    """Equal-accuracy MA(h-1) errors (overlapping 4-step forecasts): the 5% test rejects about 5%."""
    rng = np.random.default_rng(7)
    h, n, reps, rejections = 4, 120, 600, 0
    kernel = np.ones(h)
    for _ in range(reps):
        ea = np.convolve(rng.normal(size=n + h - 1), kernel, mode="valid")
        eb = np.convolve(rng.normal(size=n + h - 1), kernel, mode="valid")
        rejections += diebold_mariano(ea, eb, h=h).p_value < 0.05
    rate = rejections / reps
    assert 0.02 <= rate <= 0.09, rate


def test_dm_detects_a_better_forecast():
    rng = np.random.default_rng(2)
    a, b = rng.normal(0, 0.8, 200), rng.normal(0, 1.0, 200)
    res = diebold_mariano(a, b, h=1)
    assert res.mean_diff < 0 and res.p_value_a_better < 0.01 and res.p_value < 0.02


def test_dm_rejects_malformed_input():
    with pytest.raises(StatsError, match="pairs them"):
        diebold_mariano([1.0, 2.0, 3.0], [1.0, 2.0], h=1)
    with pytest.raises(StatsError, match="non-finite value at position 1"):
        diebold_mariano([1.0, float("nan"), 3.0], [1.0, 2.0, 3.0])
    with pytest.raises(StatsError, match="horizon"):
        diebold_mariano([1.0] * 10, [2.0] * 10, h=0)
    with pytest.raises(StatsError, match="loss must be"):
        diebold_mariano([1.0] * 10, [2.0] * 10, loss="huber")


def _ar1(rng, n, phi, sigma):
    e = np.empty(n)
    e[0] = rng.normal(0, sigma / math.sqrt(1 - phi * phi))
    for t in range(1, n):
        e[t] = phi * e[t - 1] + rng.normal(0, sigma)
    return e


def test_block_bootstrap_coverage_on_serially_correlated_errors():
    """AR(1) errors (phi 0.5) with known RMSEs 1.0 and 1.2 (population difference -0.2): the 90%
    moving-block interval covers the truth in about 90% of 300 synthetic data sets."""
    rng = np.random.default_rng(11)
    phi, n, covered, reps = 0.5, 300, 0, 300
    s = math.sqrt(1 - phi * phi)
    for i in range(reps):
        a, b = _ar1(rng, n, phi, 1.0 * s), _ar1(rng, n, phi, 1.2 * s)
        res = paired_bootstrap_rmse(a, b, replicates=400, level=0.90, seed=i)
        covered += res.low <= -0.2 <= res.high
    assert res.scheme == "moving-block" and res.block == round(n ** (1 / 3))
    assert 0.82 <= covered / reps <= 0.96, covered / reps


def test_group_bootstrap_coverage():
    """Independent groups (cells) of serially correlated errors: groups are resampled whole."""
    rng = np.random.default_rng(5)
    phi, covered, reps = 0.8, 0, 200
    s = math.sqrt(1 - phi * phi)
    for i in range(reps):
        ga = [_ar1(rng, 40, phi, 0.05 * s) for _ in range(20)]
        gb = [_ar1(rng, 40, phi, 0.06 * s) for _ in range(20)]
        res = paired_bootstrap_rmse(ga, gb, replicates=400, level=0.90, seed=i)
        # the estimand: E[RMSE_a(g) - RMSE_b(g)] for a 40-point cell, by a large simulation below
        covered += res.low <= TRUE_GROUP_DIFF <= res.high
    assert res.scheme == "groups" and res.n_units == 20
    assert 0.82 <= covered / reps <= 0.97, covered / reps


def _group_truth() -> float:
    rng = np.random.default_rng(99)
    phi = 0.8
    s = math.sqrt(1 - phi * phi)
    diffs = [
        math.sqrt(np.mean(_ar1(rng, 40, phi, 0.05 * s) ** 2)) - math.sqrt(np.mean(_ar1(rng, 40, phi, 0.06 * s) ** 2))
        for _ in range(20000)
    ]
    return float(np.mean(diffs))


TRUE_GROUP_DIFF = _group_truth()


def test_bootstrap_rejects_malformed_input():
    with pytest.raises(StatsError, match="pairs them"):
        paired_bootstrap_rmse(np.ones(10), np.ones(9))
    with pytest.raises(StatsError, match="2 groups"):
        paired_bootstrap_rmse([np.ones(5)], [np.ones(5)])
    with pytest.raises(StatsError, match="group 1"):
        paired_bootstrap_rmse([np.ones(5), np.ones(4)], [np.ones(5), np.ones(5)])
    with pytest.raises(StatsError, match="level"):
        paired_bootstrap_rmse(np.ones(10), np.ones(10), level=95)


def test_spearman():
    assert spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    assert spearman([1, 2, float("inf"), 4, 5], [1, 3, 2, 5, 4]) == pytest.approx(
        sps.spearmanr([1, 2, 4, 5], [1, 3, 5, 4]).statistic
    )
    assert math.isnan(spearman([1, 2], [1, 2]))
