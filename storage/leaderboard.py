"""``ndvm leaderboard [--run ID]``: the best candidates of a run, as a rich table.

The CLI calls ``show_leaderboard(store_path, run_id=..., k=..., metric=...)`` (the store path
defaults to ``storage.default_store_path()``, ``runs/candidates.duckdb``); it opens the store
read-only, so it fails with a clear message while a discovery run still holds the file.
"""
from __future__ import annotations

import json
from pathlib import Path

import polars as pl
from rich.console import Console
from rich.table import Table

from storage.store import CandidateStore, RunStatus, StoreError, default_store_path


def _short(text: str, width: int) -> str:
    one_line = " ".join(text.split())
    return one_line if len(one_line) <= width else one_line[: width - 1] + "…"


def _params(text: str | None, width: int = 40) -> str:
    values = json.loads(text or "{}")
    return _short(" ".join(f"{k}={v:.4g}" for k, v in values.items()), width)


def leaderboard_table(top: pl.DataFrame, status: RunStatus, metric: str | None = None) -> Table:
    """Render ``CandidateStore.top`` rows of a run as a rich Table."""
    metric_name = metric or status.metric
    title = (f"run {status.run_id} ({status.status}) · {status.dataset or '?'} / {status.task or '?'} · "
             f"{status.proposed} proposed, {status.new} new, {status.duplicates} duplicates, "
             f"{status.invalid} invalid, {status.calibrated} calibrated, {status.failed} failed, "
             f"{status.pending} pending")
    table = Table(title=title, title_justify="left")
    table.add_column("#", justify="right")
    table.add_column("hash", no_wrap=True, min_width=16)
    table.add_column(f"held-out {metric_name}" if "." not in metric_name else metric_name, justify="right")
    table.add_column("origin")
    table.add_column("parameters")
    table.add_column("program")
    for row in top.iter_rows(named=True):
        table.add_row(str(row["rank"]), row["hash"], f"{row['score']:.6g}", row["origin"] or "",
                      _params(row["parameters"]), _short(row["source"], 70))
    if metric is None:
        table.caption = f"ranked by held-out {status.metric} ({'higher' if status.higher_is_better else 'lower'} is better)"
    else:
        table.caption = f"ranked by {metric}"
    return table


def show_leaderboard(store_path: str | Path | None = None, run_id: str | None = None, k: int = 10, metric: str | None = None,
                     console: Console | None = None) -> pl.DataFrame:
    """Print the top ``k`` candidates of ``run_id`` (default: the latest run) and return them."""
    store_path = default_store_path() if store_path is None else store_path
    with CandidateStore(store_path, read_only=True) as store:
        run_id = run_id or store.latest_run()
        if run_id is None:
            raise StoreError(f"the store {store_path} has no runs yet")
        status = store.run_status(run_id)
        top = store.top(k, metric=metric, run_id=run_id)
    console = console or Console()
    if top.is_empty():
        console.print(f"run {run_id}: no calibrated candidate yet ({status.proposed} proposed, {status.pending} pending)")
    else:
        console.print(leaderboard_table(top, status, metric))
    return top


__all__ = ["show_leaderboard", "leaderboard_table"]
