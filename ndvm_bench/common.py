"""Shared pieces of the benchmark suites: configuration, timing, results, machine facts."""

from __future__ import annotations

import math
import os
import platform
import statistics
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np


class SuiteSkipped(Exception):
    """A suite cannot run here (an optional dependency or data is missing); the message says why."""


@dataclass
class BenchConfig:
    quick: bool = False  # CI-size runs: fewer repetitions, smaller problems
    seed: int = 0
    data_dir: Path | None = None  # the shared real data (ENSO, corpora); None: looked up

    def pick(self, full, quick):
        """``quick`` in --quick mode, ``full`` otherwise."""
        return quick if self.quick else full


@dataclass
class SuiteResult:
    name: str
    title: str
    columns: list[str]
    rows: list[list[Any]]
    notes: list[str] = field(default_factory=list)
    data: dict = field(default_factory=dict)  # everything measured, for the JSON file
    seconds: float = 0.0

    def to_json(self) -> dict:
        return {
            "title": self.title,
            "columns": self.columns,
            "rows": _jsonable(self.rows),
            "notes": self.notes,
            "data": _jsonable(self.data),
            "seconds": self.seconds,
        }


@dataclass
class Timing:
    median: float  # seconds per call
    best: float
    reps: int

    @property
    def value(self) -> float:
        """The figure the tables report: the best sample. On a shared machine other processes only
        ever add time, so the best of several samples estimates the cost of the code itself; the
        median (in the JSON) shows what the load did."""
        return self.best

    def to_json(self) -> dict:
        return {"median_s": self.median, "best_s": self.best, "reps": self.reps}


def time_call(
    fn: Callable[[], Any], min_time: float = 0.5, max_reps: int = 10_000, min_reps: int = 3, warmup: int = 1
) -> Timing:
    """Median wall time of ``fn()`` over repeated calls: at least ``min_reps`` calls, then more until
    ``min_time`` seconds have been spent or ``max_reps`` calls made. Calls much shorter than the
    timer's resolution are grouped so that each sample lasts at least ~50 microseconds."""
    for _ in range(warmup):
        fn()
    t0 = time.perf_counter()
    fn()
    one = time.perf_counter() - t0
    group = max(1, int(5e-5 / one)) if one > 0 else 1000
    samples: list[float] = []
    spent = 0.0
    while len(samples) < min_reps or (spent < min_time and len(samples) * group < max_reps):
        t0 = time.perf_counter()
        for _ in range(group):
            fn()
        dt = time.perf_counter() - t0
        spent += dt
        samples.append(dt / group)
    return Timing(statistics.median(samples), min(samples), len(samples) * group)


def ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or b == 0 or not (math.isfinite(a) and math.isfinite(b)):
        return None
    return a / b


def fmt_time(seconds: float | None) -> str:
    if seconds is None or not math.isfinite(seconds):
        return "—"
    if seconds >= 1:
        return f"{seconds:.2f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.2f} ms"
    if seconds >= 1e-6:
        return f"{seconds * 1e6:.2f} µs"
    return f"{seconds * 1e9:.0f} ns"


def fmt_ratio(x: float | None) -> str:
    if x is None or not math.isfinite(x):
        return "—"
    if x >= 100:
        return f"{x:,.0f}x"
    return f"{x:.2f}x"


def fmt_num(x: float | None, digits: int = 4) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "—"
    if abs(x) >= 1e5:
        return f"{x:,.0f}"
    return f"{x:.{digits}g}"


def require_ndvm(*names: str):
    """Import ndvm and check that the runtime API the suite needs is there."""
    try:
        import ndvm
    except Exception as e:  # the native extension not built, for instance
        raise SuiteSkipped(f"import ndvm failed: {e}") from e
    missing = [n for n in names if not hasattr(ndvm, n)]
    if missing:
        raise SuiteSkipped(f"the NDVM runtime does not provide {', '.join(missing)} yet")
    return ndvm


# The variable the tests read too (tests/conftest.py): one name for the shared real-data folder.
SHARED_DATA_ENV = "NDVM_SHARED_DATA"


def find_data_dir(config: BenchConfig) -> Path | None:
    """The shared real-data folder: ``config.data_dir`` (``--data-dir``), ``$NDVM_SHARED_DATA``, or
    ``../shared/data`` beside the repository. A folder named explicitly that does not exist is an
    error, not a silent fall-back to the next place."""
    candidates = []
    for named, where in ((config.data_dir, "--data-dir"), (os.environ.get(SHARED_DATA_ENV), f"${SHARED_DATA_ENV}")):
        if named:
            if not Path(named).is_dir():
                raise FileNotFoundError(f"{where} names {named}, which is not a folder")
            candidates.append(Path(named))
    repo = Path(__file__).resolve().parents[1]
    candidates.append(repo.parent / "shared" / "data")
    for c in candidates:
        if c.is_dir():
            return c
    return None


def machine_info() -> dict:
    info = {
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpu_count": os.cpu_count(),
        "processor": platform.processor(),
    }
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=5).stdout
        for line in out.splitlines():
            key, _, value = line.partition(":")
            if key.strip() in ("Model name", "CPU(s)", "Thread(s) per core", "L2 cache", "L3 cache", "CPU max MHz"):
                info[key.strip()] = value.strip()
    except (OSError, subprocess.SubprocessError):
        pass
    try:
        import torch

        info["torch"] = torch.__version__
        info["torch_threads"] = torch.get_num_threads()
    except ImportError:
        pass
    return info


def _jsonable(x):
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, np.ndarray):
        return _jsonable(x.tolist())
    if isinstance(x, (np.floating,)):
        x = float(x)
    if isinstance(x, (np.integer,)):
        return int(x)
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, Timing):
        return x.to_json()
    return x


__all__ = [
    "BenchConfig",
    "SuiteResult",
    "SuiteSkipped",
    "Timing",
    "find_data_dir",
    "fmt_num",
    "fmt_ratio",
    "fmt_time",
    "machine_info",
    "ratio",
    "require_ndvm",
    "time_call",
]
