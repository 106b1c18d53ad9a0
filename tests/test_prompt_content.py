"""What the LLM sees (issue 19 parts 2, 4, 5): the data card and the residuals in the prompt (and
nothing of the test split), a fixed prefix that is byte-identical between requests, cached-token
accounting, and the proposer benchmark in a short mode.

The HTTP tests run the LLM proposer through litellm against pipeline_bench.proposer.RecordedModelServer,
a real OpenAI-compatible server on 127.0.0.1.
"""

from __future__ import annotations

import json
import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import numpy as np  # noqa: E402
import polars as pl  # noqa: E402
import pytest  # noqa: E402
from conftest import shared_file  # noqa: E402
from test_flows_support import FakeOpenAI  # noqa: E402

from proposers import Budget, Duplicate, Failure, ProposalContext, ScoredProgram  # noqa: E402
from proposers.datacard import residual_text  # noqa: E402

pytestmark = pytest.mark.timeout(300)

CORPUS = "ndvm_corpora/cosearch_candidates_valid.jsonl"


@pytest.fixture(scope="module")
def enso():
    import datasets
    from datasets.tasks import make_task
    from datasets.tasks.forecast import AR1_SOURCE

    task = make_task(datasets.load("enso"))
    fit = task.fit(AR1_SOURCE, steps=60)
    assert fit.ok
    return task, AR1_SOURCE, task.flat_parameters(fit.params)


def enso_prompt(enso, **context) -> str:
    from flows.problem import task_spec
    from proposers.llm import build_messages

    task, source, params = enso
    spec = task_spec(task.dataset, task)
    ctx = ProposalContext(
        spec,
        best=[ScoredProgram(source, 0.9, params=params)],
        residuals=residual_text(task.residual_facts(source, params)),
        **context,
    )
    return "\n".join(m["content"] for m in build_messages(ctx, 4))


def test_enso_prompt_has_the_data_card_and_residuals_and_nothing_of_the_test_years(enso):
    task = enso[0]
    prompt = enso_prompt(enso)
    # the data card: columns with units and ranges, lag structure, calendar cycle
    for expected in [
        "Data card (the 492 training and validation rows only)",
        "- anom_c [°C]:",
        "autocorrelation at lag 1: 0.9",
        "mean by calendar month: Jan",
        "correlation of each month with the month before",
    ]:
        assert expected in prompt, expected
    # the residuals of the best program on validation: by lead and by target calendar month
    for expected in [
        "Where the best program fails on the validation data",
        "RMSE by lead: 1:",
        "bias (forecast - observed) by lead",
        "RMSE by target calendar month",
        "worst target months:",
    ]:
        assert expected in prompt, expected
    # nothing of the test years: no test year, no test value at any precision the prompt uses
    frame = task.dataset.frame
    test = frame.filter(pl.col("split") == "test")
    seen = frame.filter(pl.col("split") != "test")
    assert test.height > 100
    test_years = sorted(set(test.get_column("year").to_list()) - set(seen.get_column("year").to_list()))
    assert test_years and not [y for y in test_years if str(y) in prompt]
    from proposers.datacard import num

    seen_values = set(seen.get_column("anom_c").to_list())
    for value in test.get_column("anom_c").to_list():
        if value not in seen_values:
            assert repr(value) not in prompt and f"{value:.6g}" not in prompt
    # the card's ranges are those of the training and validation rows only
    y = seen.get_column("anom_c").to_numpy()
    assert f"- anom_c [°C]: {num(y.min())}..{num(y.max())}," in prompt


