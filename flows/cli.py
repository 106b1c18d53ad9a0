"""The pipeline commands of ``ndvm``: discover, recalibrate, serve, leaderboard, datasets, calibrate, ui.

``ndvm.cli`` calls ``register(subparsers)`` when this package is importable; ``ndvm`` itself
imports none of Prefect, MLflow or litellm. Each command imports what it needs when it runs.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from flows.dask_worker import add_worker_command
from flows.datasets_cli import register_datasets_command
from flows.environment import OFFLINE_ENV, quiet_environment
from flows.ui import cmd_ui

DEFAULT_FOLDER = "runs"

# Telemetry and network look-ups at start-up, off unless the user set them (flows/offline.env).
QUIET_ENV = OFFLINE_ENV

# ---------------------------------------------------------------------------- failures: one line each
# The exit codes of the pipeline commands (README.md, docs/reliability.md "Exit codes"):
EXIT_INPUT = 1  # a wrong option, file, column, value or run id: change the command
EXIT_USAGE = 2  # argparse's: an unknown option, a missing argument
EXIT_STORE = 3  # the candidate store is damaged, or another process holds it
EXIT_DISK = 4  # the disk is full, or a file or folder cannot be written or read
EXIT_INTERNAL = 70  # a bug: the message says so; --debug or NDVM_DEBUG=1 shows the traceback
EXIT_INTERRUPTED = 130  # Ctrl-C
DEBUG_ENV = "NDVM_DEBUG"


def _debugging(args: argparse.Namespace) -> bool:
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
    if isinstance(exc, _user_errors()) or isinstance(exc, StoreError):
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


def _report_failure(name: str, exc: BaseException, args: argparse.Namespace) -> int:
    """Print the one line for a failure a command caught itself; its exit code."""
    if _debugging(args):
        traceback.print_exception(exc)
    code, message = classify_failure(exc, getattr(args, "folder", None))
    print(f"ndvm {name}: {message}", file=sys.stderr)
    return code


def _guarded(name: str, fn: Any) -> Any:
    """``fn(args)`` with every failure one line (``classify_failure``) and its exit code; the
    traceback too with --debug or $NDVM_DEBUG."""

    def run(args: argparse.Namespace) -> int:
        try:
            return int(fn(args) or 0)
        except (KeyboardInterrupt, SystemExit):
            raise
        except Exception as exc:
            return _report_failure(name, exc, args)

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


def _quiet_tracebacks(debug: bool) -> None:
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


def preflight(command: str, args: argparse.Namespace, kwargs: dict[str, Any] | None = None) -> Any:
    """What can be known before any work, checked in well under a second and before Prefect, the
    store or MLflow start: the options (``build_config``), the data file, its columns and values
    (datasets/preflight.py), the store (locked? damaged?) and the free space under the run folder.
    Returns the run's configuration; raises the typed errors ``classify_failure`` reports."""
    from datasets.preflight import check_data_file
    from datasets.registry import definitions
    from flows.config import build_config
    from storage import CandidateStore, default_store_path
    from storage.health import check_free_space

    config = build_config(**(kwargs if kwargs is not None else _discover_kwargs(args)))
    problem = config.problem
    if problem.data and not getattr(args, "resume", None):
        check_data_file(
            problem.data,
            x=problem.x,
            y=problem.y,
            group=problem.group,
            registered=tuple(d.name for d in definitions()),
        )
    if command != "serve":
        check_free_space(config.folder)
        store = default_store_path(config.folder)
        if store.is_file():  # locked by a run, or damaged: say so now, not after the start-up
            CandidateStore(store, read_only=False).close()
    return config


_quiet_environment = quiet_environment  # (its old name here)


def _console():
    from rich.console import Console

    return Console(stderr=False)


