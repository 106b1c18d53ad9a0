"""flows package of NDVM discovery: the Prefect pipeline and the ``ndvm`` pipeline commands.

- ``flows.discover``: the ``discover`` flow (proposal, dedup, batched calibration, held-out
  scoring, leaderboard, MLflow, budgets, resume) and its engine ``Discovery``;
- ``flows.calibration``: ``calibrate_batch``, the work handed to workers (plain data in and out);
- ``flows.runners``: where batches run (threads, worker processes, Dask);
- ``flows.recalibrate``: re-fit the best programs of a run on new data;
- ``flows.problem``: dataset + task from the command line, and what proposers and MLflow need;
- ``flows.cli``: ``register(subparsers)`` for ``ndvm`` (discover, recalibrate, serve, leaderboard,
  datasets, calibrate, ui).

See docs/pipeline.md. Submodules import Prefect, MLflow and litellm; this file imports nothing.
"""
