"""The symreg benchmark suite (ndvm_bench/symreg.py): its skeletons compute what their numpy twins
compute, its data sets have the sizes the protocol asks for, and a small run produces the figures."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest

import ndvm
from ndvm_bench import symreg
from ndvm_bench.common import BenchConfig


@pytest.fixture(scope="module")
def datasets():
    return symreg.make_datasets()


def test_suite_has_forty_skeletons_of_three_to_ten_parameters_over_four_data_sets(datasets):
    assert len(symreg.SKELETONS) >= 40
    assert all(3 <= s.n_params <= 10 for s in symreg.SKELETONS.values())
    per_set = Counter(s.dataset for s in symreg.SKELETONS.values())
    assert set(per_set) == set(datasets) and len(datasets) >= 4
    for d in datasets.values():
        assert 2000 <= d.target.size <= 10_000
        assert all(x.shape == d.target.shape for x in d.inputs.values())
    # deterministic: the same numbers on every call
    again = symreg.make_datasets()
    assert all(np.array_equal(again[n].target, d.target) for n, d in datasets.items())


@pytest.mark.parametrize("name", sorted(symreg.SKELETONS))
def test_ndvm_skeleton_computes_its_numpy_twin(name, datasets):
    sk = symreg.SKELETONS[name]
    symreg.check_agreement(ndvm, sk, datasets[sk.dataset])  # raises AssertionError past 1e-9 x scale


def test_agreement_check_catches_a_wrong_twin(datasets):
    sk = symreg.SKELETONS["growth_logistic"]
    wrong = symreg.Skeleton(sk.name, sk.dataset, sk.n_params, sk.body, lambda p, x: sk.numpy(p, x) * (1 + 1e-6))
    with pytest.raises(AssertionError, match="growth_logistic: NDVM and numpy differ"):
        symreg.check_agreement(ndvm, wrong, datasets[sk.dataset])


def test_as_good_uses_the_stated_tolerance():
    assert symreg.as_good(1.0, 1.0) and symreg.as_good(1.0 + 5e-7, 1.0)
    assert not symreg.as_good(1.0 + 2e-6, 1.0)
    assert symreg.as_good(0.5e-12, 0.0) and not symreg.as_good(2e-12, 0.0)
    assert symreg.as_good(math.inf, math.inf) and symreg.as_good(1.0, math.inf) and not symreg.as_good(math.inf, 1.0)


def test_quick_run_on_two_skeletons_reports_every_figure():
    names = ["growth_exp_rise", "growth_logistic"]  # the 2,000-point data set: a few seconds
    result = symreg.run_symreg(BenchConfig(quick=True), names=names)
    summary = result.data["summary"]
    assert set(summary) == set(symreg.NDVM_CONFIGS)
    for by_n in summary.values():
        for n in ("1", "8"):
            s = by_n[n]
            assert s["skeletons"] == 2 and 0 <= s["as_good"] <= 2 and 0 <= s["whole_budget"] <= 2
            assert s["geomean_speedup"] > 0 and math.isfinite(s["geomean_speedup"])
        assert all(v > 0 and math.isfinite(v) for v in by_n["cost"].values())
    records = result.data["records"]
    assert [r["skeleton"] for r in records] == names
    for r in records:
        # each side's final loss is a real fit: below the loss at the all-ones start
        start = symreg.numpy_loss(symreg.SKELETONS[r["skeleton"]], symreg.make_datasets()[r["dataset"]])(
            np.ones(r["P"])
        )
        assert r["scipy_1"]["loss"] < start and r["scipy_8"]["loss"] <= r["scipy_1"]["loss"]
        for cfg in symreg.NDVM_CONFIGS:
            assert r[cfg]["1"]["loss"] < start and r[cfg]["8"]["loss"] <= r[cfg]["1"]["loss"] * (1 + 1e-12)
    assert len(result.rows) == 2 * len(symreg.NDVM_CONFIGS)


def test_unknown_skeleton_is_named():
    with pytest.raises(ValueError, match="unknown symreg skeleton.*no_such"):
        symreg.run_symreg(BenchConfig(quick=True), names=["no_such"])


def test_suite_is_registered_and_run_only_when_named():
    from ndvm_bench.runner import EXPLICIT_SUITES, SUITE_NAMES, _suites, build_parser

    assert "symreg" in EXPLICIT_SUITES and "symreg" not in SUITE_NAMES
    assert build_parser().parse_args(["--suite", "symreg", "--quick"]).suite == ["symreg"]
    assert _suites()["symreg"] is symreg.run_symreg
