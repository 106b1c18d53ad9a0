"""MutationProposer: determinism, consistency of declarations, each operator, and the measured
validity rate and diversity over 1,000 proposals (figures in docs/proposers.md).

Run the measurement with its figures printed:
    .venv/bin/python -m pytest -q -s tests/test_proposers_mutation.py -k validity_and_diversity
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Sequence
from pathlib import Path

import pytest
from conftest import shared_file

from proposers import MutationProposer, ProposalContext, ScoredProgram, TaskSpec, runtime_available, validate_source
from proposers.language import static_problems
from proposers.sexpr import count_nodes, read_all, symbols_in

needs_runtime = pytest.mark.skipif(not runtime_available(), reason="ndvm runtime not built")

KALMAN = """(param q 0.3 positive) (param r 0.3 positive)
(define I (eye 2))
(let loop ((t 0) (x (zeros 2)) (P I) (nll 0.0))
  (if (= t (rows ys)) nll
      (let* ((Pp (+ P (* q I))) (S (+ Pp (* r I))) (e (- (ref ys t) x)) (Si (inv S)) (K (matmul Pp Si)))
        (loop (+ t 1) (+ x (matvec K e)) (matmul (- I K) Pp) (+ nll (logdet S) (dot e (matvec Si e)))))))"""


def corpus(name: str, k: int) -> list[str]:
    """The first k programs of a corpus, with their parameters declared."""
    out = []
    for line in shared_file(f"ndvm_corpora/{name}").read_text().splitlines()[:k]:
        record = json.loads(line)
        out.append("".join(f"(param {p} 0.1)\n" for p in record["params"]) + record["src"])
    return out


class LazyCorpus(Sequence):
    """``corpus(name, k)``, read when a test first uses it: collection never touches the shared
    data, and a test that needs an absent corpus is skipped with the file's name."""

    def __init__(self, name: str, k: int):
        self.name, self.k, self._programs = name, k, None

    def _load(self) -> list[str]:
        if self._programs is None:
            self._programs = corpus(self.name, self.k)
        return self._programs

    def __getitem__(self, index):
        return self._load()[index]

    def __len__(self) -> int:
        return len(self._load())

    def __add__(self, other) -> list[str]:
        return list(self) + list(other)

    def __repr__(self) -> str:
        return f"LazyCorpus({self.name!r}, {self.k})"


CLOSED = LazyCorpus("cosearch_candidates_valid.jsonl", 10)
ITERATED = LazyCorpus("cosearch_rec_candidates_valid.jsonl", 10)


def task(inputs=("x",)) -> ProposalContext:
    return ProposalContext(
        TaskSpec("toy", "fit y(x)", {name: "vector [n]" for name in inputs}, "one prediction per point")
    )


def params_of(source: str) -> list[str]:
    return [str(f[1]) for f in read_all(source) if isinstance(f, list) and f[0] == "param"]


def test_deterministic_for_a_seed():
    a = MutationProposer(seed=7, seed_programs=CLOSED, validate=False).propose(task(), 50)
    b = MutationProposer(seed=7, seed_programs=CLOSED, validate=False).propose(task(), 50)
    c = MutationProposer(seed=8, seed_programs=CLOSED, validate=False).propose(task(), 50)
    assert [p.source for p in a] == [p.source for p in b]
    assert [p.origin.operator for p in a] == [p.origin.operator for p in b]
    assert [p.source for p in a] != [p.source for p in c]


@pytest.mark.parametrize("seeds,inputs", [(CLOSED, ("x",)), (ITERATED, ("x",)), ([KALMAN], ("ys",))])
def test_declarations_stay_consistent(seeds, inputs):
    proposer = MutationProposer(seed=1, seed_programs=seeds, validate=False)
    props = proposer.propose(task(inputs), 300)
    assert len(props) >= 250  # Kalman leaves few editable spots; the others give all 300
    for p in props:
        forms = read_all(p.source)
        # declared names used, no free names but the task's inputs, declarations first
        assert static_problems(forms, set(inputs)) == [], p.source
        kinds = [isinstance(f, list) and f[0] == "param" for f in forms]
        assert kinds == sorted(kinds, reverse=True), p.source
        assert 1 <= len(params_of(p.source)) <= proposer.max_params
        assert p.param_names == params_of(p.source)
        assert symbols_in(forms) & set(inputs), p.source  # still a model of the data


