"""ENSO sea-surface temperature series: parsers, loaders and training-only anomalies.

Two registered datasets use this module:

* ``enso`` (the embedded default): Niño 1+2 monthly SST 1950-2010 shipped inside statsmodels
  (``statsmodels.datasets.elnino``, ERSST v3b, NOAA, public domain). No network needed.
* ``enso-nino34``: monthly Niño 3.4 from NOAA PSL (``nino34.long.anom.data`` /
  ``nino34.long.data``, HadISST) or NOAA CPC (``sstoi.indices``, OISST v2.1;
  ``detrend.nino34.ascii.txt``, ERSST v5), read from a local file or downloaded once into the cache.

Anomalies are always recomputed against a monthly climatology of the TRAINING years only:
``anom_c = base - mean_train(base | calendar month)``, where ``base`` is the absolute SST when the
file has it, else the file's own anomaly. (For an anomaly-only file this is exact too: the file's
fixed baseline is a per-month constant, which the training mean removes.) The source baselines
(1981-2010, 1991-2020, CPC's sliding centred 30-year window) would otherwise carry information
from the held-out years into every training value.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import polars as pl

from . import cache
from .catalog import registered
from .errors import DataFormatError, SplitError
from .schema import TEST, TRAIN, VALIDATION, Column, Dataset

MONTHS = ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC")

# Public locations (NOAA). Overridable per call with ``url=``.
URLS = {
    "psl": "https://psl.noaa.gov/gcos_wgsp/Timeseries/Data/nino34.long.anom.data",
    "psl-sst": "https://psl.noaa.gov/gcos_wgsp/Timeseries/Data/nino34.long.data",
    "cpc-sstoi": "https://www.cpc.ncep.noaa.gov/data/indices/sstoi.indices",
    "cpc-detrend": "https://origin.cpc.ncep.noaa.gov/products/analysis_monitoring/ensostuff/detrend.nino34.ascii.txt",
}
CACHE_NAMES = {
    "psl": "nino34.long.anom.data",
    "psl-sst": "nino34.long.data",
    "cpc-sstoi": "sstoi.indices",
    "cpc-detrend": "detrend.nino34.ascii.txt",
}

# The Southern Oscillation Index, a covariate of Niño 3.4 (``soi=`` of ``load_nino34``).
SOI_URLS = {
    "cpc": "https://www.cpc.ncep.noaa.gov/data/indices/soi",
    "bom": "https://www.bom.gov.au/climate/enso/soi_monthly.txt",
}
SOI_CACHE_NAMES = {"cpc": "soi", "bom": "soi_monthly.txt"}
SOI_PRODUCTS = {
    "cpc": "NOAA CPC standardized SOI (Tahiti - Darwin sea-level pressure)",
    "bom": "Australian Bureau of Meteorology SOI (Troup)",
}
SOI_COLUMN = Column(
    "soi",
    "-",
    "Southern Oscillation Index minus its training-years mean for the calendar month (a covariate; soi= option)",
)

ENSO_COLUMNS = (
    Column("year", "year", "calendar year"),
    Column("month", "1-12", "calendar month"),
    Column("t", "year", "decimal time, year + (month - 1) / 12"),
    Column("sst_c", "°C", "area-mean sea-surface temperature (null when the source gives only anomalies)"),
    Column("anom_c", "°C", "anomaly vs the monthly climatology of the training years only"),
    Column("split", "-", '"train" (years <= train_end_year), "validation" (<= validation_end_year) or "test"'),
)


# --------------------------------------------------------------------------- parsers (text -> frame)


def _read_text(path_or_text: str | os.PathLike) -> str:
    if isinstance(path_or_text, os.PathLike) or (isinstance(path_or_text, str) and "\n" not in path_or_text):
        return Path(path_or_text).read_text(encoding="utf-8", errors="replace")
    return str(path_or_text)


def parse_psl(path_or_text: str | os.PathLike) -> pl.DataFrame:
    """NOAA PSL "long" text format -> ``year, month, value`` (the sentinel becomes null).

    Layout: a header line ``first_year last_year``; one line per year with the year and 12 monthly
    values; a line holding the missing-value sentinel; then free-text footer lines.
    """
    lines = [ln for ln in _read_text(path_or_text).splitlines() if ln.strip()]
    try:
        first, last = (int(tok) for tok in lines[0].split()[:2])
    except (ValueError, IndexError) as exc:
        raise DataFormatError(f"PSL file: the first line must be 'first_year last_year', got {lines[:1]!r}") from exc
    n_years = last - first + 1
    body = lines[1 : 1 + n_years]
    if len(lines) < 2 + n_years:
        raise DataFormatError(f"PSL file: expected {n_years} year lines and a missing-value line after the header")
    try:
        sentinel = float(lines[1 + n_years].split()[0])
    except ValueError as exc:
        raise DataFormatError(
            f"PSL file: expected the missing-value line after the data, got {lines[1 + n_years]!r}"
        ) from exc
    years, months, values = [], [], []
    for offset, line in enumerate(body):
        tokens = line.split()
        if len(tokens) != 13 or int(tokens[0]) != first + offset:
            raise DataFormatError(f"PSL file: bad year line {offset + 2}: {line!r} (want the year and 12 values)")
        for month, token in enumerate(tokens[1:], start=1):
            value = float(token)
            years.append(first + offset)
            months.append(month)
            values.append(None if abs(value - sentinel) < 1e-6 else value)
    return pl.DataFrame(
        {"year": years, "month": months, "value": values},
        schema={"year": pl.Int32, "month": pl.Int32, "value": pl.Float64},
    )


def _parse_table(text: str, names: list[str], what: str) -> pl.DataFrame:
    rows = [ln.split() for ln in text.splitlines() if ln.strip()]
    header, data = rows[0], rows[1:]
    if len(header) != len(names):
        raise DataFormatError(f"{what}: header {header} has {len(header)} columns, expected {len(names)}")
    bad = [i for i, r in enumerate(data) if len(r) != len(names)]
    if bad:
        raise DataFormatError(f"{what}: line {bad[0] + 2} has {len(data[bad[0]])} fields, expected {len(names)}")
    columns = {n: [r[i] for r in data] for i, n in enumerate(names)}
    frame = pl.DataFrame(columns).with_columns(
        pl.col("year").cast(pl.Int32),
        pl.col("month").cast(pl.Int32),
        *[pl.col(n).cast(pl.Float64) for n in names[2:]],
    )
    # CPC marks missing values with -99.99 / -999.9
    return frame.with_columns(
        *[pl.when(pl.col(n) <= -99.0).then(None).otherwise(pl.col(n)).alias(n) for n in names[2:]]
    )


def parse_cpc_sstoi(path_or_text: str | os.PathLike) -> pl.DataFrame:
    """CPC ``sstoi.indices`` -> year, month and SST/anomaly of Niño 1+2, 3, 4, 3.4 (°C)."""
    text = _read_text(path_or_text)
    head = text.lstrip().split("\n", 1)[0].split()
    if head[:2] != ["YR", "MON"] or "NINO3.4" not in head:
        raise DataFormatError(f"sstoi.indices: unexpected header {head}")
    names = [
        "year",
        "month",
        "nino12_c",
        "nino12_anom_c",
        "nino3_c",
        "nino3_anom_c",
        "nino4_c",
        "nino4_anom_c",
        "nino34_c",
        "nino34_anom_c",
    ]
    return _parse_table(text, names, "sstoi.indices")


def parse_cpc_detrend(path_or_text: str | os.PathLike) -> pl.DataFrame:
    """CPC ``detrend.nino34.ascii.txt`` -> year, month, nino34_c (TOTAL), clim_adjust_c, nino34_anom_c."""
    text = _read_text(path_or_text)
    head = text.lstrip().split("\n", 1)[0].split()
    if head != ["YR", "MON", "TOTAL", "ClimAdjust", "ANOM"]:
        raise DataFormatError(f"detrend.nino34.ascii.txt: unexpected header {head}")
    return _parse_table(
        text, ["year", "month", "nino34_c", "clim_adjust_c", "nino34_anom_c"], "detrend.nino34.ascii.txt"
    )


def parse_cpc_soi(path_or_text: str | os.PathLike) -> pl.DataFrame:
    """NOAA CPC ``soi`` -> ``year, month, soi_anom, soi_std``.

    The file holds two blocks, each a title, a ``YEAR JAN ... DEC`` header and one line per year:
    the sea-level pressure anomaly (Tahiti minus Darwin, each standardized) and its standardized
    form (what CPC publishes as the SOI). Fields are fixed-width (a 4-character year, then 12 of 6
    characters: ``1.2-999.9`` runs two values together), and -999.9 marks a missing month.
    """
    blocks: list[dict[tuple[int, int], float | None]] = []
    for number, line in enumerate(_read_text(path_or_text).splitlines(), start=1):
        if line.startswith("YEAR"):
            blocks.append({})
            continue
        if not line[:4].isdigit() or not blocks:
            continue
        body = line[4:].rstrip()
        fields = [body[i : i + 6] for i in range(0, 72, 6)]
        try:
            values = [float(f) for f in fields]
        except ValueError:
            raise DataFormatError(f"CPC soi: line {number} is not a year and 12 values: {line!r}") from None
        year = int(line[:4])
        for month, value in enumerate(values, start=1):
            blocks[-1][(year, month)] = None if value <= -99.0 else value
    if len(blocks) != 2:
        raise DataFormatError(
            f"CPC soi: expected 2 blocks (anomaly, standardized), each with a 'YEAR JAN ... DEC' header; found {len(blocks)}"
        )
    keys = sorted(blocks[1])
    return pl.DataFrame(
        {
            "year": [k[0] for k in keys],
            "month": [k[1] for k in keys],
            "soi_anom": [blocks[0].get(k) for k in keys],
            "soi_std": [blocks[1][k] for k in keys],
        },
        schema={"year": pl.Int32, "month": pl.Int32, "soi_anom": pl.Float64, "soi_std": pl.Float64},
    )


def parse_bom_soi(path_or_text: str | os.PathLike) -> pl.DataFrame:
    """Bureau of Meteorology ``soi_monthly.txt`` (lines ``YYYYMM,value``) -> ``year, month, soi``."""
    years, months, values = [], [], []
    for number, line in enumerate(_read_text(path_or_text).splitlines(), start=1):
        if not line.strip():
            continue
        try:
            stamp, value = (tok.strip() for tok in line.split(","))
            year, month, soi = int(stamp[:4]), int(stamp[4:]), float(value)
        except ValueError:
            raise DataFormatError(f"BoM SOI: line {number} is not 'YYYYMM,value': {line.strip()!r}") from None
        if len(stamp) != 6 or not 1 <= month <= 12:
            raise DataFormatError(f"BoM SOI: line {number} has no valid YYYYMM: {line.strip()!r}")
        years.append(year)
        months.append(month)
        values.append(soi)
    return pl.DataFrame(
        {"year": years, "month": months, "soi": values},
        schema={"year": pl.Int32, "month": pl.Int32, "soi": pl.Float64},
    )


def sniff_soi_format(path: str | os.PathLike) -> str:
    """``cpc`` (the two-block CPC text) or ``bom`` (YYYYMM,value lines)."""
    with open(path, encoding="utf-8", errors="replace") as handle:
        first = handle.readline().strip()
    if first.startswith("(STAND TAHITI"):
        return "cpc"
    if "," in first and first.split(",")[0].strip().isdigit():
        return "bom"
    raise DataFormatError(f"{path}: not a CPC soi or BoM soi_monthly.txt file (first line {first!r})")


def soi_frame(path: str | os.PathLike) -> tuple[pl.DataFrame, str]:
    """``year, month, soi`` (the raw index, missing months dropped) and the product's name."""
    fmt = sniff_soi_format(path)
    if fmt == "cpc":
        frame = parse_cpc_soi(path).select("year", "month", pl.col("soi_std").alias("soi"))
    else:
        frame = parse_bom_soi(path)
    return frame.drop_nulls("soi"), SOI_PRODUCTS[fmt]


