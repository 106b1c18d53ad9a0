"""Niches (proposers/niches.py): the descriptor of known programs, selection across niches (the
best always in, one family cannot crowd the parents), determinism by seed, the mutation proposer's
niche-aware parent choice, and the LLM prompt's parents in a real discover run."""

from __future__ import annotations

import json
from collections import Counter

import pytest
from test_flows_support import FakeOpenAI

from proposers import (
    MutationProposer,
    ProposalContext,
    ScoredProgram,
    TaskSpec,
    runtime_available,
)
from proposers.niches import (
    COMPLEXITY_EDGES,
    Niche,
    NicheArchive,
    NicheError,
    complexity_bin,
    describe,
    describe_canonical,
    rank_weights,
    store_programs,
)

needs_runtime = pytest.mark.skipif(not runtime_available(), reason="ndvm runtime not built")

AR1 = """(param phi 0.9 (between -1 1))
(define (init) 0.0)
(define (predict s) (* phi s))
(define (update s y) y)"""
KALMAN_AR1 = """(param phi 0.9 (between -1 1)) (param q 0.1 positive) (param r 0.05 positive)
(define (init) (list 0.0 1.0))
(define (predict s) (* phi (car s)))
(define (update s y)
  (let* ((m (* phi (car s))) (p (+ (* phi phi (cadr s)) q)) (k (/ p (+ p r))))
    (list (+ m (* k (- y m))) (* (- 1.0 k) p))))"""
SEASONAL_AR1 = """(param phi 0.9 (between -1 1)) (param amp 0.05) (param phase 0.0)
(define (init) (list 0.0 0))
(define (rho s) (- phi (* amp (cos (+ phase (* 0.5235987755982988 (cadr s)))))))
(define (predict s) (* (rho s) (car s)))
(define (update s y) (list y (+ (cadr s) 1)))"""
LINEAR_STATE = """(param a 0.5)
(define (init) (vec 0.0 0.0))
(define (predict s) (dot (vec a 1.0) s))
(define (update s y) (matvec (mat (vec a 0.0) (vec 1.0 0.0)) s))"""


# ---------------------------------------------------------------------------- the descriptor
@needs_runtime
@pytest.mark.parametrize(
    "source,label",
    [
        (AR1, "c2:plain"),
        (KALMAN_AR1, "c3:state"),
        (SEASONAL_AR1, "c3:state+trig"),
        (LINEAR_STATE, "c2:state+linalg"),
        ("(param a 1.0) (param b 0.5) (+ a (* b (exp (- x))))", "c0:exp_log"),
        ("(param a 1.0) (* a (tanh x))", "c0:saturating"),
        ("(param a 1.0) (if (< a 0.0) x (* a x))", "c0:conditional"),
        (
            "(param a 0.5) (define (f n acc) (if (<= n 0) acc (f (- n 1) (* a acc)))) (f 3 x)",
            "c2:recursion+conditional",
        ),
        ("(param a 0.5) (let lp ((i 0) (acc x)) (if (< i 3) (lp (+ i 1) (* a acc)) acc))", "c2:recursion+conditional"),
        ("(param a 0.5) (loop ((i 0) (acc x)) (if (< i 3) (recur (+ i 1) (* a acc)) acc))", "c2:recursion+conditional"),
    ],
)
def test_descriptor_of_known_programs(source, label):
    assert describe(source).label() == label


@needs_runtime
def test_a_helper_call_is_not_recursion_and_renaming_does_not_change_the_niche():
    # rho is called by predict, not by itself: no recursion
    assert "recursion" not in describe(SEASONAL_AR1).features
    renamed = SEASONAL_AR1.replace("rho", "month_factor").replace("phase", "shift")
    assert describe(renamed) == describe(SEASONAL_AR1)
    # a local named like a primitive is renamed by the canonical form: `cos` here is a variable
    assert describe("(param a 1.0) (let ((cos (* a x))) (+ cos 1.0))").features == ()


