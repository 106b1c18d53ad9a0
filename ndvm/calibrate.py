"""Calibration: fit a program's parameters to data with the fused native optimizers.

Restarts are lanes: one walk of the program evaluates every restart at once, and the whole loop of
at most ``steps`` evaluations runs in C++ (L-BFGS with a strong Wolfe line search, Adam, or gradient
descent) in unconstrained coordinates (softplus for ``positive``, logistic for ``between``). Each
lane stops on its own when it converges (see ``calibrate`` for the rules) and then costs no more
work; ``Fit.lane_reason`` says why each lane stopped.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from . import _native, errors
from .errors import EvalError, NDVMError
from .program import (
    Limits,
    Param,
    Program,
    _inputs,
    _lane_inputs,
    _natural,
    _unconstrained,
    compile,
    real_array,
)

if TYPE_CHECKING:  # for the annotation only: ndvm.stderr is imported on first use of Fit.stderr
    from .stderr import StdErr

LOSSES = ("mse", "gaussian_nll", "value")
# The runtime's optimizer table (native/src/optim.h, NDVM_OPTIMIZERS), read, not restated: each
# optimizer's name, and its evaluation budget (steps) and lr when the caller gives none.
OPTIMIZERS: tuple[str, ...] = tuple(o.name for o in _native.OPTIMIZERS)
OPTIMIZER_STEPS: dict[str, int] = {o.name: o.default_steps for o in _native.OPTIMIZERS}
OPTIMIZER_LR: dict[str, float] = {o.name: o.default_lr for o in _native.OPTIMIZERS}
# calibrate's and calibrate_many's defaults, in one place (datasets/tasks/curve.py reads
# DEFAULT_RESTARTS too). The discovery pipeline fits cheaper by default: flows/calibration.py.
DEFAULT_OPTIMIZER = "lbfgs"
DEFAULT_STEPS = OPTIMIZER_STEPS[DEFAULT_OPTIMIZER]
DEFAULT_LR = OPTIMIZER_LR[DEFAULT_OPTIMIZER]
DEFAULT_RESTARTS = 32
# Stopping rules (0 turns one off); see calibrate's docstring.
DEFAULT_GTOL = 1e-10
DEFAULT_FTOL = 2.220446049250313e-09  # 1e7 machine epsilons: L-BFGS-B's default factr
DEFAULT_XTOL = 1e-10
DEFAULT_PATIENCE = 5
# The runtime's enums (native/src/optim.h, error.h), by name: a lane's status and stop reason names
# are what Fit.lane_status and Fit.lane_reason report, an error kind K is raised as ndvm.errors'
# class K + "Error".
_LANE_STATUS = {int(v): name for name, v in _native.LaneStatus.__members__.items()}
_STOP_REASON = {int(v): name for name, v in _native.StopReason.__members__.items()}
# The reasons that mean a lane converged (every one but running out of budget or non-finite).
CONVERGED_REASONS = frozenset(_STOP_REASON.values()) - {"budget", "nonfinite"}
_ERROR_TYPES = {int(v): getattr(errors, name + "Error") for name, v in _native.ErrorKind.__members__.items()}


@dataclass
class Fit:
    """The result of a calibration. ``params`` are the best restart's values in natural units."""

    program: Program | None
    params: dict[str, float] = field(default_factory=dict)
    loss: float = math.inf
    # the best restart's loss at each walk it took part in, up to its last finite one (a lane that
    # stopped early has no entries for the walks the other lanes went on with; NaN marks a walk
    # where its loss was not finite)
    history: np.ndarray = field(default_factory=lambda: np.zeros(0))
    all_params: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))
    all_losses: np.ndarray = field(default_factory=lambda: np.zeros(0))
    lane_status: list[str] = field(default_factory=list)
    # per lane: why it stopped (a name of ndvm._native.StopReason), optimizer iterations, evaluations
    lane_reason: list[str] = field(default_factory=list)
    lane_iterations: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    lane_evaluations: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    status: str = "ok"  # "ok" | "nonfinite" (no restart produced a finite loss) | "error"
    error: str | None = None
    error_type: type[NDVMError] | None = None
    seconds: float = 0.0
    steps: int = 0
    # walks of value and gradient made over the running lanes (with threads, each thread walks its
    # own chunk of lanes: the walks of all chunks); per lane: lane_evaluations
    evaluations: int = 0
    best_restart: int = -1
    # what calibrate() fitted (inputs, target, loss): fit.stderr differentiates the same loss
    _problem: dict[str, Any] | None = field(default=None, repr=False, compare=False)

    @property
    def lane_converged(self) -> list[bool]:
        """Per lane: whether it stopped by a convergence rule (not by the budget or a non-finite loss)."""
        return [reason in CONVERGED_REASONS for reason in self.lane_reason]

    @property
    def reason(self) -> str:
        """Why the best lane stopped ("budget", "gradient", "decrease", "step", "plateau", "nonfinite");
        "" for a fit without a best lane (an error, or no finite loss)."""
        return self.lane_reason[self.best_restart] if self.best_restart >= 0 else ""

    @property
    def converged(self) -> bool:
        """Whether the best lane converged (stopped by a rule before the budget ran out)."""
        return self.reason in CONVERGED_REASONS

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


