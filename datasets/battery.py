"""Battery capacity fade: NASA PCoE and Severson et al. 2019 loaders, a tidy format, a synthetic set.

Every loader returns the same tidy layout, one row per (cell, cycle):

    cell_id (str), cycle (int), capacity_ah (float, Ah), soh (float), split

State of health is ``soh = capacity_ah / initial capacity``, where the initial capacity is the mean
of the cell's first ``soh_ref_cycles`` retained cycles. Those cycles lie in the training part of
every split, so the normalisation never looks at held-out cycles (nor at the end of life).
The split is per cell, in cycle order: the first ``train_fraction`` of the cell's retained cycles
train, the next ``validation_fraction`` validate (the search ranks by them), the last cycles are
the test part. ``test_cells`` are held out whole (Severson: batch 3 by default): their first
``train_fraction + validation_fraction`` cycles are ``test_fit`` (used at the end of a run to fit
that cell's own parameters), the rest ``test``; the search never sees any of their rows.
``validation_cells`` are held out whole from training the same way, for the search's validation:
their first ``train_fraction + validation_fraction`` cycles are ``validation_fit`` (each candidate
fits that cell's own parameters there), the rest ``validation`` (Severson: a fifth of batches 1-2 by
default, spread evenly over the cell ids).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import polars as pl

from . import cache
from .catalog import registered
from .errors import DataFormatError, DataNotFoundError, SplitError
from .schema import TEST, TEST_FIT, TRAIN, VALIDATION, VALIDATION_FIT, Column, Dataset

DATA_ENV = "NDVM_BATTERY_DATA"  # path of a battery file used when none is given

BATTERY_COLUMNS = (
    Column("cell_id", "-", "cell identifier (NASA B0005..., Severson b<batch>c<channel>, or yours)"),
    Column("cycle", "cycle", "cycle (discharge) number within the cell"),
    Column("capacity_ah", "Ah", "discharge capacity of that cycle"),
    Column("soh", "1", "state of health: capacity / mean capacity of the cell's first soh_ref_cycles cycles"),
    Column(
        "split",
        "-",
        '"train" (first train_fraction of the cell\'s cycles), "validation" (the next '
        'validation_fraction), "test" (the rest); whole test cells: "test_fit" then "test"',
    ),
)

# The four classic NASA cells (24 °C, 2 A constant-current discharge, run to ~30 % fade). The other
# 30 cells have short or erratic records (see the shared data's battery/README_nasa_pcoe.md, ../shared/data beside the project).
NASA_DEFAULT_CELLS = ("B0005", "B0006", "B0007", "B0018")

WHERE_TO_GET = (
    "No battery data found. Give a file with path=... (CLI: --data FILE), or set "
    f"{DATA_ENV}=FILE, or put one of nasa_pcoe.csv / severson.csv / battery.csv / battery.parquet into "
    "{cache}. Accepted layouts: a tidy CSV/Parquet with columns cell_id, cycle, capacity_ah; "
    "the NASA PCoE per-discharge summary (cell_id, cycle, capacity_ah, operation_index, ...; data: "
    "NASA Ames Prognostics Data Repository, 'Battery Data Set', "
    "https://www.nasa.gov/intelligent-systems-division/discovery-and-systems-health/pcoe/pcoe-data-set-repository/); "
    "or the Severson et al. 2019 per-cycle summary (cell_id, cycle, discharge_capacity_ah[, qd_outlier_flag]; "
    "data: https://data.matr.io/1/projects/5c48dd2bc625d700019f3204). "
    "For a demo without data use the dataset 'battery-synthetic'."
)


# --------------------------------------------------------------------------- format detection


def _scan(path: Path) -> pl.LazyFrame:
    suffix = path.suffix.lower()
    if suffix == ".parquet":
        return pl.scan_parquet(path)
    if suffix in (".csv", ".txt", ".gz"):
        return pl.scan_csv(path, infer_schema_length=10000)
    raise DataFormatError(f"{path}: battery data must be .csv or .parquet")


def sniff_format(columns: list[str]) -> str:
    """``nasa``, ``severson`` or ``tidy`` from a file's column names."""
    cols = set(columns)
    if {"cell_id", "cycle", "discharge_capacity_ah"} <= cols:
        return "severson"
    if {"cell_id", "cycle", "capacity_ah", "operation_index"} <= cols:
        return "nasa"
    if {"cell_id", "cycle", "capacity_ah"} <= cols:
        return "tidy"
    raise DataFormatError(
        f"not a battery file: columns {sorted(cols)}; need cell_id, cycle, capacity_ah "
        "(tidy or NASA PCoE) or cell_id, cycle, discharge_capacity_ah (Severson)"
    )


