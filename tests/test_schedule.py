"""``ndvm serve``'s schedule carries an explicit IANA time zone (issue 16: "0 2 * * *" ran at 02:00 UTC)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from flows.schedule import UnknownTimezoneError, cron_schedule, local_timezone, next_run
from ndvm.cli import main


def test_the_serve_schedule_carries_the_zone_and_fires_at_local_time():
    schedule = cron_schedule("0 2 * * *", "Europe/Berlin")
    assert (schedule.cron, schedule.timezone) == ("0 2 * * *", "Europe/Berlin")
    # 02:00 in Berlin in winter is 01:00 UTC, not 02:00 UTC.
    when = next_run("0 2 * * *", "Europe/Berlin", after=datetime(2026, 12, 1, 12, 0, tzinfo=UTC))
    assert when.astimezone(UTC) == datetime(2026, 12, 2, 1, 0, tzinfo=UTC)


def test_an_unknown_zone_is_an_error_naming_it(capsys):
    with pytest.raises(UnknownTimezoneError, match="Mars/Olympus"):
        cron_schedule("0 2 * * *", "Mars/Olympus")
    assert main(["serve", "--cron", "0 2 * * *", "--timezone", "Mars/Olympus"]) == 1
    assert "unknown time zone 'Mars/Olympus'" in capsys.readouterr().err


def test_the_default_is_the_machines_zone_as_an_iana_name(monkeypatch):
    monkeypatch.setitem(__import__("sys").modules, "tzlocal", None)  # the fallbacks without tzlocal
    monkeypatch.setenv("TZ", "America/New_York")
    assert local_timezone().name == "America/New_York"
    monkeypatch.setenv("TZ", "Not/AZone")
    monkeypatch.setattr("flows.schedule._zone_from_localtime", lambda: None)
    zone = local_timezone()  # nothing resolves: UTC, said out loud
    assert zone.name == "UTC" and "--timezone" in zone.note


def test_a_run_on_this_host_is_alive_only_with_a_live_pid_and_a_fresh_heartbeat(tmp_path):
    """After a reboot the killed run's pid may belong to another process: a live pid with a
    heartbeat older than STALE_HEARTBEAT_SECONDS is a killed run, so the next night continues it."""
    import json
    import os
    import socket
    import time

    from flows.schedule import STALE_HEARTBEAT_SECONDS, run_is_alive
    from flows.status import status_path

    path = status_path(tmp_path, "night")
    path.parent.mkdir(parents=True)

    def beat(age: float) -> None:
        path.write_text(
            json.dumps(
                {"phase": "proposing", "pid": os.getpid(), "host": socket.gethostname(), "heartbeat": time.time() - age}
            )
        )

    beat(1.0)
    assert run_is_alive(tmp_path, "night")
    beat(STALE_HEARTBEAT_SECONDS + 60.0)  # this process lives, but the run stopped beating long ago
    assert not run_is_alive(tmp_path, "night")
