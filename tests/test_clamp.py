"""`clamp`, the primitive added through the one-line-one-function path of docs/runtime.md: its values
against numpy.clip (lanes, broadcasting, NaN and infinities, lo > hi), exactness, errors, and its
gradient by hand (the finite-difference, torch and lane-identity checks are a case in
tests/gradprogs/cases.py)."""

from __future__ import annotations

import numpy as np
import pytest

import ndvm

X = np.array([-np.inf, -2.0, -0.5, -0.0, 0.25, 0.5, 1.0, 3.0, np.inf, np.nan])


def test_values_are_numpy_clip_in_every_lane():
    program = ndvm.compile("(param lo 0.0) (param hi 1.0) (clamp x lo hi)")
    theta = np.array([[-0.5, 0.5], [0.2, 0.3], [0.0, 1.0], [1.0, 0.0], [-np.inf, 2.0]])  # lane 3: lo > hi
    values = program.evaluate(theta, {"x": X})
    assert values.shape == (len(theta), len(X))
    for lane, (lo, hi) in enumerate(theta):
        expected = np.clip(X, lo, hi)
        assert np.array_equal(values[lane], expected, equal_nan=True), (lane, values[lane], expected)


def test_bounds_broadcast_elementwise():
    value = ndvm.compile("(clamp x (vec 0.0 1.0 2.0) 1.5)").run(inputs={"x": [3.0, 0.0, 1.0]})
    assert np.array_equal(value, np.clip([3.0, 0.0, 1.0], [0.0, 1.0, 2.0], 1.5))


def test_exact_integers_stay_exact_unless_an_argument_is_inexact():
    assert ndvm.compile("(clamp 5 0 3)").run() == 3 and type(ndvm.compile("(clamp 5 0 3)").run()) is int
    assert ndvm.compile("(clamp -2 0 3)").run() == 0
    value = ndvm.compile("(clamp 2 0.5 3)").run()
    assert value == 2.0 and type(value) is float


def test_errors_name_clamp():
    with pytest.raises(ndvm.CheckError, match="arguments to 'clamp': expected 3, got 2"):
        ndvm.compile("(clamp 1.0 2.0)")
    with pytest.raises(ndvm.EvalError, match="'clamp'"):
        ndvm.compile("(clamp 'a 0.0 1.0)").run()


def test_the_gradient_goes_to_the_bound_that_holds():
    program = ndvm.compile("(param a 1.0) (param lo 0.0) (param hi 1.0) (vsum (clamp (* a x) lo hi))")
    x = np.array([-1.0, 0.25, 0.5, 2.0])  # below lo, inside twice, above hi
    values, grads = program.value_and_grad(np.array([[1.0, 0.0, 1.0], [1.0, 0.4, 0.45]]), {"x": x})
    assert values.tolist() == [0.0 + 0.25 + 0.5 + 1.0, 0.4 + 0.4 + 0.45 + 0.45]
    assert grads[0].tolist() == [0.25 + 0.5, 1.0, 1.0]  # d/da: the inside elements' x
    assert grads[1].tolist() == [0.0, 2.0, 2.0]  # lane 2: two clamped low, two clamped high
