"""The offline environment: telemetry and start-up network look-ups switched off.

The variables live in ``flows/offline.env`` (shipped inside the package, so an installed ``ndvm``
reads it too); the Makefile includes the same file. Python callers set each one only when the
user has not (``os.environ.setdefault``): a user's explicit choice wins.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Mapping, MutableMapping
from pathlib import Path

OFFLINE_ENV_FILE = Path(__file__).with_name("offline.env")

_LINE = re.compile(r"^([A-Z][A-Z0-9_]*)=(\S+)$")


class OfflineEnvError(ValueError):
    """A line of offline.env that is not ``KEY=value``."""


def read_offline_env(path: Path = OFFLINE_ENV_FILE) -> dict[str, str]:
    """The ``KEY=value`` lines of ``path`` in file order (comments and blank lines skipped)."""
    variables: dict[str, str] = {}
    for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        match = _LINE.match(line)
        if match is None:
            raise OfflineEnvError(f"{path}:{number}: expected KEY=value (no quotes or spaces), got {raw!r}")
        key, value = match.groups()
        if key in variables:
            raise OfflineEnvError(f"{path}:{number}: {key} is set twice")
        variables[key] = value
    return variables


OFFLINE_ENV: Mapping[str, str] = read_offline_env()


def apply_offline_env(environ: MutableMapping[str, str] = os.environ) -> None:
    """Set every offline variable that ``environ`` does not already have."""
    for key, value in OFFLINE_ENV.items():
        environ.setdefault(key, value)


def with_offline_env(environ: Mapping[str, str]) -> dict[str, str]:
    """A copy of ``environ`` with the offline variables it lacks added (for a subprocess)."""
    return {**OFFLINE_ENV, **environ}


def quiet_environment(verbose: bool = False) -> None:
    """The environment of a pipeline command: offline and quiet (flows/offline.env), Prefect's home
    folder made, and (not ``verbose``) only warnings from Prefect, MLflow and their libraries."""
    apply_offline_env()
    # Prefect's temporary server keeps its sqlite database in PREFECT_HOME and cannot create the
    # folder itself (the Makefile points it at runs/prefect, absent before the first run).
    if os.environ.get("PREFECT_HOME"):
        Path(os.environ["PREFECT_HOME"]).expanduser().mkdir(parents=True, exist_ok=True)
    if not verbose:
        # The rich display shows progress; Prefect's per-task INFO lines would scroll it away.
        os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
        os.environ.setdefault("MLFLOW_LOGGING_LEVEL", "WARNING")  # mlflow sets its logger level at import
        for name in ("mlflow", "alembic", "distributed", "LiteLLM", "httpx"):
            logging.getLogger(name).setLevel(logging.WARNING)
