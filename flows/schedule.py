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
            f"unknown time zone {name!r} for --timezone (give an IANA name, e.g. Europe/Berlin or UTC)") from exc
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
    return LocalZone("UTC", "could not resolve this machine's time zone to an IANA name; using UTC "
                            "(give --timezone to choose)")


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
