"""Variable projection (issue 37 part 1): the parameters a program's result is affine in are found
at compile time (``Program.linear_names``) and solved by least squares at every evaluation of a
calibration (``solve_linear=True``, the default); the optimizer moves only the others."""

from __future__ import annotations

import numpy as np
import pytest

import ndvm
from ndvm.calibrate import calibrate_groups, calibrate_many

RNG = np.random.default_rng(37)
X = np.linspace(0.0, 2.0, 300)
# a law with two linear parameters (scale and offset) and one nonlinear rate
EXP_LAW = "(param a 1.0)(param b 0.5)(param c 0.0)\n(+ (* a (exp (* b x))) c)"
EXP_Y = 2.5 * np.exp(0.7 * X) - 1.2 + 0.01 * RNG.standard_normal(X.size)


def projected_mse(b: float) -> tuple[float, np.ndarray]:
    """numpy's reference for EXP_LAW: the least-squares (a, c) for rate b, and the MSE there."""
    basis = np.column_stack([np.exp(b * X), np.ones_like(X)])
    coef, *_ = np.linalg.lstsq(basis, EXP_Y, rcond=None)
    return float(np.mean((basis @ coef - EXP_Y) ** 2)), coef


@pytest.mark.parametrize(
    ("source", "linear"),
    [
        (EXP_LAW, ["a", "c"]),
        ("(param a 1.0)(param b 0.5)\n(* a b x)", ["a"]),  # a product is affine in one factor's parameters
        ("(param a 1.0)(param b 0.5)(param c 1.0)\n(/ (+ a (* c x)) (+ 1 (* b x)))", ["a", "c"]),
        ("(param a 1.0)(param b 0.5)\n(* (+ a x) (+ b x))", ["a"]),
        ("(param a 1.0)\n(+ (* a x) (* a (sin x)))", ["a"]),  # twice, affinely both times
        ("(param a 1.0)\n(+ (* a x) (exp a))", []),  # once affinely, once not
        ("(param a 1.0)\n(* a a x)", []),
        ("(param a 1.0)\n(define (f u) (* a u))\n(+ (f x) a)", []),  # also used by a define
        ("(param a 1.0 positive)(param b 0.5)\n(- (* b x) a)", ["b"]),  # constrained: searched
        ("(param a 1.0 shared)(param b 0.5)\n(+ a (* b x))", ["b"]),  # shared across groups: searched
        ("(param a 1.0)(param k 0.5)\n(* a (if (> k 0) x (* 2 x)))", ["a"]),
        ("(param a 1.0)\n(sin (* a x))", []),
        ("(param c 0.0)\nc", ["c"]),
    ],
)
def test_linear_parameters_found_on_the_result_expression(source: str, linear: list[str]) -> None:
    assert ndvm.compile(source).linear_names == linear


def test_each_evaluation_scores_the_least_squares_coefficients() -> None:
    # one evaluation (steps=1, gd): the history's first loss is numpy's projected loss at b = 0.5,
    # whatever a and c were declared
    fit = ndvm.calibrate(EXP_LAW, {"x": X}, EXP_Y, optimizer="gd", steps=1, lr=1e-12, restarts=1)
    want, coef = projected_mse(0.5)
    assert fit.history[0] == pytest.approx(want, rel=1e-10)
    assert [fit.params["a"], fit.params["c"]] == pytest.approx(coef.tolist(), rel=1e-8)


def test_the_gradient_is_that_of_the_projected_loss() -> None:
    # one gradient-descent step of length lr moves b by -lr * d(projected loss)/db: compared with
    # numpy's central difference of the projected loss
    lr = 1e-7
    fit = ndvm.calibrate(EXP_LAW, {"x": X}, EXP_Y, optimizer="gd", steps=1, lr=lr, restarts=1)
    got = (0.5 - fit.params["b"]) / lr
    h = 1e-6
    want = (projected_mse(0.5 + h)[0] - projected_mse(0.5 - h)[0]) / (2 * h)
    assert got == pytest.approx(want, rel=1e-5)


def test_the_optimum_is_stationary_in_every_parameter_and_needs_fewer_evaluations() -> None:
    program = ndvm.compile(EXP_LAW)
    solved = ndvm.calibrate(program, {"x": X}, EXP_Y, restarts=8)
    searched = ndvm.calibrate(program, {"x": X}, EXP_Y, restarts=8, solve_linear=False)
    assert solved.loss <= searched.loss * (1 + 1e-9)
    _, grads = program.loss_and_grad(solved.theta, {"x": X}, EXP_Y)
    assert np.max(np.abs(grads)) < 1e-7  # the solved coefficients too, though no optimizer moved them
    assert solved.lane_evaluations.sum() < searched.lane_evaluations.sum()


