"""The specialized numeric kernels (small matrix products over lanes) against references.

Small products (every dimension at most 3) run through kernels with the shapes known at compile
time; these tests pin what they must keep: numpy's values, exact gradients, a lane's bits equal to
its one-lane run, a zero cotangent that adds nothing against an infinite operand, and the
(matmul X X) case where both adjoints are one buffer.
"""

import itertools

import numpy as np
import pytest

import ndvm

DIMS = list(itertools.product((1, 2, 3), repeat=3))


def _matrix(prefix, rows, cols):
    names = [f"{prefix}{i}{j}" for i in range(rows) for j in range(cols)]
    body = " ".join("(vec " + " ".join(names[i * cols : (i + 1) * cols]) + ")" for i in range(rows))
    return names, f"(mat {body})"


@pytest.mark.parametrize("m,k,n", DIMS)
def test_small_matmul_values_gradients_and_lane_bits(m, k, n):
    a_names, a_expr = _matrix("a", m, k)
    b_names, b_expr = _matrix("b", k, n)
    names = a_names + b_names
    decls = " ".join(f"(param {p} 0.5)" for p in names)
    # weights make every output element's cotangent distinct
    w = np.arange(1.0, m * n + 1).reshape(m, n) / 7.0
    prog = ndvm.compile(f"{decls} (vsum (* W (matmul {a_expr} {b_expr})))")
    rng = np.random.default_rng(m * 100 + k * 10 + n)
    theta = rng.normal(size=(5, len(names)))
    inputs = {"W": w}
    values, grads = prog.value_and_grad(theta, inputs)
    for lane in range(theta.shape[0]):
        A = theta[lane, : m * k].reshape(m, k)
        B = theta[lane, m * k :].reshape(k, n)
        assert values[lane] == pytest.approx(np.sum(w * (A @ B)), rel=1e-13, abs=1e-13)
        np.testing.assert_allclose(grads[lane, : m * k], (w @ B.T).ravel(), rtol=1e-12, atol=1e-13)
        np.testing.assert_allclose(grads[lane, m * k :], (A.T @ w).ravel(), rtol=1e-12, atol=1e-13)
        one_v, one_g = prog.value_and_grad(theta[lane : lane + 1], inputs)
        assert one_v[0] == values[lane] and np.array_equal(one_g[0], grads[lane])  # bit for bit


def test_a_zero_cotangent_adds_nothing_against_an_infinite_operand():
    # element 1 of the product is infinite but unused: its cotangent is zero, the gradient finite
    prog = ndvm.compile("(param a 2.0) (ref (matvec (mat (vec a 0.0) (vec 0.0 (/ 1.0 0.0))) (vec 1.0 a)) 0)")
    for theta in ([[2.0]], [[2.0], [3.0], [-1.0]]):
        values, grads = prog.value_and_grad(np.array(theta))
        np.testing.assert_array_equal(values, np.array(theta)[:, 0])
        np.testing.assert_array_equal(grads, np.ones_like(np.array(theta)))


@pytest.mark.parametrize("lanes", [1, 4])
def test_matmul_of_a_matrix_with_itself(lanes):
    # d trace(X X) / dX = 2 X^T: both adjoints of the product are the same buffer
    prog = ndvm.compile(
        "(param a 1.0) (param b 2.0) (param c 3.0) (param d 4.0) "
        "(let ((X (mat (vec a b) (vec c d)))) (trace (matmul X X)))"
    )
    theta = np.arange(1.0, 1.0 + 4 * lanes).reshape(lanes, 4)
    values, grads = prog.value_and_grad(theta)
    for lane in range(lanes):
        X = theta[lane].reshape(2, 2)
        assert values[lane] == np.trace(X @ X)
        np.testing.assert_array_equal(grads[lane], (2 * X.T).ravel())
