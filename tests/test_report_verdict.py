"""The verdict in words (issue 30, part 3): one quotable sentence with the same metric and digits
on both sides, every reference the champion loses to named, and which model to use."""

from __future__ import annotations

from flows.report_verdict import best_model_note, headline, metric_label, reference_label


def card(champion: float, scores: dict[str, float], best: str, overall: dict, kind: str = "forecast") -> dict:
    return {
        "kind": kind,
        "metric": "mean_rmse" if kind == "forecast" else "rmse",
        "champion": {"hash": "c" * 16, "test_score": champion, "validation_score": 1.0, "complexity": 36},
        "references": [{"name": n, "test_score": v, "error": None} for n, v in scores.items()],
        "best_reference": best,
        "paired_test": {"overall": overall},
        "pareto_front": [{"hash": "r" * 16, "complexity": 17, "loss": 1.09}],
        "recommended": "r" * 16,
    }


ENSO = {"persistence": 1.217, "damped-persistence": 1.050, "ar-aic": 1.022, "statsmodels-arma21": 2.512}


def test_the_champion_that_loses_is_said_to_lose_to_each_reference():
    report = card(1.0996, ENSO, "ar-aic", {"p_value": 0.126, "mean_diff": 0.158})
    assert headline(report) == (
        "The champion does not beat AR(AIC) on the test years: mean RMSE 1.100 against 1.022 "
        "(Diebold-Mariano p = 0.13). It also scores worse than damped persistence (1.050)."
    )


def test_significance_and_direction_are_both_in_the_words():
    wins = headline(card(0.990, ENSO, "ar-aic", {"p_value": 0.01, "mean_diff": -0.05}))
    assert wins.startswith("The champion beats AR(AIC) on the test years: mean RMSE 0.990 against 1.022")
    assert "also" not in wins
    close = headline(card(1.010, ENSO, "ar-aic", {"p_value": 0.3, "mean_diff": -0.01}))
    assert close.startswith("The champion does not significantly beat AR(AIC)")
    worse = headline(card(1.300, ENSO, "ar-aic", {"p_value": 0.002, "mean_diff": 0.2}))
    assert "significantly worse" in worse and "p = 0.002" in worse
    assert "damped persistence (1.050), persistence (1.217)" in worse  # every one it loses to, best first
    # a test whose squared-error difference points the other way than the mean RMSE shown: not significant
    mixed = headline(card(1.010, ENSO, "ar-aic", {"p_value": 0.01, "mean_diff": 0.01}))
    assert mixed.startswith("The champion does not significantly beat AR(AIC)")


def test_curve_verdict_quotes_the_bootstrap_interval():
    laws = {"sqrt-sei": 0.020, "linear": 0.031}
    text = headline(
        card(0.015, laws, "sqrt-sei", {"low": -0.008, "high": -0.001, "estimate": -0.005, "level": 0.95}, "curve")
    )
    assert text == (
        "The champion beats the square-root (SEI) law on the held-out test data: RMSE 0.015 against 0.020 "
        "(bootstrap interval of the difference, 95%: [-0.008, -0.001])."
    )


def test_the_reference_law_itself_is_no_win_whatever_the_paired_test_says():
    # SEV's Severson run: the champion was the power law calibrated as a candidate; it differed from the
    # reference's own fit in the sixth digit and the bootstrap interval, [-0.0000, -0.0000], excluded 0
    laws = {"power-law": 0.050700, "linear": 0.090}
    same = card(0.0506998, laws, "power-law", {"low": -2e-7, "high": -1e-8, "estimate": -1e-7, "level": 0.95}, "curve")
    text = headline(same)
    assert text.startswith(
        "The champion scores as the power law does on the held-out test data: RMSE 0.051 against 0.051"
    )
    assert "does not beat it" in text and "beats the power law" not in text
    # just past the margin (0.1% of the reference's score), the paired test decides again
    apart = card(0.0506, laws, "power-law", {"low": -2e-4, "high": -1e-5, "estimate": -1e-4, "level": 0.95}, "curve")
    assert headline(apart).startswith("The champion beats the power law")


def test_the_suite_counts_a_practically_equal_champion_as_a_tie():
    from pipeline_bench.discovery import _significance

    row = {"champion_test": 0.0506998, "best_reference_test": 0.0507, "paired": {"low": -2e-7, "high": -1e-8}}
    assert _significance(row) == "tie"
    assert _significance({**row, "champion_test": 0.0506}) == "better"
    assert _significance({**row, "champion_test": 0.06, "paired": {"low": 0.001, "high": 0.01}}) == "worse"


def test_labels_and_which_model_to_use():
    assert metric_label("mean_rmse") == "mean RMSE" and reference_label("ar-aic") == "AR(AIC)"
    report = card(1.05, ENSO, "ar-aic", {"p_value": 0.2, "mean_diff": 0.01})
    assert "Two models answer" in best_model_note(report) and "complexity 17" in best_model_note(report)
    report["recommended"] = report["champion"]["hash"]
    assert best_model_note(report).startswith("One best model: the champion `cccccccccc` is the Pareto front's")
