"""Where a run's status file lives. The run rewrites it every second (phase, counts, pid, host,
heartbeat: flows/discover.py) because the store itself is locked by its one writer; ``ndvm status``
and the killed-run check of scheduled nights (flows/schedule.py) read it."""

from __future__ import annotations

from pathlib import Path


def status_path(folder: str | Path, run_id: str) -> Path:
    """The run's status file, rewritten every second: the store itself is locked by the writer."""
    return Path(folder) / "status" / f"{run_id}.json"


__all__ = ["status_path"]
