"""Programs run through the meta-circular evaluator: the language interpreting itself on NDVM.

``compile(source)`` gives a program with the same parameters, inputs and calling conventions as
``ndvm.compile(source)``, but its evaluation runs ``ndvm/scheme/evaluator.scm`` (an evaluator
written in the NDVM language) on the user program given as quoted data. The host program that
NDVM actually runs is::

    <evaluator.scm>
    (param a 0.5)                       ; the user's declarations, so they are the host's
    (param k 1.0 positive)
    (mc-run '( <the user source> )      ; the user program as data
            (list (cons 'a a) (cons 'k k) (cons 'x x)))   ; its params and inputs, bound to the host's

The interpreted program computes with the host's own numbers, so its values and gradients are
those of the direct run: the structural work of interpretation (environment look-ups, dispatch on
special forms) never reaches the tape.

Example::

    import ndvm.metacircular as mc
    prog = mc.compile("(param a 0.5) (param b 1.0) (+ (* a x) b)")
    prog.run(inputs={"x": 2.0})                      # 2.0
    values, grads = prog.value_and_grad(theta, inputs={"x": 2.0})
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

import ndvm
from ndvm.errors import CheckError
from ndvm.program import Limits, Param, Program

__all__ = ["compile", "MetacircularProgram", "evaluator_source", "host_source", "EVALUATOR_NAMES", "EVALUATOR_PATH"]


EVALUATOR_PATH = Path(__file__).resolve().parent / "scheme" / "evaluator.scm"


@lru_cache(maxsize=1)
def evaluator_source() -> str:
    """The text of ``ndvm/scheme/evaluator.scm``."""
    return EVALUATOR_PATH.read_text(encoding="utf-8")


def _evaluator_names() -> frozenset[str]:
    # Top-level names the evaluator defines: the host's params and inputs sit beside them.
    return frozenset(re.findall(r"^\(define \(?([^\s()]+)", evaluator_source(), re.MULTILINE))


EVALUATOR_NAMES: frozenset[str] = _evaluator_names()


def _number(value: float | int) -> str:
    """A numeric literal the NDVM reader reads back to the same float64 (repr round-trips)."""
    if isinstance(value, bool):
        raise TypeError(f"expected a number, got the boolean {value!r}")
    if isinstance(value, int):
        return str(value)
    return repr(float(value))


def _declaration(param: Any) -> str:
    """The ``(param ...)`` form that declares ``param`` (an ``ndvm.Param``) again."""
    constraint = param.constraint
    if constraint is None:
        tail = ""
    elif constraint == "positive":
        tail = " positive"
    elif isinstance(constraint, tuple) and len(constraint) == 3 and constraint[0] == "between":
        tail = f" (between {_number(constraint[1])} {_number(constraint[2])})"
    else:
        raise CheckError(f"metacircular: unsupported constraint {constraint!r} of parameter {param.name}")
    shared = " shared" if getattr(param, "shared", False) else ""
    return f"(param {param.name} {_number(param.init)}{tail}{shared})"


def host_source(source: str, params: list[Any], inputs: list[str]) -> str:
    """The host program that runs ``source`` through the evaluator.

    ``params`` are the user program's ``ndvm.Param`` declarations and ``inputs`` its free input
    names; each becomes a host parameter or input bound in the interpreted global environment.
    """
    names = [p.name for p in params] + list(inputs)
    clashes = sorted(set(names) & EVALUATOR_NAMES)
    if clashes:
        raise CheckError(
            "metacircular: parameter or input names clash with the evaluator's own definitions: " + ", ".join(clashes)
        )
    declarations = "\n".join(_declaration(p) for p in params)
    bindings = " ".join(f"(cons '{name} {name})" for name in names)
    # The user text goes inside the quote verbatim; the newline before the closing parenthesis
    # keeps a final line comment from swallowing it.
    return (
        f"{evaluator_source()}\n"
        f";; the interpreted program's parameters, declared again in the host\n"
        f"{declarations}\n"
        f"(mc-run '(\n{source}\n)\n  (list {bindings}))\n"
    )


class MetacircularProgram:
    """A program evaluated through the meta-circular evaluator.

    It answers like the ``ndvm.Program`` of the same source: ``params``, ``param_names``,
    ``inputs``, ``run``, ``evaluate``, ``value_and_grad``. ``direct`` is that program (the same
    source compiled directly) and ``host`` the NDVM program that interprets it.
    """

    def __init__(self, source: str, dtype: str, direct: Program, host: Program):
        self.source = source
        self.dtype = dtype
        self.direct = direct
        self.host = host

    @property
    def params(self) -> list[Param]:
        return self.direct.params

    @property
    def param_names(self) -> list[str]:
        return self.direct.param_names

    @property
    def inputs(self) -> list[str]:
        return self.direct.inputs

    @property
    def canonical_form(self) -> str:
        return self.direct.canonical_form

    @property
    def canonical_hash(self) -> str:
        return self.direct.canonical_hash

    @property
    def host_source(self) -> str:
        return self.host.source

    def run(self, params: Mapping[str, float] | None = None, inputs: Mapping[str, Any] | None = None) -> Any:
        """One lane: the program's value as a Python value (like ``ndvm.Program.run``)."""
        return self.host.run(params, inputs)

    def evaluate(
        self, theta: Any = None, inputs: Mapping[str, Any] | None = None, lane_inputs: Mapping[str, Any] | None = None
    ) -> np.ndarray:
        """Values for a population ``theta [B, P]`` (like ``ndvm.Program.evaluate``)."""
        return self.host.evaluate(theta, inputs=inputs, lane_inputs=lane_inputs)

    def value_and_grad(
        self, theta: Any = None, inputs: Mapping[str, Any] | None = None, lane_inputs: Mapping[str, Any] | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Values ``[B]`` and gradients ``[B, P]`` through the interpreter."""
        return self.host.value_and_grad(theta, inputs=inputs, lane_inputs=lane_inputs)

    def loss_and_grad(
        self,
        theta: Any,
        inputs: Mapping[str, Any] | None = None,
        target: Any = None,
        loss: str = "mse",
        lane_inputs: Mapping[str, Any] | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Per-lane loss against ``target`` and its gradient (like ``ndvm.Program.loss_and_grad``)."""
        return self.host.loss_and_grad(theta, inputs=inputs, target=target, loss=loss, lane_inputs=lane_inputs)

    def theta(self, params: Mapping[str, float] | None = None, lanes: int = 1) -> np.ndarray:
        """A ``[lanes, P]`` array of the declared initial values, overridden by ``params``."""
        return self.direct.theta(params, lanes)

    @property
    def _native(self) -> ndvm._native.Program:
        """The host's native program: ``ndvm.calibrate`` and ``calibrate_many`` run it, so a
        calibration through the tower is the fused native loop on the interpreter."""
        return self.host._native

    @property
    def limits(self) -> Limits:
        """The host's resource limits (the interpreter takes many host steps per program step)."""
        return self.host.limits

    def __repr__(self) -> str:
        return f"MetacircularProgram(params={self.param_names}, inputs={self.inputs}, dtype={self.dtype!r})"


def compile(source: str, dtype: str = "float64", limits: Limits | None = None) -> MetacircularProgram:  # noqa: A001 (mirrors ndvm.compile)
    """Compile ``source`` to run through the meta-circular evaluator.

    The source is first compiled directly, so a malformed program raises the same
    ``ndvm.ParseError``/``ndvm.CheckError`` as ``ndvm.compile`` and its parameters and inputs are
    known; errors while interpreting it (an unbound variable, applying a non-procedure, a wrong
    arity, any primitive's error) raise ``ndvm`` errors when it is evaluated. ``limits`` (an
    ``ndvm.Limits``, default the runtime's) bound the host's evaluation.
    """
    direct = ndvm.compile(source, dtype=dtype, limits=limits)
    host = ndvm.compile(host_source(source, list(direct.params), list(direct.inputs)), dtype=dtype, limits=limits)
    if list(host.param_names) != list(direct.param_names):
        raise CheckError(
            f"metacircular: host parameters {host.param_names} differ from the program's {direct.param_names}"
        )
    if set(host.inputs) != set(direct.inputs):
        raise CheckError(
            f"metacircular: host inputs {sorted(host.inputs)} differ from the program's {sorted(direct.inputs)}"
        )
    return MetacircularProgram(source, dtype, direct, host)
