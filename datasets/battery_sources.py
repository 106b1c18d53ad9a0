"""Battery data from the published originals: download, convert to the tidy per-cycle table, register.

Two sources, fetched with ``ndvm datasets fetch NAME`` (or on first use of their dataset):

- ``nasa-pcoe`` -> dataset ``battery-nasa``: the NASA Ames PCoE "Battery Data Set" (Saha & Goebel
  2007), one zip holding zips of per-cell MATLAB v5 files ``B00xx.mat``. Read with
  ``scipy.io.loadmat``: variable ``B00xx`` is a struct whose field ``cycle`` is a struct array, one
  element per operation (``type`` charge / discharge / impedance, ``ambient_temperature``,
  ``time`` a date vector, ``data`` a struct of measured series; a discharge's ``data.Capacity`` is
  the capacity delivered down to 2.7 V). One row per discharge.
- ``severson`` -> dataset ``battery-severson``: the three batch files of Severson et al. (2019),
  MATLAB 7.3 = HDF5, read with ``h5py`` in the structure the authors' loading code uses: group
  ``batch`` holds (n_cells, 1) datasets of object references (``summary``, ``cycles``,
  ``cycle_life``, ``policy_readable``, ``barcode``, ``channel_id``, ``Vdlin``); ``summary`` of a
  cell refers to a group of (1, n_cycles) arrays (``cycle``, ``QDischarge``, ``QCharge``, ``IR``,
  ``Tavg``, ``Tmin``, ``Tmax``, ``chargetime``); text (the charging policy) is stored as uint16
  character codes. One row per cycle. The authors' own clean-up is applied by default
  (``authors_cleaning``): cells that never reach 80 % capacity (batch 1) or are noisy channels
  (batch 3) are removed, and the five batch-1 cells continued in batch 2 are joined.

The raw files stay in the cache (``<cache>/battery/raw/<source>/``, checksummed, resumable, see
``datasets.cache``); the converted table is ``<cache>/battery/<source>.parquet`` and is rebuilt
only when missing or when ``refresh``. ``mirror=URL`` fetches the original file names from a folder
of your own (an institute mirror; the tests serve generated files from 127.0.0.1 this way).
"""

from __future__ import annotations

import io
import os
import re
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from . import battery, cache
from .errors import DataFormatError, UnknownDatasetError


@dataclass(frozen=True)
class RemoteFile:
    url: str
    filename: str  # the original name (also the name under a mirror)
    size: int | None = None  # published byte count, when known (checked after download)
    sha256: str | None = None


@dataclass(frozen=True)
class Source:
    name: str  # ndvm datasets fetch NAME
    dataset: str  # the registered dataset it feeds
    title: str
    files: tuple[RemoteFile, ...]
    licence: str
    citation: str
    homepage: str
    approx_download: str  # for `ndvm datasets show`


NASA = Source(
    name="nasa-pcoe",
    dataset="battery-nasa",
    title="NASA Ames PCoE Li-ion Battery Data Set (34 cells, 18650, 2 Ah), per-cell MATLAB v5 files",
    files=(
        RemoteFile("https://phm-datasets.s3.amazonaws.com/NASA/5.+Battery+Data+Set.zip", "5. Battery Data Set.zip"),
    ),
    licence="US Government work (NASA): public domain in the US; cite the data set",
    citation='B. Saha and K. Goebel (2007), "Battery Data Set", NASA Ames Prognostics Data Repository, '
    "NASA Ames Research Center, Moffett Field, CA",
    homepage="https://www.nasa.gov/intelligent-systems-division/discovery-and-systems-health/pcoe/pcoe-data-set-repository/",
    approx_download="one zip of about 200 MB",
)