def add_training_covariate(frame: pl.DataFrame, column: str) -> pl.DataFrame:
    """``column`` minus its training-years mean for each calendar month (the same rule as the
    anomalies: no held-out month shifts a value the fit sees)."""
    clim = frame.filter(pl.col("split") == TRAIN).group_by("month").agg(pl.col(column).mean().alias("_cov_clim"))
    frame = frame.join(clim, on="month", how="left").with_columns((pl.col(column) - pl.col("_cov_clim")).alias(column))
    return frame.drop("_cov_clim").sort("year", "month")


def sniff_format(path: str | os.PathLike) -> str:
    """Which of the four text formats a file is in: psl, cpc-sstoi, cpc-detrend."""
    with open(path, encoding="utf-8", errors="replace") as handle:
        first = handle.readline().split()
    if first[:2] == ["YR", "MON"]:
        return "cpc-detrend" if "ClimAdjust" in first else "cpc-sstoi"
    if len(first) == 2 and all(tok.isdigit() for tok in first):
        return "psl"
    raise DataFormatError(f"{path}: not a PSL long-format or CPC index file (first line {first})")


# --------------------------------------------------------------------------- anomalies and split


def add_training_anomaly(frame: pl.DataFrame, base: str, train_end_year: int, validation_end_year: int) -> pl.DataFrame:
    """Add ``split`` (contiguous periods: train <= train_end_year < validation <= validation_end_year
    < test) and ``anom_c = base - training-years monthly mean of base``."""
    if validation_end_year <= train_end_year:
        raise SplitError(f"validation_end_year={validation_end_year} must be after train_end_year={train_end_year}")
    frame = frame.with_columns(
        pl.when(pl.col("year") <= train_end_year)
        .then(pl.lit(TRAIN))
        .when(pl.col("year") <= validation_end_year)
        .then(pl.lit(VALIDATION))
        .otherwise(pl.lit(TEST))
        .alias("split")
    )
    counts = {part: frame.filter(pl.col("split") == part).height for part in (TRAIN, VALIDATION, TEST)}
    empty = [part for part, n in counts.items() if n == 0]
    if empty:
        raise SplitError(
            f"train_end_year={train_end_year}, validation_end_year={validation_end_year} leave no "
            f"{' and no '.join(empty)} rows (data span {frame['year'].min()}-{frame['year'].max()})"
        )
    train = frame.filter(pl.col("split") == TRAIN)
    clim = train.group_by("month").agg(pl.col(base).mean().alias("_clim"))
    if clim.height != 12:
        raise SplitError("the training years must cover all 12 calendar months")
    frame = frame.join(clim, on="month", how="left").with_columns((pl.col(base) - pl.col("_clim")).alias("anom_c"))
    return frame.drop("_clim").sort("year", "month")


