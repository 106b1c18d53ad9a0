"""Calibration: fit a program's parameters to data with the fused native optimizers.

Restarts are lanes: one walk of the program evaluates every restart at once, and the whole loop of
``steps`` iterations runs in C++ (Adam, L-BFGS with a backtracking line search, or gradient
descent) in unconstrained coordinates (softplus for ``positive``, logistic for ``between``).
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from . import _native, errors
from .errors import EvalError, NDVMError
from .program import Limits, Param, Program, _inputs, _lane_inputs, _natural, _unconstrained, compile

if TYPE_CHECKING:  # for the annotation only: ndvm.stderr is imported on first use of Fit.stderr
    from .stderr import StdErr

LOSSES = ("mse", "gaussian_nll", "value")
OPTIMIZERS = ("adam", "lbfgs", "gd")
# calibrate's and calibrate_many's defaults, in one place (datasets/tasks/curve.py reads
# DEFAULT_RESTARTS too). The discovery pipeline fits cheaper by default: flows/calibration.py.
DEFAULT_OPTIMIZER = "adam"
DEFAULT_STEPS = 200
DEFAULT_LR = 0.05
DEFAULT_RESTARTS = 32
# The runtime's enums (native/src/optim.h, error.h), by name: a lane's status name is what
# Fit.lane_status reports, an error kind K is raised as ndvm.errors' class K + "Error".
_LANE_STATUS = {int(v): name for name, v in _native.LaneStatus.__members__.items()}
_ERROR_TYPES = {int(v): getattr(errors, name + "Error") for name, v in _native.ErrorKind.__members__.items()}


@dataclass
class Fit:
    """The result of a calibration. ``params`` are the best restart's values in natural units."""

    program: Program | None
    params: dict[str, float] = field(default_factory=dict)
    loss: float = math.inf
    history: np.ndarray = field(default_factory=lambda: np.zeros(0))
    all_params: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))
    all_losses: np.ndarray = field(default_factory=lambda: np.zeros(0))
    lane_status: list[str] = field(default_factory=list)
    status: str = "ok"  # "ok" | "nonfinite" (no restart produced a finite loss) | "error"
    error: str | None = None
    error_type: type[NDVMError] | None = None
    seconds: float = 0.0
    steps: int = 0
    evaluations: int = 0
    best_restart: int = -1
    # what calibrate() fitted (inputs, target, loss): fit.stderr differentiates the same loss
    _problem: dict[str, Any] | None = field(default=None, repr=False, compare=False)

    @functools.cached_property
    def stderr(self) -> StdErr:
        """Standard errors of the fitted parameters (``ndvm.stderr.StdErr``), from the curvature of the
        loss at the optimum; computed on first use (2P gradient evaluations) and cached."""
        from .stderr import stderr

        return stderr(self)

    @property
    def theta(self) -> np.ndarray:
        """The best parameters as a [1, P] row."""
        if self.program is None:  # a fit of an item that never compiled has no parameter order
            raise EvalError(f"this fit has no program and no parameters: {self.error}")
        return np.array([[self.params[n] for n in self.program.param_names]], dtype=np.float64)

    def predict(
        self, inputs: Mapping[str, Any] | None = None, lane_inputs: Mapping[str, Any] | None = None
    ) -> np.float64 | np.ndarray:
        """Evaluates the fitted program on (new) inputs; returns the result of the best restart
        (a scalar for a scalar-valued program, else an array)."""
        if self.program is None or self.status == "error":
            raise EvalError(f"this fit failed and cannot predict: {self.error}")
        values = self.program.evaluate(self.theta, inputs, lane_inputs)  # [1] or [1, ...]: one row
        return cast("np.float64 | np.ndarray", values[0])

    def raise_for_error(self) -> Fit:
        if self.error is not None:
            raise (self.error_type or EvalError)(self.error)
        return self


def _check_options(loss: str, optimizer: str, steps: int, restarts: int, lr: float) -> None:
    if loss not in LOSSES:
        raise ValueError(f"unknown loss {loss!r}; expected one of {', '.join(LOSSES)}")
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"unknown optimizer {optimizer!r}; expected one of {', '.join(OPTIMIZERS)}")
    if steps < 1:
        raise ValueError("steps must be >= 1")
    if restarts < 1:
        raise ValueError("restarts must be >= 1")
    if not (lr > 0):
        raise ValueError("lr must be > 0")