@dataclass(frozen=True)
class _Options:
    """calibrate's optimizer options, checked, with the per-optimizer defaults filled in."""

    optimizer: str
    steps: int
    lr: float
    tol: float
    patience: int
    gtol: float
    ftol: float
    xtol: float
    solve_linear: bool


def _number(name: str, value: Any, *, positive: bool = False) -> float:
    """A finite float option >= 0 (> 0 when positive); ValueError naming the option otherwise."""
    bound = "> 0" if positive else ">= 0"
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise ValueError(f"{name} must be a number {bound}, got {value!r}")
    v = float(value)
    if not math.isfinite(v) or v < 0 or (positive and v == 0):
        raise ValueError(f"{name} must be a finite number {bound}, got {value!r}")
    return v


# The native side holds steps, patience, restarts and threads in C ints (native/src/optim.h): a
# larger value is refused here, naming the option, rather than by pybind11's cast error.
INT_OPTION_MAX = 2**31 - 1
# The loss history is a [steps, restarts] float64 array per program, allocated up front: at most
# 2**27 entries (1 GiB), so a huge budget is refused before the allocation rather than by it.
HISTORY_MAX_ENTRIES = 2**27
# More native threads than this is a mistake (each reserves a 256 MiB stack): refused.
MAX_THREADS = 1024


def _count(name: str, value: Any, at_most: int = INT_OPTION_MAX) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not 1 <= value <= at_most:
        raise ValueError(f"{name} must be an integer from 1 to {at_most}, got {value!r}")
    return int(value)


def _threads(value: Any) -> int:
    """The threads option: None or 0 for every core, else 1 to MAX_THREADS."""
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not 0 <= value <= MAX_THREADS:
        raise ValueError(f"threads must be None, 0 (every core) or an integer from 1 to {MAX_THREADS}, got {value!r}")
    return int(value)