def test_the_prompt_names_the_reference_programs_with_their_scores_as_the_ones_to_beat(enso):
    """Issue 31 part 1: the task's reference models written as programs, named as the task names
    them, with their validation scores (or why there is none), as the programs to beat and build
    on; a reference among the best programs is not shown twice."""
    from proposers import ReferenceProgram

    task, source, params = enso
    (ar_name, ar_source), (damped_name, damped_source), (seasonal_name, seasonal_source) = task.reference_programs()
    references = [
        ReferenceProgram(ar_name, ar_source, 1.05434, {"c": 0.0036, "a1": 1.0119}, "ok", "a" * 16),
        ReferenceProgram(damped_name, damped_source, None, None, "failed", "b" * 16),
        ReferenceProgram(seasonal_name, seasonal_source, canonical_hash="c" * 16),
    ]
    from flows.problem import task_spec
    from proposers.llm import build_messages

    spec = task_spec(task.dataset, task)
    best = [ScoredProgram(ar_source, 1.05434, canonical_hash="a" * 16), ScoredProgram(source, 1.2, params=params)]
    ctx = ProposalContext(spec, best=best, references=references)
    prompt = "\n".join(m["content"] for m in build_messages(ctx, 4))
    assert "The task's reference models, written as programs" in prompt and "Beat their validation scores" in prompt
    assert (
        f"- {ar_name}: validation score 1.05434\n```scheme\n{ar_source.strip()}\n```\nfitted: c=0.0036, a1=1.012"
        in prompt
    )
    assert f"- {damped_name}: calibration failed: no score\n```scheme\n{damped_source.strip()}" in prompt
    assert f"- {seasonal_name}: not calibrated yet\n```scheme\n{seasonal_source.strip()}" in prompt
    # the references come before the best programs; the AR reference among them is named, not repeated
    assert prompt.index("The task's reference models") < prompt.index("Best programs so far")
    assert f"1. score 1.05434: the reference {ar_name} above" in prompt
    plain = "\n".join(m["content"] for m in build_messages(ProposalContext(spec, best=best), 4))
    assert prompt.count(ar_source.strip()) == 1 and prompt.count(source.strip()) == plain.count(source.strip())
    # without references, no such block (and the best programs are shown in full)
    assert "reference models" not in plain and plain.count(ar_source.strip()) == 1


def test_battery_prompt_has_the_spread_across_cells_and_no_held_out_cell():
    import datasets
    from datasets.tasks import make_task
    from flows.problem import task_spec
    from proposers.llm import build_messages

    dataset = datasets.load(str(shared_file("battery/severson.csv")))
    task = make_task(dataset)
    held = set(task.test_groups())
    assert held, "Severson holds batch 3 out as test cells"
    source = task.seed_programs()[1]  # sqrt-sei: a - b sqrt(x)
    fit = task.fit(source, steps=60)
    assert fit.ok
    params = task.flat_parameters(fit.params)
    residuals = residual_text(task.residual_facts(source, params))
    spec = task_spec(dataset, task)
    ctx = ProposalContext(spec, best=[ScoredProgram(source, 0.01)], residuals=residuals)
    prompt = "\n".join(m["content"] for m in build_messages(ctx, 4))
    for expected in [
        f"Spread across the {len(task.groups())} cell_id groups",
        "soh at the first row",
        "fade rate, change of soh per 100 cycle",
        "falls below 0.95 x its start",
        "falls below 0.8 x its start",
        "capacity_ah at the first row",
        "RMSE per cell_id",
        "worst cell_ids:",
        "by cycle range:",
    ]:
        assert expected in prompt, expected
    named = set(__import__("re").findall(r"\bb\dc\d+\b", prompt))
    assert named and not named & held  # cells of the search only, never a test cell
    # the last cycle seen is that of the training and validation rows, not the test rows
    seen_max = (
        dataset.frame.filter(pl.col("split").is_in(["train", "validation"]) & ~pl.col("cell_id").is_in(list(held)))
        .get_column("cycle")
        .max()
    )
    assert dataset.frame.get_column("cycle").max() > seen_max
    assert f"max {seen_max}" in prompt


def test_residuals_break_down_by_lead_and_month_and_follow_the_best(enso):
    from flows.feedback import ResidualNotes

    task, source, params = enso
    text = residual_text(task.residual_facts(source, params))
    by_lead = text.splitlines()[0]
    assert by_lead.startswith("RMSE by lead: ") and len(by_lead.split()) == 3 + task.leads
    # the lead-1 RMSE is that of the task's own validation score at lead 1
    fit = task.restore_fit(source, params)
    lead1 = task.score(fit)["rmse_by_lead"][0]
    assert f"1:{lead1:.3g}" in by_lead

    notes = ResidualNotes(task)
    calls = []
    original = task.residual_facts

    def counted(*args):
        calls.append(args)
        return original(*args)

    task.residual_facts = counted
    try:
        row = {"hash": "a" * 64, "source": source, "parameters": json.dumps(params)}
        assert notes.text(row) == text and notes.text(row) == text
        assert len(calls) == 1  # the same best: computed once
        worse = {**params, "phi": 0.2}
        other = notes.text({"hash": "b" * 64, "source": source, "parameters": json.dumps(worse)})
        assert len(calls) == 2 and other != text  # a new best: recomputed
        assert notes.text(None) == ""
    finally:
        del task.residual_facts


