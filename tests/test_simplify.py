"""proposers.simplify: constant folding, lone-parameter functions, unused parameters; values kept."""

import math

import numpy as np

import ndvm
from proposers import MutationProposer, ProposalContext, TaskSpec
from proposers.sexpr import count_nodes, read_all, to_source
from proposers.simplify import map_params, simplify


def simp(source: str):
    result = simplify(read_all(source))
    return to_source(result.forms), result


def test_constant_folding_uses_the_runtime():
    text, r = simp("(param a 1.0) (+ (* 2.0 3.0) (* a (exp 0.0) x))")
    assert text == "(param a 1.0)\n(+ 6.0 (* a x))"  # (exp 0.0) -> 1.0, then the neutral 1.0 goes
    assert any("folded" in c for c in r.changes)
    # identities with an inexact neutral element
    assert simp("(param a 1.0) (* (+ x 0.0) a 1.0)")[0] == "(param a 1.0)\n(* x a)"
    assert simp("(param a 1.0) (- 0.0 (* a x))")[0] == "(param a 1.0)\n(- 0.0 (* a x))"  # a negation
    assert simp("(param a 1.0) (/ (- (* a x) 0.0) 1.0)")[0] == "(param a 1.0)\n(* a x)"
    # exact integer arithmetic is structure: left alone; non-finite results are not folded
    assert simp("(param a 1.0) (+ a (* 2 3) x)")[0] == "(param a 1.0)\n(+ a (* 2 3) x)"
    assert simp("(param a 1.0) (+ a (log 0.0) x)")[0] == "(param a 1.0)\n(+ a (log 0.0) x)"
    # a local definition named like a primitive is not folded
    assert simp("(param a 1.0) (define (exp z) (* 2.0 z)) (+ a (exp 1.0) x)")[1].changes == []


def test_function_of_a_lone_parameter_becomes_a_parameter():
    # the champion: (softplus (+ (sin phi) (* 3.0 s))) with s the state (here the input x):
    # (sin phi) holds every use of phi, so phi becomes a parameter in (-1, 1)
    text, r = simp("(param phi 0.5) (* (softplus (+ (sin phi) (* 3.0 x))) x)")
    assert text == "(param phi 0.479425538604203 (between -1 1))\n(* (softplus (+ phi (* 3.0 x))) x)"
    # with s a parameter too, the whole softplus is a positive constant: one parameter
    text, r = simp("(param phi 0.5) (param s 1.0) (* (softplus (+ (sin phi) (* 3.0 s))) x)")
    assert text == f"(param phi {math.log1p(math.exp(math.sin(0.5) + 3.0))!r} positive)\n(* phi x)"
    text, r = simp("(param k 0.7) (* x (exp (- k)))")
    assert text == f"(param k {math.exp(-0.7)!r} positive)\n(* x k)"
    # several parameters used nowhere else: one parameter (the champion of a short ENSO run had this)
    text, r = simp("(param phi 0.9) (param p1 0.1) (param p2 -0.5) (* phi (+ 0.5 (* p1 p2)) x)")
    assert text == "(param phi 0.9)\n(param p1 0.45)\n(* phi p1 x)"  # (+ 0.5 (* p1 p2)) is one number
    assert r.param_map == {"p1": read_all("(+ 0.5 (* p1 p2))")[0]}
    assert map_params(r, {"phi": 0.9, "p1": 0.4, "p2": -0.5}) == {"phi": 0.9, "p1": 0.3}
    # a parameter used elsewhere too is not rewritten
    assert simp("(param k 0.7) (+ (exp k) (* k x))")[1].changes == []
    # a parameter shadowed by a local binding is left alone
    assert simp("(param k 0.7) (+ (exp k) (let ((k x)) k))")[1].changes == []


def test_unused_parameters_are_dropped():
    text, r = simp("(param a 1.0) (param b 2.0) (* a x)")
    assert text == "(param a 1.0)\n(* a x)" and r.changes == ["dropped the unused parameter b"]


