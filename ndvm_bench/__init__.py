"""Benchmark suites comparing NDVM with its baselines (``ndvm bench``).

Suites: ``regimes``, ``amortization``, ``staging``, ``calibration``, ``cosearch``, ``multicore``,
``kalman-highdim``; the benchmark programs and their data are in :mod:`ndvm_bench.programs`.
"""

from __future__ import annotations


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``ndvm bench [--suite S] [--json PATH] [--quick]``."""
    from ndvm_bench.runner import main as _main

    return _main(argv)


__all__ = ["main"]
