"""A discovery from Python, for a notebook: ``discover(...)`` returns the run's hall of fame.

    from flows.api import discover
    result = discover("enso", "mutation", minutes=1.0, seed=3)
    result.equations          # polars: the Pareto front of complexity against the validation score
    result.best               # the champion's row (the one-standard-error rule, storage/selection.py)
    result.sympy()            # the champion as sympy expressions, fitted values substituted
    result.latex(2)           # row 2 as LaTeX (the formula MLflow shows)
    result.predict(frame)     # the champion's predictions on a polars frame (its pyfunc model's)
    result.mlflow_run_id      # the parent run in MLflow

``discover`` takes the options of ``ndvm discover`` as keywords (``discover_options()``: e.g.
``runner="processes"``, ``steps=60``, ``data="my.csv", x="t", y="v"``) and the budget as
``minutes``, ``max_candidates``, ``max_cost_usd``, ``drain_minutes``; it runs the same Prefect flow
as the command (``prefect=False``: the same pipeline on a thread pool, without Prefect's server).
``DiscoveryResult.open(folder, run_id)`` reads a run that has already ended.

The equations are the hall of fame in PySR's sense: per complexity (atoms of the canonical form,
storage/parsimony.py) the candidate with the best validation score, kept when it beats every
simpler one; the champion is always among them. Test scores are there for the candidates the run
scored on the test split (the final top ``test_top_k`` and the champion: the test split is read
once, at the end); null for the others.
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from flows.config import Budget, build_config
from flows.environment import quiet_environment
from storage import CandidateStore, default_store_path
from storage.fingerprint import GROUP_FIT_SETTINGS
from storage.formula import expressions, render
from storage.parsimony import run_front
from storage.selection import champion_of_run


class ResultError(LookupError):
    """A row that the hall of fame does not have, or a run that is not in the store."""


@dataclass
class DiscoveryResult:
    """The outcome of a run: its hall of fame (``equations``), the champion (``best``) and where
    the rest is (``store_path``, ``mlflow_run_id``). Rows are addressed by their index ``i`` (the
    ``index`` column, 0 = the simplest); ``i=None`` is the champion."""

    run_id: str
    folder: Path
    equations: pl.DataFrame
    champion_index: int | None
    metric: str
    mlflow_run_id: str | None
    report: dict[str, Any] = field(default_factory=dict)
    _task: Any = field(default=None, repr=False)

    @property
    def store_path(self) -> Path:
        return default_store_path(self.folder)

    @property
    def best(self) -> dict[str, Any] | None:
        """The champion's row (None: nothing was calibrated)."""
        return None if self.champion_index is None else self.equations.row(self.champion_index, named=True)

    def _row(self, i: int | None) -> dict[str, Any]:
        index = self.champion_index if i is None else i
        if index is None or not 0 <= index < self.equations.height:
            raise ResultError(
                f"run {self.run_id} has no equation {i!r}: its hall of fame has rows 0..{self.equations.height - 1}"
                if i is not None
                else f"run {self.run_id} has no champion (nothing was calibrated)"
            )
        return self.equations.row(index, named=True)

    def parameters(self, i: int | None = None) -> dict[str, float]:
        return {p["name"]: p["value"] for p in self._row(i)["parameters"]}

    def sympy(self, i: int | None = None) -> dict[str, Any]:
        """Row ``i`` as sympy expressions with its fitted parameters: ``{"y": expr}`` for a curve
        or a regression, ``{"init", "predict", "update"}`` for a forecast candidate. Raises
        ``storage.formula.NotRenderable`` for a program with no closed form (a loop, recursion)."""
        row = self._row(i)
        return expressions(row["source"], self.parameters(i))

    def latex(self, i: int | None = None) -> str:
        """Row ``i`` as LaTeX, fitted values rounded to 4 significant digits (as MLflow shows it)."""
        row = self._row(i)
        formula = render(row["source"], self.parameters(i))
        if not formula.ok:
            raise ResultError(f"equation {i}: {formula.reason}")
        return formula.latex

    def predict(self, frame: pl.DataFrame, i: int | None = None) -> np.ndarray:
        """Row ``i``'s predictions on ``frame`` (its columns are the program's inputs, or for a
        per-group curve the group and x columns): what its MLflow pyfunc model predicts
        (storage/pyfunc_model.py), without MLflow."""
        from storage.pyfunc_model import NDVMProgramModel

        row = self._row(i)
        task = self._load_task()
        extras = task.entry_extras(row["source"], self.parameters(i))
        with tempfile.TemporaryDirectory(prefix="ndvm-predict-") as tmp:
            program = Path(tmp) / "program.scm"
            program.write_text(extras.get("model_source") or row["source"])
            fit: dict[str, Any] = {
                "params": self.parameters(i),
                "static_inputs": {k: np.asarray(v, float).tolist() for k, v in extras.get("static_inputs", {}).items()},
            }
            if extras.get("model_forecast") is not None:  # a forecast candidate: one step ahead per row
                fit["forecast"] = extras["model_forecast"]
            if extras.get("model_columns") is not None:
                fit["columns"] = extras["model_columns"]
            if extras.get("model_groups") is not None:
                fit["groups"] = {**extras["model_groups"], "calibration": self._calibration()}
            (Path(tmp) / "fit.json").write_text(json.dumps(fit))
            model = NDVMProgramModel()
            model.load_context(_Artifacts({"program": str(program), "fit": str(Path(tmp) / "fit.json")}))
            return np.asarray(model.predict(None, frame.to_pandas()), dtype=float)

    def _load_task(self) -> Any:
        if self._task is None:
            from flows.report import task_of_run

            with CandidateStore(self.store_path, read_only=True) as store:
                self._task, self._config = task_of_run(store, self.run_id)
        return self._task

    def _calibration(self) -> dict[str, Any]:
        """The settings a per-group model calibrates a new group with, as the run did (the same
        keys as ``storage.tracking.Tracker.calibration``)."""
        self._load_task()
        c = self._config.calibration
        values = {k: getattr(c, k) for k in GROUP_FIT_SETTINGS}
        return {k: v for k, v in values.items() if v is not None}

    @classmethod
    def open(cls, folder: str | Path = "runs", run_id: str | None = None, report: dict[str, Any] | None = None):
        """The result of run ``run_id`` (default: the latest) in ``folder``'s store."""
        folder = Path(folder)
        path = default_store_path(folder)
        if not path.is_file():
            raise ResultError(f"no candidate store at {path}")
        with CandidateStore(path, read_only=True) as store:
            run_id = run_id or store.latest_run()
            if run_id is None:
                raise ResultError(f"the store {path} holds no run")
            status = store.run_status(run_id)
            equations, champion = _hall_of_fame(store, run_id)
        return cls(
            run_id=run_id,
            folder=folder,
            equations=equations,
            champion_index=champion,
            metric=status.metric,
            mlflow_run_id=(report or {}).get("mlflow_run_id") or status.mlflow_run_id,
            report=report or {},
        )


