"""``ndvm datasets`` (list, show NAME, fetch NAME) and the dataset options of ``ndvm discover``.

Kept apart from flows/cli.py, which registers these: ``register_datasets_command(subparsers)``
adds the command, ``add_dataset_option_args(parser)`` adds ``--option KEY=VALUE`` (repeatable)
and ``--refresh`` to a command, ``dataset_options(args)`` turns them into the typed options of
the chosen dataset (an unknown name is an error listing the valid ones).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any


# ---------------------------------------------------------------------------- discover options
def add_dataset_option_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("dataset options (registered datasets; `ndvm datasets show NAME` lists them)")
    g.add_argument(
        "--option",
        action="append",
        metavar="KEY=VALUE",
        default=[],
        help="an option of the --task dataset, e.g. --option batches=1,2 --option test_cells=b3* (repeatable)",
    )
    g.add_argument("--refresh", action="store_true", help="download the dataset's files again (refresh=true)")


def dataset_options(args: argparse.Namespace) -> dict[str, Any] | None:
    """The typed options of ``--task`` from ``--option``/``--refresh`` (None when none were given)."""
    pairs = list(getattr(args, "option", None) or [])
    if getattr(args, "refresh", False):
        pairs.append("refresh=true")
    if not pairs:
        return None
    import datasets
    from datasets import options
    from datasets.errors import DatasetError

    if getattr(args, "data", None):
        raise DatasetError("--option and --refresh apply to registered datasets (--task NAME), not to --data files")
    return options.parse(datasets.definition(args.task), pairs)


# ---------------------------------------------------------------------------- ndvm datasets
def register_datasets_command(subparsers: Any) -> None:
    p = subparsers.add_parser("datasets", help="list the registered datasets; `show NAME`, `fetch NAME`")
    sub = p.add_subparsers(dest="datasets_command", metavar="[show NAME | fetch NAME]")
    show = sub.add_parser("show", help="a dataset's options, splits, sizes, source and licence")
    show.add_argument("name")
    fetch = sub.add_parser("fetch", help="download a dataset's published files into the cache and convert them")
    fetch.add_argument(
        "name", help="nasa-pcoe, severson (or their datasets battery-nasa, battery-severson), enso-nino34"
    )
    fetch.add_argument("--refresh", action="store_true", help="download again even when cached")
    fetch.add_argument("--mirror", metavar="URL", help="fetch the original file names from this folder instead")
    fetch.add_argument("--cache-dir", metavar="DIR", help="cache folder (default $NDVM_CACHE_DIR or ~/.cache/ndvm)")
    fetch.add_argument(
        "--keep-all-cells",
        action="store_true",
        help="severson: keep the cells the authors' code removes and the batch-2 continuations apart",
    )
    p.set_defaults(fn=cmd_datasets)


def cmd_datasets(args: argparse.Namespace) -> int:
    from datasets.errors import DatasetError

    try:
        if args.datasets_command == "show":
            return _show(args.name)
        if args.datasets_command == "fetch":
            return _fetch(args)
        return _list()
    except DatasetError as exc:
        print(f"ndvm datasets: {exc}", file=sys.stderr)
        return 1


def _console():
    from rich.console import Console

    return Console()


def _list() -> int:
    from rich.table import Table

    import datasets

    table = Table(
        title="datasets: ndvm discover --task NAME (or --data FILE --x COL --y COL)",
        title_justify="left",
        box=None,
        pad_edge=False,
        show_edge=False,
    )
    table.add_column("name", no_wrap=True, style="bold")
    table.add_column("task", no_wrap=True)
    table.add_column("what", overflow="fold")
    for row in datasets.list_datasets():
        flags = " [synthetic]" if row["synthetic"] else (" [download]" if row["download"] else "")
        table.add_row(row["name"], row["task"], row["title"] + flags)
    console = _console()
    console.print(table)
    console.print("more: ndvm datasets show NAME    download: ndvm datasets fetch NAME")
    return 0


def _show(name: str) -> int:
    import datasets
    from datasets import fetching, options

    d = datasets.definition(name)
    console = _console()
    console.print(f"[bold]{d.name}[/]: {d.title}")
    console.print(f"kind {d.kind}, task {d.default_task}" + (", SYNTHETIC (not measured)" if d.synthetic else ""))
    console.print("[bold]columns[/]")
    for c in d.columns:
        console.print(f"  {c.name} [{c.unit}]: {c.description}")
    console.print("[bold]options[/] (--option KEY=VALUE)")
    for opt in options.options_of(d).values():
        console.print(f"  {opt.name} = {opt.default!r}")
    if d.notes:
        console.print(f"[bold]notes[/] {d.notes}")
    console.print(f"[bold]source[/] {d.source}")
    console.print(f"[bold]licence[/] {d.licence}")
    console.print(f"[bold]citation[/] {d.citation}")
    status = fetching.download_status(d.name)
    if status is not None:
        src = status.source
        console.print(
            f"[bold]download[/] {src.approx_download} from {src.homepage}; cached: "
            + (
                f"{status.files} of {status.expected} files, {status.nbytes / 1e6:,.1f} MB"
                if status.files
                else "nothing yet"
            )
            + f" (`ndvm datasets fetch {src.name}`)"
        )
        if not status.converted:
            console.print("[bold]splits, sizes[/] after the download")
            return 0
    elif d.needs_download or d.name == "battery":
        console.print("[bold]splits, sizes[/] shown once the data are available (downloaded or a path= given)")
        return 0
    ds = datasets.load(d.name)
    counts = ds.frame.group_by("split").len().sort("split").rows()
    groups = f", {len(ds.groups)} {ds.group} groups" if ds.group else ""
    console.print(f"[bold]size[/] {ds.frame.height:,} rows{groups}")
    console.print("[bold]splits[/] " + ", ".join(f"{split} {n:,}" for split, n in counts))
    return 0


def _fetch(args: argparse.Namespace) -> int:
    from datasets import battery_sources, fetching

    src = fetching.battery_source_of(args.name) or battery_sources.SOURCES.get(args.name)
    if src is not None:
        print(f"fetching {src.title} ({src.approx_download}) into the cache")
    fetched = fetching.fetch_dataset(
        args.name,
        cache_dir=args.cache_dir,
        refresh=args.refresh,
        mirror=args.mirror,
        authors_cleaning=not args.keep_all_cells,
    )
    for line in fetched.lines:
        print(line)
    return 0


__all__ = ["add_dataset_option_args", "cmd_datasets", "dataset_options", "register_datasets_command"]
