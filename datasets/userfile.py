"""Any user CSV/Parquet file as a dataset: ``--data FILE --x COL --y COL [--group COL]``.

Column roles come from the call or from a small TOML manifest beside the file (``data.csv`` ->
``data.toml``); call arguments win over the manifest. Example manifest::

    title = "Pouch-cell fade, lab 3"
    x = "cycle"
    y = "capacity_ah"
    group = "cell_id"
    task = "curve"            # or "forecast"
    train_fraction = 0.6
    validation_fraction = 0.2
    source = "our lab"
    licence = "internal"
    citation = "..."
    [units]
    cycle = "cycle"
    capacity_ah = "Ah"

The split is temporal: within each group (or the whole file), in x order, the first
``train_fraction`` of the rows train (default 0.6), the next ``validation_fraction`` validate
(default 0.2; the search ranks by them), the rest are the test part (read once, at the end of a
run). Both fractions also come from the command line (``--train-fraction``,
``--validation-fraction``), which wins over the manifest.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path

import polars as pl

from .battery import check_fractions
from .errors import DataFormatError, DataNotFoundError, SplitError
from .schema import TEST, TRAIN, VALIDATION, Column, Dataset

MANIFEST_KEYS = {
    "title",
    "x",
    "y",
    "group",
    "task",
    "train_fraction",
    "validation_fraction",
    "source",
    "licence",
    "citation",
    "units",
    "name",
}


def scan(path: Path) -> pl.LazyFrame:
    suffix = path.suffix.lower()
    if suffix == ".parquet":
        return pl.scan_parquet(path)
    if suffix in (".csv", ".txt"):
        return pl.scan_csv(path, infer_schema_length=10000)
    raise DataFormatError(f"{path}: unsupported file type {suffix!r}; use .csv or .parquet")


def read_manifest(path: Path) -> dict:
    manifest_path = path.with_suffix(".toml")
    if not manifest_path.is_file():
        return {}
    try:
        manifest = tomllib.loads(manifest_path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise DataFormatError(f"{manifest_path}: invalid TOML ({exc})") from exc
    unknown = set(manifest) - MANIFEST_KEYS
    if unknown:
        raise DataFormatError(f"{manifest_path}: unknown key(s) {sorted(unknown)}; allowed: {sorted(MANIFEST_KEYS)}")
    manifest["_path"] = str(manifest_path)
    return manifest


def load_file(
    path: str | os.PathLike,
    *,
    x: str | None = None,
    y: str | None = None,
    group: str | None = None,
    train_fraction: float | None = None,
    validation_fraction: float | None = None,
) -> Dataset:
    path = Path(path)
    if not path.is_file():
        raise DataNotFoundError(f"{path}: no such file")
    manifest = read_manifest(path)
    x = x or manifest.get("x")
    y = y or manifest.get("y")
    group = group or manifest.get("group")
    train_fraction = train_fraction if train_fraction is not None else manifest.get("train_fraction", 0.6)
    validation_fraction = (
        validation_fraction if validation_fraction is not None else manifest.get("validation_fraction", 0.2)
    )
    if not x or not y:
        raise DataFormatError(
            f"{path}: say which columns are x and y (--x COL --y COL, or x = / y = in {path.with_suffix('.toml')})"
        )
    check_fractions(train_fraction, validation_fraction)
    lf = scan(path)
    names = lf.collect_schema().names()
    wanted = [c for c in (x, y, group) if c]
    missing = [c for c in wanted if c not in names]
    if missing:
        raise DataFormatError(f"{path}: no column(s) {missing}; the file has {names}")
    keys = [group] if group else []
    frame = (
        lf.with_columns(pl.col(x).cast(pl.Float64), pl.col(y).cast(pl.Float64))
        .filter(pl.col(x).is_not_null() & pl.col(y).is_not_null() & pl.col(y).is_finite())
        .sort([*keys, x])
        .collect()
    )
    if frame.height < 4:
        raise SplitError(f"{path}: only {frame.height} usable rows")
    rank = pl.int_range(pl.len())
    count = pl.len()
    if group:
        rank, count = rank.over(group), count.over(group)
    n_train = (count * float(train_fraction)).floor().clip(lower_bound=1)
    n_fit = n_train + (count * float(validation_fraction)).floor().clip(lower_bound=1)
    frame = frame.with_columns(
        pl.when(rank < n_train)
        .then(pl.lit(TRAIN))
        .when(rank < n_fit)
        .then(pl.lit(VALIDATION))
        .otherwise(pl.lit(TEST))
        .alias("split")
    )
    parts = set(frame.get_column("split").unique().to_list())
    if parts != {TRAIN, VALIDATION, TEST}:
        raise SplitError(
            f"{path}: train_fraction={train_fraction}, validation_fraction={validation_fraction} "
            f"leave no {sorted({TRAIN, VALIDATION, TEST} - parts)} rows ({frame.height} rows)"
        )
    units = manifest.get("units", {})
    columns = tuple(Column(c, units.get(c, "?"), "user column") for c in frame.columns if c != "split")
    meta = {
        "file": str(path),
        "train_fraction": float(train_fraction),
        "validation_fraction": float(validation_fraction),
        "task": manifest.get("task", "curve"),
        "title": manifest.get("title", path.name),
        "source": manifest.get("source", "user file"),
        "licence": manifest.get("licence", "unknown"),
        "citation": manifest.get("citation", ""),
        "manifest": manifest.get("_path"),
    }
    return Dataset(
        name=manifest.get("name", path.stem),
        frame=frame,
        x=x,
        y=y,
        group=group,
        definition=None,
        columns=columns,
        meta=meta,
    )