def _check_options(
    loss: str,
    optimizer: str,
    steps: int | None,
    restarts: int,
    lr: float | None,
    tol: float | None = None,
    patience: int = DEFAULT_PATIENCE,
    gtol: float = DEFAULT_GTOL,
    ftol: float = DEFAULT_FTOL,
    xtol: float = DEFAULT_XTOL,
    solve_linear: bool = True,
) -> _Options:
    if not isinstance(solve_linear, (bool, np.bool_)):
        raise ValueError(f"solve_linear must be True or False, got {solve_linear!r}")
    if loss not in LOSSES:
        raise ValueError(f"unknown loss {loss!r}; expected one of {', '.join(LOSSES)}")
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"unknown optimizer {optimizer!r}; expected one of {', '.join(OPTIMIZERS)}")
    _count("restarts", restarts)
    n_steps = _count("steps", OPTIMIZER_STEPS[optimizer] if steps is None else steps)
    if n_steps * int(restarts) > HISTORY_MAX_ENTRIES:
        raise ValueError(
            f"steps={n_steps} with restarts={restarts} needs a loss history of {n_steps * int(restarts)} entries, "
            f"more than {HISTORY_MAX_ENTRIES} (1 GiB): lower steps or restarts"
        )
    return _Options(
        optimizer=optimizer,
        steps=n_steps,
        lr=_number("lr", OPTIMIZER_LR[optimizer] if lr is None else lr, positive=True),
        tol=0.0 if tol is None else _number("tol", tol),
        patience=_count("patience", patience),
        gtol=_number("gtol", gtol),
        ftol=_number("ftol", ftol),
        xtol=_number("xtol", xtol),
        solve_linear=bool(solve_linear),
    )


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
    arr = real_array(init, "init")
    if arr.ndim == 1:
        arr = arr[None, :]
    if arr.shape != (restarts, P):
        raise ValueError(f"init array must have shape [restarts={restarts}, P={P}], got {list(arr.shape)}")
    return np.ascontiguousarray(arr)


def _spec(options: _Options, loss: str, target: Any, lane_target: Any) -> dict[str, Any]:
    return {
        "optimizer": options.optimizer,
        "steps": options.steps,
        "lr": options.lr,
        "tol": options.tol,
        "patience": options.patience,
        "gtol": options.gtol,
        "ftol": options.ftol,
        "xtol": options.xtol,
        "solve_linear": options.solve_linear,
        "loss": loss,
        "target": None if target is None else np.ascontiguousarray(real_array(target, "target").ravel()),
        "lane_target": None if lane_target is None else np.ascontiguousarray(real_array(lane_target, "lane_target")),
    }


def _lane_history(column: np.ndarray) -> np.ndarray:
    """One lane's column of the native [steps, R] history, without the NaNs after its last finite
    loss (the walks that ran after the lane stopped)."""
    finite = np.flatnonzero(np.isfinite(column))
    return column[: finite[-1] + 1] if finite.size else column[:0]


def _fit_from(program: Program, res: dict[str, Any], seconds: float, problem: dict[str, Any] | None) -> Fit:
    # ``problem``: what was fitted (inputs, target, loss), kept for fit.stderr.
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
            _problem=problem,
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
        history=_lane_history(res["history"][:steps, best]),
        lane_status=[_LANE_STATUS[s] for s in res["status"]],
        lane_reason=[_STOP_REASON[s] for s in res["reason"]],
        lane_iterations=res["iterations"],
        lane_evaluations=res["lane_evaluations"],
        seconds=seconds,
        steps=steps,
        evaluations=int(res["evaluations"]),
        _problem=problem,
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
    steps: int | None = None,
    lr: float | None = None,
    restarts: int = DEFAULT_RESTARTS,
    seed: int = 0,
    lane_inputs: Mapping[str, Any] | None = None,
    init: Any = "declared",
    tol: float | None = None,
    threads: int | None = None,
    lane_target: Any = None,
    jitter: float = 0.5,
    gtol: float = DEFAULT_GTOL,
    ftol: float = DEFAULT_FTOL,
    xtol: float = DEFAULT_XTOL,
    patience: int = DEFAULT_PATIENCE,
    solve_linear: bool = True,
) -> Fit:
    """Fits ``prog`` to data and returns a ``Fit``; raises on malformed programs, and ``ValueError``
    naming the option on a bad option value.
    """
    program = compile(prog) if isinstance(prog, str) else prog
    options = _check_options(loss, optimizer, steps, restarts, lr, tol, patience, gtol, ftol, xtol, solve_linear)
    if loss != "value" and target is None and lane_target is None:
        raise ValueError(f"loss {loss!r} needs a target (or lane_target)")
    theta0 = initial_theta(program, restarts, seed, init, jitter)
    spec = _spec(options, loss, target, lane_target)
    t0 = time.perf_counter()
    res = _native.calibrate(
        program._native,
        theta0,
        _inputs(inputs),
        _lane_inputs(lane_inputs),
        spec,
        program.limits.native(),
        _threads(threads),
    )
    fit = _fit_from(program, res, time.perf_counter() - t0, _problem_of(inputs, target, loss, lane_inputs, lane_target))
    return fit


