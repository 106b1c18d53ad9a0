"""The report card on MLflow: ``report.md`` and ``report.json`` on the run's parent run, the card's
plots (the test years, RMSE per lead; for curves the held-out cells), and on each logged entry's nested run its formula and,
for the champion, its standard errors as metrics."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from flows.report_render import formula_markdown, report_json, report_markdown
from flows.report_verdict import reference_label


def report_plots(report: dict[str, Any], folder: Path) -> list[Path]:
    """The card's plots as PNG files in ``folder``: the test years (observations, the champion and
    the best reference, forecasts) and the champion's error per lead against every reference; for
    curves, the test rows of each held-out cell (``test_cells.png``)."""
    from storage.plots import plot_per_lead, plot_test_cells, plot_test_years

    out = []
    if report.get("test_series"):
        ts = report["test_series"]
        out.append(
            plot_test_years(
                ts["panels"],
                folder / "test_years.png",
                time_label=ts["time_label"],
                y_label=ts["y_label"],
                title=f"{report['dataset']}: the test years, champion vs {reference_label(report['best_reference'])}",
            )
        )
    if report.get("test_cells"):  # curves: one panel per held-out cell (flows.report._test_cells)
        tc = report["test_cells"]
        which = "held-out cells" if tc["held_out_cells"] else "cells (their later rows)"
        shown = len(tc["panels"])
        count = f"{tc['cells']} {which}" + (f", {shown} shown" if shown < tc["cells"] else "")
        out.append(
            plot_test_cells(
                tc["panels"],
                folder / "test_cells.png",
                x_label=tc["x_label"],
                y_label=tc["y_label"],
                title=f"{report['dataset']}: the test split, {count}: champion vs "
                f"{reference_label(report['best_reference'])}",
            )
        )
    per_lead = report.get("per_lead")
    if isinstance(per_lead, dict) and "champion" in per_lead:
        series = {("champion" if k == "champion" else reference_label(k)): v for k, v in per_lead.items()}
        out.append(
            plot_per_lead(
                series,
                folder / "rmse_per_lead.png",
                metric="RMSE",
                title=f"{report['dataset']}: RMSE per lead on the test years, champion vs every reference",
            )
        )
    return out


def log_report(tracker: Any, store: Any, run_id: str, report: dict[str, Any]) -> None:
    """report.md + report.json on the parent run; on every logged entry's nested run a ``formula``
    tag and ``formula.tex``; the champion's standard errors as ``stderr_<param>`` metrics."""
    import tempfile

    from storage.formula import render
    from storage.plots import plot_formula

    client, parent = tracker.client, tracker.parent_run_id
    with tempfile.TemporaryDirectory() as tmp:
        Path(tmp, "report.md").write_text(report_markdown(report))
        Path(tmp, "report.json").write_text(report_json(report))
        if parent is not None:
            client.log_artifact(parent, str(Path(tmp, "report.md")))
            client.log_artifact(parent, str(Path(tmp, "report.json")))
            client.set_tag(parent, "verdict", report["verdict"][:5000])
        logged = store.logged(run_id)
        champion = report["champion"]["hash"]
        plots = Path(tmp, "plots")
        plots.mkdir()
        for path in report_plots(report, plots):
            for run in {parent, logged.get(champion)} - {None}:
                client.log_artifact(run, str(path), "plots")
        for digest, nested in logged.items():
            row = store.evaluation(run_id, digest)
            source = store.candidate(digest)["source"]
            plain = {k: v for k, v in row["parameters"].items() if "/" not in k}
            formula = render(source, plain)
            client.set_tag(nested, "formula", (formula.text if formula.ok else formula.reason)[:5000])
            entry_dir = Path(tmp, digest)
            entry_dir.mkdir()
            if formula.ok:
                path = entry_dir / "formula.tex"
                path.write_text(formula.latex + "\n")
                client.log_artifact(nested, str(path))
                # previewable in the UI: the image and the Markdown (text, LaTeX, program)
                client.log_artifact(nested, str(plot_formula(formula.text, entry_dir / "formula.png", title=digest)))
            (entry_dir / "formula.md").write_text(formula_markdown(digest, formula, source))
            client.log_artifact(nested, str(entry_dir / "formula.md"))
            if digest == champion:
                from mlflow.entities import Metric

                stamp = int(__import__("time").time() * 1000)
                metrics = []
                for group, se in report["champion"]["stderr"].items():
                    if not isinstance(se, dict) or "stderr" not in se:
                        continue
                    prefix = "stderr_" if group == "None" else f"stderr_{group}_"
                    metrics += [
                        Metric(f"{prefix}{name}", float(v), stamp, 0)
                        for name, v in se["stderr"].items()
                        if v is not None and math.isfinite(v)
                    ]
                for start in range(0, len(metrics), 500):
                    client.log_batch(nested, metrics=metrics[start : start + 500])
