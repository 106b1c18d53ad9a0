"""The laws suite (pipeline_bench/laws.py, ``ndvm bench --suite laws``): its data follow the published
protocol, its recovery check tells a law up to constants from a fit, and the models of all three
methods are read back as sympy over the law's variables."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import sympy

import ndvm
from pipeline_bench import laws as suite

ROW = {  # I.12.2-like: F = q1 q2 / (4 pi epsilon r^2), the row format of FeynmanEquations.csv
    "Filename": "coulomb",
    "Output": "F",
    "Formula": "q1*q2/(4*pi*epsilon*r**2)",
    "# variables": "4",
    **{f"v{i}_name": n for i, n in enumerate(("q1", "q2", "epsilon", "r"), 1)},
    **{f"v{i}_low": "1" for i in range(1, 5)},
    **{f"v{i}_high": "5" for i in range(1, 5)},
}


@pytest.fixture(scope="module")
def law():
    return suite.Law(ROW)


def test_tables_sample_the_published_ranges_and_the_out_of_domain_test_lies_beyond(law):
    tables = law.tables(noise=0.01, seed=3)
    train, inside, outside = (tables[p] for p in ("train", "test_id", "test_ood"))
    assert len(train["F"]) == suite.TRAIN_ROWS and len(inside["F"]) == len(outside["F"]) == suite.TEST_ROWS
    for v in law.ranges:
        assert 1 <= min(train[v]) and max(train[v]) <= 5 and max(inside[v]) <= 5
        assert max(outside[v]) <= 5 + suite.OOD_WIDEN * 4
    beyond = np.column_stack([np.asarray(outside[v]) > 5 for v in law.ranges]).any(axis=1)
    assert beyond.all()  # every out-of-domain row outside the training box
    exact = law({v: np.asarray(train[v]) for v in law.ranges})
    noise = np.asarray(train["F"]) - exact
    rms = np.sqrt(np.mean(exact**2))
    assert 0.005 * rms < noise.std() < 0.02 * rms  # 1% of the target's root mean square
    np.testing.assert_array_equal(inside["F"], law({v: np.asarray(inside[v]) for v in law.ranges}))  # noise-free
    assert law.tables(0.01, 3)["train"]["F"] == train["F"]  # seeded


def test_recovery_means_the_law_up_to_constants_within_one_percent(law):
    q1, q2, eps, r = (law.symbols[v] for v in ("q1", "q2", "epsilon", "r"))
    assert suite.recovered(0.0796 * q1 * q2 / (eps * r**2), law.expr)[0]  # 1/(4 pi) = 0.0796
    assert suite.recovered(0.0796 * q1 * q2 / (eps * r**2.004), law.expr)[0]  # an exponent within 1%
    assert suite.recovered(0.0796 * q1 * q2 / (eps * r**2) + 0.3, law.expr)[0]  # a constant apart
    assert not suite.recovered(0.0796 * q1 * q2 / (eps * r**2.1), law.expr)[0]  # 5% off: a fit
    assert not suite.recovered(0.0796 * q1 * q2 / (eps * r**2) + 1e-3 * r, law.expr)[0]  # an extra term
    assert not suite.recovered(q1 * q2 / eps, law.expr)[0]


def test_a_row_whose_formula_reads_a_variable_without_a_range_is_refused():
    with pytest.raises(ValueError, match="no range for"):
        suite.Law({**ROW, "Formula": "q1*q2/(4*pi*epsilon*r**2*k)"})


def test_every_model_is_read_over_the_laws_variables(law):
    q1, q2, eps, r = (law.symbols[v] for v in ("q1", "q2", "epsilon", "r"))
    operon = suite.peer_expression("operon", "(0.0796 * ((X1 * X2) / (X3 * (X4 ^ 2))))", law)
    assert suite.recovered(operon, law.expr)[0]
    gplearn = suite.peer_expression("gplearn", "div(mul(X0, X1), mul(mul(X2, X3), mul(X3, 12.566)))", law)
    assert suite.recovered(gplearn, law.expr)[0]
    if not hasattr(ndvm, "compile"):
        pytest.skip("the ndvm runtime is not built")
    source = "(param c 1.0)(param k 2.0)(/ (* c q1 q2) (* epsilon (expt r k)))"
    expr = suite.ndvm_expression(source, {"c": 0.0796, "k": 2.001}, law)
    assert expr.free_symbols == {q1, q2, eps, r}
    assert suite.recovered(expr, law.expr)[0]


def test_the_feynman_file_gives_twenty_equations_every_fourth_row():
    data = Path(__file__).resolve().parents[2] / "shared" / "data"
    if not (data / "feynman" / "FeynmanEquations.csv").is_file():
        pytest.skip(f"needs {data / 'feynman' / 'FeynmanEquations.csv'} (the shared data)")
    equations, notes = suite.laws(data, suite.EVERY)
    assert len(equations) == 20 and not notes
    for law in equations:  # every law is finite on its own ranges and has its out-of-domain rows
        tables = law.tables(0.0, 0)
        assert np.isfinite(tables["train"][law.output_column]).all()
        assert len(tables["test_ood"][law.output_column]) == suite.TEST_ROWS
    assert isinstance(equations[0].expr, sympy.Expr)
    assert suite.laws(None, 4) == ([], ["laws suite skipped: feynman/FeynmanEquations.csv not under None"])
