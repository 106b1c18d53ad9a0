"""The actions of the pipeline commands of ``ndvm`` (one ``cmd_<name>(args) -> exit code`` each);
their parsers are in flows/cli.py. Each imports what it needs when it runs, so that ``ndvm``
starts without Prefect, MLflow or litellm and a bad option fails in well under a second."""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

from flows.cli_display import ProgressDisplay, print_run_summary, run_exit_code, stdout_console, ui_command
from flows.cli_failures import EXIT_STORE, debugging, quiet_tracebacks, report_failure, user_errors
from flows.cli_options import budget_of, discover_kwargs
from flows.environment import quiet_environment


# ---------------------------------------------------------------------------- discover
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

    config = build_config(**(kwargs if kwargs is not None else discover_kwargs(args)))
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


def cmd_discover(args: argparse.Namespace) -> int:
    preflight("discover", args)  # before Prefect: a bad file or option is one line in under a second
    quiet_environment(args.verbose)
    quiet_tracebacks(debugging(args))
    from flows.discover import add_progress_listener, discover

    console = stdout_console()
    display = ProgressDisplay(console, args.minutes)
    remove = add_progress_listener(display.update)
    try:
        with display.live:
            report = discover(**discover_kwargs(args), budget=budget_of(args), run_id=args.run_id, resume=args.resume)
    finally:  # a failure: one line from guarded (classify_failure), with its exit code
        remove()
    print_run_summary(console, report, args.folder)
    return run_exit_code(report)


# Errors that mean a wrong option, file or run id: a message, not a traceback. (module, class):
# ---------------------------------------------------------------------------- log
def cmd_log(args: argparse.Namespace) -> int:
    """Log a stored run's results to MLflow (after MLflow was down during the run); idempotent."""
    quiet_environment(getattr(args, "verbose", False))
    from flows.mlflow_log import LogRunError, log_stored_run

    try:
        done = log_stored_run(args.run, folder=args.folder, tracking_uri=args.tracking_uri, top_k=args.top_k)
    except (LogRunError, *user_errors()) as exc:
        return report_failure("log", exc, args)
    print(
        f"{done['run_id']}: MLflow run {done['mlflow_run_id']} at {done['tracking_uri']}: {done['entries']} "
        f"leaderboard entries logged ({done['newly_logged']} new this time)"
    )
    return 0


def cmd_promote(args: argparse.Namespace) -> int:
    """Make a run's best program the registry's champion by hand (no comparison of scores)."""
    quiet_environment(getattr(args, "verbose", False))
    from flows.mlflow_log import LogRunError, promote_stored_run

    try:
        decision = promote_stored_run(args.run, folder=args.folder, tracking_uri=args.tracking_uri)
    except (LogRunError, *user_errors()) as exc:
        return report_failure("promote", exc, args)
    print(f"{decision.reason}\nload it with mlflow.pyfunc.load_model('{decision.uri}')")
    return 0


# ---------------------------------------------------------------------------- recalibrate
def cmd_recalibrate(args: argparse.Namespace) -> int:
    quiet_environment(getattr(args, "verbose", False))
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
            edge_fraction=args.edge_fraction,
            split=args.split,
            name=args.dataset_name,
            covariates=args.covariates,
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
    except user_errors() as exc:
        return report_failure("recalibrate", exc, args)
    console = stdout_console()
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
    quiet_environment(verbose=True)
    os.environ.setdefault("MLFLOW_LOGGING_LEVEL", "WARNING")
    from flows.discover import build_config, discover

    try:
        kwargs = discover_kwargs(args)  # dataset options are checked here
        build_config(**kwargs)  # fail now, not at 2 am, on a bad option
        preflight("serve", args, kwargs)  # ... or a bad file
    except user_errors() as exc:
        return report_failure("serve", exc, args)
    if args.resume:
        raise SystemExit("ndvm serve: --resume does not apply to a schedule (each scheduled run is a new run)")
    parameters = {**kwargs, "folder": str(Path(args.folder).resolve()), "budget": budget_of(args)}
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
        return report_failure("serve", exc, args)
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
    # remain (no store, no run, a held store without a snapshot) are one line (guarded)
    if args.pareto:
        show_pareto(default_store_path(args.folder), run_id=args.run, console=stdout_console())
        return 0
    show_leaderboard(
        default_store_path(args.folder), run_id=args.run, k=args.k, metric=args.metric, console=stdout_console()
    )
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


def cmd_report(args: argparse.Namespace) -> int:
    """``ndvm report [--run ID] [--json] [--rebuild]``: the report card of a run (default: the
    latest). A finished run's card is read from ``reports/<run>/`` where it was written; a running
    run gets its progress so far (from the snapshot the run keeps, storage.open_for_reading)."""
    quiet_environment(getattr(args, "verbose", False))
    from rich.markdown import Markdown

    from flows.report import ReportError, build_report, rescore_missing_test_split
    from flows.report_render import progress_markdown, report_json, report_markdown, write_report
    from storage import default_store_path, open_for_reading

    console = stdout_console()
    path = default_store_path(args.folder)
    try:
        store, note = open_for_reading(path)
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
        if args.rebuild and not note:  # the run's end failed to score the test split: score it now
            scored = rescore_missing_test_split(args.folder, run_id)
            if scored is not None:
                print(
                    f"ndvm report: {run_id}: {scored} entries and references scored on the test split", file=sys.stderr
                )
        store, _ = open_for_reading(path)
        with store:
            report = build_report(store, run_id)
    except (ReportError, *user_errors()) as exc:
        return report_failure("report", exc, args)
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
        edge_fraction=getattr(args, "edge_fraction", None),
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
    console = stdout_console()
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
