"""The pipeline commands of ``ndvm`` (discover, recalibrate, serve, log, promote, leaderboard,
report, store, datasets, worker, calibrate, ui): their parsers, registered on ``ndvm``'s.

``ndvm.cli`` calls ``register(subparsers)`` when this package is importable (the ``pipeline``
entry point); ``ndvm`` itself imports none of Prefect, MLflow or litellm. The actions are in
flows/cli_commands.py, the shared options in flows/cli_options.py, the one-line failures and exit
codes in flows/cli_failures.py, what is printed in flows/cli_display.py.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from datasets.tasks import TASKS  # the task kinds, one registry (also flows/config.py)
from flows.cli_commands import (
    cmd_calibrate,
    cmd_discover,
    cmd_leaderboard,
    cmd_log,
    cmd_promote,
    cmd_recalibrate,
    cmd_report,
    cmd_serve,
    cmd_store,
)
from flows.cli_failures import DEBUG_ENV, guarded
from flows.cli_options import (
    DEFAULT_FOLDER,
    add_calibration_options,
    add_discover_options,
    add_problem_options,
    add_store_options,
)
from flows.dask_worker import add_worker_command
from flows.datasets_cli import register_datasets_command
from flows.ui import cmd_ui


# ---------------------------------------------------------------------------- registration
def _set_command(p: argparse.ArgumentParser, name: str, fn: Any) -> None:
    """``fn`` as the command of ``p``, every failure one line (``guarded``), and ``--debug``."""
    p.add_argument(
        "--debug", action="store_true", help=f"show the traceback of a failure (also: {DEBUG_ENV}=1 in the environment)"
    )
    p.set_defaults(fn=guarded(name, fn))


def register(subparsers: Any) -> None:
    """Add the pipeline commands to ``ndvm``'s argparse subparsers."""
    p = subparsers.add_parser(
        "discover",
        help="run a discovery: propose, calibrate, score, rank, log (default: "
        "enso, offline mutation proposer, 2 minutes)",
    )
    add_discover_options(p)
    _set_command(p, "discover", cmd_discover)

    p = subparsers.add_parser("recalibrate", help="re-fit the top programs of an earlier run on new data and log them")
    p.add_argument("--from-run", metavar="RUN_ID", help="the run whose leaderboard is re-fitted (default: latest)")
    p.add_argument("--top", type=int, default=5, help="how many of its best programs (default 5)")
    p.add_argument("--run-id", help="name of the new run")
    add_problem_options(p)
    add_calibration_options(p)
    add_store_options(p)
    _set_command(p, "recalibrate", cmd_recalibrate)

    p = subparsers.add_parser("serve", help="register a scheduled discovery deployment and serve it (Prefect)")
    p.add_argument("--cron", required=True, help='cron schedule, e.g. "0 2 * * *" (02:00 every night in --timezone)')
    p.add_argument(
        "--timezone", help="IANA time zone the cron is read in, e.g. Europe/Berlin (default: this machine's zone)"
    )
    p.add_argument("--name", default="nightly", help="deployment name (default nightly)")
    add_discover_options(p, skip=("dataset_name",))  # --name is the deployment's; a manifest names the data
    _set_command(p, "serve", cmd_serve)

    p = subparsers.add_parser("log", help="log a stored run to MLflow (e.g. after MLflow was down); safe to repeat")
    p.add_argument("--run", metavar="RUN_ID", help="the run (default: the latest)")
    p.add_argument("--top-k", type=int, help="leaderboard entries to log (default: the run's --top-k)")
    add_store_options(p)
    _set_command(p, "log", cmd_log)

    p = subparsers.add_parser(
        "promote",
        help="make a finished, logged run's best program the registry's champion without comparing scores "
        "(when the champion was chosen on other data or fit settings)",
    )
    p.add_argument("--run", metavar="RUN_ID", help="the run (default: the latest)")
    add_store_options(p)
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
    p.add_argument("--task-kind", choices=list(TASKS))
    add_calibration_options(p)
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