def _random_theta(program, rng):
    row = []
    for p in program.params:
        if p.constraint == "positive":
            row.append(rng.uniform(0.2, 2.0))
        elif isinstance(p.constraint, tuple):
            lo, hi = p.constraint[1], p.constraint[2]
            row.append(lo + (hi - lo) * rng.uniform(0.1, 0.9))
        else:
            row.append(p.init + rng.normal(0, 0.5))
    return dict(zip(program.param_names, row))


def _assert_same_values(old_src, result, inputs, rng, lanes=4):
    old = ndvm.compile(old_src)
    new = ndvm.compile(to_source(result.forms))
    for _ in range(lanes):
        theta = _random_theta(old, rng)
        try:
            before = np.asarray(old.evaluate([[theta[n] for n in old.param_names]], inputs), dtype=float)
        except ndvm.NDVMError:
            continue
        mapped = map_params(result, theta)
        after = np.asarray(new.evaluate([[mapped[n] for n in new.param_names]], inputs), dtype=float)
        np.testing.assert_allclose(
            after, before, rtol=1e-9, atol=1e-12, equal_nan=True, err_msg=f"{old_src}\n->\n{to_source(result.forms)}"
        )


def test_values_are_preserved_on_bloated_proposals():
    """300 raw mutation proposals (simplification off) of the co-search style closed forms:
    simplified, they compute the same values at random parameters (mapped through param_map)."""
    seeds = [
        "(param a 1.0) (param b 0.5 positive) (param c 0.1) (+ c (* a (exp (- 0.0 (* b x)))))",
        "(param a 1.0) (param b 0.05 positive) (param z 1.0 positive) (- a (* b (expt x z)))",
        "(param a 0.5) (param w 1.0) (* a (sin (* w x)))",
    ]
    spec = TaskSpec("toy", "fit y(x)", {"x": "vector [n]"}, "one prediction per point")
    props = MutationProposer(seed=2, seed_programs=seeds, simplify=False).propose(ProposalContext(spec), 300)
    rng = np.random.default_rng(0)
    x = {"x": np.linspace(0.1, 6.0, 16)}
    changed, before, after = 0, 0, 0
    for p in props:
        result = simplify(read_all(p.source))
        changed += result.changed
        before += sum(count_nodes(f) for f in read_all(p.source))
        after += sum(count_nodes(f) for f in result.forms)
        _assert_same_values(p.source, result, x, rng)
    assert changed >= 30 and after < before


def test_values_are_preserved_on_forecast_candidates():
    from datasets import load
    from datasets.tasks import make_task

    task = make_task(load("enso"))
    spec = TaskSpec(
        "enso", "", {}, task.contract_text(), seed_programs=task.seed_programs(), program_source=task.program_source
    )
    props = MutationProposer(seed=4, simplify=False).propose(ProposalContext(spec), 150)
    series = task.train_inputs()
    rng = np.random.default_rng(1)
    changed = 0
    for p in props:
        result = simplify(read_all(p.source))
        changed += result.changed
        old = task.program_source(p.source)
        wrapped = simplify([])  # the driver is not simplified: compare the wrapped programs
        wrapped.forms, wrapped.param_map = read_all(task.program_source(to_source(result.forms))), result.param_map
        _assert_same_values(old, wrapped, series, rng, lanes=2)
    assert changed >= 10


def test_mutation_proposer_simplifies_what_it_writes():
    seeds = ["(param a 1.0) (param k 0.5 positive) (* a (exp (- (* k x))))"]
    spec = TaskSpec("toy", "fit y(x)", {"x": "vector [n]"}, "one prediction per point")
    props = MutationProposer(seed=0, seed_programs=seeds).propose(ProposalContext(spec), 200)
    assert len(props) == 200
    for p in props:
        assert not simplify(read_all(p.source)).changed, p.source  # already simplified