def test_loop_control_is_never_edited():
    props = MutationProposer(seed=3, seed_programs=[KALMAN], validate=False).propose(task(("ys",)), 200)
    assert props
    for p in props:
        assert "((t 0)" in p.source and "(= t (rows ys))" in p.source and "(loop (+ t 1)" in p.source
        assert "(eye 2)" in p.source and "(inv S)" in p.source
    control = re.compile(r"\(k [\d.]+\)|\(= k \d+\)|\(\+ k [\d.]+\)")
    parent_controls = {tuple(control.findall(src)) for src in ITERATED}
    for p in MutationProposer(seed=3, seed_programs=ITERATED, validate=False).propose(task(), 200):
        found = tuple(control.findall(p.source))
        assert len(found) == 3 and found in parent_controls, p.source


OPERATOR_CHECKS = {
    "subtree": lambda parent, child: child != parent,
    "crossover": lambda parent, child: child != parent,
    "swap": lambda parent, child: count_nodes(read_all(child)) == count_nodes(read_all(parent)),
    "constant": lambda parent, child: symbols_in(read_all(child)) == symbols_in(read_all(parent)),
    "insert_term": lambda parent, child: (
        len(params_of(child)) > len(params_of(parent)) or count_nodes(read_all(child)) > count_nodes(read_all(parent))
    ),
    "insert_param": lambda parent, child: len(params_of(child)) == len(params_of(parent)) + 1,
    "wrap": lambda parent, child: any(w in child for w in ("sigmoid", "softplus", "tanh", "exp", "abs")),
    "hoist": lambda parent, child: count_nodes(read_all(child)) < count_nodes(read_all(parent)),
}


@pytest.mark.parametrize("operator", sorted(OPERATOR_CHECKS))
def test_each_operator(operator):
    parent = "(param a 1.5)\n(param b 0.5)\n(param c 2.0)\n(+ (* a (exp (- (* b x)))) (* 0.5 (sin (* c x))))"
    # simplify=False: the raw operator (simplification would turn a wrapped lone parameter back into one)
    proposer = MutationProposer(
        seed=2,
        seed_programs=[parent, CLOSED[1]],
        weights={operator: 1.0},
        validate=False,
        dedup=operator != "constant",
        simplify=False,
    )
    props = proposer.propose(task(), 20)
    assert props and all(p.origin.operator == operator for p in props)
    by_source = {p: None for p in (parent, CLOSED[1])}
    for p in props:
        assert any(OPERATOR_CHECKS[operator](src, p.source) for src in by_source), (operator, p.source)


def test_grow_from_scratch_without_parents():
    props = MutationProposer(seed=0, validate=False).propose(task(("x", "temp")), 30)
    assert len(props) == 30 and all(p.origin.operator == "grow" for p in props)
    for p in props:
        assert static_problems(read_all(p.source), {"x", "temp"}) == []
        assert symbols_in(read_all(p.source)) & {"x", "temp"}


def test_unknown_operator_is_an_error():
    with pytest.raises(ValueError, match="unknown mutation operators"):
        MutationProposer(weights={"teleport": 1.0}, validate=False)


@needs_runtime
def test_parents_from_context_best_and_their_hashes():
    best = [ScoredProgram(src, score) for score, src in zip((0.9, 0.8, 0.7), CLOSED[:3])]
    context = task()
    context.best = best
    hashes = {validate_source(s.source).canonical_hash for s in best}
    props = MutationProposer(seed=4).propose(context, 100)
    assert len(props) == 100
    assert all(p.origin.parent_hashes and set(p.origin.parent_hashes) <= hashes for p in props)
    assert len({p.canonical_hash for p in props}) == 100
    assert not hashes & {p.canonical_hash for p in props}  # never a parent again