SEVERSON = Source(
    name="severson",
    dataset="battery-severson",
    title="Severson et al. 2019 A123 LFP fast-charge cycling (124 cells, 3 batches), MATLAB 7.3/HDF5 batch files",
    files=(
        RemoteFile(
            "https://data.matr.io/1/api/v1/file/5c86c0b5fa2ede00015ddf66/download",
            "2017-05-12_batchdata_updated_struct_errorcorrect.mat",
            size=3_025_320_241,
        ),
        RemoteFile(
            "https://data.matr.io/1/api/v1/file/5c86bf13fa2ede00015ddd82/download",
            "2017-06-30_batchdata_updated_struct_errorcorrect.mat",
        ),
        RemoteFile(
            "https://data.matr.io/1/api/v1/file/5c86bd64fa2ede00015ddbb2/download",
            "2018-04-12_batchdata_updated_struct_errorcorrect.mat",
        ),
    ),
    licence="CC BY 4.0 (as stated by mirrors of data.matr.io; check the terms there)",
    citation='K. A. Severson et al. (2019), "Data-driven prediction of battery cycle life before capacity '
    'degradation", Nature Energy 4, 383-391, doi:10.1038/s41560-019-0356-8',
    homepage="https://data.matr.io/1/projects/5c48dd2bc625d700019f3204",
    approx_download="three files of about 3 GB each",
)

SOURCES = {s.name: s for s in (NASA, SEVERSON)}

# Severson batch number from the date in a batch file's name.
SEVERSON_BATCHES = {"2017-05-12": 1, "2017-06-30": 2, "2018-04-12": 3}
# The authors' "Load Data" clean-up: batch-1 cells that do not reach 80 % capacity, batch-3 noisy
# channels, and the batch-1 cells whose cycling continued in batch 2 (with the cycles they had).
SEVERSON_REMOVED = ("b1c8", "b1c10", "b1c12", "b1c13", "b1c22", "b3c2", "b3c23", "b3c32", "b3c37", "b3c42", "b3c43")
# batch-1 cell -> (its continuation in batch 2, the cycles the authors add to its cycle life)
SEVERSON_CONTINUED = {
    "b1c0": ("b2c7", 662),
    "b1c1": ("b2c8", 981),
    "b1c2": ("b2c9", 1060),
    "b1c3": ("b2c15", 208),
    "b1c4": ("b2c16", 482),
}

NASA_COLUMNS = (
    "cell_id",
    "cycle",
    "operation_index",
    "start_time",
    "ambient_temperature_c",
    "capacity_ah",
    "mean_current_a",
    "min_voltage_v",
    "final_voltage_v",
    "max_cell_temperature_c",
)
SEVERSON_COLUMNS = (
    "cell_id",
    "batch",
    "cycle",
    "discharge_capacity_ah",
    "charge_capacity_ah",
    "internal_resistance_ohm",
    "temperature_avg_c",
    "temperature_min_c",
    "temperature_max_c",
    "charge_time_min",
    "charge_policy",
    "barcode",
    "cycle_life",
)


def source(name: str) -> Source:
    try:
        return SOURCES[name]
    except KeyError:
        raise UnknownDatasetError(f"unknown battery source {name!r}; fetchable sources: {', '.join(SOURCES)}") from None


# ---------------------------------------------------------------------------- download
def download(
    name: str,
    *,
    cache_dir: str | os.PathLike | None = None,
    refresh: bool = False,
    mirror: str | None = None,
    progress: Any = None,
) -> list[Path]:
    """The raw files of source ``name`` in the cache (downloaded when absent; ``refresh``: again)."""
    src = source(name)
    paths = []
    for remote in src.files:
        url = f"{mirror.rstrip('/')}/{_quote(remote.filename)}" if mirror else remote.url
        paths.append(
            cache.fetch(
                url,
                remote.filename,
                subdir=f"battery/raw/{src.name}",
                cache=cache_dir,
                refresh=refresh,
                sha256=remote.sha256,
                size=None if mirror else remote.size,
                progress=progress,
                timeout=60.0,
            )
        )
    return paths


