"""The report card (flows/report.py): paired tests on synthetic errors, and the card of real runs."""

import json
import math

import numpy as np
import pytest

from datasets.tasks import Errors
from flows.report_render import report_markdown
from flows.report_tests import BY_GROUP, BY_LEAD, verdict
from storage.stats import diebold_mariano


def test_forecast_paired_test_per_lead_and_overall():
    rng = np.random.default_rng(0)
    a, b = rng.normal(0, 0.8, (120, 3)), rng.normal(0, 1.0, (120, 3))
    a[-1, 1:] = np.nan  # targets past the end of the split
    b[-1, 1:] = np.nan
    test = BY_LEAD.run(Errors("champion", "forecast", values=a), Errors("ar", "forecast", values=b))
    for k, row in enumerate(test["per_lead"]):
        valid = ~np.isnan(a[:, k])
        ref = diebold_mariano(a[valid, k], b[valid, k], h=k + 1)
        assert row["lead"] == k + 1 and row["statistic"] == pytest.approx(ref.statistic, rel=1e-12)
        assert row["n"] == valid.sum()
    assert test["overall"]["h"] == 3 and test["overall"]["n"] == 120  # every origin, as the headline RMSE
    text = verdict(Errors("champion", "forecast", values=a), Errors("ar", "forecast", values=b), test)
    assert "significantly lower at the 5% level" in text and "p = " in text and "vs ar" in text


def test_curve_paired_test_resamples_groups_or_blocks():
    rng = np.random.default_rng(1)
    champ = Errors("c", "curve", groups={f"cell{i}": rng.normal(0, 0.01, 30) for i in range(8)})
    ref = Errors("power-law", "curve", groups={f"cell{i}": rng.normal(0, 0.03, 30) for i in range(8)})
    test = BY_GROUP.run(champ, ref, replicates=500)
    assert test["overall"]["scheme"] == "groups" and test["overall"]["n_units"] == 8
    assert test["overall"]["high"] < 0
    assert "interval excludes 0" in verdict(champ, ref, test) and "lower" in verdict(champ, ref, test)
    one = BY_GROUP.run(
        Errors("c", "curve", groups={None: rng.normal(0, 1, 64)}),
        Errors("r", "curve", groups={None: rng.normal(0, 1, 64)}),
        replicates=500,
    )
    assert one["overall"]["scheme"] == "moving-block" and one["overall"]["block"] == 4
    assert math.isclose(champ.primary(), np.mean([math.sqrt(np.mean(e**2)) for e in champ.groups.values()]))