def _by_limits(programs: Sequence[Program]) -> dict[Limits, list[int]]:
    """Indices of ``programs`` by their Limits: one native batch takes one Limits, so programs are
    batched by theirs (nearly always a single batch)."""
    batches: dict[Limits, list[int]] = {}
    for k, program in enumerate(programs):
        batches.setdefault(program.limits, []).append(k)
    return batches


def _prepare(
    programs: Sequence[Program | str], limits: Limits | None, restarts: int, seed: int, init: Any, jitter: float
) -> tuple[list[Any], list[Any], list[int], list[Program], dict[int, Callable[[], Fit]]]:
    """Each item of a batch compiled (source text under ``limits``) with its starting points: the
    native programs, their starts, their positions in ``programs``, the compiled Programs, and for
    each item that is not a program or fails to compile or start, a maker of its error ``Fit``."""
    natives: list[Any] = []
    thetas: list[Any] = []
    where: list[int] = []
    compiled: list[Program] = []
    failed: dict[int, Callable[[], Fit]] = {}
    for i, p in enumerate(programs):
        try:
            if not isinstance(p, (str, Program)) and not hasattr(p, "_native"):
                raise EvalError(f"item {i} is a {type(p).__name__}, not a program or source text")
            program = compile(p, limits=limits) if isinstance(p, str) else p
            theta0 = initial_theta(program, restarts, seed, init, jitter)
        except (NDVMError, ValueError) as exc:  # a bad start (ValueError) is the program's error too
            error, kind = str(exc), type(exc) if isinstance(exc, NDVMError) else EvalError
            failed[i] = functools.partial(Fit, program=None, status="error", error=error, error_type=kind)
            continue
        natives.append(program._native)
        thetas.append(theta0)
        where.append(i)
        compiled.append(program)
    return natives, thetas, where, compiled, failed


def calibrate_many(
    programs: Sequence[Program | str],
    inputs: Mapping[str, Any] | None = None,
    target: Any = None,
    loss: str = "mse",
    optimizer: str = DEFAULT_OPTIMIZER,
    steps: int | None = None,
    lr: float | None = None,
    restarts: int = DEFAULT_RESTARTS,
    seed: int = 0,
    lane_inputs: Mapping[str, Any] | None = None,
    init: Any = "declared",
    tol: float | None = None,
    threads: int | None = None,
    lane_target: Any = None,
    jitter: float = 0.5,
    gtol: float = DEFAULT_GTOL,
    ftol: float = DEFAULT_FTOL,
    xtol: float = DEFAULT_XTOL,
    patience: int = DEFAULT_PATIENCE,
    limits: Limits | None = None,
    solve_linear: bool = True,
) -> list[Fit]:
    """Calibrates many programs on the native thread pool (GIL released). One ``Fit`` per program, in
    order; a program that fails to compile or run gives ``fit.error`` instead of an exception.
    ``threads`` defaults to the cores available; results are identical to a serial run.
    Each program runs under its own ``Limits``: a compiled ``Program`` keeps those it was compiled
    with, source text is compiled under ``limits`` (default ``DEFAULT_LIMITS``).
    """
    options = _check_options(loss, optimizer, steps, restarts, lr, tol, patience, gtol, ftol, xtol, solve_linear)
    if loss != "value" and target is None and lane_target is None:
        raise ValueError(f"loss {loss!r} needs a target (or lane_target)")
    fits: list[Fit | None] = [None] * len(programs)
    natives, thetas, where, compiled, failed = _prepare(programs, limits, restarts, seed, init, jitter)
    for i, failure in failed.items():
        fits[i] = failure()
    if natives:
        spec = _spec(options, loss, target, lane_target)
        native_inputs, native_lane_inputs = _inputs(inputs), _lane_inputs(lane_inputs)
        problem = _problem_of(inputs, target, loss, lane_inputs, lane_target)  # one dict shared by the batch's fits
        for group_limits, members in _by_limits(compiled).items():
            t0 = time.perf_counter()
            results = _native.calibrate_many(
                [natives[k] for k in members],
                [thetas[k] for k in members],
                native_inputs,
                native_lane_inputs,
                spec,
                group_limits.native(),
                _threads(threads),
            )
            seconds = (time.perf_counter() - t0) / len(members)
            for k, res in zip(members, results):
                fits[where[k]] = _fit_from(compiled[k], res, seconds, problem)
    done = [item for item in fits if item is not None]
    if len(done) != len(fits):  # the native batch returns one result per program it was given
        raise RuntimeError(f"calibrate_many: {len(fits) - len(done)} of {len(fits)} programs got no result")
    return done