class _Artifacts:
    """What a pyfunc model's ``load_context`` reads: its artifacts by name."""

    def __init__(self, artifacts: dict[str, str]):
        self.artifacts = artifacts


_SCHEMA = {
    "index": pl.Int64,
    "complexity": pl.Int64,
    "validation": pl.Float64,
    "test": pl.Float64,
    "formula": pl.Utf8,
    "parameters": pl.List(pl.Struct({"name": pl.Utf8, "value": pl.Float64})),
    "champion": pl.Boolean,
    "validation_rank": pl.Int64,
    "hash": pl.Utf8,
    "source": pl.Utf8,
}


def _hall_of_fame(store: Any, run_id: str) -> tuple[pl.DataFrame, int | None]:
    """The run's Pareto front (plus the champion when it is off the front), simplest first."""
    front = run_front(store, run_id)
    choice = champion_of_run(store, run_id)
    rows = [(entry.complexity, entry.extra) for entry in front]
    if choice is not None and all(entry.hash != choice.hash for entry in front):
        [extra] = [r for r in store.top(10**9, run_id=run_id).iter_rows(named=True) if r["hash"] == choice.hash]
        rows.append((choice.complexity, extra))
        rows.sort(key=lambda r: (r[0] if r[0] is not None else 10**9, r[1]["score"]))
    tests = {
        r["entry"]: r["test_score"]
        for r in store.test_scores(run_id).iter_rows(named=True)
        if r["entry_kind"] == "candidate"
    }
    out = []
    for index, (complexity, row) in enumerate(rows):
        params = row["parameters"]
        params = json.loads(params) if isinstance(params, str) else dict(params or {})
        formula = render(row["source"], params)
        out.append(
            {
                "index": index,
                "complexity": complexity,
                "validation": row["score"],
                "test": tests.get(row["hash"]),
                "formula": formula.text if formula.ok else None,
                "parameters": [{"name": k, "value": float(v)} for k, v in params.items()],
                "champion": choice is not None and row["hash"] == choice.hash,
                "validation_rank": row["rank"],
                "hash": row["hash"],
                "source": row["source"],
            }
        )
    frame = pl.DataFrame(out, schema=_SCHEMA)
    champion = next((r["index"] for r in out if r["champion"]), None)
    return frame, champion


def discover(
    task: str = "enso",
    proposer: str = "auto",
    *,
    minutes: float | None = None,
    max_candidates: int | None = None,
    max_cost_usd: float | None = None,
    drain_minutes: float | None = None,
    run_id: str | None = None,
    resume: str | None = None,
    prefect: bool = True,
    **options: Any,
) -> DiscoveryResult:
    """Run a discovery (the options of ``ndvm discover`` as keywords; the budget's defaults are
    the command's: 2 minutes) and return its ``DiscoveryResult``."""
    quiet_environment(verbose=True)  # offline and telemetry off, as the command (flows/offline.env)
    given = dict(minutes=minutes, max_candidates=max_candidates, max_cost_usd=max_cost_usd, drain_minutes=drain_minutes)
    budget = {k: v for k, v in given.items() if v is not None}
    config = build_config(task, proposer, **options)  # bad options fail here, before anything starts
    if prefect:
        from flows.discover import discover as discover_flow

        report = discover_flow(task, proposer, budget, run_id=run_id, resume=resume, **options)
    else:
        from flows.discover import run_discovery

        report = run_discovery(config, Budget(**budget), run_id=run_id, resume=resume).to_dict()
    _say_end_failures(report)
    return DiscoveryResult.open(config.folder, report["run_id"], report=report)


def _say_end_failures(report: dict[str, Any]) -> None:
    """No silent end in a notebook either: a search that calibrated nothing raises a DiscoveryError
    (the run and its failed candidates are stored); another failed end-of-run step (test scoring,
    the report card, MLflow) is a RuntimeWarning naming the retry, and is in ``result.report``."""
    import warnings

    from flows.errors import DiscoveryError

    for failure in report.get("end_failures") or []:
        if failure["step"] == "search":
            raise DiscoveryError(f"run {report['run_id']}: {failure['message']}")
        warnings.warn(
            f"end of run {report['run_id']}: {failure['step']} failed ({failure['message']}); once the cause is "
            f"fixed: {failure['retry']}",
            RuntimeWarning,
            stacklevel=3,
        )


__all__ = ["DiscoveryResult", "ResultError", "discover"]
