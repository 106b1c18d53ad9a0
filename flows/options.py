"""The options of a discovery run, generated from its typed configuration.

``DiscoverConfig`` (flows/config.py) is the configuration of a run, stored with it. Each of its
fields a user sets carries ``option(...)`` metadata: help text, command-line group, and, where they
differ from the field's, the flag and the keyword. The nested parts are walked the same way:
``CalibrationOptions`` (flows/calibration.py) and ``RunnerChoice`` (flows/runners.py) carry their
own metadata; ``ProblemSpec``'s (flows/problem.py) is given in flows/config.py's ``PROBLEM_OPTIONS``.
The budget's fields (``Budget`` in flows/config.py) are options too, gathered into the flow's
``budget`` argument.

From that one description come: the command-line options of ``ndvm discover`` and ``ndvm serve``
(``add_arguments``/``values_from_args``), the keyword arguments of the ``discover`` flow (its
signature, so Prefect shows and validates them), and ``build_config`` (keywords -> DiscoverConfig).

Adding an option is one edit: a field with ``option(...)`` metadata in DiscoverConfig (or in the
nested part it belongs to). Nothing else lists the options.
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import types
import typing
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

META_KEY = "ndvm_option"

# Command-line groups, in the order the help shows them.
GROUPS = {
    "data": "data",
    "proposals": "proposals",
    "budget": "budget (whichever comes first)",
    "calibration": "calibration",
    "execution": "execution",
    "store": "run folder and tracking",
}


class OptionError(TypeError):
    """A keyword that is not an option of the discovery flow, or an option declared wrongly."""


@dataclass(frozen=True)
class OptionMeta:
    """What ``option(...)`` attaches to a dataclass field."""

    help: str
    group: str = "execution"
    flag: str | None = None  # default: --field-name (dashes)
    name: str | None = None  # the keyword (flow, build_config); default: the field's name
    metavar: str | None = None
    choices: tuple[Any, ...] | None = None
    default: Any = None  # the flow's and the command line's default (with has_default)
    has_default: bool = False
    cli: bool = True  # False: a keyword of the flow only
    add_cli: Callable[[Any, Any], None] | None = None  # (parser, group): several flags for one field
    from_args: Callable[[argparse.Namespace], Any] | None = None  # the field's value from those flags


def option(help: str, **kwargs: Any) -> dict[str, OptionMeta]:
    """Field metadata: ``field(default=..., metadata=option("what it does", group="data"))``.
    ``default=`` gives the option a default other than the field's (e.g. ``proposer="auto"``)."""
    if "default" in kwargs:
        kwargs["has_default"] = True
    if "group" in kwargs and kwargs["group"] not in GROUPS:
        raise OptionError(f"unknown option group {kwargs['group']!r}; use one of {', '.join(GROUPS)}")
    return {META_KEY: OptionMeta(help=help, **kwargs)}


@dataclass(frozen=True)
class Option:
    """One option of the flow: its keyword, where its value goes, and how the command line gives it."""

    name: str
    path: tuple[str, ...]  # ("proposer",), ("problem", "dataset"), ("budget", "minutes"), ...
    type: Any  # the field's annotation (resolved)
    default: Any
    meta: OptionMeta

    @property
    def flag(self) -> str | None:
        if not self.meta.cli or self.meta.add_cli is not None:
            return None
        return self.meta.flag or "--" + self.path[-1].replace("_", "-")

    @property
    def group(self) -> str:
        return self.meta.group


# ---------------------------------------------------------------------------- walking the dataclasses
def _field_default(f: dataclasses.Field) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
        return f.default_factory()  # type: ignore[misc]
    return None


def _walk(cls: type, prefix: tuple[str, ...], extra: dict[type, dict[str, dict[str, OptionMeta]]]) -> list[Option]:
    hints = typing.get_type_hints(cls)
    out: list[Option] = []
    for f in dataclasses.fields(cls):
        kind = hints[f.name]
        if dataclasses.is_dataclass(kind):
            out += _walk(kind, prefix + (f.name,), extra)
            continue
        meta = f.metadata.get(META_KEY) or extra.get(cls, {}).get(f.name, {}).get(META_KEY)
        if meta is None:
            continue  # derived, not set by users (e.g. the calibration's threads)
        default = meta.default if meta.has_default else _field_default(f)
        out.append(Option(meta.name or f.name, prefix + (f.name,), kind, default, meta))
    return out


def collect_options(
    config_cls: type, budget_cls: type, extra: dict[type, dict[str, Any]] | None = None
) -> list[Option]:
    """Every option of ``config_cls`` (nested parts included) and of ``budget_cls`` (under "budget")."""
    options = _walk(config_cls, (), extra or {}) + _walk(budget_cls, ("budget",), extra or {})
    seen: dict[str, Option] = {}
    for o in options:
        if o.name in seen:
            raise OptionError(
                f"option {o.name!r} is declared twice: {'.'.join(seen[o.name].path)} and {'.'.join(o.path)}"
            )
        seen[o.name] = o
    return options


