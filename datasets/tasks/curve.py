"""The ``curve`` task: a program maps input columns to one prediction per row.

The candidate is a complete NDVM program. Its free input is ``x`` (the dataset's x column divided
by ``x_scale``: for battery data, x is in hundreds of cycles); its last expression is a vector with
one prediction per element of ``x`` (elementwise arithmetic broadcasts over the vector, so a
closed-form model needs no loop). Parameters are declared with ``(param ...)`` and fitted by MSE
(or Gaussian NLL) on the training rows. With a group column (battery cells) every group gets its
own parameter values: the same program is calibrated once per group on that group's training rows.

Scores use one split's rows: per-group RMSE, averaged over groups (``rmse``, the primary metric),
plus the pooled RMSE and MAE. During the search that split is ``validation`` (each group's rows
after its training rows); at the end of a run the final top k are scored on ``test`` (each group's
last rows) and, when the dataset holds whole groups out (Severson batch 3), on those groups too:
the program is then fitted on each held-out group's ``test_fit`` rows (``fit_test_groups``) and
scored on its ``test`` rows (``rmse_test_groups``; ``rmse_seen_groups`` for the others).

Large curves: a group's training (and ``validation_fit``) rows beyond ``max_fit_rows`` (default:
``fit_row_budget``, sized from a measured cost) are replaced during the search by a seeded sample of
that many rows, in x order; its validation rows beyond ``max_score_rows`` likewise. Every fit,
score, reference and prompt of the search reads those rows (``_xy``), and a worker process receives
only them (``__getstate__``): a 10-million-row file costs its rows once, in the process that read
it. ``prepare_test_fit`` refits a finalist on every training row (``_all_xy``) from its sampled fit
before the test split, which is never sampled, is scored.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl

from ..schema import TEST, TEST_FIT, TRAIN, VALIDATION, VALIDATION_FIT, Dataset
from . import runtime
from .base import Errors, Task, TaskFit, least_squares_multistart
from .errors import CandidateError, TaskError
from .facts import GroupFacts, GroupResidualFacts, UnscoredFact
from .metrics import rmse
from .runtime import require_ndvm
from .sampling import REFIT_MAX_ROWS, REFIT_STEPS, SCORE_ROWS_PER_FIT_ROW, fit_row_budget, lbfgs_from, sample_rows

INPUT = "x"
INF = float("inf")
# L-BFGS evaluations per lane of the second fit of every curve calibration (CurveTask._calibrate)
LBFGS_STEPS = 100


def _fit_loss(fit: Any) -> float:
    """A per-group ndvm.Fit's training loss, inf when it failed or is not finite."""
    return float(fit.loss) if fit.error is None and np.isfinite(fit.loss) else INF


def _total_loss(fits: list[Any]) -> float:
    """The sum of the groups' training losses of one program (inf when any group failed)."""
    return float(sum(_fit_loss(f) for f in fits))


@dataclass(frozen=True)
class CurveReference:
    """A reference model: a numpy function for scipy, and the same model as an NDVM program."""

    name: str
    description: str
    source: str
    func: Callable[..., np.ndarray]
    param_names: tuple[str, ...]
    starts: tuple[tuple[float, ...], ...]
    lower: tuple[float, ...]
    upper: tuple[float, ...]
    # optional: (x_train, y_train) -> (lower, upper), for bounds that depend on the training data
    bounds_from_train: Callable[[np.ndarray, np.ndarray], tuple[tuple, tuple]] | None = None

    def bounds(self, x: np.ndarray, y: np.ndarray) -> tuple[tuple, tuple]:
        return self.bounds_from_train(x, y) if self.bounds_from_train else (self.lower, self.upper)


def _knee(x, a0, a1, b, x1, g):
    d = x - x1
    return a0 + a1 * d - b * d * np.tanh(d / g)


BATTERY_REFERENCES = (
    CurveReference(
        "linear",
        "linear fade: soh = a + b x",
        "(param a 1.0)\n(param b -0.05)\n(+ a (* b x))",
        lambda x, a, b: a + b * x,
        ("a", "b"),
        ((1.0, -0.05),),
        (-np.inf, -np.inf),
        (np.inf, np.inf),
    ),
    CurveReference(
        "sqrt-sei",
        "SEI growth, capacity loss proportional to sqrt(cycles): soh = a - b sqrt(x)",
        "(param a 1.0)\n(param b 0.05 positive)\n(- a (* b (sqrt x)))",
        lambda x, a, b: a - b * np.sqrt(x),
        ("a", "b"),
        ((1.0, 0.05),),
        (-np.inf, 0.0),
        (np.inf, np.inf),
    ),
    CurveReference(
        "power-law",
        "power-law fade: soh = a - b x^z",
        "(param a 1.0)\n(param b 0.05 positive)\n(param z 1.0 positive)\n(- a (* b (expt x z)))",
        lambda x, a, b, z: a - b * np.power(x, z),
        ("a", "b", "z"),
        ((1.0, 0.05, 0.5), (1.0, 0.05, 1.0), (1.0, 0.01, 2.0)),
        (-np.inf, 0.0, 0.05),
        (np.inf, np.inf, 8.0),
    ),
    CurveReference(
        "knee-bacon-watts",
        "knee model (Bacon-Watts smooth broken line): soh = a0 + a1 d - b d tanh(d/g), d = x - x1, "
        "b >= 0 so the fade accelerates after the knee x1",
        "(param a0 0.9)\n(param a1 -0.05)\n(param b 0.05 positive)\n(param x1 1.0 positive)\n(param g 0.2 positive)\n"
        "(let ((d (- x x1)))\n  (- (+ a0 (* a1 d)) (* b d (tanh (/ d g)))))",
        _knee,
        ("a0", "a1", "b", "x1", "g"),
        ((1.0, -0.05, 0.02, 0.5, 0.3), (1.0, -0.05, 0.02, 1.0, 0.3), (1.0, -0.05, 0.05, 2.0, 1.0)),
        (-np.inf, -np.inf, 0.0, 1e-6, 0.01),
        (np.inf, np.inf, np.inf, np.inf, 50.0),
        # the knee must lie inside the training range: a knee beyond it cannot be estimated
        bounds_from_train=lambda x, y: (
            (-np.inf, -np.inf, 0.0, float(x.min()), 0.01),
            (np.inf, np.inf, np.inf, float(x.max()), 50.0),
        ),
    ),
    CurveReference(
        "double-exponential",
        "empirical capacity model of He et al. (2011): soh = a exp(b x) + c exp(d x)",
        "(param a 1.0)\n(param b -0.01)\n(param c -0.001)\n(param d 0.5)\n(+ (* a (exp (* b x))) (* c (exp (* d x))))",
        lambda x, a, b, c, d: a * np.exp(b * x) + c * np.exp(d * x),
        ("a", "b", "c", "d"),
        ((1.0, -0.01, -0.001, 0.5), (1.0, -0.05, -0.01, 1.0), (0.9, -0.01, 0.1, -1.0)),
        (-np.inf,) * 4,
        (np.inf, np.inf, np.inf, 3.0),
    ),
)

