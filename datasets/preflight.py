"""Checks of a data file that can be made before any work: ``ndvm discover --data FILE`` runs them
before Prefect, the store or MLflow start, so a wrong file, column or value is one line in well
under a second instead of a traceback after the start-up.

``check_data_file(path, x=..., y=..., group=...)`` raises the dataset layer's typed errors
(``datasets.errors``) with what is wrong and what to do:

- the file: missing, a directory, empty (zero bytes), an unsupported type, no header;
- the manifest beside it (``data.toml``): invalid TOML, unknown keys (``userfile.read_manifest``);
- the columns: x and y not given, a column the file does not have;
- the values: a non-numeric x or y (the first offending row and value), and targets so large that
  their squares overflow float64 (every squared-error metric would be inf and every fit fail).

Large files: the values are checked on the first ``PREFLIGHT_ROWS`` rows (the loader reads the
whole file later and checks the same again). Files in a battery layout and PSL/CPC text (no x/y
given) go to their own loaders, which check their formats; only the file itself is checked here.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

from .errors import DataFormatError, UnknownDatasetError

PREFLIGHT_ROWS = 200_000
# |y| above this squares to more than ~1e300: a mean squared error over a few thousand rows, or a
# sum of squares in a fit, overflows float64 (max 1.8e308). Rescale such a column first.
MAX_ABS_TARGET = 1e150


def input_columns(x: Any, names: list[str] | None = None) -> tuple[str, ...]:
    """The input columns of ``--x`` / the manifest's ``x``, parsed as the loader parses them
    (``userfile.parse_inputs`` where the loader has several inputs; else one column)."""
    from . import userfile

    parse = getattr(userfile, "parse_inputs", None)
    if parse is not None:
        return tuple(parse(x, names))
    if x is None or x == "":
        return ()
    return (x,) if isinstance(x, str) else tuple(x)


def check_data_file(
    path: str | os.PathLike[str],
    *,
    x: Any = None,
    y: str | None = None,
    group: str | None = None,
    registered: tuple[str, ...] = (),
) -> None:
    """Raise a typed ``DatasetError`` for what is wrong with the file and its columns (see the
    module docstring); return None when nothing is. ``registered``: the dataset names, for the
    message when ``path`` is neither a file nor one of them."""
    p = Path(path).expanduser()
    if not p.exists():
        known = f" ({', '.join(registered)})" if registered else ""
        raise UnknownDatasetError(
            f"{str(path)!r} is neither a registered dataset{known} nor an existing file; "
            "check the path (`ndvm datasets` lists the registered ones)"
        )
    if p.is_dir():
        raise DataFormatError(f"{p}: is a directory; --data takes a CSV or Parquet file")
    try:
        size = p.stat().st_size
        with p.open("rb") as handle:
            handle.read(1)
    except OSError as exc:
        raise DataFormatError(f"{p}: cannot be read ({exc.strerror or exc})") from None
    if size == 0:
        raise DataFormatError(f"{p}: the file is empty (0 bytes); expected a header row and data rows")
    suffix = p.suffix.lower()
    if suffix not in (".csv", ".parquet"):
        from . import enso

        enso.sniff_format(p)  # PSL/CPC text or a DataFormatError naming the accepted formats
        return
    from . import userfile

    manifest = userfile.read_manifest(p)  # invalid TOML, unknown keys: DataFormatError
    x = x or manifest.get("x")
    y = y or manifest.get("y")
    group = group or manifest.get("group")
    if not x and not y:
        from . import battery

        if battery.is_battery_file(p):  # the battery loader knows its layouts
            return
    frame_names = _column_names(p)
    inputs = input_columns(x, frame_names)
    if not inputs or not y:
        raise DataFormatError(
            f"{p}: say which columns are x and y (--x COL --y COL, or x = / y = in {p.with_suffix('.toml')}); "
            f"the file has {frame_names}"
        )
    wanted = [*inputs, y, *([group] if group else [])]
    missing = [c for c in wanted if c not in frame_names]
    if missing:
        raise DataFormatError(f"{p}: no column(s) {missing}; the file has {frame_names}")
    _check_values(p, list(inputs), y)


def _scan(path: Path) -> Any:
    import polars as pl

    if path.suffix.lower() == ".parquet":
        return pl.scan_parquet(path)
    return pl.scan_csv(path, infer_schema_length=10000)


def _column_names(path: Path) -> list[str]:
    import polars as pl

    try:
        names = _scan(path).collect_schema().names()
    except pl.exceptions.NoDataError:
        raise DataFormatError(f"{path}: no data (not even a header row)") from None
    except (pl.exceptions.PolarsError, OSError) as exc:
        raise DataFormatError(f"{path}: cannot be read as {path.suffix.lower()[1:]}: {_first_line(exc)}") from None
    if not names:
        raise DataFormatError(f"{path}: no columns")
    return names


def _check_values(path: Path, inputs: list[str], y: str) -> None:
    """Numeric inputs and target, and a target whose squares fit in float64 (first rows only)."""
    import polars as pl

    columns = list(dict.fromkeys([*inputs, y]))
    try:
        head = _scan(path).select(columns).head(PREFLIGHT_ROWS).collect()
    except (pl.exceptions.PolarsError, OSError) as exc:
        raise DataFormatError(f"{path}: cannot be read: {_first_line(exc)}") from None
    if head.height == 0:
        raise DataFormatError(f"{path}: a header ({', '.join(head.columns)}) but no data rows")
    for name in columns:
        column = head.get_column(name)
        role = "target (y)" if name == y else "input (x)"
        if column.dtype == pl.Boolean or not (column.dtype.is_numeric() or column.dtype == pl.String):
            raise DataFormatError(f"{path}: the {role} column {name!r} is {column.dtype}, not numeric")
        numbers = column.cast(pl.Float64, strict=False)
        bad = column.is_not_null() & numbers.is_null()
        if bad.any():
            row = int(bad.arg_true()[0])
            raise DataFormatError(
                f"{path}: the {role} column {name!r} is not numeric: row {row + 1} holds {column[row]!r}; "
                "clean or drop such rows (empty cells are skipped)"
            )
        if name == y:
            finite = numbers.filter(numbers.is_finite())
            largest = finite.abs().max() if finite.len() else None
            if largest is not None and float(largest) > MAX_ABS_TARGET:  # type: ignore[arg-type]
                raise DataFormatError(
                    f"{path}: the target column {name!r} holds values up to {float(largest):.3g} "  # type: ignore[arg-type]
                    f"(above {MAX_ABS_TARGET:.0e}): their squares overflow float64, so every "
                    f"squared-error score would be inf; rescale it (e.g. divide by 1e{_exponent(largest)})"
                )


def _exponent(value: Any) -> int:
    return int(math.floor(math.log10(abs(float(value)))))


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


__all__ = ["MAX_ABS_TARGET", "PREFLIGHT_ROWS", "check_data_file", "input_columns"]
