"""Dataset layer: registry, loaders on the real files of the shared data (../shared/data), parsers, download, splits."""

from __future__ import annotations

import functools
import http.server
import threading
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from conftest import needs_shared, shared_data_dir  # noqa: E402

import datasets
from datasets import battery, cache, enso
from datasets.errors import (
    DataFormatError,
    DataNotFoundError,
    DownloadError,
    SplitError,
    UnknownDatasetError,
)

DATA = shared_data_dir()  # ../shared/data or $NDVM_SHARED_DATA; read only inside tests
RAW = DATA / "enso" / "raw"
NASA = DATA / "battery" / "nasa_pcoe.csv"
SEVERSON = DATA / "battery" / "severson.csv"

needs_data = needs_shared("enso/raw", "enso/nino34_monthly.csv", "battery/nasa_pcoe.csv", "battery/severson.csv")


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path, monkeypatch):
    """No test reads or writes the user's real cache, and none downloads from outside."""
    monkeypatch.setenv("NDVM_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("NDVM_BATTERY_DATA", raising=False)
    monkeypatch.delenv("NDVM_OFFLINE", raising=False)


# ----------------------------------------------------------------------------- registry


def test_list_datasets_rows():
    rows = datasets.list_datasets()
    names = [r["name"] for r in rows]
    assert names == [
        "battery",
        "battery-nasa",
        "battery-severson",
        "battery-synthetic",
        "enso",
        "enso-nino34",
        "us-unemployment",
    ]
    for row in rows:
        assert {"name", "title", "kind", "task", "columns", "source", "licence", "synthetic", "download"} <= set(row)
    synthetic = {r["name"]: r["synthetic"] for r in rows}
    assert synthetic == {
        "battery": False,
        "battery-nasa": False,
        "battery-severson": False,
        "battery-synthetic": True,
        "enso": False,
        "enso-nino34": False,
        "us-unemployment": False,
    }
    assert "SYNTHETIC" in datasets.definition("battery-synthetic").title
    assert all(datasets.definition(n).citation for n in names)


def test_unknown_dataset_is_a_typed_error():
    with pytest.raises(UnknownDatasetError, match="neither a registered dataset"):
        datasets.load("no-such-dataset")
    with pytest.raises(UnknownDatasetError, match="unknown dataset"):
        datasets.definition("nope")


# ----------------------------------------------------------------------------- enso (embedded)


def test_enso_default_shape_and_split():
    ds = datasets.load("enso")
    assert ds.frame.columns == ["year", "month", "t", "sst_c", "anom_c", "split"]
    assert ds.frame.height == 732 and ds.train.height == 372 and ds.validation.height == 120 and ds.test.height == 240
    assert ds.train["year"].max() == 1980 and ds.validation["year"].min() == 1981
    assert ds.validation["year"].max() == 1990 and ds.test["year"].min() == 1991
    assert ds.frame["t"][0] == 1950.0 and ds.frame["year"][-1] == 2010
    # climatology from the training years: every calendar month has zero training-mean anomaly
    monthly = ds.train.group_by("month").agg(pl.col("anom_c").mean())["anom_c"].to_numpy()
    assert np.allclose(monthly, 0.0, atol=1e-12)
    assert abs(ds.test["anom_c"].mean()) > 1e-3  # but not on the held-out years
    assert abs(ds.validation["anom_c"].mean()) > 1e-3


def test_enso_climatology_ignores_held_out_values():
    frame = enso.elnino_frame()
    perturbed = frame.with_columns(
        pl.when(pl.col("year") > 1990).then(pl.col("sst_c") + 5.0).otherwise(pl.col("sst_c")).alias("sst_c")
    )
    a = enso.sst_dataset("enso", frame, train_end_year=1980, validation_end_year=1990)
    b = enso.sst_dataset("enso", perturbed, train_end_year=1980, validation_end_year=1990)
    assert a.train.equals(b.train) and a.validation.equals(b.validation)
    assert np.allclose(b.test["anom_c"].to_numpy() - a.test["anom_c"].to_numpy(), 5.0)


def test_enso_split_must_leave_both_parts():
    with pytest.raises(SplitError):
        datasets.load("enso", train_end_year=2010)


# ----------------------------------------------------------------------------- NOAA PSL / CPC parsers


@needs_data
def test_psl_parser_on_real_anomaly_file():
    frame = enso.parse_psl(RAW / "psl_nino34.long.anom.data.txt")
    assert frame.columns == ["year", "month", "value"]
    assert frame.height == (2023 - 1870 + 1) * 12
    assert frame["value"].null_count() == 9  # 2023-04 ... 2023-12 are -99.99 in the file
    assert frame.row(0) == (1870, 1, -1.00)
    reference = pl.read_csv(DATA / "enso" / "nino34_monthly.csv").filter(pl.col("source") == "hadisst_psl")
    joined = frame.join(reference.select("year", "month", "nino34_anom_c", "nino34_sst_c"), on=["year", "month"])
    assert joined.height == 1848
    assert np.allclose(joined.drop_nulls("value")["value"], joined.drop_nulls("value")["nino34_anom_c"])


@needs_data
def test_psl_parser_on_real_sst_file():
    frame = enso.parse_psl(RAW / "psl_nino34.long.data.txt")
    assert frame.height == 1848 and frame["value"].null_count() == 0
    assert 24.0 < frame["value"].mean() < 28.0


@needs_data
def test_cpc_sstoi_parser_on_real_file():
    frame = enso.parse_cpc_sstoi(RAW / "cpc_sstoi.indices.txt")
    assert frame.height == 531
    assert frame.columns[:2] == ["year", "month"] and "nino34_c" in frame.columns and "nino34_anom_c" in frame.columns
    assert frame.row(0)[:2] == (1982, 1) and frame.row(-1)[:2] == (2026, 3)
    assert frame.filter((pl.col("year") == 1982) & (pl.col("month") == 1))["nino34_c"][0] == 26.65
    reference = pl.read_csv(DATA / "enso" / "nino34_monthly.csv").filter(pl.col("source") == "oisst21_cpc_sstoi")
    joined = frame.join(reference, on=["year", "month"])
    assert joined.height == 531 and np.allclose(joined["nino34_c"], joined["nino34_sst_c"])


@needs_data
def test_cpc_detrend_parser_on_real_file():
    frame = enso.parse_cpc_detrend(RAW / "cpc_detrend.nino34.ascii.txt")
    assert frame.columns == ["year", "month", "nino34_c", "clim_adjust_c", "nino34_anom_c"]
    assert frame.height == 885 and frame.row(0) == (1950, 1, 24.56, 26.18, -1.62)
    assert np.allclose(frame["nino34_c"] - frame["clim_adjust_c"], frame["nino34_anom_c"], atol=0.011)


def test_parsers_reject_other_layouts(tmp_path):
    bad = tmp_path / "bad.txt"
    bad.write_text("hello world\n1 2 3\n")
    with pytest.raises(DataFormatError):
        enso.sniff_format(bad)
    with pytest.raises(DataFormatError):
        enso.parse_cpc_sstoi(bad)
    with pytest.raises(DataFormatError):
        enso.parse_psl(tmp_path / "bad.txt")


@needs_data
@pytest.mark.parametrize(
    "filename, fmt, first, n_rows",
    [
        ("psl_nino34.long.anom.data.txt", "psl", 1950.0, 879),
        ("psl_nino34.long.data.txt", "psl", 1950.0, 888),
        ("cpc_sstoi.indices.txt", "cpc-sstoi", 1982.0, 531),
        ("cpc_detrend.nino34.ascii.txt", "cpc-detrend", 1950.0, 885),
    ],
)
def test_nino34_from_local_files(filename, fmt, first, n_rows):
    ds = datasets.load("enso-nino34", path=RAW / filename)
    assert ds.meta["format"] == fmt
    assert ds.frame.height == n_rows and ds.frame["t"][0] == first
    assert ds.train["year"].max() == 1989 and ds.validation["year"].min() == 1990
    assert ds.validation["year"].max() == 1999 and ds.test["year"].min() == 2000
    assert ds.frame["anom_c"].null_count() == 0
    monthly = ds.train.group_by("month").agg(pl.col("anom_c").mean())["anom_c"].to_numpy()
    assert np.allclose(monthly, 0.0, atol=1e-9)
    # a bare path goes through the same loader
    assert datasets.load(RAW / filename).frame.equals(ds.frame)


@needs_data
def test_nino34_anomaly_file_equals_sst_file_recentred():
    """The PSL anomaly file re-centred on the training years equals anomalies of the SST file."""
    a = datasets.load("enso-nino34", path=RAW / "psl_nino34.long.anom.data.txt")
    b = datasets.load("enso-nino34", path=RAW / "psl_nino34.long.data.txt")
    joined = a.frame.join(b.frame, on=["year", "month"], suffix="_sst")
    assert joined.height == 879
    assert np.abs(joined["anom_c"] - joined["anom_c_sst"]).max() < 0.011  # both files round to 0.01


# ----------------------------------------------------------------------------- download (local server only)


@pytest.fixture()
def local_server():
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(RAW))
    handler.log_message = lambda *args: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", server
    server.shutdown()
    server.server_close()