def _quote(filename: str) -> str:
    from urllib.parse import quote

    return quote(filename)


def converted_path(name: str, cache_dir: str | os.PathLike | None = None) -> Path:
    return cache.cache_dir(cache_dir) / "battery" / f"{source(name).name}.parquet"


def fetch(
    name: str,
    *,
    cache_dir: str | os.PathLike | None = None,
    refresh: bool = False,
    mirror: str | None = None,
    progress: Any = None,
    authors_cleaning: bool = True,
) -> Path:
    """Download (when needed) and convert source ``name``; returns the tidy per-cycle Parquet file."""
    out = converted_path(name, cache_dir)
    if out.is_file() and not refresh:
        return out
    raw = download(name, cache_dir=cache_dir, refresh=refresh, mirror=mirror, progress=progress)
    frame = convert_nasa(raw) if name == NASA.name else convert_severson(raw, authors_cleaning=authors_cleaning)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp")
    frame.write_parquet(tmp)
    os.replace(tmp, out)
    return out


# ---------------------------------------------------------------------------- NASA (MATLAB v5)
_NASA_MAT = re.compile(r"(?:^|/)(B\d{4})\.mat$", re.IGNORECASE)


def _nasa_mat_files(paths: list[Path]) -> Iterator[tuple[str, str, bytes]]:
    """(cell id, where, bytes) of every B00xx.mat in the given .mat files, zips and zips in zips."""

    def walk(archive: zipfile.ZipFile, where: str) -> Iterator[tuple[str, str, bytes]]:
        for member in sorted(archive.namelist()):
            if member.lower().endswith(".zip"):
                with zipfile.ZipFile(io.BytesIO(archive.read(member))) as inner:
                    yield from walk(inner, f"{where}!{member}")
            elif (m := _NASA_MAT.search(member)) and not member.startswith("__MACOSX"):
                yield m.group(1).upper(), f"{where}!{member}", archive.read(member)

    for path in paths:
        path = Path(path)
        if zipfile.is_zipfile(path):
            with zipfile.ZipFile(path) as archive:
                yield from walk(archive, str(path))
        elif m := _NASA_MAT.search(path.name):
            yield m.group(1).upper(), str(path), path.read_bytes()
        else:
            raise DataFormatError(f"{path}: neither a zip nor a NASA B00xx.mat file")


def _scalar(value: Any) -> float:
    """A MATLAB scalar as float; an empty array (a missing value in NASA's files) as NaN."""
    arr = np.asarray(value, dtype=float).ravel()
    return float(arr[0]) if arr.size else float("nan")


def _series(data: dict, field: str) -> np.ndarray:
    return np.asarray(data.get(field, []), dtype=float).ravel()


def _date_vector(value: Any) -> str | None:
    v = np.asarray(value, dtype=float).ravel()
    if v.size < 6 or not np.all(np.isfinite(v)):
        return None
    # MATLAB date vectors may carry 60+ seconds or minutes (clock()'s rounding): add them as a duration
    stamp = datetime(int(v[0]), int(v[1]), int(v[2])) + timedelta(hours=v[3], minutes=v[4], seconds=v[5])
    return stamp.isoformat(timespec="microseconds")


