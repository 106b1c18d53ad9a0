"""Forecast inputs beyond the series: the calendar position and declared covariates, passed to
``(update s y x)``, each revealed only up to the forecast origin; the SOI parsers and the Niño 3.4
loader's ``soi`` covariate."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from conftest import needs_shared, shared_data_dir

import datasets
from datasets import enso
from datasets.schema import Dataset
from datasets.tasks import CandidateError, TaskError, make_task, ndvm_available
from datasets.tasks import forecast as fc
from proposers.datacard import card_text

RAW = shared_data_dir() / "enso" / "raw"
needs_ndvm = pytest.mark.skipif(not ndvm_available(), reason="the ndvm runtime (ndvm.compile/calibrate) is not built")
needs_soi = needs_shared("enso/raw/psl_nino34.long.data.txt", "enso/raw/cpc_soi.txt")

# No parameters: the state is x itself, and the forecast reads it back (100 x calendar + covariate),
# so every forecast shows which calendar and which covariate value the driver passed.
ECHO_X = """(define (init) (vec 0.0 0.0))
(define (predict s) (+ (* 100.0 (ref s 0)) (ref s 1)))
(define (update s y x) x)"""

# The seasonal AR(1) seed with the calendar month from x instead of its own month counter.
SEASONAL_AR1_X = """(param phi 0.9 (between -1 1))
(param amp 0.05)
(param phase 0.0)
(define (init) (list 0.0 1))
(define (rho m) (- phi (* amp (cos (+ phase (* 0.5235987755982988 m))))))
(define (predict s) (* (rho (cadr s)) (car s)))
(define (update s y x) (list y (ref x 0)))"""

# AR(1) plus the SOI observed with the last value, seasonally modulated.
SOI_AR1 = """(param phi 0.9 (between -1 1))
(param b 0.0)
(param c 0.0)
(define (init) (list 0.0 (vec 1.0 0.0)))
(define (predict s) (+ (* phi (car s)) (* (+ b (* c (cos (* 0.5235987755982988 (ref (cadr s) 0))))) (ref (cadr s) 1))))
(define (update s y x) (list y x))"""


def nino34_soi() -> Dataset:
    return datasets.load("enso-nino34", path=RAW / "psl_nino34.long.data.txt", soi_path=RAW / "cpc_soi.txt")


def with_soi_changed_after(ds: Dataset, last_kept: int, seed: int = 0) -> Dataset:
    """The same dataset with every SOI value after row ``last_kept`` (time order) replaced by noise."""
    frame = ds.frame.sort(ds.x).with_row_index("_row")
    noise = np.random.default_rng(seed).normal(0.0, 5.0, frame.height)
    frame = frame.with_columns(
        pl.when(pl.col("_row") > last_kept).then(pl.Series(noise)).otherwise(pl.col("soi")).alias("soi")
    ).drop("_row")
    return Dataset(ds.name, frame, ds.x, ds.y, ds.group, ds.definition, ds.columns, dict(ds.meta))


# ----------------------------------------------------------------------------- SOI parsers and loader


@needs_shared("enso/raw/cpc_soi.txt", "enso/raw/bom_soi_monthly.txt")
def test_soi_parsers_on_the_raw_files():
    cpc = enso.parse_cpc_soi(RAW / "cpc_soi.txt")
    first = cpc.row(0, named=True)
    assert (first["year"], first["month"], first["soi_anom"], first["soi_std"]) == (1951, 1, 2.5, 1.5)
    # "1.2-999.9" runs two fields together: fixed width, and the sentinel becomes null
    row = cpc.filter((pl.col("year") == 2026) & (pl.col("month").is_in([3, 4]))).get_column("soi_std").to_list()
    assert row == [1.2, None]  # the standardized block; the anomaly block holds 2.0
    assert cpc.get_column("soi_std").drop_nulls().len() == 903  # 1951-01 .. 2026-03
    bom = enso.parse_bom_soi(RAW / "bom_soi_monthly.txt")
    assert bom.height == 1796 and bom.row(0) == (1876, 1, 11.3) and bom.row(-1) == (2025, 8, 2.1)
    both = cpc.join(bom, on=["year", "month"]).drop_nulls()
    assert np.corrcoef(both["soi_std"], both["soi"])[0, 1] > 0.95  # the two agencies' SOI agree
    assert enso.sniff_soi_format(RAW / "cpc_soi.txt") == "cpc"
    assert enso.sniff_soi_format(RAW / "bom_soi_monthly.txt") == "bom"
    with pytest.raises(datasets.DataFormatError, match="2 blocks"):
        enso.parse_cpc_soi("YEAR JAN\n1951" + "   1.0" * 12 + "\n")
    with pytest.raises(datasets.DataFormatError, match="line 2"):
        enso.parse_bom_soi("187601,11.3\n1876-2,11.0\n")


@needs_soi
def test_nino34_loader_adds_soi_from_the_training_years():
    ds = nino34_soi()
    assert ds.meta["covariates"] == ["soi"] and "soi" in {c.name for c in ds.columns}
    frame = ds.frame
    assert frame.row(0, named=True)["year"] == 1951  # cut to the months the CPC SOI covers
    assert frame.get_column("soi").null_count() == 0
    # soi is centred on the training years, per calendar month
    means = frame.filter(pl.col("split") == "train").group_by("month").agg(pl.col("soi").mean())
    assert np.allclose(means.get_column("soi").to_numpy(), 0.0, atol=1e-12)
    raw = enso.soi_frame(RAW / "cpc_soi.txt")[0]
    joined = frame.join(raw.rename({"soi": "raw"}), on=["year", "month"])
    offset = joined.with_columns((pl.col("raw") - pl.col("soi")).alias("d")).group_by("month").agg(pl.col("d").std())
    assert offset.get_column("d").max() < 1e-9  # a constant per calendar month
    without = datasets.load("enso-nino34", path=RAW / "psl_nino34.long.data.txt")
    assert "covariates" not in without.meta and "soi" not in without.frame.columns
    with pytest.raises(datasets.DataFormatError, match="unknown soi"):
        datasets.load("enso-nino34", path=RAW / "psl_nino34.long.data.txt", soi="noaa")


# ----------------------------------------------------------------------------- the task's x


@needs_ndvm
@needs_soi
def test_multi_step_x_advances_the_calendar_and_holds_the_covariates():
    task = make_task(nino34_soi())
    assert task.inputs.names == ["month", "soi"] and task.period == 12 and task.leads == 12
    months = task.dataset.frame.sort("t").get_column("month").to_numpy()
    soi = task.dataset.frame.sort("t").get_column("soi").to_numpy()
    for split in ("validation", "test"):
        forecasts = task.forecasts(task.restore_fit(ECHO_X, {}), split)
        origins = task.origins(split)
        lead_month = (months[origins][:, None] - 1 + np.arange(1, 13)[None, :]) % 12 + 1
        # forecast of y[t+k]: the state after updating on the forecast of y[t+k-1] (k >= 2) holds
        # the calendar of step t+k-1 and the SOI observed at the origin t
        expected = 100.0 * np.where(np.arange(12)[None, :] == 0, months[origins][:, None], lead_month - 1)
        expected = np.where(expected == 0, 1200.0, expected) + soi[origins][:, None]
        assert np.allclose(forecasts, expected), split


@needs_ndvm
@needs_soi
def test_future_covariate_values_change_no_forecast():
    ds = nino34_soi()
    task = make_task(ds)
    fit = task.fit(SOI_AR1, name="soi-ar1", optimizer="lbfgs", steps=100, restarts=4, seed=0)
    assert fit.ok, fit.error
    assert fit.params["b"] != 0.0 or fit.params["c"] != 0.0
    # SOI changed after the training years: the fit is the same, bit for bit
    after_train = make_task(with_soi_changed_after(ds, task.n_train - 1))
    again = after_train.fit(SOI_AR1, name="soi-ar1", optimizer="lbfgs", steps=100, restarts=4, seed=0)
    assert again.params == fit.params and again.train_loss == fit.train_loss
    for split in ("validation", "test"):
        origins = task.origins(split)
        base = task.forecasts(fit, split)
        for cut in (origins[0], origins[len(origins) // 2], origins[-1]):
            other = make_task(with_soi_changed_after(ds, int(cut), seed=int(cut)))
            changed = other.forecasts(fit, split)
            kept = origins <= cut  # origins that saw nothing after the cut
            assert np.array_equal(changed[kept], base[kept]), (split, cut)
            if cut < origins[-1]:
                assert not np.allclose(changed[~kept], base[~kept])  # the SOI is really used


@needs_ndvm
def test_calendar_from_x_gives_the_month_counter_seeds_fit():
    task = make_task(datasets.load("enso"))
    assert task.inputs.names == ["month"] and task.time_step == "month"
    counter = task.fit(fc.SEASONAL_AR1_SOURCE, optimizer="lbfgs", steps=100, restarts=4, seed=0)
    from_x = task.fit(SEASONAL_AR1_X, optimizer="lbfgs", steps=100, restarts=4, seed=0)
    assert counter.ok and from_x.ok
    assert from_x.train_loss == pytest.approx(counter.train_loss, rel=1e-12)
    assert np.allclose(task.forecasts(from_x, "validation"), task.forecasts(counter, "validation"), atol=1e-10)
    for seed in task.seed_programs():  # every seed, the x ones included, compiles both drivers
        task.compile(seed)
        task.compile(seed, forecast=True)


@needs_ndvm
def test_update_arity_is_checked(tmp_path):
    task = make_task(datasets.load("enso"))
    with pytest.raises(CandidateError, match="2 arguments"):
        task.program_source(fc.AR1_SOURCE.replace("(update s y) y", "(update s y x z) y"))
    path = tmp_path / "series.csv"  # no calendar column, no decimal years, no covariates
    pl.DataFrame({"step": np.arange(200.0), "v": np.sin(np.arange(200) / 7.0)}).write_csv(path)
    plain = make_task(datasets.load(path, x="step", y="v"), kind="forecast")
    assert not plain.inputs.available
    with pytest.raises(CandidateError, match="no calendar period and no covariates"):
        plain.program_source(SEASONAL_AR1_X)
    assert plain.fit(fc.AR1_SOURCE, steps=20, restarts=2).ok


# ----------------------------------------------------------------------------- a user's forecast file


def _yearly_file(tmp_path, manifest: str | None, n: int = 160):
    years = np.arange(1850, 1850 + n)
    rng = np.random.default_rng(0)
    c = rng.normal(size=n)
    v = np.zeros(n)  # v[t] = 0.6 v[t-1] + 2 c[t-1] + noise: the covariate leads the series by a step
    for t in range(1, n):
        v[t] = 0.6 * v[t - 1] + 2.0 * c[t - 1] + 0.5 * rng.normal()
    path = tmp_path / "cycles.csv"
    pl.DataFrame({"year": years, "v": v, "c": c, "label": ["a"] * n}).write_csv(path)
    if manifest is not None:
        path.with_suffix(".toml").write_text(manifest)
    return path


def test_user_manifest_gives_period_leads_unit_and_covariates(tmp_path):
    path = _yearly_file(
        tmp_path, 'x = "year"\ny = "v"\ntask = "forecast"\nperiod = 11\nleads = 10\ncovariates = ["c"]\n'
    )
    task = make_task(datasets.load(path))
    assert (task.period, task.leads, task.time_step) == (11, 10, "year")
    assert task.inputs.names == ["calendar", "c"]
    assert task.inputs.calendar[:13].tolist() == [1.0, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 1, 2]
    text = task.contract_text()
    assert "leads 1..10 years" in text and "month" not in text
    assert "(ref x 0) = y's position in the dataset's period of 11 years, 1-11" in text
    assert "(ref x 1) = covariate `c` observed with y" in text
    assert task.targets("validation").shape[1] == 10
    # no manifest: a yearly series has no period, 12 leads, and no covariates unless given
    plain = tmp_path / "plain"
    plain.mkdir()
    bare = make_task(datasets.load(_yearly_file(plain, None), x="year", y="v"), kind="forecast")
    assert (bare.period, bare.leads, bare.time_step, bare.inputs.names) == (None, 12, "year", [])
    given = make_task(datasets.load(_yearly_file(plain, None), x="year", y="v", covariates=["c"]), kind="forecast")
    assert given.inputs.names == ["c"] and "leads 1..12 years" in given.contract_text()


def test_quarterly_decimal_years_default_to_period_4_and_8_leads(tmp_path):
    path = tmp_path / "q.csv"
    t = 1990 + np.arange(120) / 4
    pl.DataFrame({"t": t, "v": np.cos(np.arange(120) * np.pi / 2)}).write_csv(path)
    task = make_task(datasets.load(path, x="t", y="v"), kind="forecast")
    assert (task.time_step, task.period, task.leads, task.inputs.names) == ("quarter", 4, 8, ["calendar"])
    assert "leads 1..8 quarters" in task.contract_text()


def test_bad_covariates_and_periods_are_named(tmp_path):
    path = _yearly_file(tmp_path, None)
    with pytest.raises(datasets.DataFormatError, match=r"no column\(s\) \['soi'\]"):
        datasets.load(path, x="year", y="v", covariates=["soi"])
    with pytest.raises(datasets.DataFormatError, match=r"\['label'\] are not numeric"):
        datasets.load(path, x="year", y="v", covariates=["label"])
    path.with_suffix(".toml").write_text('x = "year"\ny = "v"\ntask = "forecast"\nperiod = 2.5\n')
    with pytest.raises(TaskError, match="period must be a whole number"):
        make_task(datasets.load(path))


def test_covariate_option_of_a_run(tmp_path):
    from flows.problem import ProblemSpec, load_problem

    path = _yearly_file(tmp_path, None)
    _, task = load_problem(ProblemSpec(data=str(path), x="year", y="v", task_kind="forecast", covariates=["c"]))
    assert task.inputs.covariate_names == ("c",)
    with pytest.raises(datasets.DatasetError, match="--covariate names columns of a file"):
        load_problem(ProblemSpec(dataset="enso", covariates=["c"]))


@needs_ndvm
def test_a_user_covariate_is_learnt_from(tmp_path):
    """v[t] = 0.6 v[t-1] + 2 c[t-1] + noise: fitted on one-step errors (leads = 1) the covariate seed
    recovers both weights; at leads 1..3 it still beats the AR(1) without the covariate (the held
    covariate is a poor guess for this white-noise c beyond lead 1, so the fit shrinks its weight)."""
    manifest = 'x = "year"\ny = "v"\ntask = "forecast"\nleads = {}\ncovariates = ["c"]\n'
    path = _yearly_file(tmp_path, manifest.format(1))
    task = make_task(datasets.load(path))
    with_c = next(s for s in task.seed_programs() if "covariate c" in s)
    fit = task.fit(with_c, optimizer="lbfgs", steps=200, restarts=4, seed=0)
    assert fit.ok, fit.error
    # the least-squares weights over the same one-step terms (origins t: v[t] from v[t-1], c[t-1])
    t = task.fit_origins()
    c = task.dataset.frame.sort("year").get_column("c").to_numpy()
    (phi, b1), *_ = np.linalg.lstsq(np.column_stack([task.y[t - 1], c[t - 1]]), task.y[t], rcond=None)
    assert fit.params["phi"] == pytest.approx(phi, abs=1e-5) and fit.params["b1"] == pytest.approx(b1, abs=1e-5)
    assert b1 == pytest.approx(2.0, abs=0.3)
    path.with_suffix(".toml").write_text(manifest.format(3))
    task = make_task(datasets.load(path))
    fit_c = task.fit(with_c, optimizer="lbfgs", steps=200, restarts=4, seed=0)
    fit_ar = task.fit(fc.AR1_SOURCE, optimizer="lbfgs", steps=200, restarts=4, seed=0)
    assert fit_c.ok and fit_ar.ok and fit_c.params["b1"] > 0.5
    assert task.score(fit_c)["mean_rmse"] < task.score(fit_ar)["mean_rmse"]


@needs_soi
def test_the_data_card_shows_the_covariate_from_seen_points_only():
    ds = nino34_soi()
    task = make_task(ds)
    card = card_text(task.card_facts())
    line = next(ln for ln in card.splitlines() if ln.startswith("Covariate `soi` (x entry 1)"))
    seen = task.split_end["validation"]
    soi = ds.frame.sort("t").get_column("soi").to_numpy()[:seen]
    assert f"lag 1: r = {np.corrcoef(soi[:-1], task.y[1:seen])[0, 1]:+.2f}" in line
    assert card_text(make_task(with_soi_changed_after(ds, seen - 1)).card_facts()) == card  # test years unseen


def test_an_x_candidate_renders_as_a_formula():
    from storage.formula import render

    formula = render(SEASONAL_AR1_X)
    assert formula.ok, formula.reason
    assert formula.text.endswith("update(s, y, x) = (y, x_0)")
    assert "cos(phase + 0.5236*s_1)" in formula.text and r"\mathrm{update}" in formula.latex
