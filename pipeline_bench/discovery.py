"""``ndvm bench --suite discovery``: does what the search finds beat the textbook on data it never saw?

For each dataset and seed (three; one with ``--quick``) a real discovery run with the offline
mutation proposer (``CASES``):

- **ENSO** (``enso``, Niño 1+2: train 1950-1980, validation 1981-1990, test 1991-2010);
- **Niño 3.4** (``enso-nino34`` from ``../shared/data/enso/raw/psl_nino34.long.data.txt``: train
  1950-1989, validation 1990s, test 2000 on) with the Southern Oscillation Index as a covariate
  (``../shared/data/enso/raw/bom_soi_monthly.txt``);
- **Severson** (``../shared/data/battery/severson.csv``: batches 1-2 train and select, batch 3
  cells held out whole as test cells);
- **US unemployment** (``us-unemployment``, quarterly, shipped by statsmodels: train to 1989,
  validation 1990s, test 2000-2009Q3), the non-monthly series.

A case whose file is absent is skipped with the reason. Per run it reports the champion's
validation and test scores (the champion is the simplest candidate within one standard error of
the best validation score, ``storage.selection``), the test score of the best-validation
candidate, the best reference's test score, the paired test of the report card (Diebold-Mariano
p-value for forecasts, the bootstrap interval of the RMSE difference for Severson) read as
better / worse / tie at the 5% level, and Spearman's rank correlation between validation and test
scores over **all** calibrated candidates: after the run (the search never sees them), every
calibrated candidate is scored on the test split here, as the end-of-run scoring does for the top
k (for Severson, at most ``MAX_TEST_SCORED`` candidates, a seeded random sample, since each one is
first fitted on the 38 held-out cells). The notes count, per dataset, the seeds whose champion is
significantly better or worse than the best reference.
"""

from __future__ import annotations

import json
import math
import random
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SEEDS = (0, 1, 2)
# Budgets per run, small so that the suite (3 seeds x 4 datasets, then test scoring) stays within
# half an hour on a 2-core machine (its measured length: BENCHMARKS.md, "Figures behind choices in
# the code").
ENSO_MINUTES = 1.0
NINO34_MINUTES = 1.0
SEVERSON_MINUTES = 0.75
UNEMPLOYMENT_MINUTES = 0.75
QUICK_MINUTES = 0.3
MAX_TEST_SCORED = 300
SEVERSON_FILE = Path("battery") / "severson.csv"
NINO34_FILE = Path("enso") / "raw" / "psl_nino34.long.data.txt"
# The Bureau of Meteorology's SOI starts in 1876 (CPC's in 1951, after Niño 3.4's first training year)
SOI_FILE = Path("enso") / "raw" / "bom_soi_monthly.txt"


def _quiet() -> None:
    from flows.environment import apply_offline_env

    apply_offline_env()
    import logging

    for name in ("prefect", "httpx", "mlflow", "alembic", "LiteLLM"):
        logging.getLogger(name).setLevel(logging.WARNING)


def score_all_on_test(
    store: Any, run_id: str, task: Any, options: dict[str, Any], cap: int | None, seed: int = 0
) -> tuple[list[float], list[float], int]:
    """(validation scores, test scores, candidates calibrated) of the run's calibrated candidates
    (a seeded sample of ``cap`` when there are more); non-finite test scores are dropped."""
    from datasets.schema import TEST

    rows = list(store.top(10**9, run_id=run_id).iter_rows(named=True))
    total = len(rows)
    if cap is not None and total > cap:
        rows = random.Random(seed).sample(rows, cap)
    validation, test = [], []
    for row in rows:
        parameters = json.loads(row["parameters"] or "{}")
        try:
            fit = task.prepare_test_fit(task.restore_fit(row["source"], parameters, name=row["hash"]), **options)
            score = task.score(fit, TEST).get(task.primary_metric, math.inf)
        except Exception:  # a candidate that cannot be scored on test is left out (counted below)
            continue
        if score is not None and math.isfinite(score):
            validation.append(float(row["score"]))
            test.append(float(score))
    return validation, test, total


def test_score_of(store: Any, run_id: str, task: Any, options: dict[str, Any], digest: str) -> float | None:
    """The test score of one stored candidate of the run (None when it cannot be scored)."""
    from datasets.schema import TEST

    row = store.evaluation(run_id, digest)
    source = store.candidate(digest)["source"]
    try:
        fit = task.prepare_test_fit(task.restore_fit(source, row["parameters"], name=digest), **options)
        score = task.score(fit, TEST).get(task.primary_metric, math.inf)
    except Exception:  # reported as missing in the table
        return None
    return float(score) if score is not None and math.isfinite(score) else None


