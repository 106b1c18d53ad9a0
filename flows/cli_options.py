"""The options the pipeline commands share, and reading them back from the parsed arguments.

The options of discover and serve are generated from the run's configuration (DiscoverConfig in
flows/config.py, through flows/options.py): help text, defaults and flags live there, once. The
other commands take the groups of them they need."""

from __future__ import annotations

import argparse
from typing import Any

DEFAULT_FOLDER = "runs"


def _options(groups: tuple[str, ...] | None = None, skip: tuple[str, ...] = ()) -> list[Any]:
    from flows.config import discover_options

    return [o for o in discover_options() if (groups is None or o.group in groups) and o.name not in skip]


def add_problem_options(p: argparse.ArgumentParser) -> None:
    from flows.options import add_arguments

    add_arguments(p, _options(("data",), skip=("dataset_options",)))


def add_calibration_options(p: argparse.ArgumentParser) -> None:
    from flows.options import add_arguments

    add_arguments(p, _options(("calibration",)), defaults={"seed": 0})  # one fit: a fixed seed


def add_store_options(p: argparse.ArgumentParser) -> None:
    from flows.options import add_arguments

    add_arguments(p, _options(("store",)))


def add_discover_options(p: argparse.ArgumentParser, skip: tuple[str, ...] = ()) -> None:
    from flows.options import add_arguments

    add_arguments(p, _options(skip=skip))
    p.set_defaults(**{name: None for name in skip})
    r = p.add_argument_group("this run")
    r.add_argument("--run-id", help="name of the new run (default run-<time>-<random>)")
    r.add_argument(
        "--resume", metavar="RUN_ID", help="continue a stopped or killed run (its configuration, a new budget)"
    )
    r.add_argument("--verbose", action="store_true", help="Prefect's and MLflow's own log lines")


def discover_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """The flow's keywords from the command line (the budget apart: ``budget_of``)."""
    from flows.options import split_keywords, values_from_args

    return split_keywords(_options(), values_from_args(args, _options()))[0]


def budget_of(args: argparse.Namespace) -> dict[str, Any]:
    """The run's budget (minutes, candidates, ...) from the command line."""
    from flows.options import split_keywords, values_from_args

    return split_keywords(_options(), values_from_args(args, _options(("budget",))))[1]