def _finish(frame: pl.DataFrame, *, start_year: int | None, end_year: int | None) -> pl.DataFrame:
    """Window, drop trailing/leading missing months, refuse interior gaps, add decimal time."""
    if start_year is not None:
        frame = frame.filter(pl.col("year") >= start_year)
    if end_year is not None:
        frame = frame.filter(pl.col("year") <= end_year)
    frame = frame.sort("year", "month")
    present = frame.get_column("_base").is_not_null().to_numpy()
    if not present.any():
        raise DataFormatError("no non-missing values in the requested years")
    first, last = np.flatnonzero(present)[[0, -1]]
    frame = frame.slice(int(first), int(last - first + 1))
    if frame.get_column("_base").null_count():
        gap = frame.filter(pl.col("_base").is_null()).row(0, named=True)
        raise DataFormatError(f"missing value inside the series at {gap['year']}-{gap['month']:02d}")
    return frame.with_columns((pl.col("year") + (pl.col("month") - 1) / 12.0).alias("t"))


def _dataset(
    name: str,
    frame: pl.DataFrame,
    train_end_year: int,
    validation_end_year: int,
    meta: dict,
    covariates: tuple[str, ...] = (),
) -> Dataset:
    frame = add_training_anomaly(frame, "_base", train_end_year, validation_end_year)
    for column in covariates:
        frame = add_training_covariate(frame, column)
    frame = frame.select("year", "month", "t", "sst_c", "anom_c", *covariates, "split")
    if covariates:
        meta = {**meta, "covariates": list(covariates)}

    meta = {
        "task": "forecast",
        "train_end_year": train_end_year,
        "validation_end_year": validation_end_year,
        "anomaly_baseline": "training years, per calendar month",
        **meta,
    }
    return Dataset(
        name=name,
        frame=frame,
        x="t",
        y="anom_c",
        group=None,
        definition=registered(name),
        columns=ENSO_COLUMNS[:-1] + ((SOI_COLUMN,) if "soi" in covariates else ()) + ENSO_COLUMNS[-1:],
        meta=meta,
    )


