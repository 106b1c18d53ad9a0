"""What the report card adds to MLflow (issue 30, part 4): the test-years plot, the per-lead RMSE
plot and the previewable formula (formula.md, formula.png), built from a card's own numbers."""

from __future__ import annotations

import numpy as np
import pytest

import ndvm

if not hasattr(ndvm, "compile"):
    pytest.skip("the ndvm runtime (ndvm.compile) is not built yet", allow_module_level=True)

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
    assert formula.text in md and f"$$\n{formula.latex}\n$$" in md and "```scheme" in md
    png = plot_formula(formula.text, tmp_path / "formula.png", title="abc123")
    assert is_png(png)