# ---------------------------------------------------------------------------- shared options
# The options of discover and serve are generated from the run's configuration (DiscoverConfig in
# flows/config.py, through flows/options.py): help text, defaults and flags live there, once. The
# other commands take the groups of them they need.
def _options(groups: tuple[str, ...] | None = None, skip: tuple[str, ...] = ()) -> list[Any]:
    from flows.config import discover_options

    return [o for o in discover_options() if (groups is None or o.group in groups) and o.name not in skip]


def _add_problem_options(p: argparse.ArgumentParser) -> None:
    from flows.options import add_arguments

    add_arguments(p, _options(("data",), skip=("dataset_options",)))


def _add_calibration_options(p: argparse.ArgumentParser) -> None:
    from flows.options import add_arguments

    add_arguments(p, _options(("calibration",)), defaults={"seed": 0})  # one fit: a fixed seed


def _add_store_options(p: argparse.ArgumentParser) -> None:
    from flows.options import add_arguments

    add_arguments(p, _options(("store",)))


def _add_discover_options(p: argparse.ArgumentParser, skip: tuple[str, ...] = ()) -> None:
    from flows.options import add_arguments

    add_arguments(p, _options(skip=skip))
    p.set_defaults(**{name: None for name in skip})
    r = p.add_argument_group("this run")
    r.add_argument("--run-id", help="name of the new run (default run-<time>-<random>)")
    r.add_argument(
        "--resume", metavar="RUN_ID", help="continue a stopped or killed run (its configuration, a new budget)"
    )
    r.add_argument("--verbose", action="store_true", help="Prefect's and MLflow's own log lines")


def _discover_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """The flow's keywords from the command line (the budget apart: ``_budget``)."""
    from flows.options import split_keywords, values_from_args

    return split_keywords(_options(), values_from_args(args, _options()))[0]


def _budget(args: argparse.Namespace) -> dict[str, Any]:
    from flows.options import split_keywords, values_from_args

    return split_keywords(_options(), values_from_args(args, _options(("budget",))))[1]


def ui_command(folder: str, port: int = 5000) -> str:
    return f"ndvm ui --folder {folder}" + (f" --port {port}" if port != 5000 else "")


# ---------------------------------------------------------------------------- discover
class _ProgressDisplay:
    """A rich live panel: proposals, calibrations, best score, busy fractions, time left."""

    def __init__(self, console, minutes: float | None):
        from rich.live import Live

        self.console = console
        self.minutes = minutes
        self.live = Live(self._render(None), console=console, refresh_per_second=2, transient=False)

    def _render(self, p) -> Any:
        from rich.table import Table

        table = Table.grid(padding=(0, 2))
        if p is None:
            table.add_row("[bold]ndvm discover[/]", "starting (Prefect, dataset, store, MLflow) ...")
            return table
        limit = f" / {self.minutes:g} min" if self.minutes else ""
        best = "-" if p.best_score is None else f"{p.best_score:.5g} ({p.best_hash})"
        cost = "" if p.cost_usd is None else f"   cost ${p.cost_usd:.4f}"
        table.add_row("[bold]run[/]", f"{p.run_id}   {p.phase}   {p.elapsed / 60:.1f} min{limit}{cost}")
        table.add_row(
            "[bold]proposals[/]", f"{p.proposed} received: {p.new} new, {p.duplicates} duplicates, {p.invalid} invalid"
        )
        reused = f" ({p.reused} reused from earlier runs)" if getattr(p, "reused", 0) else ""
        table.add_row("[bold]calibrations[/]", f"{p.calibrated} ok, {p.failed} failed, {p.queued} queued{reused}")
        table.add_row(f"[bold]best {p.metric}[/]", best)
        table.add_row(
            "[bold]busy[/]", f"proposal {100 * p.proposal_busy:.0f}%   calibration {100 * p.calibration_busy:.0f}%"
        )
        return table

    def update(self, progress) -> None:
        self.live.update(self._render(progress))