def test_datacard_numbers_are_the_statistics_they_name():
    from proposers.datacard import autocorrelation, forecast_residual_lines, group_spread_lines, lag_line

    rng = np.random.default_rng(0)
    y = np.zeros(2000)
    for t in range(1, y.size):  # AR(1), phi = 0.8
        y[t] = 0.8 * y[t - 1] + rng.standard_normal()
    assert autocorrelation(y, 1) == pytest.approx(0.8, abs=0.03)
    assert autocorrelation(y, 2) == pytest.approx(0.64, abs=0.05)
    assert lag_line(y, (1, 2)).startswith("autocorrelation at lag 1: 0.8")
    with pytest.raises(ValueError, match="lag must be in 1..1999"):
        autocorrelation(y, 2000)
    errors = np.array([[1.0, np.nan], [-1.0, 2.0]])
    lines = forecast_residual_lines(errors, np.array([[1, 2], [2, 3]]))
    assert lines[0] == "RMSE by lead: 1:1 2:2" and lines[1] == "bias (forecast - observed) by lead: 1:0 2:2"
    assert lines[2] == "RMSE by target calendar month (all leads): Jan 1 Feb 1 Mar 2"
    x = np.arange(0.0, 500.0, 50.0)
    spread = group_spread_lines(
        {"c1": (x, 1.0 - 0.001 * x), "c2": (x, 1.0 - 0.0002 * x)},
        group_label="cell",
        x_label="cycle",
        y_label="soh",
        x_per_unit=100.0,
        thresholds=(0.8,),
    )
    assert "fade rate, change of soh per 100 cycle: min -0.1," in spread[3]
    assert "min 250, quartiles 250 / 250 / 250, max 250 (over 1); 1 groups stay above it" in spread[4]


# ---------------------------------------------------------------------------- the prompt as sent
@pytest.fixture(scope="module")
def corpus():
    from pipeline_bench.proposer import load_corpus

    return load_corpus(shared_file(CORPUS))


@pytest.fixture(scope="module")
def cosearch(tmp_path_factory):
    from flows.problem import task_spec
    from pipeline_bench.proposer import cosearch_task

    task = cosearch_task(tmp_path_factory.mktemp("cosearch"))
    return task, task_spec(task.dataset, task)


def test_two_consecutive_requests_share_the_fixed_prefix_byte_for_byte(corpus, cosearch):
    from pipeline_bench.proposer import KEY_ENV, RecordedModelServer
    from proposers.llm import LLMProposer, prompt_parts

    task, spec = cosearch
    os.environ.setdefault(KEY_ENV, "recorded-local")
    with RecordedModelServer(corpus, per_request=2, forget=0.0) as server:
        llm = LLMProposer(
            "openai/recorded",
            api_base=server.api_base,
            api_key_env=KEY_ENV,
            per_request=2,
            concurrency=1,
            max_retries=0,
            timeout=20,
        )
        first = llm.propose(ProposalContext(spec, budget=Budget(proposals_left=100)), 2)
        assert len(first) == 2
        # the second request differs in everything that changes: parents, residuals, failures,
        # duplicates, budget, hint
        second_ctx = ProposalContext(
            spec,
            best=[ScoredProgram(first[0].source, 0.12)],
            residuals="RMSE by x range: 0.1-2: 0.3",
            failures=[Failure("static", "undeclared name 'q'", "(* q x)")],
            duplicates=[Duplicate(first[1].source, "c" * 64, 0.5)],
            budget=Budget(proposals_left=98),
        )
        llm.propose(second_ctx, 2)
        a, b = server.bodies[0], server.bodies[1]
    assert a != b
    system, fixed, request = prompt_parts(second_ctx, 2)
    # the request bodies as sent are equal bytes up to the end of the fixed task text
    encoded = next(
        e for e in (json.dumps(fixed)[1:-1].encode(), json.dumps(fixed, ensure_ascii=False)[1:-1].encode()) if e in a
    )
    end = a.index(encoded) + len(encoded)
    assert a.index(json.dumps(system)[1:-1].encode()) < a.index(encoded)
    assert len(os.path.commonprefix([a, b])) >= end > len(system) + len(fixed)
    sent = [json.loads(x)["messages"] for x in (a, b)]
    assert sent[0][0] == sent[1][0] and sent[0][0]["content"] == system  # system text + language reference
    assert all(m[1]["content"].startswith(fixed) for m in sent)
    # the data card is in the fixed part, everything of the round after it
    assert "Data card" in fixed and "Best programs so far" not in fixed and "Remaining budget" not in fixed
    assert sent[1][1]["content"][len(fixed) :].lstrip().startswith("Best programs so far")
    for varying in ["RMSE by x range", "undeclared name 'q'", "stored cccccccccccc", "98 proposals"]:
        assert varying in request and varying not in fixed


