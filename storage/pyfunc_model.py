"""The MLflow pyfunc model of a fitted NDVM program (logged by ``storage.tracking.Tracker``).

It is logged as "model from code" (``storage/model_code.py``), so loading it needs this package and
the ndvm runtime installed (``ndvm-discovery``), never an unpickled object.

Three shapes of model share the class:

- one parameter vector (a curve fitted without groups, a regression over a table): the
  DataFrame's columns are the program's inputs (a column whose name is not a program name reaches
  the program under its ``program_names`` name, datasets/tasks/regression.py); a curve's fit.json
  has a ``columns`` section: its x column, in the data's units and name, reaches the program's
  input ``x`` as column / x_scale;
- a forecast candidate: the DataFrame holds the history (the series' column, oldest first, and
  for a candidate that reads x, the calendar column and the covariates by name; any numeric type:
  an int month is fine; a missing or non-numeric one is a :class:`HistoryError`). By default
  (``params={"horizon": 0}``) each row gets the one-step-ahead forecast made from the rows before
  it; with ``params={"horizon": h}`` the model returns the forecasts at leads 1..h after the last
  row, as a DataFrame with the columns ``lead`` and ``forecast`` (fit.json's ``forecast`` section
  carries the forecasting program, the input names and the task's leads);
- a per-group curve (battery cells): ``fit.json`` carries a ``groups`` section with every group's
  fitted parameters, the group, x and y column names and the input scaling (``x = column / x_scale``,
  cycles / 100 for battery data). The DataFrame has the group column and the raw x column; each
  row is predicted with its group's parameters. A group the model does not know is calibrated on
  the fly from its own rows that carry a y value (a new cell's early cycles), with the calibration
  settings of the discovery run, and then predicted on all of its rows (the rest of its life).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import mlflow.pyfunc
import numpy as np
import pandas as pd


class UnknownGroupError(ValueError):
    """A row names a group (cell) that the model has no parameters for and cannot calibrate."""


class HistoryError(ValueError):
    """A forecast model's history lacks a column the model reads (the series, the calendar, a
    covariate), or holds values it cannot read (not numeric, a calendar value outside 1..period)."""


class NDVMProgramModel(mlflow.pyfunc.PythonModel):
    """A fitted NDVM program as an MLflow pyfunc model.

    Artifacts: ``program`` (the source) and ``fit`` (JSON: fitted parameters by name,
    ``static_inputs``, inputs that are not DataFrame columns, and for a per-group curve the
    ``groups`` section described in the module docstring). ``predict`` returns one prediction per
    row: a program whose value is a vector over its inputs (a closed-form model of ``x``) is
    evaluated once on the columns; a program whose value is a scalar, or that cannot take the
    columns as vectors (a branch on ``x``), is evaluated once per row (one lane per row).
    """

    def load_context(self, context: Any) -> None:
        import ndvm

        source = Path(context.artifacts["program"]).read_text()
        fitted = json.loads(Path(context.artifacts["fit"]).read_text())
        self._program = ndvm.compile(source)
        names = self._program.param_names
        missing = [name for name in names if name not in fitted["params"]]
        if missing:
            raise ValueError(f"fitted parameters lack {missing}")
        self._theta = np.array([[float(fitted["params"][name]) for name in names]])
        self._static = {k: np.asarray(v, dtype=np.float64) for k, v in fitted.get("static_inputs", {}).items()}
        self._forecast = fitted.get("forecast")
        if self._forecast is not None:
            for key in ("program", "input", "horizon_input", "leads"):
                if key not in self._forecast:
                    raise ValueError(f"fit.json: the forecast section lacks {key!r}")
            self._forecaster = ndvm.compile(self._forecast["program"])
            if list(self._forecaster.param_names) != list(names):
                raise ValueError("fit.json: the forecasting program's parameters differ from the model's")
        self._columns = fitted.get("columns") or {}  # data column -> {"input", "scale"} (a curve)
        for column, spec in self._columns.items():
            if "input" not in spec or float(spec.get("scale", 0)) <= 0:
                raise ValueError(f"fit.json: the columns section of {column!r} needs an input and a scale > 0")
        self._grouped = fitted.get("groups")
        if self._grouped is not None:
            spec = self._grouped
            for key in ("column", "x", "input", "x_scale", "params"):
                if key not in spec:
                    raise ValueError(f"fit.json: the groups section lacks {key!r}")
            self._group_theta: dict[str, np.ndarray] = {}
            for group, values in spec["params"].items():
                lacking = [name for name in names if name not in values]
                if lacking:
                    raise ValueError(f"fit.json: group {group!r} lacks parameters {lacking}")
                self._group_theta[str(group)] = np.array([[float(values[name]) for name in names]])

    @property
    def groups(self) -> list[str]:
        """The groups (cells) the model carries parameters for; empty for an ungrouped model."""
        return sorted(self._group_theta) if self._grouped is not None else []

    # The DataFrame type hint tells MLflow to take the schema from the input example.
    def predict(self, context, model_input: pd.DataFrame, params=None) -> Any:
        horizon = (params or {}).get("horizon") or 0
        if horizon:
            return self.forecast(model_input, int(horizon))
        if self._forecast is not None:  # one step ahead per row: the same columns, checked alike
            model_input = self._history(model_input)
        if self._grouped is not None:
            return self._predict_groups(model_input)
        columns = {str(c): np.asarray(model_input[c], dtype=np.float64) for c in model_input.columns}
        # a table's column whose name is not a program name (``temp (C)``) reaches the program
        # under the name the regression task gave it (storage/columns.py)
        from storage.columns import program_names

        for column, name in program_names(list(columns)).items():
            columns.setdefault(name, columns[column])
        # a curve's x in the data's own units and name (``t``, ``cycle``): the program's input is
        # the column over its scale (the curve task's x_scale)
        for column, spec in self._columns.items():
            if column in model_input.columns:
                columns[spec["input"]] = np.asarray(model_input[column], dtype=np.float64) / float(spec["scale"])
        return self._evaluate(self._theta, columns, len(model_input))

    def forecast(self, history: pd.DataFrame, horizon: int) -> pd.DataFrame:
        """Forecasts at leads 1..``horizon`` after the last row of ``history`` (its one column,
        oldest first): a DataFrame with the columns ``lead`` and ``forecast``."""
        if self._forecast is None:
            raise ValueError("params={'horizon': h} applies to forecast models only; this model predicts per row")
        if isinstance(horizon, bool) or int(horizon) != horizon or horizon < 1:
            raise ValueError(f"horizon must be a whole number of steps >= 1, got {horizon!r}")
        history = self._history(history)
        column = self._forecast["input"]
        if len(history) == 0:
            raise HistoryError(f"the history is empty: the forecast walks the column {column!r} from its first value")
        for name in history.columns:  # the series and every covariate: the state walks each value
            missing = int((~np.isfinite(history[name].to_numpy())).sum())
            if missing:
                raise HistoryError(
                    f"the history column {name!r} has {missing} missing or infinite values: the forecast walks every value"
                )
        values = history[column].to_numpy()
        theta = self._theta if self._theta.shape[1] else None
        inputs = {column: values, self._forecast["horizon_input"]: np.asarray(float(horizon))}
        # a candidate that takes x: the covariates as observed, the calendar (1..period) extended
        # past the history, step by step
        for name in self._forecast.get("covariates", []):
            inputs[name] = np.asarray(history[name], dtype=np.float64)
        calendar = self._forecast.get("calendar")
        if calendar:
            seen = np.asarray(history[calendar], dtype=np.float64)
            period = int(self._forecast["period"])
            ahead = (seen[-1] - 1 + np.arange(1, horizon + 1)) % period + 1
            inputs[calendar] = np.concatenate([seen, ahead])
        out = np.asarray(self._forecaster.evaluate(theta, inputs), dtype=np.float64).reshape(-1)
        return pd.DataFrame({"lead": np.arange(1, horizon + 1), "forecast": out})

    def _history(self, frame: pd.DataFrame) -> pd.DataFrame:
        """The columns a forecast model reads, as float64: the series, then its x's (the calendar
        position, the covariates), whatever numeric type the user gave them (an int month is
        natural). A missing column, a non-numeric one or a calendar value outside 1..period is a
        :class:`HistoryError` naming the column and what it is."""
        spec = self._forecast
        column, calendar = spec["input"], spec.get("calendar")
        roles = {column: "the series itself, oldest first"}
        if calendar:
            roles[calendar] = f"the calendar position of each row, 1..{spec['period']}"
        for name in spec.get("covariates", []):
            roles[name] = "a covariate, its value observed at each row"
        absent = [name for name in roles if name not in frame.columns]
        if absent:
            what = "; ".join(f"{name!r} ({roles[name]})" for name in absent)
            raise HistoryError(
                f"the history lacks the column(s) {what}: this forecast model reads {list(roles)} "
                f"(columns given: {[str(c) for c in frame.columns]})"
            )
        out = {}
        for name in roles:
            try:
                values = pd.to_numeric(frame[name], errors="raise").to_numpy(dtype=np.float64, na_value=np.nan)
            except (ValueError, TypeError) as exc:
                raise HistoryError(f"the history column {name!r} ({roles[name]}) is not numeric: {exc}") from None
            out[name] = values
        if calendar:
            cal = out[calendar]
            period = int(spec["period"])
            bad = ~np.isfinite(cal) | (cal != np.round(cal)) | (cal < 1) | (cal > period)
            if bad.any():
                first = int(np.flatnonzero(bad)[0])
                raise HistoryError(
                    f"the history column {calendar!r} ({roles[calendar]}) holds {float(cal[first]):g} at row {first}: "
                    f"each value must be a whole number from 1 to {period}"
                )
        return pd.DataFrame(out, index=frame.index)

    def _evaluate(self, theta: np.ndarray, columns: dict[str, np.ndarray], n: int) -> np.ndarray:
        """The program at one parameter row ``theta`` [1, P] on ``n`` rows of ``columns``."""
        import ndvm

        inputs: dict[str, Any] = {}
        for name in self._program.inputs:
            if name in columns:
                inputs[name] = columns[name]
            elif name in self._static:
                inputs[name] = self._static[name]
            else:
                raise ValueError(
                    f"input {name!r} is neither a column of the DataFrame "
                    f"({sorted(columns)}) nor a static input of the model"
                )
        out = None
        try:
            out = np.asarray(self._program.evaluate(theta if theta.shape[1] else None, inputs))[0]
        except ndvm.EvalError:
            # e.g. a branch on x: (if (> x 1) ...) has no single truth value for a column of x.
            if n < 2:
                raise
        if out is None or (np.ndim(out) == 0 and n > 1):
            # A scalar program: one lane per row, each row's values as that lane's inputs.
            lane = {name: columns[name] for name in self._program.inputs if name in columns}
            shared = {name: self._static[name] for name in self._program.inputs if name not in columns}
            out = np.asarray(self._program.evaluate(np.repeat(theta, n, axis=0), shared, lane_inputs=lane))
        out = np.asarray(out, dtype=np.float64).reshape(-1)
        if out.size == 1 and n > 1:  # a constant model of x
            out = np.full(n, out[0])
        return out

    # ---- per-group curves (battery cells) ---------------------------------------------------
    def _predict_groups(self, frame: pd.DataFrame) -> np.ndarray:
        spec = self._grouped
        group_col, x_col, y_col = spec["column"], spec["x"], spec.get("y")
        absent = [c for c in (group_col, x_col) if c not in frame.columns]
        if absent:
            raise ValueError(
                f"the DataFrame lacks the column(s) {absent}: this model predicts from the group "
                f"column {group_col!r} and the raw {x_col!r} (columns given: {list(frame.columns)})"
            )
        keys = frame[group_col].astype(str).to_numpy()
        x = np.asarray(frame[x_col], dtype=np.float64) / float(spec["x_scale"])
        y = np.asarray(frame[y_col], dtype=np.float64) if y_col and y_col in frame.columns else None
        out = np.full(len(frame), np.nan)
        for group in dict.fromkeys(keys):  # in order of first appearance
            rows = np.flatnonzero(keys == group)
            theta = self._group_theta.get(group)
            if theta is None:
                theta = self._calibrate_new_group(group, x[rows], None if y is None else y[rows])
            out[rows] = self._evaluate(theta, {spec["input"]: x[rows]}, len(rows))
        return out

    def _calibrate_new_group(self, group: str, x: np.ndarray, y: np.ndarray | None) -> np.ndarray:
        """Fit the program on a new group's rows that carry a y value; its parameter row [1, P]."""
        import ndvm

        spec = self._grouped
        y_col = spec.get("y")
        known = ", ".join(self.groups)
        if y is None or not np.isfinite(y).any():
            raise UnknownGroupError(
                f"unknown {spec['column']} {group!r}: the model has parameters for {len(self._group_theta)} "
                f"{spec['column']} values: {known}. To predict a new one, give its early rows with the "
                f"{y_col!r} column filled in: the model calibrates it on them and predicts its other rows"
            )
        seen = np.isfinite(y)
        n_params = len(self._program.param_names)
        if seen.sum() <= n_params:
            raise UnknownGroupError(
                f"new {spec['column']} {group!r}: {int(seen.sum())} rows with {y_col!r} cannot determine "
                f"{n_params} parameters; give more than {n_params} (known {spec['column']} values: {known})"
            )
        order = np.argsort(x[seen], kind="stable")  # the task fits each group in x order
        settings = dict(spec.get("calibration") or {})
        # a model logged before solve_linear was a setting was fitted searching every parameter
        settings.setdefault("solve_linear", False)
        names = self._program.param_names
        if self._program.shared_names:  # shared parameters keep the known groups' value: fit the others
            known_row = next(iter(self._group_theta.values()))[0]
            values = {n: float(known_row[names.index(n)]) for n in self._program.shared_names}
            ((fit,),) = ndvm.calibrate_shared(
                [self._program],
                [({spec["input"]: x[seen][order]}, y[seen][order])],
                loss=spec.get("loss", "mse"),
                shared_values=[values],
                **settings,
            )
        else:
            fit = ndvm.calibrate(
                self._program,
                {spec["input"]: x[seen][order]},
                target=y[seen][order],
                loss=spec.get("loss", "mse"),
                **settings,
            )
        if fit.error:
            raise ValueError(f"calibrating the new {spec['column']} {group!r} failed: {fit.error}")
        return np.array([[float(fit.params[name]) for name in self._program.param_names]])


__all__ = ["HistoryError", "NDVMProgramModel", "UnknownGroupError"]