def test_complexity_bins_and_canonical_descriptor():
    assert [complexity_bin(c) for c in (0, 8, 9, 16, 17, 32, 33, 64, 65, 1000)] == [0, 0, 1, 1, 2, 2, 3, 3, 4, 4]
    assert len(COMPLEXITY_EDGES) == 4
    with pytest.raises(ValueError, match="complexity must be >= 0"):
        complexity_bin(-1)
    # from a canonical form directly (no compiler): 7 atoms outside the header
    assert describe_canonical("(params (p0 free)) (+ (* (sin x) p0) p0)") == Niche(0, ("trig",))


@needs_runtime
def test_a_candidate_that_does_not_compile_alone_is_a_clear_error():
    with pytest.raises(NicheError, match="does not compile alone"):
        describe("(param a 1.0) (+ a (* 2 x)")
    # the archive files such candidates in one cell of their own instead of failing the search
    assert NicheArchive().niche_of("(param a 1.0) (+ a (* 2 x)").label() == "c?:plain"


# ---------------------------------------------------------------------------- selection
FAMILIES = {  # feature set -> a curve program body using it
    "plain": "(* a x)",
    "trig": "(* a (sin x))",
    "exp_log": "(* a (exp x))",
    "saturating": "(* a (tanh x))",
    "conditional": "(* a (abs x))",
    "trig+exp_log": "(* a (sin (exp x)))",
    "trig+saturating": "(* a (sin (tanh x)))",
    "exp_log+saturating": "(* a (exp (tanh x)))",
}


def ranked_programs() -> list[ScoredProgram]:
    """Rank order: six near-copies of the best family first, then one program per other family."""
    sources = [
        f"(param a 1.0) (param b 0.5) (+ (* a x) (* b {t}))"  # all in c1:plain
        for t in ("(* x x)", "(* x x x)", "(* 2.0 x)", "(* x 3.0 x)", "(/ x 2.0)", "(+ x 1.0)")
    ]
    sources += [f"(param a 1.0) (param b 0.5) (+ {body} (* b x))" for name, body in FAMILIES.items() if name != "plain"]
    return [ScoredProgram(src, 0.1 * (i + 1), canonical_hash=f"h{i}") for i, src in enumerate(sources)]


@needs_runtime
def test_selection_always_includes_the_best_and_spreads_across_niches():
    programs = ranked_programs()
    archive = NicheArchive(seed=3)
    assert len(archive.cells(programs)) == 8  # the six near-copies share one niche
    for _ in range(20):
        parents = archive.select(programs, 5)
        assert parents[0] is programs[0]  # the best, first
        niches = [archive.niche_of(p.source, p.canonical_hash) for p in parents]
        assert len(set(niches)) == 5  # one per niche: no near-copy of the best
        assert [programs.index(p) for p in parents] == sorted(programs.index(p) for p in parents)  # rank order
    # the top five by score alone would be five copies of one family
    assert len({archive.niche_of(p.source, p.canonical_hash) for p in programs[:5]}) == 1


@needs_runtime
def test_each_niche_gives_its_best_member_and_fewer_niches_than_wanted_fill_in_turn():
    programs = ranked_programs()[:7]  # six near-copies (one niche) and one other family
    archive = NicheArchive(seed=0)
    parents = archive.select(programs, 4)
    # both elites, then the next member of each niche in turn: the second and third near-copies
    assert parents == [programs[0], programs[1], programs[2], programs[6]]
    assert archive.select(programs, 100) == programs  # never more than there are
    assert archive.select([], 5) == []
    with pytest.raises(ValueError, match="k .* must be >= 1"):
        archive.select(programs, 0)
    with pytest.raises(ValueError, match="explore must be between 0 and 1"):
        archive.select(programs, 3, explore=1.5)


@needs_runtime
def test_selection_is_deterministic_by_seed():
    programs = ranked_programs()

    def draws(seed):
        archive = NicheArchive(seed=seed)
        return [tuple(p.canonical_hash for p in archive.select(programs, 3, explore=0.3)) for _ in range(12)]

    assert draws(7) == draws(7)
    assert draws(7) != draws(8)
    assert len(set(draws(7))) > 1  # some randomness across calls