# ---------------------------------------------------------------------------- keywords -> configuration
def split_keywords(options: list[Option], values: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(configuration keywords, budget keywords) of ``values``; an unknown keyword is an error naming it."""
    by_name = {o.name: o for o in options}
    unknown = sorted(set(values) - set(by_name))
    if unknown:
        raise OptionError(f"unknown discovery option(s) {unknown}; known: {', '.join(sorted(by_name))}")
    config = {k: v for k, v in values.items() if by_name[k].path[0] != "budget"}
    budget = {by_name[k].path[1]: v for k, v in values.items() if by_name[k].path[0] == "budget"}
    return config, budget


def nested_values(options: list[Option], values: dict[str, Any]) -> dict[str, Any]:
    """``{"problem": {"dataset": ...}, "proposer": ...}``: each given keyword at its path, the
    options' own defaults for the rest (so the flow's defaults and the command line's agree)."""
    out: dict[str, Any] = {}
    for o in options:
        if o.path[0] == "budget":
            continue
        value = values.get(o.name, o.default)
        node = out
        for part in o.path[:-1]:
            node = node.setdefault(part, {})
        node[o.path[-1]] = value
    return out


# ---------------------------------------------------------------------------- the flow's signature
def flow_signature(options: list[Option], leading: Iterable[str], extra: list[inspect.Parameter]) -> inspect.Signature:
    """The discover flow's signature: ``leading`` options positional (in that order), then
    ``extra`` (e.g. budget), the other options keyword-only."""
    by_name = {o.name: o for o in options}
    lead = list(leading)
    params = [
        inspect.Parameter(
            n, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=by_name[n].default, annotation=by_name[n].type
        )
        for n in lead
    ]
    params += [p for p in extra if p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD]
    params += [
        inspect.Parameter(o.name, inspect.Parameter.KEYWORD_ONLY, default=o.default, annotation=o.type)
        for o in options
        if o.name not in lead and o.path[0] != "budget"
    ]
    params += [p for p in extra if p.kind is inspect.Parameter.KEYWORD_ONLY]
    return inspect.Signature(params)


# ---------------------------------------------------------------------------- the command line
def _scalar(kind: Any) -> Any:
    """The argparse type of an annotation: int, float or str (Optional unwrapped)."""
    args = [a for a in typing.get_args(kind) if a is not type(None)]
    if typing.get_origin(kind) in (typing.Union, types.UnionType) and len(args) == 1:
        kind = args[0]
    if kind in (int, float, str):
        return kind
    raise OptionError(f"no command-line type for {kind!r}: give the field add_cli/from_args, or cli=False")


def _is_bool(kind: Any) -> bool:
    return kind is bool


def add_arguments(
    parser: argparse.ArgumentParser,
    options: list[Option],
    groups: Iterable[str] | None = None,
    defaults: dict[str, Any] | None = None,
) -> None:
    """Add the command-line options of ``options`` (those of ``groups``; all by default) to
    ``parser``, grouped, with each option's help text and default. ``defaults`` overrides the
    default of named options for this parser (e.g. ``--seed 0`` for ``ndvm calibrate``)."""
    wanted = list(groups) if groups is not None else list(GROUPS)
    made: dict[str, Any] = {}
    for group in wanted:
        for o in options:
            if o.group != group or not o.meta.cli:
                continue
            if group not in made:
                made[group] = parser.add_argument_group(GROUPS[group])
            g = made[group]
            if o.meta.add_cli is not None:
                o.meta.add_cli(parser, g)
                continue
            default = (defaults or {}).get(o.name, o.default)
            kwargs: dict[str, Any] = {"dest": o.name, "help": o.meta.help}
            if _is_bool(o.type):
                kwargs.update(action="store_true", default=bool(default))
            else:
                kwargs.update(type=_scalar(o.type), default=default)
                if o.meta.choices:
                    kwargs["choices"] = list(o.meta.choices)
                if o.meta.metavar:
                    kwargs["metavar"] = o.meta.metavar
                if default is not None:
                    kwargs["help"] = f"{o.meta.help} (default {default})"
            g.add_argument(o.flag, **kwargs)


def values_from_args(
    args: argparse.Namespace, options: list[Option], groups: Iterable[str] | None = None
) -> dict[str, Any]:
    """The keywords of ``options`` (those of ``groups``) from parsed command-line arguments."""
    wanted = set(groups) if groups is not None else set(GROUPS)
    out: dict[str, Any] = {}
    for o in options:
        if o.group not in wanted or not o.meta.cli:
            continue
        out[o.name] = o.meta.from_args(args) if o.meta.from_args is not None else getattr(args, o.name)
    return out


__all__ = [
    "GROUPS",
    "Option",
    "OptionError",
    "OptionMeta",
    "add_arguments",
    "collect_options",
    "flow_signature",
    "nested_values",
    "option",
    "split_keywords",
    "values_from_args",
]