GENERIC_REFERENCES = (
    BATTERY_REFERENCES[0],
    CurveReference(
        "quadratic",
        "quadratic: y = a + b x + c x^2",
        "(param a 0.0)\n(param b 0.0)\n(param c 0.0)\n(+ a (* b x) (* c x x))",
        lambda x, a, b, c: a + b * x + c * x * x,
        ("a", "b", "c"),
        ((0.0, 0.0, 0.0),),
        (-np.inf,) * 3,
        (np.inf,) * 3,
    ),
    CurveReference(
        "exponential",
        "exponential: y = a + b exp(c x)",
        "(param a 0.0)\n(param b 1.0)\n(param c -0.1)\n(+ a (* b (exp (* c x))))",
        lambda x, a, b, c: a + b * np.exp(c * x),
        ("a", "b", "c"),
        ((0.0, 1.0, -0.1), (0.0, 1.0, 0.1)),
        (-np.inf,) * 3,
        (np.inf, np.inf, 50.0),
    ),
)

# Fade laws whose exponent or knee shape is one value for every cell (`shared`, fitted jointly over
# the training cells by ndvm.calibrate_shared; a held-out cell fits only its own parameters).
SHARED_BATTERY_LAWS = (
    (
        "power-law-shared-exponent",
        "(param a 1.0)\n(param b 0.05 positive)\n(param z 1.0 positive shared)\n(- a (* b (expt x z)))",
    ),
    (
        "knee-shared-shape",
        "(param a0 0.9)\n(param a1 -0.05)\n(param b 0.05 positive)\n(param x1 1.0 positive)\n"
        "(param g 0.2 positive shared)\n"
        "(let ((d (- x x1)))\n  (- (+ a0 (* a1 d)) (* b d (tanh (/ d g)))))",
    ),
    (
        "sqrt-power-shared-exponent",
        "(param a 1.0)\n(param b 0.03 positive)\n(param c 0.01 positive)\n(param z 2.0 positive shared)\n"
        "(- a (* b (sqrt x)) (* c (expt x z)))",
    ),
)

EXTRA_BATTERY_SEEDS = (
    "(param a 1.0)\n(param b 0.05 positive)\n(param c 0.3 positive)\n(- a (* b (- 1.0 (exp (- (* c x))))))",
    "(param a 1.0)\n(param b 0.03 positive)\n(param c 0.001 positive)\n(param k 1.0 positive)\n"
    "(- a (* b (sqrt x)) (* c (exp (* k x))))",
)


