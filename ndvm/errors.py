"""The typed errors of NDVM. Every failure of a program surfaces as one of these, never as a crash.

The native runtime raises them with a message and, where the failing form is known, the 1-based
``line`` and ``column`` of that form in the source.
"""

from __future__ import annotations


class NDVMError(Exception):
    """Base class of every error a program can cause."""

    def __init__(self, message: str, line: int | None = None, column: int | None = None):
        self.message = message
        self.line = line if line else None
        self.column = column if column else None
        where = f" (line {self.line}, column {self.column})" if self.line else ""
        super().__init__(f"{message}{where}")


class ParseError(NDVMError):
    """The source cannot be read: unbalanced parentheses, an unreadable token, an unsupported literal."""


class CheckError(NDVMError):
    """The program is malformed: an unknown operator, a bad special form, a wrong arity known statically."""


class EvalError(NDVMError):
    """A run-time failure: a type error such as ``(car 1.0)``, a wrong arity, an index out of range,
    a shape mismatch, a missing input."""


class LimitError(NDVMError):
    """A resource limit of ``ndvm.Limits`` was reached: the step budget, the recursion depth, the
    memory budget (also for an array too large to allocate), the work budget or the wall clock.
    The message names the limit (``max_steps``, ``max_depth``, ``max_bytes``, ``max_work``,
    ``max_seconds``) and, where there is one, the operation; see docs/reliability.md, "Limits"."""


__all__ = ["NDVMError", "ParseError", "CheckError", "EvalError", "LimitError"]
