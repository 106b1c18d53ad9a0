"""The baselines compute what NDVM computes, and the benchmark suites run.

Values and gradients of every baseline (tagged, eager, compiled C++, JAX when installed) are
compared with NDVM's on the benchmark programs (float64, relative 1e-10); the baselines are also
checked against each other and against finite differences, so they stay trustworthy on their own.
"""

from __future__ import annotations

import json
import math
import shutil

import numpy as np
import pytest
import torch

from ndvm.errors import EvalError, ParseError
from ndvm_bench.baselines import eager, jax_baseline, tagged
from ndvm_bench.baselines.calibrate import calibrate as baseline_calibrate
from ndvm_bench.baselines.reader import Symbol, read_all
from ndvm_bench.common import BenchConfig, time_call
from ndvm_bench.programs import PROGRAMS, REGIME_ORDER, kalman_observations

RTOL = 1e-10


def _ndvm():
    """The NDVM runtime, or skip while it is not built (these tests exist to compare with it)."""
    try:
        import ndvm
    except Exception as e:  # pragma: no cover - depends on the build
        pytest.skip(f"ndvm runtime not importable: {e}")
    if not hasattr(ndvm, "compile"):
        pytest.skip("ndvm.compile not available yet (runtime not built)")
    return ndvm


def assert_close(actual, expected, rtol=RTOL, what=""):
    actual, expected = np.asarray(actual, dtype=np.float64), np.asarray(expected, dtype=np.float64)
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape} != {expected.shape}"
    rel = np.abs(actual - expected) / np.maximum(1.0, np.abs(expected))
    assert np.all(rel <= rtol), f"{what}: max relative difference {rel.max():.3e} > {rtol}"


# -- the reader ---------------------------------------------------------------------------------
def test_reader_reads_numbers_symbols_quote_and_comments():
    forms = read_all("(param a 0.5) ; comment\n(+ 1 -2.5e1 'x #t)")
    assert forms[0] == [Symbol("param"), Symbol("a"), 0.5]
    assert forms[1] == ["+", 1, -25.0, ["quote", "x"], True]
    assert isinstance(forms[1][1], int) and isinstance(forms[1][2], float)


def test_reader_reports_unbalanced_parentheses_with_position():
    with pytest.raises(ParseError) as e:
        read_all("(+ 1\n  (* 2 3)")
    assert e.value.line == 1 and e.value.column == 1
    with pytest.raises(ParseError):
        read_all("(+ 1 2))")


# -- baselines agree with each other and with finite differences -------------------------------
@pytest.mark.parametrize("name", REGIME_ORDER)
def test_tagged_and_eager_agree(name):
    p = PROGRAMS[name]
    theta = p.theta_batch(3, spread=0.1)
    vt, gt = tagged.compile(p.source).value_and_grad(theta, p.inputs)
    ve, ge = eager.compile(p.source).value_and_grad(theta, p.inputs)
    assert_close(vt, ve, what=f"{name} values")
    assert_close(gt, ge, what=f"{name} gradients")
    assert np.all(np.isfinite(vt)) and vt.shape == (3,) and gt.shape == (3, len(p.theta))
    # lanes are independent: lane 1 of the batch equals a one-lane run
    v1, g1 = eager.compile(p.source).value_and_grad(theta[1:2], p.inputs)
    assert_close(v1, ve[1:2], rtol=0, what="lane independence")
    assert_close(g1, ge[1:2], rtol=0, what="lane independence")


@pytest.mark.parametrize("name", ["michaelis_menten", "damped_oscillator", "logistic_map_loop", "kalman2d_T80"])
def test_eager_gradients_match_central_differences(name):
    p = PROGRAMS[name]
    prog = eager.compile(p.source)
    theta = p.theta_batch(1)
    _, g = prog.value_and_grad(theta, p.inputs)
    h = 1e-6
    for j in range(theta.shape[1]):
        up, down = theta.copy(), theta.copy()
        up[0, j] += h
        down[0, j] -= h
        fd = (prog.evaluate(up, p.inputs)[0] - prog.evaluate(down, p.inputs)[0]) / (2 * h)
        assert math.isclose(g[0, j], fd, rel_tol=1e-6, abs_tol=1e-7), (name, j, g[0, j], fd)


