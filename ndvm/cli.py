"""The ``ndvm`` command line: the runtime's own commands (version, run, check) and those other
packages register through the ``ndvm.commands`` entry point (bench, the pipeline's)."""

from __future__ import annotations

import argparse
import sys
from importlib.metadata import entry_points
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np


def _parse_assignments(items: list[str] | None, what: str) -> dict[str, float | np.ndarray]:
    import numpy as np

    out: dict[str, float | np.ndarray] = {}
    for item in items or []:
        if "=" not in item:
            raise SystemExit(f"ndvm: --{what} expects NAME=VALUE, got {item!r}")
        name, value = item.split("=", 1)
        try:
            if "," in value:
                out[name] = np.array([float(v) for v in value.split(",")])
            else:
                out[name] = float(value)
        except ValueError:
            raise SystemExit(f"ndvm: --{what} {name}: {value!r} is not a number or comma-separated numbers") from None
    return out


def cmd_version(args: argparse.Namespace) -> int:
    import ndvm

    info = ndvm.build_info()
    print(f"ndvm-discovery {ndvm.__version__}")
    # info["simd"] is what the module as a whole was compiled for (the portable baseline); the
    # elementwise kernels exist once per instruction set and one is chosen when the module loads.
    flags = info["flags"].strip()
    print(f"native: {info['compiler']}, {info['build_type']}, flags '{flags}', compiled for {info['simd']}")
    supported = ", ".join(info["isas"])
    print(f"instruction set of the kernels: {info['isa']} (this CPU runs {supported}; NDVM_ISA chooses a lower one)")
    print(f"value word: {info['value_bytes']} bytes; threads available: {info['threads']}")
    print(f"python {sys.version.split()[0]}")
    return 0


def _read_source(path: str) -> str:
    p = Path(path)
    if not p.exists():
        raise SystemExit(f"ndvm: no such file: {path}")
    return p.read_text()


def cmd_run(args: argparse.Namespace) -> int:
    import ndvm

    prog = ndvm.compile(_read_source(args.file), dtype=args.dtype)
    params: dict[str, float] = {}
    for name, value in _parse_assignments(args.param, "param").items():
        if not isinstance(value, float):  # a parameter is one number; an input may be a vector
            raise SystemExit(f"ndvm: --param {name}: a parameter takes one number, got {value.size} values")
        params[name] = value
    value = prog.run(params=params, inputs=_parse_assignments(args.input, "input"))
    print(ndvm.to_scheme(value))
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    import ndvm

    prog = ndvm.compile(_read_source(args.file))
    print(f"{args.file}: ok")
    for p in prog.params:
        c = (
            "free"
            if p.constraint is None
            else p.constraint
            if isinstance(p.constraint, str)
            else f"between {p.constraint[1]} {p.constraint[2]}"
        )
        print(f"  param {p.name} = {p.init} ({c})")
    for name in prog.inputs:
        print(f"  input {name}")
    print(f"  canonical hash {prog.canonical_hash}")
    return 0


def _register_plugins(sub: argparse._SubParsersAction[Any]) -> None:
    """Commands other packages contribute through the ``ndvm.commands`` entry point (pyproject.toml):
    ``bench`` (ndvm_bench) and the pipeline's (discover, serve, ui, ...: flows, which imports
    Prefect, MLflow and litellm). ndvm imports none of them; each entry point is a ``register(sub)``
    function adding its subparsers. One that cannot be imported (a dependency missing) is reported
    and left out, so that the runtime's own commands keep working."""
    for ep in sorted(entry_points(group="ndvm.commands"), key=lambda ep: ep.name):
        try:
            register = ep.load()
        except ImportError as exc:
            print(f"ndvm: the {ep.name} commands ({ep.value}) are unavailable: {exc}", file=sys.stderr)
            continue
        register(sub)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ndvm",
        description="NDVM discovery: a native differentiable VM and the model-discovery pipeline around it.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser("version", help="package and native build information")
    p.set_defaults(fn=cmd_version)

    p = sub.add_parser("run", help="run a program and print its value in Scheme notation")
    p.add_argument("file")
    p.add_argument("--param", action="append", metavar="NAME=VALUE", help="override a declared parameter")
    p.add_argument("--input", action="append", metavar="NAME=VALUE[,VALUE...]", help="an input (scalar or vector)")
    p.add_argument("--dtype", default="float64", choices=["float64", "float32"])
    p.set_defaults(fn=cmd_run)

    p = sub.add_parser("check", help="compile a program and report its errors, or its parameters and inputs")
    p.add_argument("file")
    p.set_defaults(fn=cmd_check)

    _register_plugins(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "fn", None):
        parser.print_help()
        return 2
    from ndvm.errors import NDVMError

    try:
        return int(args.fn(args) or 0)
    except NDVMError as exc:
        print(f"ndvm: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
