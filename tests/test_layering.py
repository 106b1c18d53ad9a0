"""The packages' import rules, read from the source with the ast module (no package is imported).

- ``ndvm`` is the runtime library: it imports nothing from the packages around it (the pipeline's
  flows, proposers, datasets and storage, nor the benchmarks' ndvm_bench), not even lazily inside
  a function; the ``ndvm`` command finds their subcommands through entry points (pyproject.toml).
- No cycles between the top-level packages: the dependency graph is layered.
- No cycles between the modules of a package (lazy imports inside functions count: a "late
  import" that breaks a cycle at import time is still a cycle in the design).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("ndvm", "ndvm_bench", "proposers", "datasets", "storage", "flows", "pipeline_bench")
RUNTIME_MAY_NOT_IMPORT = set(PACKAGES) - {"ndvm"}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(path: Path) -> set[str]:
    """Fully qualified modules ``path`` imports (relative imports resolved; ``from p import m``
    gives ``p.m`` when ``p/m.py`` exists, else ``p``)."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                out.add(sub if module_path(sub) else target)
    return out


def module_path(name: str) -> Path | None:
    base = ROOT.joinpath(*name.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py", *base.parent.glob(base.name + ".*.so")):
        if candidate.is_file():
            return candidate
    return None


def package_modules() -> dict[str, set[str]]:
    """Every module of the six packages -> the modules of the six packages it imports."""
    graph: dict[str, set[str]] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            graph[module_name(path)] = {m for m in imports_of(path) if m.split(".")[0] in PACKAGES}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` (as the list of its nodes, first repeated at the end), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_the_scanner_sees_imports_of_every_kind(tmp_path):
    """The scan is what the rules rest on: it must see lazy and relative imports."""
    graph = package_modules()
    assert "ndvm.program" in graph["ndvm.calibrate"]  # from .program import ...
    assert "ndvm.language" in graph["proposers.sexpr"]  # from ndvm.language import ...
    assert "ndvm_bench.runner" in graph["ndvm_bench.cli"]  # lazy, inside a function
    assert "datasets.tasks.runtime" in graph["datasets.tasks.curve"]  # from . import runtime
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_the_runtime_imports_none_of_the_packages_around_it():
    offenders = {
        module: sorted(m for m in imports if m.split(".")[0] in RUNTIME_MAY_NOT_IMPORT)
        for module, imports in package_modules().items()
        if module.split(".")[0] == "ndvm"
    }
    assert {m: i for m, i in offenders.items() if i} == {}


def test_no_cycle_between_packages():
    graph: dict[str, set[str]] = {p: set() for p in PACKAGES}
    for module, imports in package_modules().items():
        top = module.split(".")[0]
        graph[top] |= {m.split(".")[0] for m in imports} - {top}
    assert find_cycle(graph) is None, graph


# The packages whose modules import each other without a cycle: all of them.
ACYCLIC_PACKAGES = PACKAGES


@pytest.mark.parametrize("package", ACYCLIC_PACKAGES)
def test_no_cycle_between_the_modules_of_a_package(package):
    graph = {
        m: {i for i in imports if i.split(".")[0] == package}
        for m, imports in package_modules().items()
        if m.split(".")[0] == package
    }
    # "from . import _native" names the package's __init__ as the scan sees it (the extension is
    # built elsewhere): an import of the package itself is its re-export layer, not a sibling
    for m in graph:
        graph[m].discard(package)
    assert find_cycle(graph) is None


def test_the_dataset_loaders_do_not_import_the_registry():
    """The registry imports the loaders to register the built-in datasets; the loaders find their
    own definitions in datasets.catalog, so neither imports the other back."""
    graph = package_modules()
    for loader in ("datasets.enso", "datasets.battery", "datasets.battery_sources", "datasets.userfile"):
        assert "datasets.registry" not in graph[loader], loader
    assert {"datasets.enso", "datasets.battery"} <= graph["datasets.registry"]
    assert "datasets.registry" not in graph["datasets.catalog"]


def _subcommands(parser) -> dict:
    import argparse

    return next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices


def test_the_ndvm_command_finds_the_other_packages_commands_through_entry_points():
    from ndvm.cli import build_parser

    commands = _subcommands(build_parser())
    assert {"version", "run", "check"} <= set(commands)
    assert commands["bench"].get_default("fn").__module__ == "ndvm_bench.cli"
    assert commands["discover"].get_default("fn").__module__.startswith("flows.")


def test_a_command_package_that_cannot_be_imported_is_reported_and_left_out(monkeypatch, capsys):
    from importlib.metadata import EntryPoint

    import ndvm.cli

    broken = EntryPoint(name="broken", value="no_such_package_of_commands:register", group="ndvm.commands")
    bench = EntryPoint(name="bench", value="ndvm_bench.cli:register", group="ndvm.commands")
    monkeypatch.setattr(ndvm.cli, "entry_points", lambda group: [broken, bench] if group == "ndvm.commands" else [])
    commands = _subcommands(ndvm.cli.build_parser())
    assert set(commands) == {"version", "run", "check", "bench"}
    assert "the broken commands (no_such_package_of_commands:register) are unavailable" in capsys.readouterr().err


def test_every_package_is_held_to_the_module_cycle_rule():
    """A package would leave the rule above only by a named exception here, never silently."""
    assert set(PACKAGES) == set(ACYCLIC_PACKAGES)


# What a task may not do (issue 29, "rooms"): plot, run the report's statistical tests, or word the
# prompt's data card. Tasks compute fits and scores; the report (flows/report*.py, storage/plots.py,
# storage/stats.py) and the proposers (proposers/datacard.py) read what the tasks expose.
WORDING_AND_DRAWING = ("storage.plots", "storage.stats", "proposers")


def test_tasks_compute_and_leave_plots_tests_and_cards_to_the_report_and_the_proposers():
    graph = package_modules()
    offenders = {
        module: sorted(i for i in imports if i.startswith(WORDING_AND_DRAWING))
        for module, imports in graph.items()
        if module.split(".")[0] == "datasets"
    }
    assert {m: i for m, i in offenders.items() if i} == {}
    # the rule has teeth: the report and the proposers do import them
    assert "storage.stats" in graph["flows.report_tests"] and "datasets.tasks.facts" in graph["proposers.datacard"]
