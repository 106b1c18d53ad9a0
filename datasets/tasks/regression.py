"""The ``regression`` task: symbolic regression on a table with any number of input columns.

The candidate is a complete NDVM program whose free inputs are the table's input columns, each a
vector with one element per row, under its program name (``program_names``): a column name that
is a plain identifier (letters, digits, ``_``, not starting with a digit) and not a name of the
language (``exp``, ``if``, ``param``, ...) is used as is; any other is rewritten: every run of other
characters becomes ``_``, a leading digit (or an empty name) gets ``c_`` in front, a name of the
language gets ``_`` behind, and a name taken twice gets ``_2``, ``_3``... (``temp (C)`` ->
``temp_C_``, ``2theta`` -> ``c_2theta``, ``exp`` -> ``exp_``). The MLflow model takes the original
column names (storage/pyfunc_model.py applies the same rule, ``storage.columns.program_names``).

The program's value is a vector of predictions, one per row (a scalar is a constant model).
Parameters are declared with ``(param ...)`` and fitted by mean squared error on the training rows
(one parameter vector for the whole table; a group column only serves a grouped split).

Scores: ``rmse`` on the split's rows (the primary metric), ``nmse`` (MSE / variance of the
target on those rows), ``mae``. Contract C2: ``rmse_se`` is the standard error of the validation
RMSE over ``VALIDATION_BLOCKS`` consecutive blocks of the validation rows in frame order (the rows
of a random split are in random order, so the blocks are random folds; a split column's rows keep
the file's order), ``std(block RMSEs, ddof=1) / sqrt(n_blocks)``; ``n_blocks`` says how many.

Large tables: fitting every candidate on every training row costs time in proportion to the rows.
When the training part has more than ``max_fit_rows`` rows (default: sized from a measured cost,
``fit_row_budget``), candidates are fitted on a seeded sample of that many training rows (drawn
once); ``prepare_test_fit`` refits the finalists on all training rows (at most ``REFIT_MAX_ROWS``,
datasets/tasks/sampling.py), starting from the sampled fit, before they are scored on the test split. Likewise the search scores a seeded sample of at
most ``SCORE_ROWS_PER_FIT_ROW`` x ``max_fit_rows`` validation rows (the standard error of an RMSE
over hundreds of thousands of rows is far below the differences that rank candidates); the test
split is scored on every row. A worker process receives only those rows (``__getstate__``).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl

from storage.columns import program_names

from ..schema import TEST, TRAIN, VALIDATION, Dataset
from .base import TaskFit
from .curve import CurveTask
from .edges import EDGE_FRACTION, EDGE_MIN_ROWS, EDGE_SAMPLE_ROWS, EdgeBlock, GrowthGrid
from .errors import CandidateError, TaskError
from .facts import InputCorrelationFacts, InputResidualFacts, NoteFact, UnscoredFact
from .metrics import rmse
from .sampling import REFIT_MAX_ROWS, REFIT_STEPS, SCORE_ROWS_PER_FIT_ROW, fit_row_budget, lbfgs_from, sample_rows

INF = float("inf")
VALIDATION_BLOCKS = 5
# Parts of the training split (datasets/tasks/edges.py): the inner rows candidates are fitted on
# (TRAIN), the edge block held out of fitting and scored with validation (EDGE), and both
# (ALL_TRAINING: what a sampled table's finalists are refitted on before the test).
EDGE = "edge"
ALL_TRAINING = "all_training"
POLISH_STEPS = 100  # L-BFGS steps polishing each candidate after the run's (Adam) calibration  # L-BFGS steps of a finalist's refit on every training row


@dataclass(frozen=True)
class LinearReference:
    """A reference model linear in its parameters: y = design(inputs) @ coefficients, fitted by
    least squares (exact), with the same model as an NDVM program (``source``)."""

    name: str
    description: str
    terms: tuple[tuple[str, ...], ...]  # each term a product of program input names; () is the intercept

    def design(self, inputs: dict[str, np.ndarray], n: int) -> np.ndarray:
        columns = []
        for term in self.terms:
            col = np.ones(n)
            for name in term:
                col = col * inputs[name]
            columns.append(col)
        return np.column_stack(columns)

    def predict(self, inputs: dict[str, np.ndarray], coef: np.ndarray, rows_at_once: int = 100_000) -> np.ndarray:
        """``design(inputs) @ coef``, ``rows_at_once`` rows at a time: the design matrix of a quadratic
        in five inputs over two million test rows would take 340 MB."""
        n = len(next(iter(inputs.values())))
        out = np.empty(n)
        for start in range(0, n, rows_at_once):
            part = {k: v[start : start + rows_at_once] for k, v in inputs.items()}
            out[start : start + rows_at_once] = self.design(part, min(rows_at_once, n - start)) @ coef
        return out

    @property
    def param_names(self) -> tuple[str, ...]:
        return tuple(f"c{i}" for i in range(len(self.terms)))

    @property
    def source(self) -> str:
        decls = "\n".join(f"(param {p} 0.0)" for p in self.param_names)
        parts = []
        for p, term in zip(self.param_names, self.terms):
            parts.append(p if not term else f"(* {p} {' '.join(term)})")
        body = parts[0] if len(parts) == 1 else f"(+ {' '.join(parts)})"
        return f"{decls}\n{body}"


def power_law_source(names: list[str]) -> str:
    """``c * x1^a1 * x2^a2 ...`` with every exponent fitted (starting at 1): the form of many
    physical laws (products and ratios of powers); a seed only where every input is positive."""
    decls = ["(param c 1.0)"] + [f"(param a{i} 1.0)" for i in range(len(names))]
    factors = " ".join(f"(expt {n} a{i})" for i, n in enumerate(names))
    return "\n".join(decls) + f"\n(* c {factors})"


def linear_terms(names: list[str]) -> tuple[tuple[str, ...], ...]:
    return ((),) + tuple((n,) for n in names)


def product_terms(names: list[str]) -> tuple[tuple[str, ...], ...]:
    """Linear terms and every pairwise product of different inputs."""
    pairs = tuple((a, b) for i, a in enumerate(names) for b in names[i + 1 :])
    return linear_terms(names) + pairs


def quadratic_terms(names: list[str]) -> tuple[tuple[str, ...], ...]:
    """Linear terms, squares and pairwise products: the full quadratic."""
    return linear_terms(names) + tuple((a, b) for i, a in enumerate(names) for b in names[i:])


class RegressionTask(CurveTask):
    """y = f(inputs) over a table; one parameter vector, scored on held-out rows (the dataset's split)."""

    kind = "regression"
    primary_metric = "rmse"
    table_inputs = True  # every input is a column over the same rows (proposers' TaskSpec.table_inputs)

    def __init__(
        self,
        dataset: Dataset,
        *,
        loss: str = "mse",
        max_fit_rows: int | None = None,
        edge_fraction: float | None = None,
    ):
        if loss not in ("mse", "gaussian_nll"):
            raise TaskError(f"regression task: loss must be 'mse' or 'gaussian_nll', got {loss!r}")
        edge_fraction = EDGE_FRACTION if edge_fraction is None else edge_fraction
        if not (isinstance(edge_fraction, (int, float)) and 0.0 <= edge_fraction < 0.5):
            raise TaskError(f"regression task: the edge fraction must be in [0, 0.5), got {edge_fraction!r}")
        self.edge_fraction = float(edge_fraction)
        self.dataset = dataset
        self.loss = loss
        self.per_group = False
        self.is_battery = False
        self.x_scale = 1.0
        self.columns = tuple(dataset.inputs)
        self.names = program_names(self.columns)
        self.input_names = [self.names[c] for c in self.columns]
        self.name = f"regression:{dataset.name}"
        empty = dataset.empty_parts()
        if empty:
            raise TaskError(f"{dataset.name}: the split leaves no {' and no '.join(empty)} rows")
        names = self.input_names
        self.references = (
            LinearReference("constant", "the mean of the training target", ((),)),
            LinearReference("linear", "linear in every input", linear_terms(names)),
            LinearReference(
                "quadratic", "quadratic in the inputs (squares and pairwise products)", quadratic_terms(names)
            ),
        )
        self._max_fit_rows = max_fit_rows
        self._parts: dict[str, tuple[dict[str, np.ndarray], np.ndarray]] = {}
        self._parts_of: int | None = None
        self._sample: tuple[dict[str, np.ndarray], np.ndarray] | None = None
        self._edge: tuple[EdgeBlock | None, GrowthGrid | None] | None = None  # (edges.py), made once
        self._box: dict[str, tuple[float, float]] = {}  # each input's range over every training row

    def __getstate__(self) -> dict[str, Any]:
        """What a worker process gets: without the cached arrays, and for a sampled table only the
        rows a worker reads (the training sample and the validation rows), not the whole table: a
        worker fits and scores validation; the test is scored where the run is (flows/final.py)."""
        self._edge_parts()  # made here, from every training row: a worker applies the same block
        state = dict(self.__dict__)
        if self.sampled():
            state["dataset"] = self._search_dataset()
        state["_parts"], state["_parts_of"], state["_sample"] = {}, None, None
        return state

    def _search_dataset(self) -> Dataset:
        """The dataset cut to the training sample and the validation rows (gathered by row index)."""
        import dataclasses

        train = self._part_index(TRAIN)
        index = np.concatenate(
            [train[self._sample_rows(train.size)], self._part_index(EDGE), self._part_index(VALIDATION)]
        )
        index.sort()
        frame = self.dataset.frame[index]
        return dataclasses.replace(self.dataset, frame=frame, meta={**self.dataset.meta, "search_rows_only": True})

    # ------------------------------------------------------------------ data
    def groups(self) -> list[Any]:
        return [None]

    def test_groups(self) -> list[Any]:
        return []

    def _rows(self, part: str) -> tuple[dict[str, np.ndarray], np.ndarray]:
        """``part``'s rows as (program name -> input vector, target), cut once (read-only arrays)."""
        if self._parts_of != id(self.dataset.frame):
            self._parts, self._parts_of, self._sample = {}, id(self.dataset.frame), None
        rows = self._parts.get(part)
        if rows is None:
            inputs, y = self._gather(self._part_index(part))
            for v in (*inputs.values(), y):
                v.flags.writeable = False
            rows = self._parts[part] = (inputs, y)
        return rows

    def _gather(self, index: np.ndarray) -> tuple[dict[str, np.ndarray], np.ndarray]:
        """The rows ``index`` as (program name -> input vector, target), gathered column by column,
        the numeric columns only: a filter of the whole frame copies every column, the split's
        strings too (hundreds of megabytes of a 10-million-row table); the loaded frame is one
        chunk, so to_numpy() does not copy."""
        frame = self.dataset.frame

        def column(c: str) -> np.ndarray:
            return frame.get_column(c).cast(pl.Float64).to_numpy()[index]

        return {self.names[c]: column(c) for c in self.columns}, column(self.dataset.y)

    def _part_index(self, part: str) -> np.ndarray:
        """Row numbers of ``part`` in the frame (TRAIN: the inner training rows, EDGE: the edge
        block, ALL_TRAINING: both); the scored parts (validation, edge) cut to their seeded sample."""
        split = TRAIN if part in (EDGE, ALL_TRAINING) else part
        index = np.flatnonzero((self.dataset.frame.get_column("split") == split).to_numpy())
        if split == TRAIN and part != ALL_TRAINING:
            edge = self._edge_parts()[0]
            if edge is not None:  # the mask of every row, then read at the part's rows (no gathered copies)
                frame = self.dataset.frame
                at_edge = edge.mask([frame.get_column(c).cast(pl.Float64).to_numpy() for c in self.columns])[index]
                index = index[at_edge] if part == EDGE else index[~at_edge]
            elif part == EDGE:
                index = index[:0]
        if part in (VALIDATION, EDGE) and index.size > self.max_score_rows:
            index = index[self._sample_rows(index.size, self.max_score_rows)]
        return index

    def _edge_parts(self) -> tuple[EdgeBlock | None, GrowthGrid | None]:
        """The edge block and the growth grid (datasets/tasks/edges.py), made once from every
        training row (the block's thresholds are plain numbers: a worker's rows get the same)."""
        if self._edge is None:
            index = np.flatnonzero((self.dataset.frame.get_column("split") == TRAIN).to_numpy())
            frame = self.dataset.frame
            # the block's quantiles from a seeded sample of a large table; the box from every row
            sample = index[sample_rows(index.size, EDGE_SAMPLE_ROWS)] if index.size > EDGE_SAMPLE_ROWS else index
            columns, ranges = [], {}
            for c in self.columns:
                full = frame.get_column(c).cast(pl.Float64).to_numpy()
                columns.append(full[sample])
                ranges[self.names[c]] = (float(np.min(full[index])), float(np.max(full[index])))
            target = frame.get_column(self.dataset.y).cast(pl.Float64).to_numpy()[index]
            edge = EdgeBlock.of(columns, self.edge_fraction) if index.size >= EDGE_MIN_ROWS else None
            self._edge, self._box = (edge, GrowthGrid.of(ranges, target)), ranges
        return self._edge

    @property
    def edge_block(self) -> EdgeBlock | None:
        """The training rows held out at the edges of the training box, or None (edges.py)."""
        return self._edge_parts()[0]

    @property
    def max_fit_rows(self) -> int:
        """Training rows a candidate is fitted on during the search (see the module docstring)."""
        if self._max_fit_rows is None:
            self._max_fit_rows = fit_row_budget()
        return self._max_fit_rows

    def sampled(self) -> bool:
        return self._rows(TRAIN)[1].size > self.max_fit_rows

    def _fit_rows(self) -> tuple[dict[str, np.ndarray], np.ndarray]:
        inputs, y = self._rows(TRAIN)
        if y.size <= self.max_fit_rows:
            return inputs, y
        if self._sample is None:
            pick = self._sample_rows(y.size)
            self._sample = ({k: v[pick] for k, v in inputs.items()}, y[pick])
        return self._sample

    def _sample_rows(self, n: int, size: int | None = None) -> np.ndarray:
        """The seeded sample of ``size`` (default ``max_fit_rows``) of ``n`` rows, in row order."""
        return sample_rows(n, self.max_fit_rows if size is None else size)

    @property
    def max_score_rows(self) -> int:
        """Validation rows the search scores on: a seeded sample of this many when there are more
        (``SCORE_ROWS_PER_FIT_ROW`` x ``max_fit_rows``); the test split is always scored whole."""
        return SCORE_ROWS_PER_FIT_ROW * self.max_fit_rows

    def _xy(self, group, part: str):  # the curve task's accessor, for the inherited helpers
        return self._rows(part)

    def train_inputs(self, group=None) -> dict[str, np.ndarray]:
        return self._rows(TRAIN)[0]

    def train_target(self, group=None) -> np.ndarray:
        return self._rows(TRAIN)[1]

    def split_inputs(self, split: str, group=None) -> dict[str, np.ndarray]:
        return self._rows(split)[0]

    def split_target(self, split: str, group=None) -> np.ndarray:
        return self._rows(split)[1]

    def fit_inputs(self, group=None) -> dict[str, np.ndarray]:
        return self._fit_rows()[0]

    def fit_target(self, group=None) -> np.ndarray:
        return self._fit_rows()[1]

    # ------------------------------------------------------------------ fitting
    def fit_batch(
        self, programs: list[Any], sources: list[str], names: list[str], **calibrate_options
    ) -> list[TaskFit]:
        """The run's calibration (multi-start, by default Adam: it finds the basin), then each fitted
        candidate polished by one L-BFGS lane from its best point (``POLISH_STEPS``): Adam's 100
        steps leave the constants of a power law or a ratio visibly off their optimum (gravity's
        ``c m1^a0 m2^a1 r^a2``: NMSE 0.0035 after Adam, 0.00023 polished: the noise floor). A
        polish that does not lower the training loss is dropped. Skipped when the run already uses
        L-BFGS."""
        fits = super().fit_batch(programs, sources, names, **calibrate_options)
        if calibrate_options.get("optimizer", "lbfgs") == "lbfgs":
            return fits
        inputs, y = self._fit_rows()
        for program, fit in zip(programs, fits):
            if not fit.ok or not program.param_names:
                continue
            try:
                polished = lbfgs_from(
                    program,
                    {k: v for k, v in inputs.items() if k in program.inputs},
                    y,
                    fit.params,
                    loss=self.loss,
                    steps=POLISH_STEPS,
                    threads=calibrate_options.get("threads"),
                )
            except Exception:  # a polish is optional: the run's own fit stands
                continue
            if polished.error or not math.isfinite(polished.loss) or not polished.loss < fit.train_loss:
                continue
            fit.params, fit.train_loss, fit.fits = dict(polished.params), float(polished.loss), [polished]
            self.attach_predictor(fit, program)
        return fits

    # ------------------------------------------------------------------ programs
    def program_source(self, candidate: str) -> str:
        from . import runtime

        if not runtime.last_form_is_expression(candidate):
            raise CandidateError("a regression program must end with an expression: the prediction for every row")
        return candidate

    def check_program(self, program: Any) -> None:
        extra = sorted(set(program.inputs) - set(self.input_names))
        if extra:
            raise CandidateError(
                f"unknown input(s) {extra}: a regression program may use the inputs {self.input_names} "
                "(and its own params and definitions)"
            )

    def _program_predictor(self, program):
        def predict(params: dict[str, float], inputs: dict[str, np.ndarray]) -> np.ndarray:
            theta = (
                np.array([[params[name] for name in program.param_names]], dtype=float) if program.param_names else None
            )
            used = {k: v for k, v in inputs.items() if k in program.inputs}
            n = len(next(iter(inputs.values())))
            values = program.evaluate(theta=theta, inputs=used)
            return self._as_rows(np.asarray(values)[0] if np.ndim(values) else values, n)

        return predict

    def predict(self, fit: TaskFit, group=None, part: str = VALIDATION) -> np.ndarray:
        if fit.predictor is None:
            raise TaskError(f"fit {fit.name!r} has no predictor (it was not made by this task)")
        return fit.predictor(None, self._rows(part)[0])

    def _refit_rows(self) -> tuple[dict[str, np.ndarray], np.ndarray]:
        """Every training row, the edge block's too (at most ``REFIT_MAX_ROWS``, seeded): what the
        finalists of a sampled table are refitted on before the test."""
        index = self._part_index(ALL_TRAINING)
        if index.size > REFIT_MAX_ROWS:  # (sampling.py: a refit on ten million rows buys nothing)
            index = index[sample_rows(index.size, REFIT_MAX_ROWS)]
        return self._gather(index)  # not cached: a large table's rows are read once

    def prepare_test_fit(self, fit: TaskFit, **calibrate_options) -> TaskFit:
        """A finalist fitted on a sample of a large table is refitted on every training row
        (``_refit_rows``) from its sampled fit: ``REFIT_STEPS`` L-BFGS steps; a refit that fails
        keeps the fit as it was. A table that is not sampled keeps the fit the search validated
        (on the rows inside the edge block): the parameters scored on the test split are the ones
        the report card prints and the MLflow model serves."""
        if not fit.ok or not fit.fits or not self.sampled():
            return fit
        program = self.compile(fit.source)
        if not program.param_names:
            return fit
        inputs, y = self._refit_rows()
        full = lbfgs_from(
            program, inputs, y, fit.params, loss=self.loss, steps=REFIT_STEPS, threads=calibrate_options.get("threads")
        )
        if full.error or not math.isfinite(full.loss):
            return fit
        out = TaskFit(
            fit.task,
            fit.name,
            fit.source,
            dict(full.params),
            float(full.loss),
            fit.seconds,
            fits=[full],
            n_params=fit.n_params,
        )
        self.attach_predictor(out, program)
        return out

    # ------------------------------------------------------------------ scoring
    def score(self, fit: TaskFit, split: str = VALIDATION, *, reference: bool = False) -> dict[str, Any]:
        """Scores on ``split``'s rows: ``rmse`` (primary), ``nmse``, ``mae``, ``train_rmse`` (on the
        rows the candidate was fitted on: the inner rows, or their sample in a large table), and
        ``rmse_se`` with ``n_blocks`` (contract C2, see the module docstring). A failed or non-finite
        fit scores inf.

        On the validation split with an edge block (edges.py) the held-out rows are the validation
        rows and the edge rows together: ``rmse`` is pooled over both, ``rmse_in_range`` and
        ``rmse_edge`` (with ``nmse_in_range``, ``nmse_edge``) are each part's, and each of the
        ``VALIDATION_BLOCKS`` blocks holds one fold of the validation rows and one of the edge rows
        (stratified: blocks of one part only would differ by the parts' difficulty, and that
        spread would inflate the paired standard error of the champion's rule). A
        candidate (not a ``reference``) whose prediction leaves the band just beyond the training
        box (the growth check) scores inf, with the reason."""
        if split not in (VALIDATION, TEST):
            raise TaskError(f"a regression task scores the 'validation' or the 'test' split, not {split!r}")
        edge, growth = self._edge_parts() if split == VALIDATION else (None, None)
        parts = [split] + ([EDGE] if edge is not None else [])
        targets = [self.split_target(part) for part in parts]
        n_blocks = min(VALIDATION_BLOCKS, *(y.size for y in targets))
        base = {"model": fit.name, "n_params": fit.n_params, "train_loss": fit.train_loss, "fit_seconds": fit.seconds}
        failed = {**base, "rmse": INF, "rmse_pooled": INF, "nmse": INF, "mae": INF, "train_rmse": INF}
        failed.update(rmse_se=INF, n_blocks=n_blocks)
        if edge is not None:
            failed.update(rmse_in_range=INF, rmse_edge=INF)
        if not fit.ok:
            return {**failed, "error": fit.error}
        try:
            predictions = [self.predict(fit, None, part) for part in parts]
            p_fit = fit.predictor(None, self.fit_inputs())
            beyond = fit.predictor(None, growth.points) if growth is not None and not reference else None
        except Exception as exc:  # a candidate failing at prediction time scores inf, with the reason
            return {**failed, "error": f"prediction failed: {exc}"}
        for part, p in zip(parts, predictions):
            if not np.all(np.isfinite(p)):
                return {**failed, "error": f"non-finite predictions on {part} rows"}
        refusal = growth.refusal(beyond) if growth is not None and beyond is not None else None
        if refusal:
            return {**failed, "error": refusal}
        p, y = np.concatenate(predictions), np.concatenate(targets)
        error = rmse(p, y)
        var = float(np.var(y))
        # block b: the b-th fold of every part, pooled
        folds = [(np.array_split(pk, n_blocks), np.array_split(yk, n_blocks)) for pk, yk in zip(predictions, targets)]
        per_block = [
            rmse(np.concatenate([f[0][b] for f in folds]), np.concatenate([f[1][b] for f in folds]))
            for b in range(n_blocks)
        ]
        out = {
            **base,
            "rmse": error,
            "rmse_pooled": error,
            "nmse": error**2 / var if var > 0 else INF,
            "mae": float(np.mean(np.abs(p - y))),
            "train_rmse": rmse(p_fit, self.fit_target()) if np.all(np.isfinite(p_fit)) else INF,
            "rmse_se": float(np.std(per_block, ddof=1) / math.sqrt(n_blocks)) if n_blocks > 1 else INF,
            "n_blocks": n_blocks,
            # per-block scores: the champion's rule pairs candidates block by block (storage/selection.py)
            **({f"rmse_block{i + 1}": float(v) for i, v in enumerate(per_block)} if n_blocks > 1 else {}),
            "error": None,
        }
        if edge is not None:
            for label, pk, yk in zip(("in_range", "edge"), predictions, targets):
                out[f"rmse_{label}"] = rmse(pk, yk)
                out[f"nmse_{label}"] = out[f"rmse_{label}"] ** 2 / float(np.var(yk)) if np.var(yk) > 0 else INF
        return out

    def fit_reference(self, ref: Any, test_groups: bool = False) -> TaskFit:
        """A linear reference fitted by least squares on the rows candidates are fitted on (the inner
        training rows, or their sample in a large table: a design matrix of every row and term of a
        10-million-row table would take gigabytes)."""
        start = time.perf_counter()
        inputs, y = self._fit_rows()
        design = ref.design(inputs, y.size)
        coef, *_ = np.linalg.lstsq(design, y, rcond=None)
        mse = float(np.mean((design @ coef - y) ** 2))
        params = dict(zip(ref.param_names, map(float, coef)))

        def predictor(group, rows):
            return ref.predict(rows, coef)

        return TaskFit(
            self.name,
            ref.name,
            ref.source,
            params,
            mse,
            time.perf_counter() - start,
            n_params=len(coef),
            predictor=predictor,
        )

    def score_references(self, split: str = VALIDATION) -> list[dict[str, Any]]:
        return [self.score(self.fit_reference(ref), split, reference=True) for ref in self.references]

    def scored_rows(self, split: str = TEST) -> dict[Any, dict[str, Any]]:
        """None: a table's rows are not cells along one x (the curve task's plot), whatever its
        number of inputs; the card compares the models by their scores and the residual plots."""
        return {}

    def references_to_refit(self, stored: dict[str, float | None]) -> set[str] | None:
        return None  # three least-squares fits: cheap

    # ------------------------------------------------------------------ proposers and prompts
    def _ranges(self) -> dict[str, tuple[float, float]]:
        """Each input's range over every training row (the edge block's too): the training box."""
        self._edge_parts()
        return dict(self._box)

    def probe_inputs(self) -> dict[str, np.ndarray]:
        """24 training rows spread over the part (every input at the same rows)."""
        inputs, y = self._rows(TRAIN)
        pick = np.linspace(0, y.size - 1, min(24, y.size)).astype(int)
        return {k: np.asarray(v[pick], dtype=float) for k, v in inputs.items()}

    def proposer_inputs(self) -> dict[str, str]:
        units = {c.name: c.unit for c in self.dataset.columns}
        out = {}
        for column, (name, (lo, hi)) in zip(self.columns, self._ranges().items()):
            label = f"the column {column!r}" if column != name else f"the column {column}"
            out[name] = (
                f"vector [n]: {label} [{units.get(column, '?')}], {lo:.4g}..{hi:.4g} on the training rows, "
                "one element per row"
            )
        return out

    def split_label(self) -> str:
        kind = self.dataset.meta.get("split", "random")
        how = {
            "column": "the file's split column, as given",
            "random": f"random rows (seed {self.dataset.meta.get('split_seed', 0)})",
            "grouped": f"whole {self.dataset.group} groups held out (seed {self.dataset.meta.get('split_seed', 0)})",
            "temporal": f"temporal, in {self.dataset.x} order",
        }.get(kind, kind)
        label = f"{kind} split: {how}; validation = {VALIDATION_BLOCKS} blocks of the validation rows"
        edge = self.edge_block
        if edge is not None:
            label += f", each with a fold of the {edge.describe(self.input_names)}"
        return label

    def seed_programs(self) -> list[str]:
        """Linear in every input, the pairwise products, the full quadratic, and where every input is
        positive on the training rows a power law (``power_law_source``)."""
        names = self.input_names
        seeds = [
            LinearReference("linear", "", linear_terms(names)).source,
            LinearReference("products", "", product_terms(names)).source,
        ]
        if len(names) > 1:
            seeds.append(LinearReference("quadratic", "", quadratic_terms(names)).source)
        if all(lo > 0 for lo, _ in self._ranges().values()):
            seeds.append(power_law_source(names))
        return list(dict.fromkeys(seeds))

    def card_facts(self) -> list[Any]:
        """The base card (every column's unit and range) and how the target moves with each input
        (correlation over the training and validation rows)."""
        facts = super(CurveTask, self).card_facts()
        frame, _ = self.card_frame()
        y = frame.get_column(self.dataset.y).cast(pl.Float64).to_numpy()
        inputs = [(c, self.names[c], frame.get_column(c).cast(pl.Float64).to_numpy()) for c in self.columns]
        facts.append(InputCorrelationFacts(self.dataset.y, y, inputs))
        if self.sampled():
            facts.append(
                NoteFact(
                    f"- candidates are fitted on a seeded sample of {self.max_fit_rows} of the "
                    f"{self._rows(TRAIN)[1].size} training rows"
                )
            )
        return facts

    def residual_facts(self, source: str, parameters: dict[str, float]) -> list[Any]:
        """The candidate's validation predictions and targets with every input: the prompt gives
        RMSE and bias by range (thirds) of each input."""
        try:
            fit = self.restore_fit(source, parameters, name="best")
            p = self.predict(fit, None, VALIDATION)
        except Exception as exc:  # advice for a prompt: say why rather than fail the request
            return [UnscoredFact(f"{type(exc).__name__}: {exc}")]
        inputs, y = self._rows(VALIDATION)
        return [InputResidualFacts(p, y, inputs)]

    def contract_text(self) -> str:
        ds = self.dataset
        units = {c.name: c.unit for c in ds.columns}
        inputs = "\n".join(f"  - `{n}`: {d}" for n, d in self.proposer_inputs().items())
        example = self.references[1].source
        return f"""Task: symbolic regression on the dataset `{ds.name}`.
Write a program in the NDVM language (a Scheme subset) that predicts `{ds.y}` ({units.get(ds.y, "?")}) from
the inputs below (each a vector with one element per row).

Contract:
- Inputs:
{inputs}
  Arithmetic and math functions work elementwise on vectors, so `(+ a (* b {self.input_names[0]}))` gives
  one prediction per row. No other inputs exist.
- The program's value (its last top-level expression) must be a vector with one prediction per row.
- Declare every fitted constant: `(param name init)`, `(param name init positive)` or
  `(param name init (between lo hi))`. Use 1 to 8 parameters; give sensible initial values.
- Allowed: define, lambda, let, let*, if, cond, and, or, + - * / expt exp log sqrt tanh sigmoid
  softplus min max abs square. No strings, no set!, no I/O.
- Fit: {"mean squared error" if self.loss == "mse" else "Gaussian negative log-likelihood"} on the training
  rows; score: RMSE on the validation rows ({self.split_label()}), lower is better. Simpler formulas
  that score as well are preferred.{self._edge_contract()}

Example:
{example}
"""

    def _edge_contract(self) -> str:
        if self.edge_block is None:
            return ""
        return (
            "\n- The rows at the edges of the training ranges are held out of fitting and scored with the "
            "validation rows: a formula must extrapolate, not only interpolate. A prediction that leaves the "
            "target's range by far just beyond the training box refuses the candidate."
        )

    def entry_extras(self, source: str, parameters: dict[str, float]) -> dict[str, Any]:
        """What MLflow logs for a leaderboard entry: the data of the plot of the predictions
        (``fit_series``) against the first input over
        (at most 2,000 of) the training and validation rows, validation marked held out, and an
        input example with the table's own column names (what the pyfunc model predicts from)."""
        import pandas as pd

        parts = [self._rows(TRAIN), self._rows(EDGE), self._rows(VALIDATION)]
        inputs = {k: np.concatenate([p[0][k] for p in parts]) for k in self.input_names}
        y = np.concatenate([p[1] for p in parts])
        held = np.concatenate([np.full(p[1].size, i > 0) for i, p in enumerate(parts)])
        if y.size > 2000:
            pick = np.sort(np.random.default_rng(0).choice(y.size, 2000, replace=False))
            inputs, y, held = {k: v[pick] for k, v in inputs.items()}, y[pick], held[pick]
        program = self.compile(source)
        plain = {n: parameters[n] for n in program.param_names}
        prediction = self._program_predictor(program)(plain, inputs)
        first = self.input_names[0]
        return {
            "fit_series": {
                "x": inputs[first],
                "y": y,
                "prediction": prediction,
                "heldout": held,
                "x_label": self.columns[0],
                "y_label": self.dataset.y,
            },
            "input_example": pd.DataFrame({c: inputs[self.names[c]][:5] for c in self.columns}),
        }