def test_coefficients_far_from_their_start_are_found_at_once() -> None:
    # scales of 1e4 and 5e2: searched from 1.0 they take many steps; solved, the first evaluation
    y = 1e4 * np.exp(-0.3 * X) + 500.0
    source = "(param a 1.0)(param b -0.1)(param c 0.0)\n(+ (* a (exp (* b x))) c)"
    fit = ndvm.calibrate(source, {"x": X}, y, restarts=4)
    assert fit.params["b"] == pytest.approx(-0.3, rel=1e-7)
    assert [fit.params["a"], fit.params["c"]] == pytest.approx([1e4, 500.0], rel=1e-7)


def test_a_declared_sigma_of_the_likelihood_is_searched_and_the_fit_agrees() -> None:
    source = "(param a 1.0)(param b 0.5)(param c 0.0)(param sigma 1.0 positive)\n(+ (* a (exp (* b x))) c)"
    assert ndvm.compile(source).linear_names == ["a", "c"]
    solved = ndvm.calibrate(source, {"x": X}, EXP_Y, loss="gaussian_nll", restarts=4)
    searched = ndvm.calibrate(source, {"x": X}, EXP_Y, loss="gaussian_nll", restarts=4, solve_linear=False)
    assert solved.loss == pytest.approx(searched.loss, abs=1e-8)
    for name in ("a", "b", "c"):
        assert solved.params[name] == pytest.approx(searched.params[name], rel=1e-4)
    mse, _ = projected_mse(solved.params["b"])
    assert solved.params["sigma"] == pytest.approx(np.sqrt(mse), rel=1e-4)
    profiled = ndvm.calibrate(EXP_LAW, {"x": X}, EXP_Y, loss="gaussian_nll", restarts=4)
    assert profiled.params["b"] == pytest.approx(solved.params["b"], rel=1e-6)


def test_lane_targets_get_their_own_coefficients() -> None:
    scales = np.array([1.0, -3.0, 7.5])
    targets = np.stack([s * np.exp(0.7 * X) + s for s in scales])
    fit = ndvm.calibrate(EXP_LAW, {"x": X}, lane_target=targets, restarts=3, init=np.array([[1.0, 0.6, 0.0]] * 3))
    for lane, s in enumerate(scales):
        a, b, c = fit.all_params[lane]
        assert (a, b, c) == pytest.approx((s, 0.7, s), rel=1e-6)


def test_a_constant_model_is_the_mean() -> None:
    fit = ndvm.calibrate("(param c 0.0)\nc", None, EXP_Y, restarts=2)
    assert fit.params["c"] == pytest.approx(float(np.mean(EXP_Y)), rel=1e-12)


def test_lanes_that_take_different_branches_keep_their_rows_together() -> None:
    # k > 0 and k < 0 lanes diverge at the `if`: each lane's coefficient must stay its own
    source = "(param a 1.0)(param k 0.5)\n(+ (* a (if (> k 0) x (* -2 x))) (* 0 k))"
    y = 3.0 * X
    init = np.array([[1.0, 0.5], [1.0, -0.5], [1.0, 0.25], [1.0, -2.0]])
    fit = ndvm.calibrate(source, {"x": X}, y, restarts=4, init=init, optimizer="gd", steps=1, lr=1e-12)
    assert fit.all_params[:, 0] == pytest.approx([3.0, -1.5, 3.0, -1.5], rel=1e-10)
    assert fit.all_losses == pytest.approx([0.0] * 4, abs=1e-20)


def test_the_basis_program_reads_the_inputs_of_the_program_it_came_from() -> None:
    # inputs are numbered by first use: here u before x, while the basis program (list (exp (* k x)) u)
    # meets x first. Read in its own numbering it would get u's value for x (the heavy
    # differential test's seed 5760 found it, as "lanes returned results of different shapes")
    source = "(param c 1.0)(param k 0.5)\n(+ (* c u) (exp (* k x)))"
    assert ndvm.compile(source).linear_names == ["c"]
    u = np.cos(3 * X)
    y = 2.0 * u + 0.25 * X
    fit = ndvm.calibrate(source, {"u": u, "x": X}, y, optimizer="gd", steps=1, lr=1e-12, restarts=1)
    residual = y - np.exp(0.5 * X)
    assert fit.params["c"] == pytest.approx(float(u @ residual / (u @ u)), rel=1e-10)
    # a scalar input first and a vector one after, in branches the lanes split on
    source = "(param c 1.0)(param k 0.5)\n(+ (* c (if (< k 0) s x)) (* k x))"
    init = np.array([[1.0, 0.5], [1.0, -0.5]])
    fit = ndvm.calibrate(source, {"s": 0.7, "x": X}, 3.0 * X, restarts=2, init=init, optimizer="gd", steps=1, lr=1e-12)
    assert fit.status == "ok"
    assert fit.all_params[0, 0] == pytest.approx(2.5, rel=1e-10)  # (3 - 0.5) x = c x
    rest = 3.0 * X + 0.5 * X
    assert fit.all_params[1, 0] == pytest.approx(float(rest.sum() / (0.7 * X.size)), rel=1e-10)


