"""The problem a discovery run works on: a dataset, its task, and what the other parts need from them.

``load_problem`` turns the command-line description (a registered dataset name, or a file with
``x``/``y``/``group`` columns, and optionally the task kind) into the dataset and its task
(``datasets.tasks``). The helpers here derive from the task what the proposers need (a
``TaskSpec``), what the store's semantic deduplication probes with, and what MLflow logs for a
leaderboard entry beyond the store's rows: plots, an input example and the program the pyfunc
model runs.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

SERIES_FALLBACK = "series"  # model input name when a candidate defines the dataset's column name itself

# The pyfunc model of a forecast candidate: one-step-ahead predictions over a DataFrame column.
# Row t gets the forecast of y[t] made from y[0..t-1] only (the candidate's own state-space step).
_ONE_STEP_MODEL = """
;; ---- one-step-ahead model (appended by ndvm discover for the MLflow pyfunc model) ----
(define (ndvm-model-one-step ndvm-model-series)
  (let ndvm-model-walk ((t 0) (s (init)) (acc '()))
    (if (= t (size ndvm-model-series))
        (apply vec (reverse acc))
        (ndvm-model-walk (+ t 1) (update s (ref ndvm-model-series t)) (cons (predict s) acc)))))
(ndvm-model-one-step {column})
"""


@dataclass(frozen=True)
class ProblemSpec:
    """What a run works on, as stored in the run's configuration (plain values)."""

    dataset: str = "enso"
    data: str | None = None      # a CSV/Parquet/PSL file instead of a registered dataset
    x: str | None = None
    y: str | None = None
    group: str | None = None
    task_kind: str | None = None  # "curve" | "forecast"; None: the dataset's default task

    @property
    def label(self) -> str:
        return self.data or self.dataset


def load_problem(spec: ProblemSpec) -> tuple[Any, Any]:
    """(dataset, task) for ``spec``. Raises the datasets' typed errors with their messages."""
    import datasets
    from datasets.tasks import make_task

    if spec.data:
        options = {k: v for k, v in (("x", spec.x), ("y", spec.y), ("group", spec.group)) if v}
        dataset = datasets.load(spec.data, **options)
    else:
        dataset = datasets.load(spec.dataset)
    return dataset, make_task(dataset, spec.task_kind)


def metric_label(task: Any) -> str:
    return f"held-out {task.primary_metric} (lower is better)"


def task_spec(dataset: Any, task: Any):
    """The proposers' view of the task (``proposers.TaskSpec``)."""
    from proposers import Column, TaskSpec

    units = {c.name: c for c in dataset.columns}
    columns = [Column(name, units[name].unit if name in units else "", units[name].description if name in units else "")
               for name in dataset.frame.columns if name != "split"]
    rows = dataset.train.head(5).drop("split").to_dicts()
    if task.kind == "forecast":
        inputs: dict[str, str] = {}
        program_source = task.program_source
    else:
        inputs = {"x": f"vector [n]: the column {dataset.x} / {task.x_scale:g}, one element per row"}
        program_source = None
    return TaskSpec(dataset=dataset.name, description=dataset.describe(), inputs=inputs,
                    contract=task.contract_text(), columns=columns, sample_rows=rows,
                    score_label=metric_label(task), seed_programs=task.seed_programs(),
                    program_source=program_source)


def probe_inputs(task: Any) -> dict[str, np.ndarray]:
    """Inputs for the store's semantic fingerprint, inside the data's domain (training part only)."""
    if task.kind == "forecast":
        from datasets.tasks.forecast import SERIES

        return {SERIES: task.train_inputs()[SERIES][:60].copy()}
    x = np.asarray(task.train_inputs(task.groups()[0])["x"], dtype=float)
    if x.size > 24:
        x = x[np.linspace(0, x.size - 1, 24).astype(int)]
    return {"x": x}


def forecast_model_source(candidate: str, column: str) -> tuple[str, str]:
    """(program, input name) of the one-step-ahead pyfunc model of a forecast candidate."""
    import ndvm

    for name in (column, SERIES_FALLBACK):
        source = candidate.rstrip() + "\n" + _ONE_STEP_MODEL.format(column=name)
        if ndvm.compile(source).inputs == [name]:  # the candidate does not define that name itself
            return source, name
    raise ValueError(f"the candidate defines both {column!r} and {SERIES_FALLBACK!r}; cannot name the model input")


def entry_extras(dataset: Any, task: Any, source: str, parameters: dict[str, float]) -> dict[str, Any]:
    """What MLflow logs for a leaderboard entry besides the store's row: plots, an input example,
    and for a forecast candidate the one-step-ahead program the pyfunc model runs."""
    import ndvm
    import pandas as pd
    from storage.plots import FitPlot, ForecastPlot

    if task.kind == "forecast":
        from datasets.tasks import TaskFit

        model_source, column = forecast_model_source(source, dataset.y)
        program = ndvm.compile(model_source)
        theta = [[parameters[n] for n in program.param_names]] if program.param_names else None
        one_step = np.asarray(program.evaluate(theta, {column: task.y}), dtype=float)[0]
        frame = dataset.frame.sort(dataset.x)
        t = frame.get_column(dataset.x).cast(float).to_numpy()
        held = (frame.get_column("split") == "test").to_numpy()
        # lead-1 forecasts from every held-out origin, drawn at the time they forecast
        fit = TaskFit(task.name, "entry", source, {k: v for k, v in parameters.items() if k in program.param_names},
                      0.0, 0.0)
        lead1 = np.full(t.shape, np.nan)
        lead1[task.origins + 1] = task.forecasts(fit)[:, 0]
        return {
            "fit_plot": FitPlot(t, task.y, one_step, held, x_label=dataset.x, y_label=dataset.y,
                                title="one-step-ahead predictions"),
            "forecast_plot": ForecastPlot(t, task.y, lead1, split=float(t[task.n_train]), label="lead-1 forecast",
                                          time_label=dataset.x, y_label=dataset.y),
            "input_example": pd.DataFrame({column: task.y[:24]}),
            "model_source": model_source,
        }
    group = task.groups()[0]
    x_parts, y_parts, held_parts = [], [], []
    for part in ("train", "test"):
        inputs = task.train_inputs(group) if part == "train" else task.test_inputs(group)
        target = task.train_target(group) if part == "train" else task.test_target(group)
        x_parts.append(inputs["x"])
        y_parts.append(target)
        held_parts.append(np.full(len(target), part == "test"))
    x, y, held = np.concatenate(x_parts), np.concatenate(y_parts), np.concatenate(held_parts)
    program = ndvm.compile(source)
    theta = [[parameters[n] for n in program.param_names]] if program.param_names else None
    prediction = np.broadcast_to(np.asarray(program.evaluate(theta, {"x": x}), dtype=float)[0], x.shape)
    title = f"{dataset.group} {group}" if group is not None else ""
    return {
        "fit_plot": FitPlot(x, y, prediction, held, x_label=f"x = {dataset.x} / {task.x_scale:g}", y_label=dataset.y,
                            title=title),
        "input_example": pd.DataFrame({"x": x[:5]}),
    }


__all__ = ["ProblemSpec", "load_problem", "task_spec", "probe_inputs", "entry_extras", "forecast_model_source",
           "metric_label"]
