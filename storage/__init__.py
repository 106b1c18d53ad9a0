"""storage package of NDVM discovery: the DuckDB candidate store and MLflow tracking.

``CandidateStore`` (DuckDB, no MLflow import) is imported eagerly; ``Tracker`` and the rest of
``storage.tracking`` load MLflow (about a second), so they are imported on first use.
"""

from storage.store import (
    OUTCOMES,
    Candidate,
    CandidateStore,
    EvaluationResult,
    FinalTestScore,
    MetricDirectionError,
    RunStatus,
    StoreCorruptError,
    StoreError,
    StoreLockedError,
    default_store_path,
    metric_higher_is_better,
    open_for_reading,
    redact,
    snapshot_path,
)

_LAZY = {
    "Tracker": "storage.tracking",
    "LeaderboardEntry": "storage.tracking",
    "entry_from_store": "storage.tracking",
    "default_tracking_uri": "storage.tracking",
    "NDVMProgramModel": "storage.pyfunc_model",
    "show_leaderboard": "storage.leaderboard",
    "FitPlot": "storage.plots",
    "ForecastPlot": "storage.plots",
}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'storage' has no attribute {name!r}")


__all__ = [
    "CandidateStore",
    "Candidate",
    "EvaluationResult",
    "FinalTestScore",
    "RunStatus",
    "StoreError",
    "StoreCorruptError",
    "StoreLockedError",
    "MetricDirectionError",
    "metric_higher_is_better",
    "redact",
    "default_store_path",
    "open_for_reading",
    "snapshot_path",
    "OUTCOMES",
    *_LAZY,
]
