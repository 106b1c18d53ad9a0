"""``ndvm leaderboard [--run ID] [--pareto]``: the best candidates of a run, as a rich table.

Each entry shows its complexity (``storage.parsimony``) and its formula with the fitted values
(``storage.formula``; the program text when it has no formula), cut to the terminal's width.
``--pareto`` shows the Pareto front of complexity vs validation loss instead, with the
recommended model marked.

The CLI calls ``show_leaderboard(store_path, run_id=..., k=..., metric=...)`` (the store path
defaults to ``storage.default_store_path()``, ``runs/candidates.duckdb``); it opens the store
read-only, so it fails with a clear message while a discovery run still holds the file.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import polars as pl
from rich.console import Console
from rich.table import Table

from storage.selection import champion_of_run
from storage.store import CandidateStore, RunStatus, StoreError, default_store_path


def _short(text: str, width: int) -> str:
    one_line = " ".join(text.split())
    return one_line if len(one_line) <= width else one_line[: width - 1] + "…"


def _formula_or_program(source: str, parameters: str | None) -> str:
    from storage.formula import render

    values = {k: v for k, v in json.loads(parameters or "{}").items() if "/" not in k}
    formula = render(source, values)
    return formula.text if formula.ok else " ".join(source.split())


def _add_rows_fitting(table: Table, rows: list[list[str]], width: int | None) -> None:
    """Add rows, cutting the last column (the formula) so that every row fits in ``width``
    characters: rich would otherwise squeeze the other columns to nothing."""
    if width is not None and rows:
        headers = [str(c.header) for c in table.columns]
        widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers[:-1])]
        available = max(20, width - sum(widths) - 3 * len(headers) - 1)
        rows = [r[:-1] + [_short(r[-1], available)] for r in rows]
    for r in rows:
        table.add_row(*r)


def leaderboard_table(
    top: pl.DataFrame,
    status: RunStatus,
    metric: str | None = None,
    complexities: dict[str, int | None] | None = None,
    width: int | None = None,
) -> Table:
    """Render ``CandidateStore.top`` rows of a run as a rich Table."""
    metric_name = metric or status.metric
    title = (
        f"run {status.run_id} ({status.status}) · {status.dataset or '?'} / {status.task or '?'} · "
        f"{status.proposed} proposed, {status.new} new, {status.duplicates} duplicates, "
        f"{status.invalid} invalid, {status.calibrated} calibrated, {status.failed} failed, "
        f"{status.pending} pending"
    )
    table = Table(title=title, title_justify="left", expand=width is not None)  # the title keeps the full width
    table.add_column("#", justify="right")
    table.add_column("hash", no_wrap=True, min_width=16)
    table.add_column(f"validation {metric_name}" if "." not in metric_name else metric_name, justify="right")
    table.add_column("test", justify="right")  # scored once at the end of the run; never ranks
    table.add_column("size", justify="right")
    table.add_column("origin")
    # the formula takes the width that is left and is cut with an ellipsis, one line per entry
    table.add_column("formula or program", no_wrap=True)
    complexities = complexities or {}
    rows = []
    for row in top.iter_rows(named=True):
        size = complexities.get(row["hash"])
        test = row.get("test_score")
        rows.append(
            [
                str(row["rank"]),
                row["hash"],
                f"{row['score']:.6g}",
                "-" if test is None else f"{test:.6g}",
                "-" if size is None else str(size),
                _short(row["origin"] or "", 24),
                _formula_or_program(row["source"], row["parameters"]),
            ]
        )
    _add_rows_fitting(table, rows, width)
    if metric is None:
        table.caption = (
            f"ranked by validation {status.metric} ({'higher' if status.higher_is_better else 'lower'} "
            f"is better); test: {status.metric} on the test split, scored once when the run finished "
            "(final top k only), never used to rank"
        )
    else:
        table.caption = f"ranked by {metric}"
    return table


def _run_and_status(store: CandidateStore, store_path: str | Path, run_id: str | None) -> tuple[str, RunStatus]:
    """``run_id`` (default: the store's latest run) and its status; a clear error on an empty store."""
    run_id = run_id or store.latest_run()
    if run_id is None:
        raise StoreError(f"the store {store_path} has no runs yet")
    return run_id, store.run_status(run_id)


def show_leaderboard(
    store_path: str | Path | None = None,
    run_id: str | None = None,
    k: int = 10,
    metric: str | None = None,
    console: Console | None = None,
) -> pl.DataFrame:
    """Print the top ``k`` candidates of ``run_id`` (default: the latest run) and return them."""
    store_path = default_store_path() if store_path is None else store_path
    with CandidateStore(store_path, read_only=True) as store:
        run_id, status = _run_and_status(store, store_path, run_id)
        top = store.top(k, metric=metric, run_id=run_id)
        complexities = store.complexities(top.get_column("hash").to_list()) if not top.is_empty() else {}
    console = console or Console()
    if top.is_empty():
        console.print(
            f"run {run_id}: no calibrated candidate yet ({status.proposed} proposed, {status.pending} pending)"
        )
    else:
        console.print(leaderboard_table(top, status, metric, complexities, width=console.width))
    return top


def pareto_table(front: list, status: RunStatus, width: int | None = None) -> Table:
    """The Pareto front (``storage.parsimony.pareto_front`` entries whose ``extra`` is a top() row)."""
    table = Table(
        title=f"run {status.run_id} · Pareto front of complexity vs validation {status.metric} ({len(front)} models)",
        title_justify="left",
    )
    table.add_column("size", justify="right")
    table.add_column("validation", justify="right")
    table.add_column("score", justify="right")
    table.add_column("")
    table.add_column("rank", justify="right")
    table.add_column("hash", no_wrap=True)
    table.add_column("formula or program", no_wrap=True)
    _add_rows_fitting(
        table,
        [
            [
                str(e.complexity),
                f"{e.loss:.6g}",
                f"{e.score:.3g}",
                "champion" if e.recommended else "",
                str(e.extra["rank"]),
                e.hash[:10],
                _formula_or_program(e.extra["source"], e.extra["parameters"]),
            ]
            for e in front
        ],
        width,
    )
    table.caption = (
        "score: drop of log(loss) per unit of complexity from the previous entry; champion: the simplest "
        "candidate within one standard error of the best validation score (storage/selection.py)"
    )
    return table


def show_pareto(
    store_path: str | Path | None = None,
    run_id: str | None = None,
    console: Console | None = None,
) -> list:
    """Print the Pareto front of a run (default: the latest) and return its entries."""
    from storage.parsimony import run_front

    store_path = default_store_path() if store_path is None else store_path
    with CandidateStore(store_path, read_only=True) as store:
        run_id, status = _run_and_status(store, store_path, run_id)
        if status.higher_is_better:
            raise StoreError(f"run {run_id} ranks by {status.metric}, higher is better: the Pareto front needs a loss")
        front = run_front(store, run_id)
        choice = champion_of_run(store, run_id)
    # One best model: the front marks the run's champion (the one-standard-error rule), which is
    # always on the front, rather than a second pick of its own.
    front = [dataclasses.replace(e, recommended=choice is not None and e.hash == choice.hash) for e in front]
    console = console or Console()
    if not front:
        console.print(f"run {run_id}: no calibrated candidate with a complexity yet")
    else:
        console.print(pareto_table(front, status, width=console.width))
    return front


__all__ = ["show_leaderboard", "leaderboard_table", "show_pareto", "pareto_table"]
