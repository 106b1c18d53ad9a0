"""Datasets of NDVM discovery: definitions (schema, source, licence, citation, loader) and tasks.

    import datasets
    datasets.list_datasets()                  # rows for `ndvm datasets`
    ds = datasets.load("enso")                # the embedded default (no network)
    ds = datasets.load("battery", path="nasa_pcoe.csv", train_fraction=0.5)
    ds = datasets.load("my.csv", x="t", y="v")
    task = datasets.make_task(ds)             # "curve" or "forecast" from the dataset kind

See docs/datasets.md.
"""

from .battery_sources import register_datasets as _register_battery_sources
from .errors import (
    DataFormatError,
    DataNotFoundError,
    DatasetError,
    DownloadError,
    SplitError,
    UnknownDatasetError,
)
from .registry import definition, list_datasets, load, register
from .schema import Column, Dataset, DatasetDefinition

_register_battery_sources()  # battery-nasa, battery-severson (downloaded originals)

__all__ = [
    "Column",
    "Dataset",
    "DatasetDefinition",
    "DatasetError",
    "DataFormatError",
    "DataNotFoundError",
    "DownloadError",
    "SplitError",
    "UnknownDatasetError",
    "definition",
    "list_datasets",
    "load",
    "register",
]