def _native_groups(
    groups: Sequence[tuple[Mapping[str, Any], Any]], loss: str, caller: str
) -> tuple[list[tuple[Any, Any]], list[dict[str, Any]]]:
    """``groups`` checked (each an ``(inputs, target)`` pair, a target wherever ``loss`` needs one)
    and converted once for the native side: the native groups and each group's problem record."""
    groups = list(groups)
    for g, item in enumerate(groups):
        if not isinstance(item, tuple) or len(item) != 2:
            raise ValueError(f"{caller}: group {g} must be an (inputs, target) pair, got {type(item).__name__}")
        if loss != "value" and item[1] is None:
            raise ValueError(f"{caller}: loss {loss!r} needs a target, and group {g} has none")
    native_groups = [
        (_inputs(inputs), None if target is None else np.ascontiguousarray(real_array(target, "target").ravel()))
        for inputs, target in groups
    ]
    return native_groups, [_problem_of(inputs, target, loss, None, None) for inputs, target in groups]


def calibrate_groups(
    programs: Sequence[Program | str],
    groups: Sequence[tuple[Mapping[str, Any], Any]],
    loss: str = "mse",
    optimizer: str = DEFAULT_OPTIMIZER,
    steps: int | None = None,
    lr: float | None = None,
    restarts: int = DEFAULT_RESTARTS,
    seed: int = 0,
    init: Any = "declared",
    tol: float | None = None,
    threads: int | None = None,
    jitter: float = 0.5,
    gtol: float = DEFAULT_GTOL,
    ftol: float = DEFAULT_FTOL,
    xtol: float = DEFAULT_XTOL,
    patience: int = DEFAULT_PATIENCE,
    limits: Limits | None = None,
    solve_linear: bool = True,
) -> list[list[Fit]]:
    """Calibrates every program on every group's own data, in one native call: ``groups`` is a
    sequence of ``(inputs, target)`` pairs (for example one per battery cell, of different lengths).
    Returns one list per program with one ``Fit`` per group, each identical to
    ``calibrate_many([program], inputs, target, ...)`` on that group alone (same starting points:
    they depend on the program and ``seed`` only). Programs x groups are the jobs of one native
    batch, so the thread pool spreads them all (costliest first), rather than one batch per group
    with a wait after each. A program that fails to compile gives an error ``Fit`` for every group;
    one that fails on a group's data gives that group's ``Fit`` the error. The options are
    ``calibrate_many``'s (below), without lane inputs or lane targets.
    """
    options = _check_options(loss, optimizer, steps, restarts, lr, tol, patience, gtol, ftol, xtol, solve_linear)
    native_groups, problems = _native_groups(groups, loss, "calibrate_groups")
    out: list[list[Fit] | None] = [None] * len(programs)
    natives, thetas, where, compiled, failed = _prepare(programs, limits, restarts, seed, init, jitter)
    for i, failure in failed.items():
        out[i] = [failure() for _ in native_groups]
    if compiled and native_groups:
        spec = _spec(options, loss, None, None)
        for group_limits, members in _by_limits(compiled).items():
            t0 = time.perf_counter()
            results = _native.calibrate_groups(
                [natives[k] for k in members],
                [thetas[k] for k in members],
                native_groups,
                spec,
                group_limits.native(),
                _threads(threads),
            )
            seconds = (time.perf_counter() - t0) / (len(members) * len(native_groups))
            for k, per_group in zip(members, results):
                out[where[k]] = [
                    _fit_from(compiled[k], res, seconds, problem) for res, problem in zip(per_group, problems)
                ]
    return [fits if fits is not None else [] for fits in out]


