"""Typed errors of the task layer."""

from __future__ import annotations

from ..errors import DatasetError


class TaskError(DatasetError):
    """A task cannot be built or run as asked (wrong dataset kind, runtime missing, bad option)."""


class CandidateError(TaskError, ValueError):
    """A candidate program does not meet the task's contract (a missing definition, a forbidden
    input, a reserved name). The message says what the contract wants."""


class RuntimeUnavailableError(TaskError, ImportError):
    """The NDVM runtime (``ndvm.compile`` / ``ndvm.calibrate``) is not importable."""


class ReferenceFitError(TaskError):
    """A reference model could not be fitted acceptably (e.g. every ARMA fit degenerate): the
    reference is reported as failed, with this message, never scored."""
