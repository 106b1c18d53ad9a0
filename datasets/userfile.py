"""Any user CSV/Parquet file as a dataset: ``--data FILE --x COL --y COL [--group COL]``.

Column roles come from the call or from a small TOML manifest beside the file (``data.csv`` ->
``data.toml``); call arguments win over the manifest. Example manifest::

    title = "Pouch-cell fade, lab 3"
    name = "pouch-lab3"       # names the dataset, its MLflow experiment and registered model
    x = "cycle"               # or several inputs: x = ["strain", "temp"]
    y = "capacity_ah"
    group = "cell_id"
    task = "curve"            # or "forecast", or "regression"
    split = "temporal"        # or "random", "grouped" (a `split` column in the file wins)
    train_fraction = 0.6
    validation_fraction = 0.2
    source = "our lab"
    licence = "internal"
    citation = "..."
    [units]
    cycle = "cycle"
    capacity_ah = "Ah"

A forecast file (``task = "forecast"``) may also say (each optional; ``datasets/tasks/forecast_inputs.py``)::

    time_step = "year"        # the unit the prompt names; default from the x spacing
    period = 11               # the calendar cycle in steps; default from the time step:
                              # 12 for months, 4 for quarters, none for years
    leads = 10                # forecast leads 1..leads; default one period (2 for short ones), else 12
    covariates = ["soi"]      # columns observed with y, given to (update s y x) (or --covariate COL)

Several inputs (``--x a --x b``, ``--x a,b`` or ``x = ["a", "b"]``) make a table for the
``regression`` task (datasets/tasks/regression.py); one input keeps the ``curve`` task.

The split (``--split`` or the manifest's ``split``):

- a ``split`` column in the file (values ``train``, ``validation``, ``test``) is honoured as
  given; asking for another split as well is an error;
- ``temporal`` (the default for one input, i.e. series and grouped curves): within each group (or
  the whole file), in x order, the first ``train_fraction`` of the rows train (default 0.6), the
  next ``validation_fraction`` validate (default 0.2; the search ranks by them), the rest are the
  test part (read once, at the end of a run);
- ``random`` (the default for several inputs: a table without an order): each row draws its part
  with those fractions, seeded (``SPLIT_SEED``), so the same file always splits the same way;
- ``grouped`` (needs ``--group``): whole groups are drawn (seeded) into train, validation and test
  with those fractions of the groups, so the test asks about groups never seen.

Both fractions also come from the command line (``--train-fraction``, ``--validation-fraction``),
which wins over the manifest. ``Dataset.meta["split"]`` says which split was used.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path

import numpy as np
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
    "split",
    "covariates",
    "leads",
    "period",
    "time_step",
}

SPLIT_KINDS = ("temporal", "random", "grouped")
SPLIT_SEED = 0  # the random and grouped splits' seed: a file splits the same way in every run


def parse_inputs(x: str | list[str] | tuple[str, ...] | None, names: list[str] | None = None) -> tuple[str, ...]:
    """The input columns from ``--x`` (repeatable) or the manifest's ``x`` (a string or a list).

    A value holding commas (``--x x,v``) is split on them unless the file has a column of that
    exact name (``names``)."""
    if x is None or x == "" or x == []:
        return ()
    values = [x] if isinstance(x, str) else list(x)
    out: list[str] = []
    for value in values:
        if not isinstance(value, str):
            raise DataFormatError(f"input column names must be strings, got {value!r}")
        if "," in value and not (names and value in names):
            out.extend(part.strip() for part in value.split(",") if part.strip())
        else:
            out.append(value)
    duplicated = sorted({c for c in out if out.count(c) > 1})
    if duplicated:
        raise DataFormatError(f"input column(s) {duplicated} given more than once")
    return tuple(out)


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


def manifest_name(path: str | os.PathLike) -> str | None:
    """The ``name`` of the manifest beside ``path`` (None without one; a bad manifest is left to
    ``load_file`` to report)."""
    try:
        name = read_manifest(Path(path)).get("name")
    except (DataFormatError, OSError):
        return None
    return name if isinstance(name, str) and name.strip() else None


def load_file(
    path: str | os.PathLike,
    *,
    x: str | list[str] | tuple[str, ...] | None = None,
    y: str | None = None,
    group: str | None = None,
    train_fraction: float | None = None,
    validation_fraction: float | None = None,
    split: str | None = None,
    name: str | None = None,
    covariates: list[str] | tuple[str, ...] | None = None,
) -> Dataset:
    """``covariates`` (or the manifest's ``covariates``): columns observed with y that a forecast
    candidate receives in x; rows where one is missing are dropped like rows without x or y."""
    path = Path(path)
    if not path.is_file():
        raise DataNotFoundError(f"{path}: no such file")
    manifest = read_manifest(path)
    y = y or manifest.get("y")
    group = group or manifest.get("group")
    split = split or manifest.get("split")
    name = name or manifest.get("name") or path.stem
    train_fraction = train_fraction if train_fraction is not None else manifest.get("train_fraction", 0.6)
    validation_fraction = (
        validation_fraction if validation_fraction is not None else manifest.get("validation_fraction", 0.2)
    )
    lf = scan(path)
    names = lf.collect_schema().names()
    inputs = parse_inputs(x if x else manifest.get("x"), names)
    if not inputs or not y:
        raise DataFormatError(
            f"{path}: say which columns are x and y (--x COL --y COL, or x = / y = in {path.with_suffix('.toml')})"
        )
    if split is not None and split not in SPLIT_KINDS:
        raise SplitError(f"{path}: unknown split {split!r}; use one of {', '.join(SPLIT_KINDS)} (or a split column)")
    if not isinstance(name, str) or not name.strip():
        raise DataFormatError(f"{path}: the dataset name must be a non-empty string, got {name!r}")
    check_fractions(train_fraction, validation_fraction)
    covariates = list(covariates) if covariates else list(manifest.get("covariates") or [])
    if not all(isinstance(c, str) and c for c in covariates):
        raise DataFormatError(f"{path}: covariates must be column names, got {covariates!r}")
    wanted = [*inputs, y] + ([group] if group else []) + covariates
    missing = [c for c in wanted if c not in names]
    if missing:
        raise DataFormatError(f"{path}: no column(s) {missing}; the file has {names}")
    if y in inputs:
        raise DataFormatError(f"{path}: the target {y!r} is also an input")
    has_split_column = "split" in names and "split" not in wanted
    if has_split_column and split is not None:
        raise SplitError(
            f"{path}: the file has a split column, which is honoured as given; drop --split {split} "
            "(or the manifest's split) or remove the column"
        )
    if split == "grouped" and not group:
        raise SplitError(f"{path}: --split grouped holds out whole groups; name the group column (--group COL)")
    kind = "column" if has_split_column else (split or ("random" if len(inputs) > 1 else "temporal"))
    task = manifest.get("task") or ("curve" if len(inputs) == 1 and kind == "temporal" else "regression")
    keep_all = len(inputs) == 1 and task != "regression"  # a curve's data card shows the other columns
    frame = _read_rows(path, lf, inputs, y, group, kind, keep_all, covariates)
    if frame.height < 4:
        raise SplitError(f"{path}: only {frame.height} usable rows")
    frame = _assign_split(path, frame, inputs[0], group, kind, float(train_fraction), float(validation_fraction))
    # one chunk per column (a large CSV is read in hundreds): the tasks gather rows by index from
    # numpy views of the columns, which are copies when a column is chunked
    frame = frame.rechunk()
    units = manifest.get("units", {})
    columns = tuple(Column(c, units.get(c, "?"), "user column") for c in frame.columns if c != "split")
    meta = {
        "file": str(path),
        "train_fraction": float(train_fraction),
        "validation_fraction": float(validation_fraction),
        "split": kind,
        "split_seed": SPLIT_SEED if kind in ("random", "grouped") else None,
        "task": task,
        "title": manifest.get("title", path.name),
        "source": manifest.get("source", "user file"),
        "licence": manifest.get("licence", "unknown"),
        "citation": manifest.get("citation", ""),
        "manifest": manifest.get("_path"),
    }
    # what a forecast task reads (forecast_inputs.py): only when given, so defaults stay the task's
    meta.update({k: manifest[k] for k in ("leads", "period", "time_step") if k in manifest})
    if covariates:
        meta["covariates"] = covariates
    return Dataset(
        name=name,
        frame=frame,
        x=inputs[0],
        y=y,
        group=group,
        definition=None,
        columns=columns,
        meta=meta,
        inputs=inputs,
    )


def _read_rows(
    path: Path,
    lf: pl.LazyFrame,
    inputs: tuple[str, ...],
    y: str,
    group: str | None,
    kind: str,
    keep_all: bool,
    covariates: tuple[str, ...] | list[str] = (),
) -> pl.DataFrame:
    """The usable rows (every input, the target and every covariate finite), read lazily: only the
    columns needed (all of them for a one-input curve, whose data card shows the others)."""
    numeric = [*inputs, y, *covariates]
    schema = lf.collect_schema()
    if not keep_all:
        lf = lf.select([*numeric] + ([group] if group else []) + (["split"] if kind == "column" else []))
    try:
        lf = lf.with_columns([pl.col(c).cast(pl.Float64, strict=True) for c in numeric])
        ok = pl.all_horizontal([pl.col(c).is_not_null() & pl.col(c).is_finite() for c in numeric])
        lf = lf.filter(ok)
        if kind == "temporal":
            lf = lf.sort([*([group] if group else []), inputs[0]])
        return lf.collect()
    except (pl.exceptions.InvalidOperationError, pl.exceptions.ComputeError) as exc:
        bad = [c for c in numeric if not schema[c].is_numeric()]
        raise DataFormatError(
            f"{path}: column(s) {bad or numeric} are not numeric ({str(exc).splitlines()[0]})"
        ) from None


def _assign_split(
    path: Path, frame: pl.DataFrame, x: str, group: str | None, kind: str, train: float, validation: float
) -> pl.DataFrame:
    """``frame`` with its ``split`` column (see the module docstring for the kinds)."""
    if kind == "column":
        frame = frame.with_columns(pl.col("split").cast(pl.Utf8).str.strip_chars().str.to_lowercase())
        bad = sorted(set(frame.get_column("split").unique().to_list()) - {TRAIN, VALIDATION, TEST})
        if bad:
            raise DataFormatError(
                f"{path}: the split column has value(s) {bad[:5]}; use {TRAIN}, {VALIDATION} and {TEST}"
            )
    elif kind == "temporal":
        rank = pl.int_range(pl.len())
        count = pl.len()
        if group:
            rank, count = rank.over(group), count.over(group)
        n_train = (count * train).floor().clip(lower_bound=1)
        n_fit = n_train + (count * validation).floor().clip(lower_bound=1)
        frame = frame.with_columns(
            pl.when(rank < n_train)
            .then(pl.lit(TRAIN))
            .when(rank < n_fit)
            .then(pl.lit(VALIDATION))
            .otherwise(pl.lit(TEST))
            .alias("split")
        )
    elif kind == "random":
        # (the parts as a polars expression over the draws: numpy string arrays of ten million rows
        # take 400 MB each)
        draw = pl.Series("split", np.random.default_rng(SPLIT_SEED).random(frame.height))
        part = (
            pl.when(draw < train)
            .then(pl.lit(TRAIN))
            .when(draw < train + validation)
            .then(pl.lit(VALIDATION))
            .otherwise(pl.lit(TEST))
        )
        frame = frame.with_columns(part.alias("split"))
    else:  # grouped: whole groups, drawn in a seeded order
        keys = frame.get_column(group).unique(maintain_order=True).to_list()
        if len(keys) < 3:
            raise SplitError(f"{path}: --split grouped needs at least 3 groups in {group!r}, the file has {len(keys)}")
        order = np.random.default_rng(SPLIT_SEED).permutation(len(keys))
        n_train = max(1, int(len(keys) * train))
        n_val = max(1, int(len(keys) * validation))
        n_train = min(n_train, len(keys) - 2)
        n_val = min(n_val, len(keys) - n_train - 1)
        part_of = {}
        for rank, i in enumerate(order):
            part_of[keys[i]] = TRAIN if rank < n_train else VALIDATION if rank < n_train + n_val else TEST
        frame = frame.with_columns(pl.col(group).replace_strict(part_of, return_dtype=pl.Utf8).alias("split"))
    parts = set(frame.get_column("split").unique().to_list())
    if parts != {TRAIN, VALIDATION, TEST}:
        raise SplitError(
            f"{path}: the {kind} split (train_fraction={train}, validation_fraction={validation}) leaves no "
            f"{sorted({TRAIN, VALIDATION, TEST} - parts)} rows ({frame.height} rows)"
        )
    return frame