def nasa_rows(cell: str, content: bytes, where: str = "") -> list[dict]:
    """One row per discharge of one NASA cell file (see the module docstring for the structure)."""
    from scipy.io import loadmat

    try:
        mat = loadmat(io.BytesIO(content), simplify_cells=True)
    except Exception as exc:  # scipy raises several types for a damaged or non-MAT file
        raise DataFormatError(f"{where or cell}: not a readable MATLAB v5 file ({exc})") from exc
    if cell not in mat or not isinstance(mat[cell], dict) or "cycle" not in mat[cell]:
        raise DataFormatError(
            f"{where or cell}: expected a struct variable {cell} with a field 'cycle' "
            f"(found variables {sorted(k for k in mat if not k.startswith('__'))})"
        )
    operations = mat[cell]["cycle"]
    if isinstance(operations, dict):  # a struct array of one element comes back as a plain dict
        operations = [operations]
    rows, discharge = [], 0
    for index, op in enumerate(operations, start=1):
        if not isinstance(op, dict) or "type" not in op or "data" not in op:
            raise DataFormatError(f"{where or cell}: cycle({index}) lacks the fields type/data")
        if str(op["type"]).strip().lower() != "discharge":
            continue
        discharge += 1
        data = op["data"] if isinstance(op["data"], dict) else {}
        current, voltage, temperature = (
            _series(data, f) for f in ("Current_measured", "Voltage_measured", "Temperature_measured")
        )
        rows.append(
            {
                "cell_id": cell,
                "cycle": discharge,
                "operation_index": index,
                "start_time": _date_vector(op.get("time")),
                "ambient_temperature_c": _scalar(op.get("ambient_temperature", [])),
                "capacity_ah": _scalar(data.get("Capacity", [])),
                "mean_current_a": float(current.mean()) if current.size else float("nan"),
                "min_voltage_v": float(voltage.min()) if voltage.size else float("nan"),
                "final_voltage_v": float(voltage[-1]) if voltage.size else float("nan"),
                "max_cell_temperature_c": float(temperature.max()) if temperature.size else float("nan"),
            }
        )
    return rows


def convert_nasa(paths: list[Path]) -> pl.DataFrame:
    """The tidy per-discharge table (columns ``NASA_COLUMNS``) of every cell in ``paths``."""
    rows: list[dict] = []
    seen: set[str] = set()
    for cell, where, content in _nasa_mat_files(paths):
        if cell in seen:  # the archive holds each cell once; a duplicate would double its cycles
            continue
        seen.add(cell)
        rows.extend(nasa_rows(cell, content, where))
    if not rows:
        raise DataFormatError(f"no NASA B00xx.mat file with discharges in {', '.join(map(str, paths))}")
    schema = {
        "cell_id": pl.String,
        "cycle": pl.Int64,
        "operation_index": pl.Int64,
        "start_time": pl.String,
        **{c: pl.Float64 for c in NASA_COLUMNS[4:]},
    }
    return pl.DataFrame(rows, schema=schema).sort("cell_id", "cycle")


# ---------------------------------------------------------------------------- Severson (HDF5)
def _text(f: Any, ref: Any) -> str:
    """A MATLAB char array stored as uint16 codes (h5py), referenced from the batch group."""
    codes = np.asarray(f[ref][()]).ravel()
    return "".join(chr(int(c)) for c in codes if int(c))


def _summary_field(group: Any, name: str, n: int | None = None) -> np.ndarray:
    if name not in group:
        return np.full(n or 0, np.nan)
    return np.asarray(group[name][()], dtype=float).ravel()


def severson_batch_rows(path: Path, batch: int) -> dict[str, dict[str, np.ndarray | str | float]]:
    """Per-cell summary arrays of one batch file: {"b<batch>c<i>": {field: array, ...}}."""
    import h5py

    try:
        f = h5py.File(path, "r")
    except OSError as exc:
        raise DataFormatError(f"{path}: not an HDF5 (MATLAB 7.3) file ({exc})") from exc
    with f:
        if "batch" not in f or "summary" not in f["batch"]:
            raise DataFormatError(
                f"{path}: no group 'batch' with a dataset 'summary' (the Severson batch layout); "
                f"top level: {sorted(f.keys())}"
            )
        group = f["batch"]
        cells: dict[str, dict] = {}
        for i in range(group["summary"].shape[0]):
            summary = f[group["summary"][i, 0]]
            qd = _summary_field(summary, "QDischarge")
            n = qd.size
            cycle = _summary_field(summary, "cycle", n)
            cells[f"b{batch}c{i}"] = {
                "cycle": cycle,
                "discharge_capacity_ah": qd,
                "charge_capacity_ah": _summary_field(summary, "QCharge", n),
                "internal_resistance_ohm": _summary_field(summary, "IR", n),
                "temperature_avg_c": _summary_field(summary, "Tavg", n),
                "temperature_min_c": _summary_field(summary, "Tmin", n),
                "temperature_max_c": _summary_field(summary, "Tmax", n),
                "charge_time_min": _summary_field(summary, "chargetime", n),
                "charge_policy": _text(f, group["policy_readable"][i, 0]) if "policy_readable" in group else "",
                "barcode": _text(f, group["barcode"][i, 0]) if "barcode" in group else "",
                "cycle_life": _scalar(f[group["cycle_life"][i, 0]][()]) if "cycle_life" in group else float("nan"),
            }
    return cells


