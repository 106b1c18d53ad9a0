"""Validation of candidate sources: ``ndvm.compile`` is the authority; the proposers' static check
adds what compile accepts but a discovery run cannot use (a name that is neither declared nor a
task input, a declared parameter that is never used).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .base import Failure
from .language import static_problems
from .sexpr import SexprError, read_all

# ndvm error class name -> Failure.kind
_KINDS = {"ParseError": "parse", "CheckError": "check", "EvalError": "eval", "LimitError": "limit"}


class RuntimeMissing(RuntimeError):
    """The ndvm runtime (``ndvm.compile``) is not installed in this environment."""


def require_compile():
    """``ndvm.compile``, or :class:`RuntimeMissing` with a clear message."""
    try:
        import ndvm
    except ImportError as exc:
        raise RuntimeMissing(f"cannot import ndvm: {exc}") from exc
    compile_fn = getattr(ndvm, "compile", None)
    if compile_fn is None:
        raise RuntimeMissing("ndvm.compile is not available: the native runtime is not built/installed "
                             "(run `make build`)")
    return compile_fn


def runtime_available() -> bool:
    try:
        require_compile()
    except RuntimeMissing:
        return False
    return True


@dataclass
class Validation:
    ok: bool
    source: str
    canonical_hash: str | None = None
    param_names: list[str] = field(default_factory=list)
    inputs: list[str] = field(default_factory=list)
    failure: Failure | None = None


def validate_source(source: str, inputs: set[str] | None = None, proposer: str = "",
                    model: str | None = None) -> Validation:
    """Compile ``source`` with ndvm and run the static checks.

    ``inputs``: the task's input names; other free names are reported as undeclared. A failure
    carries the ndvm error kind and message (with line/column) so it can go back to an LLM.
    """
    compile_fn = require_compile()
    import ndvm

    try:
        program = compile_fn(source)
    except ndvm.NDVMError as exc:
        kind = _KINDS.get(type(exc).__name__, "check")
        return Validation(False, source, failure=Failure(kind, getattr(exc, "message", str(exc)), source,
                                                          proposer, model, getattr(exc, "line", None),
                                                          getattr(exc, "column", None)))
    try:
        forms = read_all(source)
    except SexprError as exc:
        # ndvm accepted what our reader rejects: report it as ours, it is a proposer-side limitation
        return Validation(False, source, failure=Failure("static", f"proposers reader: {exc.message}", source,
                                                          proposer, model, exc.line, exc.column))
    problems = static_problems(forms, inputs)
    if problems:
        return Validation(False, source, failure=Failure("static", "; ".join(problems), source, proposer, model))
    return Validation(True, source, canonical_hash=getattr(program, "canonical_hash", None),
                      param_names=list(getattr(program, "param_names", [])),
                      inputs=list(getattr(program, "inputs", [])))


def canonical_hash(source: str) -> str | None:
    """ndvm's canonical hash of ``source``, or None when it does not compile."""
    compile_fn = require_compile()
    import ndvm

    try:
        return compile_fn(source).canonical_hash
    except ndvm.NDVMError:
        return None


__all__ = ["Validation", "validate_source", "canonical_hash", "require_compile", "runtime_available",
           "RuntimeMissing"]


def validate_static(source: str, inputs: set[str] | None = None, proposer: str = "",
                    model: str | None = None) -> Validation:
    """The proposers' own checks only (reader, scopes, primitive arities, parameters), no runtime.

    Weaker than :func:`validate_source` (no canonical hash, no checks the runtime's compiler makes
    beyond these), for machines where the native runtime is not built.
    """
    try:
        forms = read_all(source)
    except SexprError as exc:
        return Validation(False, source, failure=Failure("parse", exc.message, source, proposer, model,
                                                          exc.line, exc.column))
    problems = static_problems(forms, inputs)
    if problems:
        return Validation(False, source, failure=Failure("static", "; ".join(problems), source, proposer, model))
    names = [str(f[1]) for f in forms if isinstance(f, list) and len(f) >= 2 and f[0] == "param"]
    return Validation(True, source, param_names=names)


__all__.append("validate_static")
