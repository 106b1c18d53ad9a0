"""NDVM: a native differentiable virtual machine for batched calibration of model programs.

    import ndvm
    prog = ndvm.compile("(param a 1.0) (param b 0.0) (+ (* a x) b)")
    prog.evaluate([[2.0, 1.0]], inputs={"x": [0.0, 1.0, 2.0]})      # -> [[1., 3., 5.]]
    fit = ndvm.calibrate(prog, {"x": x}, target=y)                   # fused native L-BFGS, per-lane stopping
    ndvm.read("(+ (* a x) b)")          # -> [[Symbol('+'), [Symbol('*'), ...], Symbol('b')]]

``ndvm`` alone is a complete library: it imports none of the pipeline (Prefect, MLflow, litellm).
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as _version
from typing import Any

from . import language
from .calibrate import Fit, calibrate, calibrate_groups, calibrate_many, calibrate_shared
from .errors import CheckError, EvalError, LimitError, NDVMError, ParseError
from .language import read
from .program import DEFAULT_LIMITS, Limits, Param, Program, compile
from .stderr import StdErr, stderr
from .values import Pair, Procedure, Symbol, to_scheme

try:
    __version__ = _version("ndvm-discovery")
except PackageNotFoundError:  # running from a source tree without installation
    __version__ = "0.0.0+unknown"


def build_info() -> dict[str, Any]:
    """Facts about the native build: compiler, flags, SIMD level (compile time), the instruction set its
    elementwise kernels run with (``isa``) and those this CPU supports (``isas``), threads."""
    from . import _native

    return dict(_native.build_info())


__all__ = [
    "compile",
    "Program",
    "Param",
    "Limits",
    "DEFAULT_LIMITS",
    "calibrate",
    "calibrate_many",
    "calibrate_groups",
    "calibrate_shared",
    "Fit",
    "stderr",
    "StdErr",
    "NDVMError",
    "ParseError",
    "CheckError",
    "EvalError",
    "LimitError",
    "Symbol",
    "Pair",
    "Procedure",
    "to_scheme",
    "read",
    "language",
    "build_info",
    "__version__",
]