def _shared_starts(program: Program, theta0: np.ndarray, values: Mapping[str, float] | None) -> np.ndarray:
    """``theta0`` with the shared parameters' columns set to ``values`` (every name of
    ``program.shared_names``, nothing else); ``theta0`` itself when ``values`` is None."""
    if values is None:
        return theta0
    names = program.shared_names
    unknown = sorted(set(values) - set(names))
    missing = [n for n in names if n not in values]
    if unknown or missing:
        raise ValueError(
            f"calibrate_shared: shared_values must give exactly the shared parameters {names}"
            + (f"; unknown {unknown}" if unknown else "")
            + (f"; missing {missing}" if missing else "")
        )
    out = np.array(theta0, dtype=np.float64, copy=True)
    for name, value in values.items():
        v = float(value)
        if not math.isfinite(v):
            raise ValueError(f"calibrate_shared: shared value {name}={value!r} is not finite")
        out[:, program.param_names.index(name)] = v
    return np.ascontiguousarray(out)


def _group_fit(program: Program, res: dict[str, Any], member: int, seconds: float, problem: dict[str, Any]) -> Fit:
    """Group ``member``'s Fit of a joint result: its parameters at the best joint lane (the same lane
    for every group, so the shared values agree), ``loss`` its own loss there; the lanes' losses,
    history and stop reasons are the joint fit's."""
    if res["error"] is not None:
        return _fit_from(program, res, seconds, problem)
    own = dict(res)
    own["best_theta"] = np.ascontiguousarray(res["group_theta"][member])
    fit = _fit_from(program, own, seconds, problem)
    if fit.best_restart >= 0:
        fit.loss = float(res["group_loss"][fit.best_restart, member])
    return fit


