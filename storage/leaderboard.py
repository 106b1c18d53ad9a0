"""``ndvm leaderboard [--run ID] [--pareto]``: the best candidates of a run, as a rich table.

Each entry shows its scores, complexity (``storage.parsimony``) and origin in a table whose
score columns are never cut (at 80 columns too); under the table, each entry's formula with the
fitted values (``storage.formula``; the program text when it has no formula), in full.
``--pareto`` shows the Pareto front of complexity vs validation loss instead, with the
recommended model marked.

The CLI calls ``show_leaderboard(store_path, run_id=..., k=..., metric=...)`` (the store path
defaults to ``storage.default_store_path()``, ``runs/candidates.duckdb``); it opens the store
read-only, or, while a discovery run holds the file, the snapshot that run keeps current
(``storage.store.open_for_reading``), and says so.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import polars as pl
from rich.console import Console
from rich.table import Table

from storage.selection import champion_of_run
from storage.store import CandidateStore, RunStatus, StoreError, default_store_path, open_for_reading


def _short(text: str, width: int) -> str:
    one_line = " ".join(text.split())
    return one_line if len(one_line) <= width else one_line[: width - 1] + "…"


def _formula_or_program(source: str, parameters: str | None) -> str:
    from storage.formula import render

    values = {k: v for k, v in json.loads(parameters or "{}").items() if "/" not in k}
    formula = render(source, values)
    return formula.text if formula.ok else " ".join(source.split())


# Hashes are shown whole (16 hex digits): the name of the entry's MLflow run and what
# `ndvm report` prints, so it can be searched for.
HASH_SHOWN = 16


def _number_column(table: Table, header: str, values: list[str]) -> None:
    """A right-aligned column that rich may never cut: its width is at least its widest value
    (the header wraps at its spaces, each word whole), so at 80 columns every score stays readable."""
    widest = max([1, *(len(v) for v in values), *(len(word) for word in header.split())])
    table.add_column(header, justify="right", min_width=widest)


def _formulas(numbered: list[tuple[str, str, str]]) -> Table:
    """The formulas in full under the table, one entry per line (wrapped, never cut):
    (label, hash, formula) triples."""
    grid = Table.grid(padding=(0, 1))
    grid.add_column(justify="right", no_wrap=True)
    grid.add_column(no_wrap=True)
    grid.add_column(overflow="fold")
    for label, digest, text in numbered:
        grid.add_row(label, digest[:HASH_SHOWN], text)
    return grid


def leaderboard_table(
    top: pl.DataFrame,
    status: RunStatus,
    metric: str | None = None,
    complexities: dict[str, int | None] | None = None,
    width: int | None = None,
) -> Table:
    """Render ``CandidateStore.top`` rows of a run as a rich Table: rank, hash, scores, size and
    origin; the formulas go under it in full (``leaderboard_formulas``)."""
    metric_name = metric or status.metric
    title = (
        f"run {status.run_id} ({status.status}) · {status.dataset or '?'} / {status.task or '?'} · "
        f"{status.proposed} proposed, {status.new} new, {status.duplicates} duplicates, "
        f"{status.invalid} invalid, {status.calibrated} calibrated, {status.failed} failed, "
        f"{status.pending} pending"
    )
    table = Table(title=title, title_justify="left")
    complexities = complexities or {}
    rows = list(top.iter_rows(named=True))
    ranks = [str(r["rank"]) for r in rows]
    scores = [f"{r['score']:.6g}" for r in rows]
    tests = ["-" if r.get("test_score") is None else f"{r['test_score']:.6g}" for r in rows]
    sizes = ["-" if complexities.get(r["hash"]) is None else str(complexities[r["hash"]]) for r in rows]
    _number_column(table, "#", ranks)
    table.add_column("hash", no_wrap=True, min_width=HASH_SHOWN)
    _number_column(table, f"validation {metric_name}" if "." not in metric_name else metric_name, scores)
    _number_column(table, f"test {status.metric}", tests)  # scored once at the end of the run; never ranks
    _number_column(table, "size", sizes)
    table.add_column("origin", overflow="ellipsis", no_wrap=True, max_width=24)
    for i, r in enumerate(rows):
        table.add_row(ranks[i], r["hash"][:HASH_SHOWN], scores[i], tests[i], sizes[i], r["origin"] or "")
    return table


def leaderboard_note(status: RunStatus, metric: str | None = None) -> str:
    """What the leaderboard's columns mean (printed under the table at the console's width: as a
    caption it would wrap to the narrow table)."""
    if metric is not None:
        return f"ranked by {metric}; size: complexity (atoms of the program)"
    return (
        f"ranked by validation {status.metric} ({'higher' if status.higher_is_better else 'lower'} "
        f"is better); test: {status.metric} on the test split, scored once when the run finished "
        "(final top k only), never used to rank; size: complexity (atoms of the program)"
    )


def leaderboard_formulas(top: pl.DataFrame) -> Table:
    """Each entry's formula with its fitted values (the program text when it has none), in full."""
    return _formulas(
        [
            (f"#{r['rank']}", r["hash"], _formula_or_program(r["source"], r["parameters"]))
            for r in top.iter_rows(named=True)
        ]
    )


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
    formulas: bool = True,
) -> pl.DataFrame:
    """Print the top ``k`` candidates of ``run_id`` (default: the latest run) and return them."""
    store_path = default_store_path() if store_path is None else store_path
    store, note = open_for_reading(store_path)
    with store:
        run_id, status = _run_and_status(store, store_path, run_id)
        top = store.top(k, metric=metric, run_id=run_id)
        complexities = store.complexities(top.get_column("hash").to_list()) if not top.is_empty() else {}
    console = console or Console()
    if note:
        console.print(f"[dim]{note}[/]")
    if top.is_empty():
        console.print(
            f"run {run_id}: no calibrated candidate yet ({status.proposed} proposed, {status.pending} pending)"
        )
    else:
        console.print(leaderboard_table(top, status, metric, complexities, width=console.width))
        console.print(leaderboard_note(status, metric), style="dim", soft_wrap=True)
        if formulas:
            console.print("[bold]formulas[/] (fitted values; `ndvm report` has the LaTeX and standard errors)")
            console.print(leaderboard_formulas(top))
    return top


