"""The MLflow pyfunc model of a fitted NDVM program (logged by ``storage.tracking.Tracker``).

It is logged as "model from code" (``storage/model_code.py``), so loading it needs this package and
the ndvm runtime installed (``ndvm-discovery``), never an unpickled object.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import mlflow.pyfunc
import numpy as np
import pandas as pd

class NDVMProgramModel(mlflow.pyfunc.PythonModel):
    """A fitted NDVM program as an MLflow pyfunc model.

    Artifacts: ``program`` (the source) and ``fit`` (JSON: fitted parameters by name, and
    ``static_inputs``, inputs that are not DataFrame columns). ``predict`` takes a pandas DataFrame
    whose columns are the program's inputs and returns one prediction per row: a program whose
    value is a vector over its inputs (a closed-form model of ``x``) is evaluated once on the
    columns; a program whose value is a scalar, or that cannot take the columns as vectors (a
    branch on ``x``), is evaluated once per row (one lane per row, the row's values its inputs).
    """

    def load_context(self, context: Any) -> None:
        import ndvm

        source = Path(context.artifacts["program"]).read_text()
        fitted = json.loads(Path(context.artifacts["fit"]).read_text())
        self._program = ndvm.compile(source)
        missing = [name for name in self._program.param_names if name not in fitted["params"]]
        if missing:
            raise ValueError(f"fitted parameters lack {missing}")
        self._theta = np.array([[float(fitted["params"][name]) for name in self._program.param_names]])
        self._static = {k: np.asarray(v, dtype=np.float64) for k, v in fitted.get("static_inputs", {}).items()}

    # The DataFrame type hint tells MLflow to take the schema from the input example.
    def predict(self, context, model_input: pd.DataFrame, params=None) -> np.ndarray:
        columns = {str(c): np.asarray(model_input[c], dtype=np.float64) for c in model_input.columns}
        inputs: dict[str, Any] = {}
        for name in self._program.inputs:
            if name in columns:
                inputs[name] = columns[name]
            elif name in self._static:
                inputs[name] = self._static[name]
            else:
                raise ValueError(f"input {name!r} is neither a column of the DataFrame "
                                 f"({sorted(columns)}) nor a static input of the model")
        import ndvm

        out = None
        try:
            theta = self._theta if self._theta.shape[1] else None
            out = np.asarray(self._program.evaluate(theta, inputs))[0]
        except ndvm.EvalError:
            # e.g. a branch on x: (if (> x 1) ...) has no single truth value for a column of x.
            if len(model_input) < 2:
                raise
        n = len(model_input)
        if out is None or (np.ndim(out) == 0 and n > 1):
            # A scalar program: one lane per row, each row's values as that lane's inputs.
            lane = {name: columns[name] for name in self._program.inputs if name in columns}
            shared = {name: self._static[name] for name in self._program.inputs if name not in columns}
            out = np.asarray(self._program.evaluate(np.repeat(self._theta, n, axis=0), shared, lane_inputs=lane))
        return np.asarray(out, dtype=np.float64).reshape(-1)


__all__ = ["NDVMProgramModel"]