@needs_runtime
def test_rank_pressure_without_exploration_and_less_visited_niches_with_it():
    programs = ranked_programs()
    exploit, explore = NicheArchive(seed=1), NicheArchive(seed=1)
    for _ in range(140):  # about 20 draws per other niche
        exploit.select(programs, 2, explore=0.0)
        explore.select(programs, 2, explore=1.0)
    best = exploit.niche_of(programs[0].source, programs[0].canonical_hash)
    second = exploit.niche_of(programs[6].source, programs[6].canonical_hash)  # the elite ranked second
    last = exploit.niche_of(programs[-1].source, programs[-1].canonical_hash)
    assert exploit.visits[best] == explore.visits[best] == 140  # the best, every time
    assert exploit.visits[second] > 2 * exploit.visits[last]  # rank pressure (1/2 vs 1/8)
    # explore=1: the other seven niches are drawn about evenly, whatever their rank
    others = [v for n, v in explore.visits.items() if n != best]
    assert len(others) == 7 and max(others) < 2 * min(others), others


def test_rank_weights_share_a_niche_s_weight_among_its_members():
    a, b, c = Niche(1, ()), Niche(1, ("trig",)), Niche(2, ("state",))
    assert rank_weights([a, a, a, b, c]) == pytest.approx([1 / 3, 1 / 3, 1 / 3, 1 / 2, 1 / 3])
    assert rank_weights([a, b, c]) == pytest.approx([1.0, 1 / 2, 1 / 3])  # one per niche: as before, by rank


# ---------------------------------------------------------------------------- the mutation proposer
def _task() -> ProposalContext:
    return ProposalContext(
        TaskSpec(
            dataset="toy", description="y from x", inputs={"x": "vector"}, contract="one prediction per point of x"
        )
    )


@needs_runtime
def test_mutation_parent_choice_uses_niches():
    programs = ranked_programs()[:6] + [ranked_programs()[7]]  # six near-copies of the best, one exp family
    context = _task()
    context.best = programs
    proposer = MutationProposer(seed=2)
    parents = proposer._parents(context)
    weights = {p.source: p.weight for p in parents}
    copies = [weights[p.source] for p in programs[:6]]
    assert copies == pytest.approx([1 / 6] * 6)  # one niche: the weight 1 shared
    assert weights[programs[6].source] == pytest.approx(1 / 2)  # the second niche: 1/2, not 1/7
    # and the proposals follow: the other family is a parent of about a third of them (was 1/7 of
    # the weight by program rank); crossover may use both
    other = proposer.niches.niche_of(programs[6].source)
    props = proposer.propose(context, 90)
    by_hash = {p.canonical_hash: p for p in programs}
    first_parent = Counter()
    for prop in props:
        parent = by_hash.get(prop.origin.parent_hashes[0]) if prop.origin.parent_hashes else None
        if parent is not None:
            first_parent[proposer.niches.niche_of(parent.source) == other] += 1
    share = first_parent[True] / sum(first_parent.values())
    assert 0.2 < share < 0.5, share


# ---------------------------------------------------------------------------- the store and the prompt
@needs_runtime
def test_prompt_parents_span_several_niches_from_the_store(tmp_path):
    """A store holding several families, the best family with many near-copies: the context built
    as the discover flow builds it (store_programs + select) shows the best and several niches."""
    from proposers.llm import build_messages
    from storage import CandidateStore, EvaluationResult

    programs = ranked_programs()
    with CandidateStore(tmp_path / "candidates.duckdb") as store:
        store.start_run("niches", dataset="toy", task="curve", metric="rmse")
        added = {c.source: c.hash for c in store.add([p.source for p in programs], "niches")}
        store.record(
            [
                EvaluationResult(
                    candidate=added[p.source],
                    run_id="niches",
                    dataset="toy",
                    task="curve",
                    split="validation",
                    parameters={"a": 1.0, "b": 0.5},
                    train_metrics={"mse": 1.0},
                    heldout_metrics={"rmse": p.score},
                    seconds=0.01,
                    status="ok",
                )
                for p in programs
            ]
        )
        ranked = store_programs(store, "niches")
    assert [p.source for p in ranked] == [p.source for p in programs]  # validation rank order
    archive = NicheArchive(seed=0)
    context = _task()
    context.best = archive.select(ranked, 5)
    prompt = json.dumps(build_messages(context, 2))
    shown = [p for p in programs if json.dumps(p.source.strip())[1:-1] in prompt]
    assert programs[0] in shown
    assert len({archive.niche_of(p.source) for p in shown}) == 5


