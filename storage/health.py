"""What went wrong with the candidate store or the disk under it, and how to get the data back.

- ``open_error(path, error)``: the typed error for a DuckDB file that does not open: the lock
  message (``StoreLockedError``) only when another process holds the lock, else corruption
  (``StoreCorruptError``) naming the file and the recovery commands.
- ``is_disk_full(exc)`` / ``is_corruption(exc)``: classify an exception (its chain included) raised
  anywhere below a command, for the one-line messages of ``ndvm`` (flows/cli_failures.py).
- ``check_store(path)``: read every row of every table (DuckDB verifies each block's checksum on
  read) and say which tables are damaged: ``ndvm store check``.
- ``repair_store(path)``: copy every readable row into a new file, keep the damaged one beside it
  (``candidates.duckdb.damaged-<time>``) and put the copy in its place: ``ndvm store repair``.
  A table that cannot be scanned whole is copied in ranges of rows, halved around each failure,
  so only the rows in a damaged block are lost; the counts say how many.
"""

from __future__ import annotations

import errno
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb

from storage.store import _SCHEMA, StoreCorruptError, StoreError, open_error, recovery_hint

# The store's tables, parents first (the order a copy inserts them in).
TABLES = ("runs", "candidates", "proposals", "run_candidates", "evaluations", "test_scores")
# Sequences behind the id columns: a repaired store continues after the largest id it kept.
SEQUENCES = {"proposal_ids": ("proposals", "id"), "evaluation_ids": ("evaluations", "id")}

# ... and for a damaged file: a block's checksum, a file shorter than its header says, a header
# that is not DuckDB's, or a storage version it cannot have written.
_CORRUPTION_WORDS = (
    "corrupt",
    "checksum",
    "could not read enough bytes",
    "not a valid duckdb database",
    "is not a valid",
    "invalid database header",
    "storage version",
    "database file has been truncated",
    "failed to read",
    "serialization error",
    "deserializ",
)
_DISK_FULL_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG}
_DISK_FULL_WORDS = ("no space left on device", "disk quota exceeded", "file too large")


class DiskFullError(OSError):
    """The disk (or quota) filled: what was committed to the store is kept; free space, then
    continue (``ndvm discover --resume RUN_ID``) or start again."""

    def __init__(self, message: str):
        super().__init__(errno.ENOSPC, message)
        self.message = message

    def __str__(self) -> str:
        return self.message

    @classmethod
    def stopped_run(cls, run_id: str, folder: str | Path, cause: BaseException) -> DiskFullError:
        detail = next((str(e) for e in _chain(cause) if _is_disk_full_one(e)), str(cause))
        return cls(
            f"the disk is full ({_first_line(detail)}); run {run_id} stopped, and everything it stored is kept. "
            f"Free space under {Path(folder).resolve()}, then continue it: "
            f"ndvm discover --resume {run_id} --folder {folder}"
        )


# Below this much free space under the run folder a run does not start: it writes its store, the
# MLflow database and status files there, and would stop within seconds.
MIN_FREE_BYTES = 16 * 2**20


def check_free_space(folder: str | Path, need: int = MIN_FREE_BYTES) -> None:
    """Raise ``DiskFullError`` when the file system of ``folder`` (or its nearest existing parent)
    has less than ``need`` bytes free."""
    probe = Path(folder).resolve()
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    try:
        free = shutil.disk_usage(probe).free
    except OSError:
        return  # cannot tell: the run finds out itself
    if free < need:
        raise DiskFullError(
            f"only {free / 2**20:.1f} MiB free under {probe} (a run needs at least {need // 2**20} MiB for its "
            "store, MLflow and status files); free space first, or pass another --folder"
        )


def _chain(exc: BaseException | None) -> list[BaseException]:
    seen: list[BaseException] = []
    while exc is not None and all(exc is not s for s in seen) and len(seen) < 20:
        seen.append(exc)
        exc = exc.__cause__ or exc.__context__
    return seen


