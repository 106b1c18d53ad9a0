"""Benchmarks of the discovery pipeline: suites that need flows/, proposers/ and datasets/.

``ndvm_bench`` (the runtime's suites and baselines) never imports the pipeline; these suites reach
``ndvm bench`` through the ``ndvm.bench_suites`` entry point (pyproject.toml) and run only when named:

- ``discovery.py``: ``ndvm bench --suite discovery`` (does what the search finds generalise?);
- ``proposer.py``: ``ndvm bench --suite proposer`` (the LLM proposer against recorded answers);
- ``symreg_discovery.py``: ``ndvm bench --suite symreg-discovery`` (ndvm discover vs Operon and
  gplearn on tables, at equal wall clock);
- ``grouped_fits.py``: ``python -m pipeline_bench.grouped_fits`` (grouped battery fits, two ways).
- ``severson_nested.py``: ``python -m pipeline_bench.severson_nested`` (battery discovery searched on
  one Severson batch and scored on the other, batch 3 never read: the check for changes aimed at the
  suite's Severson case).
"""