def cmd_discover(args: argparse.Namespace) -> int:
    preflight("discover", args)  # before Prefect: a bad file or option is one line in under a second
    _quiet_environment(args.verbose)
    _quiet_tracebacks(_debugging(args))
    from flows.discover import add_progress_listener, discover

    console = _console()
    display = _ProgressDisplay(console, args.minutes)
    remove = add_progress_listener(display.update)
    try:
        with display.live:
            report = discover(**_discover_kwargs(args), budget=_budget(args), run_id=args.run_id, resume=args.resume)
    finally:  # a failure: one line from _guarded (classify_failure), with its exit code
        remove()
    _print_report(console, report, args.folder)
    return 0


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


def _user_errors() -> tuple[type[BaseException], ...]:
    """Errors that mean a wrong option, file or run id: a message, not a traceback."""
    found = []
    for module, name in _USER_ERRORS:
        cls = getattr(sys.modules.get(module), name, None)
        if isinstance(cls, type) and issubclass(cls, BaseException):
            found.append(cls)
    return tuple(found)


def _print_report(console, report: dict[str, Any], folder: str) -> None:
    from storage.leaderboard import show_leaderboard

    console.print()
    show_leaderboard(Path(report["store_path"]), run_id=report["run_id"], k=10, console=console)
    _print_report_card(console, report, folder)
    best = "-" if report["best_score"] is None else f"{report['best_score']:.5g}"
    console.print(
        f"[bold]{report['run_id']}[/] {report['status']} after {report['elapsed_seconds'] / 60:.1f} min "
        f"({report['stop_reason']}): {report['proposed']} proposed, {report['new']} new, "
        f"{report['duplicates']} duplicates, {report['invalid']} invalid, {report['calibrated']} calibrated, "
        f"{report['failed']} failed, {report['pending']} pending; best validation {report['metric']} {best}"
    )
    console.print(_library_line(report))
    console.print(
        f"busy fractions: proposal {100 * report['proposal_busy']:.0f}% "
        f"({report['proposal_requests']} requests), calibration {100 * report['calibration_busy']:.0f}% "
        f"({report['calibration_batches']} batches, {report['runner']})"
    )
    if report.get("cost_usd") is not None:
        tokens = report.get("tokens")
        used = "" if not tokens else f", {tokens[0]} prompt + {tokens[1]} completion tokens"
        earlier = report.get("earlier_cost_usd") or 0.0
        before = f"; ${earlier:.4f} of it before this resume" if earlier else ""
        console.print(f"LLM cost of the run: ${report['cost_usd']:.4f}{used}{before}")
    from flows.feedback import llm_summary_line

    llm_line = llm_summary_line(report.get("llm"))  # tokens, cached tokens, cost per new (flows/feedback.py)
    if llm_line:
        console.print(llm_line)
    console.print(
        f"store: {report['store_path']}   MLflow: {report['tracking_uri']} "
        f"({report['logged_entries']} leaderboard entries logged as nested runs)"
    )
    faults = {
        "crashed (killed their worker, then again alone)": report.get("crashed", 0),
        "timed out (--candidate-seconds)": report.get("timeout", 0),
        "retried alone after their batch failed": report.get("retried_alone", 0),
        "worker processes replaced": report.get("workers_replaced", 0),
        "cancelled at the hard deadline (pending)": report.get("cancelled_at_deadline", 0),
        "proposals not stored (store errors, see the log)": report.get("store_errors", 0),
    }
    if any(faults.values()):
        console.print("faults survived: " + ", ".join(f"{n} {what}" for what, n in faults.items() if n))
    if report.get("mlflow_error"):
        console.print(
            f"[yellow]MLflow logging incomplete[/] ({report['mlflow_error'][:200]}); the results are in "
            f"the store. Log them later:  ndvm log --run {report['run_id']} --folder {folder}"
        )
    if report.get("champion"):
        console.print(f"model registry: {report['champion']}")
    page = "http://127.0.0.1:5000/"
    if report.get("mlflow_experiment_id"):  # the experiment's leaderboard view, not MLflow's GenAI start page
        from storage.tracking import leaderboard_path

        page += leaderboard_path(report["mlflow_experiment_id"])
    console.print(f"browse the results:  [bold]{ui_command(folder)}[/]   (then open {page})")
    if report["pending"]:
        console.print(f"continue this run:  ndvm discover --resume {report['run_id']} --folder {folder}")