def _is_disk_full_one(e: BaseException) -> bool:
    if isinstance(e, OSError) and e.errno in _DISK_FULL_ERRNOS:
        return True
    # DuckDB and SQLite (MLflow) put the OS's words in their own exception types
    return any(w in str(e).lower() for w in _DISK_FULL_WORDS)


def is_disk_full(exc: BaseException) -> bool:
    """True when ``exc`` or an exception it was raised from says the disk (or quota) is full."""
    return any(_is_disk_full_one(e) for e in _chain(exc))


def is_corruption(exc: BaseException) -> bool:
    """True when ``exc`` (or its chain) is DuckDB reporting a damaged file (not a lock, not a full disk)."""
    if is_disk_full(exc):
        return False
    for e in _chain(exc):
        if isinstance(e, StoreCorruptError):
            return True
        if isinstance(e, duckdb.Error) and any(w in str(e).lower() for w in _CORRUPTION_WORDS):
            return True
    return False


def _first_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[0][:300] if lines else "no message"


# ---------------------------------------------------------------------------- check
@dataclass
class TableHealth:
    name: str
    rows: int | None = None  # rows read (None: the table could not be read at all)
    error: str | None = None  # the first read error, if any


@dataclass
class StoreHealth:
    path: Path
    opened: bool = True
    error: str | None = None  # why the file did not open
    tables: list[TableHealth] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.opened and all(t.error is None for t in self.tables)

    def lines(self) -> list[str]:
        if not self.opened:
            return [f"{self.path}: damaged, cannot be opened ({self.error})"]
        out = [f"{self.path}: {'readable' if self.ok else 'DAMAGED'}"]
        for t in self.tables:
            rows = "?" if t.rows is None else f"{t.rows:,}"
            out.append(f"  {t.name:<15} {rows:>9} rows   {'ok' if t.error is None else 'damaged: ' + t.error}")
        return out


def _connect_read_only(path: Path) -> duckdb.DuckDBPyConnection:
    if not path.is_file():
        raise StoreError(f"no candidate store at {path}")
    try:
        return duckdb.connect(str(path), read_only=True)
    except duckdb.Error as error:
        raise open_error(path, error) from error


def _tables_of(con: duckdb.DuckDBPyConnection) -> list[str]:
    have = {row[0] for row in con.sql("SELECT table_name FROM duckdb_tables()").fetchall()}
    return [t for t in TABLES if t in have] + sorted(have - set(TABLES))


def check_store(path: str | Path) -> StoreHealth:
    """Read every row of every table of the store at ``path``; never raises for damage (a lock or a
    missing file does raise: ``StoreLockedError``, ``StoreError``)."""
    path = Path(path)
    try:
        con = _connect_read_only(path)
    except StoreCorruptError as exc:
        return StoreHealth(path, opened=False, error=_first_line(str(exc.__cause__ or exc)))
    health = StoreHealth(path)
    try:
        try:
            names = _tables_of(con)
        except duckdb.Error as exc:
            return StoreHealth(path, opened=False, error=_first_line(str(exc)))
        for name in names:
            table = TableHealth(name)
            try:
                # every column of every row: DuckDB checks each block it reads
                table.rows = len(con.sql(f'SELECT * FROM "{name}"').fetchall())
            except duckdb.Error as exc:
                table.error = _first_line(str(exc))
            health.tables.append(table)
    finally:
        con.close()
    return health


