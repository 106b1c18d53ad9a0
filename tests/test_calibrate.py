"""Calibration: the fused native optimizers reach known optima, respect constraints, freeze
non-finite lanes without poisoning the others, and threads give the same bits as serial."""

import numpy as np
import pytest

import ndvm

LINEAR = "(param a 0.1) (param b -0.2) (param c 0.3) (+ (* a x1) (* b x2) c)"


@pytest.fixture(scope="module")
def linear_data():
    rng = np.random.default_rng(3)
    x1, x2 = rng.normal(size=50), rng.normal(size=50)
    y = 1.5 * x1 - 0.7 * x2 + 0.25 + 0.1 * rng.normal(size=50)
    X = np.column_stack([x1, x2, np.ones(50)])
    beta, *_ = np.linalg.lstsq(X, y, rcond=None)  # closed-form least squares
    return {"x1": x1, "x2": x2}, y, beta


@pytest.mark.parametrize("optimizer,steps,lr", [("lbfgs", 60, 0.1), ("adam", 3000, 0.05), ("gd", 3000, 0.3)])
def test_optimizers_reach_least_squares(linear_data, optimizer, steps, lr):
    inputs, y, beta = linear_data
    fit = ndvm.calibrate(LINEAR, inputs, target=y, optimizer=optimizer, steps=steps, lr=lr, restarts=4)
    got = np.array([fit.params["a"], fit.params["b"], fit.params["c"]])
    tol = 1e-7 if optimizer == "lbfgs" else 1e-4
    np.testing.assert_allclose(got, beta, atol=tol)
    mse = np.mean((np.column_stack([inputs["x1"], inputs["x2"], np.ones(50)]) @ beta - y) ** 2)
    assert fit.loss == pytest.approx(mse, rel=1e-6)
    np.testing.assert_allclose(fit.predict(inputs), np.column_stack([inputs["x1"], inputs["x2"], np.ones(50)]) @ got)
    assert fit.history.shape[0] <= fit.steps and fit.history[0] >= fit.loss


def test_constraints_are_respected():
    # y = exp(-k t) with k > 0 and an offset in (0, 0.2): the data pull k negative and the offset to 0.5
    t = np.linspace(0, 3, 30)
    y = np.exp(0.4 * t) + 0.5
    src = "(param k 1.0 positive) (param off 0.1 (between 0 0.2)) (+ (exp (- (* k t))) off)"
    fit = ndvm.calibrate(src, {"t": t}, target=y, optimizer="adam", steps=300, lr=0.1, restarts=8)
    assert (fit.all_params[:, 0] > 0).all()
    assert ((fit.all_params[:, 1] > 0) & (fit.all_params[:, 1] < 0.2)).all()
    assert fit.params["off"] > 0.19  # pushed against its upper bound


def test_nonfinite_lanes_freeze_without_poisoning_others():
    # lanes starting with a < 0 hit log of a negative number: NaN loss; they are frozen
    src = "(param a 1.0) (* (log a) x)"
    x = np.linspace(1, 2, 10)
    y = np.log(2.0) * x
    init = np.array([[1.0], [-1.0], [1.5], [-3.0]])
    fit = ndvm.calibrate(src, {"x": x}, target=y, steps=200, lr=0.05, restarts=4, init=init)
    assert fit.lane_status[1] == "nonfinite" and fit.lane_status[3] == "nonfinite"
    assert fit.params["a"] == pytest.approx(2.0, rel=1e-3)
    solo = ndvm.calibrate(src, {"x": x}, target=y, steps=200, lr=0.05, restarts=1, init=init[:1])
    assert solo.all_losses[0] == fit.all_losses[0]  # bit for bit: the frozen lanes changed nothing


def test_threads_identical_to_serial():
    rng = np.random.default_rng(0)
    x = np.linspace(0.1, 6, 40)
    y = np.exp(-0.3 * x) * np.cos(2 * x)
    sources = [
        f"(param a 0.5) (param b 0.1) (param c {1 + k / 10}) (* a (exp (- (* b x))) (cos (* c x)))" for k in range(12)
    ] + ["(param a 1) (car a)"]
    serial = ndvm.calibrate_many(sources, {"x": x}, target=y, steps=40, restarts=8, threads=1)
    threaded = ndvm.calibrate_many(sources, {"x": x}, target=y, steps=40, restarts=8, threads=2)
    for s, t in zip(serial[:-1], threaded[:-1]):
        assert s.error is None
        np.testing.assert_array_equal(s.all_params, t.all_params)
        np.testing.assert_array_equal(s.all_losses, t.all_losses)
    assert serial[-1].error and "car" in serial[-1].error and serial[-1].error_type is ndvm.EvalError
    # restarts split across threads inside one calibration: same bits again
    one = ndvm.calibrate(sources[0], {"x": x}, target=y, steps=40, restarts=32, threads=1)
    two = ndvm.calibrate(sources[0], {"x": x}, target=y, steps=40, restarts=32, threads=2)
    np.testing.assert_array_equal(one.all_params, two.all_params)
    del rng


