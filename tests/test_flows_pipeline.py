"""The discovery flow as Prefect shows it, its options, and scheduled nights.

- a run's stages are Prefect task runs (names, states, counts in their messages), proposal and
  calibration overlap, and a logging stage that fails once is retried by Prefect;
- the options of ``ndvm discover``/``serve`` and of the flow are generated from DiscoverConfig;
- a scheduled run first continues a killed run of its deployment, with the LLM spend of the
  killed attempt counted by --max-cost and the cost and tokens logged to MLflow.

Real parts throughout: the ndvm runtime, enso, the DuckDB store, sqlite MLflow, Prefect's test
server, a local OpenAI-compatible fake (tests/test_flows_support.py) for the LLM proposer.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time

import pytest
from test_flows_support import FakeOpenAI, subprocess_env


def _task_runs(flow_run_id, expect_final: bool = True, seconds: float = 30.0):
    """The flow run's task runs once the API has them all in a final state (task-run states reach
    the server as events, a moment after the flow returns)."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    deadline = time.monotonic() + seconds
    with get_client(sync_client=True) as client:
        while True:
            runs, page = [], 200
            while True:  # every page: a slow run logs progress every second and can exceed one
                got = client.read_task_runs(
                    flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[flow_run_id])),
                    limit=page,
                    offset=len(runs),
                )
                runs += got
                if len(got) < page:
                    break
            settled = runs and all(r.state is not None and r.state.is_final() for r in runs)
            if settled or time.monotonic() > deadline:
                return runs
            time.sleep(0.5)


def _family(runs, name):
    return [r for r in runs if r.name == name or r.name.rsplit("-", 1)[0] == name]


def test_the_stages_are_prefect_tasks_that_overlap_and_logging_is_retried(prefect_api, tmp_path, monkeypatch):
    from flows.discover import discover
    from storage.tracking import Tracker

    # MLflow fails once (a transient error of the tracking server): Prefect retries the stage.
    real = Tracker.log_progress
    failures = []

    def flaky(self, status):
        if not failures:
            failures.append(time.monotonic())
            raise ConnectionError("tracking server briefly unavailable")
        return real(self, status)

    monkeypatch.setattr(Tracker, "log_progress", flaky)
    state = discover(
        task="enso",
        proposer="mutation",
        budget={"minutes": 1.0, "max_candidates": 48},
        seed=5,
        batch_size=8,
        steps=60,
        restarts=4,
        top_k=2,
        test_top_k=2,
        log_every=0.05,  # progress logged during the run even when it ends within a second
        folder=str(tmp_path),
        run_id="pipeline",
        return_state=True,
    )
    assert state.is_completed(), state
    report = state.result()
    # 48 proposals and the task's three reference programs (added when the run opens, before any propose task)
    assert report["status"] == "finished" and report["new"] == 48 + 3 and report["pending"] == 0
    runs = _task_runs(state.state_details.flow_run_id)

    # Every stage is there, each run finished, with its counts in its final message.
    proposals, batches, logs = _family(runs, "propose"), _family(runs, "calibrate-batch"), _family(runs, "log-progress")
    # An offline proposer makes up to OFFLINE_ROUNDS_PER_REQUEST rounds of 16 in one task run while
    # the queue allows: 48 new candidates take one request (4 rounds, 64 proposals, on a machine
    # whose calibration keeps the queue short) or more (when a full queue ends a request early).
    from flows.stages.propose import OFFLINE_ROUNDS_PER_REQUEST

    assert len(proposals) == report["proposal_requests"] >= 1
    per_request = [int(r.state.message.split(" proposals")[0]) for r in proposals]
    assert all(0 < k <= OFFLINE_ROUNDS_PER_REQUEST * 16 for k in per_request), per_request
    assert sum(per_request) >= 48
    assert not _family(runs, "deduplicate")  # the store's deduplication runs inside its propose task run
    assert len(batches) == report["calibration_batches"] >= 6
    for name in ("score-test-split", "report-card", "log-final"):
        [end] = [r for r in runs if r.name == name]
        assert end.state.is_completed(), (name, end.state)
    assert all(r.state.is_completed() for r in runs), [(r.name, r.state) for r in runs if not r.state.is_completed()]
    assert all(r.state.message and "proposals" in r.state.message for r in proposals)
    new_by_dedup = sum(int(r.state.message.split(": ")[1].split(" new")[0]) for r in proposals)
    assert new_by_dedup == report["new"] - 3  # the references are not a propose task's
    recorded = sum(int(r.state.message.split(" candidates")[0]) for r in batches)
    assert recorded == report["calibrated"] + report["failed"] == 48 + 3
    assert "leaderboard entries logged" in [r for r in runs if r.name == "log-final"][0].state.message
    # a progress snapshot logs at most the best candidate (PROGRESS_PODIUM); the end logs the top --top-k
    assert logs and all(r.state.message.endswith(("top 0 logged", "top 1 logged")) for r in logs)

    # Proposal and calibration overlap: a proposal request ran while a batch was in calibration.
    def during(p, b):
        return b.start_time < p.start_time < b.end_time

    assert any(during(p, b) for p in proposals for b in batches)
    assert report["proposal_busy"] > 0 and report["calibration_busy"] > 0  # (a short run: start-up dominates)

    # The logging stage that failed once was retried by Prefect, then completed.
    assert failures and logs, (failures, len(runs), sorted({r.name.rsplit("-", 1)[0] for r in runs}))
    retried = [r for r in logs if r.run_count >= 2]
    assert retried and all(r.state.is_completed() for r in retried)
    assert report["mlflow_error"] is None

    # The run's summary is an artifact of the flow run.
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    with get_client(sync_client=True) as client:
        [artifact] = client.read_artifacts(
            artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=["ndvm-pipeline"]))
        )
    assert "| calibrate-batch |" in artifact.data and f"{report['calibrated']} calibrated" in artifact.data


