"""How a pipeline command of ``ndvm`` fails: one line on stderr and an exit code by the failure's
class (a wrong input, a damaged or held store, a full disk, a bug), the traceback only with
``--debug`` or $NDVM_DEBUG. The commands (flows/cli_commands.py) are wrapped in ``guarded`` when
flows/cli.py registers them."""

from __future__ import annotations

import argparse
import logging
import os
import sys
import traceback
from pathlib import Path
from typing import Any

# ---------------------------------------------------------------------------- failures: one line each
# The exit codes of the pipeline commands (README.md, docs/reliability.md "Exit codes"):
EXIT_INPUT = 1  # a wrong option, file, column, value or run id: change the command
EXIT_USAGE = 2  # argparse's: an unknown option, a missing argument
EXIT_STORE = 3  # the candidate store is damaged, or another process holds it
EXIT_DISK = 4  # the disk is full, or a file or folder cannot be written or read
EXIT_TRACKING = 5  # MLflow (tracking or its model registry) failed at the end of a run: `ndvm log` later
EXIT_INTERNAL = 70  # a bug: the message says so; --debug or NDVM_DEBUG=1 shows the traceback
EXIT_INTERRUPTED = 130  # Ctrl-C
DEBUG_ENV = "NDVM_DEBUG"


def debugging(args: argparse.Namespace) -> bool:
    return bool(getattr(args, "debug", False)) or os.environ.get(DEBUG_ENV, "") not in ("", "0")


def _first_line(exc: BaseException) -> str:
    lines = [line for line in str(exc).strip().splitlines() if line.strip()]
    return lines[0] if lines else type(exc).__name__


def classify_failure(exc: BaseException, folder: str | None = None) -> tuple[int, str]:
    """(exit code, one-line message) for an exception that ended a pipeline command: data,
    configuration, store, disk, or a bug."""
    from storage import StoreError, StoreLockedError, default_store_path
    from storage.health import DiskFullError, StoreCorruptError, is_corruption, is_disk_full, recovery_hint

    if is_disk_full(exc):
        if isinstance(exc, DiskFullError):
            return EXIT_DISK, str(exc)
        where = f" under {Path(folder).resolve()}" if folder else ""
        return EXIT_DISK, (
            f"the disk is full ({_first_line(exc)}); what was stored before is kept. Free space{where} and run "
            "the command again (a stopped run continues with --resume RUN_ID)"
        )
    if isinstance(exc, StoreLockedError):
        return EXIT_STORE, _first_line(exc)
    if isinstance(exc, StoreCorruptError):
        return EXIT_STORE, _first_line(exc)
    if is_corruption(exc):
        path = default_store_path(folder) if folder else Path("candidates.duckdb")
        return EXIT_STORE, f"the candidate store {path} is damaged ({_first_line(exc)}); {recovery_hint(path)}"
    if isinstance(exc, user_errors()) or isinstance(exc, StoreError):
        return EXIT_INPUT, str(exc)
    try:
        import polars as pl

        if isinstance(exc, pl.exceptions.PolarsError):
            return EXIT_INPUT, f"the data could not be read: {type(exc).__name__}: {_first_line(exc)}"
    except ImportError:
        pass
    if isinstance(exc, OSError):
        name = f": {exc.filename}" if getattr(exc, "filename", None) else ""
        return EXIT_DISK, f"{exc.strerror or _first_line(exc)}{name}"
    return EXIT_INTERNAL, (
        f"internal error: {type(exc).__name__}: {_first_line(exc)} (a bug; {DEBUG_ENV}=1 or --debug shows the "
        "traceback: please report it with that)"
    )


def report_failure(name: str, exc: BaseException, args: argparse.Namespace) -> int:
    """Print the one line for a failure a command caught itself; its exit code."""
    if debugging(args):
        traceback.print_exception(exc)
    code, message = classify_failure(exc, getattr(args, "folder", None))
    print(f"ndvm {name}: {message}", file=sys.stderr)
    return code


def guarded(name: str, fn: Any) -> Any:
    """``fn(args)`` with every failure one line (``classify_failure``) and its exit code; the
    traceback too with --debug or $NDVM_DEBUG."""

    def run(args: argparse.Namespace) -> int:
        try:
            return int(fn(args) or 0)
        except (KeyboardInterrupt, SystemExit):
            raise
        except Exception as exc:
            return report_failure(name, exc, args)

    run.__name__ = run.__qualname__ = f"guarded_{getattr(fn, '__name__', name)}"
    return run


class _NoTracebacks(logging.Filter):
    """Prefect's flow- and task-run loggers print the traceback of an exception the command reports
    in one line itself: keep their message, drop the traceback (--debug keeps it)."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = str(record.msg)
        if record.levelno >= logging.ERROR and message.startswith(
            ("Finished in state Failed", "Encountered exception during execution")
        ):
            return False  # the command's own line says why
        if record.exc_info:
            record.exc_info, record.exc_text = None, None
        return True


class _Drop(logging.Filter):
    """Records another line already reports: MLflow's SQLAlchemy errors (each with a traceback of
    60 lines) are raised to the run's tracking, which logs one warning and retries or gives up."""

    def filter(self, record: logging.LogRecord) -> bool:
        return False


def quiet_tracebacks(debug: bool) -> None:
    if debug:
        return
    quiet = {
        "prefect.flow_runs": _NoTracebacks,
        "prefect.task_runs": _NoTracebacks,
        "prefect.engine": _NoTracebacks,
        "mlflow.store.db.utils": _Drop,
    }
    for name, kind in quiet.items():
        logger = logging.getLogger(name)
        if not any(isinstance(f, kind) for f in logger.filters):
            logger.addFilter(kind())


# Errors that mean a wrong option, file or run id: a message, not a traceback. (module, class):
# only modules already imported are looked at (an exception of a class whose module was never
# imported cannot have been raised), so classifying a failure never imports Prefect or litellm.
_USER_ERRORS = (
    ("flows.config", "DiscoveryError"),
    ("flows.recalibrate", "RecalibrationError"),
    ("flows.runners", "RunnerError"),
    ("flows.options", "OptionError"),
    ("flows.mlflow_log", "LogRunError"),
    ("flows.report", "ReportError"),
    ("storage.store", "StoreError"),
    ("datasets.errors", "DatasetError"),
    ("datasets.tasks.errors", "TaskError"),
    ("proposers.base", "LLMFatalError"),
    ("flows.schedule", "UnknownTimezoneError"),
)


def user_errors() -> tuple[type[BaseException], ...]:
    """Errors that mean a wrong option, file or run id: a message, not a traceback."""
    found = []
    for module, name in _USER_ERRORS:
        cls = getattr(sys.modules.get(module), name, None)
        if isinstance(cls, type) and issubclass(cls, BaseException):
            found.append(cls)
    return tuple(found)
