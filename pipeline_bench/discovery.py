"""``ndvm bench --suite discovery``: is what the search finds any good on data it never saw?

For each seed (three; one with ``--quick``) a real discovery run with the offline mutation proposer:

- **ENSO** (``enso``: train 1950-1980, validation 1981-1990, test 1991-2010) for ``ENSO_MINUTES``;
- **Severson** (``../shared/data/battery/severson.csv``: batches 1-2 train and select, batch 3
  cells held out whole as test cells) for ``SEVERSON_MINUTES``; skipped with the reason when the
  file is absent.

Per run it reports the champion's validation and test scores, the best reference's test score,
the paired test of the report card (Diebold-Mariano p-value for ENSO, the bootstrap interval of the
RMSE difference for Severson), and Spearman's rank correlation between validation and test scores
over **all** calibrated candidates: after the run (the search never sees them), every calibrated
candidate is scored on the test split here, as the end-of-run scoring does for the top k (for
Severson, at most ``MAX_TEST_SCORED`` candidates, a seeded random sample, since each one is first
fitted on the 38 held-out cells).
"""

from __future__ import annotations

import json
import math
import random
import tempfile
import time
from pathlib import Path
from typing import Any

SEEDS = (0, 1, 2)
# Budgets per run, small so that the suite (3 seeds x 2 datasets, then test scoring) stays a
# quarter-hour job (its measured length: BENCHMARKS.md, "Figures behind choices in the code").
ENSO_MINUTES = 1.25
SEVERSON_MINUTES = 0.75
MAX_TEST_SCORED = 300
SEVERSON_FILE = Path("battery") / "severson.csv"


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
    )
    return out


def _paired_text(row: dict[str, Any]) -> str:
    p = row.get("paired") or {}
    if "p_value" in p and "statistic" in p:
        return f"DM* {p['statistic']:+.2f}, p = {p['p_value']:.3g}"
    if "low" in p:
        return f"{p['estimate']:+.4f} [{p['low']:+.4f}, {p['high']:+.4f}]"
    return "-"


def run_discovery_suite(config: Any) -> Any:
    """The suite (``ndvm_bench.common.SuiteResult``)."""
    from ndvm_bench.common import SuiteResult, find_data_dir

    _quiet()
    seeds = SEEDS[:1] if config.quick else SEEDS
    enso_minutes = 0.3 if config.quick else ENSO_MINUTES
    severson_minutes = 0.3 if config.quick else SEVERSON_MINUTES
    data = find_data_dir(config)
    severson = data / SEVERSON_FILE if data else None
    rows, runs, notes = [], [], []
    with tempfile.TemporaryDirectory(prefix="ndvm-bench-discovery-") as tmp:
        for seed in seeds:
            runs.append(one_run("enso", Path(tmp) / f"enso-{seed}", seed, enso_minutes, None, task="enso"))
        if severson is not None and severson.is_file():
            for seed in seeds:
                # test_top_k=1: the end-of-run scoring fits every test-scored entry on the 38 held-out
                # cells; the suite scores every candidate itself below, so the run scores its champion only
                runs.append(
                    one_run(
                        "severson",
                        Path(tmp) / f"severson-{seed}",
                        seed,
                        severson_minutes,
                        MAX_TEST_SCORED,
                        task="battery",
                        data=str(severson),
                        test_top_k=1,
                    )
                )
        else:
            notes.append(
                f"Severson skipped: {SEVERSON_FILE} not found under the shared data folder "
                f"({data or 'not found'}); set NDVM_SHARED_DATA"
            )
    for r in runs:
        if "error" in r:
            rows.append([r["label"], r["seed"], r["calibrated"], "-", "-", "-", "-", r["error"], "-"])
            continue
        rows.append(
            [
                r["label"],
                r["seed"],
                r["calibrated"],
                f"{r['champion_validation']:.4f}",
                f"{r['champion_test']:.4f}",
                f"{r['best_reference']} {r['best_reference_test']:.4f}",
                r["champion_complexity"],
                _paired_text(r),
                f"{r['spearman_validation_test']:.2f} (n={r['test_scored']})",
            ]
        )
    notes += [
        "metric: ENSO mean RMSE over leads 1-12 (deg C), Severson mean over cells of the RMSE of state of health; "
        "lower is better; validation picks the champion, test is read after the run",
        "paired test vs the best reference on test: ENSO Diebold-Mariano with the HLN correction on the squared-error "
        "differential averaged over leads (h = 12; negative: champion better); Severson the 95% group-bootstrap "
        "interval of the RMSE difference (negative: champion better)",
        "Spearman: validation vs test score over every calibrated candidate, scored on test after the run "
        f"(Severson: a seeded sample of at most {MAX_TEST_SCORED})",
    ] + [f"{r['run_id']}: {r.get('verdict', r.get('error'))}" for r in runs]
    return SuiteResult(
        name="discovery",
        title=f"discovery runs, mutation proposer, seeds {list(seeds)}: validation vs test",
        columns=[
            "task",
            "seed",
            "calibrated",
            "champion validation",
            "champion test",
            "best reference (test)",
            "complexity",
            "paired test",
            "Spearman val/test",
        ],
        rows=rows,
        notes=notes,
        data={"runs": runs},
    )


__all__ = ["run_discovery_suite", "score_all_on_test", "one_run"]