@needs_runtime
@pytest.mark.parametrize(
    "name,seeds,inputs",
    [
        ("closed-form", CLOSED, ("x",)),
        ("iterated-map", ITERATED, ("x",)),
        # one seed with few editable spots: most edits are duplicates, so it takes ~10 s
        # Known shortfall, found when CI began running the slow checks (issue 36): this seed yields
        # 906 of 1,000 proposals (10,147 of 11,112 edits are duplicates; 885 distinct hashes), under
        # the 950 asserted. Strict: it fails CI as soon as the generator reaches 950 again.
        pytest.param(
            "kalman",
            [KALMAN],
            ("ys",),
            marks=[
                pytest.mark.slow,
                pytest.mark.xfail(strict=True, reason="906 of 1,000 proposals from the one Kalman seed (< 950)"),
            ],
        ),
    ],
)
def test_validity_and_diversity(name, seeds, inputs):
    """The raw generator (no compile filter): share of 1,000 proposals that compile, that run on
    data at their declared initial values, that give finite values there, and the number of
    distinct canonical hashes. With validate=True (the default) every proposal compiles."""
    import numpy as np

    import ndvm

    rng = np.random.default_rng(0)
    data = {"x": np.linspace(0.1, 6.0, 64), "ys": rng.normal(size=(40, 2))}
    proposer = MutationProposer(seed=0, seed_programs=seeds, validate=False)
    started = time.perf_counter()
    props = proposer.propose(task(inputs), 1000)
    seconds = time.perf_counter() - started
    compiled, runs, finite, hashes = 0, 0, 0, set()
    for p in props:
        try:
            program = ndvm.compile(p.source)
        except ndvm.NDVMError:
            continue
        compiled += 1
        hashes.add(program.canonical_hash)
        try:
            values = program.evaluate(inputs={k: data[k] for k in inputs})
        except ndvm.NDVMError:
            continue
        runs += 1
        finite += bool(np.all(np.isfinite(values)))
    n = len(props)
    print(
        f"\n{name}: {n} proposals in {seconds:.2f} s; compile {compiled / n:.1%}, run {runs / n:.1%}, "
        f"finite {finite / n:.1%}; {len(hashes)} distinct canonical hashes; {proposer.stats}"
    )
    assert n >= 950
    assert compiled / n >= 0.90
    assert runs / n >= 0.90
    assert len(hashes) >= 0.85 * n


@needs_runtime
def test_validated_mode_is_all_valid_and_distinct():
    proposer = MutationProposer(seed=5, seed_programs=CLOSED + ITERATED)
    props = proposer.propose(task(), 300)
    assert len(props) == 300
    assert all(validate_source(p.source, {"x"}).ok for p in props)
    assert len({p.canonical_hash for p in props}) == 300


def test_dead_let_bindings_and_their_parameters_are_removed():
    from proposers.mutation import _prune_dead_bindings
    from proposers.sexpr import to_str

    (node,) = read_all(
        "(let* ((r (exp b)) (t (* c r)) (u 2.0)) (loop ((s 0.0) (k 0)) (if (= k 3) s (recur x (+ k 1)))))"
    )
    assert to_str(_prune_dead_bindings(node)) == "(loop ((s 0.0) (k 0)) (if (= k 3) s (recur x (+ k 1))))"
    (node,) = read_all("(let* ((r (exp b)) (t (* c r))) (* t x))")
    assert to_str(_prune_dead_bindings(node)) == "(let* ((r (exp b)) (t (* c r))) (* t x))"
    (node,) = read_all("(let ((r (exp b)) (t 1.0)) (* r x))")
    assert to_str(_prune_dead_bindings(node)) == "(let ((r (exp b))) (* r x))"
    # through a whole edit: a hoist that drops the only use of `target` drops c and a as well
    parent = (
        "(param a 0.1) (param b 0.1) (param c 0.1) (let* ((rate (exp (- 0.0 b))) (target (* c (sin (* a x)))))"
        " (loop ((s 0.0) (k 0)) (if (= k 10) s (recur (+ (* rate s) (* (- 1.0 rate) target)) (+ k 1)))))"
    )
    for p in MutationProposer(seed=0, seed_programs=[parent], validate=False).propose(task(), 100):
        assert static_problems(read_all(p.source), {"x"}) == []
        if "target" not in p.source:
            assert "(param c" not in p.source or "c" in symbols_in(read_all(p.source)[-1])


