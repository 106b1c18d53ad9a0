"""A nested check of battery discovery inside Severson batches 1-2: batch 3 (the suite's test) is never read.

    python -m pipeline_bench.severson_nested [--seeds 0 1 2] [--minutes 0.75] [--folds b1:b2 b2:b1]
        [--json OUT.json] [--data-dir DIR]

The discovery suite (``ndvm bench --suite discovery``) searches on batches 1-2 and tests on batch 3,
another protocol and ageing regime. Whatever is changed to make the selected model generalise
across batches must be judged without reading batch 3, or the suite's test becomes a validation
set. Here each fold ``SEEN:HELD`` loads only those two batches, searches and selects on ``SEEN``
(its own validation cells held out whole, a fifth of them, as the suite does) and scores on
``HELD``'s cells held out whole (fitted on their early rows, scored on their last ones) plus
``SEEN``'s training cells' last rows: the suite's question, one batch earlier. Per fold and seed it
reports the champion's pseudo-test score, the best-validation candidate's, the power law's (the
suite's best reference), the best reference's, the champion's paired bootstrap interval against it
(whole cells resampled, as the report card does), and every calibrated candidate's validation
metrics and pseudo-test score in the JSON (so that a selection rule can be replayed on them).
"""

from __future__ import annotations

import argparse
import json
import math
import tempfile
import time
from pathlib import Path
from typing import Any

SEVERSON_FILE = Path("battery") / "severson.csv"
FOLDS = ("b1:b2", "b2:b1")
SEEDS = (0, 1, 2)
MINUTES = 0.75  # the suite's Severson budget (pipeline_bench/discovery.py SEVERSON_MINUTES)


def nested_run(path: Path, seen: str, held: str, seed: int, minutes: float, folder: Path) -> dict[str, Any]:
    """One discovery on batches ``seen`` and ``held`` (``held`` cells held out whole as the test),
    then every calibrated candidate and every reference scored on that pseudo-test."""
    from datasets.schema import TEST, VALIDATION
    from flows.api import discover
    from flows.report import task_of_run
    from storage import CandidateStore

    run_id = f"nested-{seen}-{held}-{seed}"
    options = {"path": str(path), "cells": f"{seen}*,{held}*", "test_cells": f"{held}*"}
    started = time.perf_counter()
    discover(
        task="battery",
        proposer="mutation",
        minutes=minutes,
        seed=seed,
        folder=str(folder),
        run_id=run_id,
        prefect=False,
        test_top_k=1,
        dataset_options=options,
        log_every=60.0,
    )
    run_seconds = time.perf_counter() - started
    card_path = folder / "reports" / run_id / "report.json"
    if not card_path.is_file():  # nothing calibrated in the budget: no report card
        return {"fold": f"{seen}:{held}", "seed": seed, "run_seconds": run_seconds, "error": "no report card"}
    card = json.loads(card_path.read_text())
    candidates, references = [], []
    with CandidateStore(folder / "candidates.duckdb", read_only=True) as store:
        task, config = task_of_run(store, run_id)
        kw = config.calibration.as_kwargs()
        rows = list(store.top(10**9, run_id=run_id).iter_rows(named=True))
        complexity = store.complexities([r["hash"] for r in rows])
        errors = {}
        for r in rows:
            try:
                fit = task.prepare_test_fit(task.restore_fit(r["source"], json.loads(r["parameters"] or "{}")), **kw)
                scores = task.score(fit, TEST)
                pseudo = float(scores.get("rmse", math.inf))
            except Exception:  # a candidate that cannot be scored on the pseudo-test counts as inf
                pseudo = math.inf
            metrics = r["heldout_metrics"]
            candidates.append(
                {
                    "hash": r["hash"],
                    "validation": float(r["score"]),
                    "complexity": complexity.get(r["hash"]),
                    "metrics": json.loads(metrics) if isinstance(metrics, str) else metrics,
                    "pseudo_test": pseudo,
                    "source": r["source"],
                }
            )
        for ref in task.reference_models():
            fit = task.fit_reference(ref, test_groups=True)
            references.append(
                {
                    "name": ref.name,
                    "validation": float(task.score(task.fit_reference(ref), VALIDATION)["rmse"]),
                    "pseudo_test": float(task.score(fit, TEST)["rmse"]),
                }
            )
            errors[ref.name] = task._errors_of(fit, TEST)
        best_ref = min(references, key=lambda r: r["pseudo_test"])
        champion = card["champion"]["hash"]
        best = (card.get("selection") or {}).get("best_hash", champion)
        by_hash = {c["hash"]: c for c in candidates}
        row = store.evaluation(run_id, champion)
        champion_fit = task.prepare_test_fit(
            task.restore_fit(store.candidate(champion)["source"], row["parameters"], name=champion), **kw
        )
        paired = task.paired_test(task._errors_of(champion_fit, TEST), errors[best_ref["name"]])["overall"]
    return {
        "fold": f"{seen}:{held}",
        "seed": seed,
        "run_seconds": run_seconds,
        "calibrated": len(candidates),
        "champion": champion,
        "champion_validation": by_hash[champion]["validation"],
        "champion_pseudo_test": by_hash[champion]["pseudo_test"],
        "champion_complexity": by_hash[champion]["complexity"],
        "best_validation_pseudo_test": by_hash[best]["pseudo_test"] if best in by_hash else None,
        "power_law_pseudo_test": next(r["pseudo_test"] for r in references if r["name"] == "power-law"),
        "best_reference": best_ref["name"],
        "best_reference_pseudo_test": best_ref["pseudo_test"],
        "paired": paired,
        "references": references,
        "candidates": candidates,
        "training_groups": [str(g) for g in task.groups()],
        "validation_groups": [str(g) for g in task.validation_groups()],
    }