def _batch_of(path: Path) -> int:
    for date, batch in SEVERSON_BATCHES.items():
        if date in Path(path).name:
            return batch
    raise DataFormatError(
        f"{path}: cannot tell the Severson batch from the file name (expected one of the dates "
        f"{', '.join(SEVERSON_BATCHES)})"
    )


def convert_severson(paths: list[Path], *, authors_cleaning: bool = True) -> pl.DataFrame:
    """The tidy per-cycle table (columns ``SEVERSON_COLUMNS``) of the batch files in ``paths``."""
    cells: dict[str, dict] = {}
    for path in paths:
        cells.update(severson_batch_rows(Path(path), _batch_of(path)))
    if authors_cleaning:
        for first, (continued, added_life) in SEVERSON_CONTINUED.items():
            if first in cells and continued in cells:
                a, b = cells[first], cells.pop(continued)
                offset = a["cycle"].size  # the authors number the continued cycles after the first run's
                for key, value in a.items():
                    if isinstance(value, np.ndarray):
                        extra = b[key] + offset if key == "cycle" else b[key]
                        a[key] = np.concatenate([value, extra])
                a["cycle_life"] = a["cycle_life"] + added_life  # the authors' add_len
        for cell in SEVERSON_REMOVED:
            cells.pop(cell, None)
    frames = []
    for cell, fields in cells.items():
        n = fields["discharge_capacity_ah"].size
        frames.append(
            pl.DataFrame(
                {
                    "cell_id": [cell] * n,
                    "batch": [int(cell[1 : cell.index("c")])] * n,
                    **{k: v for k, v in fields.items() if isinstance(v, np.ndarray)},
                    "charge_policy": [fields["charge_policy"]] * n,
                    "barcode": [fields["barcode"]] * n,
                    "cycle_life": [fields["cycle_life"]] * n,
                }
            )
        )
    if not frames:
        raise DataFormatError(f"no cells in {', '.join(map(str, paths))}")
    frame = pl.concat(frames, how="vertical_relaxed").with_columns(
        pl.col("cycle").cast(pl.Int64), pl.col("batch").cast(pl.Int64)
    )
    return frame.select(SEVERSON_COLUMNS).sort("batch", "cell_id", "cycle")


# ---------------------------------------------------------------------------- datasets
def _load(
    name: str,
    dataset: str,
    default_cells,
    *,
    batches=None,
    refresh: bool = False,
    mirror: str | None = None,
    cache_dir=None,
    **split_options,
) -> Any:
    path = fetch(name, cache_dir=cache_dir, refresh=refresh, mirror=mirror)
    cells = split_options.pop("cells", None)
    if batches is not None:  # "1,2" -> cells b1*, b2*
        parts = [b.strip() for b in str(batches).split(",") if b.strip()]
        if not parts or not all(p.isdigit() for p in parts):
            raise DataFormatError(f"batches must be batch numbers separated by commas, e.g. 1,2; got {batches!r}")
        cells = [f"b{p}*" for p in parts] + ([] if cells is None else _as_list(cells))
    ds = battery.load_battery(
        path, cells=default_cells if cells is None else cells, cache_dir=cache_dir, **split_options
    )
    ds.name = dataset
    from .catalog import registered

    ds.definition = registered(dataset) or ds.definition
    ds.meta["source"] = source(name).title
    return ds


