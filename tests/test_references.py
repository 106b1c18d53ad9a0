"""Forecast references (issue 31 parts 1 and 6): the references as candidate programs, fitted to
the task's own series, seeding every run; stable ARMA fits or a reported failure.

Real tasks on the embedded ENSO data and on user series; real discovery runs on a real store.
"""

from __future__ import annotations

import duckdb
import numpy as np
import polars as pl
import pytest

import datasets
from datasets.tasks import forecast as fc
from datasets.tasks import make_task, ndvm_available
from flows.report_tests import BY_LEAD

needs_ndvm = pytest.mark.skipif(not ndvm_available(), reason="the ndvm runtime (ndvm.compile/calibrate) is not built")


def _declared(task, source, name):
    """The reference program at its declared (training-fitted) starting values, uncalibrated."""
    program = task.compile(source)
    return task.restore_fit(source, {p.name: p.init for p in program.params}, name)


def _user_series(tmp_path, n=360, mean=50.0, period=None, seed=0):
    """An AR(1) series around ``mean`` (plus a seasonal cycle of ``period`` points when given)."""
    rng = np.random.default_rng(seed)
    x = np.zeros(n)
    for t in range(1, n):
        x[t] = 0.8 * x[t - 1] + rng.normal()
    y = mean + x + (5.0 * np.sin(2 * np.pi * np.arange(n) / period) if period else 0.0)
    path = tmp_path / "series.csv"
    pl.DataFrame({"t": np.arange(float(n)), "v": y}).write_csv(path)
    return make_task(datasets.load(path, x="t", y="v"), kind="forecast")


@needs_ndvm
def test_reference_programs_are_the_references_fitted_to_the_series():
    task = make_task(datasets.load("enso"))
    programs = dict(task.reference_programs())
    assert len(programs) == 3 and any(n.startswith("seasonal-ar-program (period 12)") for n in programs)
    refs = {r["model"]: r for r in task.score_references("validation")}
    for source in programs.values():
        task.check_candidate(source)
    ar_name = next(n for n in programs if n.startswith("ar-aic-program"))
    p = len(fc._ar_fit_aic(task.y[: task.n_train])) - 1
    assert ar_name == f"ar-aic-program (AR({p}))"
    # at their declared values the programs forecast exactly as the numpy references do
    ar = task.score(_declared(task, programs[ar_name], ar_name), "validation")
    assert ar["mean_rmse"] == pytest.approx(refs["ar-aic"]["mean_rmse"], rel=1e-9)
    assert np.allclose(ar["rmse_by_lead"], refs["ar-aic"]["rmse_by_lead"], rtol=1e-9)
    damped = task.score(_declared(task, programs["damped-persistence-program"], "damped"), "validation")
    assert damped["mean_rmse"] == pytest.approx(refs["damped-persistence"]["mean_rmse"], rel=1e-9)


@needs_ndvm
def test_seasonal_ar_program_forecasts_the_multiplicative_seasonal_recursion():
    task = make_task(datasets.load("enso"))
    name, source = task.reference_programs()[2]
    mean, phi, sphi = fc._seasonal_ar_fit(task.y[: task.n_train], 12)
    assert abs(phi) > 0.5  # a persistent series: the fit is not a degenerate zero
    forecasts = task.forecasts(_declared(task, source, name), "validation")
    # the same recursion in numpy: x[t+1] = phi x[t] + Phi x[t-11] - phi Phi x[t-12], x = y - mean
    x = task.y[: task.split_end["validation"]] - mean
    for row, t in enumerate(task.origins("validation")[:30]):
        path = list(x[: t + 1])
        for k in range(task.leads):
            n = len(path)
            path.append(phi * path[n - 1] + sphi * path[n - 12] - phi * sphi * path[n - 13])
            assert forecasts[row, k] == pytest.approx(mean + path[-1], abs=1e-9)