def _verdict(paired: dict[str, Any]) -> str:
    if paired["high"] < 0:
        return "better"
    if paired["low"] > 0:
        return "worse"
    return "tie"


def main(argv: list[str] | None = None) -> int:
    from ndvm_bench.common import BenchConfig, find_data_dir
    from pipeline_bench.discovery import _quiet

    parser = argparse.ArgumentParser(
        prog="python -m pipeline_bench.severson_nested", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--seeds", type=int, nargs="+", default=list(SEEDS))
    parser.add_argument("--minutes", type=float, default=MINUTES, help="proposing minutes per run")
    parser.add_argument("--folds", nargs="+", default=list(FOLDS), help="SEEN:HELD batch pairs, e.g. b1:b2")
    parser.add_argument("--json", type=Path, default=None, help="write every run (candidates included) here")
    parser.add_argument("--data-dir", default=None, help="the shared data folder (default ../shared/data)")
    args = parser.parse_args(argv)
    folds = []
    for fold in args.folds:
        parts = fold.split(":")
        if len(parts) != 2 or not all(p.startswith("b") and p[1:].isdigit() for p in parts) or parts[0] == parts[1]:
            parser.error(f"--folds: {fold!r} is not SEEN:HELD with two different batches such as b1:b2")
        if "b3" in parts:
            parser.error(f"--folds: {fold!r} reads batch 3, the discovery suite's test: this check must not")
        folds.append((parts[0], parts[1]))
    data = find_data_dir(BenchConfig(data_dir=args.data_dir))
    path = data / SEVERSON_FILE if data is not None else None
    if path is None or not path.is_file():
        print(f"skipped: {SEVERSON_FILE} not found under the shared data folder ({data or 'not found'})")
        return 0
    _quiet()
    runs = []
    with tempfile.TemporaryDirectory(prefix="ndvm-severson-nested-") as tmp:
        for seen, held in folds:
            for seed in args.seeds:
                runs.append(nested_run(path, seen, held, seed, args.minutes, Path(tmp) / f"{seen}{held}-{seed}"))
                r = runs[-1]
                if "error" in r:
                    print(f"{r['fold']} seed {r['seed']}: {r['error']}", flush=True)
                    continue
                p = r["paired"]
                print(
                    f"{r['fold']} seed {r['seed']}: {r['calibrated']} calibrated; champion validation "
                    f"{r['champion_validation']:.4f}, pseudo-test {r['champion_pseudo_test']:.4f} (complexity "
                    f"{r['champion_complexity']}); best-validation pseudo-test {r['best_validation_pseudo_test']:.4f}; "
                    f"power law {r['power_law_pseudo_test']:.4f}; vs {r['best_reference']} "
                    f"{p['estimate']:+.4g} [{p['low']:+.4g}, {p['high']:+.4g}]: {_verdict(p)}",
                    flush=True,
                )
    if args.json is not None:
        args.json.write_text(json.dumps({"runs": runs}, indent=1, default=float))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
