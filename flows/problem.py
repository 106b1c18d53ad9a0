"""The problem a discovery run works on: a dataset, its task, and what the other parts need from them.

``load_problem`` turns the command-line description (a registered dataset name, or a file with
``x``/``y``/``group`` columns, and optionally the task kind) into the dataset and its task
(``datasets.tasks``). The helpers here derive from the task what the proposers need (a
``TaskSpec``), what the store's semantic deduplication probes with, and what MLflow logs for a
leaderboard entry beyond the store's rows: plots, an input example and the program the pyfunc
model runs.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import numpy as np

from proposers.datacard import card_text


@dataclass(frozen=True)
class ProblemSpec:
    """What a run works on, as stored in the run's configuration (plain values)."""

    dataset: str = "enso"
    data: str | None = None  # a CSV/Parquet/PSL file instead of a registered dataset
    x: str | tuple[str, ...] | None = None  # one input column, or several (a table: the regression task)
    y: str | None = None
    group: str | None = None
    task_kind: str | None = None  # "curve" | "forecast" | "regression"; None: the dataset's default task
    train_fraction: float | None = None  # user files and battery data; None: the manifest or default
    validation_fraction: float | None = None  # the next fraction of each series validates the search
    options: dict[str, Any] | None = None  # options of a registered dataset (--option KEY=VALUE, --refresh)
    split: str | None = None  # files: "temporal" | "random" | "grouped"; None: the file's split column or the default
    name: str | None = None  # files: the dataset's name (its MLflow experiment and registered model)
    covariates: list[str] | None = None  # file columns a forecast candidate receives in x (--covariate COL)
    edge_fraction: float | None = None  # tables: the edge block's share (datasets/tasks/edges.py); None: 0.1

    def __post_init__(self) -> None:
        # stored configurations come back from JSON with lists; one input stays a plain string
        if isinstance(self.x, (list, tuple)):
            xs = tuple(self.x)
            object.__setattr__(self, "x", xs[0] if len(xs) == 1 else (xs or None))

    @property
    def label(self) -> str:
        """What names the run's data: its MLflow experiment and registered model (storage.tracking):
        ``--name``, else a file's manifest ``name``, else the file (named by its stem) or the dataset."""
        return self.name or (_manifest_name(self.data) if self.data else None) or self.data or self.dataset


@functools.lru_cache(maxsize=32)
def _manifest_name(data: str) -> str | None:
    from datasets.userfile import manifest_name

    return manifest_name(data)


def load_problem(spec: ProblemSpec) -> tuple[Any, Any]:
    """(dataset, task) for ``spec``. Raises the datasets' typed errors with their messages."""
    import datasets
    from datasets.tasks import make_task

    fractions = {
        k: v
        for k, v in (("train_fraction", spec.train_fraction), ("validation_fraction", spec.validation_fraction))
        if v is not None
    }
    if spec.data:
        if spec.options:
            raise datasets.DatasetError(
                f"--option applies to registered datasets (--task NAME), not to a file; "
                f"got {sorted(spec.options)} with --data {spec.data}"
            )
        options = {
            k: v
            for k, v in (
                ("x", spec.x),
                ("y", spec.y),
                ("group", spec.group),
                ("split", spec.split),
                ("name", spec.name),
            )
            if v
        }
        if spec.covariates:
            options["covariates"] = list(spec.covariates)
        dataset = datasets.load(spec.data, **options, **fractions)
    else:
        if spec.split or spec.name:
            raise datasets.DatasetError(
                f"--split and --name apply to a file (--data FILE), not to the registered dataset {spec.dataset!r}"
            )
        from datasets import options as dataset_options

        # options_of also sees the split options a loader passes on (battery-nasa, battery-severson)
        accepted = dataset_options.options_of(datasets.definition(spec.dataset))
        refused = [k for k in fractions if k not in accepted]
        if refused:
            raise datasets.SplitError(
                f"dataset {spec.dataset!r} does not take {refused} (its split is by periods; "
                "see `ndvm datasets`); fractions apply to curve data and files"
            )
        if spec.covariates:
            raise datasets.DatasetError(
                f"--covariate names columns of a file (--data FILE); a registered dataset declares its own "
                f"(enso-nino34: --option soi=cpc); got {spec.covariates} with --task {spec.dataset}"
            )
        extra = dict(spec.options or {})
        dataset_options.check(datasets.definition(spec.dataset), extra)  # unknown names: an error listing the valid
        dataset = datasets.load(spec.dataset, **fractions, **extra)
    task_options = {}
    if spec.edge_fraction is not None:  # the regression task's alone: refused by the others' constructors
        task_options["edge_fraction"] = spec.edge_fraction
    return dataset, make_task(dataset, spec.task_kind, **task_options)


def metric_label(task: Any) -> str:
    return f"validation {task.primary_metric} (lower is better)"


def task_spec(dataset: Any, task: Any):
    """The proposers' view of the task (``proposers.TaskSpec``), with the task's data card (training
    and validation rows only), computed here once per run."""
    import polars as pl

    from datasets.schema import TRAIN
    from proposers import Column, TaskSpec

    units = {c.name: c for c in dataset.columns}
    columns = [
        Column(name, units[name].unit if name in units else "", units[name].description if name in units else "")
        for name in dataset.frame.columns
        if name != "split"
    ]
    rows = dataset.frame.lazy().filter(pl.col("split") == TRAIN).head(5).drop("split").collect().to_dicts()
    return TaskSpec(
        dataset=dataset.name,
        description=dataset.describe(),
        inputs=task.proposer_inputs(),
        contract=task.contract_text(),
        columns=columns,
        sample_rows=rows,
        score_label=metric_label(task),
        seed_programs=task.seed_programs(),
        program_source=task.program_source,
        data_card=card_text(task.card_facts()),
        table_inputs=getattr(task, "table_inputs", False),
        state_space=task.state_space,
        observed_x=task.observed_x(),
    )


def probe_inputs(task: Any) -> dict[str, np.ndarray]:
    """Inputs for the store's semantic fingerprint, inside the data's domain (training part only)."""
    return task.probe_inputs()


def entry_extras(dataset: Any, task: Any, source: str, parameters: dict[str, float]) -> dict[str, Any]:
    """What MLflow logs for a leaderboard entry besides the store's row (plots, an input example,
    for a forecast candidate the program the pyfunc model runs): the task's ``entry_extras``, with
    the data of its plots (``fit_series``, ``forecast_series``) made the plots the tracker draws
    (``fit_plot``, ``forecast_plot``: storage/plots.py). The task computes; it draws nothing."""
    from storage.plots import FitPlot, ForecastPlot

    extras = dict(task.entry_extras(source, parameters))
    if "fit_series" in extras:
        extras["fit_plot"] = FitPlot(**extras.pop("fit_series"))
    if "forecast_series" in extras:
        extras["forecast_plot"] = ForecastPlot(**extras.pop("forecast_series"))
    return extras


__all__ = ["ProblemSpec", "load_problem", "task_spec", "probe_inputs", "entry_extras", "metric_label"]