def test_damped_persistence_decays_toward_the_series_own_mean(tmp_path):
    task = _user_series(tmp_path, mean=50.0)
    mean, phi = task.fit_reference(next(r for r in task.reference_models() if r.name == "damped-persistence"))
    assert mean == pytest.approx(np.mean(task.y[: task.n_train])) and 45 < mean < 55 and 0.5 < phi < 0.95
    rows = {r["model"]: r for r in task.score_references("validation")}
    # toward 0 the forecasts of a series around 50 were off by ~50; toward its mean they beat persistence
    assert rows["damped-persistence"]["mean_rmse"] < rows["persistence"]["mean_rmse"] < 5
    # a series without a period gets no seasonal references
    assert task.reference_period() is None and not any(r.name.startswith("sarima") for r in task.reference_models())
    assert [n for n, _ in task.reference_programs()] == [
        next(n for n, _ in task.reference_programs() if n.startswith("ar-aic-program")),
        "damped-persistence-program",
    ]


def test_a_stable_arma_fit_recovers_the_process_and_a_degenerate_one_fails():
    rng = np.random.default_rng(3)
    n, e = 600, rng.normal(size=601)
    y = np.zeros(n)
    for t in range(2, n):
        y[t] = 0.6 * y[t - 1] + 0.2 * y[t - 2] + e[t] + 0.4 * e[t - 1]
    order, seasonal, params = fc._sarimax_fit(y + 3.0)
    value = dict(zip(fc._sarimax_model(y, order, seasonal).param_names, params))
    assert value["ma.L1"] == pytest.approx(0.4, abs=0.15) and value["ar.L1"] + value["ar.L2"] == pytest.approx(
        0.8, abs=0.1
    )
    assert fc._sarimax_worst_root(list(value), params)[0] < fc.ROOT_MARGIN
    # Nino 1+2: every start ends with the MA root on the unit circle
    task = make_task(datasets.load("enso"))
    with pytest.raises(fc.ReferenceFitError, match=r"SARIMAX\(2, 0, 1\).*MA inverse root of modulus 1\.0"):
        fc._sarimax_fit(task.y[: task.n_train].copy())
    errors = {e.name: e for e in task.reference_test_errors("test", only={"statsmodels-arma21", "ar-aic"})}
    assert errors["statsmodels-arma21"].error.startswith("reference fit failed") and errors["ar-aic"].error is None
    assert errors["statsmodels-arma21"].primary() == np.inf


def test_inverse_root_modulus():
    assert fc._inverse_root_modulus([0.5], ma=False) == pytest.approx(0.5)
    assert fc._inverse_root_modulus([-0.986], ma=True) == pytest.approx(0.986)
    # complex pair of an AR(2): modulus sqrt(-a2)
    assert fc._inverse_root_modulus([1.885, -0.899], ma=False) == pytest.approx(np.sqrt(0.899))
    assert fc._inverse_root_modulus([], ma=True) == 0.0