def test_lane_inputs_fit_one_series_per_lane():
    # three "cells", each with its own decay rate: one walk fits all three
    t = np.linspace(0, 5, 25)
    rates = np.array([0.2, 0.5, 0.9])
    ys = np.exp(-rates[:, None] * t[None, :])
    fit = ndvm.calibrate(
        "(param k 0.3 positive) (exp (- (* k t)))",
        lane_inputs={"t": np.tile(t, (3, 1))},
        lane_target=ys,
        optimizer="lbfgs",
        steps=80,
        restarts=3,
        init=np.full((3, 1), 0.3),
    )
    np.testing.assert_allclose(fit.all_params[:, 0], rates, rtol=1e-6)


def test_kalman_mle_matches_statsmodels():
    """A local-level model (random walk + noise): NDVM's native L-BFGS MLE against statsmodels'
    UnobservedComponents on the same data and initialization; log-likelihood within 1e-6 relative."""
    sm = pytest.importorskip("statsmodels.api")
    rng = np.random.default_rng(7)
    level = np.cumsum(rng.normal(scale=0.5, size=120))
    y = level + rng.normal(scale=1.0, size=120)
    # the same initialization for both: x1 ~ N(0, 1e6) (approximately diffuse); like statsmodels,
    # the first observation is a burn-in period that does not enter the likelihood
    src = """
    (param q 0.5 positive) (param r 0.5 positive)
    (let loop ((t 0) (x 0.0) (P 1e6) (ll 0.0))
      (if (= t (size y)) (- ll)
          (let* ((S (+ P r)) (e (- (ref y t) x)) (K (/ P S)))
            (loop (+ t 1) (+ x (* K e)) (+ (* (- 1 K) P) q)
                  (if (= t 0) ll (- ll (* 0.5 (+ (log (* 2 3.141592653589793 S)) (/ (* e e) S)))))))))
    """
    fit = ndvm.calibrate(src, {"y": y}, loss="value", optimizer="lbfgs", steps=200, restarts=1)
    mod = sm.tsa.UnobservedComponents(
        y, level="llevel", initialization="known", initial_state=[0.0], initial_state_cov=[[1e6]]
    )
    res = mod.fit(start_params=[0.5, 0.5], disp=False, method="lbfgs", maxiter=500, pgtol=1e-10)
    assert mod.loglikelihood_burn == 1
    llf_ndvm = -fit.loss
    assert llf_ndvm == pytest.approx(res.llf, rel=1e-6)
    assert fit.params["q"] == pytest.approx(res.params[1], rel=1e-3)
    assert fit.params["r"] == pytest.approx(res.params[0], rel=1e-3)
    # and the likelihood surfaces agree at statsmodels' optimum
    sig_eps, sig_eta = res.params  # (irregular variance, level variance)
    val = ndvm.compile(src).evaluate([[sig_eta, sig_eps]], {"y": y})[0]
    assert -val == pytest.approx(mod.loglike(res.params), rel=1e-9)


def test_torch_boundary_drives_ndvm():
    torch = pytest.importorskip("torch")
    import ndvm.torch as nt

    x = np.linspace(0, 1, 20)
    y = 2 * x + 1
    prog = ndvm.compile("(param a 0.0) (param b 0.0) (+ (* a x) b)")
    theta = torch.zeros((1, 2), dtype=torch.float64, requires_grad=True)
    opt = torch.optim.Adam([theta], lr=0.1)
    for _ in range(500):
        opt.zero_grad()
        loss = ((nt.apply(prog, theta, {"x": x})[0] - torch.from_numpy(y)) ** 2).mean()
        loss.backward()
        opt.step()
    np.testing.assert_allclose(theta.detach().numpy()[0], [2, 1], atol=1e-3)
    # scalar programs: gradient equals value_and_grad's; tensor inputs get gradients too
    sp = ndvm.compile("(param a 1.5) (* a (vsum (* x x)))")
    xt = torch.tensor(x, requires_grad=True)
    th = torch.tensor([[1.5]], dtype=torch.float64, requires_grad=True)
    out = nt.apply(sp, th, {"x": xt})
    out.sum().backward()
    np.testing.assert_allclose(th.grad.numpy(), [[np.sum(x * x)]])
    np.testing.assert_allclose(xt.grad.numpy(), 2 * 1.5 * x)


def test_bad_options_raise_clearly():
    with pytest.raises(ValueError, match="unknown loss"):
        ndvm.calibrate(LINEAR, {}, target=[1.0], loss="l1")
    with pytest.raises(ValueError, match="needs a target"):
        ndvm.calibrate(LINEAR, {"x1": [1.0], "x2": [1.0]})
    with pytest.raises(ndvm.EvalError, match="missing input 'x2'"):
        ndvm.calibrate(LINEAR, {"x1": [1.0]}, target=[1.0])