class CurveTask(Task):
    """Fit a closed-form (or any) program y = f(x) per group, score on each group's held-out tail."""

    kind = "curve"
    primary_metric = "rmse"

    def __init__(
        self,
        dataset: Dataset,
        *,
        x_scale: float | None = None,
        loss: str = "mse",
        per_group: bool = True,
        references: tuple[CurveReference, ...] | None = None,
        max_fit_rows: int | None = None,
    ):
        if loss not in ("mse", "gaussian_nll"):
            raise TaskError(f"curve task: loss must be 'mse' or 'gaussian_nll', got {loss!r}")
        self.dataset = dataset
        self.loss = loss
        self.per_group = per_group and dataset.group is not None
        self._rows: dict[tuple[Any, str], tuple[np.ndarray, np.ndarray]] = {}  # see _xy
        self._rows_of: int | None = None  # id of the frame the cached rows came from
        self._all_rows: dict[tuple[Any, str], tuple[np.ndarray, np.ndarray]] = {}  # unsampled, see _all_xy
        self._max_fit_rows = max_fit_rows
        self._refits: dict[tuple, TaskFit] = {}  # refit_all_rows, by (source, parameters)
        self.is_battery = dataset.group == "cell_id" and dataset.x == "cycle"
        self.x_scale = float(x_scale) if x_scale is not None else (100.0 if self.is_battery else 1.0)
        if self.x_scale <= 0:
            raise TaskError("x_scale must be positive")
        self.references = (
            references if references is not None else (BATTERY_REFERENCES if self.is_battery else GENERIC_REFERENCES)
        )
        self.name = f"curve:{dataset.name}"
        empty = dataset.empty_parts()
        if empty:
            raise TaskError(f"{dataset.name}: the split leaves no {' and no '.join(empty)} rows")
        if dataset.test_groups and not self.per_group:
            raise TaskError(f"{dataset.name}: whole held-out test groups need a per-group fit (per_group=True)")

    # ------------------------------------------------------------------ data
    def groups(self) -> list[Any]:
        """The training groups: the groups candidates are fitted on (whole held-out test and
        validation groups excluded); they are scored on their own validation and test rows."""
        if not self.per_group:
            return [None]
        held = set(self.dataset.test_groups) | set(self.dataset.validation_groups)
        return [g for g in self.dataset.groups if g not in held]

    def validation_groups(self) -> list[Any]:
        """Groups held out whole for validation: every candidate fits its own parameters for them
        on their ``validation_fit`` rows (shared parameters kept from the training fit) and is
        scored on their ``validation`` rows, as test groups are at the end."""
        return list(self.dataset.validation_groups) if self.per_group else []

    def _held_groups(self, split: str) -> tuple[list[Any], str]:
        """The whole held-out groups scored on ``split`` and the part they are fitted on."""
        if split == TEST:
            return self.test_groups(), TEST_FIT
        if split == VALIDATION:
            return self.validation_groups(), VALIDATION_FIT
        return [], TRAIN

    def test_groups(self) -> list[Any]:
        """Groups held out whole: fitted on their ``test_fit`` rows and scored at the end of a run only."""
        return list(self.dataset.test_groups) if self.per_group else []

    def _part(self, group, part: str) -> pl.DataFrame:
        frame = self.dataset.frame.filter(pl.col("split") == part)
        if group is not None:
            frame = frame.filter(pl.col(self.dataset.group) == group)
        return frame.sort(self.dataset.x)

    def _xy(self, group, part: str) -> tuple[np.ndarray, np.ndarray]:
        """``group``'s rows of ``part`` as (x / x_scale, y), in x order (read-only arrays).

        Every fit and score of a candidate reads each group's rows (Severson: 82 cells, four parts
        per score), so they are cut from the frame once, in one pass, and kept (BENCHMARKS.md,
        "Figures behind choices in the code")."""
        if self._rows_of != id(self.dataset.frame):
            self._all_rows, self._rows_of = self._split_rows(), id(self.dataset.frame)
            self._rows = {}
        rows = self._rows.get((group, part))
        if rows is None:
            x, y = self._all_xy(group, part)
            limit = self._row_limit(part)
            if limit is not None and y.size > limit:  # a large table: the search's sample (module docstring)
                pick = sample_rows(y.size, limit)
                x, y = x[pick], y[pick]
                x.flags.writeable = y.flags.writeable = False
            rows = self._rows[(group, part)] = (x, y)
        return rows

    def _all_xy(self, group, part: str) -> tuple[np.ndarray, np.ndarray]:
        """Every row of ``group``'s ``part``, sampled or not (the refit of a finalist)."""
        if self._rows_of != id(self.dataset.frame):
            self._xy(group, part)
        rows = self._all_rows.get((group, part))
        if rows is None:  # a group or part without rows (or a group the dataset does not have)
            rows = self._all_rows[(group, part)] = self._arrays(self._part(group, part))
        return rows

    @property
    def max_fit_rows(self) -> int:
        """Training rows of a group a candidate is fitted on during the search (module docstring)."""
        if self._max_fit_rows is None:
            self._max_fit_rows = fit_row_budget()
        return self._max_fit_rows

    @property
    def max_score_rows(self) -> int:
        """Validation rows of a group the search scores on (``SCORE_ROWS_PER_FIT_ROW`` x ``max_fit_rows``)."""
        return SCORE_ROWS_PER_FIT_ROW * self.max_fit_rows

    def _row_limit(self, part: str) -> int | None:
        """The rows of ``part`` the search reads at most (None: every row; the test parts)."""
        if part in (TRAIN, VALIDATION_FIT):
            return self.max_fit_rows
        if part == VALIDATION:
            return self.max_score_rows
        return None

    def sampled(self) -> bool:
        """Whether the search reads a sample of some group's training rows (a large table)."""
        groups = self.groups() + self.validation_groups()
        return any(self._all_xy(g, p)[1].size > self.max_fit_rows for g in groups for p in (TRAIN, VALIDATION_FIT))

    def _arrays(self, frame: pl.DataFrame) -> tuple[np.ndarray, np.ndarray]:
        x = frame.get_column(self.dataset.x).cast(pl.Float64).to_numpy() / self.x_scale
        y = frame.get_column(self.dataset.y).cast(pl.Float64).to_numpy().copy()
        x.flags.writeable = y.flags.writeable = False  # shared by every caller
        return x, y

    def _split_rows(self) -> dict[tuple[Any, str], tuple[np.ndarray, np.ndarray]]:
        """Every (group, part)'s rows at once (one partition of the frame)."""
        frame = self.dataset.frame.sort(self.dataset.x, maintain_order=True)
        keys = ([self.dataset.group] if self.per_group else []) + ["split"]
        out = {}
        for key, part in frame.partition_by(keys, as_dict=True, maintain_order=True).items():
            group, split = (key[0], key[1]) if self.per_group else (None, key[0])
            out[(group, split)] = self._arrays(part)
        return out

    def __getstate__(self) -> dict[str, Any]:
        # the rows are rebuilt where the task is unpickled (a worker process): cheaper than shipping
        # them; a large table ships only the rows the search reads (its samples, no test rows)
        state = dict(self.__dict__)
        if self.sampled():
            state["dataset"] = self._search_dataset()
        state["_rows"], state["_all_rows"], state["_rows_of"], state["_refits"] = {}, {}, None, {}
        return state

    def _search_dataset(self) -> Dataset:
        """The dataset cut to the rows the search reads: each group's samples (``_xy``), in x order;
        the test rows left out (a worker fits and scores validation; the test is scored where the
        run is, flows/final.py), the held-out groups' ``test_fit`` rows kept (they name those groups)."""
        import dataclasses

        frame = self.dataset.frame.sort(self.dataset.x, maintain_order=True)
        keys = ([self.dataset.group] if self.per_group else []) + ["split"]
        kept = []
        for key, part in frame.partition_by(keys, as_dict=True, maintain_order=True).items():
            split = key[-1]
            limit = self._row_limit(split)
            if split == TEST:
                continue
            if limit is not None and part.height > limit:
                part = part[sample_rows(part.height, limit)]
            kept.append(part)
        meta = {**self.dataset.meta, "search_rows_only": True}
        return dataclasses.replace(self.dataset, frame=pl.concat(kept), meta=meta)

    def train_inputs(self, group=None) -> dict[str, np.ndarray]:
        """Inputs of the training rows of ``group`` (all rows when the task is not per group)."""
        return {INPUT: self._xy(group, TRAIN)[0]}

    def train_target(self, group=None) -> np.ndarray:
        return self._xy(group, TRAIN)[1]

    def split_inputs(self, split: str, group=None) -> dict[str, np.ndarray]:
        """Inputs of ``group``'s rows of ``split`` (train, validation, test or test_fit)."""
        return {INPUT: self._xy(group, split)[0]}

    def split_target(self, split: str, group=None) -> np.ndarray:
        return self._xy(group, split)[1]

    # ------------------------------------------------------------------ programs
    def program_source(self, candidate: str) -> str:
        """The program to compile: for a curve the candidate itself (checked for a final expression)."""
        if not runtime.last_form_is_expression(candidate):
            raise CandidateError("a curve program must end with an expression: the prediction for every x")
        return candidate

    def compile(self, candidate: str):
        ndvm = require_ndvm()
        program = ndvm.compile(self.program_source(candidate))
        self.check_program(program)
        return program

    # ------------------------------------------------------------------ the task interface (see Task)
    @property
    def calibration_loss(self) -> str:
        return self.loss

    def check_program(self, program: Any) -> None:
        """Raise CandidateError when a compiled program has inputs other than ``x``."""
        extra = sorted(set(program.inputs) - {INPUT})
        if extra:
            raise CandidateError(
                f"unknown input(s) {extra}: a curve program may only use the input `x` "
                "(and its own params and definitions)"
            )

    def fit_groups(self) -> list[Any]:
        return self.groups()

    def fit_inputs(self, group=None) -> dict[str, np.ndarray]:
        return self.train_inputs(group)

    def fit_target(self, group=None) -> np.ndarray:
        return self.train_target(group)

    def calibrate_programs(self, ndvm: Any, programs: list[Any], data: list[tuple], **calibrate_options) -> list[list]:
        """Per group: a program's `shared` parameters are fitted jointly over every training group
        (``ndvm.calibrate_shared``), the others per group; a program without shared parameters is
        ``calibrate_groups``' independent per-group fit, as before. Every fit is ``_calibrate``'s:
        the run's optimizer, then L-BFGS from the same starts, the lower training loss kept."""
        return self._calibrate(ndvm, programs, data, **calibrate_options)

    def _calibrate(
        self,
        ndvm: Any,
        programs: list[Any],
        data: list[tuple],
        shared_values: list[dict[str, float]] | None = None,
        **calibrate_options,
    ) -> list[list]:
        """One list of per-group ``ndvm.Fit`` per program: the run's calibration and, when its
        optimizer is not L-BFGS, a second one with L-BFGS (``LBFGS_STEPS`` evaluations per lane,
        the same restarts and seed, so the same starting lanes); per group the lower training loss
        wins, or per program when its shared parameters are fitted jointly (one joint solution, so
        the groups' shared values agree). Why: a curve program is a small least-squares problem per
        group, where a quasi-Newton method converges and Adam's 100 steps do not (BENCHMARKS.md,
        "Curve fits: Adam and L-BFGS"): on Severson batch 1 the power law's training RMSE is 0.0031
        after Adam, 0.00072 after L-BFGS (scipy's least squares: the same), and L-BFGS had the lower
        loss for 60 of 60 candidates of a run, in less time. Without it a candidate is judged by a
        fit the reference laws (fitted by scipy) do not suffer from."""

        def run(**options: Any) -> list[list]:
            if not self.per_group:
                return ndvm.calibrate_groups(programs, data, loss=self.loss, **options)
            return ndvm.calibrate_shared(programs, data, loss=self.loss, shared_values=shared_values, **options)

        first = run(**calibrate_options)
        if calibrate_options.get("optimizer", "lbfgs") == "lbfgs" or not programs:
            return first
        options = {k: v for k, v in calibrate_options.items() if k != "lr"}  # L-BFGS's own first step
        second = run(**{**options, "optimizer": "lbfgs", "steps": LBFGS_STEPS})
        out = []
        for k, (fits_a, fits_b) in enumerate(zip(first, second)):
            joint = (
                self.per_group and bool(programs[k].shared_names) and (shared_values is None or not shared_values[k])
            )
            if joint:  # one joint solution: the lower total loss over the groups
                out.append(fits_b if _total_loss(fits_b) < _total_loss(fits_a) else fits_a)
            else:
                out.append([b if _fit_loss(b) < _fit_loss(a) else a for a, b in zip(fits_a, fits_b)])
        return out

    def fit_batch(
        self, programs: list[Any], sources: list[str], names: list[str], **calibrate_options
    ) -> list[TaskFit]:
        """``Task.fit_batch`` on the training groups, then every fitted candidate's own parameters
        for each whole validation group, fitted on its ``validation_fit`` rows (the training fit's
        shared values kept), in one more native batch. A candidate that fails on a validation group
        fails (its score is inf, the error names the group)."""
        fits = super().fit_batch(programs, sources, names, **calibrate_options)
        held = self.validation_groups()
        ok = [k for k, fit in enumerate(fits) if fit.ok]
        if not held or not ok:
            return fits
        ndvm = require_ndvm()
        started = time.perf_counter()
        first = self.groups()[0]
        data = [({INPUT: x}, y) for x, y in (self._xy(group, VALIDATION_FIT) for group in held)]
        shared = [{n: fits[k].params[first][n] for n in programs[k].shared_names} for k in ok]
        results = self._calibrate(ndvm, [programs[k] for k in ok], data, shared_values=shared, **calibrate_options)
        seconds = (time.perf_counter() - started) / len(ok)
        for k, per_group in zip(ok, results):
            fit = fits[k]
            errors = [
                f"validation group {g}: {r.error or 'non-finite loss'}"
                for g, r in zip(held, per_group)
                if r.error or not np.isfinite(r.loss)
            ]
            if errors:
                fit.error = "; ".join(errors)
                continue
            for group, result in zip(held, per_group):
                fit.params[group] = dict(result.params)
            fit.seconds += seconds
        return fits

    def collect_params(self, groups: list[Any], fits: list[Any]) -> dict[Any, Any]:
        if self.per_group:
            return {g: dict(f.params) for g, f in zip(groups, fits)}
        return dict(fits[0].params)

    def attach_predictor(self, fit: TaskFit, program: Any) -> None:
        predict = self._program_predictor(program)
        fit.predictor = lambda group, inputs: predict(self._group_params(fit, group), inputs)

    def prepare_test_fit(self, fit: TaskFit, **calibrate_options) -> TaskFit:
        return self.fit_test_groups(self.refit_all_rows(fit, **calibrate_options), **calibrate_options)

    def refit_all_rows(self, fit: TaskFit, **calibrate_options) -> TaskFit:
        """A finalist fitted on samples of a large table, refitted on every training row of each
        group (at most ``REFIT_MAX_ROWS`` of them, seeded): one L-BFGS lane from its sampled optimum, ``REFIT_STEPS`` steps (the search's Adam
        settings find an optimum from the declared inits; they do not polish one). A group whose
        refit fails or does not lower its loss keeps its sampled fit; a program with parameters
        shared across groups keeps its joint sampled fit."""
        if not fit.ok or not self.sampled() or self.dataset.meta.get("search_rows_only"):
            return fit
        # the end of a run refits the same finalist for the test scores, the report card and its
        # plots: each refit (seconds on millions of rows) is done once, and a refit's own
        # parameters are its fixed point
        key = (fit.source, tuple(sorted(self.flat_parameters(fit.params).items())))
        done = self._refits.get(key)
        if done is not None:
            return done
        program = self.compile(fit.source)
        if not program.param_names or program.shared_names:
            return fit
        params, losses = {}, []
        for group in self.groups():
            x, y = self._all_xy(group, TRAIN)
            if y.size > REFIT_MAX_ROWS:  # (sampling.py: the cost of a refit on ten million rows buys nothing)
                pick = sample_rows(y.size, REFIT_MAX_ROWS)
                x, y = x[pick], y[pick]
            current = self._group_params(fit, group)
            refit = lbfgs_from(
                program,
                {INPUT: x},
                y,
                current,
                loss=self.loss,
                steps=REFIT_STEPS,
                threads=calibrate_options.get("threads"),
            )
            if refit.error or not np.isfinite(refit.loss):
                params[group] = dict(current)
                continue
            params[group], losses = dict(refit.params), [*losses, float(refit.loss)]
        out = TaskFit(
            fit.task,
            fit.name,
            fit.source,
            params if self.per_group else params[None],
            float(np.mean(losses)) if len(losses) == len(params) else fit.train_loss,
            fit.seconds,
            fits=fit.fits,
            n_params=fit.n_params,
        )
        self.attach_predictor(out, program)
        self._refits[key] = self._refits[(fit.source, tuple(sorted(self.flat_parameters(out.params).items())))] = out
        return out

    def flat_parameters(self, params: dict[Any, Any]) -> dict[str, float]:
        """Per-group fits keep every group as ``group/name`` and the first group's values under the
        plain names (what the logged MLflow model uses)."""
        if not self.per_group:
            return {str(k): float(v) for k, v in params.items()}
        out: dict[str, float] = {}
        for i, (group, values) in enumerate(params.items()):
            for name, value in values.items():
                if i == 0:
                    out[name] = float(value)
                out[f"{group}/{name}"] = float(value)
        return out

    def restore_fit(self, source: str, parameters: dict[str, float], name: str = "entry") -> TaskFit:
        """A fit rebuilt from stored (flat) parameters, with its predictor."""
        program = self.compile(source)
        names = list(program.param_names)
        if self.per_group:
            params = {}
            for group in self.groups() + self.validation_groups():
                missing = [n for n in names if f"{group}/{n}" not in parameters]
                if missing:
                    raise TaskError(f"stored parameters of {name!r} lack {missing} for group {group}")
                params[group] = {n: float(parameters[f"{group}/{n}"]) for n in names}
        else:
            missing = [n for n in names if n not in parameters]
            if missing:
                raise TaskError(f"stored parameters of {name!r} lack {missing}")
            params = {n: float(parameters[n]) for n in names}
        fit = TaskFit(self.name, name, source, params, float("nan"), 0.0, n_params=len(names))
        self.attach_predictor(fit, program)
        return fit

    def probe_inputs(self) -> dict[str, np.ndarray]:
        """Inputs for the store's semantic fingerprint: up to 24 training x values of the first group."""
        x = np.asarray(self.train_inputs(self.groups()[0])[INPUT], dtype=float)
        if x.size > 24:
            x = x[np.linspace(0, x.size - 1, 24).astype(int)]
        return {INPUT: x}

    def proposer_inputs(self) -> dict[str, str]:
        return {INPUT: f"vector [n]: the column {self.dataset.x} / {self.x_scale:g}, one element per row"}

    def split_label(self) -> str:
        held = f"; {len(self.test_groups())} whole groups held out for the test" if self.test_groups() else ""
        if self.validation_groups():
            held += (
                f"; {len(self.validation_groups())} whole groups held out for validation "
                "(fitted on their early rows, scored on the rest)"
            )
        return "temporal per series: fit on the first rows, validation = the rows that follow" + held

    def entry_extras(self, source: str, parameters: dict[str, float]) -> dict[str, Any]:
        """What MLflow logs for a leaderboard entry: the data of the plot of the first group's fit
        over its training and validation rows (``fit_series``, validation marked held out), an input example, and for a per-group
        fit ``model_groups``: every group's parameters and the x scaling for the pyfunc model."""
        import pandas as pd

        group = self.groups()[0]
        x_parts, y_parts, held_parts = [], [], []
        for part in (TRAIN, VALIDATION):
            x, y = self._xy(group, part)
            x_parts.append(x)
            y_parts.append(y)
            held_parts.append(np.full(len(y), part == VALIDATION))
        x, y, held = np.concatenate(x_parts), np.concatenate(y_parts), np.concatenate(held_parts)
        program = self.compile(source)
        plain = {n: parameters[n] for n in program.param_names}  # the first group's values
        prediction = self._program_predictor(program)(plain, {INPUT: x})
        title = f"{self.dataset.group} {group}" if group is not None else ""
        extras = {
            "fit_series": {
                "x": x,
                "y": y,
                "prediction": prediction,
                "heldout": held,
                "x_label": f"x = {self.dataset.x} / {self.x_scale:g}",
                "y_label": self.dataset.y,
                "title": title,
            },
            # the data's own x column, in its units: the model divides by x_scale (model_columns)
            "input_example": pd.DataFrame({self.dataset.x: x[:5] * self.x_scale}),
            "model_columns": {self.dataset.x: {"input": INPUT, "scale": self.x_scale}},
        }
        if self.per_group:
            # The logged model serves every group from raw x values (storage/pyfunc_model.py): it
            # carries each group's parameters and the scaling, and calibrates a new group on the fly.
            del extras["model_columns"]  # the groups section carries the x column and its scaling
            head = self._part(group, TRAIN).head(5)
            extras["input_example"] = pd.DataFrame(
                {
                    self.dataset.group: head.get_column(self.dataset.group).to_list(),
                    self.dataset.x: head.get_column(self.dataset.x).to_numpy(),
                }
            )
            extras["model_groups"] = {
                "column": self.dataset.group,
                "x": self.dataset.x,
                "y": self.dataset.y,
                "input": INPUT,
                "x_scale": self.x_scale,
                "loss": self.loss,
                "params": {
                    str(g): {n: float(parameters[f"{g}/{n}"]) for n in program.param_names} for g in self.groups()
                },
            }
        return extras

    @staticmethod
    def _as_rows(values, n: int) -> np.ndarray:
        """One lane's output as a vector of n predictions (a scalar output is broadcast)."""
        out = np.asarray(values, dtype=float)
        if out.ndim == 0 or out.size == 1:
            return np.full(n, float(out.reshape(-1)[0]))
        out = out.reshape(-1)
        if out.size != n:
            raise CandidateError(f"the program returned {out.size} values for {n} rows of x")
        return out

    def _program_predictor(self, program):
        def predict(params: dict[str, float], inputs: dict[str, np.ndarray]) -> np.ndarray:
            theta = (
                np.array([[params[name] for name in program.param_names]], dtype=float) if program.param_names else None
            )
            values = program.evaluate(theta=theta, inputs=inputs)
            return self._as_rows(np.asarray(values)[0] if np.ndim(values) else values, len(inputs[INPUT]))

        return predict

    # ------------------------------------------------------------------ fitting
    def fit(self, candidate: str, *, name: str = "candidate", **calibrate_options) -> TaskFit:
        """Calibrate ``candidate`` on each group's training rows (``fit_batch`` of one candidate).

        ``calibrate_options`` pass through (steps, restarts, optimizer, lr, seed, ...). A program that
        fails to compile, or whose calibration fails for a group, gives a TaskFit with ``error``.
        """
        ndvm = require_ndvm()
        start = time.perf_counter()
        try:
            program = self.compile(candidate)
        except (CandidateError, ndvm.NDVMError) as exc:
            return TaskFit(self.name, name, candidate, {}, INF, time.perf_counter() - start, error=str(exc))
        (result,) = self.fit_batch([program], [candidate], [name], **calibrate_options)
        result.seconds = time.perf_counter() - start
        return result

    def _group_params(self, fit: TaskFit, group) -> dict[str, float]:
        return fit.params[group] if self.per_group else fit.params

    def fit_test_groups(self, fit: TaskFit, **calibrate_options) -> TaskFit:
        """``fit`` extended with parameters for every whole held-out group, each calibrated on that
        group's ``test_fit`` rows (called at the end of a run, before ``score(fit, "test")``)."""
        if not self.test_groups() or not fit.ok:
            return fit
        ndvm = require_ndvm()
        program = self.compile(fit.source)
        params, errors = dict(fit.params), []
        held = self.test_groups()
        data = [({INPUT: x}, y) for x, y in (self._xy(group, TEST_FIT) for group in held)]
        # shared parameters keep the training fit's values: a held-out group fits only its own
        shared = {n: fit.params[self.groups()[0]][n] for n in program.shared_names}
        (results,) = self._calibrate(ndvm, [program], data, shared_values=[shared], **calibrate_options)
        for group, result in zip(held, results):
            if result.error or not np.isfinite(result.loss):
                errors.append(f"test group {group}: {result.error or 'non-finite loss'}")
                continue
            params[group] = dict(result.params)
        out = TaskFit(
            fit.task,
            fit.name,
            fit.source,
            params,
            fit.train_loss,
            fit.seconds,
            fits=fit.fits,
            error="; ".join(errors) or None,
            n_params=fit.n_params,
        )
        predict = self._program_predictor(program)
        out.predictor = lambda group, inputs: predict(out.params[group], inputs)
        return out

    def fit_reference(self, ref: CurveReference, test_groups: bool = False) -> TaskFit:
        """Fit a reference model with scipy least squares (several starts), per group on its
        training rows; with ``test_groups``, also every held-out group on its ``test_fit`` rows."""
        start = time.perf_counter()
        params, losses = {}, []
        # whole held-out groups on their early rows: the test groups (test_groups) or the validation groups
        held, held_part = self._held_groups(TEST if test_groups else VALIDATION)
        for group in self.groups() + held:
            x, y = self._xy(group, held_part if group in held else TRAIN)
            lower, upper = ref.bounds(x, y)
            try:
                p, mse = least_squares_multistart(ref.func, x, y, ref.starts, lower, upper)
            except RuntimeError as exc:  # every start failed (e.g. targets that overflow): a failed reference
                return TaskFit(
                    self.name,
                    ref.name,
                    ref.source,
                    {},
                    float("inf"),
                    time.perf_counter() - start,
                    error=f"{exc} (group {group})" if group is not None else str(exc),
                    n_params=len(ref.param_names),
                )
            params[group] = dict(zip(ref.param_names, map(float, p)))
            if group not in held:  # the training loss is the training groups'
                losses.append(mse)

        def predictor(group, inputs):
            p = params[group]
            return np.asarray(ref.func(inputs[INPUT], *[p[n] for n in ref.param_names]), dtype=float)

        return TaskFit(
            self.name,
            ref.name,
            ref.source,
            params if self.per_group else params[None],
            float(np.mean(losses)),
            time.perf_counter() - start,
            n_params=len(ref.param_names),
            predictor=predictor,
        )

    # ------------------------------------------------------------------ scoring
    def predict(self, fit: TaskFit, group=None, part: str = VALIDATION) -> np.ndarray:
        if fit.predictor is None:
            raise TaskError(f"fit {fit.name!r} has no predictor (it was not made by this task)")
        x, _ = self._xy(group, part)
        return fit.predictor(group, {INPUT: x})

    def score(self, fit: TaskFit, split: str = VALIDATION) -> dict[str, Any]:
        """Scores of a fit on ``split``'s rows ("validation" during the search, "test" once at the
        end: then whole held-out groups are scored too, and need ``fit_test_groups`` first). A
        failed or non-finite fit scores inf."""
        if split not in (VALIDATION, TEST):
            raise TaskError(f"a curve task scores the 'validation' or the 'test' split, not {split!r}")
        base = {"model": fit.name, "n_params": fit.n_params, "train_loss": fit.train_loss, "fit_seconds": fit.seconds}
        failed = {**base, "rmse": INF, "rmse_pooled": INF, "mae": INF, "train_rmse": INF, "per_group": {}}
        if not fit.ok:
            return {**failed, "error": fit.error}
        held, held_part = self._held_groups(split)
        missing = [g for g in held if g not in fit.params]
        if missing:
            how = "call fit_test_groups before scoring the test split" if split == TEST else "fitted by fit_batch"
            return {**failed, "error": f"no parameters for the held-out {split} groups {missing[:5]} ({how})"}
        per_group, sq, ab, count = {}, 0.0, 0.0, 0
        for group in self.groups() + held:
            fit_part = held_part if group in held else TRAIN
            y_split, y_fit = self.split_target(split, group), self.split_target(fit_part, group)
            try:
                p_split, p_fit = self.predict(fit, group, split), self.predict(fit, group, fit_part)
            except Exception as exc:  # a candidate failing at prediction time scores inf, with the reason
                return {**failed, "error": f"prediction failed for group {group}: {exc}"}
            finite = bool(np.all(np.isfinite(p_split)))
            per_group[group] = {
                "n_fit": int(y_fit.size),
                "n_scored": int(y_split.size),
                "held_out_group": group in held,
                "fit_rmse": rmse(p_fit, y_fit) if np.all(np.isfinite(p_fit)) else INF,
                "rmse": rmse(p_split, y_split) if finite else INF,
            }
            if finite:
                with np.errstate(over="ignore"):  # beyond the float range: inf, checked below
                    sq += float(np.sum((p_split - y_split) ** 2))
                ab += float(np.sum(np.abs(p_split - y_split)))
                count += y_split.size
        finite_all = all(np.isfinite(g["rmse"]) for g in per_group.values())
        out = {
            **base,
            "rmse": float(np.mean([g["rmse"] for g in per_group.values()])),
            "rmse_pooled": float(np.sqrt(sq / count)) if finite_all else INF,
            "mae": ab / count if finite_all else INF,
            "train_rmse": float(np.mean([g["fit_rmse"] for k, g in per_group.items() if k not in held])),
            "error": None if finite_all else f"non-finite predictions on {split} rows",
            "per_group": per_group,
        }
        if split == VALIDATION:  # contract C2: the noise of the primary metric across the scored groups
            out.update(self._primary_se([g["rmse"] for g in per_group.values()]))
        if held:
            out["rmse_seen_groups"] = float(np.mean([g["rmse"] for k, g in per_group.items() if k not in held]))
            out[f"rmse_{split}_groups"] = float(np.mean([g["rmse"] for k, g in per_group.items() if k in held]))
        return out

    @staticmethod
    def _primary_se(rmses: list[float]) -> dict[str, Any]:
        """``rmse_se``: the standard error of the mean over groups of the per-group RMSE (sample
        standard deviation / sqrt(n); groups are independent cells), with ``n_blocks`` = n groups
        and each group's RMSE as ``rmse_block1..n`` (in the task's group order: training groups, then
        validation groups).
        inf when any group's RMSE is not finite; nan with a single group."""
        values = np.asarray(rmses, dtype=float)
        n = int(values.size)
        if n == 0 or not np.all(np.isfinite(values)):
            se = INF
        elif n == 1:
            se = float("nan")
        else:
            se = float(np.std(values, ddof=1) / np.sqrt(n))
        # each group's RMSE as a block score: the champion's rule pairs candidates group by group
        # (storage/selection.py), since cells differ far more in difficulty than models do on one cell
        blocks = {f"rmse_block{i + 1}": float(v) for i, v in enumerate(values)} if n > 1 else {}
        return {"rmse_se": se, "n_blocks": n, **blocks}

    # ------------------------------------------------------------------ references and prompts
    def reference_models(self) -> tuple[CurveReference, ...]:
        return self.references

    def score_references(self, split: str = VALIDATION) -> list[dict[str, Any]]:
        """Fit and score every reference model on ``split`` (scipy; no runtime needed)."""
        return [self.score(self.fit_reference(ref, test_groups=split == TEST), split) for ref in self.references]

    # ------------------------------------------------------------------ the report card
    # Errors are one vector per scored group (their breakdown: the RMSE per group); the report card
    # runs its paired test on them (flows/report_tests.py).

    def _split_groups(self, split: str) -> list[Any]:
        return self.groups() + self._held_groups(split)[0]

    def scored_rows(self, split: str = TEST) -> dict[Any, dict[str, Any]]:
        """The data a per-cell plot of ``split`` draws (the report's test-cells plot): for each
        whole group held out for ``split`` (or, when there is none, each group scored on it), its
        rows in x order with x in the data's units: ``fit_x``, ``fit_y`` (the rows its parameters
        are fitted on), ``x``, ``y`` (the scored rows, aligned with ``Errors.groups[group]``) and
        ``held_out_group``."""
        held, held_part = self._held_groups(split)
        out = {}
        for group in held or self._split_groups(split):
            fit_x, fit_y = self._xy(group, held_part if group in held else TRAIN)
            x, y = self._xy(group, split)
            out[group] = {
                "fit_x": fit_x * self.x_scale,
                "fit_y": fit_y,
                "x": x * self.x_scale,
                "y": y,
                "held_out_group": group in held,
            }
        return out

    def _errors_of(self, fit: TaskFit, split: str) -> Errors:
        groups: dict[Any, np.ndarray] = {}
        for group in self._split_groups(split):
            try:
                prediction = self.predict(fit, group, split)
            except Exception as exc:
                return Errors(fit.name, self.kind, error=f"group {group}: {type(exc).__name__}: {exc}")
            err = np.asarray(prediction, dtype=float) - self.split_target(split, group)
            if not np.all(np.isfinite(err)):
                return Errors(fit.name, self.kind, error=f"non-finite predictions for group {group}")
            groups[group] = err
        return Errors(fit.name, self.kind, groups=groups)

    def test_errors(
        self, source: str, parameters: dict[str, float], name: str, split: str, **calibrate_options
    ) -> Errors:
        """Errors per group of a stored candidate on ``split``; held-out groups are first fitted on
        their ``test_fit`` rows with ``calibrate_options`` (as the run fitted them)."""
        try:
            fit = self.restore_fit(source, parameters, name=name)
            fit = self.prepare_test_fit(fit, **calibrate_options)
        except Exception as exc:
            return Errors(name, self.kind, error=f"{type(exc).__name__}: {exc}")
        if not fit.ok:
            return Errors(name, self.kind, error=fit.error)
        return self._errors_of(fit, split)

    def reference_test_errors(self, split: str, only: set[str] | None = None) -> list[Errors]:
        """Each reference is fitted on every group (held-out ones too on the test split)."""
        out = []
        for ref in self.reference_models():
            if only is not None and ref.name not in only:
                continue
            try:
                fit = self.fit_reference(ref, test_groups=split == TEST)
            except Exception as exc:
                out.append(Errors(ref.name, self.kind, error=f"{type(exc).__name__}: {exc}"))
                continue
            out.append(self._errors_of(fit, split) if fit.ok else Errors(ref.name, self.kind, error=fit.error))
        return out

    def references_to_refit(self, stored: dict[str, float | None]) -> set[str] | None:
        """Only the best stored reference (the one the paired test needs): with many groups
        (Severson: 120 cells) refitting every fade law is slow, and their scores are stored."""
        ok = {k: v for k, v in stored.items() if v is not None}
        return {min(ok, key=lambda k: ok[k])} if ok else None

    # ------------------------------------------------------------------ the LLM prompt
    def card_facts(self) -> list[Any]:
        """The columns, then (with groups) how the groups differ over their training and validation
        rows: start value, last x seen, fade rate per ``x_scale`` of x, for battery data the life to
        95% and 80% of the start, and the other measured columns at the first row (the capacity in Ah).
        Groups held out whole for the test are not in it."""
        facts = super().card_facts()
        if self.per_group and len(self.groups()) > 1:
            ds = self.dataset
            seen = {}
            for group in self.groups():
                xs, ys = zip(*(self._xy(group, part) for part in (TRAIN, VALIDATION)))
                seen[group] = (np.concatenate(xs) * self.x_scale, np.concatenate(ys))
            # the other measured columns at each group's first row (battery data: the capacity in Ah)
            frame = self.seen_frame().filter(pl.col(ds.group).is_in(self.groups())).sort(ds.x)
            firsts = frame.group_by(ds.group, maintain_order=True).first()
            first_rows = {
                column: firsts.get_column(column).to_list()
                for column in firsts.columns
                if column not in (ds.x, ds.y, ds.group, "split") and firsts.schema[column].is_numeric()
            }
            facts.append(
                GroupFacts(
                    seen,
                    group_label=ds.group,
                    x_label=ds.x,
                    y_label=ds.y,
                    x_per_unit=self.x_scale if self.x_scale != 1.0 else 1.0,
                    thresholds=(0.95, 0.8) if self.is_battery else (),
                    first_rows=first_rows,
                )
            )
        return facts

    def residual_facts(self, source: str, parameters: dict[str, float]) -> list[Any]:
        """The candidate's errors on each group's validation rows, with their x (in the dataset's
        units): the prompt names the worst groups and the x ranges where it fails."""
        try:
            fit = self.restore_fit(source, parameters, name="best")
        except Exception as exc:  # advice for a prompt: say why rather than fail the request
            return [UnscoredFact(f"{type(exc).__name__}: {exc}")]
        errors = self._errors_of(fit, VALIDATION)
        if errors.error:
            return [UnscoredFact(errors.error)]
        assert errors.groups is not None
        x = {g: self._xy(g, VALIDATION)[0] * self.x_scale for g in errors.groups}
        return [GroupResidualFacts(errors.groups, x, group_label=self.dataset.group or "group", x_label=self.dataset.x)]

    def reference_programs(self) -> list[tuple[str, str]]:
        """Contract C1: the reference models as programs (linear, square root, power, knee, double
        exponential for battery data), and for battery data the fade laws with a shared exponent or
        knee shape (``SHARED_BATTERY_LAWS``)."""
        out = [(ref.name, ref.source) for ref in self.references]
        if self.is_battery and self.per_group:
            out.extend(SHARED_BATTERY_LAWS)
        return out

    def seed_programs(self) -> list[str]:
        seeds = [source for _, source in self.reference_programs()]
        if self.is_battery:
            seeds.extend(EXTRA_BATTERY_SEEDS)
        return seeds

    def contract_text(self) -> str:
        ds = self.dataset
        units = {c.name: c.unit for c in ds.columns}
        x_desc = f"`{ds.x}` / {self.x_scale:g}" if self.x_scale != 1.0 else f"`{ds.x}`"
        if self.is_battery:
            x_desc += " (hundreds of cycles)" if self.x_scale == 100.0 else ""
        groups = (
            (
                f"Each {ds.group} gets its own parameter values (the program is fitted separately per "
                f"{ds.group}); write one program that works for all of them. "
            )
            if self.per_group
            else ""
        )
        example = self.references[1].source if len(self.references) > 1 else self.references[0].source
        return f"""Task: curve fitting on the dataset `{ds.name}`.
Write a program in the NDVM language (a Scheme subset) that predicts `{ds.y}` ({units.get(ds.y, "?")}) from x.

Contract:
- Input: `x`, a vector: {x_desc}. Arithmetic and math functions work elementwise on vectors, so
  `(+ a (* b x))` gives one prediction per row. Do not loop over x unless you need to.
- The program's value (its last top-level expression) must be a vector of the same length as `x`:
  the predicted `{ds.y}` for every row. No other inputs exist.
- Declare every fitted constant: `(param name init)`, `(param name init positive)` or
  `(param name init (between lo hi))`. Use 1 to 6 parameters; give sensible initial values.
- Allowed: define, lambda, let, let*, if, cond, and, or, + - * / expt exp log sqrt tanh sigmoid
  softplus min max abs square, and the usual Scheme list forms. No strings, no set!, no I/O.
- {groups}Fit: {"mean squared error" if self.loss == "mse" else "Gaussian negative log-likelihood (declare `(param sigma 0.05 positive)` for the noise scale, else it is profiled out)"} on the
  first part of each series; score: RMSE on the validation rows that follow (extrapolation), lower is better.

Example:
{example}
"""


def battery_reference_names() -> list[str]:
    return [r.name for r in BATTERY_REFERENCES]