def test_enso_run_ends_with_a_report_card(enso_run):
    """The shared ENSO run (mutation proposer, 40 candidates) wrote report.md/.json, logged them on
    the MLflow parent run and formulas on the entries; the card's test scores are the ones the
    end-of-run test scoring stored (same champion, same references, same numbers)."""
    from mlflow.tracking import MlflowClient

    from storage import CandidateStore

    report, folder = enso_run
    card_dir = folder / "reports" / "enso-e2e"
    card = json.loads((card_dir / "report.json").read_text())
    md = (card_dir / "report.md").read_text()
    # the champion is the one-standard-error choice (storage/selection.py) from the run's best validation
    assert card["selection"]["best_hash"] == report["best_hash"] and card["kind"] == "forecast"
    assert card["champion"]["hash"] == card["selection"]["hash"] == card["recommended"]
    assert "## Verdict" in md and card["verdict"] in md and "Diebold-Mariano" in card["verdict"]
    assert len(card["paired_test"]["per_lead"]) == 12 and card["paired_test"]["overall"]["h"] == 12
    names = {r["name"] for r in card["references"]}
    assert {"persistence", "damped-persistence", "ar-aic", "statsmodels-arma21"} <= names
    with CandidateStore(folder / "candidates.duckdb", read_only=True) as store:
        scores = {(r["entry_kind"], r["entry"]): r for r in store.test_scores("enso-e2e").iter_rows(named=True)}
    assert card["champion"]["test_score"] == pytest.approx(
        scores[("candidate", card["champion"]["hash"])]["test_score"], rel=1e-9
    )
    for ref in card["references"]:
        stored = scores[("reference", ref["name"])]
        if ref["error"]:  # a failed reference fit (statsmodels-arma21 on Nino 1+2): its reason, no score
            assert stored["status"] == "error" and stored["test_score"] is None and float(ref["test_score"]) == math.inf
            assert "reference fit failed" in stored["error"]
            continue
        assert ref["test_score"] == pytest.approx(stored["test_score"], rel=1e-9)
    assert card["best_reference"] == min(card["references"], key=lambda r: float(r["test_score"]))["name"]
    front = card["pareto_front"]
    # one best model: the front marks the champion when it lies on it (a paired allowance can pick a
    # simplest-within-noise candidate that a simpler, worse-on-average one keeps off the front)
    on_front = any(e["hash"] == card["champion"]["hash"] for e in front)
    assert front and sum(e["recommended"] for e in front) == int(on_front)
    assert [e["complexity"] for e in front] == sorted(e["complexity"] for e in front)
    losses = [e["loss"] for e in front]
    assert losses == sorted(losses, reverse=True) and len(set(losses)) == len(losses)
    se = card["champion"]["stderr"]["None"]
    assert set(se["stderr"]) == set(card["champion"]["parameters"])
    # MLflow: the card on the parent run, a formula tag and formula.tex on each logged entry
    client = MlflowClient(f"sqlite:///{folder / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name("ndvm-enso-forecast").experiment_id])
    parent = next(
        r for r in runs if r.data.tags.get("ndvm.run_id") == "enso-e2e" and "mlflow.parentRunId" not in r.data.tags
    )
    assert {"report.md", "report.json"} <= {a.path for a in client.list_artifacts(parent.info.run_id)}
    assert parent.data.tags["verdict"] == card["verdict"]
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    assert children and all("formula" in c.data.tags for c in children)
    champion = next(c for c in children if c.data.tags["ndvm.hash"] == card["champion"]["hash"])
    if card["champion"]["formula"]["ok"]:
        assert champion.data.tags["formula"] == card["champion"]["formula"]["text"]
        assert "formula.tex" in {a.path for a in client.list_artifacts(champion.info.run_id)}
    finite = {k: v for k, v in se["stderr"].items() if v is not None}
    for name, value in finite.items():
        assert champion.data.metrics[f"stderr_{name}"] == pytest.approx(value)


def test_report_command(enso_run, capsys):
    from flows.cli import main

    _, folder = enso_run
    assert main(["report", "--folder", str(folder), "--run", "enso-e2e", "--json"]) == 0
    card = json.loads(capsys.readouterr().out)
    assert card["run_id"] == "enso-e2e" and "verdict" in card
    assert main(["report", "--folder", str(folder), "--run", "enso-e2e"]) == 0
    out = capsys.readouterr().out
    assert "Report card: enso-e2e" in out and "Pareto front" in out
    assert main(["report", "--folder", str(folder), "--run", "no-such-run"]) == 1
    assert "no-such-run" in capsys.readouterr().err
    assert main(["leaderboard", "--folder", str(folder), "--run", "enso-e2e", "--pareto"]) == 0
    out = capsys.readouterr().out
    assert "champion" in out and "one standard error" in out  # the front marks the run's champion


def test_curve_run_report_card(prefect_api, tmp_path):
    """A grouped curve task (battery-synthetic): per-group errors, the group bootstrap, the fade laws."""
    from flows.discover import discover

    discover(
        task="battery-synthetic",
        proposer="mutation",
        budget={"minutes": 1.0, "max_candidates": 16},
        batch_size=8,
        steps=60,
        restarts=4,
        top_k=2,
        log_every=30.0,
        folder=str(tmp_path),
        run_id="curve-card",
    )
    card = json.loads((tmp_path / "reports" / "curve-card" / "report.json").read_text())
    assert card["kind"] == "curve"
    assert {"linear", "sqrt-sei", "power-law", "knee-bacon-watts"} <= {r["name"] for r in card["references"]}
    assert card["paired_test"]["overall"]["scheme"] == "groups"
    assert "bootstrap interval" in card["verdict"]
    assert len(card["per_group"]["champion"]) == card["paired_test"]["overall"]["n_units"]
    md = report_markdown(card)
    assert "RMSE per group" in md and "Standard errors per group" in md
    # the test split per cell (no cell held out whole here: every cell's later rows), drawn as
    # plots/test_cells.png on the parent run and on the champion's run (issue 30, part 4)
    cells = card["test_cells"]
    assert cells["cells"] == len(card["per_group"]["champion"]) and not cells["held_out_cells"]
    assert sorted(p["group"] for p in cells["panels"]) == sorted(card["per_group"]["champion"])
    from mlflow.tracking import MlflowClient

    from storage.tracking import default_tracking_uri

    client = MlflowClient(default_tracking_uri(tmp_path))
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()], max_results=500)
    [parent] = [r for r in runs if r.data.tags.get("ndvm.run_id") == "curve-card"]
    [champion] = [r for r in runs if r.data.tags.get("ndvm.hash") == card["champion"]["hash"]]
    for run in (parent, champion):
        plots = {a.path for a in client.list_artifacts(run.info.run_id, "plots")}
        assert "plots/test_cells.png" in plots and "plots/test_years.png" not in plots


def test_discovery_suite_is_registered_but_not_in_the_default_run():
    from ndvm_bench.runner import EXPLICIT_SUITES, SUITE_NAMES, _suites, build_parser

    assert "discovery" in EXPLICIT_SUITES and "discovery" not in SUITE_NAMES  # ~15 min: only when named
    assert build_parser().parse_args(["--suite", "discovery"]).suite == ["discovery"]
    assert _suites()["discovery"].__module__ == "pipeline_bench.discovery"