def pareto_table(front: list, status: RunStatus, width: int | None = None) -> Table:
    """The Pareto front (``storage.parsimony.pareto_front`` entries whose ``extra`` is a top() row);
    the formulas go under it in full (``pareto_formulas``)."""
    table = Table(
        title=f"run {status.run_id} · Pareto front of complexity vs validation {status.metric} ({len(front)} models)",
        title_justify="left",
    )
    sizes = [str(e.complexity) for e in front]
    losses = [f"{e.loss:.6g}" for e in front]
    scores = [f"{e.score:.3g}" for e in front]
    ranks = [str(e.extra["rank"]) for e in front]
    _number_column(table, "size", sizes)
    _number_column(table, f"validation {status.metric}", losses)
    _number_column(table, "score", scores)
    table.add_column("choice", no_wrap=True, min_width=8)
    _number_column(table, "rank", ranks)
    table.add_column("hash", no_wrap=True, min_width=HASH_SHOWN)
    for i, e in enumerate(front):
        table.add_row(
            sizes[i], losses[i], scores[i], "champion" if e.recommended else "", ranks[i], e.hash[:HASH_SHOWN]
        )
    return table


PARETO_NOTE = (
    "size: complexity; score: drop of log(loss) per unit of complexity from the previous entry; "
    "choice: the champion, the simplest candidate within one standard error of the best validation "
    "score (storage/selection.py); rank: on the leaderboard"
)


def pareto_formulas(front: list) -> Table:
    """Each front entry's formula in full, labeled by its size."""
    return _formulas(
        [(f"size {e.complexity}", e.hash, _formula_or_program(e.extra["source"], e.extra["parameters"])) for e in front]
    )


def show_pareto(
    store_path: str | Path | None = None,
    run_id: str | None = None,
    console: Console | None = None,
) -> list:
    """Print the Pareto front of a run (default: the latest) and return its entries."""
    from storage.parsimony import run_front

    store_path = default_store_path() if store_path is None else store_path
    store, note = open_for_reading(store_path)
    with store:
        run_id, status = _run_and_status(store, store_path, run_id)
        if status.higher_is_better:
            raise StoreError(f"run {run_id} ranks by {status.metric}, higher is better: the Pareto front needs a loss")
        front = run_front(store, run_id)
        choice = champion_of_run(store, run_id)
    # One best model: the front marks the run's champion (the one-standard-error rule), which is
    # always on the front, rather than a second pick of its own.
    front = [dataclasses.replace(e, recommended=choice is not None and e.hash == choice.hash) for e in front]
    console = console or Console()
    if note:
        console.print(f"[dim]{note}[/]")
    if not front:
        console.print(f"run {run_id}: no calibrated candidate with a complexity yet")
    else:
        console.print(pareto_table(front, status, width=console.width))
        console.print(PARETO_NOTE, style="dim", soft_wrap=True)
        console.print("[bold]formulas[/] (fitted values)")
        console.print(pareto_formulas(front))
    return front


__all__ = [
    "show_leaderboard",
    "leaderboard_table",
    "leaderboard_formulas",
    "leaderboard_note",
    "show_pareto",
    "pareto_table",
    "pareto_formulas",
]
