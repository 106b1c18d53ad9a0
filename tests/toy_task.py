"""A toy task, added to the pipeline the way docs/architecture.md ("Add a task") says a task is
added: this module, implementing only what every task must (``datasets.tasks.base.Task``'s
abstract methods), and one ``TASKS`` line (tests/test_flows_stages.py makes it).

It fits a curve y(x) over a dataset's x and y columns on the training rows, and scores the RMSE
on a split's rows; everything else (one fit group, no references, no extra plots, the column
card) is the interface's default.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import polars as pl

from datasets.tasks.base import Errors, Task, TaskFit

LINE = "(param a 0.0)\n(param b 0.0)\n(+ a (* b x))"
SEEDS = (LINE, "(param a 0.0)\n(param b 0.0)\n(param c 0.0)\n(+ a (* b x) (* c x x))")


class ToyTask(Task):
    kind = "toy"
    primary_metric = "rmse"

    def __init__(self, dataset: Any) -> None:
        self.dataset = dataset
        self.name = f"{dataset.name}-toy"
        frame = dataset.frame.sort(dataset.x)
        scale = float(frame.get_column(dataset.x).max())  # x in [0, 1]: parameters of order one
        self.rows: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        for split in ("train", "validation", "test"):
            part = frame.filter(pl.col("split") == split)
            x = part.get_column(dataset.x).cast(pl.Float64).to_numpy() / scale
            self.rows[split] = (x, part.get_column(dataset.y).cast(pl.Float64).to_numpy())

    # ---- what every task implements
    def fit_inputs(self, group: Any = None) -> dict[str, np.ndarray]:
        return {"x": self.rows["train"][0]}

    def fit_target(self, group: Any = None) -> np.ndarray:
        return self.rows["train"][1]

    def score(self, fit: TaskFit, split: str = "validation") -> dict[str, Any]:
        if not fit.ok:
            return {"model": fit.name, "rmse": math.inf, "error": fit.error}
        errors = self._errors(fit, split)
        return {"model": fit.name, "rmse": errors.primary(), "n_params": fit.n_params, "train_loss": fit.train_loss}

    def test_errors(
        self, source: str, parameters: dict[str, float], name: str, split: str, **calibrate_options: Any
    ) -> Errors:
        try:
            return self._errors(self.restore_fit(source, parameters, name), split)
        except Exception as exc:  # an Errors with its reason, never an exception
            return Errors(name, self.kind, error=f"{type(exc).__name__}: {exc}")

    def contract_text(self) -> str:
        return f"A program of one input `x` ({self.dataset.x} scaled to [0, 1]) whose value is {self.dataset.y}."

    # ---- two optional hooks: a fit predicts, and the mutation proposer has parents
    def attach_predictor(self, fit: TaskFit, program: Any) -> None:
        theta = [[fit.params[n] for n in program.param_names]]
        fit.predictor = lambda inputs: np.asarray(program.evaluate(theta, inputs), dtype=float).reshape(-1)

    def seed_programs(self) -> list[str]:
        return list(SEEDS)

    def _errors(self, fit: TaskFit, split: str) -> Errors:
        x, y = self.rows[split]
        assert fit.predictor is not None
        prediction = fit.predictor({"x": x})
        if prediction.size == 1:
            prediction = np.full(y.shape, prediction[0])
        if not np.all(np.isfinite(prediction)):
            return Errors(fit.name, self.kind, error="non-finite predictions")
        return Errors(fit.name, self.kind, groups={None: prediction - y})