@needs_runtime
def test_wrapped_forecast_candidates_from_the_enso_task():
    """Tasks that wrap candidates (the forecast task appends its driver to definitions only):
    mutation keeps the required functions, and proposals compile once wrapped."""
    from datasets import load
    from datasets.tasks import make_task

    forecast = make_task(load("enso"))
    spec = TaskSpec(
        "enso",
        "ENSO one-step forecasting",
        {},
        forecast.contract_text(),
        seed_programs=forecast.seed_programs(),
        program_source=forecast.program_source,
    )
    proposer = MutationProposer(seed=0)
    props = proposer.propose(ProposalContext(spec), 100)
    assert len(props) == 100
    hashes = set()
    for p in props:
        result = validate_source(p.source, set(), program_source=forecast.program_source)
        assert result.ok, (p.source, result.failure)
        assert result.canonical_hash == p.canonical_hash  # the hash of the wrapped program, as the store has it
        hashes.add(p.canonical_hash)
        assert "ndvm-task" not in p.source
    assert len(hashes) == 100
    # a candidate breaking the contract is a "contract" failure, not an exception
    broken = validate_source("(param a 1.0)\n(define (init) a)", set(), program_source=forecast.program_source)
    assert not broken.ok and broken.failure.kind == "contract" and "predict" in broken.failure.message


@needs_runtime
def test_proposals_calibrate_on_the_corpus_task():
    """Mutation proposals are fit for calibration: on the corpus task (y = exp(-0.3 x) cos(2 x) +
    noise, 64 points), 200 proposals calibrate without a structural error, at least 95% of them
    to a finite loss."""
    import numpy as np

    import ndvm

    rng = np.random.default_rng(0)
    x = np.linspace(0.1, 6.0, 64)
    y = np.exp(-0.3 * x) * np.cos(2 * x) + 0.02 * rng.normal(size=64)
    props = MutationProposer(seed=0, seed_programs=CLOSED).propose(task(), 200)
    fits = ndvm.calibrate_many([p.source for p in props], {"x": x}, y, steps=100, restarts=8, threads=2)
    # no structural failure (type, shape, arity); a few may overflow (exp of a large value) everywhere
    errors = [f.error for f in fits if f.error]
    assert all("finite" in e for e in errors), errors
    finite = [f for f in fits if not f.error and np.isfinite(f.loss)]
    assert len(finite) >= 0.95 * len(fits)
    assert max(1 - f.loss / np.var(y) for f in finite) > 0.9


@needs_runtime
def test_mutations_of_the_conformance_suite_compile():
    """Robustness over the whole language: 1,000 raw mutations of the 300 conformance programs
    (every special form, closures, lists, vectors, tail calls) all compile."""
    import ndvm

    conformance = Path(__file__).with_name("conformance") / "expected.jsonl"
    seeds = [json.loads(line)["source"] for line in conformance.read_text().splitlines()]
    # raw: simplified, most mutations of these constant programs fold back into duplicates
    proposer = MutationProposer(seed=0, seed_programs=seeds, validate=False, min_params=0, simplify=False)
    props = proposer.propose(task(()), 1000)
    assert len(props) == 1000
    failures = []
    for p in props:
        try:
            ndvm.compile(p.source)
        except ndvm.NDVMError as exc:
            failures.append((exc.message, p.source))
    assert failures == []