def calibrate_shared(
    programs: Sequence[Program | str],
    groups: Sequence[tuple[Mapping[str, Any], Any]],
    loss: str = "mse",
    optimizer: str = DEFAULT_OPTIMIZER,
    steps: int | None = None,
    lr: float | None = None,
    restarts: int = DEFAULT_RESTARTS,
    seed: int = 0,
    init: Any = "declared",
    tol: float | None = None,
    threads: int | None = None,
    jitter: float = 0.5,
    gtol: float = DEFAULT_GTOL,
    ftol: float = DEFAULT_FTOL,
    xtol: float = DEFAULT_XTOL,
    patience: int = DEFAULT_PATIENCE,
    limits: Limits | None = None,
    solve_linear: bool = True,
    shared_values: Sequence[Mapping[str, float] | None] | None = None,
) -> list[list[Fit]]:
    """Grouped fits where parameters declared ``shared`` take one value for every group: for each
    program, one native fit whose parameter vector is the shared parameters followed by one block of
    the other parameters per group, minimizing the sum over groups of each group's loss on its own
    data (exact gradients: a shared parameter's is the sum of the groups'). Takes and returns what
    ``calibrate_groups`` does: one list per program, one ``Fit`` per group, whose ``params`` hold the
    shared values and the group's own; ``loss`` is the group's own loss, while ``all_losses``,
    ``history`` and the lane stop reasons are the joint fit's (the best lane is the joint best, the
    same for every group). A program without shared parameters is fitted by ``calibrate_groups``
    (its groups are independent). ``shared_values`` (one entry per program, or None): fixed values
    of that program's shared parameters, for example from a training fit; each group then fits only
    its own parameters (a held-out group on its early rows), as separate jobs on the pool.
    """
    options = _check_options(loss, optimizer, steps, restarts, lr, tol, patience, gtol, ftol, xtol, solve_linear)
    groups = list(groups)
    native_groups, problems = _native_groups(groups, loss, "calibrate_shared")
    if shared_values is not None and len(shared_values) != len(programs):
        raise ValueError(
            f"calibrate_shared: shared_values has {len(shared_values)} entries for {len(programs)} programs"
        )
    common = dict(
        loss=loss, optimizer=optimizer, steps=steps, lr=lr, restarts=restarts, seed=seed, init=init, tol=tol,
        threads=threads, jitter=jitter, gtol=gtol, ftol=ftol, xtol=xtol, patience=patience, limits=limits,
        solve_linear=solve_linear,
    )  # fmt: skip
    out: list[list[Fit] | None] = [None] * len(programs)
    natives, thetas, where, compiled, failed = _prepare(programs, limits, restarts, seed, init, jitter)
    for i, failure in failed.items():
        out[i] = [failure() for _ in groups]
    plain = [k for k, program in enumerate(compiled) if not program.shared_names]
    if plain:  # no shared parameter: independent per-group fits
        for k, fits in zip(plain, calibrate_groups([compiled[k] for k in plain], groups, **common)):
            out[where[k]] = fits
    joint = [k for k, program in enumerate(compiled) if program.shared_names]
    if joint and groups:
        # a joint fit searches every parameter (the native joint loop does not project)
        spec = _spec(dataclasses.replace(options, solve_linear=False), loss, None, None)
        everyone = list(range(len(groups)))
        for group_limits, members in _by_limits([compiled[k] for k in joint]).items():
            batch = [joint[m] for m in members]
            starts, jobs = [], []
            for n, k in enumerate(batch):
                values = shared_values[where[k]] if shared_values is not None else None
                starts.append(_shared_starts(compiled[k], thetas[k], values))
                if values is None:
                    jobs.append((n, everyone, True))
                else:  # fixed shared values: the groups are independent, one job each
                    jobs.extend((n, [g], False) for g in everyone)
            t0 = time.perf_counter()
            results = _native.calibrate_shared(
                [natives[k] for k in batch], starts, native_groups, jobs, spec, group_limits.native(), int(threads or 0)
            )
            seconds = (time.perf_counter() - t0) / (len(batch) * len(groups))
            by_job = iter(results)
            for k in batch:
                program = compiled[k]
                if shared_values is not None and shared_values[where[k]] is not None:
                    out[where[k]] = [_group_fit(program, next(by_job), 0, seconds, problems[g]) for g in everyone]
                else:
                    res = next(by_job)
                    out[where[k]] = [_group_fit(program, res, g, seconds, problems[g]) for g in everyone]
    return [fits if fits is not None else [] for fits in out]


