"""Suite ``discovery``: real discovery runs judged on their test split (see flows/bench_discovery.py).

It needs the pipeline (flows, datasets, storage), which ``ndvm`` itself never imports: it is
imported here only when the suite runs, and the suite is skipped when the pipeline is absent.
It takes about 15 minutes, so ``ndvm bench`` runs it only when asked (``--suite discovery``).
"""
from __future__ import annotations

from ndvm.bench.common import BenchConfig, SuiteResult, SuiteSkipped


def run_discovery(config: BenchConfig) -> SuiteResult:
    try:
        from flows.bench_discovery import run_discovery_suite
    except ImportError as exc:
        raise SuiteSkipped(f"the discovery pipeline (flows/, datasets/, storage/) is not importable: {exc}") from exc
    return run_discovery_suite(config)