def is_battery_file(path: Path) -> bool:
    try:
        sniff_format(_scan(path).collect_schema().names())
        return True
    except (DataFormatError, pl.exceptions.PolarsError, OSError):
        return False


# --------------------------------------------------------------------------- raw readers (lazy)


def read_nasa(path: str | os.PathLike) -> pl.LazyFrame:
    """NASA PCoE per-discharge summary -> lazy tidy rows (extra column ambient_temperature_c)."""
    lf = _scan(Path(path))
    names = lf.collect_schema().names()
    if sniff_format(names) != "nasa":
        raise DataFormatError(f"{path}: not the NASA PCoE per-discharge layout (columns {names})")
    return lf.select(
        pl.col("cell_id").cast(pl.String),
        pl.col("cycle").cast(pl.Int64),
        pl.col("capacity_ah").cast(pl.Float64),
        pl.col("ambient_temperature_c").cast(pl.Float64),
    )


def read_severson(path: str | os.PathLike, drop_outliers: bool = True) -> pl.LazyFrame:
    """Severson et al. 2019 per-cycle summary -> lazy tidy rows (extra column charge_policy).

    ``drop_outliers`` removes rows whose ``qd_outlier_flag`` (an annotation stored in the file) is 1.
    """
    lf = _scan(Path(path))
    names = lf.collect_schema().names()
    if sniff_format(names) != "severson":
        raise DataFormatError(f"{path}: not the Severson per-cycle layout (columns {names})")
    if drop_outliers and "qd_outlier_flag" in names:
        lf = lf.filter(pl.col("qd_outlier_flag") != 1)
    extra = [pl.col("charge_policy").cast(pl.String)] if "charge_policy" in names else []
    return lf.select(
        pl.col("cell_id").cast(pl.String),
        pl.col("cycle").cast(pl.Int64),
        pl.col("discharge_capacity_ah").cast(pl.Float64).alias("capacity_ah"),
        *extra,
    )


def read_tidy(path: str | os.PathLike) -> pl.LazyFrame:
    lf = _scan(Path(path))
    names = lf.collect_schema().names()
    sniff_format(names)  # raises a clear error on a wrong layout
    return lf.with_columns(
        pl.col("cell_id").cast(pl.String), pl.col("cycle").cast(pl.Int64), pl.col("capacity_ah").cast(pl.Float64)
    )


# --------------------------------------------------------------------------- tidy -> dataset


def _cell_filter(cells) -> pl.Expr:
    """A filter on cell_id: a list or comma-separated string of ids; an entry ending in '*' is a
    prefix ("b1*" selects Severson batch 1)."""
    if isinstance(cells, str):
        cells = [c.strip() for c in cells.split(",") if c.strip()]
    cells = list(cells)
    exact = [c for c in cells if not c.endswith("*")]
    prefixes = [c[:-1] for c in cells if c.endswith("*")]
    cond = pl.col("cell_id").is_in(exact)
    for p in prefixes:
        cond = cond | pl.col("cell_id").str.starts_with(p)
    return cond


def _select_cells(lf: pl.LazyFrame, cells) -> pl.LazyFrame:
    if cells is None or cells == "all":
        return lf
    return lf.filter(_cell_filter(cells))


def pick_validation_cells(cells: list[str], validation_cells) -> list[str]:
    """The validation cells among ``cells`` (the cells left after the test cells): None, "" or
    "none" for none; a fraction in (0, 1) (number or text) for that share of the cells, rounded (none
    below half a cell), evenly spread over the sorted ids (deterministic); otherwise ids or prefixes
    as ``cells=`` takes them."""
    if validation_cells is None or (isinstance(validation_cells, str) and validation_cells.strip() in ("", "none")):
        return []
    fraction = None
    if isinstance(validation_cells, (int, float)) and not isinstance(validation_cells, bool):
        fraction = float(validation_cells)
    elif isinstance(validation_cells, str):
        try:
            fraction = float(validation_cells)
        except ValueError:
            fraction = None
    ordered = sorted(cells)
    if fraction is not None:
        if not 0.0 < fraction < 1.0:
            raise SplitError(f"validation_cells as a fraction must be in (0, 1), got {validation_cells!r}")
        n = round(fraction * len(ordered))  # below half a cell: none (a selection of a few cells)
        if n == 0:
            return []
        if n >= len(ordered):
            raise SplitError(f"validation_cells={validation_cells!r} leaves no training cell of {len(ordered)}")
        # evenly spaced ranks, offset half a step so that neither end is always chosen
        step = len(ordered) / n
        return [ordered[int(step * (k + 0.5))] for k in range(n)]
    chosen = pl.DataFrame({"cell_id": ordered}).filter(_cell_filter(validation_cells)).get_column("cell_id").to_list()
    if not chosen:
        raise SplitError(f"validation_cells={validation_cells!r} matches none of the training cells")
    return chosen