def test_lbfgs_does_not_jump_onto_a_saturated_plateau():
    """A long first step could push a positive parameter to softplus(-50) ~ 0, where the loss is
    lower than at the start but the gradient in unconstrained coordinates vanishes; steps are capped."""
    t = np.linspace(0, 6, 200)
    y = np.exp(-0.14 * t)
    fit = ndvm.calibrate(
        "(param k 0.5 positive) (exp (- (* k t)))", {"t": t}, target=y, optimizer="lbfgs", steps=100, restarts=1
    )
    assert fit.params["k"] == pytest.approx(0.14, rel=1e-6)


def test_grouped_lanes_stop_independently():
    # lanes that converge leave the batch; the others keep their own data (no copies, a lane map)
    rng = np.random.default_rng(1)
    t = np.tile(np.linspace(0, 6, 100), (40, 1))
    k = rng.uniform(0.1, 1.0, 40)
    y = np.exp(-k[:, None] * t)
    fit = ndvm.calibrate(
        "(param k 0.5 positive) (exp (- (* k t)))",
        lane_inputs={"t": t},
        lane_target=y,
        optimizer="lbfgs",
        steps=150,
        restarts=40,
        init=np.full((40, 1), 0.5),
        tol=1e-12,
    )
    np.testing.assert_allclose(fit.all_params[:, 0], k, rtol=1e-5)
    assert "converged" in fit.lane_status


def test_optimizers_and_their_defaults_are_the_runtimes_table():
    """ndvm.calibrate reads the optimizers' names and defaults from the native table (optim.h,
    NDVM_OPTIMIZERS) instead of restating them; each one runs, and runs within its default budget."""
    from ndvm import _native
    from ndvm.calibrate import OPTIMIZER_LR, OPTIMIZER_STEPS, OPTIMIZERS

    table = _native.OPTIMIZERS
    assert OPTIMIZERS == tuple(o.name for o in table) == ("adam", "lbfgs", "gd")
    assert OPTIMIZER_STEPS == {"adam": 200, "lbfgs": 1000, "gd": 200}
    assert OPTIMIZER_LR == {o.name: o.default_lr for o in table} and all(lr == 0.05 for lr in OPTIMIZER_LR.values())
    for o in table:
        fit = ndvm.calibrate("(param a 1.0) (square (- a 3.0))", loss="value", optimizer=o.name, restarts=2, gtol=0)
        assert fit.status == "ok" and abs(fit.params["a"] - 3.0) < 0.05, (o.name, fit.params)
        # the default budget is the table's: Adam and gd (no gradient rule, gtol=0) spend all of it
        assert fit.steps == o.default_steps if o.name != "lbfgs" else fit.steps <= o.default_steps, o.name
    with pytest.raises(ValueError, match=r"unknown optimizer 'newton'; expected one of adam, lbfgs, gd"):
        ndvm.calibrate("(param a 1.0) (* a a)", loss="value", optimizer="newton")
    program = ndvm.compile("(param a 1.0) (* a a)")
    spec = {"optimizer": "newton", "steps": 5, "lr": 0.1, "tol": 0.0, "patience": 5, "gtol": 0.0, "ftol": 0.0}
    spec.update({"xtol": 0.0, "loss": "value", "target": None, "lane_target": None})
    with pytest.raises(ValueError, match=r"unknown optimizer 'newton' \(expected one of adam, lbfgs, gd\)"):
        _native.calibrate(program._native, np.ones((1, 1)), {}, {}, spec, program.limits.native(), 1)


def test_a_scalar_result_predicts_every_target_value():
    """A constant model (the regression task's 'constant' reference) against a vector target: the
    loss is the loss of the broadcast prediction, its gradient exact; the fit is the mean."""
    rng = np.random.default_rng(4)
    t = rng.normal(3.0, 2.0, 50)
    prog = ndvm.compile("(param c 0.0)\nc")
    theta = np.array([[0.5], [3.0], [-1.0]])
    loss, grad = prog.loss_and_grad(theta, target=t, loss="mse")
    c = theta[:, 0]
    np.testing.assert_allclose(loss, [np.mean((ci - t) ** 2) for ci in c], rtol=1e-13)
    np.testing.assert_allclose(grad[:, 0], [2 * np.mean(ci - t) for ci in c], rtol=1e-13)
    nll, g_nll = prog.loss_and_grad(theta, target=t, loss="gaussian_nll")
    mse = np.array([np.mean((ci - t) ** 2) for ci in c])
    np.testing.assert_allclose(nll, 0.5 * np.log(2 * np.pi * mse) + 0.5, rtol=1e-13)
    np.testing.assert_allclose(g_nll[:, 0], [np.mean(ci - t) / m for ci, m in zip(c, mse)], rtol=1e-12)
    fit = ndvm.calibrate(prog, target=t)
    assert fit.params["c"] == pytest.approx(np.mean(t), rel=1e-8)
    # a vector of the wrong length is still an error that names both lengths
    with pytest.raises(ndvm.EvalError, match="the target has 50 values but the program returned 3"):
        ndvm.compile("(param c 0.0)\n(* c x)").loss_and_grad(theta, {"x": np.ones(3)}, target=t, loss="mse")