def one_run(label: str, folder: Path, seed: int, minutes: float, cap: int | None, **problem: Any) -> dict[str, Any]:
    from flows.discover import discover
    from flows.report import task_of_run
    from storage import CandidateStore
    from storage.stats import spearman

    run_id = f"bench-{label}-{seed}"
    started = time.perf_counter()
    report = discover(
        proposer="mutation",
        budget={"minutes": minutes},
        seed=seed,
        folder=str(folder),
        run_id=run_id,
        log_every=30.0,
        **problem,
    )
    run_seconds = time.perf_counter() - started
    card_path = folder / "reports" / run_id / "report.json"
    card = json.loads(card_path.read_text()) if card_path.is_file() else None
    with CandidateStore(folder / "candidates.duckdb", read_only=True) as store:
        task, config = task_of_run(store, run_id)
        t0 = time.perf_counter()
        val, test, total = score_all_on_test(store, run_id, task, config.calibration.as_kwargs(), cap, seed)
        scoring_seconds = time.perf_counter() - t0
        best_test = None
        if card is not None and card.get("selection"):  # the best validation score's model, on test
            best_test = test_score_of(
                store, run_id, task, config.calibration.as_kwargs(), card["selection"]["best_hash"]
            )
    out: dict[str, Any] = {
        "label": label,
        "seed": seed,
        "run_id": run_id,
        "minutes": minutes,
        "run_seconds": run_seconds,
        "calibrated": report["calibrated"],
        "proposed": report["proposed"],
        "metric": report["metric"],
        "spearman_validation_test": spearman(val, test),
        "test_scored": len(test),
        "candidates": total,
        "test_scoring_seconds": scoring_seconds,
    }
    if card is None:
        out["error"] = "no report card was written"
        return out
    champ = card["champion"]
    refs = {r["name"]: r["test_score"] for r in card["references"]}
    out.update(
        champion=champ["hash"],
        champion_validation=champ["validation_score"],
        champion_test=champ["test_score"],
        champion_complexity=champ["complexity"],
        best_reference=card.get("best_reference"),
        best_reference_test=refs.get(card.get("best_reference")),
        references_test=refs,
        verdict=card["verdict"],
        paired=card.get("paired_test", {}).get("overall"),
        recommended=card.get("recommended"),
        best_validation_hash=(card.get("selection") or {}).get("best_hash"),
        best_validation_test=best_test,
        selection=(card.get("selection") or {}).get("reason"),
    )
    return out


def _paired_text(row: dict[str, Any]) -> str:
    p = row.get("paired") or {}
    if p.get("untestable"):
        return "untested (too few origins)"
    if "p_value" in p and "statistic" in p:
        return f"DM* {p['statistic']:+.2f}, p = {p['p_value']:.3g}"
    if "low" in p:
        return f"{p['estimate']:+.4f} [{p['low']:+.4f}, {p['high']:+.4f}]"
    return "-"


@dataclass(frozen=True)
class Case:
    """One dataset of the suite: what ``discover`` works on, for how long, and what it needs."""

    label: str
    minutes: float
    problem: dict[str, Any]  # discover()'s problem keywords (task=..., data=..., options=...)
    needs: tuple[str, ...] = ()  # files under the shared data folder ({data} in problem values)
    test_cap: int | None = None  # candidates scored on test for Spearman (None: every one)
    reference_note: str = ""

    def resolved(self, data: Path | None) -> dict[str, Any] | None:
        """The problem with ``{data}`` replaced by the shared data folder; None when a file is missing."""
        if any(data is None or not (data / need).is_file() for need in self.needs):
            return None
        text = json.dumps(self.problem)
        return json.loads(text.replace("{data}", str(data))) if data is not None else dict(self.problem)


# The suite's datasets (issue 31): two ENSO indices (Niño 3.4 with the Southern Oscillation as a
# covariate), battery cells held out whole, and a non-monthly series a dependency ships.
CASES = (
    Case("enso", ENSO_MINUTES, {"task": "enso"}),
    Case(
        "nino34-soi",
        NINO34_MINUTES,
        {
            "task": "enso-nino34",
            "dataset_options": {"path": "{data}/" + str(NINO34_FILE), "soi_path": "{data}/" + str(SOI_FILE)},
        },
        needs=(str(NINO34_FILE), str(SOI_FILE)),
    ),
    Case(
        "severson",
        SEVERSON_MINUTES,
        # test_top_k=1: the end-of-run scoring fits every test-scored entry on the 38 held-out
        # cells; the suite scores a sample of candidates itself, so the run scores its champion only
        {"task": "battery", "data": "{data}/" + str(SEVERSON_FILE), "test_top_k": 1},
        needs=(str(SEVERSON_FILE),),
        test_cap=MAX_TEST_SCORED,
    ),
    Case("us-unemployment", UNEMPLOYMENT_MINUTES, {"task": "us-unemployment"}),
)