def test_tagged_values_are_14_wide_one_hot_tensors_in_a_write_once_heap():
    p = PROGRAMS["kalman2d_T80"]
    vals = tagged.TaggedValues(B=2)
    prog = tagged.compile(p.source)
    cols = list(torch.tensor(p.theta_batch(2), dtype=torch.float64).unbind(1))
    result = prog.evaluator.run(vals, cols, {"ys": p.inputs["ys"][:3]})
    assert result.shape == (2, tagged.WIDTH)
    assert len(vals.heap) > 100
    for cell in vals.heap.values():
        assert cell.shape == (2, 14)
        tag_part = cell[:, :10]
        assert torch.all(tag_part.sum(dim=1) == 1) and torch.all((tag_part == 0) | (tag_part == 1))
    with pytest.raises(EvalError, match="write-once"):
        base = vals.next_addr
        vals.next_addr = base - 1  # force a collision with the last cell
        vals.alloc([vals.number(1.0), vals.number(2.0)])


def test_tagged_environment_lives_in_the_heap():
    vals = tagged.TaggedValues(B=1)
    env = vals.extend(None, ["a"], [vals.number(2.0)])
    assert float(vals.lookup(env, "a")[0, tagged.P0]) == 2.0
    assert vals.lookup(env, "+") is not None  # primitives are bound in the global frame
    assert vals.lookup(env, "nonexistent") is None
    n_cells = len(vals.heap)
    vals.define(env, "b", vals.number(3.0))
    assert len(vals.heap) == n_cells + 4  # two pairs of two cells: (b . 3.0) and the frame's new head


def test_baselines_raise_typed_errors():
    for mod in (tagged, eager):
        with pytest.raises(EvalError):
            mod.compile("(param a 1.0) (car a)").value_and_grad(np.array([[1.0]]))
        with pytest.raises(EvalError, match="unbound"):
            mod.compile("(param a 1.0) (+ a zz)").value_and_grad(np.array([[1.0]]))
        with pytest.raises(EvalError, match="diverge"):  # lanes that take different branches
            mod.compile("(param a 1.0) (if (< a 0.5) a (* 2 a))").value_and_grad(np.array([[0.0], [1.0]]))


def test_baselines_run_closures_rest_args_and_deep_tail_calls():
    src = """(param a 0.5)
    (define (sum-to n acc) (if (= n 0) acc (sum-to (- n 1) (+ acc a))))
    (define (f . xs) (length xs))
    (letrec ((g (lambda (k) (if (= k 0) 0.0 (+ a (g (- k 1)))))))
      (+ (sum-to 1000 0.0) (f 1 2 3) (g 5) (cond ((> a 1) 100) (else 0)) (car (cdr '(1 2)))))"""
    for mod in (tagged, eager):
        v, g = mod.compile(src).value_and_grad(np.array([[0.5]]))
        assert v[0] == pytest.approx(0.5 * 1000 + 3 + 0.5 * 5 + 2)
        assert g[0, 0] == pytest.approx(1005.0)


def test_baseline_calibration_reduces_the_kalman_nll():
    p = PROGRAMS["kalman2d_T80"]
    fit = baseline_calibrate(eager.compile(p.source), p.inputs, loss="value", steps=30, lr=0.08)
    assert fit.error is None and fit.history[0] > fit.loss
    assert fit.params["q"] > 0 and fit.params["r"] > 0  # positive constraints hold


# -- against NDVM --------------------------------------------------------------------------------
@pytest.mark.parametrize("name", REGIME_ORDER)
@pytest.mark.parametrize("baseline", ["tagged", "eager"])
def test_baseline_matches_ndvm(name, baseline):
    ndvm = _ndvm()
    p = PROGRAMS[name]
    theta = p.theta_batch(3, spread=0.1)
    vn, gn = ndvm.compile(p.source).value_and_grad(theta, inputs=p.inputs)
    mod = tagged if baseline == "tagged" else eager
    vb, gb = mod.compile(p.source).value_and_grad(theta, p.inputs)
    assert_close(vb, vn, what=f"{baseline} {name} values")
    assert_close(gb, gn, what=f"{baseline} {name} gradients")


def test_highdim_program_matches_ndvm():
    from ndvm_bench.highdim import highdim_source, simulated_series

    ndvm = _ndvm()
    src, ys = highdim_source(3), simulated_series(3, 12)
    prog = ndvm.compile(src)
    theta = np.array([[p.init for p in prog.params]]) * np.array([[1.0], [0.9]])
    vn, gn = prog.value_and_grad(theta, inputs={"ys": ys})
    for mod in (eager, tagged):
        vb, gb = mod.compile(src).value_and_grad(theta, {"ys": ys})
        assert_close(vb, vn, rtol=1e-9, what="highdim values")
        assert_close(gb, gn, rtol=1e-9, what="highdim gradients")