def check_fractions(train_fraction: float, validation_fraction: float) -> None:
    """Both fractions in (0, 1) and leaving a test part: a SplitError naming the bad value otherwise."""
    if not 0.0 < float(train_fraction) < 1.0:
        raise SplitError(f"train_fraction must be in (0, 1), got {train_fraction}")
    if not 0.0 < float(validation_fraction) < 1.0:
        raise SplitError(f"validation_fraction must be in (0, 1), got {validation_fraction}")
    if float(train_fraction) + float(validation_fraction) >= 1.0:
        raise SplitError(
            f"train_fraction + validation_fraction must be < 1 (the rest is the test part), "
            f"got {train_fraction} + {validation_fraction}"
        )


def tidy_dataset(
    lf: pl.LazyFrame,
    *,
    name: str,
    train_fraction: float = 0.5,
    validation_fraction: float = 0.2,
    soh_ref_cycles: int = 5,
    min_cycles: int = 20,
    cells=None,
    test_cells=None,
    validation_cells=None,
    meta: dict | None = None,
) -> Dataset:
    """Clean, split per cell and add state of health.

    Cleaning (counted in ``meta['dropped_rows']``): rows with a missing or non-positive capacity are
    removed; cells with fewer than ``min_cycles`` remaining cycles are removed. (Rows removed by a
    reader before this point, such as Severson's flagged outliers, are counted by that loader.)
    """
    check_fractions(train_fraction, validation_fraction)
    lf = _select_cells(lf, cells)
    raw = lf.collect()
    if raw.height == 0:
        raise DataFormatError(f"{name}: no rows (cells={cells!r})")
    clean = raw.filter(
        pl.col("capacity_ah").is_not_null() & pl.col("capacity_ah").is_finite() & (pl.col("capacity_ah") > 0)
    )
    clean = clean.unique(subset=["cell_id", "cycle"], keep="first", maintain_order=True).sort("cell_id", "cycle")
    counts = clean.group_by("cell_id").len()
    keep = counts.filter(pl.col("len") >= min_cycles).get_column("cell_id")
    short = counts.filter(pl.col("len") < min_cycles).get_column("cell_id").to_list()
    clean = clean.filter(pl.col("cell_id").is_in(keep.implode()))
    if clean.height == 0:
        raise DataFormatError(f"{name}: no cell has at least {min_cycles} valid cycles")
    min_train = max(soh_ref_cycles, 2)
    frame = (
        clean.with_columns(
            pl.int_range(pl.len()).over("cell_id").alias("_i"),
            pl.len().over("cell_id").alias("_n"),
        )
        # floor: the training part never includes a cycle past train_fraction of the record
        .with_columns(
            pl.max_horizontal((pl.col("_n") * train_fraction).floor().cast(pl.Int64), pl.lit(min_train)).alias(
                "_n_train"
            )
        )
        .with_columns(
            (
                pl.col("_n_train")
                + pl.max_horizontal((pl.col("_n") * validation_fraction).floor().cast(pl.Int64), pl.lit(1))
            ).alias("_n_fit")
        )
    )
    held = _cell_filter(test_cells) if test_cells is not None else pl.lit(False)
    not_held = frame.filter(~held).get_column("cell_id").unique().to_list()
    validating = pl.col("cell_id").is_in(pick_validation_cells(not_held, validation_cells))
    frame = frame.with_columns(
        pl.when(held & (pl.col("_i") < pl.col("_n_fit")))
        .then(pl.lit(TEST_FIT))
        .when(held)
        .then(pl.lit(TEST))
        .when(validating & (pl.col("_i") < pl.col("_n_fit")))
        .then(pl.lit(VALIDATION_FIT))
        .when(validating)
        .then(pl.lit(VALIDATION))
        .when(pl.col("_i") < pl.col("_n_train"))
        .then(pl.lit(TRAIN))
        .when(pl.col("_i") < pl.col("_n_fit"))
        .then(pl.lit(VALIDATION))
        .otherwise(pl.lit(TEST))
        .alias("split")
    )
    short_parts = (
        frame.group_by("cell_id")
        .agg((pl.col("split") == TEST).sum().alias("n_test"), (pl.col("split") == VALIDATION_FIT).any().alias("_v"))
        .filter((pl.col("n_test") == 0) & ~pl.col("_v"))  # a validation cell has no test rows
    )
    if short_parts.height:
        raise SplitError(
            f"{name}: cells {short_parts.get_column('cell_id').to_list()[:5]} have no test cycles left "
            f"with train_fraction={train_fraction}, validation_fraction={validation_fraction}"
        )
    if frame.filter(pl.col("split") == TRAIN).height == 0 and (test_cells is not None or validation_cells is not None):
        raise SplitError(
            f"{name}: test_cells={test_cells!r} and validation_cells={validation_cells!r} hold out every cell; "
            "nothing is left to train on"
        )
    if test_cells is not None and frame.filter(pl.col("split") != TEST_FIT).filter(pl.col("split") != TEST).height == 0:
        raise SplitError(f"{name}: test_cells={test_cells!r} hold out every cell; nothing is left to train on")
    # Initial capacity: mean of the first soh_ref_cycles cycles (always inside the training part).
    ref = (
        frame.filter(pl.col("_i") < soh_ref_cycles)
        .group_by("cell_id")
        .agg(pl.col("capacity_ah").mean().alias("capacity_ref_ah"))
    )
    frame = frame.join(ref, on="cell_id", how="left").with_columns(
        (pl.col("capacity_ah") / pl.col("capacity_ref_ah")).alias("soh")
    )
    extras = [
        c
        for c in frame.columns
        if c not in ("cell_id", "cycle", "capacity_ah", "soh", "split", "capacity_ref_ah") and not c.startswith("_")
    ]
    frame = frame.select("cell_id", "cycle", "capacity_ah", "soh", "split", "capacity_ref_ah", *extras).sort(
        "cell_id", "cycle"
    )

    info = {
        "task": "curve",
        "train_fraction": train_fraction,
        "validation_fraction": validation_fraction,
        "test_cells": frame.filter(pl.col("split") == TEST_FIT)
        .get_column("cell_id")
        .unique(maintain_order=True)
        .to_list(),
        "validation_cells": frame.filter(pl.col("split") == VALIDATION_FIT)
        .get_column("cell_id")
        .unique(maintain_order=True)
        .to_list(),
        "soh_ref_cycles": soh_ref_cycles,
        "dropped_rows": raw.height - frame.height,
        "dropped_cells": short,
        "n_cells": frame.get_column("cell_id").n_unique(),
        **(meta or {}),
    }
    return Dataset(
        name=name,
        frame=frame,
        x="cycle",
        y="soh",
        group="cell_id",
        definition=registered(name) or registered("battery"),
        columns=BATTERY_COLUMNS,
        meta=info,
    )