# --------------------------------------------------------------------------- loaders


def elnino_frame() -> pl.DataFrame:
    """statsmodels' embedded Niño 1+2 SST as ``year, month, sst_c`` (732 months, 1950-2010)."""
    from statsmodels.datasets import elnino

    wide = pl.from_pandas(elnino.load().data)
    return (
        wide.with_columns(pl.col("YEAR").cast(pl.Int32).alias("year"))
        .unpivot(index="year", on=list(MONTHS), variable_name="mon", value_name="sst_c")
        .with_columns(
            pl.col("mon")
            .replace_strict({m: i + 1 for i, m in enumerate(MONTHS)}, return_dtype=pl.Int32)
            .alias("month"),
            pl.col("sst_c").cast(pl.Float64),
        )
        .select("year", "month", "sst_c")
        .sort("year", "month")
    )


def sst_dataset(
    name: str,
    frame: pl.DataFrame,
    *,
    train_end_year: int,
    validation_end_year: int,
    start_year: int | None = None,
    end_year: int | None = None,
    meta: dict | None = None,
) -> Dataset:
    """A forecast dataset from a ``year, month, sst_c`` frame (anomalies vs the training years)."""
    frame = frame.with_columns(pl.col("sst_c").alias("_base"))
    frame = _finish(frame, start_year=start_year, end_year=end_year)
    return _dataset(name, frame, train_end_year, validation_end_year, meta or {})


