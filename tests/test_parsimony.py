"""Complexity, the Pareto front and the recommended model (storage/parsimony.py), and the store column."""

import math

import numpy as np
import pytest

import ndvm
from storage import CandidateStore
from storage.parsimony import candidate_complexity, complexity, complexity_of_canonical, pareto_front


def test_complexity_counts_atoms_of_the_canonical_form():
    assert complexity("(param a 1.0) (param b 0.5) (+ a (* b x))") == 5
    # literal values, names and argument order do not matter; repeated uses count
    assert complexity("(param k 2.0) (param q 1.0) (+ (* x k) q)") == 5
    assert complexity("(param a 1.0) (* a a x)") == 4
    assert complexity("(param a 1.0) (let ((u (* a x))) (+ u u))") == 8  # let u * a x + u u
    assert complexity_of_canonical("(params (p0 positive) (p1 free)) (+ p0 (* p1 x))") == 5
    assert complexity("(param phi 0.9 (between -1 1)) (define (predict s) (* phi s))") == 7


def test_candidate_complexity_ignores_the_task_driver():
    from datasets.tasks.forecast import AR1_SOURCE

    wrapped = ndvm.compile(AR1_SOURCE + "\n(define (ndvm-task-x) (list 1 2 3 4 5 6 7 8 9))\n(ndvm-task-x)")
    assert candidate_complexity(AR1_SOURCE, wrapped, wrapped=True) == complexity(AR1_SOURCE)
    assert candidate_complexity("(param a 1.0) (+ a x)", ndvm.compile("(param a 1.0) (+ a x)")) == 3
    assert candidate_complexity("(+ a", None, wrapped=True) is None


def test_pareto_front_and_recommended_model():
    rows = [
        ("h1", 3, 1.00, None),
        ("h2", 5, 0.50, None),
        ("h3", 5, 0.60, None),
        ("h4", 7, 0.55, None),
        ("h5", 9, 0.30, None),
        ("h6", 15, 0.29, None),
        ("h7", 4, math.inf, None),
    ]
    front = pareto_front(rows)
    assert [(e.hash, e.complexity) for e in front] == [("h1", 3), ("h2", 5), ("h5", 9), ("h6", 15)]
    assert front[0].score == 0.0
    assert front[1].score == pytest.approx(math.log(2) / 2)
    assert front[2].score == pytest.approx((math.log(0.5) - math.log(0.3)) / 4)
    # within 10% of the best (0.29): h5 and h6; h5 drops log-loss far faster per unit complexity
    assert [e.hash for e in front if e.recommended] == ["h5"]
    # with no tolerance only the most accurate model is eligible
    assert [e.hash for e in pareto_front(rows, tolerance=0.0) if e.recommended] == ["h6"]
    # with a wide tolerance the big early drop wins
    assert [e.hash for e in pareto_front(rows, tolerance=10.0) if e.recommended] == ["h2"]
    assert pareto_front([]) == []
    with pytest.raises(ValueError, match="tolerance"):
        pareto_front(rows, tolerance=-1)


def test_store_records_complexity(tmp_path):
    with CandidateStore(tmp_path / "c.duckdb") as store:
        run = store.start_run("r", probe_inputs={"x": np.linspace(0.1, 3, 8)})
        new = store.add(["(param a 1.0) (param b 0.5) (+ a (* b x))", "(param a 1.0) (* a (exp x))"], run)
        got = store.complexities([c.hash for c in new])
        assert got == {new[0].hash: 5, new[1].hash: 4}
