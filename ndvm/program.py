"""``ndvm.compile`` and the ``Program`` it returns: the Python face of a compiled program."""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

try:
    from . import _native
except ImportError as exc:  # a source tree without the compiled extension
    raise ImportError(
        "ndvm's native extension (ndvm._native) is not built: run `make build` (or `pip install -e .`) first"
    ) from exc
from .errors import EvalError


@dataclass(frozen=True)
class Param:
    """A declared parameter: ``(param NAME INIT [CONSTRAINT] [shared])``.

    ``constraint`` is ``None`` (free), ``"positive"`` or ``("between", lo, hi)``. ``shared``: one
    value for every group of a grouped fit (``ndvm.calibrate_shared``); other fits ignore it.
    """

    name: str
    init: float
    constraint: None | str | tuple[str, float, float] = None
    shared: bool = False


# The runtime's own defaults (native/src/program.h), read once: Limits below restates none of them.
_NATIVE_DEFAULTS = _native.Limits()


@dataclass(frozen=True)
class Limits:
    """Resource limits of one evaluation (one ``run``, ``evaluate`` or ``value_and_grad`` call, or one
    step of a calibration, all lanes together); exceeding any raises ``LimitError`` naming the limit.

    The defaults are the runtime's (native/src/program.h): they stop an infinite loop, a runaway
    recursion or a runaway computation within a few seconds and stay far above any realistic model
    (docs/reliability.md, "Limits"). The first three fields may still be given by position; the
    others are keyword-only.
    """

    max_steps: int = _NATIVE_DEFAULTS.max_steps  # evaluation steps (about 0.3-2 s of work)
    max_depth: int = _NATIVE_DEFAULTS.max_depth  # nested evaluations; the C stack is also bounded in bytes
    max_bytes: int = _NATIVE_DEFAULTS.max_bytes  # payload + heap + tape + linear-algebra scratch of one evaluation
    # Re-execute the recorded tape when a gradient evaluation repeats with new parameters only
    # (same program, lanes, inputs): the same bits, without walking the program (README, "Replay").
    replay: bool = field(default=_NATIVE_DEFAULTS.replay, kw_only=True)
    # Run a replayed point-wise tape (elementwise over the data's points, mse or likelihood loss)
    # tile by tile over the points, forward, loss and backward together: the same bits, less memory
    # traffic (README, "Tape replay"; docs/runtime.md, "Tiled replay"). Off: the whole-vector replay.
    tiled: bool = field(default=_NATIVE_DEFAULTS.tiled, kw_only=True)
    # Element operations summed over lanes: each numeric result's elements, k per element of a
    # matrix product, n^3 for det/logdet/inv/cholesky of an n x n matrix (n^3 + n^2 m for solve), a
    # reduction's input, a list traversal's length; replayed work counts as walked work.
    max_work: int = field(default=_NATIVE_DEFAULTS.max_work, kw_only=True)
    # Wall-clock seconds per evaluation, checked cooperatively (every few thousand steps, every
    # 1,024 replayed or backward records, inside long linear algebra); None: no limit (native 0).
    max_seconds: float | None = field(default=_NATIVE_DEFAULTS.max_seconds or None, kw_only=True)

    def __post_init__(self) -> None:
        for name in ("max_steps", "max_depth", "max_bytes", "max_work"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value <= 0:
                raise ValueError(f"Limits.{name} must be a positive integer, got {value!r}")
        if self.max_depth > 2**31 - 1 or max(self.max_steps, self.max_bytes, self.max_work) > 2**64 - 1:
            raise ValueError("Limits: a limit is out of range (max_depth < 2**31, the others < 2**64)")
        for name in ("replay", "tiled"):
            if not isinstance(getattr(self, name), (bool, np.bool_)):
                raise ValueError(f"Limits.{name} must be True or False, got {getattr(self, name)!r}")
        if self.max_seconds is not None:
            ok = isinstance(self.max_seconds, (int, float, np.integer, np.floating)) and not isinstance(
                self.max_seconds, bool
            )
            if not ok or not math.isfinite(self.max_seconds) or self.max_seconds <= 0:
                raise ValueError(
                    f"Limits.max_seconds must be a positive number of seconds or None, got {self.max_seconds!r}"
                )

    def native(self) -> _native.Limits:
        """The runtime's struct with these values (native/src/program.h), as the native calls take it;
        built on first use and kept (a Limits is immutable)."""
        native = self.__dict__.get("_native")
        if native is None:
            native = _native.Limits()
            native.max_steps, native.max_depth, native.max_bytes = (
                int(self.max_steps),
                int(self.max_depth),
                int(self.max_bytes),
            )
            native.replay, native.max_work = bool(self.replay), int(self.max_work)
            native.tiled = bool(self.tiled)
            native.max_seconds = 0.0 if self.max_seconds is None else float(self.max_seconds)
            self.__dict__["_native"] = native  # a cache, not a field: equality and hashing ignore it
        return native

    def __getstate__(self) -> dict[str, Any]:
        # the native struct does not pickle; a copy rebuilds it on first use
        return {k: v for k, v in self.__dict__.items() if k != "_native"}


DEFAULT_LIMITS = Limits()


# The transforms between a parameter's natural value and the unconstrained coordinate the
# optimizers work in (softplus for positive, logistic for between); the native optimizers apply the
# same ones (native/src/optim.cc). Used by calibrate (starting points) and stderr (the Jacobian),
# on one value (a numpy scalar) or a column of values; a free parameter's value comes back as given.
Reals = np.float64 | npt.NDArray[np.float64]


def _unconstrained(p: Param, x: Reals) -> Reals:
    if p.constraint == "positive":
        x = np.maximum(x, 1e-300)
        return np.where(x > 30, x, np.log(np.expm1(np.minimum(x, 30))))
    if isinstance(p.constraint, tuple):
        lo, hi = p.constraint[1], p.constraint[2]
        t = np.clip((x - lo) / (hi - lo), 1e-12, 1 - 1e-12)
        return np.log(t / (1 - t))
    return x


def _natural(p: Param, u: Reals) -> Reals:
    if p.constraint == "positive":
        return np.where(u > 30, u, np.log1p(np.exp(np.minimum(u, 30))))
    if isinstance(p.constraint, tuple):
        lo, hi = p.constraint[1], p.constraint[2]
        return lo + (hi - lo) / (1 + np.exp(-u))
    return u


# numpy dtype kinds that convert to float64 without losing anything but precision: bool, signed and
# unsigned integers, floats. Complex (an imaginary part would be dropped), object, string, datetime
# and the rest are refused with an EvalError naming the array.
_REAL_KINDS = frozenset("biuf")


def real_array(value: Any, what: str) -> np.ndarray:
    """``value`` (number, sequence, numpy, polars or torch) as a float64 array of any shape; EvalError
    naming ``what`` (e.g. "input 'x'", "target") when it is not real numbers."""
    if type(value) is np.ndarray and value.dtype == np.float64:
        return value
    if hasattr(value, "detach"):  # torch tensor
        value = value.detach().cpu().numpy()
    elif hasattr(value, "to_numpy") and not isinstance(value, np.ndarray):  # polars / pandas
        value = value.to_numpy()
    try:
        raw = np.asarray(value)
        if raw.dtype.kind not in _REAL_KINDS:
            kind = "complex" if raw.dtype.kind == "c" else "not numeric"
            raise EvalError(
                f"{what} is {kind} (dtype {raw.dtype}): NDVM computes with real numbers only"
                + (" (pass .real or abs() explicitly)" if raw.dtype.kind == "c" else "")
            )
        return raw.astype(np.float64, copy=False)
    except (TypeError, ValueError) as exc:
        raise EvalError(f"{what} is not numeric: {exc}") from None


def as_array(value: Any, name: str) -> np.ndarray:
    """Converts an input value (number, sequence, numpy, polars or torch) to a float64 array."""
    if type(value) is np.ndarray and value.dtype == np.float64 and value.ndim <= 2 and value.flags.c_contiguous:
        return value  # already what the conversions below produce (the common case, per call)
    arr = real_array(value, f"input '{name}'")
    if arr.ndim > 2:
        raise EvalError(f"input '{name}' has {arr.ndim} dimensions; inputs are scalars, vectors or matrices")
    return np.require(arr, requirements="C")  # (np.ascontiguousarray would turn a scalar into [x])


def _inputs(inputs: Mapping[str, Any] | None) -> dict[str, np.ndarray]:
    return {str(k): as_array(v, str(k)) for k, v in (inputs or {}).items()}


def _lane_inputs(lane_inputs: Mapping[str, Any] | None) -> dict[str, np.ndarray]:
    out = {}
    for k, v in (lane_inputs or {}).items():
        arr = as_array(v, str(k)) if np.ndim(v) <= 2 else np.ascontiguousarray(real_array(v, f"lane input '{k}'"))
        if arr.ndim < 1:
            raise EvalError(f"lane input '{k}' needs a leading lane axis")
        out[str(k)] = arr
    return out


class Program:
    """A compiled program: immutable, shareable across threads, cheap to evaluate many times."""

    def __init__(self, native: _native.Program, limits: Limits = DEFAULT_LIMITS):
        self._native = native
        self.limits = limits
        shared = _native.shared_params(native)
        self.params: list[Param] = [Param(n, float(i), c, s) for (n, i, c), s in zip(native.params, shared)]
        self.param_names: list[str] = [p.name for p in self.params]
        self.inputs: list[str] = list(native.inputs)
        self._canonical: str | None = None

    @property
    def shared_names(self) -> list[str]:
        """The parameters declared ``shared`` (one value for every group of ``calibrate_shared``)."""
        return [p.name for p in self.params if p.shared]

    @property
    def linear_names(self) -> list[str]:
        """The parameters the result is affine in, found on the program's text (the result's outer
        sums and products; see ``native/src/linear.h``): calibration solves them by least squares
        (``calibrate(solve_linear=True)``) instead of searching them."""
        names = self.param_names
        return [names[j] for j in self._native.linear_params]

    # ---- description ----
    @property
    def source(self) -> str:
        return self._native.source

    @property
    def dtype(self) -> str:
        return "float32" if self._native.f32 else "float64"

    @property
    def canonical_form(self) -> str:
        """Alpha-renamed, inexact literals abstracted, commutative arguments ordered."""
        if self._canonical is None:
            self._canonical = _native.canonical_form(self.source)
        return self._canonical

    @property
    def canonical_hash(self) -> str:
        return hashlib.sha256(self.canonical_form.encode()).hexdigest()[:16]

    def __repr__(self) -> str:
        return f"<ndvm.Program params={self.param_names} inputs={self.inputs}>"

    # ---- parameters ----
    def theta(self, params: Mapping[str, float] | None = None, lanes: int = 1) -> np.ndarray:
        """A [lanes, P] array of declared initial values, overridden by ``params``."""
        row = np.array([p.init for p in self.params], dtype=np.float64)
        for name, value in (params or {}).items():
            if name not in self.param_names:
                raise EvalError(f"unknown parameter '{name}' (declared: {', '.join(self.param_names) or 'none'})")
            row[self.param_names.index(name)] = float(value)
        return np.tile(row, (lanes, 1))

    def _theta(self, theta: Any) -> np.ndarray:
        if theta is None:
            return self.theta()
        if isinstance(theta, Mapping):
            return self.theta(theta)
        if (
            type(theta) is np.ndarray
            and theta.dtype == np.float64
            and theta.ndim == 2
            and theta.shape[1] == len(self.params)
            and theta.flags.c_contiguous
        ):
            return theta  # already what the conversions below produce (a calibration loop's case)
        arr = real_array(theta, "theta")
        if arr.ndim == 1 and len(self.params) > 0 and arr.shape[0] == len(self.params):
            arr = arr[None, :]
        if arr.ndim == 1 and len(self.params) == 0:
            arr = arr.reshape(-1, 0)
        if arr.ndim != 2 or arr.shape[1] != len(self.params):
            raise EvalError(f"theta must have shape [B, {len(self.params)}], got {list(arr.shape)}")
        return np.ascontiguousarray(arr)

    # ---- evaluation ----
    def run(self, params: Mapping[str, float] | None = None, inputs: Mapping[str, Any] | None = None) -> Any:
        """Runs one lane and returns the value as a Python object (see ``ndvm.values``)."""
        row = self.theta(params)[0]
        return self._native.run(row, _inputs(inputs), self.limits.native())

    def evaluate(
        self, theta: Any = None, inputs: Mapping[str, Any] | None = None, lane_inputs: Mapping[str, Any] | None = None
    ) -> np.ndarray:
        """Evaluates B parameter vectors in one walk: ``theta`` [B, P] -> values [B] or [B, ...]."""
        th = self._theta(theta)
        return self._native.evaluate(th, _inputs(inputs), _lane_inputs(lane_inputs), self.limits.native())

    def value_and_grad(
        self, theta: Any = None, inputs: Mapping[str, Any] | None = None, lane_inputs: Mapping[str, Any] | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """For a scalar-valued program: (values [B], d value / d theta [B, P])."""
        th = self._theta(theta)
        values, _, grads, _ = self._native.value_and_grad(
            th, _inputs(inputs), _lane_inputs(lane_inputs), self.limits.native(), [], "value", None
        )
        return values, grads

    def loss_and_grad(
        self,
        theta: Any,
        inputs: Mapping[str, Any] | None = None,
        target: Any = None,
        loss: str = "mse",
        lane_inputs: Mapping[str, Any] | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Per-lane loss of the output against ``target`` and its gradient: (losses [B], grads [B, P])."""
        th = self._theta(theta)
        tgt = None if target is None else np.ascontiguousarray(real_array(target, "target").ravel())
        _, losses, grads, _ = self._native.value_and_grad(
            th, _inputs(inputs), _lane_inputs(lane_inputs), self.limits.native(), [], loss, tgt
        )
        return losses, grads


def compile(source: str, dtype: str = "float64", limits: Limits | None = None) -> Program:  # noqa: A001
    """Compiles a program. Raises ``ParseError`` or ``CheckError`` with the source position."""
    if not isinstance(source, str):
        raise TypeError(f"ndvm.compile expects source text (str), got {type(source).__name__}")
    if dtype not in ("float64", "float32"):
        raise ValueError(f"dtype must be 'float64' or 'float32', got {dtype!r}")
    limits = limits or DEFAULT_LIMITS
    # compilation runs under the evaluation's memory budget (the syntax tree of a 4 MB source
    # can take 300 MB) and the C-stack bound of the calling thread
    try:
        native = _native.compile(source, dtype == "float32", int(limits.max_bytes))
    except TypeError:  # the binding cannot encode a lone surrogate: find it and say where
        from .language import surrogate_error

        error = surrogate_error(source)
        if error is None:
            raise
        raise error from None
    return Program(native, limits)