def load_elnino(
    train_end_year: int = 1980,
    validation_end_year: int = 1990,
    start_year: int | None = None,
    end_year: int | None = None,
) -> Dataset:
    """``enso``: statsmodels' embedded Niño 1+2 SST (1950-2010), anomalies vs training years.
    Default split: train 1950-1980, validation 1981-1990, test 1991-2010."""
    return sst_dataset(
        "enso",
        elnino_frame(),
        train_end_year=train_end_year,
        validation_end_year=validation_end_year,
        start_year=start_year,
        end_year=end_year,
        meta={"region": "Niño 1+2 (0-10°S, 90-80°W)", "product": "ERSST v3b"},
    )


def _nino34_frame(path: Path, fmt: str) -> tuple[pl.DataFrame, str]:
    if fmt == "psl":
        raw = parse_psl(path)
        # The same PSL layout holds absolute SST (nino34.long.data) or anomalies (nino34.long.anom.data).
        is_anomaly = raw.get_column("value").drop_nulls().mean() < 10.0
        if is_anomaly:
            frame = raw.with_columns(pl.lit(None, dtype=pl.Float64).alias("sst_c"), pl.col("value").alias("_base"))
            return frame.drop("value"), "HadISST (NOAA PSL), file anomalies re-centred on the training years"
        frame = raw.with_columns(pl.col("value").alias("sst_c"), pl.col("value").alias("_base"))
        return frame.drop("value"), "HadISST (NOAA PSL) absolute SST"
    if fmt == "cpc-sstoi":
        raw = parse_cpc_sstoi(path)
        return raw.select(
            "year", "month", pl.col("nino34_c").alias("sst_c"), pl.col("nino34_c").alias("_base")
        ), "OISST v2.1 (NOAA CPC)"
    if fmt == "cpc-detrend":
        raw = parse_cpc_detrend(path)
        return raw.select(
            "year", "month", pl.col("nino34_c").alias("sst_c"), pl.col("nino34_c").alias("_base")
        ), "ERSST v5 (NOAA CPC)"
    raise DataFormatError(f"unknown Niño 3.4 format {fmt!r}; use one of psl, cpc-sstoi, cpc-detrend")


