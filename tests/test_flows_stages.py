"""The pipeline as stages: a proposer is added by one module and one registration line and the
pipeline honours the traits it declares; flows/ stays small (no module over 600 lines, no class
over 300: issue 29)."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]


def test_a_toy_proposer_added_by_one_module_and_one_line_runs_a_discovery(tmp_path, monkeypatch):
    from toy_proposer import TERMS, ToyProposer

    import flows.proposer_registry as registry
    from flows.discover import Budget, Discovery, build_config
    from flows.proposer_registry import register_proposer

    monkeypatch.setattr(registry, "_FACTORIES", dict(registry._FACTORIES))  # the registration ends with the test
    register_proposer("toy", lambda config, seed_offset: ToyProposer())  # the one line

    config = build_config(
        "enso",
        "toy",
        serial=True,
        batch_size=4,
        steps=20,
        restarts=2,
        top_k=1,
        test_top_k=1,
        log_every=3600.0,
        folder=str(tmp_path),
    )
    discovery = Discovery(config, Budget(minutes=None, max_candidates=len(TERMS)), run_id="toy-run")
    toy = discovery.propose.proposer
    assert isinstance(toy, ToyProposer)
    try:
        report = discovery.run()
    finally:
        discovery.close()
    assert report.status == "finished" and report.proposer == "toy"
    # the proposals and the task's three reference programs (enso), which the run starts from
    assert report.new == len(TERMS) + 3 and report.calibrated + report.failed == len(TERMS) + 3
    assert report.pending == 0
    assert report.best_score is not None
    # offline, rounds of 4: every request asked for round_size programs, one request in flight
    assert [n for n, _ in toy.requests] == [4, 4]
    # serial: the first round came after the reference programs were calibrated, the second after
    # the first round; it wants residuals: each context says where the best so far fails on validation
    first, second = (context for _, context in toy.requests)
    references = {r["hash"] for r in report.reference_programs}
    assert len(references) == 3 and {p.canonical_hash for p in first.best} <= references
    assert first.best and first.residuals != ""
    assert second.best and second.residuals != ""


def test_a_toy_task_added_by_one_module_and_one_line_runs_a_discovery(tmp_path, monkeypatch):
    """docs/architecture.md "Add a task": a module implementing the five abstract methods of
    datasets.tasks.base.Task, one TASKS line, and a discovery runs on it end to end: search,
    the test split at the end, the report card, MLflow."""
    import json

    from toy_task import SEEDS, ToyTask

    import datasets.tasks as tasks
    from flows.discover import Budget, Discovery, build_config
    from storage import CandidateStore, default_store_path

    monkeypatch.setattr(tasks, "TASKS", {**tasks.TASKS, "toy": ToyTask})  # the one line (for this test)

    config = build_config(
        "enso",
        "mutation",
        task_kind="toy",
        serial=True,
        batch_size=4,
        steps=40,
        restarts=2,
        top_k=2,
        test_top_k=2,
        log_every=3600.0,
        folder=str(tmp_path),
    )
    discovery = Discovery(config, Budget(minutes=None, max_candidates=8), run_id="toy-task-run")
    task = discovery.task
    assert isinstance(task, ToyTask)
    try:
        report = discovery.run()
    finally:
        discovery.close()
    assert report.status == "finished" and report.pending == 0
    assert report.calibrated >= len(SEEDS) and report.best_score is not None and report.best_score > 0
    # the champion's test score in the report card is the toy task's own RMSE on its test rows
    card = json.loads((tmp_path / "reports" / "toy-task-run" / "report.json").read_text())
    champion = card["champion"]
    refit = task.restore_fit(champion["source"], champion["parameters"])
    x, y = task.rows["test"]
    assert champion["test_score"] == pytest.approx(float(np.sqrt(np.mean((refit.predictor({"x": x}) - y) ** 2))))
    assert card["verdict"] == "No paired test: no reference model could be scored."  # the toy has none
    with CandidateStore(default_store_path(tmp_path), read_only=True) as store:
        assert store.run_status("toy-task-run").task == "toy"


def test_an_unregistered_proposer_is_refused_naming_the_registered_ones():
    from flows.discover import DiscoveryError, build_config

    with pytest.raises(DiscoveryError, match=r"unknown proposer 'nope'; use one of auto, mutation, llm, replay"):
        build_config("enso", "nope")


def test_the_pipeline_never_names_a_proposer():
    """What a proposer needs is its traits (proposers/base.py ProposerTraits), not its name."""
    names = ("mutation", "llm", "replay")
    offenders = []
    for path in [REPO / "flows" / "discover.py", *sorted((REPO / "flows" / "stages").glob("*.py"))]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Compare):
                consts = [c.value for c in ast.walk(node) if isinstance(c, ast.Constant)]
                if any(c in names for c in consts):
                    offenders.append(f"{path.name}:{node.lineno}")
    assert offenders == []


def test_flows_modules_and_classes_stay_small():
    """Every module of flows/ (its sub-packages too) at most 600 lines, every class at most 300."""
    sizes = {}
    for path in sorted((REPO / "flows").rglob("*.py")):
        text = path.read_text()
        where = str(path.relative_to(REPO))
        sizes[where] = len(text.splitlines())
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ClassDef):
                sizes[f"{where}:{node.name}"] = node.end_lineno - node.lineno + 1
    too_big = {k: n for k, n in sizes.items() if n > (300 if ":" in k else 600)}
    assert too_big == {}
    assert len(sizes) > 40 and any(":" in k for k in sizes)  # the walk saw the modules and their classes