@needs_runtime
def test_mutations_of_the_gradient_suite_compile_and_run():
    """The 100+ parameterised programs of the gradient suite (closures, lists, vectors, matrices,
    recursion, do loops) as seeds, 10 proposals each: all compile, and at least 97% evaluate on the
    case's inputs at the declared initial values (a mutated list element can make an assoc miss)."""
    import sys

    import ndvm

    sys.path.insert(0, str(Path(__file__).parent))
    from gradprogs.cases import CASES

    total = compiled = ran = 0
    for case in CASES:
        if case.lane_inputs:  # per-lane inputs need a matching population of parameter vectors
            continue
        seed_program = ndvm.compile(case.source)
        context = ProposalContext(TaskSpec("grad", "", {k: "" for k in seed_program.inputs}, ""))
        for p in MutationProposer(seed=0, seed_programs=[case.source], validate=False).propose(context, 10):
            total += 1
            try:
                program = ndvm.compile(p.source)
            except ndvm.NDVMError:
                continue
            compiled += 1
            try:
                program.evaluate(inputs=case.inputs or None)
            except ndvm.NDVMError:
                continue
            ran += 1
    assert total >= 1000
    assert compiled == total
    assert ran >= 0.97 * total, (ran, total)


def test_unary_operator_sets_come_from_the_primitive_table():
    """The wraps and swaps are the table's total, foldable one-argument numeric functions (one name
    each: logistic is sigmoid's synonym); new terms take the smooth ones (abs has a kink)."""
    from ndvm.language import PRIMITIVE_INFO
    from proposers.mutation import GEN_UNARY, SWAP_UNARY

    assert set(SWAP_UNARY) == {"sin", "cos", "tanh", "sigmoid", "softplus", "exp", "square", "abs"}
    assert set(GEN_UNARY) == set(SWAP_UNARY) - {"abs"}
    for name in SWAP_UNARY:
        p = PRIMITIVE_INFO[name]
        assert p.total and p.foldable and p.kind == "numeric" and p.arity.min == p.arity.max == 1, name
    assert PRIMITIVE_INFO["logistic"].synonym and "logistic" not in SWAP_UNARY
    assert not PRIMITIVE_INFO["log"].total and not PRIMITIVE_INFO["sqrt"].total and not PRIMITIVE_INFO["tan"].total


# ---------------------------------------------------------------------------- forecasters' state
def _enso_spec(seeds: list[str], observed_x=None):
    import dataclasses

    import datasets
    from datasets.tasks import make_task
    from flows.problem import task_spec

    task = make_task(datasets.load("enso"))
    spec = task_spec(task.dataset, task)
    spec = dataclasses.replace(spec, seed_programs=seeds)
    if observed_x is not None:
        spec = dataclasses.replace(spec, observed_x=observed_x)
    return task, spec


def _define(forms, name):
    return next(f for f in forms if isinstance(f, list) and f[0] == "define" and f[1][0] == name)


