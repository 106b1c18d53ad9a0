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


class _Text(str):
    """A piece of punctuation queued by :func:`to_scheme` (told apart from a Symbol value)."""


def _atom_to_scheme(value: Any) -> str:
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
    if isinstance(value, str):  # Symbol included
        return str(value)
    if isinstance(value, Procedure):
        return "#<procedure>"
    if isinstance(value, np.ndarray):
        if value.ndim == 1:
            return "(vec " + " ".join(_atom_to_scheme(float(v)) for v in value) + ")"
        rows = ["(vec " + " ".join(_atom_to_scheme(float(v)) for v in row) + ")" for row in value]
        return "(mat " + " ".join(rows) + ")"
    return repr(value)


def to_scheme(value: Any) -> str:
    """Writes a value returned by ``Program.run`` in Scheme notation.

    Iterative (an explicit work stack, no recursion per level), so a result nested as deeply as
    the runtime allows (2,000 levels) prints instead of raising RecursionError.
    """
    out: list[str] = []
    work: list[Any] = [value]  # values still to write and punctuation, last first
    while work:
        v = work.pop()
        if type(v) is _Text:
            out.append(v)
            continue
        if isinstance(v, (Pair, list)):
            items: list[Any] = []
            cur = v
            while isinstance(cur, Pair):
                items.append(cur.car)
                cur = cur.cdr
            improper = not isinstance(cur, list)  # (a b . c)
            if not improper:
                items.extend(cur)
            parts: list[Any] = [_Text("(")]
            for i, item in enumerate(items):
                if i:
                    parts.append(_Text(" "))
                parts.append(item)
            if improper:
                parts += [_Text(" . "), cur]
            parts.append(_Text(")"))
            work.extend(reversed(parts))
            continue
        out.append(_atom_to_scheme(v))
    return "".join(out)
