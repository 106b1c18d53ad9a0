"""proposers.simplify: constant folding, lone-parameter functions, unused parameters; values kept."""

import json
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
    # (+ 0.5 (* p1 p2)) is one number, and then phi and it are two factors that cannot be told apart
    assert text == "(param phi 0.405)\n(* phi x)"
    assert r.param_map == {"phi": read_all("(* phi (+ 0.5 (* p1 p2)))")[0]}
    assert map_params(r, {"phi": 0.9, "p1": 0.4, "p2": -0.5}) == {"phi": 0.9 * (0.5 + 0.4 * -0.5)}
    # a parameter used elsewhere too is not rewritten
    assert simp("(param k 0.7) (+ (exp k) (* k x))")[1].changes == []
    # a parameter shadowed by a local binding is left alone
    assert simp("(param k 0.7) (+ (exp k) (let ((k x)) k))")[1].changes == []


def test_identities_that_hold_wherever_the_value_is_finite():
    # a zero term of a sum goes with its parameters (the mutation engine's multiply-by-0.0 leaves them)
    assert simp("(param a 1.0) (param b 2.0) (+ (* a x) (* 0.0 b (exp x)))")[0] == "(param a 1.0)\n(* a x)"
    assert simp("(param a 1.0) (param b 2.0) (- (* a x) (/ 0.0 (+ b x)))")[0] == "(param a 1.0)\n(* a x)"
    assert simp("(param a 1.0) (+ (- (sin x) (sin x)) (* a x))")[0] == "(param a 1.0)\n(* a x)"
    # ... unless what stays no longer reads an input the term read (the value's shape could change)
    assert simp("(param a 1.0) (+ a (* 0.0 v))")[1].changes == []
    assert simp("(param a 1.0) (* 0.0 (+ a x))")[1].changes == []  # not a term of a sum: left alone
    assert simp("(param a 1.0) (+ a (* 0 x) x)")[1].changes == []  # exact 0 is structure
    # a factor u/u, exp of log and log of exp
    assert simp("(param a 1.0) (* a (/ (exp x) (exp x)) x)")[0] == "(param a 1.0)\n(* a x)"
    assert simp("(param a 1.0) (exp (log (* a x)))")[0] == "(param a 1.0)\n(* a x)"
    assert simp("(param a 1.0) (+ 1.0 (log (exp (* a x))))")[0] == "(param a 1.0)\n(+ 1.0 (* a x))"
    # a local function named like a primitive is not an identity
    assert simp("(param a 1.0) (define (exp z) (* 2.0 z)) (exp (log (* a x)))")[1].changes == []


def test_constants_that_cannot_be_told_apart_are_merged():
    text, r = simp("(param a 1.0) (param b 2.0) (param c 0.5) (+ a b (* c x))")
    assert text == "(param a 3.0)\n(param c 0.5)\n(+ a (* c x))"
    assert map_params(r, {"a": 0.25, "b": 0.5, "c": 2.0}) == {"a": 0.75, "c": 2.0}
    assert simp("(param a 1.0) (param b 2.0) (* a b x)")[0] == "(param a 2.0)\n(* a x)"
    # b read elsewhere too: the two can be told apart
    assert simp("(param a 1.0) (param b 2.0) (+ a b (* b x))")[1].changes == []


def test_zero_terms_of_mutation_proposals_go():
    """Proposals of the mutation engine with simplification off: every "times 0.0" term of a sum
    goes, with its parameters, and the values stay where they were finite."""
    seeds = ["(param a 1.0) (param b 0.5 positive) (param c 0.1) (+ c (* a (exp (- 0.0 (* b x)))) (* 0.3 x))"]
    spec = TaskSpec("toy", "fit y(x)", {"x": "vector [n]"}, "one prediction per point")
    props = MutationProposer(seed=5, seed_programs=seeds, simplify=False).propose(ProposalContext(spec), 400)
    rng = np.random.default_rng(2)
    x = {"x": np.linspace(0.1, 6.0, 16)}
    zero_terms = 0
    for p in props:
        result = simplify(read_all(p.source))
        zero_terms += sum(c.endswith(" became 0.0") for c in result.changes)
        assert not any(_is_zero_term_of_sum(f) for f in result.forms for f in _subforms(f)), (
            f"{p.source}\n->\n{to_source(result.forms)}"
        )
        _assert_same_values(p.source, result, x, rng, lanes=2)
    assert zero_terms >= 5


