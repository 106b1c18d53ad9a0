"""The dataset registry: name -> definition, ``list_datasets()`` and ``load(name_or_path)``."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from . import battery, enso, macro, userfile
from .catalog import definition, definitions, register, registered  # noqa: F401  (the registry's API)
from .errors import UnknownDatasetError
from .schema import Dataset, DatasetDefinition


def list_datasets() -> list[dict[str, Any]]:
    """One row per registered dataset (name, title, kind, task, columns, source, licence, ...)."""
    return [d.summary_row() for d in definitions()]


def load(name_or_path: str | os.PathLike, **options: Any) -> Dataset:
    """Load a registered dataset by name, or a file by path.

    A file in a battery layout (tidy, NASA PCoE, Severson) goes through the battery loader; a PSL/CPC
    text file through the Niño 3.4 loader; any other CSV/Parquet through the user-file loader,
    which needs ``x=`` and ``y=`` (or a TOML manifest beside the file).
    """
    key = str(name_or_path)
    known = registered(key)
    if known is not None and not isinstance(name_or_path, Path):
        return known.loader(**options)
    path = Path(name_or_path).expanduser()
    if not path.exists():
        raise UnknownDatasetError(
            f"{key!r} is neither a registered dataset ({', '.join(d.name for d in definitions())}) nor an existing file"
        )
    if (
        path.suffix.lower() in (".csv", ".parquet")
        and not (options.get("x") or options.get("y"))
        and not path.with_suffix(".toml").is_file()
        and battery.is_battery_file(path)
    ):
        return battery.load_battery(path, **options)
    if path.suffix.lower() not in (".csv", ".parquet"):
        enso.sniff_format(path)  # raises DataFormatError for anything that is not PSL/CPC text
        return enso.load_nino34(path, **options)
    return _load_user_file(path, options)


def _load_user_file(path: Path, options: dict[str, Any]) -> Dataset:
    """``userfile.load_file``, with what polars cannot read (an empty file, a text in a numeric
    column) turned into the typed error that names the file, column and row (datasets/preflight.py)."""
    import polars as pl

    from .errors import DataFormatError
    from .preflight import check_data_file

    try:
        return userfile.load_file(path, **options)
    except pl.exceptions.PolarsError as exc:
        check_data_file(path, x=options.get("x"), y=options.get("y"), group=options.get("group"))
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise DataFormatError(f"{path}: cannot be read as a table ({type(exc).__name__}: {first})") from exc


_ENSO_CITE_NINO12 = (
    "NOAA NWS Climate Prediction Center, ERSST v3b Niño 1+2 index, as distributed in statsmodels "
    "(statsmodels.datasets.elnino); Seabold & Perktold (2010), statsmodels, Proc. 9th Python in Science Conf."
)

register(
    DatasetDefinition(
        name="enso",
        title="Niño 1+2 monthly SST 1950-2010 (embedded in statsmodels), anomalies vs training years",
        kind="timeseries",
        columns=enso.ENSO_COLUMNS,
        source="statsmodels.datasets.elnino (NOAA CPC, ERSST v3b Niño 1+2)",
        licence="public domain (NOAA)",
        citation=_ENSO_CITE_NINO12,
        loader=enso.load_elnino,
        default_task="forecast",
        notes="732 months; default split: train 1950-1980 (372 months), validation 1981-1990 (120), test 1991-2010 (240).",
    )
)

register(
    DatasetDefinition(
        name="enso-nino34",
        title="Niño 3.4 monthly SST (NOAA PSL HadISST or NOAA CPC OISST/ERSST), downloaded and cached",
        kind="timeseries",
        columns=enso.ENSO_COLUMNS,
        source="NOAA PSL nino34.long(.anom).data; NOAA CPC sstoi.indices, detrend.nino34.ascii.txt",
        licence="NOAA products: public domain (US); HadISST: (c) Crown copyright, Met Office (check terms)",
        citation=(
            "Rayner et al. (2003) HadISST, doi:10.1029/2002JD002670; Huang et al. (2017) ERSSTv5, "
            "doi:10.1175/JCLI-D-16-0836.1; Huang et al. (2021) OISST v2.1, doi:10.1175/JCLI-D-20-0166.1"
        ),
        loader=enso.load_nino34,
        default_task="forecast",
        needs_download=True,
        notes="options: path=, source=psl|psl-sst|cpc-sstoi|cpc-detrend, url=, cache_dir=, train_end_year=1989, validation_end_year=1999 (test: 2000 on), start_year=1950; soi=none|cpc|bom (or soi_path=, soi_url=) adds the SOI covariate.",
    )
)

register(
    DatasetDefinition(
        name="us-unemployment",
        title="US civilian unemployment rate, quarterly 1959Q1-2009Q3 (embedded in statsmodels)",
        kind="timeseries",
        columns=macro.UNEMPLOYMENT_COLUMNS,
        source="statsmodels.datasets.macrodata (US Federal Reserve Economic Data, BLS unemployment rate)",
        licence="public domain (US government data)",
        citation=(
            "US Bureau of Labor Statistics unemployment rate via FRED, as distributed in statsmodels "
            "(statsmodels.datasets.macrodata); Seabold & Perktold (2010), Proc. 9th Python in Science Conf."
        ),
        loader=macro.load_us_unemployment,
        default_task="forecast",
        notes="203 quarters; default split: train 1959-1989 (124), validation 1990-1999 (40), test 2000-2009Q3 (39); "
        "period 4, leads 1-8. options: train_end_year=1989, validation_end_year=1999.",
    )
)

register(
    DatasetDefinition(
        name="battery",
        title="Li-ion capacity fade per cell and cycle (NASA PCoE, Severson 2019, or a tidy file)",
        kind="curves",
        columns=battery.BATTERY_COLUMNS,
        source="user-supplied file: NASA PCoE per-discharge summary, Severson et al. 2019 per-cycle summary, or tidy CSV/Parquet",
        licence="NASA PCoE: US public domain; Severson et al.: CC BY 4.0",
        citation=(
            "B. Saha and K. Goebel (2007), Battery Data Set, NASA Ames Prognostics Data Repository; "
            "K. A. Severson et al. (2019), Nature Energy 4, 383-391, doi:10.1038/s41560-019-0356-8"
        ),
        loader=battery.load_battery,
        default_task="curve",
        notes=f"options: path=, format=auto|nasa|severson|tidy, cells=, test_cells=, validation_cells=, train_fraction=0.5, validation_fraction=0.2, soh_ref_cycles=5; or ${battery.DATA_ENV}.",
    )
)

register(
    DatasetDefinition(
        name="battery-synthetic",
        title="SYNTHETIC capacity fade (seeded generator; demos and tests only, not measured data)",
        kind="curves",
        columns=battery.BATTERY_COLUMNS,
        source="generated by datasets.battery.synthetic_frame (sqrt + linear + knee, Gaussian noise)",
        licence="MIT (generated)",
        citation="synthetic; no citation",
        loader=battery.load_battery_synthetic,
        default_task="curve",
        synthetic=True,
        notes="options: n_cells=6, n_cycles=400, seed=0, noise=0.002, train_fraction=0.5, validation_fraction=0.2, test_cells=, validation_cells=.",
    )
)