compiler = pytest.mark.skipif(not (shutil.which("c++") or shutil.which("g++")), reason="no C++ compiler")


@compiler
def test_compiled_kalman_matches_eager_baseline():
    from ndvm_bench import compiled

    p = PROGRAMS["kalman2d_T80"]
    theta = p.theta_batch(5, spread=0.2)
    out = compiled.run_kalman(p.inputs["ys"], theta, reps=2)
    ve, ge = eager.compile(p.source).value_and_grad(theta, p.inputs)
    assert_close(out["values"], ve, what="compiled values")
    assert_close(out["grads"], ge, what="compiled gradients")
    assert out["seconds_per_call"] > 0 and out["B"] == 5


@compiler
def test_compiled_kalman_matches_ndvm():
    from ndvm_bench import compiled

    ndvm = _ndvm()
    p = PROGRAMS["kalman2d_T80"]
    theta = p.theta_batch(4, spread=0.2)
    out = compiled.run_kalman(p.inputs["ys"], theta, reps=1)
    vn, gn = ndvm.compile(p.source).value_and_grad(theta, inputs=p.inputs)
    assert_close(out["values"], vn, what="compiled values")
    assert_close(out["grads"], gn, what="compiled gradients")


@pytest.mark.skipif(not jax_baseline.available(), reason="JAX not installed (optional extra [jax])")
@pytest.mark.parametrize("name", ["scalar_mul_add", "damped_oscillator", "logistic_map_loop"])
def test_jax_staging_matches_eager(name):
    p = PROGRAMS[name]
    theta = p.theta_batch(3, spread=0.1)
    staged = jax_baseline.stage(p.source, p.inputs)
    vj, gj = staged.value_and_grad(theta)
    ve, ge = eager.compile(p.source).value_and_grad(theta, p.inputs)
    assert_close(vj, ve, what="jax values")
    assert_close(gj, ge, what="jax gradients")
    assert staged.staging_seconds > 0


def test_jax_unavailable_is_a_clear_error():
    if jax_baseline.available():
        pytest.skip("JAX is installed")
    with pytest.raises(jax_baseline.JaxUnavailable, match=r"\[jax\]"):
        jax_baseline.stage("(param a 1.0) a", {})


# -- helpers of the suites -------------------------------------------------------------------------
def test_kalman_data_are_deterministic():
    a, b = kalman_observations(80), kalman_observations(80)
    assert a.shape == (80, 2) and np.array_equal(a, b)
    assert np.array_equal(PROGRAMS["kalman2d_T80"].inputs["ys"], a)


def test_highdim_program_has_611_parameters_at_d20():
    from ndvm_bench.baselines.interp import split_toplevel
    from ndvm_bench.highdim import highdim_param_names, highdim_source

    params, _ = split_toplevel(read_all(highdim_source(20)))
    assert len(params) == 611
    assert [p.name for p in params] == highdim_param_names(20)


def test_enso_series_from_shared_data():
    from conftest import shared_file

    from ndvm_bench.highdim import enso_series

    data = shared_file("enso").parent  # ../shared/data (or $NDVM_SHARED_DATA); skips when absent
    Y = enso_series(data, 20, 120)
    assert Y.shape == (120, 20)
    assert np.allclose(Y.mean(axis=0), 0.0, atol=1e-12) and np.allclose(Y.std(axis=0), 1.0)
    # column 2 is Niño 3.4 lagged by one month: it equals column 0 shifted down by one row (before scaling)
    assert np.corrcoef(Y[1:, 2], Y[:-1, 0])[0, 1] > 0.999


def test_differential_evolution_minimizes_a_quadratic():
    from ndvm_bench.highdim import differential_evolution

    target = np.array([1.0, -2.0, 0.5])
    _, best, hist = differential_evolution(
        lambda X: np.sum((X - target) ** 2, axis=1), np.zeros(3), evaluations=3000, pop=20, seed=1, scale=1.0
    )
    assert best < 1e-6 and hist[0] > hist[-1]


def test_crossover_steps():
    from ndvm_bench.staging import crossover_steps

    assert crossover_steps(1e-5, 1e-4, 0.1, 1e-5) == pytest.approx((0.1 - 1e-5) / (1e-4 - 1e-5))
    assert crossover_steps(1e-5, 1e-6, 0.1, 1e-5) is None


def test_time_call_groups_fast_calls():
    t = time_call(lambda: None, min_time=0.01, min_reps=3)
    assert t.reps >= 3 and 0 < t.median < 1e-5


