"""The DuckDB candidate store on a real file: two-stage dedup, invalid programs, results,
leaderboard, history, resume and the single-writer rule. Needs the ndvm runtime (``ndvm.compile``)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import ndvm

if not hasattr(ndvm, "compile"):
    pytest.skip("the ndvm runtime (ndvm.compile) is not built yet", allow_module_level=True)

from conftest import shared_file  # noqa: E402

from storage import CandidateStore, EvaluationResult, MetricDirectionError, StoreError  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
CORPUS = "ndvm_corpora/cosearch_candidates_valid.jsonl"  # of the shared data (tests/conftest.py)

PROBE_X = np.linspace(0.1, 6.0, 9)
AB = "(param a 0.5) (param b 1.5) "


@pytest.fixture
def store(tmp_path):
    with CandidateStore(tmp_path / "candidates.duckdb") as s:
        yield s


@pytest.fixture
def run(store):
    return store.start_run(
        "run-1", dataset="toy", task="curve", proposer="test", probe_inputs={"x": PROBE_X}, budget={"minutes": 1}
    )


def outcomes(store, run_id):
    return store.history(run_id)["outcome"].to_list()


def test_alpha_equivalent_programs_dedup_by_canonical_hash(store, run):
    first = AB + "(+ a (* b x))"
    renamed = "(param p 0.5) (param q 1.5) (+ p (* q x))"  # alpha-renamed
    reordered = AB + "(+ (* x b) a)"  # commutative arguments swapped
    other_literal = "(param a 0.5) (param b 2.5) (+ a (* b x))"  # literals abstracted
    new = store.add([first, renamed, reordered, other_literal], run)
    assert [c.source for c in new] == [first]
    seen = outcomes(store, run)
    assert seen[:2] == ["new", "duplicate_hash"] and seen[3] == "duplicate_hash"
    # The runtime names parameters by first occurrence before ordering commutative arguments, so
    # (+ a (* b x)) and (+ (* x b) a) get different canonical hashes today; the semantic stage
    # still rejects the second. (Reported to the runtime owner; either stage is correct here.)
    assert seen[2] in ("duplicate_hash", "duplicate_semantic")
    history = store.history(run)
    assert history["duplicate_of"].to_list()[1:] == [new[0].hash] * 3
    assert new[0].hash == ndvm.compile(first).canonical_hash


def test_structurally_different_programs_are_all_kept(store, run):
    sources = [
        AB + "(+ a (* b x))",
        AB + "(* a (exp (* b x)))",
        AB + "(/ a (+ b x))",
        AB + "(- a (* b x))",
        AB + "(- (* b x) a)",
        AB + "(* a (sin (* b x)))",
    ]
    new = store.add(sources, run)
    assert [c.source for c in new] == sources
    assert len({c.hash for c in new}) == len(sources)
    assert len({c.fingerprint for c in new}) == len(sources)
    status = store.run_status(run)
    assert (status.proposed, status.new, status.duplicates, status.pending) == (6, 6, 0, 6)


def test_semantic_stage_catches_equal_functions(store, run):
    base = "(param a 0.5) (* 2 (+ a x))"
    expanded = "(param a 0.5) (+ (* 2 a) (* 2 x))"  # distributed: another structure
    swapped = AB + "(+ b (* a x))"  # parameters in swapped roles
    linear = AB + "(+ a (* b x))"
    negated = AB + "(* a (exp (- 0.0 (* b x))))"
    negated2 = AB + "(* a (exp (* -1.0 (* b x))))"  # (- 0 z) == (* -1 z)
    new = store.add([base, expanded, linear, swapped, negated, negated2], run)
    assert [c.source for c in new] == [base, linear, negated]
    seen = outcomes(store, run)
    assert seen[:3] == ["new", "duplicate_semantic", "new"] and seen[4:] == ["new", "duplicate_semantic"]
    # swapped roles: the canonical form may already see it (alpha-renaming by first use), else the fingerprint
    assert seen[3] in ("duplicate_hash", "duplicate_semantic")
    dup_of = store.history(run)["duplicate_of"].to_list()
    assert dup_of[1] == new[0].hash and dup_of[3] == new[1].hash and dup_of[5] == new[2].hash
    assert store.run_status(run).duplicate_semantic == 2 + (seen[3] == "duplicate_semantic")


def test_a_shared_parameter_makes_another_model_than_a_per_group_one(store, run):
    # the same function at any one parameter vector, yet fitted jointly over groups vs per group:
    # before the fix the battery reference "power law, shared exponent" was dropped as a semantic
    # duplicate of the per-cell power law and never calibrated
    per_group = "(param a 1.0 positive) (param b 0.5 positive) (* a (expt (+ x 1) b))"
    shared = "(param a 1.0 positive) (param b 0.5 positive shared) (* a (expt (+ x 1) b))"
    shared_scale = "(param a 1.0 positive shared) (param b 0.5 positive) (* a (expt (+ x 1) b))"
    both_shared_again = "(param c 1.0 positive) (param d 0.5 positive shared) (* c (expt (+ x 1) d))"
    new = store.add([per_group, shared, shared_scale, both_shared_again], run)
    assert [c.source for c in new] == [per_group, shared, shared_scale]
    assert len({c.fingerprint for c in new}) == 3
    assert outcomes(store, run)[3] in ("duplicate_hash", "duplicate_semantic")  # a renaming of `shared`


def test_semantic_stage_is_off_without_probe_inputs(store):
    run = store.start_run("no-probes", metric="rmse")
    new = store.add(["(param a 0.5) (* 2 (+ a x))", "(param a 0.5) (+ (* 2 a) (* 2 x))"], run)
    assert len(new) == 2 and all(c.fingerprint is None for c in new)
    assert not store.run_status(run).semantic_dedup


def test_dedup_is_scoped_to_the_run_but_candidates_are_stored_once(store, run):
    source = AB + "(+ a (* b x))"
    assert len(store.add([source], run)) == 1
    other = store.start_run("run-2", probe_inputs={"x": PROBE_X})
    again = store.add([source], other)
    assert len(again) == 1  # a new run must calibrate it on its own data
    count = store._con.sql("SELECT count(*) FROM candidates").fetchall()[0][0]
    assert count == 1


def test_invalid_programs_are_recorded_with_their_error(store, run):
    sources = ["(+ a (* b x)", ")", AB + "(+ a (* b x))"]
    new = store.add(sources, run)
    assert [c.source for c in new] == [sources[2]]
    history = store.history(run)
    invalid = history.filter(history["outcome"] == "invalid")
    assert invalid.height == 2
    assert set(invalid["error_kind"]) <= {"ParseError", "CheckError"}
    assert all(invalid["error"].to_list())
    assert store.run_status(run).invalid == 2


def test_proposal_objects_carry_origin_and_parents(store, run):
    from dataclasses import dataclass

    @dataclass
    class Origin:
        proposer: str
        model: str | None
        parent_hashes: tuple

    @dataclass
    class Proposal:
        source: str
        origin: Origin

    parent = store.add([AB + "(+ a (* b x))"], run)[0]
    child = store.add([Proposal(AB + "(* a (exp (* b x)))", Origin("llm", "openai/gpt-x", (parent.hash,)))], run)[0]
    assert child.origin == "llm:openai/gpt-x" and child.parents == [parent.hash]
    row = store.candidate(child.hash)
    assert row["parents"] == [parent.hash] and row["origin"] == "llm:openai/gpt-x"
    with pytest.raises(StoreError, match="no source"):
        store.add([{"code": "(+ 1 2)"}], run)


def _result(run, candidate, rmse, r2, status="ok"):
    return EvaluationResult(
        candidate=candidate,
        run_id=run,
        dataset="toy",
        task="curve",
        split="temporal-70",
        parameters={"a": 1.0, "b": 2.0},
        train_metrics={"mse": rmse**2 / 2},
        heldout_metrics={"rmse": rmse, "r2": r2} if status == "ok" else {},
        seconds=0.01,
        status=status,
        error=None if status == "ok" else "EvalError: boom",
        loss_history=[1.0, 0.5, 0.25],
    )


def test_record_top_and_history(store, run):
    c = store.add(
        [AB + "(+ a (* b x))", AB + "(* a (exp (* b x)))", AB + "(/ a (+ b x))", AB + "(* a (sin (* b x)))"], run
    )
    store.record(
        [
            _result(run, c[0].hash, 0.30, 0.80),
            _result(run, c[1].hash, 0.10, 0.95),
            _result(run, c[2].hash, 0.20, 0.90),
            _result(run, c[3].hash, 0, 0, status="error"),
        ]
    )
    top = store.top(3)
    assert top["hash"].to_list() == [c[1].hash, c[2].hash, c[0].hash]
    assert top["rank"].to_list() == [1, 2, 3] and top["score"].to_list() == [0.10, 0.20, 0.30]
    assert store.top(1, "heldout.r2")["hash"].to_list() == [c[1].hash]  # higher is better
    assert store.top(1, "train.mse")["hash"].to_list() == [c[1].hash]
    with pytest.raises(MetricDirectionError):
        store.top(1, "heldout.wiggle")
    assert store.top(1, "heldout.wiggle", higher_is_better=True).is_empty()

    # a better re-evaluation of a candidate replaces it on the leaderboard, not duplicates it
    store.record([_result(run, c[0].hash, 0.05, 0.99)])
    assert store.top(10)["hash"].to_list() == [c[0].hash, c[1].hash, c[2].hash]

    status = store.run_status(run)
    assert (status.calibrated, status.failed, status.pending) == (3, 1, 0)
    assert status.best_score == 0.05 and status.best_hash == c[0].hash
    history = store.history(run)
    assert history["seq"].is_sorted() and history.height == 4
    assert history["eval_status"].to_list() == ["ok", "ok", "ok", "error"]
    best = store.evaluation(run, c[0].hash)
    assert best["heldout_metrics"]["rmse"] == 0.05 and best["loss_history"] == [1.0, 0.5, 0.25]


def test_a_tie_for_best_names_the_same_program_in_the_status_and_the_leaderboard(store, run):
    # Two programs can reach the same validation score (the enso run of the tests did): the run's
    # best_hash, which the summary and the report use, is the leaderboard's first row.
    c = store.add([AB + "(+ a (* b x))", AB + "(* a (exp (* b x)))", AB + "(/ a (+ b x))"], run)
    store.record([_result(run, h.hash, 0.10, 0.9) for h in c])
    top = store.top(3, run_id=run)
    assert top["rank"].to_list() == [1, 1, 1]
    assert store.run_status(run).best_hash == top["hash"][0] == min(h.hash for h in c)


def test_record_rejects_bad_results_atomically(store, run):
    c = store.add([AB + "(+ a (* b x))"], run)
    bad_metric = _result(run, c[0].hash, 0.1, 0.9)
    bad_metric.heldout_metrics = {"r2": 0.9}
    with pytest.raises(StoreError, match="lacks held-out metric 'rmse'"):
        store.record([_result(run, c[0].hash, 0.1, 0.9), bad_metric])
    assert store.run_status(run).calibrated == 0  # the first result was rolled back with it
    with pytest.raises(StoreError, match="was not added"):
        store.record([_result(run, "0123456789abcdef", 0.1, 0.9)])


def test_resume_restores_counts_and_pending(tmp_path):
    path = tmp_path / "resume.duckdb"
    sources = [
        AB + "(+ a (* b x))",
        AB + "(* a (exp (* b x)))",
        AB + "(/ a (+ b x))",
        AB + "(+ b (* a x))",
        "(param p 0.5) (param q 1.5) (/ p (+ q x))",
        "(+ 1",
    ]
    with CandidateStore(path) as store:
        run = store.start_run("r", dataset="toy", probe_inputs={"x": PROBE_X})
        c = store.add(sources, run)
        store.record([_result(run, c[0].hash, 0.2, 0.9)])
        before = store.run_status(run)
        store.set_run_status(run, "interrupted")
    with CandidateStore(path) as store:
        after = store.resume("r")
        assert after.status == "running"
        for field in (
            "proposed",
            "new",
            "duplicate_hash",
            "duplicate_semantic",
            "invalid",
            "calibrated",
            "failed",
            "pending",
            "best_score",
            "best_hash",
        ):
            assert getattr(after, field) == getattr(before, field), field
        assert (after.proposed, after.new, after.duplicates, after.invalid, after.calibrated, after.pending) == (
            6,
            3,
            2,
            1,
            1,
            2,
        )
        pending = store.pending("r")
        assert {p.hash for p in pending} == {c[1].hash, c[2].hash}
        assert all(p.program.canonical_hash == p.hash for p in pending)
        # dedup state survives the restart too: both stages, with the stored probe inputs
        again = store.add(
            [AB + "(* a (exp (* b x)))", "(param a 0.5) (param b 1.5) (* (exp (* x b)) a)", AB + "(* b (exp (* a x)))"],
            "r",
        )
        assert again == []
        assert store.run_status("r").duplicates == 5
    with pytest.raises(StoreError, match="no run"):
        with CandidateStore(path) as store:
            store.resume("missing")


def test_single_writer_second_process_gets_a_clear_error(store, run):
    code = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(REPO)!r})
        from storage import CandidateStore, StoreLockedError
        for read_only in (False, True):
            try:
                CandidateStore({str(store.path)!r}, read_only=read_only)
            except StoreLockedError as error:
                print("locked", "one writer" in str(error))
            else:
                print("opened")
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.split() == ["locked", "True", "locked", "True"], out.stderr


def test_corpus_dedup_counts():
    """The 247 LLM-proposed candidates of the co-search corpus through both stages."""
    rows = [json.loads(line) for line in shared_file(CORPUS).read_text().splitlines() if line.strip()]
    sources = ["".join(f"(param {p} 0.5) " for p in row["params"]) + row["src"] for row in rows]
    import tempfile

    with tempfile.TemporaryDirectory() as tmp, CandidateStore(Path(tmp) / "c.duckdb") as store:
        run = store.start_run("corpus", probe_inputs={"x": np.linspace(0.1, 6.0, 16)})
        new = store.add(sources, run)
        status = store.run_status(run)
    assert status.proposed == len(rows) == 247
    assert status.new + status.duplicates + status.invalid == 247
    assert status.invalid == 0 and len(new) == status.new
    # all skeletons are distinct, so the hash stage finds at most literal-only variants; the
    # semantic stage finds parameter-role permutations and algebraic rewrites
    assert status.duplicate_semantic > 0
    print(
        f"corpus: {status.new} new, {status.duplicate_hash} hash duplicates, "
        f"{status.duplicate_semantic} semantic duplicates"
    )


def test_wrapped_forecast_candidates_dedup_and_resume(tmp_path):
    """Forecast candidates are compiled with the task's driver (add(program_source=...)); both
    stages work on the wrapped program, a malformed candidate is invalid, resume recompiles."""
    from datasets import load
    from datasets.tasks import CandidateError, make_task
    from datasets.tasks.forecast import SERIES

    task = make_task(load("enso"))
    head = "(param phi 0.9 (between -1 1)) (define (init) 0.0) (define (update s y) y) "
    damped = head + "(define (predict s) (* phi s))"
    renamed = head.replace("(update s y) y", "(update state obs) obs") + "(define (predict z) (* z phi))"
    rewritten = head + "(define (predict s) (* (+ phi phi) (* 0.5 s)))"
    trend = head + "(define (predict s) (+ s phi))"
    broken = "(param phi 0.9) (define (init) 0.0) (define (predict s) (* phi s))"  # no update
    with pytest.raises(CandidateError):
        task.program_source(broken)
    path = tmp_path / "forecast.duckdb"
    with CandidateStore(path) as store:
        run = store.start_run(
            "f",
            dataset="enso",
            task="forecast",
            metric=task.primary_metric,
            probe_inputs={SERIES: task.train_inputs()[SERIES][:60]},
        )
        new = store.add([damped, renamed, rewritten, trend, broken], run, program_source=task.program_source)
        assert [c.source for c in new] == [damped, trend]
        assert new[0].program_source == task.program_source(damped) and new[0].fingerprint is not None
        history = store.history(run)
        assert history["outcome"].to_list() == ["new", "duplicate_hash", "duplicate_semantic", "new", "invalid"]
        assert history["error_kind"].to_list()[-1] == "CandidateError"
    with CandidateStore(path) as store:
        pending = store.pending("f")
        assert {p.hash for p in pending} == {c.hash for c in new}
        assert all(p.program.canonical_hash == p.hash and p.program.inputs == [SERIES] for p in pending)


def test_kill_9_loses_nothing_committed(tmp_path):
    """A writer killed with SIGKILL right after committing: the reopened store has every proposal,
    candidate and result it committed (DuckDB replays its write-ahead log)."""
    path = tmp_path / "killed.duckdb"
    code = textwrap.dedent(f"""
        import os, signal, sys
        import numpy as np
        sys.path.insert(0, {str(REPO)!r})
        from storage import CandidateStore, EvaluationResult
        store = CandidateStore({str(path)!r})
        run = store.start_run("k", probe_inputs={{"x": np.linspace(0.1, 6.0, 9)}})
        ops = ["+", "-", "*", "/"]
        sources = [f"(param a 0.5) (param b 1.5) ({{op}} a (* b {{' '.join(['x'] * k)}}))" for op in ops for k in (1, 2, 3)]
        new = store.add(sources + ["(+ 1", sources[0]], run)
        store.record([EvaluationResult(c.hash, run, "toy", "curve", "s", {{"a": 1.0}}, {{"mse": 1.0}},
                                       {{"rmse": float(i)}}, 0.1) for i, c in enumerate(new[:5])])
        print(len(new), flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == -9, out.stderr
    n_new = int(out.stdout.split()[0])
    with CandidateStore(path) as store:
        status = store.resume("k")
        assert (status.proposed, status.new, status.invalid, status.duplicates) == (14, n_new, 1, 14 - n_new - 1)
        assert (status.calibrated, status.pending) == (5, n_new - 5)
        assert status.best_score == 0.0


def test_threads_of_the_writer_share_one_store(store, run):
    import threading

    sources = [AB + f"(+ a (* b {' '.join(['x'] * k)}))" for k in range(1, 41)]  # x^k: 40 structures
    errors = []

    def worker(chunk):
        try:
            for i in range(0, len(chunk), 5):
                store.add(chunk[i : i + 5] + sources[:2], run)  # every thread also repeats two shared ones
        except Exception as error:  # surfaced below
            errors.append(error)

    threads = [threading.Thread(target=worker, args=(sources[i::4],)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    status = store.run_status(run)
    assert status.new == 40 and status.proposed == 40 + 4 * 2 * 2 and status.duplicates == 16


def _ok(store, run_id, candidate, score):
    return EvaluationResult(
        candidate=candidate,
        run_id=run_id,
        dataset="toy",
        task="curve",
        split="validation",
        parameters={"a": 1.0},
        train_metrics={"loss": 0.1},
        heldout_metrics={"rmse": score},
        seconds=0.01,
    )


def test_test_scores_are_stored_apart_and_never_change_the_ranking(tmp_path):
    from storage import FinalTestScore

    with CandidateStore(tmp_path / "c.duckdb") as store:
        run_id = store.start_run("r", dataset="toy", task="curve", metric="rmse", probe_inputs={"x": PROBE_X})
        new = store.add([AB + "(+ a (* b x))", AB + "(* a (exp (* b x)))", AB + "(/ a (+ b x))"], run_id)
        store.record([_ok(store, run_id, c.hash, s) for c, s in zip(new, (0.3, 0.1, 0.2))])
        order = store.top(10, run_id=run_id)["hash"].to_list()
        assert order == [new[1].hash, new[2].hash, new[0].hash]
        assert store.top(10, run_id=run_id)["test_score"].to_list() == [None, None, None]
        # test scores that would reverse the order if anything ranked by them
        scores = [
            FinalTestScore(h, "candidate", {"rmse": t}, {"rmse": v}, validation_rank=i + 1)
            for i, (h, v, t) in enumerate(zip(order, (0.1, 0.2, 0.3), (0.9, 0.5, 0.05)))
        ]
        scores.append(FinalTestScore("persistence", "reference", {"rmse": 0.4}, {"rmse": 0.35}))
        assert store.record_test_scores(run_id, scores) == 4
        top = store.top(10, run_id=run_id)
        assert top["hash"].to_list() == order and top["score"].to_list() == [0.1, 0.2, 0.3]
        assert top["test_score"].to_list() == [0.9, 0.5, 0.05]
        assert store.run_status(run_id).best_hash == order[0]
        table = store.test_scores(run_id)
        assert table["entry"].to_list() == [*order, "persistence"]
        assert json.loads(table["test_metrics"][3]) == {"rmse": 0.4} and table["validation_score"][3] == 0.35
        # a second end of run (a resume) replaces them whole
        store.record_test_scores(run_id, scores[:1])
        assert store.test_scores(run_id)["entry"].to_list() == [order[0]]
        with pytest.raises(StoreError, match="never ranks by the test split"):
            store.top(3, metric="test.rmse", run_id=run_id)
        with pytest.raises(StoreError, match="lacks 'rmse'"):
            store.record_test_scores(run_id, [FinalTestScore(order[0], "candidate", {"mae": 0.1})])
        with pytest.raises(StoreError, match="not a candidate"):
            store.record_test_scores(run_id, [FinalTestScore("nope", "candidate", {"rmse": 0.1})])


def test_llm_usage_is_stored_with_the_run_and_survives_reopening(tmp_path):
    import duckdb

    path = tmp_path / "c.duckdb"
    # a store from before the LLM-usage columns: opening it for writing adds them
    con = duckdb.connect(str(path))
    con.sql(
        "CREATE TABLE runs (run_id VARCHAR PRIMARY KEY, status VARCHAR NOT NULL, created TIMESTAMP NOT NULL, "
        "updated TIMESTAMP NOT NULL, dataset VARCHAR, task VARCHAR, proposer VARCHAR, model VARCHAR, "
        "config JSON, budget JSON, metric VARCHAR NOT NULL, higher_is_better BOOLEAN NOT NULL, "
        "probe_inputs JSON, mlflow_run_id VARCHAR)"
    )
    con.close()
    with CandidateStore(path) as store:
        store.start_run("r", metric="rmse")
        assert store.run_status("r").llm_cost_usd is None
        store.set_llm_usage("r", 0.0125, 9000, 1200)
        with pytest.raises(StoreError, match="no run 'nope'"):
            store.set_llm_usage("nope", 1.0)
    with CandidateStore(path, read_only=True) as store:
        status = store.run_status("r")
    assert (status.llm_cost_usd, status.llm_tokens_in, status.llm_tokens_out) == (0.0125, 9000, 1200)


def test_stored_config_keeps_the_key_variable_name_and_prices_but_not_secrets(tmp_path):
    # a resumed LLM run rebuilds its proposer from the stored config: these two must survive
    config = {"api_key_env": "MY_KEY_VAR", "price_per_token": [1e-6, 4e-6], "api_key": "sk-123"}
    with CandidateStore(tmp_path / "c.duckdb") as store:
        store.start_run("r", metric="rmse", config=config)
        stored = store.run_status("r").config
    assert stored == {"api_key_env": "MY_KEY_VAR", "price_per_token": [1e-6, 4e-6], "api_key": "***"}