_OPTIONS_DOC = """
    Options (the same for ``calibrate`` and ``calibrate_many``):

    - ``inputs``: name -> value (number or array) shared by every restart; ``lane_inputs``: name ->
      array with a leading axis of one entry per restart.
    - ``target``, ``lane_target``: what ``loss`` compares the program's value with ("mse",
      "gaussian_nll" with a parameter named sigma; "value" minimizes the program's own value).
    - ``optimizer``: "lbfgs" (limited-memory BFGS, memory 10, with a strong Wolfe line search:
      c1 = 1e-4, c2 = 0.9, first step 1, at most 20 trials), "adam" (beta 0.9, 0.999) or "gd".
    - ``steps``: the budget, in evaluations of value and gradient per lane. For L-BFGS every trial
      point of the line search counts (scipy's ``maxfun``, not ``maxiter``); for Adam and gd an
      evaluation is an iteration. Default per optimizer: ``OPTIMIZER_STEPS`` (lbfgs 1000, adam 200,
      gd 200).
    - ``lr``: Adam's and gd's learning rate; for L-BFGS the length (in unconstrained coordinates) of
      the first step, before any curvature is known (later steps are quasi-Newton steps of length
      1, capped at 2 per coordinate). Default per optimizer: ``OPTIMIZER_LR`` (0.05).
    - Stopping rules, per lane (a lane that stops costs no more evaluations; 0 turns a rule off):
      ``gtol`` (1e-10): the largest component of the gradient in unconstrained coordinates is <=
      gtol (every optimizer; L-BFGS checks its iterates, not line-search trials); with solved
      linear parameters, <= gtol * |loss| at every evaluation (the projected gradient scales with
      the square of the coefficients, so an absolute rule would stop a fit in small units early). ``ftol``
      (2.2e-9, L-BFGS-B's default factr 1e7 times machine epsilon): an L-BFGS iteration decreases
      the loss by (f_k - f_k+1) / max(|f_k|, |f_k+1|) <= ftol. Unlike L-BFGS-B, whose denominator
      also has a floor of 1, the rule is relative at every scale, so a fit whose loss is 1e-5 runs as
      far as one whose loss is 1e5. ``xtol`` (1e-10): an L-BFGS iteration moves no coordinate by more
      than xtol * (1 + max |u|). A line search that finds no decrease along a descent direction
      (after one restart from steepest descent) also stops the lane, with reason "step". Compared
      with scipy: ``minimize(method="BFGS")`` stops on an absolute gradient norm of 1e-5 only,
      ``L-BFGS-B`` on a projected gradient of 1e-5 or a relative decrease of 2.2e-9 (floored at 1).
    - ``tol``, ``patience`` (None, 5): the plateau rule, for every optimizer: a lane stops when its
      loss changes by less than tol * (1 + |loss|) on ``patience`` evaluations in a row. Off by
      default (the meaning ``tol`` always had).
    - ``restarts``, ``init``, ``seed``, ``jitter``: lanes and their starting points (``initial_theta``).
    - ``solve_linear`` (True): variable projection. The parameters the program's result is affine
      in (``Program.linear_names``: free, undeclared-shared parameters that sit in the result's
      outer sums and products, such as the coefficients and the intercept of ``a*exp(b*x) + c``)
      are not searched: at every evaluation they take their least-squares values for the lane's
      other parameters, and the optimizer moves only those (the loss it sees is the projected one;
      its gradient is exact by the envelope theorem). For "mse" and "gaussian_nll" (a sigma
      parameter is never solved); "value" and the joint fits of ``calibrate_shared`` search every
      parameter. False: every parameter is searched, as before issue 37.
    - ``threads``: native threads (``calibrate``: lanes split in chunks of at least 8; results are
      identical to one thread).

    ``Fit.lane_reason`` says why each lane stopped ("gradient", "decrease", "step", "plateau": it
    converged; "budget": the steps ran out; "nonfinite"), ``Fit.lane_converged``,
    ``Fit.lane_iterations`` and ``Fit.lane_evaluations`` are per lane, ``Fit.converged`` and
    ``Fit.reason`` are the best lane's.
"""
calibrate.__doc__ = (calibrate.__doc__ or "") + _OPTIONS_DOC
calibrate_many.__doc__ = (calibrate_many.__doc__ or "") + _OPTIONS_DOC
calibrate_groups.__doc__ = (calibrate_groups.__doc__ or "") + _OPTIONS_DOC
calibrate_shared.__doc__ = (calibrate_shared.__doc__ or "") + _OPTIONS_DOC