def _library_line(report: dict[str, Any]) -> str:
    """What the run took from earlier runs on the same data, and its seed (storage/library.py)."""
    seeds = len(report.get("library_seeds") or [])
    return (
        f"library: reused {report.get('reused', 0)} evaluations from earlier runs, started from {seeds} of "
        f"their best programs (dataset fingerprint {report.get('dataset_fingerprint')}); seed {report.get('seed')}"
    )


# ---------------------------------------------------------------------------- log
def cmd_log(args: argparse.Namespace) -> int:
    """Log a stored run's results to MLflow (after MLflow was down during the run); idempotent."""
    _quiet_environment(getattr(args, "verbose", False))
    from flows.mlflow_log import LogRunError, log_stored_run

    try:
        done = log_stored_run(args.run, folder=args.folder, tracking_uri=args.tracking_uri, top_k=args.top_k)
    except (LogRunError, *_user_errors()) as exc:
        return _report_failure("log", exc, args)
    print(
        f"{done['run_id']}: MLflow run {done['mlflow_run_id']} at {done['tracking_uri']}: {done['entries']} "
        f"leaderboard entries logged ({done['newly_logged']} new this time)"
    )
    return 0


def cmd_promote(args: argparse.Namespace) -> int:
    """Make a run's best program the registry's champion by hand (no comparison of scores)."""
    _quiet_environment(getattr(args, "verbose", False))
    from flows.mlflow_log import LogRunError, promote_stored_run

    try:
        decision = promote_stored_run(args.run, folder=args.folder, tracking_uri=args.tracking_uri)
    except (LogRunError, *_user_errors()) as exc:
        return _report_failure("promote", exc, args)
    print(f"{decision.reason}\nload it with mlflow.pyfunc.load_model('{decision.uri}')")
    return 0


# ---------------------------------------------------------------------------- recalibrate
def cmd_recalibrate(args: argparse.Namespace) -> int:
    _quiet_environment(getattr(args, "verbose", False))
    from rich.table import Table

    from flows.recalibrate import recalibrate

    if args.data and not _is_registered(args.data):
        _check_file(args)  # before the store and MLflow are opened
    try:
        report = recalibrate(
            args.from_run,
            args.task,
            data=args.data,
            x=args.x,
            y=args.y,
            group=args.group,
            task_kind=args.task_kind,
            train_fraction=args.train_fraction,
            validation_fraction=args.validation_fraction,
            split=args.split,
            name=args.dataset_name,
            top=args.top,
            steps=args.steps,
            restarts=args.restarts,
            optimizer=args.optimizer,
            lr=args.lr,
            seed=args.seed,
            folder=args.folder,
            tracking_uri=args.tracking_uri,
            run_id=args.run_id,
        )
    except _user_errors() as exc:
        return _report_failure("recalibrate", exc, args)
    console = _console()
    table = Table(
        title=f"{report['from_run']} re-fitted on {report['dataset']} -> run {report['run_id']}", title_justify="left"
    )
    old_key = next(k for k in report["rows"][0] if k.startswith("old_") and k != "old_rank") if report["rows"] else ""
    for column in ("old rank", "hash", old_key.replace("_", " ", 1), f"new {report['metric']}", "status"):
        table.add_column(column)
    for row in report["rows"]:
        new = "-" if row["new_score"] is None else f"{row['new_score']:.5g}"
        status = row["status"] if row["status"] == "ok" else f"{row['status']}: {(row['error'] or '')[:60]}"
        table.add_row(str(row["old_rank"]), row["hash"], f"{row[old_key]:.5g}", new, status)
    console.print(table)
    console.print(
        f"logged {report['logged_entries']} nested runs under MLflow run {report['mlflow_run_id']}; "
        f"browse: [bold]{ui_command(args.folder)}[/]"
    )
    return 0