@functools.lru_cache(maxsize=256)
def _declared_starts(params: tuple[Param, ...], restarts: int, seed: int, jitter: float) -> np.ndarray:
    """The jittered starting points depend only on the declarations: computed once for the many
    candidates of a batch that declare the same parameters (the serial part of calibrate_many)."""
    rng = np.random.default_rng(seed)
    P = len(params)
    u0 = np.array([_unconstrained(p, np.float64(p.init)) for p in params])
    noise = rng.standard_normal((restarts, P)) * jitter
    noise[0] = 0.0
    u = u0[None, :] + noise
    theta = np.empty_like(u)
    for j, p in enumerate(params):
        theta[:, j] = _natural(p, u[:, j])
    theta = np.ascontiguousarray(theta.reshape(restarts, P))
    theta.setflags(write=False)
    return theta


def initial_theta(
    program: Program, restarts: int, seed: int, init: Any = "declared", jitter: float = 0.5
) -> np.ndarray:
    """[restarts, P] starting points in natural units.

    ``"declared"``: restart 0 starts at the declared inits, the others at the inits jittered by
    ``jitter`` standard normal steps in unconstrained coordinates (seeded). An array is used as is.
    """
    P = len(program.params)
    if isinstance(init, str):
        if init != "declared":
            raise ValueError(f"init must be 'declared' or an array [restarts, {P}], got {init!r}")
        return _declared_starts(tuple(program.params), int(restarts), int(seed), float(jitter))
    arr = np.asarray(init, dtype=np.float64)
    if arr.ndim == 1:
        arr = arr[None, :]
    if arr.shape != (restarts, P):
        raise ValueError(f"init array must have shape [restarts={restarts}, P={P}], got {list(arr.shape)}")
    return np.ascontiguousarray(arr)


def _spec(
    optimizer: str, steps: int, lr: float, tol: float | None, loss: str, target: Any, lane_target: Any
) -> dict[str, Any]:
    return {
        "optimizer": optimizer,
        "steps": int(steps),
        "lr": float(lr),
        "tol": float(tol or 0.0),
        "loss": loss,
        "target": None if target is None else np.ascontiguousarray(np.asarray(target, dtype=np.float64).ravel()),
        "lane_target": None if lane_target is None else np.ascontiguousarray(np.asarray(lane_target, dtype=np.float64)),
    }


def _fit_from(program: Program, res: dict[str, Any], seconds: float) -> Fit:
    # Runs once per program of a calibrate_many call, serially after the parallel native part:
    # plain Python on the few restarts' losses (numpy calls on tiny arrays cost more than the
    # arithmetic), so that it does not cap the multicore speedup.
    if res["error"] is not None:
        return Fit(
            program=program,
            status="error",
            error=res["error"],
            error_type=_ERROR_TYPES.get(res["error_kind"], EvalError),
            seconds=seconds,
        )
    losses = res["best_loss"]
    loss_list = losses.tolist()
    ranked = [v if math.isfinite(v) else math.inf for v in loss_list]
    best = min(range(len(ranked)), key=ranked.__getitem__)  # the first of equal losses, as argmin
    steps = int(res["steps_done"])
    fit = Fit(
        program=program,
        all_params=res["best_theta"],
        all_losses=losses,
        history=res["history"][:steps, best],
        lane_status=[_LANE_STATUS[s] for s in res["status"]],
        seconds=seconds,
        steps=steps,
        evaluations=int(res["evaluations"]),
    )
    if ranked[best] == math.inf:  # no restart produced a finite loss
        fit.history = np.zeros(0)
        fit.status = "nonfinite"
        fit.error = "no restart produced a finite loss"
        fit.error_type = EvalError
        fit.params = dict(zip(program.param_names, program.theta()[0].tolist()))
        return fit
    fit.best_restart = best
    fit.loss = loss_list[best]
    fit.params = dict(zip(program.param_names, res["best_theta"][best].tolist()))
    return fit


def _problem_of(
    inputs: Mapping[str, Any] | None, target: Any, loss: str, lane_inputs: Mapping[str, Any] | None, lane_target: Any
) -> dict[str, Any]:
    """What a calibration fitted, kept on its Fit (``Fit._problem``) for ``fit.stderr``."""
    return {"inputs": inputs, "target": target, "loss": loss, "lane_inputs": lane_inputs, "lane_target": lane_target}


