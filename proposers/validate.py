"""Validation of candidate sources: ``ndvm.compile`` is the authority; the proposers' static check
adds what compile accepts but a discovery run cannot use (a name that is neither declared nor a
task input, a declared parameter that is never used).
"""

from __future__ import annotations

from collections.abc import Callable
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
        raise RuntimeMissing(
            "ndvm.compile is not available: the native runtime is not built/installed (run `make build`)"
        )
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


def _wrap(
    source: str, program_source: Callable[[str], str] | None, proposer: str, model: str | None
) -> tuple[str | None, Failure | None]:
    """The text to compile: the candidate itself, or what the task's wrapper makes of it."""
    if program_source is None:
        return source, None
    try:
        return program_source(source), None
    except ValueError as exc:  # the task's contract check (datasets' CandidateError is a ValueError)
        return None, Failure("contract", str(exc), source, proposer, model)


def validate_source(
    source: str,
    inputs: set[str] | None = None,
    proposer: str = "",
    model: str | None = None,
    program_source: Callable[[str], str] | None = None,
) -> Validation:
    """Compile ``source`` with ndvm and run the static checks.

    ``inputs``: the task's input names; other free names are reported as undeclared.
    ``program_source``: the task's wrapper when it compiles more than the candidate (the forecast
    task appends its driver); its ValueError becomes a ``contract`` failure, the wrapped text is
    what ndvm compiles (and hashes), the static checks look at the candidate alone.
    A failure carries the error kind and message (with line/column) so it can go back to an LLM.
    """
    compile_fn = require_compile()
    import ndvm

    text, failure = _wrap(source, program_source, proposer, model)
    if failure is not None:
        return Validation(False, source, failure=failure)
    try:
        program = compile_fn(text)
    except ndvm.NDVMError as exc:
        kind = _KINDS.get(type(exc).__name__, "check")
        return Validation(
            False,
            source,
            failure=Failure(
                kind,
                getattr(exc, "message", str(exc)),
                source,
                proposer,
                model,
                getattr(exc, "line", None),
                getattr(exc, "column", None),
            ),
        )
    try:
        forms = read_all(source)
    except SexprError as exc:
        # ndvm accepted what our reader rejects: report it as ours, it is a proposer-side limitation
        return Validation(
            False,
            source,
            failure=Failure(
                "static", f"proposers reader: {exc.message}", source, proposer, model, exc.line, exc.column
            ),
        )
    problems = static_problems(forms, inputs, require_expression=program_source is None)
    if problems:
        return Validation(False, source, failure=Failure("static", "; ".join(problems), source, proposer, model))
    return Validation(
        True,
        source,
        canonical_hash=getattr(program, "canonical_hash", None),
        param_names=list(program.param_names),
        inputs=list(program.inputs),
    )


def canonical_hash(source: str) -> str | None:
    """ndvm's canonical hash of ``source``, or None when it does not compile."""
    compile_fn = require_compile()
    import ndvm

    try:
        return compile_fn(source).canonical_hash
    except ndvm.NDVMError:
        return None


def validate_static(
    source: str,
    inputs: set[str] | None = None,
    proposer: str = "",
    model: str | None = None,
    program_source: Callable[[str], str] | None = None,
) -> Validation:
    """The proposers' own checks only (the runtime's reader, scopes, primitive arities, parameters),
    without compiling.

    Weaker than :func:`validate_source` (no canonical hash, no checks the runtime's compiler makes
    beyond these). The reader and the tables are the runtime's (``ndvm.language``), so the
    proposers need the native extension built, as every part of the pipeline does.
    """
    try:
        forms = read_all(source)
    except SexprError as exc:
        return Validation(
            False, source, failure=Failure("parse", exc.message, source, proposer, model, exc.line, exc.column)
        )
    _, failure = _wrap(source, program_source, proposer, model)
    if failure is not None:
        return Validation(False, source, failure=failure)
    problems = static_problems(forms, inputs, require_expression=program_source is None)
    if problems:
        return Validation(False, source, failure=Failure("static", "; ".join(problems), source, proposer, model))
    names = [str(f[1]) for f in forms if isinstance(f, list) and len(f) >= 2 and f[0] == "param"]
    return Validation(True, source, param_names=names)


__all__ = [
    "Validation",
    "validate_source",
    "validate_static",
    "canonical_hash",
    "require_compile",
    "runtime_available",
    "RuntimeMissing",
]
