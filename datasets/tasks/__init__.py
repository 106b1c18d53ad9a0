"""Tasks: what a candidate program computes and how it is judged on held-out data.

    from datasets import load
    from datasets.tasks import make_task
    task = make_task(load("enso"))            # ForecastTask (the dataset kind picks the task)
    task.contract_text()                       # the program contract sent to a proposer
    task.seed_programs()                       # valid starting programs for the mutation proposer
    fit = task.fit(source, steps=200)          # ndvm.calibrate on the training part only
    task.score(fit)                            # validation metrics (task.primary_metric, lower is better)
    task.score(task.prepare_test_fit(fit), "test")   # the test split: once, at the end of a run
    task.score_references("validation")        # reference models on a split

Every task implements the interface of ``datasets.tasks.base.Task`` (fit_batch, score, restore_fit,
flat_parameters, probe_inputs, proposer_inputs, split_label, entry_extras, check_program, ...):
the flows use nothing else, so a new kind of task touches this package alone.
"""

from __future__ import annotations

from ..schema import Dataset
from .base import Errors, Task, TaskFit
from .curve import BATTERY_REFERENCES, CurveReference, CurveTask
from .errors import CandidateError, RuntimeUnavailableError, TaskError
from .forecast import ENSO_REFERENCES, ForecastReference, ForecastTask
from .regression import RegressionTask, program_names
from .runtime import ndvm_available

TASKS = {"curve": CurveTask, "forecast": ForecastTask, "regression": RegressionTask}


def task_class(kind: str) -> type[Task]:
    """The task class of ``kind`` (what a stored report or error record names)."""
    try:
        return TASKS[kind]
    except KeyError:
        raise TaskError(f"unknown task {kind!r}; use one of {sorted(TASKS)}") from None


def make_task(dataset: Dataset, kind: str | None = None, **options):
    """The task for ``dataset``: ``kind`` ("curve", "forecast" or "regression"), else the dataset's
    default task (a user file with several inputs: "regression")."""
    if kind is None:
        if dataset.definition is not None:
            kind = dataset.definition.default_task
        else:
            kind = dataset.meta.get("task", "curve")
    if kind == "curve" and len(dataset.inputs) > 1:
        raise TaskError(
            f"{dataset.name}: the curve task takes one input; {len(dataset.inputs)} inputs "
            f"({', '.join(dataset.inputs)}) need the regression task"
        )
    if "edge_fraction" in options and kind != "regression":
        raise TaskError(
            f"{dataset.name}: --edge-fraction applies to tables (the regression task), not to the {kind} task"
        )
    return task_class(kind)(dataset, **options)


__all__ = [
    "BATTERY_REFERENCES",
    "ENSO_REFERENCES",
    "CandidateError",
    "Errors",
    "CurveReference",
    "CurveTask",
    "ForecastReference",
    "ForecastTask",
    "RegressionTask",
    "RuntimeUnavailableError",
    "Task",
    "TaskError",
    "TaskFit",
    "make_task",
    "program_names",
    "ndvm_available",
    "task_class",
]