# ------------------------------------------------------------------------------------------ options
def test_every_configuration_field_is_an_option_of_the_flow_and_the_command_line():
    import argparse
    import inspect

    from flows.calibration import CalibrationOptions
    from flows.cli_options import add_discover_options, budget_of, discover_kwargs
    from flows.discover import Budget, DiscoverConfig, DiscoveryError, build_config, discover, discover_options
    from flows.runners import RunnerChoice

    options = discover_options()
    by_path = {o.path: o for o in options}
    # Derived or internal fields are the only ones without an option (a new field needs its metadata).
    derived = {("deployment",), ("calibration", "seed"), ("calibration", "threads"), ("calibration", "max_seconds")}
    for cls, prefix in (
        (DiscoverConfig, ()),
        (CalibrationOptions, ("calibration",)),
        (RunnerChoice, ("runner",)),
        (Budget, ("budget",)),
    ):
        for f in dataclasses.fields(cls):
            if f.name in ("problem", "calibration", "runner") and cls is DiscoverConfig:
                continue
            assert prefix + (f.name,) in by_path or prefix + (f.name,) in derived, f"{cls.__name__}.{f.name}"
    assert {o.path[1] for o in options if o.path[0] == "problem"} == {
        f.name for f in dataclasses.fields(DiscoverConfig().problem)
    }

    parser = argparse.ArgumentParser()
    add_discover_options(parser)
    flags = {s: a for a in parser._actions for s in a.option_strings}
    signature = inspect.signature(discover.fn).parameters
    for o in options:
        assert o.meta.help.strip(), o.name
        if o.path[0] != "budget":
            assert o.name in signature and signature[o.name].default == o.default, o.name
        if o.flag:
            assert o.flag in flags and flags[o.flag].help and flags[o.flag].default == o.default, o.flag
    for flag in ("--input-price", "--output-price", "--option", "--refresh", "--max-cost", "--fresh", "--log-every"):
        assert flag in flags

    # the command line gives the flow's keywords and the budget
    args = parser.parse_args(
        [
            "--steps",
            "7",
            "--api-key-env",
            "K",
            "--input-price",
            "1",
            "--output-price",
            "4",
            "--max-cost",
            "0.5",
            "--runner",
            "processes",
            "--workers",
            "2",
            "--serial",
        ]
    )
    kwargs, budget = discover_kwargs(args), budget_of(args)
    assert budget == {"minutes": 2.0, "max_candidates": None, "max_cost_usd": 0.5, "drain_minutes": None}
    config = build_config(**kwargs)
    assert (config.calibration.steps, config.llm_env, config.price_per_token, config.serial) == (
        7,
        "K",
        (1e-6, 4e-6),
        True,
    )
    assert (config.runner.kind, config.runner.workers, config.proposer) == ("processes", 2, "mutation")
    assert DiscoverConfig.from_dict(config.to_dict()) == config
    # the flow's defaults are the command line's
    assert build_config(**discover_kwargs(parser.parse_args([]))) == build_config()
    with pytest.raises(DiscoveryError, match=r"unknown discovery option\(s\) \['stepz'\]"):
        build_config(stepz=3)
    with pytest.raises(DiscoveryError, match="both --input-price and --output-price"):
        discover_kwargs(parser.parse_args(["--input-price", "1"]))