@needs_runtime
@pytest.mark.usefixtures("prefect_api")
def test_llm_prompts_in_a_discover_run_draw_parents_across_niches(tmp_path, monkeypatch):
    """End to end: a local server answering eight ENSO programs of five niches (three near-copies
    of plain AR(1) among them). Once they are calibrated (serial run), the programs the flow passes
    to the LLM proposer are the best and one per niche, and the prompt shows them."""
    from flows.discover import discover
    from proposers.llm import LLMProposer
    from storage import CandidateStore

    passed: list[list[str]] = []
    original = LLMProposer.apropose

    async def recording(self, context, n):
        passed.append([p.source for p in context.best])
        return await original(self, context, n)

    monkeypatch.setattr(LLMProposer, "apropose", recording)
    monkeypatch.setenv("NDVM_TEST_FAKE_KEY", "sk-fake-0123456789abcdef")
    fake = FakeOpenAI(delay=0.05)
    try:
        discover(
            task="enso",
            model="openai/fake-model",
            api_base=fake.api_base,
            api_key_env="NDVM_TEST_FAKE_KEY",
            budget={"minutes": 1.0},
            concurrency=1,
            per_request=2,
            batch_size=8,
            steps=20,
            restarts=2,
            top_k=1,
            test_top_k=1,
            log_every=5.0,
            folder=str(tmp_path),
            run_id="niches",
            serial=True,
            max_stale_rounds=2,
            seed=5,
        )
    finally:
        fake.close()
    with CandidateStore(tmp_path / "candidates.duckdb", read_only=True) as store:
        ranked = store_programs(store, "niches")
    archive = NicheArchive()
    niches = archive.cells(ranked)
    assert len(ranked) >= 6 and len(niches) >= 5, [n.label() for n in niches]
    # the last request came after every program was calibrated (serial run): best + one per niche
    last = passed[-1]
    assert last[0] == ranked[0].source and len(last) == 5
    assert len({archive.niche_of(source) for source in last}) == 5
    # by score alone the top five would hold fewer niches
    assert len({archive.niche_of(p.source) for p in ranked[:5]}) < 5
    prompt = json.dumps(fake.requests[-1]["messages"])
    assert all(json.dumps(source.strip())[1:-1] in prompt for source in last)


def test_features_are_derived_from_the_primitive_table():
    """State, linear algebra and conditionals are the primitive table's flags and kinds (prims.h:
    STRUCT, LINALG, PIECEWISE, kind comparison), not hand-kept lists of names."""
    from ndvm.language import PRIMITIVE_INFO
    from proposers.niches import FEATURES

    flagged = {flag: {n for n, p in PRIMITIVE_INFO.items() if getattr(p, flag)} for flag in ("structure", "linalg")}
    assert FEATURES["state"] == flagged["structure"]
    assert {"cons", "car", "list-ref", "vec", "ref", "vec->list", "append"} <= FEATURES["state"]
    assert FEATURES["linalg"] == flagged["linalg"]
    assert {"matmul", "solve", "cholesky", "eye", "mat", "vsum"} <= FEATURES["linalg"]
    assert not FEATURES["state"] & FEATURES["linalg"]
    comparisons = {n for n, p in PRIMITIVE_INFO.items() if p.kind == "comparison"}
    assert comparisons | {"abs", "min", "max", "clamp", "floor", "modulo", "if", "cond"} <= FEATURES["conditional"]
    assert not {"+", "exp", "sin", "vec"} & FEATURES["conditional"]
