"""Per-lane stopping rules of the native optimizers: L-BFGS stops on the gradient norm, the relative
decrease or the step, well inside its budget and at the known optimum; a lane that stops costs no
more evaluations and does not change the others (every lane's bits and counts equal its one-lane
run); the reasons are the native enum; bad option values raise ValueError naming the option."""

import numpy as np
import pytest

import ndvm
from ndvm import _native
from ndvm.calibrate import CONVERGED_REASONS

QUADRATIC = (
    "(param a 0.0) (param b 0.0) (param c 0.0) (+ (* 3 (- a 1) (- a 1)) (* (- b -2) (- b -2)) (* 0.5 (- c 4) (- c 4)))"
)
ROSENBROCK = "(param x -1.2) (param y 1.0) (+ (* (- 1 x) (- 1 x)) (* 100 (- y (* x x)) (- y (* x x))))"
DECAY = "(param a 1.0) (param k 1.0 positive) (param c 0.0) (+ (* a (exp (- (* k t)))) c)"


@pytest.fixture(scope="module")
def decay_data():
    rng = np.random.default_rng(11)
    t = np.linspace(0, 4, 300)
    return {"t": t}, 2.0 * np.exp(-0.7 * t) + 0.1 + 0.01 * rng.normal(size=t.size)


def test_reasons_are_the_native_enum():
    assert {name: int(v) for name, v in _native.StopReason.__members__.items()} == {
        "budget": 0,
        "gradient": 1,
        "decrease": 2,
        "step": 3,
        "plateau": 4,
        "nonfinite": 5,
    }
    assert CONVERGED_REASONS == {"gradient", "decrease", "step", "plateau"}


def test_quadratic_converges_by_a_rule_far_inside_the_budget():
    fit = ndvm.calibrate(QUADRATIC, loss="value", optimizer="lbfgs", steps=1000, restarts=1)
    assert fit.converged and fit.reason in ("gradient", "decrease")
    assert fit.lane_evaluations[0] < 40  # of a budget of 1000
    assert fit.evaluations == fit.lane_evaluations[0] == fit.steps
    assert 0 < fit.lane_iterations[0] <= fit.lane_evaluations[0]
    np.testing.assert_allclose([fit.params["a"], fit.params["b"], fit.params["c"]], [1, -2, 4], atol=1e-6)
    assert fit.loss < 1e-12


def test_rosenbrock_converges_to_its_minimum():
    fit = ndvm.calibrate(ROSENBROCK, loss="value", optimizer="lbfgs", steps=2000, restarts=1)
    assert fit.converged and fit.reason in ("gradient", "decrease"), fit.lane_reason
    assert fit.lane_evaluations[0] < 150  # scipy's BFGS needs about 40 gradients from this start
    np.testing.assert_allclose([fit.params["x"], fit.params["y"]], [1, 1], atol=1e-6)


def test_least_squares_fit_converges_on_relative_decrease_at_any_loss_scale(decay_data):
    inputs, y = decay_data
    fits = [
        ndvm.calibrate(
            DECAY, inputs, target=y * scale, optimizer="lbfgs", restarts=1, init=np.array([[1.0 * scale, 1.0, 0.0]])
        )
        for scale in (1.0, 1e-3)
    ]
    for fit in fits:
        assert fit.converged and fit.lane_evaluations[0] < 200, (fit.lane_reason, fit.lane_evaluations)
    # the loss is 1e6 times smaller; the rule is relative, so the fit goes as far
    assert fits[1].params["k"] == pytest.approx(fits[0].params["k"], rel=1e-5)


def _multi_lane(decay_data, **options):
    inputs, y = decay_data
    init = np.array([[1.0, 1.0, 0.0], [2.0, 0.7, 0.1], [-3.0, 5.0, 2.0], [0.5, 0.2, -1.0], [1.5, 1.2, 0.05]])
    return init, ndvm.calibrate(DECAY, inputs, target=y, restarts=len(init), init=init, threads=1, **options)