@needs_data
def test_download_and_cache(local_server, tmp_path, monkeypatch):
    base, server = local_server
    monkeypatch.setenv("NDVM_CACHE_DIR", str(tmp_path / "env-cache"))
    url = f"{base}/psl_nino34.long.anom.data.txt"
    ds = datasets.load("enso-nino34", source="psl", url=url)
    cached = tmp_path / "env-cache" / "enso" / "nino34.long.anom.data"
    assert cached.is_file() and cached.read_bytes() == (RAW / "psl_nino34.long.anom.data.txt").read_bytes()
    assert ds.frame.height == 879
    server.shutdown()  # the cache answers without the server
    server.server_close()
    again = datasets.load("enso-nino34", source="psl", url=url)
    assert again.frame.equals(ds.frame)
    with pytest.raises(DownloadError, match="failed"):
        datasets.load("enso-nino34", source="psl", url=url, refresh=True, cache_dir=tmp_path / "other")
    assert not list((tmp_path / "other" / "enso").glob("*")), "a failed download leaves no file behind"


@needs_data
def test_download_http_error_and_offline(local_server, tmp_path, monkeypatch):
    base, _ = local_server
    with pytest.raises(DownloadError, match="HTTP 404"):
        cache.fetch(f"{base}/missing.txt", "missing.txt", cache=tmp_path)
    monkeypatch.setenv("NDVM_OFFLINE", "1")
    with pytest.raises(DataNotFoundError, match="downloads are disabled"):
        datasets.load("enso-nino34", source="cpc-sstoi", url=f"{base}/cpc_sstoi.indices.txt", cache_dir=tmp_path)