def calibrate(
    prog: Program | str,
    inputs: Mapping[str, Any] | None = None,
    target: Any = None,
    loss: str = "mse",
    optimizer: str = DEFAULT_OPTIMIZER,
    steps: int = DEFAULT_STEPS,
    lr: float = DEFAULT_LR,
    restarts: int = DEFAULT_RESTARTS,
    seed: int = 0,
    lane_inputs: Mapping[str, Any] | None = None,
    init: Any = "declared",
    tol: float | None = None,
    threads: int | None = None,
    lane_target: Any = None,
    jitter: float = 0.5,
) -> Fit:
    """Fits ``prog`` to data; see the module docstring. Raises on malformed programs or options."""
    program = compile(prog) if isinstance(prog, str) else prog
    _check_options(loss, optimizer, steps, restarts, lr)
    if loss != "value" and target is None and lane_target is None:
        raise ValueError(f"loss {loss!r} needs a target (or lane_target)")
    theta0 = initial_theta(program, restarts, seed, init, jitter)
    spec = _spec(optimizer, steps, lr, tol, loss, target, lane_target)
    t0 = time.perf_counter()
    res = _native.calibrate(
        program._native,
        theta0,
        _inputs(inputs),
        _lane_inputs(lane_inputs),
        spec,
        program.limits.native(),
        int(threads or 0),
    )
    fit = _fit_from(program, res, time.perf_counter() - t0)
    fit._problem = _problem_of(inputs, target, loss, lane_inputs, lane_target)
    return fit


def calibrate_many(
    programs: Sequence[Program | str],
    inputs: Mapping[str, Any] | None = None,
    target: Any = None,
    loss: str = "mse",
    optimizer: str = DEFAULT_OPTIMIZER,
    steps: int = DEFAULT_STEPS,
    lr: float = DEFAULT_LR,
    restarts: int = DEFAULT_RESTARTS,
    seed: int = 0,
    lane_inputs: Mapping[str, Any] | None = None,
    init: Any = "declared",
    tol: float | None = None,
    threads: int | None = None,
    lane_target: Any = None,
    jitter: float = 0.5,
    limits: Limits | None = None,
) -> list[Fit]:
    """Calibrates many programs on the native thread pool (GIL released). One ``Fit`` per program, in
    order; a program that fails to compile or run gives ``fit.error`` instead of an exception.
    ``threads`` defaults to the cores available; results are identical to a serial run.
    Each program runs under its own ``Limits``: a compiled ``Program`` keeps those it was compiled
    with, source text is compiled under ``limits`` (default ``DEFAULT_LIMITS``)."""
    _check_options(loss, optimizer, steps, restarts, lr)
    if loss != "value" and target is None and lane_target is None:
        raise ValueError(f"loss {loss!r} needs a target (or lane_target)")
    fits: list[Fit | None] = [None] * len(programs)
    natives, thetas, where, compiled = [], [], [], []
    for i, p in enumerate(programs):
        if not isinstance(p, (str, Program)) and not hasattr(p, "_native"):
            fits[i] = Fit(
                program=None,
                status="error",
                error_type=EvalError,
                error=f"item {i} is a {type(p).__name__}, not a program or source text",
            )
            continue
        try:
            program = compile(p, limits=limits) if isinstance(p, str) else p
            theta0 = initial_theta(program, restarts, seed, init, jitter)
        except NDVMError as exc:
            fits[i] = Fit(program=None, status="error", error=str(exc), error_type=type(exc))
            continue
        except ValueError as exc:
            fits[i] = Fit(program=None, status="error", error=str(exc), error_type=EvalError)
            continue
        natives.append(program._native)
        thetas.append(theta0)
        where.append(i)
        compiled.append(program)
    if natives:
        spec = _spec(optimizer, steps, lr, tol, loss, target, lane_target)
        native_inputs, native_lane_inputs = _inputs(inputs), _lane_inputs(lane_inputs)
        problem = _problem_of(inputs, target, loss, lane_inputs, lane_target)  # one dict shared by the batch's fits
        # The native batch takes one Limits: programs are batched by theirs (nearly always one group).
        groups: dict[Limits, list[int]] = {}
        for k, program in enumerate(compiled):
            groups.setdefault(program.limits, []).append(k)
        for group_limits, members in groups.items():
            t0 = time.perf_counter()
            results = _native.calibrate_many(
                [natives[k] for k in members],
                [thetas[k] for k in members],
                native_inputs,
                native_lane_inputs,
                spec,
                group_limits.native(),
                int(threads or 0),
            )
            seconds = (time.perf_counter() - t0) / len(members)
            for k, res in zip(members, results):
                fit = _fit_from(compiled[k], res, seconds)
                fit._problem = problem
                fits[where[k]] = fit
    done = [item for item in fits if item is not None]
    if len(done) != len(fits):  # the native batch returns one result per program it was given
        raise RuntimeError(f"calibrate_many: {len(fits) - len(done)} of {len(fits)} programs got no result")
    return done