def test_cache_markers_for_anthropic_only_and_cached_tokens_are_counted(corpus, cosearch):
    from pipeline_bench.proposer import KEY_ENV, RecordedModelServer
    from proposers.llm import LLMProposer, build_messages, needs_cache_markers, prompt_parts

    task, spec = cosearch
    assert needs_cache_markers("anthropic/claude-3-5-sonnet-20241022")
    assert needs_cache_markers("bedrock/anthropic.claude-3-5-sonnet-20241022-v2:0")
    assert not needs_cache_markers("gpt-4o-mini") and not needs_cache_markers("openai/local-model")
    assert not needs_cache_markers("ollama/llama3.1") and not needs_cache_markers("deepseek/deepseek-chat")
    ctx = ProposalContext(spec)
    marked = build_messages(ctx, 3, cache_markers=True)
    _, fixed, request = prompt_parts(ctx, 3)
    assert marked[1]["content"] == [
        {"type": "text", "text": fixed, "cache_control": {"type": "ephemeral"}},
        {"type": "text", "text": request},
    ]
    assert build_messages(ctx, 3)[1]["content"] == fixed + "\n" + request

    os.environ.setdefault(KEY_ENV, "recorded-local")
    with RecordedModelServer(corpus, per_request=2, forget=0.0) as server:
        # markers sent to an OpenAI-compatible server too: litellm passes the blocks through, the
        # request works (harmless), and the prefix is cached from the second request on
        llm = LLMProposer(
            "openai/recorded",
            api_base=server.api_base,
            api_key_env=KEY_ENV,
            per_request=2,
            concurrency=1,
            max_retries=0,
            timeout=20,
            cache_markers=True,
        )
        for _ in range(3):
            assert llm.propose(ProposalContext(spec), 2)
        body = json.loads(server.bodies[0])
        assert body["messages"][1]["content"][0]["cache_control"] == {"type": "ephemeral"}
        reported = list(server.cached)
    assert reported[0] == 0 and reported[1] > 0 and reported[2] > 0
    assert llm.usage.tokens_cached == sum(reported) and llm.usage.tokens_in > llm.usage.tokens_cached


def test_cached_tokens_from_a_mocked_usage_and_the_run_summary():
    import litellm

    from flows.feedback import llm_summary, llm_summary_line
    from proposers.llm import cached_tokens

    usage = litellm.Usage(
        prompt_tokens=2006, completion_tokens=300, total_tokens=2306, prompt_tokens_details={"cached_tokens": 1920}
    )
    assert cached_tokens(usage) == 1920
    anthropic = litellm.Usage(prompt_tokens=1500, completion_tokens=10, total_tokens=1510, cache_read_input_tokens=1200)
    assert cached_tokens(anthropic) == 1200
    assert cached_tokens(litellm.Usage(prompt_tokens=10, completion_tokens=1, total_tokens=11)) == 0
    assert cached_tokens(None) == 0

    from proposers.llm import Usage

    class Proposer:
        usage = Usage(calls=10, tokens_in=20000, tokens_out=3000, tokens_cached=15000, cost_usd=0.5)

    summary = llm_summary(Proposer(), new=4)
    assert summary["cost_per_new_usd"] == pytest.approx(0.125) and summary["cached_share"] == pytest.approx(0.75)
    line = llm_summary_line(summary)
    assert "15000 from the provider's prompt cache, 75%" in line and "$0.1250 per new valid candidate" in line
    Proposer.usage.cost_known = False
    assert "cost per new valid candidate unknown" in llm_summary_line(llm_summary(Proposer(), new=4))
    assert llm_summary(object(), new=3) is None and llm_summary_line(None) is None