# ---------------------------------------------------------------------------- repair
@dataclass
class RepairReport:
    path: Path
    damaged_copy: Path
    kept: dict[str, int] = field(default_factory=dict)  # table -> rows copied
    lost: dict[str, int] = field(default_factory=dict)  # table -> rows in unreadable ranges
    emptied: dict[str, int] = field(default_factory=dict)  # table -> rows kept without a damaged column
    unreadable_tables: list[str] = field(default_factory=list)
    header_rebuilt: bool = False

    def lines(self) -> list[str]:
        out = [f"repaired {self.path}; the damaged file is kept as {self.damaged_copy}"]
        if self.header_rebuilt:
            out.append("  (the file's first 4 KiB were not DuckDB's: read through a rebuilt header)")
        for name, n in self.kept.items():
            lost, emptied = self.lost.get(name, 0), self.emptied.get(name, 0)
            notes = [f"{lost:,} unreadable rows lost"] if lost else []
            if emptied:
                notes.append(f"{emptied:,} of them with damaged columns left empty")
            out.append(f"  {name:<15} {n:>9,} rows kept" + (f" ({'; '.join(notes)})" if notes else ""))
        for name in self.unreadable_tables:
            out.append(f"  {name:<15} unreadable: nothing kept")
        return out


def _scalar(con: duckdb.DuckDBPyConnection, query: str) -> Any:
    rows = con.sql(query).fetchall()
    return rows[0][0] if rows else 0


def _readable_columns(src: duckdb.DuckDBPyConnection, table: str, columns: list[str], lo: int, hi: int) -> set[str]:
    ok = set()
    for c in columns:
        try:
            src.sql(f'SELECT "{c}" FROM "{table}" WHERE rowid >= {lo} AND rowid < {hi}').fetchall()
            ok.add(c)
        except duckdb.Error:
            pass
    return ok


def _copy_ranges(src: duckdb.DuckDBPyConnection, dst: duckdb.DuckDBPyConnection, table: str) -> tuple[int, int, int]:
    """Copy the readable rows of ``table``: (kept, lost, emptied). A range of rows (by rowid) that
    fails to read is copied without its damaged columns when those may be NULL (``emptied`` counts
    such rows), else halved until the damage is isolated (``lost``: rows in unreadable ranges)."""
    described = dst.sql(f'DESCRIBE "{table}"').fetchall()
    columns = [row[0] for row in described]
    nullable = {row[0] for row in described if row[2] == "YES"}
    present = {row[0] for row in src.sql(f'DESCRIBE "{table}"').fetchall()}
    names = ", ".join(f'"{c}"' for c in columns)
    placeholders = ", ".join("?" for _ in columns)

    def select(readable: set[str]) -> str:
        return ", ".join(f'"{c}"' if c in present and c in readable else f'NULL AS "{c}"' for c in columns)

    try:
        total = _scalar(src, f'SELECT count(*) FROM "{table}"')
        top = _scalar(src, f'SELECT coalesce(max(rowid) + 1, 0) FROM "{table}"')
    except duckdb.Error:
        total, top = None, 1 << 20  # even the row ids are unreadable: a large range, halved
    kept = emptied = 0
    ranges = [(0, int(top))]
    while ranges:
        lo, hi = ranges.pop()
        where = f"rowid >= {lo} AND rowid < {hi}"
        try:
            rows = src.sql(f'SELECT {select(set(columns))} FROM "{table}" WHERE {where}').fetchall()
        except duckdb.Error:
            readable = _readable_columns(src, table, [c for c in columns if c in present], lo, hi)
            damaged = {c for c in columns if c in present} - readable
            rows = []
            if readable and damaged <= nullable:
                try:
                    rows = src.sql(f'SELECT {select(readable)} FROM "{table}" WHERE {where}').fetchall()
                    emptied += len(rows)
                except duckdb.Error:
                    rows = []
            if not rows:
                if hi - lo > 1:
                    mid = (lo + hi) // 2
                    ranges += [(mid, hi), (lo, mid)]
                continue
        if rows:
            dst.executemany(f'INSERT OR IGNORE INTO "{table}" ({names}) VALUES ({placeholders})', rows)
            kept += len(rows)
    lost = max(0, int(total) - kept) if total is not None else 0
    return kept, lost, emptied


