"""The ``ndvm bench`` command, registered with the ``ndvm`` command line through the
``ndvm.commands`` entry point (pyproject.toml): ndvm/cli.py imports no benchmark code."""

from __future__ import annotations

import argparse


def cmd_bench(args: argparse.Namespace) -> int:
    from ndvm_bench.runner import main

    argv: list[str] = []
    for suite in args.suite or []:
        argv += ["--suite", suite]
    if args.json:
        argv += ["--json", args.json]
    if args.quick:
        argv.append("--quick")
    if args.data_dir:
        argv += ["--data-dir", args.data_dir]
    if args.markdown:
        argv += ["--markdown", args.markdown]
    return int(main(argv) or 0)


def register(sub) -> None:
    """Adds ``bench`` to the ``ndvm`` subcommands (``sub``: argparse's subparsers)."""
    p = sub.add_parser("bench", help="run the benchmark suites (tables, --json PATH)")
    p.add_argument("--suite", action="append", help="a suite to run (repeatable); default: all")
    p.add_argument("--json", help="write the results as JSON")
    p.add_argument("--quick", action="store_true", help="small repetitions, for a smoke run")
    p.add_argument("--data-dir", help="the shared data folder (co-search corpus, ENSO series)")
    p.add_argument("--markdown", help="also write the tables as Markdown")
    p.set_defaults(fn=cmd_bench)
