"""The leaderboard and the Pareto front in a narrow terminal (issue 30, part 2): at 80 columns
every score is printed whole, every column has a label, and every formula is printed in full
under the table (wrapped, never cut)."""

from __future__ import annotations

import re

import numpy as np
import pytest
from rich.console import Console

import ndvm

if not hasattr(ndvm, "compile"):
    pytest.skip("the ndvm runtime (ndvm.compile) is not built yet", allow_module_level=True)

from storage import CandidateStore, EvaluationResult  # noqa: E402
from storage.leaderboard import _formula_or_program, show_leaderboard, show_pareto  # noqa: E402

# long formulas on purpose: the old table cut them after a few words at 80 columns
PROGRAMS = [
    "(param a 0.5) (param b 1.5) (param c 0.25) (param d 2.0) (+ a (* b x) (* c x x) (* d (exp (- x))))",
    "(param a 0.5) (param b 1.5) (param c 0.7) (+ a (* b (tanh (* c x))) (* 0.125 (sin x)))",
    "(param a 0.5) (* a x)",
]
SCORES = [0.123456789, 1.0987654321, 12.3456789]


def _squash(text: str) -> str:
    return re.sub(r"\s+", "", text)


@pytest.fixture
def store_path(tmp_path):
    path = tmp_path / "candidates.duckdb"
    with CandidateStore(path) as store:
        store.start_run(
            "r", dataset="toy", task="curve", metric="mean_rmse", probe_inputs={"x": np.linspace(0.1, 3.0, 5)}
        )
        new = store.add(PROGRAMS, "r")
        assert len(new) == 3
        store.record(
            [
                EvaluationResult(
                    c.hash,
                    "r",
                    "toy",
                    "curve",
                    "validation",
                    {p: 0.1 * (i + 1) for p in "abcd"},
                    {"loss": 1.0},
                    {"mean_rmse": s},
                    0.01,
                )
                for i, (c, s) in enumerate(zip(new, SCORES, strict=True))
            ]
        )
    return path


def test_leaderboard_at_80_columns_shows_every_score_and_formula_whole(store_path):
    console = Console(record=True, width=80)
    top = show_leaderboard(store_path, run_id="r", console=console)
    text = console.export_text()
    table = text.split("ranked by")[0]  # the note under it is one soft-wrapped line: the terminal wraps it
    assert max(len(line) for line in table.splitlines()) <= 80
    for score in SCORES:
        assert f"{score:.6g}" in text  # whole, not "0.12…"
    assert "…" not in table
    for label in ("#", "hash", "validation mean_rmse", "test mean_rmse", "size", "origin"):
        assert _squash(label) in _squash(table)
    for row in top.iter_rows(named=True):
        assert _squash(_formula_or_program(row["source"], row["parameters"])) in _squash(text)


def test_pareto_at_80_columns_labels_every_column(store_path):
    console = Console(record=True, width=80)
    front = show_pareto(store_path, run_id="r", console=console)
    text = console.export_text()
    header = next(line for line in text.splitlines() if "size" in line and "hash" in line)
    cells = [c.strip() for c in re.split(r"[┃│]", header)[1:-1]]
    assert cells and all(cells), f"an unlabeled column: {cells}"
    assert "…" not in text.split("formulas")[0]
    for e in front:
        assert f"{e.loss:.6g}" in text
        assert _squash(_formula_or_program(e.extra["source"], e.extra["parameters"])) in _squash(text)