def test_cache_dir_override(monkeypatch, tmp_path):
    monkeypatch.setenv("NDVM_CACHE_DIR", str(tmp_path / "x"))
    assert cache.cache_dir() == tmp_path / "x"
    monkeypatch.delenv("NDVM_CACHE_DIR")
    assert cache.cache_dir() == Path.home() / ".cache" / "ndvm"
    assert cache.cache_dir(tmp_path) == tmp_path


# ----------------------------------------------------------------------------- battery


@needs_data
def test_nasa_loader_default_cells():
    ds = datasets.load("battery", path=NASA)
    assert ds.frame.columns[:6] == ["cell_id", "cycle", "capacity_ah", "soh", "split", "capacity_ref_ah"]
    assert ds.groups == ["B0005", "B0006", "B0007", "B0018"]
    counts = dict(ds.frame.group_by("cell_id").len().iter_rows())
    assert counts == {"B0005": 168, "B0006": 168, "B0007": 168, "B0018": 132}
    b5 = ds.frame.filter(pl.col("cell_id") == "B0005")
    assert b5.filter(pl.col("split") == "train").height == 84
    assert b5["capacity_ah"][0] == pytest.approx(1.856487421)
    assert b5["capacity_ref_ah"][0] == pytest.approx(b5["capacity_ah"][:5].mean())
    assert b5["soh"][-1] == pytest.approx(1.325079 / b5["capacity_ah"][:5].mean(), rel=1e-6)
    assert ds.meta["format"] == "nasa" and ds.meta["dropped_rows"] == 0


