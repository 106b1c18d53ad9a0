"""What a dataset is: a definition (schema, source, licence, citation, loader) and a loaded frame.

A loaded :class:`Dataset` is a collected polars frame in a tidy layout plus the names of its
roles: the x column (time, cycle), the y column (the quantity modelled), an optional group column
(one series per group, e.g. one battery cell) and a ``split`` column. Its values:

- ``"train"``: what candidates are fitted on;
- ``"validation"``: what the search scores, ranks and selects by;
- ``"test"``: read once, at the end of a run, for the final top k and the references;
- ``"test_fit"``: only in whole held-out groups (Severson batch 3 cells): the early rows of a test
  group, used at the end of a run to fit that group's own parameters before its ``"test"`` rows
  are scored. Never used to train or select.
- ``"validation_fit"``: only in whole validation groups (cells held out of training, Severson: a
  fifth of batches 1-2): their early rows, on which the search fits each candidate's parameters for
  that group before scoring its ``"validation"`` rows, the question the test asks of test groups.

Every derived column (anomalies, state of health) is computed from the training rows (for a test
group: its own first rows), so no held-out row influences anything a model is fitted on.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import polars as pl

from .errors import DataFormatError

TRAIN = "train"
VALIDATION = "validation"
TEST = "test"
TEST_FIT = "test_fit"
VALIDATION_FIT = "validation_fit"
SPLITS = (TRAIN, VALIDATION, TEST, TEST_FIT, VALIDATION_FIT)


@dataclass(frozen=True)
class Column:
    name: str
    unit: str
    description: str


@dataclass(frozen=True)
class DatasetDefinition:
    """A registered dataset. ``loader(**options) -> Dataset``."""

    name: str
    title: str
    kind: str  # "timeseries" (one series, forecast task) or "curves" (grouped x -> y, curve task)
    columns: tuple[Column, ...]
    source: str
    licence: str
    citation: str
    loader: Callable[..., Dataset]
    default_task: str
    synthetic: bool = False
    needs_download: bool = False
    notes: str = ""

    def summary_row(self) -> dict[str, Any]:
        """One row for ``ndvm datasets``."""
        return {
            "name": self.name,
            "title": self.title,
            "kind": self.kind,
            "task": self.default_task,
            "columns": ", ".join(c.name for c in self.columns),
            "source": self.source,
            "licence": self.licence,
            "synthetic": self.synthetic,
            "download": self.needs_download,
        }


@dataclass
class Dataset:
    """A loaded dataset: a tidy frame, its column roles and where it came from."""

    name: str
    frame: pl.DataFrame
    x: str
    y: str
    group: str | None = None
    definition: DatasetDefinition | None = None
    columns: tuple[Column, ...] = ()
    meta: dict[str, Any] = field(default_factory=dict)
    # every input column of a table with several (the regression task); () means (x,)
    inputs: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        self.inputs = tuple(self.inputs) or (self.x,)
        needed = [*self.inputs, self.y, "split"] + ([self.group] if self.group else [])
        missing = [c for c in needed if c not in self.frame.columns]
        if missing:
            raise DataFormatError(
                f"dataset {self.name!r}: missing column(s) {missing}; columns are {self.frame.columns}"
            )
        unknown = sorted(set(self.frame.get_column("split").unique().to_list()) - set(SPLITS))
        if unknown:
            raise DataFormatError(f"dataset {self.name!r}: unknown split value(s) {unknown}; use {list(SPLITS)}")

    @property
    def train(self) -> pl.DataFrame:
        return self.frame.filter(pl.col("split") == TRAIN)

    @property
    def validation(self) -> pl.DataFrame:
        return self.frame.filter(pl.col("split") == VALIDATION)

    @property
    def test(self) -> pl.DataFrame:
        return self.frame.filter(pl.col("split") == TEST)

    def empty_parts(self) -> list[str]:
        """The parts of train, validation and test that have no rows, counted without copying
        the frame (a 10-million-row table would be filtered three times)."""
        present = set(self.frame.get_column("split").unique().to_list())
        return [part for part in (TRAIN, VALIDATION, TEST) if part not in present]

    @property
    def test_groups(self) -> list[str]:
        """Groups held out whole (their rows are only ``test_fit`` and ``test``), in frame order."""
        if self.group is None:
            return []
        held = self.frame.filter(pl.col("split") == TEST_FIT).get_column(self.group).unique(maintain_order=True)
        return held.to_list()

    @property
    def validation_groups(self) -> list[str]:
        """Groups held out whole for validation (their rows are only ``validation_fit`` and
        ``validation``), in frame order."""
        if self.group is None:
            return []
        held = self.frame.filter(pl.col("split") == VALIDATION_FIT).get_column(self.group).unique(maintain_order=True)
        return held.to_list()

    @property
    def groups(self) -> list[str]:
        if self.group is None:
            return []
        return self.frame.get_column(self.group).unique(maintain_order=True).to_list()

    def series(self, column: str | None = None, part: str | None = None) -> np.ndarray:
        """A column as float64 numpy (whole frame, or only ``part`` = "train"/"validation"/"test")."""
        frame = self.frame if part is None else self.frame.filter(pl.col("split") == part)
        return frame.get_column(column or self.y).cast(pl.Float64).to_numpy()

    def describe(self) -> str:
        n_train, n_val = self.train.height, self.validation.height
        groups = f", {len(self.groups)} groups ({self.group})" if self.group else ""
        held = f" ({len(self.test_groups)} whole {self.group} groups held out for test)" if self.test_groups else ""
        # The test split's size is not described: this text goes into proposers' prompts, and the
        # search has no business knowing anything about the test split.
        x = f"x={self.x}" if len(self.inputs) == 1 else f"inputs={', '.join(self.inputs)}"
        return (
            f"{self.name}: {self.frame.height} rows{groups}; {x}, y={self.y}; "
            f"train {n_train} rows, validation {n_val} rows, the rest held out for the final test{held}"
        )