# ---------------------------------------------------------------------------- serve
def cmd_serve(args: argparse.Namespace) -> int:
    # A served process runs unattended: keep Prefect's lines (run started, finished, failed).
    _quiet_environment(verbose=True)
    os.environ.setdefault("MLFLOW_LOGGING_LEVEL", "WARNING")
    from flows.discover import build_config, discover

    try:
        kwargs = _discover_kwargs(args)  # dataset options are checked here
        build_config(**kwargs)  # fail now, not at 2 am, on a bad option
        preflight("serve", args, kwargs)  # ... or a bad file
    except _user_errors() as exc:
        return _report_failure("serve", exc, args)
    if args.resume:
        raise SystemExit("ndvm serve: --resume does not apply to a schedule (each scheduled run is a new run)")
    parameters = {**kwargs, "folder": str(Path(args.folder).resolve()), "budget": _budget(args)}
    parameters = {k: v for k, v in parameters.items() if v is not None}
    from flows.schedule import UnknownTimezoneError, cron_schedule, describe, local_timezone

    timezone = args.timezone
    if timezone is None:
        local = local_timezone()
        timezone = local.name
        if local.note:
            print(f"ndvm serve: {local.note}", file=sys.stderr)
    try:
        schedule = cron_schedule(args.cron, timezone)
        when = describe(args.cron, timezone)
    except UnknownTimezoneError as exc:
        return _report_failure("serve", exc, args)
    if not os.environ.get("PREFECT_API_URL"):
        print(
            "ndvm serve: PREFECT_API_URL is not set, so the schedule lives in a temporary Prefect server that "
            "never fires cron runs. Start `prefect server start --host 127.0.0.1` and "
            "`export PREFECT_API_URL=http://127.0.0.1:4200/api` first.",
            file=sys.stderr,
        )
    print(
        f"serving deployment ndvm-discover/{args.name}: {when}; a run first continues a killed run of this "
        "deployment (Ctrl-C or SIGTERM stops serving)"
    )
    discover.serve(
        name=args.name,
        schedule=schedule,
        parameters=parameters,
        tags=["ndvm"],
        description="Scheduled NDVM discovery run (ndvm serve)",
        limit=1,
    )
    return 0


# ---------------------------------------------------------------------------- small commands
def cmd_leaderboard(args: argparse.Namespace) -> int:
    from storage import default_store_path
    from storage.leaderboard import show_leaderboard, show_pareto

    # a store held by a run is read from its snapshot (storage.open_for_reading); the failures that
    # remain (no store, no run, a held store without a snapshot) are one line (_guarded)
    if args.pareto:
        show_pareto(default_store_path(args.folder), run_id=args.run, console=_console())
        return 0
    show_leaderboard(default_store_path(args.folder), run_id=args.run, k=args.k, metric=args.metric, console=_console())
    return 0


def _mention_snapshot(path: Path) -> None:
    """The copy a run keeps for readers (storage.snapshot_path) may hold what a damaged store lost."""
    from storage import snapshot_path
    from storage.health import check_store

    snap = snapshot_path(path)
    if snap.is_file() and check_store(snap).ok:
        age = (time.time() - snap.stat().st_mtime) / 60
        print(
            f"also: {snap} is a readable copy a run made {age:.0f} min ago (it may hold rows the damaged store "
            f"lost); to use it instead, move the damaged file away, then: cp {snap} {path}"
        )


