"""Python views of the structural values a program can return from ``Program.run``.

Numbers come back as ``int`` (exact) or ``float``, booleans as ``bool``, proper lists as ``list``,
vectors and matrices as ``numpy.ndarray``. The three types below cover the rest.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any


class Symbol(str):
    """A Scheme symbol (a ``str`` subclass, so it compares equal to its name)."""

    def __repr__(self) -> str:
        return f"Symbol({str(self)!r})"


@dataclass(frozen=True)
class Pair:
    """An improper pair ``(car . cdr)``; proper lists are returned as Python lists."""

    car: Any
    cdr: Any


class Procedure:
    """A procedure value (a closure or a primitive); it cannot leave the VM."""

    def __repr__(self) -> str:
        return "#<procedure>"


def to_scheme(value: Any) -> str:
    """Writes a value returned by ``Program.run`` in Scheme notation."""
    import math

    import numpy as np

    if value is None:
        return "#<unspecified>"
    if isinstance(value, bool):
        return "#t" if value else "#f"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "+nan.0"
        if math.isinf(value):
            return "+inf.0" if value > 0 else "-inf.0"
        return repr(value)
    if isinstance(value, Symbol) or isinstance(value, str):
        return str(value)
    if isinstance(value, Procedure):
        return "#<procedure>"
    if isinstance(value, Pair):
        items, cur = [], value
        while isinstance(cur, Pair):
            items.append(to_scheme(cur.car))
            cur = cur.cdr
        if isinstance(cur, list):
            items.extend(to_scheme(v) for v in cur)
            return "(" + " ".join(items) + ")"
        return "(" + " ".join(items) + " . " + to_scheme(cur) + ")"
    if isinstance(value, list):
        return "(" + " ".join(to_scheme(v) for v in value) + ")"
    if isinstance(value, np.ndarray):
        if value.ndim == 1:
            return "(vec " + " ".join(to_scheme(float(v)) for v in value) + ")"
        rows = ["(vec " + " ".join(to_scheme(float(v)) for v in row) + ")" for row in value]
        return "(mat " + " ".join(rows) + ")"
    return repr(value)
