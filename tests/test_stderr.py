"""fit.stderr: standard errors from the curvature of the loss, against statsmodels."""

import numpy as np
import pytest

import ndvm

sm = pytest.importorskip("statsmodels.api")


def test_ols_standard_errors_equal_statsmodels():
    rng = np.random.default_rng(0)
    x = rng.uniform(0, 5, 60)
    y = 1.5 + 0.7 * x + rng.normal(0, 0.5, 60)
    fit = ndvm.calibrate(
        "(param a 0.0) (param b 0.0) (+ a (* b x))", {"x": x}, target=y, optimizer="lbfgs", steps=500, restarts=4
    )
    ols = sm.OLS(y, sm.add_constant(x)).fit()
    assert [fit.params["a"], fit.params["b"]] == pytest.approx(list(ols.params), rel=1e-7)
    se = fit.stderr
    assert [se.values["a"], se.values["b"]] == pytest.approx(list(ols.bse), rel=1e-6)
    assert se.all_identifiable and se.note == ""
    # the covariance too, not only its diagonal
    np.testing.assert_allclose(se.cov, np.asarray(ols.cov_params()), rtol=1e-5)


NILE_SOURCE = """(param q-eps 1.0 positive) (param q-eta 0.1 positive)   ; variances in units of 10^4
(define s2e (* 10000.0 q-eps)) (define s2n (* 10000.0 q-eta))
(let loop ((t 0) (a 0.0) (P 1000000.0) (nll 0.0))
  (if (= t (size ys)) nll
      (let* ((F (+ P s2e)) (v (- (ref ys t) a)) (K (/ P F)))
        (loop (+ t 1) (+ a (* K v)) (+ (* P (- 1.0 K)) s2n)
              (if (< t 1) nll (+ nll (* 0.5 (+ 1.8378770664093453 (log F) (/ (* v v) F)))))))))"""


def test_nile_local_level_standard_errors_equal_statsmodels():
    """The local-level model of the Nile flow (the data ship with statsmodels): a Kalman filter
    written in the language, the same approximate-diffuse likelihood as statsmodels' UnobservedComponents,
    positive (softplus) parameters: the delta method must give statsmodels' observed-information errors."""
    nile = sm.datasets.nile.load_pandas().data["volume"].to_numpy(float)
    fit = ndvm.calibrate(NILE_SOURCE, {"ys": nile}, loss="value", optimizer="lbfgs", steps=2000, restarts=4)
    model = sm.tsa.UnobservedComponents(nile, "llevel")
    ours = np.array([fit.params["q-eps"], fit.params["q-eta"]]) * 1e4
    assert fit.loss == pytest.approx(-model.loglike(ours), rel=1e-12)
    # statsmodels' own optimizer, run tightly, reaches the same maximum likelihood
    ref = model.fit(disp=False, cov_type="approx", method="nm", maxiter=5000)
    np.testing.assert_allclose(ours, ref.params, rtol=1e-3)
    se = fit.stderr
    ours_se = np.array([se.values["q-eps"], se.values["q-eta"]]) * 1e4
    np.testing.assert_allclose(ours_se, ref.bse, rtol=1e-3)
    # at exactly the same point, statsmodels' numerical observed information agrees to 1e-5
    at_ours = model.filter(ours, cov_type="approx")
    np.testing.assert_allclose(ours_se, at_ours.bse, rtol=1e-5)
    assert se.all_identifiable


def test_constrained_parameter_delta_method():
    """A (between 0 2) slope: errors in natural units equal those of the same model unconstrained."""
    rng = np.random.default_rng(3)
    x = np.linspace(0, 4, 40)
    y = 0.5 + 0.8 * x + rng.normal(0, 0.3, 40)
    free = ndvm.calibrate("(param a 0.0) (param b 0.5) (+ a (* b x))", {"x": x}, target=y, optimizer="lbfgs", steps=500)
    bounded = ndvm.calibrate(
        "(param a 0.0) (param b 0.5 (between 0 2)) (+ a (* b x))", {"x": x}, target=y, optimizer="lbfgs", steps=500
    )
    assert bounded.params["b"] == pytest.approx(free.params["b"], rel=1e-6)
    assert bounded.stderr.values["b"] == pytest.approx(free.stderr.values["b"], rel=1e-4)
    assert bounded.stderr.values["a"] == pytest.approx(free.stderr.values["a"], rel=1e-4)


def test_unidentifiable_parameters_are_flagged():
    rng = np.random.default_rng(1)
    x = np.linspace(0, 3, 30)
    y = 2.0 * x + 1.0 + rng.normal(0, 0.1, 30)
    fit = ndvm.calibrate(
        "(param a 1.0) (param b 1.0) (param c 0.0) (+ c (* a b x))", {"x": x}, target=y, optimizer="lbfgs", steps=500
    )
    se = fit.stderr
    assert se.identifiable == {"a": False, "b": False, "c": True}
    assert np.isnan(se.values["a"]) and np.isnan(se.values["b"])
    assert np.isfinite(se.values["c"]) and "not identifiable" in se.note and "a, b" in se.note
    # a parameter the loss does not depend on at all
    fit = ndvm.calibrate("(param a 1.0) (param d 1.0) (+ (* a x) (* 0.0 d))", {"x": x}, target=y, steps=50)
    assert fit.stderr.identifiable["d"] is False


def test_stderr_errors_are_typed():
    x = np.linspace(0, 1, 10)
    fit = ndvm.calibrate("(param a 1.0) (* a x)", {"x": x}, target=x, steps=20)
    with pytest.raises(ndvm.EvalError, match="unknown loss"):
        ndvm.stderr(fit, loss="hinge")
    with pytest.raises(ndvm.EvalError, match="value_scale"):
        ndvm.stderr(fit, value_scale="bogus")
    lanes = ndvm.calibrate(
        "(param a 1.0) (* a x)",
        lane_inputs={"x": np.tile(x, (4, 1))},
        lane_target=np.tile(x, (4, 1)),
        restarts=4,
        steps=5,
    )
    with pytest.raises(ndvm.EvalError, match="lane_inputs"):
        _ = lanes.stderr  # the property raises
    many = ndvm.calibrate_many(["(param a 1.0) (* a x)"], {"x": x}, target=2 * x, steps=200, optimizer="lbfgs")
    assert many[0].stderr.values["a"] == pytest.approx(0.0, abs=1e-8)  # an exact fit: zero residual variance