def cmd_store(args: argparse.Namespace) -> int:
    """``ndvm store check`` (read every row of every table) / ``ndvm store repair`` (keep every
    readable row in a new file; the damaged one stays beside it): storage/health.py."""
    from storage import default_store_path
    from storage.health import check_store, repair_store

    path = default_store_path(args.folder)
    if args.action == "check":
        health = check_store(path)
        print("\n".join(health.lines()))
        if not health.ok:
            print(
                f"repair: ndvm store repair --folder {args.folder}  (keeps every readable row; the damaged file stays)"
            )
            _mention_snapshot(path)
        return 0 if health.ok else EXIT_STORE
    report = repair_store(path)
    print("\n".join(report.lines()))
    return 0


def _print_report_card(console, report: dict[str, Any], folder: str) -> None:
    """The report card written at the end of the run (flows/report.py), as Markdown."""
    from rich.markdown import Markdown

    path = Path(folder) / "reports" / report["run_id"] / "report.md"
    if path.is_file():
        console.print(Markdown(path.read_text()))
        console.print(f"report card: {path} (and report.json; `ndvm report --run {report['run_id']}`)")


def cmd_report(args: argparse.Namespace) -> int:
    """``ndvm report [--run ID] [--json] [--rebuild]``: the report card of a run (default: the
    latest). A finished run's card is read from ``reports/<run>/`` where it was written; a running
    run gets its progress so far (from the snapshot the run keeps, storage.open_for_reading)."""
    _quiet_environment(getattr(args, "verbose", False))
    from rich.markdown import Markdown

    from flows.report import ReportError, build_report, progress_markdown, report_json, report_markdown, write_report
    from storage import default_store_path, open_for_reading

    console = _console()
    try:
        store, note = open_for_reading(default_store_path(args.folder))
        with store:
            run_id = args.run or store.latest_run()
            if run_id is None:
                raise ReportError("the store has no runs yet")
            status = store.run_status(run_id).status
            if note:
                print(f"ndvm report: {note}", file=sys.stderr)
            if status == "running":
                if args.json:
                    raise ReportError(f"run {run_id} is still running: report.json is written when it finishes")
                console.print(Markdown(progress_markdown(store, run_id)))
                return 0
            written = Path(args.folder) / "reports" / run_id / ("report.json" if args.json else "report.md")
            if written.is_file() and not args.rebuild:
                text = written.read_text()
                if args.json:
                    print(text)
                else:
                    console.print(Markdown(text))
                    console.print(f"[dim]({written}; --rebuild computes it again)[/]")
                return 0
            report = build_report(store, run_id)
    except (ReportError, *_user_errors()) as exc:
        return _report_failure("report", exc, args)
    write_report(report, args.folder)
    if args.json:
        print(report_json(report))
    else:
        console.print(Markdown(report_markdown(report)))
    return 0