def _find_default_file(cache_dir=None) -> Path:
    env = os.environ.get(DATA_ENV)
    if env:
        path = Path(env).expanduser()
        if not path.is_file():
            raise DataNotFoundError(f"{DATA_ENV}={env}: no such file")
        return path
    folder = cache.cache_dir(cache_dir) / "battery"
    for candidate in ("battery.parquet", "battery.csv", "nasa_pcoe.csv", "severson.csv"):
        if (folder / candidate).is_file():
            return folder / candidate
    raise DataNotFoundError(WHERE_TO_GET.format(cache=folder))


def load_battery(
    path: str | os.PathLike | None = None,
    *,
    format: str = "auto",
    cells=None,
    test_cells=None,
    validation_cells=None,
    train_fraction: float = 0.5,
    validation_fraction: float = 0.2,
    soh_ref_cycles: int = 5,
    min_cycles: int = 20,
    drop_outliers: bool = True,
    cache_dir: str | os.PathLike | None = None,
) -> Dataset:
    """``battery``: tidy per-cycle capacity from a NASA, Severson or tidy file.

    With no ``path``: ``$NDVM_BATTERY_DATA``, then the cache folder; otherwise a
    :class:`DataNotFoundError` that says where to get data. ``cells``: a list, a comma-separated
    string, ``"all"`` or prefixes like ``"b1*"``; NASA files default to the four classic cells
    B0005/6/7/18, Severson files to all three batches. ``test_cells`` (same syntax) are held out
    whole for the final test: Severson defaults to batch 3 (``"b3*"``), never used to train or
    select; other files to none (``test_cells=""`` holds none out). ``validation_cells`` (ids,
    prefixes or a fraction of the remaining cells) are held out whole for the search's validation:
    Severson defaults to 0.2 (a fifth of batches 1-2), other files to none (``validation_cells=""``).
    """
    path = Path(path) if path is not None else _find_default_file(cache_dir)
    if not path.is_file():
        raise DataNotFoundError(
            f"{path}: no such file. " + WHERE_TO_GET.format(cache=cache.cache_dir(cache_dir) / "battery")
        )
    fmt = sniff_format(_scan(path).collect_schema().names()) if format == "auto" else format
    extra_meta: dict = {}
    if fmt == "nasa":
        lf = read_nasa(path)
        cells = NASA_DEFAULT_CELLS if cells is None else cells
        source = "NASA Ames PCoE Battery Data Set (Saha & Goebel 2007)"
    elif fmt == "severson":
        lf = read_severson(path, drop_outliers=drop_outliers)
        cells = ("b1*", "b2*", "b3*") if cells is None else cells
        test_cells = "b3*" if test_cells is None else test_cells
        validation_cells = 0.2 if validation_cells is None else validation_cells
        source = "Severson et al. 2019, Nature Energy (Toyota-MIT/MATR)"
        if drop_outliers and "qd_outlier_flag" in _scan(path).collect_schema().names():
            flagged = _select_cells(_scan(path), cells).filter(pl.col("qd_outlier_flag") == 1)
            extra_meta["dropped_outlier_rows"] = flagged.select(pl.len()).collect().item()
    elif fmt == "tidy":
        lf = read_tidy(path)
        source = "user file"
    else:
        raise DataFormatError(f"unknown battery format {format!r}; use auto, nasa, severson or tidy")
    test_cells = test_cells or None  # "" or []: no test cells
    return tidy_dataset(
        lf,
        name="battery",
        train_fraction=train_fraction,
        validation_fraction=validation_fraction,
        soh_ref_cycles=soh_ref_cycles,
        min_cycles=min_cycles,
        cells=cells,
        test_cells=test_cells,
        validation_cells=validation_cells,
        meta={"format": fmt, "file": str(path), "source": source, **extra_meta},
    )


