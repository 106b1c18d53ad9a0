"""The Python API of the runtime: shapes, lanes, inputs, dtype, canonical forms, checks."""

import numpy as np
import pytest

import ndvm


def test_evaluate_shapes_and_broadcasting():
    prog = ndvm.compile("(param a 1.0) (param b 0.0) (+ (* a x) b)")
    x = np.array([0.0, 1.0, 2.0])
    out = prog.evaluate([[2.0, 1.0], [1.0, 0.0]], {"x": x})
    np.testing.assert_array_equal(out, [[1.0, 3.0, 5.0], [0.0, 1.0, 2.0]])
    assert prog.evaluate(None, {"x": 2.0}).shape == (1,)
    m = ndvm.compile("(param s 2.0) (* s (eye 2))").evaluate([[2.0], [3.0]])
    assert m.shape == (2, 2, 2) and m[1, 1, 1] == 3.0


def test_lane_inputs_give_each_lane_its_own_data():
    prog = ndvm.compile("(param k 1.0) (* k (vsum y))")
    ys = np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    out = prog.evaluate(np.ones((3, 1)), lane_inputs={"y": ys})
    np.testing.assert_array_equal(out, [3.0, 7.0, 11.0])


def test_missing_and_unknown_names_are_errors():
    prog = ndvm.compile("(param a 1.0) (* a x)")
    with pytest.raises(ndvm.EvalError, match="missing input 'x'") as info:
        prog.evaluate()
    assert info.value.line == 1 and info.value.column == 20
    with pytest.raises(ndvm.EvalError, match="unknown parameter 'b'"):
        prog.run(params={"b": 2.0}, inputs={"x": 1.0})
    with pytest.raises(ndvm.EvalError, match=r"theta must have shape \[B, 1\]"):
        prog.evaluate(np.ones((2, 3)), {"x": 1.0})


def test_a_define_may_not_hide_a_parameter():
    with pytest.raises(ndvm.CheckError, match="declared parameter"):
        ndvm.compile("(param a 1.0) (define a 2.0) a")
    # lexical shadowing inside a procedure is ordinary Scheme
    assert ndvm.compile("(param a 1.0) (define (f a) (* 2 a)) (f 3)").run() == 6


def test_float32_rounds_every_result():
    src = "(param a 0.1) (* a 3)"
    f64 = ndvm.compile(src).evaluate([[0.1]])[0]
    f32 = ndvm.compile(src, dtype="float32").evaluate([[0.1]])[0]
    assert f32 == float(np.float32(np.float32(0.1) * np.float32(3.0)))
    assert f32 != f64


def test_canonical_form_dedups_renamings_and_reorderings():
    forms = {
        ndvm.compile(s).canonical_hash
        for s in [
            "(param a 1) (param b 2) (+ a (* b x))",
            "(param p 5) (param q 6) (+ (* q x) p)",
            "(param b 1) (param a 2) (+ (* a x) b)",
        ]
    }
    assert len(forms) == 1
    different = ndvm.compile("(param a 1) (param b 2) (+ a (* b (exp x)))").canonical_hash
    assert different not in forms
    # loop bounds are structure: different counts are different programs
    assert (
        ndvm.compile("(loop ((s 1.0) (k 0)) (if (= k 8) s (recur (* 2 s) (+ k 1))))").canonical_hash
        != ndvm.compile("(loop ((s 1.0) (k 0)) (if (= k 9) s (recur (* 2 s) (+ k 1))))").canonical_hash
    )


def test_run_returns_python_values():
    value = ndvm.compile("(list 1 2.5 'sym #t '(1 . 2) (vec 1 2) (lambda (x) x))").run()
    assert value[:4] == [1, 2.5, "sym", True]
    assert isinstance(value[2], ndvm.Symbol)
    assert value[4] == ndvm.Pair(1, 2)
    np.testing.assert_array_equal(value[5], [1.0, 2.0])
    assert isinstance(value[6], ndvm.Procedure)
    assert ndvm.to_scheme(value[:5]) == "(1 2.5 sym #t (1 . 2))"


def test_divergent_lanes_match_one_lane_runs_bit_for_bit():
    prog = ndvm.compile("""
      (param a 0.5)
      (define (f x) (if (> x 0) (* x x) (- x)))
      (let loop ((x a) (k 0)) (if (or (> x 3) (= k 20)) (f x) (loop (* x 1.7) (+ k 1))))""")
    theta = np.linspace(-2, 2, 17)[:, None]
    values, grads = prog.value_and_grad(theta)
    for lane in range(17):
        v1, g1 = prog.value_and_grad(theta[lane : lane + 1])
        assert v1[0] == values[lane] and g1[0, 0] == grads[lane, 0]