def cmd_calibrate(args: argparse.Namespace) -> int:
    """Fit one program file to a dataset column: a curve program of one input (bound to the x
    column), or a forecast candidate (init/predict/update) on a time series."""
    import numpy as np

    import ndvm
    from flows.calibration import BatchItem, CalibrationOptions, calibrate_batch
    from flows.problem import ProblemSpec, load_problem

    path = Path(args.file)
    if not path.is_file():
        raise SystemExit(f"ndvm calibrate: no such file: {args.file}")
    source = path.read_text()
    registered = _is_registered(args.data)
    if not registered:
        _check_file(args)  # a bad file, column or value: one line now
    problem = ProblemSpec(
        dataset=args.data if registered else "enso",
        data=None if registered else args.data,
        x=args.x,
        y=args.y,
        group=args.group,
        task_kind=args.task_kind,
        train_fraction=getattr(args, "train_fraction", None),
        validation_fraction=getattr(args, "validation_fraction", None),
    )
    dataset, task = load_problem(problem)
    if args.x and len(args.x) == 1 and args.x[0] != dataset.x or args.y and args.y != dataset.y:
        raise SystemExit(
            f"ndvm calibrate: {args.data} has x={dataset.x}, y={dataset.y}; pass other columns with a "
            "file (--data FILE --x COL --y COL)"
        )
    wrapped = task.program_source(source)
    program = ndvm.compile(wrapped)
    try:
        task.check_program(program)
    except ValueError as exc:  # the tasks' CandidateError
        raise SystemExit(f"ndvm calibrate: {exc}") from None
    options = CalibrationOptions(
        optimizer=args.optimizer, steps=args.steps, lr=args.lr, restarts=args.restarts, seed=args.seed
    )
    started = time.perf_counter()
    [result] = calibrate_batch(task, [BatchItem(program.canonical_hash, source, wrapped)], options)
    seconds = time.perf_counter() - started
    console = _console()
    console.print(f"{path}: {task.name} ({dataset.describe()})")
    if result.status != "ok":
        console.print(f"[red]fit failed[/]: {result.error}")
        return 1
    width = max(len(k) for k in result.parameters) if result.parameters else 0
    for name, value in result.parameters.items():
        console.print(f"  {name:<{width}} = {value:.6g}")
    console.print(
        f"  training loss {result.train_metrics.get('loss', np.nan):.6g}  ({options.optimizer}, "
        f"{options.steps} steps x {options.restarts} restarts, {seconds:.2f} s)"
    )
    shown = {k: v for k, v in result.heldout_metrics.items() if "lead" not in k or k.endswith(("lead1", "lead12"))}
    console.print("  validation: " + ", ".join(f"{k} {v:.5g}" for k, v in shown.items()))
    return 0


def _check_file(args: argparse.Namespace) -> None:
    """``--data FILE`` with its ``--x``/``--y``/``--group`` checked before any work (datasets/preflight.py)."""
    from datasets.preflight import check_data_file
    from datasets.registry import definitions

    check_data_file(args.data, x=args.x, y=args.y, group=args.group, registered=tuple(d.name for d in definitions()))


def _is_registered(name: str) -> bool:
    from datasets.registry import registered

    return registered(name) is not None


# ---------------------------------------------------------------------------- registration
def _set_command(p: argparse.ArgumentParser, name: str, fn: Any) -> None:
    """``fn`` as the command of ``p``, every failure one line (``_guarded``), and ``--debug``."""
    p.add_argument(
        "--debug", action="store_true", help=f"show the traceback of a failure (also: {DEBUG_ENV}=1 in the environment)"
    )
    p.set_defaults(fn=_guarded(name, fn))