@pytest.mark.heavy  # (a discovery run of its own: make test-heavy, run by CI)
# ---------------------------------------------------------------------------- every run starts from them
@needs_ndvm
def test_every_run_is_seeded_with_the_reference_programs_and_never_scores_worse(tmp_path):
    from flows.cli_display import references_line
    from flows.discover import Budget, build_config, run_discovery

    settings = dict(serial=True, batch_size=8, steps=30, restarts=2, top_k=1, test_top_k=1, log_every=3600.0)
    config = build_config("enso", "mutation", seed=5, fresh=True, folder=str(tmp_path), **settings)
    report = run_discovery(config, Budget(minutes=None, max_candidates=8))
    assert report.status == "finished" and report.pending == 0
    task = make_task(datasets.load("enso"))
    con = duckdb.connect(str(tmp_path / "candidates.duckdb"), read_only=True)
    try:
        rows = con.execute(
            "SELECT c.source, e.status, e.score FROM proposals p JOIN candidates c ON c.hash = p.hash "
            "JOIN evaluations e ON e.candidate = p.hash AND e.run_id = p.run_id "
            "WHERE p.run_id = ? AND p.origin = 'reference' AND p.outcome = 'new'",
            [report.run_id],
        ).fetchall()
        best = con.execute("SELECT min(score) FROM evaluations WHERE run_id = ? AND status = 'ok'", [report.run_id])
        best = best.fetchall()[0][0]
        new = con.execute(
            "SELECT count(*) FROM proposals WHERE run_id = ? AND outcome = 'new' AND origin <> 'reference'",
            [report.run_id],
        ).fetchall()[0][0]
    finally:
        con.close()
    assert sorted(source for source, _, _ in rows) == sorted(source for _, source in task.reference_programs())
    assert all(status == "ok" and np.isfinite(score) for _, status, score in rows)
    assert best <= min(score for _, _, score in rows)  # the run's best is never worse than a reference's
    assert new == 8  # the references do not take the candidate budget
    # 8 candidates and the three references (AR(AIC), damped persistence, seasonal AR: monthly data)
    assert report.new == 8 + 3 and report.library_seeds == []
    # the report names them as the task does, in its order, with their validation scores
    names = [name for name, _ in task.reference_programs()]
    assert [r["name"] for r in report.reference_programs] == names
    assert sorted(r["score"] for r in report.reference_programs) == pytest.approx(sorted(s for _, _, s in rows))
    assert all(r["status"] == "ok" for r in report.reference_programs)
    line = references_line(report.to_dict())
    assert line.startswith("references: started from 3 reference programs of the task (validation mean_rmse)")
    for ref in report.reference_programs:
        assert f"{ref['name']} {ref['score']:.5g}" in line


# ---------------------------------------------------------------------------- the verdict's figures
def test_the_paired_test_uses_the_headline_origins_and_compares_like_with_like():
    from datasets.tasks.base import Errors

    rng = np.random.default_rng(2)
    n, leads = 60, 4
    a, b = rng.normal(0, 1.0, (n, leads)), rng.normal(0, 1.0, (n, leads))
    for k in range(1, leads):  # the last origins' later targets lie past the end of the split
        a[n - k :, k] = b[n - k :, k] = np.nan
    champion, reference = Errors("champion", "forecast", values=a), Errors("ar", "forecast", values=b)
    test = BY_LEAD.run(champion, reference)
    o = test["overall"]
    per_lead_mse = lambda e: [np.nanmean(e[:, k] ** 2) for k in range(leads)]  # noqa: E731
    # every origin of the headline RMSE; the mean differential is the mean over leads of the MSE difference
    assert o["n"] == n and o["h"] == leads
    assert o["mse_champion"] == pytest.approx(np.mean(per_lead_mse(a)), rel=1e-12)
    assert o["mse_reference"] == pytest.approx(np.mean(per_lead_mse(b)), rel=1e-12)
    assert o["mean_diff"] == pytest.approx(o["mse_champion"] - o["mse_reference"], rel=1e-12)
    # the headline is the mean over leads of the square roots of the same per-lead MSEs
    assert champion.primary() == pytest.approx(np.mean(np.sqrt(per_lead_mse(a))), rel=1e-12)
    text = BY_LEAD.verdict(champion, reference, test)
    assert f"same {n} forecast origins" in text and f"{o['mse_champion']:.4g} vs {o['mse_reference']:.4g}" in text


def test_the_verdict_says_when_mean_rmse_and_mean_mse_disagree():
    from datasets.tasks.base import Errors

    rng = np.random.default_rng(4)
    z = rng.normal(size=(200, 2))
    z /= np.sqrt(np.mean(z**2, axis=0))  # unit RMS per lead
    # champion: much better at the small-error lead 1, a little worse at the large-error lead 2
    a = z * np.array([0.1, 3.3])
    b = z * np.array([1.0, 3.0])
    champion, reference = Errors("champion", "forecast", values=a), Errors("ar", "forecast", values=b)
    assert champion.primary() < reference.primary()  # (0.1 + 3.3) / 2 < (1 + 3) / 2
    test = BY_LEAD.run(champion, reference)
    assert test["overall"]["mean_diff"] > 0  # (0.01 + 10.89) / 2 > (1 + 9) / 2
    assert "order the two models differently" in BY_LEAD.verdict(champion, reference, test)