@pytest.mark.parametrize("optimizer", ["lbfgs", "adam"])
def test_lanes_match_their_one_lane_runs_bit_for_bit(decay_data, optimizer):
    inputs, y = decay_data
    options = {"optimizer": optimizer, "steps": 400, "gtol": 1e-6}
    init, fit = _multi_lane(decay_data, **options)
    assert len(set(fit.lane_evaluations.tolist())) > 1  # lanes stopped at different times
    for r in range(len(init)):
        solo = ndvm.calibrate(DECAY, inputs, target=y, restarts=1, init=init[r : r + 1], threads=1, **options)
        np.testing.assert_array_equal(solo.all_params[0], fit.all_params[r])
        assert solo.all_losses[0] == fit.all_losses[r]
        assert solo.lane_reason[0] == fit.lane_reason[r]
        assert solo.lane_iterations[0] == fit.lane_iterations[r]
        assert solo.lane_evaluations[0] == fit.lane_evaluations[r]


def test_a_lane_that_converges_early_stops_costing_evaluations(decay_data):
    inputs, y = decay_data
    start = np.array([[2.0, 0.7, 0.1]])  # next to the optimum
    far = np.array([[-3.0, 5.0, 2.0]])
    fit = ndvm.calibrate(DECAY, inputs, target=y, optimizer="lbfgs", restarts=2, init=np.vstack([start, far]))
    assert fit.lane_converged == [True, True]
    assert fit.lane_evaluations[0] < fit.lane_evaluations[1]
    # the batch ran as long as its slowest lane; each lane counts only its own evaluations
    assert fit.evaluations == fit.lane_evaluations.max() == fit.steps
    assert np.isnan(fit.all_losses).sum() == 0


def test_budget_exhaustion_is_its_own_reason(decay_data):
    inputs, y = decay_data
    fit = ndvm.calibrate(DECAY, inputs, target=y, optimizer="lbfgs", steps=5, restarts=2)
    assert fit.lane_reason == ["budget", "budget"] and not fit.converged and fit.lane_converged == [False, False]
    assert fit.lane_evaluations.tolist() == [5, 5]
    adam = ndvm.calibrate(DECAY, inputs, target=y, optimizer="adam", steps=5, restarts=2)
    assert adam.lane_reason == ["budget", "budget"] and adam.lane_iterations.tolist() == [5, 5]
    assert adam.lane_evaluations.tolist() == [6, 6]  # the last update is scored once more


def test_rules_off_run_until_the_line_search_fails(decay_data):
    inputs, y = decay_data
    default = ndvm.calibrate(DECAY, inputs, target=y, optimizer="lbfgs", steps=300, restarts=1)
    off = ndvm.calibrate(DECAY, inputs, target=y, optimizer="lbfgs", steps=300, restarts=1, gtol=0, ftol=0, xtol=0)
    # with no rule, only a line search that can no longer decrease the loss (or the budget) stops the lane
    assert default.converged and off.reason in ("budget", "step")
    assert off.lane_evaluations[0] > default.lane_evaluations[0]
    assert off.loss <= default.loss


def test_gradient_rule_stops_adam(decay_data):
    inputs, y = decay_data
    loose = ndvm.calibrate(DECAY, inputs, target=y, optimizer="adam", steps=3000, lr=0.05, restarts=1, gtol=1e-3)
    assert loose.reason == "gradient" and loose.lane_evaluations[0] < 3000
    assert loose.lane_iterations[0] == loose.lane_evaluations[0] - 1  # the stopping point is not moved from


def test_plateau_rule_keeps_its_meaning(decay_data):
    inputs, y = decay_data
    fit = ndvm.calibrate(DECAY, inputs, target=y, optimizer="adam", steps=3000, restarts=1, tol=1e-6, patience=3)
    assert fit.reason == "plateau" and fit.lane_status == ["converged"]
    h = fit.history
    assert all(abs(h[i] - h[i - 1]) <= 1e-6 * (1 + abs(h[i])) for i in range(len(h) - 3, len(h)))


