"""The name a program gives a table's column (the regression task's inputs, and the MLflow model
that predicts from a DataFrame with the table's own column names).

A column name that is a plain identifier (letters, digits, ``_``, not starting with a digit) and
not a name of the language (``exp``, ``if``, ``param``, ...) is used as is. Any other is rewritten:
every run of other characters becomes ``_``, a leading digit (or an empty name) gets ``c_`` in
front, a name of the language gets ``_`` behind, and a name taken twice gets ``_2``, ``_3``...
(``temp (C)`` -> ``temp_C_``, ``2theta`` -> ``c_2theta``, ``exp`` -> ``exp_``).
"""

from __future__ import annotations

import re

_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _language_names() -> frozenset[str]:
    from ndvm import language  # the runtime's own tables of primitives and forms

    return frozenset(language.PRIMITIVES) | language.SPECIAL_FORMS | {"param", "between", "positive", "unit", "free"}


def program_names(columns: list[str] | tuple[str, ...]) -> dict[str, str]:
    """column name -> the name a program uses for it (the rule in the module docstring)."""
    reserved = _language_names()
    out: dict[str, str] = {}
    taken: set[str] = set()
    for column in columns:
        name = column
        if not _IDENTIFIER.match(name) or name in reserved:
            name = re.sub(r"[^A-Za-z0-9_]+", "_", column)
            if not name or name[0].isdigit():
                name = "c_" + name
            if name in reserved:
                name += "_"
        base, k = name, 2
        while name in taken:
            name, k = f"{base}_{k}", k + 1
        taken.add(name)
        out[column] = name
    return out


__all__ = ["program_names"]