@needs_runtime
def test_mutation_grows_a_reference_parents_state_by_a_lag_the_calendar_and_a_damping():
    """Issue 31 part 1: from the AR(AIC) reference alone the mutation proposer reaches AR(p+1), a
    seasonal or cyclostationary AR reading the calendar through x, and a damped AR; each a valid
    forecaster of the task, and the lag child starts exactly at its parent's forecasts."""
    from proposers.mutation import STATE_TERM_WEIGHT

    probe_task, _ = _enso_spec([])
    (ar_name, ar_source) = probe_task.reference_programs()[0]
    task, spec = _enso_spec([ar_source])
    assert spec.state_space and spec.observed_x == [("month", 12)]
    proposer = MutationProposer(seed=0)
    out = proposer.propose(ProposalContext(spec), 120)
    # one parent: few distinct state edits (a lag, a damping, two calendar forms), each once
    assert proposer.stats.by_operator.get("state_term", 0) >= 3 and STATE_TERM_WEIGHT > 0
    parent_len = len(_define(read_all(ar_source), "init")[2]) - 1  # the AR's lags
    lag = calendar = damped = None
    for p in out:
        forms = read_all(p.source)
        init, update = _define(forms, "init")[2], _define(forms, "update")
        task.check_candidate(p.source)  # a valid forecaster of the task (the contract, the arity of update)
        if update[1] == ["update", "s", "y"] and isinstance(init, list) and len(init) - 1 == parent_len + 1:
            if update[2][-1] == ["list-ref", "s", parent_len - 1] and {"a1", "c"} <= symbols_in(forms):
                lag = lag or p
        if len(update[1]) == 4 and ["ref", "x", 0] in update[2] and "cos" in symbols_in(forms):
            calendar = calendar or p
        if "(between 0.0 1.0)" in p.source and "a1" in symbols_in(forms):
            damped = damped or p
    assert lag and calendar and damped, proposer.stats
    # the new lag's coefficient starts at 0: the child forecasts as its parent until calibrated
    program = task.compile(lag.source)
    child = task.restore_fit(lag.source, {q.name: q.init for q in program.params}, "lag")
    parent_program = task.compile(ar_source)
    parent = task.restore_fit(ar_source, {q.name: q.init for q in parent_program.params}, ar_name)
    assert task.score(child, "validation")["mean_rmse"] == pytest.approx(
        task.score(parent, "validation")["mean_rmse"], rel=1e-12
    )


@needs_runtime
def test_state_edits_add_a_covariate_and_wrap_a_scalar_state():
    import random

    from proposers.language import analyze
    from proposers.mutation import _Edit, _Parent
    from proposers.sexpr import to_source
    from proposers.state_edits import grow_state

    task, _ = _enso_spec([])
    programs = dict(task.reference_programs())
    ar = next(s for n, s in programs.items() if n.startswith("ar-aic"))
    damped = programs["damped-persistence-program"]

    def edit(source, variant, observed_x):
        forms = read_all(source)
        e = _Edit(_Parent(source, forms, analyze(forms), None, 1.0), random.Random(0), set())
        done = grow_state(e.forms, random.Random(0), observed_x, e.fresh_param, e.bounded_param, variant=variant)
        return done, (to_source(e.finish()) if done else None)

    # a covariate (SOI beside the calendar): x's second element, kept in the state, weighed in predict
    done, source = edit(ar, "covariate", [("month", 12), ("soi", None)])
    assert done.flat and "(define (update s y x) (list y (list-ref s 0) (ref x 1)))" in source
    assert "(* p1 (list-ref s 2))" in source
    # no covariate declared, no x at all: the variants that need them do not apply
    assert edit(ar, "covariate", [("month", 12)])[0] is None and edit(ar, "calendar", [])[0] is None
    # a scalar state (damped persistence) becomes (list old new): a lag of it is an AR(2) around mu
    done, source = edit(damped, "lag", [])
    assert not done.flat
    assert "(define (init) (list mu mu))" in source and "(define (update s y) (list y (car s)))" in source
    assert "(* phi (- (car s) mu))" in source and "(* p1 (cadr s))" in source
    # a program that is not a forecaster is left alone
    assert edit("(param a 1.0) (* a x)", "damp", [])[0] is None


def test_state_term_is_never_drawn_for_a_task_that_is_not_a_forecaster():
    spec = TaskSpec("toy", "y = a x", {"x": "vector"}, "a vector like x", seed_programs=["(param a 1.0) (* a x)"])
    proposer = MutationProposer(seed=0, validate=False)
    proposer.propose(ProposalContext(spec), 60)
    assert proposer.stats.produced > 0 and "state_term" not in proposer.stats.by_operator