@needs_data
def test_nasa_loader_all_cells_drops_invalid_rows():
    ds = datasets.load("battery", path=NASA, cells="all")
    # 25 empty and 19 zero capacities are dropped; B0052 keeps 4 valid rows (< 20) and is dropped
    assert ds.meta["dropped_cells"] == ["B0052"]
    assert ds.frame.height == 2794 - 25 - 19 - 4
    assert len(ds.groups) == 33 and ds.frame["capacity_ah"].min() > 0


@needs_data
def test_severson_loader():
    ds = datasets.load("battery", path=SEVERSON)  # default: all batches, batch 3 held out whole for the test
    assert ds.meta["format"] == "severson"
    seen = [c for c in ds.groups if c not in ds.test_groups]
    assert all(c.startswith(("b1", "b2")) for c in seen) and len(seen) == 82
    assert all(c.startswith("b3") for c in ds.test_groups) and len(ds.test_groups) == 38
    assert ds.meta["test_cells"] == ds.test_groups
    full = datasets.load("battery", path=SEVERSON, cells="all")
    assert len(full.groups) == 120 and full.frame.height == 96995 - 14  # 14 rows flagged in the file
    assert full.meta["dropped_outlier_rows"] == 14
    raw = datasets.load("battery", path=SEVERSON, cells="all", drop_outliers=False)
    assert raw.frame.height == 96995
    b1c0 = full.frame.filter(pl.col("cell_id") == "b1c0")
    assert b1c0["cycle"][0] == 2 and b1c0.height == 1850
    assert b1c0.filter(pl.col("split") == "train").height == 925
    assert b1c0.filter(pl.col("split") == "validation").height == 370
    assert "charge_policy" in full.frame.columns
    seventy = datasets.load("battery", path=SEVERSON, cells=["b1c0"], train_fraction=0.7)
    assert seventy.train.height == 1295


@needs_data
def test_battery_file_by_path_is_detected():
    ds = datasets.load(NASA)
    assert ds.name == "battery" and ds.meta["format"] == "nasa"


def test_battery_without_data_says_where_to_get_it():
    with pytest.raises(DataNotFoundError) as info:
        datasets.load("battery")
    message = str(info.value)
    assert "data.matr.io" in message and "nasa.gov" in message and "battery-synthetic" in message
    assert "NDVM_BATTERY_DATA" in message


@needs_data
def test_battery_from_cache_and_env(tmp_path, monkeypatch):
    folder = tmp_path / "cache" / "battery"
    folder.mkdir(parents=True)
    (folder / "nasa_pcoe.csv").symlink_to(NASA)  # a link, not a copy of the data
    assert datasets.load("battery").meta["format"] == "nasa"
    monkeypatch.setenv("NDVM_BATTERY_DATA", str(SEVERSON))
    with pytest.raises(SplitError, match="hold out every cell"):  # batch 3 alone: nothing left to train on
        datasets.load("battery", cells="b3*")
    assert datasets.load("battery", cells="b3*", test_cells="").groups[0].startswith("b3")


def test_tidy_battery_file(tmp_path):
    frame = battery.synthetic_frame(n_cells=2, n_cycles=60, seed=3)
    frame.write_parquet(tmp_path / "cells.parquet")
    frame.write_csv(tmp_path / "cells.csv")
    for name in ("cells.parquet", "cells.csv"):
        ds = datasets.load(tmp_path / name)
        assert ds.meta["format"] == "tidy" and ds.frame.height == 120 and ds.train.height == 60
        assert ds.validation.height == 2 * 12 and ds.test.height == 2 * 18