# --------------------------------------------------------------------------- synthetic


def synthetic_frame(n_cells: int = 6, n_cycles: int = 400, seed: int = 0, noise: float = 0.002) -> pl.DataFrame:
    """Seeded synthetic fade curves: SEI sqrt growth + linear loss + a late knee, plus noise.

    capacity = c0 * (1 - a*sqrt(n) - b*n - k*softplus((n - n_knee)/w) * w / n_cycles) + noise
    """
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n_cells):
        c0 = rng.uniform(1.0, 1.1)
        a = rng.uniform(0.002, 0.004)
        b = rng.uniform(5e-5, 1.5e-4)
        n_knee = rng.uniform(0.55, 0.8) * n_cycles
        w = 0.05 * n_cycles
        k = rng.uniform(0.15, 0.3)
        n = np.arange(1, n_cycles + 1, dtype=float)
        fade = a * np.sqrt(n) + b * n + k * np.logaddexp(0.0, (n - n_knee) / w) * w / n_cycles
        cap = c0 * (1.0 - fade) + rng.normal(0.0, noise, n.size)
        rows.append(pl.DataFrame({"cell_id": f"synthetic-{i:02d}", "cycle": n.astype(np.int64), "capacity_ah": cap}))
    return pl.concat(rows)


def load_battery_synthetic(
    n_cells: int = 6,
    n_cycles: int = 400,
    seed: int = 0,
    noise: float = 0.002,
    train_fraction: float = 0.5,
    validation_fraction: float = 0.2,
    soh_ref_cycles: int = 5,
    test_cells=None,
    validation_cells=None,
) -> Dataset:
    """``battery-synthetic``: generated fade curves, for demos and tests only (not real data)."""
    frame = synthetic_frame(n_cells, n_cycles, seed, noise)
    return tidy_dataset(
        frame.lazy(),
        name="battery-synthetic",
        train_fraction=train_fraction,
        validation_fraction=validation_fraction,
        soh_ref_cycles=soh_ref_cycles,
        min_cycles=1,
        test_cells=test_cells or None,
        validation_cells=validation_cells or None,
        meta={"synthetic": True, "seed": seed, "source": "generated (synthetic, not measured)"},
    )