def _as_list(cells) -> list[str]:
    return [c.strip() for c in cells.split(",")] if isinstance(cells, str) else list(cells)


def load_battery_nasa(
    *,
    cells="B0005,B0006,B0007,B0018",
    refresh: bool = False,
    mirror: str | None = None,
    cache_dir: str | os.PathLike | None = None,
    **split_options,
) -> Any:
    """``battery-nasa``: NASA PCoE discharges, fetched and converted on first use (cells: ids,
    prefixes like ``B004*`` or ``all``; split options as for ``battery``)."""
    return _load(NASA.name, NASA.dataset, cells, refresh=refresh, mirror=mirror, cache_dir=cache_dir, **split_options)


def load_battery_severson(
    *,
    batches="1,2,3",
    test_cells="b3*",
    cells=None,
    refresh: bool = False,
    mirror: str | None = None,
    cache_dir: str | os.PathLike | None = None,
    **split_options,
) -> Any:
    """``battery-severson``: Severson et al. cycles, fetched and converted on first use. ``batches``
    selects cells by batch; ``test_cells`` (default: batch 3, the authors' secondary test set) are
    held out whole; split options as for ``battery``."""
    # Always passed on: battery.load_battery fills in batch 3 for a missing value, so "none" must
    # arrive as "" (hold none out), not be dropped.
    split_options["test_cells"] = "" if test_cells in (None, "", "none") else test_cells
    return _load(
        SEVERSON.name,
        SEVERSON.dataset,
        None,
        batches=batches,
        cells=cells,
        refresh=refresh,
        mirror=mirror,
        cache_dir=cache_dir,
        **split_options,
    )


# The split options these loaders pass on to battery.load_battery (listed by `ndvm datasets show`).
load_battery_nasa.forwards_to = battery.load_battery
load_battery_severson.forwards_to = battery.load_battery


def register_datasets() -> None:
    """Register ``battery-nasa`` and ``battery-severson`` (called by ``datasets/__init__``)."""
    from .catalog import register
    from .schema import DatasetDefinition

    split = "train_fraction, validation_fraction, test_cells, validation_cells, soh_ref_cycles, min_cycles"
    register(
        DatasetDefinition(
            name=NASA.dataset,
            title="NASA PCoE Li-ion capacity per discharge, downloaded from NASA and converted (scipy.io)",
            kind="curves",
            columns=battery.BATTERY_COLUMNS,
            source=f"{NASA.files[0].url} ({NASA.approx_download}); `ndvm datasets fetch {NASA.name}`",
            licence=NASA.licence,
            citation=NASA.citation,
            loader=load_battery_nasa,
            default_task="curve",
            needs_download=True,
            notes=f"options: cells= (default the classic B0005,B0006,B0007,B0018; 'all'; prefixes B004*), {split}, "
            "refresh, mirror=URL.",
        )
    )
    register(
        DatasetDefinition(
            name=SEVERSON.dataset,
            title="Severson et al. 2019 LFP capacity per cycle, 3 batches, downloaded from data.matr.io and converted (h5py)",
            kind="curves",
            columns=battery.BATTERY_COLUMNS,
            source=f"{SEVERSON.homepage} ({SEVERSON.approx_download}); `ndvm datasets fetch {SEVERSON.name}`",
            licence=SEVERSON.licence,
            citation=SEVERSON.citation,
            loader=load_battery_severson,
            default_task="curve",
            needs_download=True,
            notes=f"options: batches=1,2,3, test_cells=b3* (batch 3 held out whole), cells=, {split}, refresh, mirror=URL.",
        )
    )