def _header_transplant(path: Path, stamp: str) -> Path | None:
    """A copy of ``path`` with its first 4 KiB (DuckDB's main header: magic bytes and version,
    the same for every file this DuckDB writes) taken from a new empty file, when that makes it
    open: garbage written over the start of the file. None when it does not help."""
    scratch = path.with_name(f"{path.name}.header-{stamp}")
    blank = path.with_name(f"{path.name}.blank-{stamp}")
    try:
        duckdb.connect(str(blank)).close()
        with blank.open("rb") as handle:
            header = handle.read(4096)
        with path.open("rb") as src, scratch.open("wb") as out:
            src.seek(4096)
            out.write(header)
            shutil.copyfileobj(src, out)
        duckdb.connect(str(scratch), read_only=True).close()
        return scratch
    except (duckdb.Error, OSError):
        scratch.unlink(missing_ok=True)
        return None
    finally:
        blank.unlink(missing_ok=True)
        blank.with_name(blank.name + ".wal").unlink(missing_ok=True)


def repair_store(path: str | Path) -> RepairReport:
    """Copy every readable row of the store at ``path`` into a new file; keep the damaged file as
    ``<name>.damaged-<UTC time>`` and put the copy in its place. A file whose first 4 KiB were
    overwritten is read through a copy with a new main header. Raises ``StoreCorruptError`` when
    nothing can be read (the catalogue itself is damaged), ``StoreLockedError`` while a run holds
    the file, ``StoreError`` when there is no file."""
    path = Path(path)
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    scratch: Path | None = None
    try:
        src = _connect_read_only(path)
    except StoreCorruptError as exc:
        scratch = _header_transplant(path, stamp)
        if scratch is None:
            raise StoreCorruptError(
                f"the candidate store {path} is damaged beyond what repair can read (its catalogue or "
                f"headers: {_first_line(str(exc.__cause__ or exc))}); nothing was changed. Restore a "
                "backup, or start a new store (move the file away)"
            ) from exc
        src = duckdb.connect(str(scratch), read_only=True)
    fresh = path.with_name(f"{path.name}.repairing-{stamp}")
    damaged = path.with_name(f"{path.name}.damaged-{stamp}")
    report = RepairReport(path, damaged, header_rebuilt=scratch is not None)
    try:
        names = _tables_of(src)
        dst = duckdb.connect(str(fresh))
        try:
            for sequence, (table, column) in SEQUENCES.items():
                start = 1
                if table in names:
                    try:
                        largest = _scalar(src, f'SELECT coalesce(max("{column}"), 0) FROM "{table}"')
                        start = int(largest) + 1
                    except duckdb.Error:
                        start = 1 << 40  # ids unreadable: continue far above any the file could hold
                dst.sql(f"CREATE SEQUENCE IF NOT EXISTS {sequence} START WITH {start}")
            dst.sql(_SCHEMA)
            for name in TABLES:
                if name not in names:
                    report.unreadable_tables.append(name)
                    continue
                kept, lost, emptied = _copy_ranges(src, dst, name)
                report.kept[name] = kept
                if lost:
                    report.lost[name] = lost
                if emptied:
                    report.emptied[name] = emptied
            dst.sql("CHECKPOINT")
        finally:
            dst.close()
    except BaseException:
        fresh.unlink(missing_ok=True)
        fresh.with_name(fresh.name + ".wal").unlink(missing_ok=True)
        raise
    finally:
        src.close()
        if scratch is not None:
            scratch.unlink(missing_ok=True)
    shutil.move(str(path), str(damaged))
    wal = path.with_name(path.name + ".wal")
    if wal.exists():
        shutil.move(str(wal), str(damaged.with_name(damaged.name + ".wal")))
    fresh.rename(path)
    return report


__all__ = [
    "DiskFullError",
    "MIN_FREE_BYTES",
    "check_free_space",
    "RepairReport",
    "StoreHealth",
    "TableHealth",
    "check_store",
    "is_corruption",
    "is_disk_full",
    "open_error",
    "recovery_hint",
    "repair_store",
]
