"""Suite ``proposer``: the LLM proposer against a local server answering from recorded LLM output
(see flows/bench_proposer.py): requests, tokens, new valid candidates, duplicates and invalid per
100 requests, against the proposer before issue 19, and how the run ends on a repeating server.

It needs the pipeline (flows, proposers, datasets), which ``ndvm`` itself never imports, and the
co-search corpus under the shared data folder; it is skipped with the reason when either is absent.
Run only when named (``--suite proposer``).
"""
from __future__ import annotations

from ndvm.bench.common import BenchConfig, SuiteResult, SuiteSkipped


def run_proposer(config: BenchConfig) -> SuiteResult:
    try:
        from flows.bench_proposer import run_proposer_suite
    except ImportError as exc:
        raise SuiteSkipped(f"the discovery pipeline (flows/, proposers/, datasets/) is not importable: {exc}") from exc
    return run_proposer_suite(config)