def test_round_feedback_reads_duplicates_from_the_store_and_never_counts_invalid_ones(tmp_path):
    """A round of three proposals (one new, one the same program renamed, one that does not
    parse): the duplicate rate counts the one duplicate, not the invalid proposal, for a prompt-less
    proposer too (the mutation proposer's exploration reads this rate); the LLM's feedback also
    names the stored twin with its validation score."""
    from flows.feedback import RoundFeedback
    from storage import CandidateStore, EvaluationResult

    new, renamed, broken = "(param a 1.0)\n(* a x)", "(param k 1.0)\n(* k x)", "(param a 1.0)\n(* a x"
    with CandidateStore(tmp_path / "c.duckdb") as store:
        store.start_run("r", dataset="toy", task="curve", metric="rmse")
        (stored,) = store.add([new], "r")
        store.record(
            [EvaluationResult(stored.hash, "r", "toy", "curve", "v", {"a": 1.0}, {}, {"rmse": 0.25}, 0.1, "ok")]
        )
        store.add([renamed, broken], "r")
        assert set(store.duplicates_of("r", [new, renamed, broken])) == {renamed}
        for name_duplicates in (False, True):
            fb = RoundFeedback(3, name_duplicates=name_duplicates)
            fb.record(store, "r", [new, renamed, broken], {new})
            assert fb.duplicate_rate == pytest.approx(1 / 2)  # 1 new, 1 duplicate; the broken one is neither
            named = [(d.duplicate_of, d.score) for d in fb.last_duplicates]
            assert named == ([(stored.hash, 0.25)] if name_duplicates else [])


def test_the_most_repeated_duplicates_stay_named():
    from flows.feedback import RoundFeedback

    fb = RoundFeedback(3, max_named=2)
    fav = Duplicate("(param a 1.0)\n(* a x)", "f" * 64, 0.3)
    other = Duplicate("(param b 1.0)\n(+ b x)", "e" * 64, 0.4)
    third = Duplicate("(param c 1.0)\n(- c x)", "d" * 64, 0.5)
    fb.record(None, "r", ["p1", "p2"], {"p1"}, duplicates=[fav])
    fb.record(None, "r", ["p3", "p4"], {"p3"}, duplicates=[fav])
    fb.record(None, "r", ["p5"], set(), duplicates=[other])
    # this round's duplicate first, then the favourite that came back twice, with its count
    assert [(d.duplicate_of, d.times) for d in fb.last_duplicates] == [("e" * 64, 1), ("f" * 64, 2)]
    assert "proposed again 2 times in this run" in fb.last_duplicates[1].brief()
    fb.record(None, "r", ["p6", "p7"], set(), duplicates=[third, other])
    assert [d.duplicate_of for d in fb.last_duplicates] == ["d" * 64, "e" * 64]  # at most max_named
    assert fb.stale_rounds == 2 and fb.duplicate_rate == pytest.approx(5 / 7)  # 2 new, 5 duplicates


# ---------------------------------------------------------------------------- the benchmark
def test_proposer_benchmark_short_mode(corpus, cosearch):
    from pipeline_bench.proposer import compare

    task, _ = cosearch
    results = compare(corpus, task, max_requests=24, max_stale_rounds=3)
    for server in ("recorded", "repeating"):
        for mode in ("current", "b46edcf", "baseline"):
            r = results[server][mode]
            assert r.new + r.duplicates == r.proposals and r.requests > 0 and r.tokens_in > r.tokens_cached > 0
    cur, base = results["recorded"]["current"], results["recorded"]["baseline"]
    assert cur.new > 0 and base.new > 0
    assert cur.per_100(cur.duplicates) < base.per_100(base.duplicates)  # the named favourites are not repeated
    # a server that only repeats itself: the current proposer stops within a few rounds; the
    # baseline asks until its request budget is spent
    rep_cur, rep_base = results["repeating"]["current"], results["repeating"]["baseline"]
    assert rep_cur.new == 2 and rep_cur.requests <= 3 + 1 and rep_cur.ended.startswith("stopped after 3 rounds")
    assert results["repeating"]["b46edcf"].ended.startswith("stopped after 3 rounds")
    assert rep_base.requests == 24 and rep_base.ended == "request budget spent (24)"


def test_ndvm_bench_suite_proposer_quick(corpus):
    """What ``ndvm bench --suite proposer --quick`` runs (registered as an ndvm.bench_suites entry point)."""
    from ndvm_bench.common import BenchConfig
    from pipeline_bench.proposer import run_proposer_suite

    result = run_proposer_suite(BenchConfig(quick=True, data_dir=shared_file(CORPUS).parents[1]))
    assert [row[0] for row in result.rows] == [
        "recorded / current",
        "recorded / b46edcf",
        "recorded / baseline",
        "repeating / current",
        "repeating / b46edcf",
        "repeating / baseline",
    ]
    assert result.data["recorded"]["baseline"]["requests"] >= 60
    assert result.data["repeating"]["current"]["ended"].startswith("stopped after 5 rounds")
    assert result.data["new_per_100_ratio"] > 1.0