def register(subparsers: Any) -> None:
    """Add the pipeline commands to ``ndvm``'s argparse subparsers."""
    p = subparsers.add_parser(
        "discover",
        help="run a discovery: propose, calibrate, score, rank, log (default: "
        "enso, offline mutation proposer, 2 minutes)",
    )
    _add_discover_options(p)
    _set_command(p, "discover", cmd_discover)

    p = subparsers.add_parser("recalibrate", help="re-fit the top programs of an earlier run on new data and log them")
    p.add_argument("--from-run", metavar="RUN_ID", help="the run whose leaderboard is re-fitted (default: latest)")
    p.add_argument("--top", type=int, default=5, help="how many of its best programs (default 5)")
    p.add_argument("--run-id", help="name of the new run")
    _add_problem_options(p)
    _add_calibration_options(p)
    _add_store_options(p)
    _set_command(p, "recalibrate", cmd_recalibrate)

    p = subparsers.add_parser("serve", help="register a scheduled discovery deployment and serve it (Prefect)")
    p.add_argument("--cron", required=True, help='cron schedule, e.g. "0 2 * * *" (02:00 every night in --timezone)')
    p.add_argument(
        "--timezone", help="IANA time zone the cron is read in, e.g. Europe/Berlin (default: this machine's zone)"
    )
    p.add_argument("--name", default="nightly", help="deployment name (default nightly)")
    _add_discover_options(p, skip=("dataset_name",))  # --name is the deployment's; a manifest names the data
    _set_command(p, "serve", cmd_serve)

    p = subparsers.add_parser("log", help="log a stored run to MLflow (e.g. after MLflow was down); safe to repeat")
    p.add_argument("--run", metavar="RUN_ID", help="the run (default: the latest)")
    p.add_argument("--top-k", type=int, help="leaderboard entries to log (default: the run's --top-k)")
    _add_store_options(p)
    _set_command(p, "log", cmd_log)

    p = subparsers.add_parser(
        "promote",
        help="make a finished, logged run's best program the registry's champion without comparing scores "
        "(when the champion was chosen on other data or fit settings)",
    )
    p.add_argument("--run", metavar="RUN_ID", help="the run (default: the latest)")
    _add_store_options(p)
    _set_command(p, "promote", cmd_promote)

    p = subparsers.add_parser("leaderboard", help="the best candidates of a run (default: the latest)")
    p.add_argument("--run", metavar="RUN_ID")
    p.add_argument("-k", type=int, default=10, help="how many (default 10)")
    p.add_argument("--metric", help="rank by another stored metric, e.g. heldout.mean_acc or train.loss")
    p.add_argument("--folder", default=DEFAULT_FOLDER)
    p.add_argument(
        "--pareto",
        action="store_true",
        help="the Pareto front of complexity vs validation loss, with the run's champion marked",
    )
    _set_command(p, "leaderboard", cmd_leaderboard)

    p = subparsers.add_parser(
        "report",
        help="the report card of a run: champion vs references on the test split, "
        "paired tests, Pareto front, formulas, standard errors",
    )
    p.add_argument("--run", metavar="RUN_ID", help="default: the latest run")
    p.add_argument("--json", action="store_true", help="print report.json instead of the Markdown card")
    p.add_argument(
        "--rebuild",
        action="store_true",
        help="compute the card again instead of reading reports/<run>/ (written at the end)",
    )
    p.add_argument("--folder", default=DEFAULT_FOLDER)
    _set_command(p, "report", cmd_report)

    p = subparsers.add_parser(
        "store",
        help="check the candidate store for damage, or repair it (keep every readable row in a new file)",
    )
    p.add_argument("action", choices=["check", "repair"])
    p.add_argument("--folder", default=DEFAULT_FOLDER)
    _set_command(p, "store", cmd_store)

    register_datasets_command(subparsers)  # ndvm datasets [show NAME | fetch NAME] (flows/datasets_cli.py)
    add_worker_command(subparsers)  # ndvm worker --scheduler ADDRESS (flows/dask_worker.py)

    p = subparsers.add_parser("calibrate", help="fit one program file to a dataset and print the fit")
    p.add_argument("file")
    p.add_argument("--data", required=True, help="a registered dataset name or a CSV/Parquet file")
    p.add_argument(
        "--x", action="append", metavar="COL", help="input column (repeat for several: a table, the regression task)"
    )
    p.add_argument("--y", help="target column")
    p.add_argument("--group", help="group column (one fit per group)")
    p.add_argument("--task-kind", choices=["curve", "forecast", "regression"])
    _add_calibration_options(p)
    _set_command(p, "calibrate", cmd_calibrate)

    p = subparsers.add_parser("ui", help="start the MLflow UI on 127.0.0.1 over the run folder's store")
    p.add_argument("--folder", default=DEFAULT_FOLDER)
    p.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=int, default=5000)
    _set_command(p, "ui", cmd_ui)


def main(argv: list[str] | None = None) -> int:
    """``python -m flows.cli ...``: the pipeline commands alone (``ndvm`` is the usual entry point)."""
    parser = argparse.ArgumentParser(prog="ndvm")
    register(parser.add_subparsers(dest="command", metavar="COMMAND"))
    args = parser.parse_args(argv)
    if not getattr(args, "fn", None):
        parser.print_help()
        return 2
    return int(args.fn(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
