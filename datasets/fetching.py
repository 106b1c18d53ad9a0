"""Fetching a registered dataset's published files into the cache, and what the cache holds of
them: the work behind ``ndvm datasets fetch NAME`` and the download line of ``ndvm datasets show
NAME`` (flows/datasets_cli.py only prints what these return).

Two kinds of downloads: the battery originals of ``datasets/battery_sources.py`` (NASA PCoE,
Severson et al.), fetched and converted to one Parquet file, and datasets whose loader downloads
into the cache itself (``enso-nino34``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from . import battery_sources, cache
from .catalog import definition, registered
from .errors import UnknownDatasetError
from .registry import load


@dataclass(frozen=True)
class DownloadStatus:
    """What the cache holds of a battery source: ``files`` of ``expected`` original files
    (``nbytes`` in all), and whether the converted Parquet file exists."""

    source: battery_sources.Source
    files: int
    expected: int
    nbytes: int
    converted: bool


@dataclass(frozen=True)
class Fetched:
    """The outcome of ``fetch_dataset``: the dataset it feeds and one line per fact to print."""

    dataset: str
    lines: tuple[str, ...]


def battery_source_of(dataset: str) -> battery_sources.Source | None:
    """The battery source that feeds the registered ``dataset`` (None: not a downloaded battery set)."""
    return next((s for s in battery_sources.SOURCES.values() if s.dataset == dataset), None)


def download_status(dataset: str, cache_dir: str | os.PathLike | None = None) -> DownloadStatus | None:
    """What the cache holds of the battery source behind ``dataset`` (None when none feeds it)."""
    src = battery_source_of(definition(dataset).name)
    if src is None:
        return None
    raw = cache.cache_dir(cache_dir) / "battery" / "raw" / src.name
    have = (
        [p for p in raw.glob("*") if not p.name.startswith(".") and not p.name.endswith(".sha256")]
        if raw.is_dir()
        else []
    )
    return DownloadStatus(
        source=src,
        files=len(have),
        expected=len(src.files),
        nbytes=sum(p.stat().st_size for p in have),
        converted=battery_sources.converted_path(src.name, cache_dir).is_file(),
    )


def fetchable() -> list[str]:
    """Every name ``fetch_dataset`` accepts: the battery sources, the datasets they feed, enso-nino34."""
    return [*battery_sources.SOURCES, *(s.dataset for s in battery_sources.SOURCES.values()), "enso-nino34"]


def fetch_dataset(
    name: str,
    *,
    cache_dir: str | os.PathLike | None = None,
    refresh: bool = False,
    mirror: str | None = None,
    authors_cleaning: bool = True,
    progress: object = None,
) -> Fetched:
    """Download ``name`` (a battery source, the dataset it feeds, or a registered dataset whose
    loader downloads) into the cache and convert it. Raises ``UnknownDatasetError`` naming what can
    be fetched when ``name`` is none of them."""
    source_name = {s.dataset: s.name for s in battery_sources.SOURCES.values()}.get(name, name)
    if source_name not in battery_sources.SOURCES:
        defn = registered(source_name)
        if defn is not None and defn.needs_download:  # enso-nino34: its loader downloads into the cache
            ds = load(source_name, refresh=refresh, **({"cache_dir": cache_dir} if cache_dir else {}))
            return Fetched(
                source_name, (f"{source_name}: {ds.describe()} (cached under {cache.cache_dir(cache_dir)})",)
            )
        raise UnknownDatasetError(f"nothing to fetch for {name!r}; fetchable: {', '.join(fetchable())}")
    src = battery_sources.source(source_name)
    out: Path = battery_sources.fetch(
        source_name,
        cache_dir=cache_dir,
        refresh=refresh,
        mirror=mirror,
        authors_cleaning=authors_cleaning,
        progress=progress,
    )
    frame = pl.read_parquet(out)
    return Fetched(
        src.dataset,
        (
            f"converted: {out} ({frame.height:,} rows, {frame['cell_id'].n_unique()} cells)",
            f"licence: {src.licence}; cite: {src.citation}",
            f"use it: ndvm discover --task {src.dataset}   (options: ndvm datasets show {src.dataset})",
        ),
    )


__all__ = ["DownloadStatus", "Fetched", "battery_source_of", "download_status", "fetch_dataset", "fetchable"]