# ---------------------------------------------------------------------------- where the figures go
def test_cached_tokens_are_stored_with_the_run_and_logged_to_mlflow(tmp_path):
    import mlflow

    from flows.feedback import llm_summary, log_llm_summary
    from proposers.llm import Usage
    from storage import CandidateStore

    path = tmp_path / "c.duckdb"
    with CandidateStore(path) as store:
        store.start_run("r", metric="rmse")
        store.set_llm_usage("r", 0.02, 9000, 1200, tokens_cached=7168)
    with CandidateStore(path, read_only=True) as store:
        status = store.run_status("r")
    assert (status.llm_tokens_in, status.llm_tokens_cached, status.llm_tokens_out) == (9000, 7168, 1200)

    class Tracker:  # what log_llm_summary needs of storage.tracking's tracker: its client and parent run
        client = mlflow.MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
        parent_run_id = None

    tracker = Tracker()
    experiment = tracker.client.create_experiment("t", artifact_location=str(tmp_path / "artifacts"))
    tracker.parent_run_id = tracker.client.create_run(experiment).info.run_id

    class Proposer:
        usage = Usage(calls=12, tokens_in=9000, tokens_out=1200, tokens_cached=7168, cost_usd=0.02)

    log_llm_summary(tracker, llm_summary(Proposer(), new=5))
    metrics = tracker.client.get_run(tracker.parent_run_id).data.metrics
    assert metrics["llm_tokens_cached"] == 7168 and metrics["llm_requests"] == 12
    assert metrics["llm_cost_per_new_usd"] == pytest.approx(0.004) and metrics["llm_new_candidates"] == 5
    assert "llm_cost_usd" not in metrics  # the run's totals are logged during the run (flows/discover.py)


def test_a_discover_run_sends_the_data_card_and_the_residuals_and_reports_its_tokens(
    prefect_api, tmp_path, monkeypatch
):
    """ndvm discover with the LLM proposer (serial: each round calibrated before the next) against
    the flows tests' local server: every prompt has the data card, the prompts after the first
    calibrated round have the residuals of the best, none has a test year; the report has the LLM
    summary and the store the cached tokens."""
    from flows.discover import discover
    from storage import CandidateStore

    monkeypatch.setenv("NDVM_TEST_FAKE_KEY", "sk-fake-0123456789abcdef")
    fake = FakeOpenAI(delay=0.05)
    try:
        report = discover(
            task="enso",
            proposer="llm",
            model="openai/fake-model",
            api_base=fake.api_base,
            api_key_env="NDVM_TEST_FAKE_KEY",
            budget={"minutes": 2.0, "max_candidates": 6},
            concurrency=1,
            per_request=2,
            serial=True,
            batch_size=2,
            steps=30,
            restarts=2,
            top_k=1,
            log_every=5.0,
            folder=str(tmp_path),
            run_id="prompt-run",
        )
    finally:
        fake.close()
    prompts = [json.dumps(r["messages"], ensure_ascii=False) for r in fake.requests]
    # 6 proposals and the task's three reference programs, calibrated before the first request (serial)
    assert report["new"] == 6 + 3 and len(prompts) >= 4
    assert all("Data card (the 492 training and validation rows only)" in p for p in prompts)
    # the first prompt already has the residuals of the best reference program, and names every
    # reference program with its validation score as the programs to beat and build on
    assert "Where the best program fails" in prompts[0] and "RMSE by lead: 1:" in prompts[0]
    assert "The task's reference models, written as programs" in prompts[0]
    for ref in report["reference_programs"]:
        assert ref["status"] == "ok" and f"- {ref['name']}: validation score {ref['score']:.6g}" in prompts[0]
    assert not [y for y in range(1991, 2011) for p in prompts if str(y) in p]
    llm = report["llm"]
    assert llm["requests"] == len(prompts) and llm["tokens_in"] == 900 * len(prompts)
    assert llm["tokens_cached"] == 0 and llm["new_candidates"] == 6
    with CandidateStore(tmp_path / "candidates.duckdb", read_only=True) as store:
        assert store.run_status("prompt-run").llm_tokens_cached == 0
