"""Options of registered datasets: what a loader accepts, and ``key=value`` strings turned into them.

A dataset's options are its loader's keyword parameters (plus, for loaders that pass ``**options``
on, the parameters of the loader named by their ``forwards_to`` attribute). Values given on the
command line are strings; each is converted to the type of the parameter's default (bool, int,
float; a default of None or a string keeps the text). An unknown name is an error that lists the
valid ones, never ignored.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any

from .errors import DatasetError
from .schema import DatasetDefinition


class DatasetOptionError(DatasetError, ValueError):
    """An option a dataset does not have, or a value that does not fit it."""


@dataclass(frozen=True)
class Option:
    name: str
    default: Any


def options_of(defn: DatasetDefinition) -> dict[str, Option]:
    """The options of a registered dataset, in signature order."""
    found: dict[str, Option] = {}
    functions = [defn.loader]
    forwarded = getattr(defn.loader, "forwards_to", None)
    if forwarded is not None:
        functions.append(forwarded)
    for function in functions:
        for name, param in inspect.signature(function).parameters.items():
            if param.kind in (param.VAR_KEYWORD, param.VAR_POSITIONAL) or name in found:
                continue
            if function is forwarded and name in ("path", "format"):  # the forwarding loader supplies the file
                continue
            default = None if param.default is inspect.Parameter.empty else param.default
            found[name] = Option(name, default)
    return found


_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def convert(defn: DatasetDefinition, option: Option, text: str) -> Any:
    default = option.default
    where = f"dataset {defn.name!r}, option {option.name}"
    if isinstance(default, bool):
        if text.lower() in _TRUE:
            return True
        if text.lower() in _FALSE:
            return False
        raise DatasetOptionError(f"{where}: expected true or false, got {text!r}")
    if isinstance(default, int):
        try:
            return int(text)
        except ValueError:
            raise DatasetOptionError(f"{where}: expected an integer, got {text!r}") from None
    if isinstance(default, float):
        try:
            return float(text)
        except ValueError:
            raise DatasetOptionError(f"{where}: expected a number, got {text!r}") from None
    if default is None and text.lower() == "none":
        return None
    return text


def check(defn: DatasetDefinition, options: dict[str, Any]) -> None:
    """A :class:`DatasetOptionError` listing the valid names when ``options`` holds an unknown one."""
    valid = options_of(defn)
    unknown = sorted(set(options) - set(valid))
    if unknown:
        raise DatasetOptionError(
            f"dataset {defn.name!r} has no option{'s' if len(unknown) > 1 else ''} {', '.join(unknown)}; "
            f"valid options: {', '.join(valid) or '(none)'}"
        )


def parse(defn: DatasetDefinition, pairs: list[str] | None) -> dict[str, Any]:
    """``["key=value", ...]`` -> typed options of ``defn`` (checked)."""
    valid = options_of(defn)
    out: dict[str, Any] = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or not key:
            raise DatasetOptionError(f"--option expects KEY=VALUE, got {pair!r}")
        if key not in valid:
            check(defn, {key: value})
        out[key] = convert(defn, valid[key], value.strip())
    return out


__all__ = ["DatasetOptionError", "Option", "check", "convert", "options_of", "parse"]
