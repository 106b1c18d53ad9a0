"""Niches filled by discovery runs: for each run folder, the latest run's calibrated candidates,
the distinct niches they fill (proposers/niches.py), the niches among the top 10 and the top 50,
and the best validation score.

    .venv/bin/python scripts/niche_report.py runs-a runs-b ...

Used for the "Diverse parents" figures in BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).absolute().parents[1]))  # the repository, for a plain `python scripts/...`

from proposers.niches import NicheArchive, niche_summary, store_programs
from storage import CandidateStore, default_store_path


def report(folder: str) -> dict:
    with CandidateStore(default_store_path(folder), read_only=True) as store:
        run_id = store.latest_run()
        if run_id is None:
            raise SystemExit(f"{folder}: no run in {default_store_path(folder)}")
        status = store.run_status(run_id)
        programs = store_programs(store, run_id)
    archive = NicheArchive()
    cells = niche_summary(programs, archive)
    top10 = {archive.niche_of(p.source, p.canonical_hash) for p in programs[:10]}
    top50 = {archive.niche_of(p.source, p.canonical_hash) for p in programs[:50]}
    return {
        "folder": folder,
        "run_id": run_id,
        "calibrated": len(programs),
        "proposed": status.proposed,
        "new": status.new,
        "niches": len(cells),
        "top10_niches": len(top10),
        "top50_niches": len(top50),
        "best": status.best_score,
        "metric": status.metric,
        "elite_niches": [(n.label(), size) for n, size, _ in cells[:8]],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", nargs="+", help="run folders (each holding candidates.duckdb)")
    args = parser.parse_args(argv)
    print(
        "| run folder | proposed | new | calibrated | niches filled | niches in top 10 | in top 50 | best validation |"
    )
    print("|---|--:|--:|--:|--:|--:|--:|--:|")
    rows = [report(folder) for folder in args.folders]
    for r in rows:
        print(
            f"| {r['folder']} | {r['proposed']} | {r['new']} | {r['calibrated']} | {r['niches']} | "
            f"{r['top10_niches']} | {r['top50_niches']} | {r['metric']} {r['best']:.5g} |"
        )
    for r in rows:
        print(
            f"{r['folder']}: best niches (elite rank order, members): "
            + ", ".join(f"{label} ({size})" for label, size in r["elite_niches"])
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