# -- suites in --quick mode (need the runtime) -----------------------------------------------------
def _suite(name):
    from ndvm_bench.runner import _suites

    _ndvm()
    torch.set_num_threads(1)
    return _suites()[name](BenchConfig(quick=True))


@pytest.mark.timeout(120)
def test_suite_regimes_quick():
    res = _suite("regimes")
    assert [r[0] for r in res.rows] == REGIME_ORDER
    for name, entry in res.data.items():
        assert entry["max_rel_diff_vs_ndvm"] <= RTOL, name
        assert entry["tagged_over_eager"] > 1.0, name  # boxing every value costs something
    assert res.data["kalman2d_T80"]["compiled_s"] > 0


@pytest.mark.timeout(120)
def test_suite_amortization_quick():
    res = _suite("amortization")
    k = res.data["kalman2d_T80"]
    assert set(k) == {1, 16, 256}
    assert k[256]["per_lane"]["ndvm"] < k[1]["per_lane"]["ndvm"]  # batching amortizes the walk


def test_a_named_data_folder_that_does_not_exist_is_an_error(tmp_path, monkeypatch):
    """--data-dir and $NDVM_SHARED_DATA name the shared data folder; a wrong name is reported, not
    silently replaced by ../shared/data."""
    from ndvm_bench.common import SHARED_DATA_ENV, find_data_dir

    missing = tmp_path / "nowhere"
    with pytest.raises(FileNotFoundError, match="--data-dir names .*nowhere, which is not a folder"):
        find_data_dir(BenchConfig(quick=True, data_dir=str(missing)))
    monkeypatch.setenv(SHARED_DATA_ENV, str(missing))
    with pytest.raises(FileNotFoundError, match=r"\$NDVM_SHARED_DATA names"):
        find_data_dir(BenchConfig(quick=True))
    monkeypatch.setenv(SHARED_DATA_ENV, str(tmp_path))
    assert find_data_dir(BenchConfig(quick=True)) == tmp_path


@pytest.mark.timeout(120)
def test_suite_staging_quick():
    from ndvm_bench.common import find_data_dir

    res = _suite("staging")
    assert all(e["ndvm_compile_s"] > 0 for e in res.data["programs"].values())
    data = find_data_dir(BenchConfig(quick=True))  # where the suite looks for the shared data
    if data is not None and (data / "ndvm_corpora" / "cosearch_candidates_valid.jsonl").exists():
        assert res.data["corpus_compile_median_s"] > 0
    else:  # a clone without the shared data: the corpus part is left out, and the notes say why
        assert "corpus_compile_median_s" not in res.data
        assert any("co-search corpus" in note for note in res.notes)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_suite_calibration_quick():
    res = _suite("calibration")
    nll0 = float(eager.compile(PROGRAMS["kalman2d_T80"].source).evaluate(None, PROGRAMS["kalman2d_T80"].inputs)[0])
    assert res.data["ndvm_restarts_1"]["loss"] < nll0
    assert res.data["ndvm_over_tagged_restarts_1"] > 1


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_suite_cosearch_quick():
    res = _suite("cosearch")
    assert res.data["ndvm"]["calibrations"] == 247
    assert res.data["ndvm"]["best_r2"] > 0.9


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_suite_multicore_quick():
    res = _suite("multicore")
    assert all(e["identical_to_1_thread"] for e in res.data.values())


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_suite_highdim_quick():
    res = _suite("kalman-highdim")
    d = res.data
    assert d["parameters"] == 27 and d["gradient"]["best_nll"] < d["nll_at_init"]


def test_bench_main_writes_json(tmp_path):
    ndvm = _ndvm()
    if not hasattr(ndvm, "calibrate"):
        pytest.skip("ndvm.calibrate not available yet")
    from ndvm_bench import main

    out = tmp_path / "bench.json"
    assert main(["--quick", "--suite", "staging", "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["quick"] is True and "staging" in doc["suites"] and doc["machine"]["cpu_count"] >= 1


def test_markdown_tables_from_a_result_document():
    from ndvm_bench.common import SuiteResult
    from ndvm_bench.runner import to_markdown

    res = SuiteResult("demo", "A demo", ["name", "time"], [["a|b", "1.00 ms"]], ["a note"], seconds=1.5)
    doc = {
        "suites": {
            "demo": {**res.to_json(), "load_average_before": [0.5, 0.4, 0.3]},
            "other": {"skipped": "JAX is not installed"},
        }
    }
    md = to_markdown(doc)
    assert "### demo: A demo" in md and "| a\\|b | 1.00 ms |" in md and "|---|--:|" in md
    assert "- a note" in md and "Skipped: JAX is not installed" in md