def _significance(row: dict[str, Any]) -> str:
    """better / worse / tie: the champion against the best reference on test (5% level); a tie
    whatever the test says when the two test scores are practically equal (the report card's rule,
    ``flows.report_tests.practically_equal``: the champion is then the reference law itself)."""
    from flows.report_tests import SIGNIFICANCE, practically_equal

    champion, reference = row.get("champion_test"), row.get("best_reference_test")
    if champion is not None and reference is not None and practically_equal(float(champion), float(reference)):
        return "tie"
    p = row.get("paired") or {}
    if "p_value" in p and "mean_diff" in p:
        if p["p_value"] is not None and p["p_value"] < SIGNIFICANCE:
            return "better" if p["mean_diff"] < 0 else "worse"
        return "tie"
    if "low" in p and "high" in p:
        if p["high"] < 0:
            return "better"
        if p["low"] > 0:
            return "worse"
        return "tie"
    return "-"


def run_discovery_suite(config: Any) -> Any:
    """The suite (``ndvm_bench.common.SuiteResult``)."""
    from ndvm_bench.common import SuiteResult, find_data_dir

    _quiet()
    seeds = SEEDS[:1] if config.quick else SEEDS
    data = find_data_dir(config)
    rows, runs, notes = [], [], []
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="ndvm-bench-discovery-") as tmp:
        for case in CASES:
            problem = case.resolved(data)
            if problem is None:
                notes.append(
                    f"{case.label} skipped: {', '.join(case.needs)} not found under the shared data folder "
                    f"({data or 'not found'}); set NDVM_SHARED_DATA"
                )
                continue
            minutes = QUICK_MINUTES if config.quick else case.minutes
            for seed in seeds:
                folder = Path(tmp) / f"{case.label}-{seed}"
                runs.append(one_run(case.label, folder, seed, minutes, case.test_cap, **problem))
    total_minutes = (time.perf_counter() - started) / 60
    for r in runs:
        if "error" in r:
            rows.append([r["label"], r["seed"], r["calibrated"], "-", "-", "-", "-", "-", r["error"], "-", "-"])
            continue
        rows.append(
            [
                r["label"],
                r["seed"],
                r["calibrated"],
                f"{r['champion_validation']:.4f}",
                f"{r['champion_test']:.4f}",
                f"{r['best_validation_test']:.4f}" if r.get("best_validation_test") is not None else "-",
                f"{r['best_reference']} {r['best_reference_test']:.4f}",
                r["champion_complexity"],
                _paired_text(r),
                _significance(r),
                f"{r['spearman_validation_test']:.2f} (n={r['test_scored']})",
            ]
        )
    summary = []
    for case in CASES:
        mine = [r for r in runs if r["label"] == case.label and "error" not in r]
        if mine:
            verdicts = [_significance(r) for r in mine]
            summary.append(
                f"{case.label}: {verdicts.count('better')} of {len(mine)} seeds significantly better than the best "
                f"reference, {verdicts.count('worse')} significantly worse, {verdicts.count('tie')} not different"
            )
    notes += (
        summary
        + [
            f"the whole suite took {total_minutes:.1f} minutes",
            "metric: forecasts the mean RMSE over the leads (ENSO deg C over leads 1-12, unemployment percentage points "
            "over leads 1-8), Severson the mean over cells of the RMSE of state of health; lower is better; validation "
            "picks the champion (the simplest candidate within one standard error of the best validation score, "
            "storage/selection.py), test is read after the run",
            "best-validation test: the test score of the candidate with the best validation score (the champion "
            "when the rule kept it)",
            "paired test vs the best reference on test: forecasts Diebold-Mariano with the HLN correction on the "
            "squared-error differential averaged over leads (negative: champion better); Severson the 95% group-bootstrap "
            "interval of the RMSE difference (negative: champion better); significance at the 5% level",
            "Spearman: validation vs test score over every calibrated candidate, scored on test after the run "
            f"(Severson: a seeded sample of at most {MAX_TEST_SCORED})",
        ]
        + [f"{r['run_id']}: {r.get('verdict', r.get('error'))}" for r in runs]
    )
    return SuiteResult(
        name="discovery",
        title=f"discovery runs, mutation proposer, seeds {list(seeds)}: validation vs test",
        columns=[
            "task",
            "seed",
            "calibrated",
            "champion validation",
            "champion test",
            "best-validation test",
            "best reference (test)",
            "complexity",
            "paired test",
            "vs reference",
            "Spearman val/test",
        ],
        rows=rows,
        notes=notes,
        data={"runs": runs, "minutes": total_minutes},
    )


__all__ = ["run_discovery_suite", "score_all_on_test", "one_run"]