def load_nino34(
    path: str | os.PathLike | None = None,
    source: str = "psl",
    *,
    url: str | None = None,
    cache_dir: str | os.PathLike | None = None,
    refresh: bool = False,
    train_end_year: int = 1989,
    validation_end_year: int = 1999,
    start_year: int | None = 1950,
    end_year: int | None = None,
    soi: str = "none",
    soi_path: str | os.PathLike | None = None,
    soi_url: str | None = None,
) -> Dataset:
    """``enso-nino34``: monthly Niño 3.4 from a local file or a cached download.

    ``soi`` adds the Southern Oscillation Index as a covariate column ``soi`` (declared in
    ``meta["covariates"]``, so forecast candidates receive it in x): ``cpc`` (NOAA CPC standardized
    SOI, from 1951) or ``bom`` (Bureau of Meteorology, from 1876), downloaded once into the cache
    (``soi_url=`` overrides the address), or ``soi_path=`` a local copy of either file (format
    sniffed). The series is cut to the months both indices cover (CPC: from 1951-01); a month
    missing inside that span is a DataFormatError. Like the anomaly, ``soi`` is the index minus its
    training-years mean for the calendar month.

    ``source`` picks the product when downloading: ``psl`` (anomalies, HadISST), ``psl-sst``
    (absolute, HadISST), ``cpc-sstoi`` (OISST v2.1, from 1982) or ``cpc-detrend`` (ERSST v5, from
    1950). A local ``path`` is sniffed for its format. Default split: train 1950-1989, validation
    1990-1999, test 2000 on.
    """
    if path is None:
        if source not in URLS:
            raise DataFormatError(f"unknown source {source!r}; use one of {sorted(URLS)}")
        path = cache.fetch(url or URLS[source], CACHE_NAMES[source], subdir="enso", cache=cache_dir, refresh=refresh)
    path = Path(path)
    if not path.is_file():
        from .errors import DataNotFoundError

        raise DataNotFoundError(f"{path}: no such file")
    fmt = sniff_format(path)
    frame, product = _nino34_frame(path, fmt)
    meta = {"region": "Niño 3.4 (5°N-5°S, 170-120°W)", "product": product, "format": fmt, "file": str(path)}
    covariates: tuple[str, ...] = ()
    if soi_path is not None or soi != "none":
        frame, soi_meta = _join_soi(frame, soi, soi_path, soi_url, cache_dir, refresh)
        meta.update(soi_meta)
        covariates = ("soi",)
    frame = _finish(frame, start_year=start_year, end_year=end_year)
    if covariates and frame.get_column("soi").null_count():
        gap = frame.filter(pl.col("soi").is_null()).row(0, named=True)
        raise DataFormatError(f"the SOI is missing at {gap['year']}-{gap['month']:02d}, inside the Niño 3.4 series")
    return _dataset("enso-nino34", frame, train_end_year, validation_end_year, meta, covariates)


def _join_soi(
    frame: pl.DataFrame,
    soi: str,
    soi_path: str | os.PathLike | None,
    soi_url: str | None,
    cache_dir: str | os.PathLike | None,
    refresh: bool,
) -> tuple[pl.DataFrame, dict]:
    """The Niño 3.4 frame with a ``soi`` column, cut to the months the SOI covers."""
    if soi_path is None:
        if soi not in SOI_URLS:
            raise DataFormatError(f"unknown soi {soi!r}; use one of none, {', '.join(sorted(SOI_URLS))} (or soi_path=)")
        soi_path = cache.fetch(
            soi_url or SOI_URLS[soi], SOI_CACHE_NAMES[soi], subdir="enso", cache=cache_dir, refresh=refresh
        )
    soi_path = Path(soi_path)
    if not soi_path.is_file():
        from .errors import DataNotFoundError

        raise DataNotFoundError(f"{soi_path}: no such file (soi_path)")
    index, product = soi_frame(soi_path)
    stamp = pl.col("year") * 12 + pl.col("month")
    first, last = index.select(stamp.min().alias("a"), stamp.max().alias("b")).row(0)
    frame = frame.filter(stamp.is_between(first, last)).join(index, on=["year", "month"], how="left")
    return frame, {"covariate_product": product, "soi_file": str(soi_path)}
