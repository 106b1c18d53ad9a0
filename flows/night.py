"""What a discovery run takes from the nights before it: its seed and the program library.

Two small hooks of the discover flow (``flows/discover.py``), kept here so the flow only calls them:

- :func:`with_seed`: a run without ``--seed`` draws one, so nights explore differently; the drawn
  seed is written into the configuration (stored with the run, so a resume continues with it) and
  into the runs table, and the summary prints it: ``--seed S --serial --fresh`` replays the run.
- :func:`open_run_library`: the run's dataset fingerprint (``storage.fingerprint``), recorded in
  the store, and the library of earlier runs on it (``storage.library``): their evaluations are
  reused and their best programs seed the run, unless the run is ``fresh``; the task's reference
  programs (``Task.reference_programs``, origin ``reference``) seed every new run.
"""

from __future__ import annotations

import dataclasses
import secrets
from dataclasses import asdict
from typing import Any

from flows.calibration import BatchItem

# Drawn seeds stay below 2**31: any consumer (Python's random, numpy, the native runtime) takes them.
SEED_LIMIT = 2**31


def draw_seed() -> int:
    return secrets.randbelow(SEED_LIMIT)


def with_seed(config: Any) -> Any:
    """``config`` (a ``DiscoverConfig``) with its seed drawn when it has none; the calibration's
    seed follows the run's when it was not set on its own."""
    if config.seed is not None and config.calibration.seed is not None:
        return config
    seed = draw_seed() if config.seed is None else config.seed
    calibration = config.calibration
    if calibration.seed is None:
        calibration = dataclasses.replace(calibration, seed=seed)
    return dataclasses.replace(config, seed=seed, calibration=calibration)


def open_run_library(
    store: Any,
    run_id: str,
    dataset: Any,
    task: Any,
    config: Any,
    *,
    resumed: bool,
    program_source: Any = None,
    log: Any = None,
) -> tuple[Any, list[BatchItem]]:
    """Record the run's seed and dataset fingerprint, and (a new run, not ``config.fresh``) seed it
    with the library's best programs. Returns the library (``reuse`` for each accepted batch) and
    the seeds still to calibrate (normally none: they reuse their evaluations)."""
    from storage.fingerprint import dataset_fingerprint
    from storage.library import open_library

    fingerprint = dataset_fingerprint(dataset, task, asdict(config.calibration))
    library = open_library(
        store,
        run_id,
        fingerprint=fingerprint.value,
        parts=fingerprint.parts,
        seed=config.seed,
        enabled=not config.fresh,
        new_run=not resumed,
    )
    left = [] if resumed else library.seed_run(program_source)
    # the task's references as programs (origin "reference"): every new run starts from them
    references = [] if resumed else library.seed_references(task.reference_programs(), program_source)
    if log is not None:
        if config.fresh:
            log.info(
                "run %s: --fresh: no evaluation reused, no seed from earlier runs (dataset fingerprint %s)",
                run_id,
                library.fingerprint,
            )
        if not resumed:
            log.info(
                "run %s: dataset fingerprint %s; started from %d programs of earlier runs and %d reference "
                "programs of the task (%d to calibrate first)",
                run_id,
                library.fingerprint,
                len(library.seeds),
                len(library.references),
                len(left) + len(references),
            )
    return library, [BatchItem(c.hash, c.source, c.program_source or c.source) for c in left + references]


__all__ = ["SEED_LIMIT", "draw_seed", "open_run_library", "with_seed"]