def test_battery_wrong_columns(tmp_path):
    (tmp_path / "x.csv").write_text("a,b\n1,2\n")
    with pytest.raises(DataFormatError, match="not a battery file"):
        battery.load_battery(tmp_path / "x.csv")


def test_battery_synthetic_is_seeded_and_labelled():
    a, b = datasets.load("battery-synthetic"), datasets.load("battery-synthetic")
    assert a.frame.equals(b.frame)
    assert not datasets.load("battery-synthetic", seed=1).frame.equals(a.frame)
    assert a.meta["synthetic"] is True and all(g.startswith("synthetic-") for g in a.groups)
    assert a.frame.height == 6 * 400 and a.train.height == 6 * 200


def test_battery_soh_uses_training_cycles_only():
    frame = battery.synthetic_frame(n_cells=3, n_cycles=100, seed=5)
    base = battery.tidy_dataset(frame.lazy(), name="t", train_fraction=0.5)
    test_rows = base.frame.filter(pl.col("split") == "test").select("cell_id", "cycle")
    perturbed = (
        frame.join(test_rows.with_columns(pl.lit(True).alias("held")), on=["cell_id", "cycle"], how="left")
        .with_columns(
            pl.when(pl.col("held"))
            .then(pl.col("capacity_ah") * 0.5)
            .otherwise(pl.col("capacity_ah"))
            .alias("capacity_ah")
        )
        .drop("held")
    )
    other = battery.tidy_dataset(perturbed.lazy(), name="t", train_fraction=0.5)
    assert other.train.equals(base.train) and other.validation.equals(base.validation)
    assert not other.test.equals(base.test)
    with pytest.raises(SplitError):
        battery.tidy_dataset(frame.lazy(), name="t", train_fraction=1.0)


# ----------------------------------------------------------------------------- user files


def test_user_csv_with_columns(tmp_path):
    path = tmp_path / "series.csv"
    pl.DataFrame({"t": np.arange(20.0), "v": np.arange(20.0) ** 0.5, "g": ["a", "b"] * 10}).write_csv(path)
    ds = datasets.load(path, x="t", y="v")
    assert (ds.x, ds.y, ds.group) == ("t", "v", None) and ds.train.height == 12 and ds.test.height == 4
    assert ds.validation.height == 4
    grouped = datasets.load(path, x="t", y="v", group="g", train_fraction=0.5)
    assert grouped.groups == ["a", "b"] and grouped.train.height == 10 and grouped.validation.height == 4
    assert grouped.train.group_by("g").agg(pl.col("t").max()).sort("g")["t"].to_list() == [8.0, 9.0]
    with pytest.raises(DataFormatError, match="say which columns"):
        datasets.load(path)
    with pytest.raises(DataFormatError, match="no column"):
        datasets.load(path, x="t", y="missing")


def test_user_csv_with_manifest(tmp_path):
    path = tmp_path / "fade.csv"
    pl.DataFrame({"n": np.arange(1.0, 41.0), "cap": np.linspace(1.0, 0.8, 40)}).write_csv(path)
    (tmp_path / "fade.toml").write_text(
        'title = "lab fade"\nx = "n"\ny = "cap"\ntrain_fraction = 0.5\nlicence = "CC0"\n[units]\ncap = "Ah"\n'
    )
    ds = datasets.load(path)
    assert (ds.x, ds.y) == ("n", "cap") and ds.train.height == 20
    assert ds.meta["title"] == "lab fade" and ds.meta["licence"] == "CC0"
    assert {c.name: c.unit for c in ds.columns}["cap"] == "Ah"
    (tmp_path / "fade.toml").write_text('x = "n"\ny = "cap"\ncolour = "red"\n')
    with pytest.raises(DataFormatError, match="unknown key"):
        datasets.load(path)
