"""What the report card adds to MLflow (issue 30, part 4): the test-years plot, the per-lead RMSE
plot and the previewable formula (formula.md, formula.png), built from a card's own numbers."""

from __future__ import annotations

import numpy as np
import pytest

import ndvm

if not hasattr(ndvm, "compile"):
    pytest.skip("the ndvm runtime (ndvm.compile) is not built yet", allow_module_level=True)

from flows.report import _test_cells  # noqa: E402
from flows.report_mlflow import report_plots  # noqa: E402
from flows.report_render import formula_markdown  # noqa: E402
from storage.formula import render  # noqa: E402
from storage.plots import is_png, plot_formula  # noqa: E402


def test_report_plots_are_pngs_of_the_cards_numbers(tmp_path):
    t = np.arange(2010, 2015, 1 / 12)
    panel = {"lead": 1, "time": t.tolist(), "observed": np.sin(t).tolist()}
    panel["models"] = {"champion": (np.sin(t) + 0.1).tolist(), "AR(AIC) (best reference)": np.cos(t).tolist()}
    report = {
        "dataset": "enso",
        "best_reference": "ar-aic",
        "test_series": {"panels": [panel, {**panel, "lead": 12}], "time_label": "t", "y_label": "anom_c"},
        "per_lead": {"champion": [0.4, 0.7, 1.0], "ar-aic": [0.45, 0.7, 0.9], "persistence": [0.5, 0.8, 1.2]},
    }
    paths = report_plots(report, tmp_path)
    assert [p.name for p in paths] == ["test_years.png", "rmse_per_lead.png"]
    assert all(is_png(p) and p.stat().st_size > 5000 for p in paths)
    # a panel whose model has another length than its times is an error, not a silent plot
    panel["models"]["champion"] = [0.0]
    with pytest.raises(ValueError, match="champion"):
        report_plots(report, tmp_path)


def test_formula_previews(tmp_path):
    source = "(param a 0.5) (param k 0.2 positive) (* a (exp (- (* k x))))"
    formula = render(source, {"a": 1.5, "k": 0.25})
    assert formula.ok
    md = formula_markdown("abc123", formula, source)
    assert f"```latex\n{formula.latex}\n```" in md and f"```scheme\n{source}\n```" in md
    # the text formula one definition per line (the UI's preview cuts a long line)
    text = md.split("```text\n", 1)[1].split("\n```", 1)[0].splitlines()
    assert text == [part.strip() for part in formula.text.split(";")] and all(len(line) < 100 for line in text)
    png = plot_formula(formula.text, tmp_path / "formula.png", title="abc123")
    assert is_png(png)
    # a forecast candidate's formula: state, init, predict and update each on its own line
    from datasets.tasks.forecast import AR2_SOURCE

    md = formula_markdown("ar2", render(AR2_SOURCE, {"a1": 0.9, "a2": -0.1}), AR2_SOURCE)
    text = md.split("```text\n", 1)[1].split("\n```", 1)[0].splitlines()
    assert text == [
        "state s = (s_0, s_1)",
        "init = (0.0, 0.0)",
        "predict(s) = 0.9*s_0 - 0.1*s_1",
        "update(s, y) = (y, s_0)",
    ]


def test_curves_get_one_test_panel_per_held_out_cell(tmp_path):
    """Curves: the test-cells plot has a panel per whole held-out test cell, named by the cell, with
    the rows it was fitted on, its scored rows and the champion's and best reference's predictions
    of them (observations + the errors the paired test uses), at most 150 points per part."""
    import datasets
    from datasets.tasks import make_task

    task = make_task(
        datasets.load("battery-synthetic", n_cells=14, n_cycles=600, test_cells="synthetic-03,synthetic-11")
    )
    assert task.test_groups() == ["synthetic-03", "synthetic-11"]
    errors = {e.name: e for e in task.reference_test_errors("test", only={"power-law", "linear"})}
    champion, best = errors["power-law"], errors["linear"]
    champion.name = "champion"
    cells = _test_cells(task, "test", champion, best)
    assert cells["held_out_cells"] and cells["cells"] == 2
    assert [p["group"] for p in cells["panels"]] == ["synthetic-03", "synthetic-11"]
    rows = task.scored_rows("test")
    for panel in cells["panels"]:
        group = panel["group"]
        x, y = rows[group]["x"], rows[group]["y"]
        assert x.size > 150 and len(panel["x"]) == 150 and panel["x"][0] == x[0] and panel["x"][-1] == x[-1]
        assert min(panel["x"]) > max(panel["fit_x"])  # a held-out cell: fitted on its early cycles
        assert 1 < x[0] < 600 and y.size == champion.groups[group].size  # cycles in the data's units
        keep = np.searchsorted(x, panel["x"])
        np.testing.assert_allclose(panel["observed"], y[keep])
        np.testing.assert_allclose(panel["models"]["champion"], (y + champion.groups[group])[keep])
        np.testing.assert_allclose(panel["models"]["the linear model (best reference)"], (y + best.groups[group])[keep])
        assert panel["rmse"]["champion"] == pytest.approx(np.sqrt(np.mean(champion.groups[group] ** 2)))
    report = {"dataset": "battery-synthetic", "best_reference": "linear", "test_cells": cells}
    [path] = report_plots(report, tmp_path)
    assert path.name == "test_cells.png" and is_png(path) and path.stat().st_size > 20_000
    # without whole held-out cells, every cell's later rows are drawn (at most 48 panels)
    plain = make_task(datasets.load("battery-synthetic", n_cells=60, n_cycles=120))
    errors = {e.name: e for e in plain.reference_test_errors("test", only={"power-law", "linear"})}
    cells = _test_cells(plain, "test", errors["power-law"], errors["linear"])
    assert not cells["held_out_cells"] and cells["cells"] == 60 and len(cells["panels"]) == 48
    names = [p["group"] for p in cells["panels"]]
    assert names[0] == "synthetic-00" and names[-1] == "synthetic-59" and len(set(names)) == 48
    # a forecast's errors (by origin and lead) have no cells to draw
    from datasets.tasks import Errors

    assert _test_cells(task, "test", Errors("c", "forecast", values=np.zeros((3, 2))), best) is None
