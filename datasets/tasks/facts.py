"""What a task exposes about its data and its errors for the LLM prompt: plain arrays, chosen by
the task (the training and validation rows only, never test), worded by the proposers
(``proposers/datacard.py``). A task computes these; it writes no prompt text itself.

The data card is a list of facts (``Task.card_facts``); where the best program fails on
validation is another (``Task.residual_facts``). Each fact names what it holds, not the task that
made it: a new task reuses them, and a new kind of fact is a dataclass here and one renderer there.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass
class ColumnFacts:
    """The dataset's columns over the rows the card may use: ``columns`` (objects with ``name``
    and ``unit``), ``values`` (name -> the column's values), ``rows`` (how many rows)."""

    columns: Sequence[Any]
    values: dict[str, np.ndarray]
    rows: int
    sampled: int | None = None  # the values are a seeded sample of this many of the rows


@dataclass
class SeriesFacts:
    """One time series in time order (its lag structure) and, for monthly data, the calendar month
    (1-12) of every point (its seasonal cycle)."""

    name: str
    values: np.ndarray
    months: np.ndarray | None = None


@dataclass
class CovariateFacts:
    """A covariate observed with the series: ``entry`` is its index in the candidate's ``x``."""

    name: str
    entry: int
    values: np.ndarray
    series_name: str
    series: np.ndarray


@dataclass
class GroupFacts:
    """How the groups (battery cells) differ: group -> (x in the dataset's units, y), sorted by x;
    ``x_per_unit`` the x scale of a fade rate; ``thresholds`` the fractions of the start whose
    crossing is a life; ``first_rows`` other measured columns at each group's first row."""

    groups: dict[Any, tuple[np.ndarray, np.ndarray]]
    group_label: str
    x_label: str
    y_label: str
    x_per_unit: float
    thresholds: Sequence[float] = ()
    first_rows: dict[str, list[float]] = field(default_factory=dict)


@dataclass
class InputCorrelationFacts:
    """The target against each input column: ``inputs`` are (column, program input name, values)."""

    target: str
    values: np.ndarray
    inputs: list[tuple[str, str, np.ndarray]]


@dataclass
class NoteFact:
    """A sentence on how the task treats the data (e.g. a seeded sample of the rows)."""

    text: str


@dataclass
class UnscoredFact:
    """The best program could not be scored on validation, and why."""

    reason: str


@dataclass
class LeadResidualFacts:
    """Validation errors of a forecaster, [origins, leads] (NaN outside the split), and the
    calendar month (1-12) of each target when the data is monthly."""

    errors: np.ndarray
    target_months: np.ndarray | None = None


@dataclass
class GroupResidualFacts:
    """Validation errors per group, with the x (in the dataset's units) of each error."""

    errors: dict[Any, np.ndarray]
    x: dict[Any, np.ndarray]
    group_label: str
    x_label: str


@dataclass
class InputResidualFacts:
    """Validation predictions and targets of a table's model, with every input's values."""

    prediction: np.ndarray
    target: np.ndarray
    inputs: dict[str, np.ndarray]
