"""The pipeline commands of ``ndvm``: discover, recalibrate, serve, leaderboard, datasets, calibrate, ui.

``ndvm.cli`` calls ``register(subparsers)`` when this package is importable; ``ndvm`` itself
imports none of Prefect, MLflow or litellm. Each command imports what it needs when it runs.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from flows.dask_worker import add_worker_command
from flows.datasets_cli import register_datasets_command
from flows.environment import OFFLINE_ENV, apply_offline_env, with_offline_env

DEFAULT_FOLDER = "runs"

# Telemetry and network look-ups at start-up, off unless the user set them (flows/offline.env).
# Kept under this name for flows/dask_worker.py.
QUIET_ENV = OFFLINE_ENV


def _quiet_environment(verbose: bool = False) -> None:
    apply_offline_env()
    # Prefect's temporary server keeps its sqlite database in PREFECT_HOME and cannot create the
    # folder itself (the Makefile points it at runs/prefect, absent before the first run).
    if os.environ.get("PREFECT_HOME"):
        Path(os.environ["PREFECT_HOME"]).expanduser().mkdir(parents=True, exist_ok=True)
    if not verbose:
        # The rich display shows progress; Prefect's per-task INFO lines would scroll it away.
        os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
        os.environ.setdefault("MLFLOW_LOGGING_LEVEL", "WARNING")  # mlflow sets its logger level at import
        for name in ("mlflow", "alembic", "distributed", "LiteLLM", "httpx"):
            logging.getLogger(name).setLevel(logging.WARNING)


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
    _quiet_environment(args.verbose)
    from flows.discover import add_progress_listener, discover

    console = _console()
    display = _ProgressDisplay(console, args.minutes)
    remove = add_progress_listener(display.update)
    try:
        with display.live:
            report = discover(**_discover_kwargs(args), budget=_budget(args), run_id=args.run_id, resume=args.resume)
    except _user_errors() as exc:
        print(f"ndvm discover: {exc}", file=sys.stderr)
        return 1
    finally:
        remove()
    _print_report(console, report, args.folder)
    return 0


def _user_errors() -> tuple[type[BaseException], ...]:
    """Errors that mean a wrong option, file or run id: a message, not a traceback."""
    from datasets.errors import DatasetError
    from datasets.tasks import TaskError
    from flows.discover import DiscoveryError
    from flows.recalibrate import RecalibrationError
    from flows.runners import RunnerError
    from proposers.base import LLMFatalError
    from storage import StoreError

    return (DiscoveryError, RecalibrationError, RunnerError, StoreError, DatasetError, TaskError, LLMFatalError)


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
        print(f"ndvm log: {exc}", file=sys.stderr)
        return 1
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
        print(f"ndvm promote: {exc}", file=sys.stderr)
        return 1
    print(f"{decision.reason}\nload it with mlflow.pyfunc.load_model('{decision.uri}')")
    return 0


# ---------------------------------------------------------------------------- recalibrate
def cmd_recalibrate(args: argparse.Namespace) -> int:
    _quiet_environment(getattr(args, "verbose", False))
    from rich.table import Table

    from flows.recalibrate import recalibrate

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
        print(f"ndvm recalibrate: {exc}", file=sys.stderr)
        return 1
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
    except _user_errors() as exc:
        print(f"ndvm serve: {exc}", file=sys.stderr)
        return 1
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
        print(f"ndvm serve: {exc}", file=sys.stderr)
        return 1
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

    if args.pareto:
        show_pareto(default_store_path(args.folder), run_id=args.run, console=_console())
        return 0
    show_leaderboard(default_store_path(args.folder), run_id=args.run, k=args.k, metric=args.metric, console=_console())
    return 0


def _print_report_card(console, report: dict[str, Any], folder: str) -> None:
    """The report card written at the end of the run (flows/report.py), as Markdown."""
    from rich.markdown import Markdown

    path = Path(folder) / "reports" / report["run_id"] / "report.md"
    if path.is_file():
        console.print(Markdown(path.read_text()))
        console.print(f"report card: {path} (and report.json; `ndvm report --run {report['run_id']}`)")


def cmd_report(args: argparse.Namespace) -> int:
    """``ndvm report [--run ID] [--json]``: the report card of a run (default: the latest)."""
    _quiet_environment(getattr(args, "verbose", False))
    from rich.markdown import Markdown

    from flows.report import ReportError, build_report, report_json, report_markdown, write_report
    from storage import CandidateStore, default_store_path

    try:
        with CandidateStore(default_store_path(args.folder), read_only=True) as store:
            report = build_report(store, args.run)
    except (ReportError, *_user_errors()) as exc:
        print(f"ndvm report: {exc}", file=sys.stderr)
        return 1
    write_report(report, args.folder)
    if args.json:
        print(report_json(report))
    else:
        _console().print(Markdown(report_markdown(report)))
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


def _is_registered(name: str) -> bool:
    from datasets.registry import registered

    return registered(name) is not None


def mlflow_server_command(folder: str, host: str, port: int) -> list[str]:
    db = Path(folder).resolve() / "mlflow.db"
    mlflow = shutil.which("mlflow") or str(Path(sys.executable).with_name("mlflow"))
    return [
        mlflow,
        "server",
        "--backend-store-uri",
        f"sqlite:///{db}",
        "--host",
        host,
        "--port",
        str(port),
        "--workers",
        "1",
    ]


def leaderboard_links(folder: str, host: str = "127.0.0.1", port: int = 5000) -> list[str]:
    """One line per dataset-and-task experiment of the folder's MLflow store, linking its
    leaderboard view: MLflow 3.17's UI opens on its GenAI pages unless the address says otherwise.
    Read from the store directly (the server may still be starting); empty when it cannot be read."""
    from mlflow.tracking import MlflowClient

    from storage.tracking import leaderboard_path

    db = Path(folder).resolve() / "mlflow.db"
    try:
        experiments = MlflowClient(tracking_uri=f"sqlite:///{db}").search_experiments()
    except Exception as exc:  # the links are a convenience: the UI starts without them
        print(f"ndvm ui: could not list the experiments of {db}: {exc}", file=sys.stderr)
        return []
    return [
        f"  {e.name}: http://{host}:{port}/{leaderboard_path(e.experiment_id)}"
        for e in sorted(experiments, key=lambda e: e.name)
        if e.name.startswith("ndvm-")
    ]


def cmd_ui(args: argparse.Namespace) -> int:
    _quiet_environment()
    db = Path(args.folder).resolve() / "mlflow.db"
    if not db.is_file():
        raise SystemExit(f"ndvm ui: no MLflow store at {db}; run `ndvm discover` first (or pass --folder)")
    if args.host not in ("127.0.0.1", "localhost", "::1"):
        print(
            f"ndvm ui: binding to {args.host}: anyone who can reach this machine can read the results", file=sys.stderr
        )
    command = mlflow_server_command(args.folder, args.host, args.port)
    env = with_offline_env(os.environ)
    # Its own process group: on Ctrl-C or SIGTERM (docker stop) the server and its uvicorn worker
    # are stopped together, never orphaned.
    process = subprocess.Popen(command, env=env, start_new_session=True)

    def terminate(signum, frame):  # SIGTERM -> the same clean stop as Ctrl-C
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, terminate)
    print(f"MLflow UI: http://{args.host}:{args.port}  (store {db}; Ctrl-C stops it)", flush=True)
    for line in leaderboard_links(args.folder, args.host, args.port):
        print(line, flush=True)
    try:
        return process.wait()
    except KeyboardInterrupt:
        _stop_group(process)
        return 0
    finally:
        signal.signal(signal.SIGTERM, previous)


def _stop_group(process: subprocess.Popen) -> None:
    for sig, wait in ((signal.SIGTERM, 15), (signal.SIGKILL, 5)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


# ---------------------------------------------------------------------------- registration
def register(subparsers: Any) -> None:
    """Add the pipeline commands to ``ndvm``'s argparse subparsers."""
    p = subparsers.add_parser(
        "discover",
        help="run a discovery: propose, calibrate, score, rank, log (default: "
        "enso, offline mutation proposer, 2 minutes)",
    )
    _add_discover_options(p)
    p.set_defaults(fn=cmd_discover)

    p = subparsers.add_parser("recalibrate", help="re-fit the top programs of an earlier run on new data and log them")
    p.add_argument("--from-run", metavar="RUN_ID", help="the run whose leaderboard is re-fitted (default: latest)")
    p.add_argument("--top", type=int, default=5, help="how many of its best programs (default 5)")
    p.add_argument("--run-id", help="name of the new run")
    _add_problem_options(p)
    _add_calibration_options(p)
    _add_store_options(p)
    p.set_defaults(fn=cmd_recalibrate)

    p = subparsers.add_parser("serve", help="register a scheduled discovery deployment and serve it (Prefect)")
    p.add_argument("--cron", required=True, help='cron schedule, e.g. "0 2 * * *" (02:00 every night in --timezone)')
    p.add_argument(
        "--timezone", help="IANA time zone the cron is read in, e.g. Europe/Berlin (default: this machine's zone)"
    )
    p.add_argument("--name", default="nightly", help="deployment name (default nightly)")
    _add_discover_options(p, skip=("dataset_name",))  # --name is the deployment's; a manifest names the data
    p.set_defaults(fn=cmd_serve)

    p = subparsers.add_parser("log", help="log a stored run to MLflow (e.g. after MLflow was down); safe to repeat")
    p.add_argument("--run", metavar="RUN_ID", help="the run (default: the latest)")
    p.add_argument("--top-k", type=int, help="leaderboard entries to log (default: the run's --top-k)")
    _add_store_options(p)
    p.set_defaults(fn=cmd_log)

    p = subparsers.add_parser(
        "promote",
        help="make a finished, logged run's best program the registry's champion without comparing scores "
        "(when the champion was chosen on other data or fit settings)",
    )
    p.add_argument("--run", metavar="RUN_ID", help="the run (default: the latest)")
    _add_store_options(p)
    p.set_defaults(fn=cmd_promote)

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
    p.set_defaults(fn=cmd_leaderboard)

    p = subparsers.add_parser(
        "report",
        help="the report card of a run: champion vs references on the test split, "
        "paired tests, Pareto front, formulas, standard errors",
    )
    p.add_argument("--run", metavar="RUN_ID", help="default: the latest run")
    p.add_argument("--json", action="store_true", help="print report.json instead of the Markdown card")
    p.add_argument("--folder", default=DEFAULT_FOLDER)
    p.set_defaults(fn=cmd_report)

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
    p.set_defaults(fn=cmd_calibrate)

    p = subparsers.add_parser("ui", help="start the MLflow UI on 127.0.0.1 over the run folder's store")
    p.add_argument("--folder", default=DEFAULT_FOLDER)
    p.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=int, default=5000)
    p.set_defaults(fn=cmd_ui)


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