def test_serve_has_the_discover_options_and_names_its_zone(capsys):
    from flows.discover import discover_options
    from ndvm.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    serve = {s for a in sub.choices["serve"]._actions for s in a.option_strings}
    assert {o.flag for o in discover_options() if o.flag} <= serve
    assert {"--cron", "--timezone", "--name"} <= serve


# ------------------------------------------------------------------------------------------ scheduled nights
KILLED = "killed-night"


@pytest.mark.heavy  # end-to-end, timing-bound: make test-heavy
def test_a_scheduled_run_continues_the_killed_run_of_its_deployment(prefect_api, tmp_path, monkeypatch):
    """A run of deployment "nightly-test" is killed (kill -9) mid-run: it stays "running" in the
    store. The next run of the deployment continues it (same run id, pending candidates first),
    its --max-cost counts what the killed attempt spent, and the cost is logged to MLflow."""
    from mlflow.tracking import MlflowClient

    import flows.schedule as schedule
    from flows.discover import discover
    from storage import CandidateStore
    from storage.tracking import default_tracking_uri

    folder = tmp_path / "runs"
    pause = tmp_path / "paused.json"
    fake = FakeOpenAI(delay=0.1)
    price = (1e-6, 4e-6)
    options = dict(
        task="enso",
        model="openai/fake-model",
        api_base=fake.api_base,
        api_key_env="NDVM_TEST_FAKE_KEY",
        price_per_token=price,
        concurrency=2,
        per_request=2,
        batch_size=4,
        steps=30,
        restarts=2,
        top_k=1,
        test_top_k=1,
        max_stale_rounds=0,
        folder=str(folder),
    )
    # The first night: a scheduled run (the deployment's name is what Prefect's runtime reports in
    # a deployed run), paused in its first recording and killed there.
    night = (
        "import sys, flows.schedule as s; s.deployment_name = lambda: 'nightly-test'; "
        "from flows.discover import discover; "
        f"discover(**{options!r}, run_id={KILLED!r}, budget={{'minutes': 5.0}})"
    )
    env = subprocess_env(
        prefect_api, NDVM_TEST_FAKE_KEY="sk-fake-night", NDVM_TEST_PAUSE="recording:2", NDVM_TEST_PAUSE_FILE=str(pause)
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", night], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        deadline = time.monotonic() + 180
        while not pause.exists():
            assert proc.poll() is None, proc.stdout.read()[-3000:]
            assert time.monotonic() < deadline, "the run did not reach its second recording"
            time.sleep(0.2)
        paused = json.loads(pause.read_text())
        time.sleep(1.5)  # a status file with the heartbeat is written every second
        os.kill(paused["pid"], signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    calls = len(fake.requests)
    with CandidateStore(folder / "candidates.duckdb", read_only=True) as store:
        killed = store.run_status(KILLED)
    assert killed.status == "running" and killed.llm_cost_usd and killed.llm_cost_usd > 0
    assert not schedule.run_is_alive(folder, KILLED)
    assert schedule.killed_run_of(folder, "nightly-test") == KILLED
    assert schedule.killed_run_of(folder, "another-deployment") is None

    # The next night of the same deployment: it continues the killed run. Its cost limit is what
    # the killed attempt already spent, so it proposes nothing more and only calibrates what was left.
    monkeypatch.setattr(schedule, "deployment_name", lambda: "nightly-test")
    monkeypatch.setenv("NDVM_TEST_FAKE_KEY", "sk-fake-night")
    limit = killed.llm_cost_usd
    try:
        report = discover(**options, budget={"minutes": 2.0, "max_cost_usd": limit})
    finally:
        fake.close()
    assert report["run_id"] == KILLED and report["status"] == "finished" and report["pending"] == 0
    assert report["stop_reason"].startswith(f"LLM cost (${limit:g})")
    assert len(fake.requests) == calls  # not one more LLM call
    assert report["earlier_cost_usd"] == pytest.approx(limit, rel=1e-12)
    assert report["calibrated"] + report["failed"] == report["new"] > killed.calibrated + killed.failed
    with CandidateStore(folder / "candidates.duckdb", read_only=True) as store:
        assert [r["run_id"] for r in store.runs().iter_rows(named=True)] == [KILLED]  # no new run
        assert store.run_status(KILLED).status == "finished"
    assert schedule.killed_run_of(folder, "nightly-test") is None

    # LLM cost and tokens of the whole run are metrics of its MLflow parent run.
    client = MlflowClient(default_tracking_uri(folder))
    experiments = [e.experiment_id for e in client.search_experiments()]
    [parent] = client.search_runs(experiments, f"tags.`ndvm.run_id` = '{KILLED}' and tags.`mlflow.parentRunId` IS NULL")
    metrics = parent.data.metrics
    assert metrics["llm_cost_usd"] == pytest.approx(report["cost_usd"], rel=1e-9)
    assert (metrics["llm_tokens_prompt"], metrics["llm_tokens_completion"]) == tuple(report["tokens"])
    # the killed attempt's tokens (calls still in flight at the kill were never answered nor counted)
    assert tuple(report["tokens"]) == (killed.llm_tokens_in, killed.llm_tokens_out)
    assert report["tokens"][0] % 900 == 0 and 0 < report["tokens"][0] <= 900 * calls  # 900 per answered call


@pytest.mark.heavy  # (a discovery run of its own: make test-heavy, run by CI)
def test_a_reply_whose_recording_fails_is_kept_and_not_requested_again(prefect_api, tmp_path, monkeypatch):
    # Recording the first reply fails after the request succeeded (a paid LLM request): Prefect must
    # not retry the propose task (a retry would send the request again); the reply's proposals go
    # to a replay file in the run folder; the run goes on.
    from flows.discover import discover
    from flows.stages.admit import AdmitStage
    from proposers import MutationProposer
    from proposers.replay import ReplayProposer

    requests = []
    real_apropose = MutationProposer.apropose

    async def counted(self, context, n):
        requests.append(n)
        return await real_apropose(self, context, n)

    real_dedup = AdmitStage.deduplicate
    broken = []

    def dedup_fails_once(self, proposals, **options):
        if not broken:
            broken.append(len(proposals))
            raise OSError("disk briefly full")
        return real_dedup(self, proposals, **options)

    monkeypatch.setattr(MutationProposer, "apropose", counted)
    monkeypatch.setattr(AdmitStage, "deduplicate", dedup_fails_once)
    state = discover(
        task="enso",
        proposer="mutation",
        budget={"minutes": 1.0, "max_candidates": 24},
        seed=5,
        batch_size=8,
        steps=30,
        restarts=2,
        top_k=1,
        test_top_k=1,
        folder=str(tmp_path),
        run_id="unrecorded",
        return_state=True,
    )
    assert state.is_completed(), state
    report = state.result()
    # 24 proposals and the task's three reference programs
    assert report["status"] == "finished" and report["new"] == 24 + 3
    proposals = _family(_task_runs(state.state_details.flow_run_id), "propose")
    # every request sent once: no retry re-sent one (a propose task run makes up to 4 mutation rounds)
    assert all(r.run_count == 1 for r in proposals) and len(proposals) <= len(requests) <= 4 * len(proposals)
    failed = [r for r in proposals if not r.state.is_completed()]
    assert len(failed) == 1 and "recording them failed" in failed[0].state.message
    kept = tmp_path / "unrecorded-unrecorded.jsonl"
    assert len(kept.read_text().splitlines()) == broken[0] > 0
    from flows.problem import ProblemSpec, load_problem, task_spec
    from proposers import ProposalContext

    spec = task_spec(*load_problem(ProblemSpec(dataset="enso")))
    replayed = ReplayProposer(kept).propose(ProposalContext(task=spec), broken[0])  # the kept file replays
    assert len(replayed) == broken[0]