def _subforms(node):
    yield node
    if isinstance(node, list):
        for x in node:
            yield from _subforms(x)


def _is_zero_term_of_sum(node) -> bool:
    """(+ ... (* ... 0.0 ...) ...) whose zero term reads nothing the rest does not."""
    if not (isinstance(node, list) and node and node[0] == "+"):
        return False
    for term in node[1:]:
        if isinstance(term, list) and term and term[0] == "*" and 0.0 in [a for a in term[1:] if isinstance(a, float)]:
            return True
    return False


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
        # the rules keep every value that was finite (a dropped 0.0 * u term of an overflowing u, or
        # exp(log u) of a negative u, was not); the shape of the value is kept
        assert after.shape == before.shape, f"{old_src}\n->\n{to_source(result.forms)}"
        finite = np.isfinite(before)
        np.testing.assert_allclose(
            after[finite], before[finite], rtol=1e-9, atol=1e-12, err_msg=f"{old_src}\n->\n{to_source(result.forms)}"
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


def test_the_admit_stage_simplifies_every_proposers_proposals(tmp_path):
    """An LLM's or a replay's proposal is simplified before it is deduplicated and fitted: the store
    keeps the simplified program (its hash, parameters and complexity) and the text as proposed."""
    import logging

    from flows.feedback import RoundFeedback
    from flows.stages.admit import AdmitStage
    from proposers.base import Origin, Proposal
    from storage.library import ProgramLibrary
    from storage.store import CandidateStore

    store = CandidateStore(tmp_path / "store.duckdb")
    run = store.start_run("simplified", probe_inputs={"x": np.linspace(0.1, 3.0, 8)})
    queued = []
    admit = AdmitStage(
        store=store,
        run_id=run,
        program_source=None,
        library=ProgramLibrary(store, run, "fp", enabled=False),
        max_candidates=None,
        feedback=RoundFeedback(max_stale_rounds=0),
        enqueue=queued.extend,
        folder=tmp_path,
        accepted=0,
        unrecorded=0,
        log=logging.getLogger("test"),
    )
    origin = Origin(proposer="llm", model="mock")
    bloated = "(param a 1.0)\n(param b 2.0)\n(param c 0.5)\n(+ (* a x) (* 0.0 b (exp x)) c)"
    lean = "(param a 1.0)\n(param c 0.5)\n(+ (* a x) c)"
    counts = admit.deduplicate([Proposal(bloated, origin, param_names=["a", "b", "c"]), Proposal(lean, origin)])
    assert counts == {"proposals": 2, "new": 1}  # the lean one is the same program: a duplicate
    [item] = queued
    assert item.source == lean
    rows = store._con.sql(
        "SELECT source, outcome, simplified_from FROM proposals WHERE run_id = $1 ORDER BY id", params=[run]
    ).fetchall()
    assert rows == [(lean, "new", bloated), (lean, "duplicate_hash", None)]
    [(params, complexity)] = store._con.sql("SELECT param_names, complexity FROM candidates").fetchall()
    assert json.loads(params) == ["a", "c"]
    from storage.parsimony import candidate_complexity

    assert complexity == candidate_complexity(lean, ndvm.compile(lean), False)
    assert complexity < candidate_complexity(bloated, ndvm.compile(bloated), False)
    store.close()


def test_only_a_proposer_that_simplifies_itself_skips_the_admit_stages_simplifier():
    from proposers.llm import LLMProposer
    from proposers.replay import ReplayProposer

    assert MutationProposer(seed=0).traits.simplifies
    assert not MutationProposer(seed=0, simplify=False).traits.simplifies
    assert not MutationProposer.traits.simplifies  # the class's own traits are not changed
    assert not ReplayProposer.traits.simplifies and not LLMProposer.traits.simplifies