def test_nonfinite_lanes_report_their_reason():
    src = "(param a 1.0) (* (log a) x)"
    x = np.linspace(1, 2, 10)
    init = np.array([[1.0], [-1.0], [1.5]])
    for optimizer in ("lbfgs", "adam"):
        fit = ndvm.calibrate(src, {"x": x}, target=np.log(2.0) * x, optimizer=optimizer, restarts=3, init=init)
        assert fit.lane_reason[1] == "nonfinite" and fit.lane_status[1] == "nonfinite"
        assert fit.lane_evaluations[1] == 1 and fit.lane_converged[1] is False
        assert fit.params["a"] == pytest.approx(2.0, rel=1e-4)


def test_line_search_steps_back_from_a_nonfinite_trial():
    # sqrt of a negative number beyond a = 0: a long first step leaves the domain
    src = "(param a 4.0) (* (sqrt a) x)"
    x = np.linspace(1, 2, 10)
    fit = ndvm.calibrate(src, {"x": x}, target=0.5 * x, optimizer="lbfgs", lr=10.0, restarts=1)
    assert fit.converged and fit.params["a"] == pytest.approx(0.25, rel=1e-6)


@pytest.mark.parametrize(
    "option,value",
    [
        ("gtol", -1.0),
        ("ftol", float("nan")),
        ("xtol", float("inf")),
        ("tol", -1e-3),
        ("patience", 0),
        ("steps", 0),
        ("lr", 0.0),
        ("gtol", "small"),
        ("patience", 2.5),
    ],
)
def test_bad_option_values_name_the_option(option, value):
    with pytest.raises(ValueError, match=rf"^{option} must be"):
        ndvm.calibrate("(param a 1.0) (* a x)", {"x": [1.0, 2.0]}, target=[2.0, 4.0], **{option: value})
    with pytest.raises(ValueError, match=rf"^{option} must be"):
        ndvm.calibrate_many(["(param a 1.0) (* a x)"], {"x": [1.0, 2.0]}, target=[2.0, 4.0], **{option: value})


def test_calibrate_many_reports_per_lane_results_like_calibrate(decay_data):
    inputs, y = decay_data
    one = ndvm.calibrate(DECAY, inputs, target=y, optimizer="lbfgs", restarts=4, threads=1)
    (many,) = ndvm.calibrate_many([DECAY], inputs, target=y, optimizer="lbfgs", restarts=4, threads=1)
    assert many.lane_reason == one.lane_reason
    np.testing.assert_array_equal(many.lane_evaluations, one.lane_evaluations)
    np.testing.assert_array_equal(many.lane_iterations, one.lane_iterations)
    np.testing.assert_array_equal(many.all_params, one.all_params)


def test_threaded_lanes_keep_their_counts(decay_data):
    inputs, y = decay_data
    serial = ndvm.calibrate(DECAY, inputs, target=y, optimizer="lbfgs", restarts=32, threads=1)
    threaded = ndvm.calibrate(DECAY, inputs, target=y, optimizer="lbfgs", restarts=32, threads=2)
    assert serial.lane_reason == threaded.lane_reason
    np.testing.assert_array_equal(serial.lane_evaluations, threaded.lane_evaluations)
    np.testing.assert_array_equal(serial.all_params, threaded.all_params)


def test_history_of_a_lane_that_stopped_early_ends_at_its_last_walk(decay_data):
    # lane 0 starts next to the optimum and stops by a rule after a few walks; lane 1 starts far
    # off and runs the whole budget (every parameter searched: solved, a and c would let it converge
    # within the budget): the best lane's history has no NaN tail for lane 1's walks
    inputs, y = decay_data
    init = np.array([[2.0, 0.7, 0.1], [-30.0, 9.0, 25.0]])
    fit = ndvm.calibrate(
        DECAY, inputs, target=y, optimizer="lbfgs", restarts=2, init=init, steps=30, solve_linear=False
    )
    assert fit.best_restart == 0 and fit.lane_reason == ["decrease", "budget"]
    assert fit.lane_evaluations[0] < fit.lane_evaluations[1] == fit.steps == 30
    h = fit.history
    assert len(h) == fit.lane_evaluations[0] and np.isfinite(h).all()
    assert h[-1] == fit.loss  # a rule stopped it: its last walk is its best
