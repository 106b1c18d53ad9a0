"""storage.formula: programs rendered as sympy formulas with their fitted values."""

import numpy as np
import pytest
import sympy

import ndvm
from datasets.tasks.forecast import AR2_SOURCE, KALMAN_AR1_SOURCE
from proposers import MutationProposer, ProposalContext, TaskSpec
from storage.formula import render


def test_closed_form_text_latex_and_symbolic():
    f = render("(param a 1.0) (param k 0.5 positive) (* a (exp (- (* k x))))", {"a": 2.3456789, "k": 0.1234567})
    assert f.ok
    assert f.text == "y = 2.346*exp(-0.1235*x)"
    assert f.latex == r"y = 2.346 e^{- 0.1235 x}"
    assert f.symbolic == "y = a*exp(-k*x)"
    # let bindings and helper definitions are substituted; conditionals become piecewise
    g = render("(param a 1.0) (define (sq z) (* z z)) (let* ((u (* a x)) (v (sq u))) (if (< x 2.0) v u))")
    assert g.ok and g.symbolic == "y = Piecewise((a**2*x**2, x < 2.0), (a*x, True))"


def test_forecast_candidate_is_three_formulas():
    f = render(AR2_SOURCE, {"a1": 0.91234, "a2": -0.2})
    assert f.ok
    assert (
        f.text == "state s = (s_0, s_1); init = (0.0, 0.0); predict(s) = 0.9123*s_0 - 0.2*s_1; update(s, y) = (y, s_0)"
    )
    assert r"\hat y(s) &= 0.9123 s_{0} - 0.2 s_{1}" in f.latex
    assert render(KALMAN_AR1_SOURCE, {"phi": 0.9, "q": 0.1, "r": 0.05}).ok


@pytest.mark.parametrize(
    "source,why",
    [
        ("(param a 1.0) (loop ((i 0) (s 0.0)) (if (= i 3) s (recur (+ i 1) (+ s a x))))", "a loop"),
        ("(param a 1.0) (define (f n) (if (< n 1) 0.0 (+ a (f (- n 1))))) (f x)", "recursion"),
        ("(param a 1.0) (let walk ((i 0)) (if (= i 2) a (walk (+ i 1))))", "named let"),
        ("(param a 1.0) (matvec (eye 2) (vec a x))", "the primitive eye"),
        ("(param a 1.0) (+ a", "ParseError"),
    ],
)
def test_unrenderable_programs_say_why(source, why):
    f = render(source, {"a": 1.0})
    assert not f.ok and f.text == "" and why in f.reason and f.reason.startswith("not rendered as a formula")


def test_formula_values_equal_the_program():
    """200 mutation proposals of closed forms: the formula (fitted values substituted, unrounded)
    evaluates to what ndvm computes for the program."""
    seeds = [
        "(param a 1.0) (param b 0.5 positive) (param c 0.1) (+ c (* a (exp (- 0.0 (* b x)))))",
        "(param a 1.0) (param w 1.0) (* a (sin (* w x)))",
    ]
    spec = TaskSpec("toy", "", {"x": "vector [n]"}, "")
    x = np.linspace(0.1, 3.0, 7)
    rng = np.random.default_rng(0)
    checked = 0
    for p in MutationProposer(seed=1, seed_programs=seeds).propose(ProposalContext(spec), 200):
        program = ndvm.compile(p.source)
        params = {n: float(rng.uniform(0.3, 1.5)) for n in program.param_names}
        values = np.asarray(program.evaluate([[params[n] for n in program.param_names]], {"x": x}), float)[0]
        f = render(p.source, params, digits=17)
        assert f.ok, (p.source, f.reason)
        expr = sympy.sympify(
            f.symbolic[4:],
            locals={n.replace("-", "_"): sympy.Symbol(n.replace("-", "_"), real=True) for n in list(params) + ["x"]},
        )
        expr = expr.subs({sympy.Symbol(n.replace("-", "_"), real=True): v for n, v in params.items()})
        fn = sympy.lambdify(sympy.Symbol("x", real=True), expr, "numpy")
        got = np.broadcast_to(np.asarray(fn(x), dtype=float), x.shape)
        np.testing.assert_allclose(got, np.broadcast_to(values, x.shape), rtol=1e-9, atol=1e-12, err_msg=p.source)
        checked += 1
    assert checked == 200