def test_a_basis_that_overflows_is_a_nonfinite_lane_not_a_crash() -> None:
    init = np.array([[1.0, 800.0, 0.0], [1.0, 0.6, 0.0]])  # exp(800 x) overflows
    fit = ndvm.calibrate(EXP_LAW, {"x": X}, EXP_Y, restarts=2, init=init)
    assert fit.status == "ok" and fit.best_restart == 1
    assert fit.params["b"] == pytest.approx(0.7, abs=0.01)


def test_repeated_bases_get_a_solution_not_a_failure() -> None:
    # a and d multiply the same basis: the least squares is not unique; the fit is still exact
    source = "(param a 1.0)(param d 1.0)(param b 0.5)\n(+ (* a (exp (* b x))) (* d (exp (* b x))))"
    y = 2.0 * np.exp(0.7 * X)
    fit = ndvm.calibrate(source, {"x": X}, y, restarts=4)
    assert fit.loss < 1e-20
    assert fit.params["a"] + fit.params["d"] == pytest.approx(2.0, rel=1e-9)


def test_wide_batches_and_the_batch_entry_points_solve_too() -> None:
    # 100 lanes of 3 rows each: wider than one chunk of 256 lanes
    fit = ndvm.calibrate(EXP_LAW, {"x": X}, EXP_Y, restarts=100, jitter=0.2, threads=1)
    mse, coef = projected_mse(fit.params["b"])
    assert fit.loss == pytest.approx(mse, rel=1e-9)
    many = calibrate_many([EXP_LAW, "(param a 1.0)\n(* a x)"], {"x": X}, EXP_Y, restarts=4)
    assert many[0].loss == pytest.approx(fit.loss, rel=1e-6)
    assert many[1].params["a"] == pytest.approx(float(X @ EXP_Y / (X @ X)), rel=1e-10)
    grouped = calibrate_groups([EXP_LAW], [({"x": X}, EXP_Y), ({"x": X[:100]}, EXP_Y[:100])], restarts=4)
    assert grouped[0][0].loss == pytest.approx(fit.loss, rel=1e-6)


def test_solve_linear_must_be_a_bool() -> None:
    with pytest.raises(ValueError, match="solve_linear must be True or False"):
        ndvm.calibrate(EXP_LAW, {"x": X}, EXP_Y, solve_linear="yes")  # type: ignore[arg-type]


def test_defines_before_the_result_are_kept_in_the_basis_program() -> None:
    source = "(param a 1.0)(param b 0.5)(param c 0.0)\n(define (f u) (exp (* b u)))\n(+ (* a (f x)) c)"
    program = ndvm.compile(source)
    assert program.linear_names == ["a", "c"]
    assert "(define (f u)" in program._native.basis_source
    fit = ndvm.calibrate(program, {"x": X}, EXP_Y, restarts=4)
    mse, coef = projected_mse(fit.params["b"])
    assert fit.loss == pytest.approx(mse, rel=1e-9)
    assert [fit.params["a"], fit.params["c"]] == pytest.approx(coef.tolist(), rel=1e-7)


def test_a_program_that_rebinds_a_primitive_of_the_basis_searches_instead() -> None:
    # the basis program would call `list`: a define of that name leaves the program unprojected
    source = "(param a 1.0)(param b 0.5)\n(define (list u) u)\n(+ (* a (exp (* b x))) 0)"
    program = ndvm.compile(source)
    assert program.linear_names == [] and program._native.basis_source == ""
    fit = ndvm.calibrate(program, {"x": X}, 2.0 * np.exp(0.7 * X), restarts=8)
    assert fit.params["b"] == pytest.approx(0.7, rel=1e-5)


def test_the_pipeline_searches_by_default_and_solves_on_request() -> None:
    from flows.calibration import CalibrationOptions

    searched = calibrate_many([EXP_LAW], {"x": X}, EXP_Y, **CalibrationOptions(threads=1).as_kwargs())[0]
    solved = calibrate_many([EXP_LAW], {"x": X}, EXP_Y, **CalibrationOptions(threads=1, solve_linear=True).as_kwargs())[
        0
    ]
    # the pipeline's Adam (100 steps) reaches the least squares with a and c solved, not searched
    assert solved.loss == pytest.approx(projected_mse(solved.params["b"])[0], rel=1e-9)
    assert solved.loss < searched.loss
