"""The time zone of ``ndvm serve``'s cron schedule.

Prefect reads a cron string in UTC unless the schedule names a zone, so ``--cron "0 2 * * *"`` fired
at 02:00 UTC on a machine in Berlin. ``serve`` now always passes an explicit IANA zone: the one the
user gives with ``--timezone``, else the machine's own zone resolved to an IANA name.
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError


class UnknownTimezoneError(ValueError):
    """A --timezone that is not an IANA zone name."""


@dataclass(frozen=True)
class LocalZone:
    name: str
    note: str | None  # set when the machine's zone could not be resolved (UTC is used)


def check_timezone(name: str) -> str:
    """``name`` if it is an IANA zone this machine knows, else UnknownTimezoneError naming it."""
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise UnknownTimezoneError(
            f"unknown time zone {name!r} for --timezone (give an IANA name, e.g. Europe/Berlin or UTC)"
        ) from exc
    return name


def _zone_from_localtime(path: Path = Path("/etc/localtime")) -> str | None:
    # /etc/localtime is usually a link into .../zoneinfo/<Area>/<City>: the name is the part after it.
    try:
        target = str(path.resolve(strict=True))
    except OSError:
        return None
    marker = "zoneinfo/"
    if marker not in target:
        return None
    return target.split(marker, 1)[1]


def local_timezone() -> LocalZone:
    """The machine's zone as an IANA name: tzlocal if installed, else $TZ, else /etc/localtime's target."""
    candidates: list[str] = []
    try:
        import tzlocal

        candidates.append(tzlocal.get_localzone_name() or "")
    except Exception:  # not installed, or it could not tell: try the plain sources
        pass
    candidates.append(os.environ.get("TZ", "").lstrip(":"))
    candidates.append(_zone_from_localtime() or "")
    for name in candidates:
        if not name:
            continue
        try:
            return LocalZone(check_timezone(name), None)
        except UnknownTimezoneError:
            continue
    return LocalZone(
        "UTC", "could not resolve this machine's time zone to an IANA name; using UTC (give --timezone to choose)"
    )


def cron_schedule(cron: str, timezone: str):
    """The Prefect schedule ``serve`` registers: ``cron`` read in ``timezone``."""
    from prefect.schedules import Cron

    return Cron(cron, timezone=check_timezone(timezone))


def next_run(cron: str, timezone: str, after: datetime | None = None) -> datetime:
    """When the schedule next fires, computed by the same schedule class Prefect's server uses."""
    from prefect.server.schemas.schedules import CronSchedule

    schedule = CronSchedule(cron=cron, timezone=check_timezone(timezone))
    return asyncio.run(schedule.get_dates(n=1, start=after))[0]


def describe(cron: str, timezone: str, after: datetime | None = None) -> str:
    """E.g. ``runs on cron '0 2 * * *' in Europe/Berlin, next: 2026-12-02 02:00 CET``."""
    when = next_run(cron, timezone, after)
    return f"runs on cron {cron!r} in {timezone}, next: {when.strftime('%Y-%m-%d %H:%M %Z')} ({when.isoformat()})"


# ---------------------------------------------------------------------------- killed scheduled runs
# A scheduled run that was killed (the machine rebooted, the process got SIGKILL) stays "running"
# in the store. The next run of the same deployment continues it instead of starting a new one.
# Live or killed is told by the run's status file (flows/discover.py rewrites it every second with
# its pid, host and a heartbeat): a run whose process is gone on this host, or whose heartbeat is
# older than STALE_HEARTBEAT_SECONDS on any host, was killed. The heartbeat counts on this host too:
# after a reboot the killed run's pid may belong to another process.
STALE_HEARTBEAT_SECONDS = 600.0


def deployment_name() -> str | None:
    """The Prefect deployment this flow run belongs to (None: not a scheduled/deployed run)."""
    from prefect.runtime import deployment

    try:
        return deployment.name or None
    except Exception:  # no API to ask (a plain call of the flow function)
        return None


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, another user's
        return True
    return True


def run_is_alive(folder: str | Path, run_id: str, now: float | None = None) -> bool:
    """Whether the process of a "running" run still runs, from its status file's pid and heartbeat."""
    import json
    import socket
    import time

    from flows.status import status_path

    try:
        beat = json.loads(status_path(folder, run_id).read_text())
    except (OSError, ValueError):
        return False  # killed before its first status file (within its first second)
    if beat.get("phase") not in ("proposing", "draining"):
        return False
    if "pid" not in beat:  # written by a version without heartbeats: only its age tells
        return False
    fresh = (now or time.time()) - float(beat.get("heartbeat", 0.0)) < STALE_HEARTBEAT_SECONDS
    if beat.get("host") == socket.gethostname():
        return fresh and _process_alive(int(beat["pid"]))
    return fresh


def killed_run_of(folder: str | Path, deployment: str) -> str | None:
    """The latest run of ``deployment`` in ``folder``'s store that is still "running" although its
    process is gone; None when there is none (or no store yet)."""
    from storage import CandidateStore, default_store_path

    path = default_store_path(folder)
    if not path.is_file():
        return None
    with CandidateStore(path, read_only=True) as store:
        running = [row["run_id"] for row in store.runs().iter_rows(named=True) if row["status"] == "running"]
        configs = {run_id: store.run_status(run_id).config or {} for run_id in running}
    for run_id in running:  # newest first
        if configs[run_id].get("deployment") == deployment and not run_is_alive(folder, run_id):
            return run_id
    return None
