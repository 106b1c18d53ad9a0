"""Grouped battery fits: one batch of candidates over every Severson cell, two ways, side by side.

    python -m pipeline_bench.grouped_fits [--candidates 8] [--repeats 3] [--data-dir DIR]

- ``per-cell``: what ``Task.fit_batch`` did before ``ndvm.calibrate_groups``: one
  ``ndvm.calibrate_many`` of all candidates per cell, cell after cell (the pool waits at the end of
  each cell), the cell's rows cut from the frame with polars filters per call;
- ``grouped``: ``task.fit_batch`` today: one ``ndvm.calibrate_groups`` over candidates x cells.

Both fit the battery task of batches 1-2 (82 cells; batch 3 held out whole) with the pipeline's
calibration defaults (``flows.calibration.CalibrationOptions``: Adam, 100 steps, 8 restarts) and
must give the same parameters, bit for bit (checked here too). Prints wall and process CPU seconds
(best of ``--repeats``), their ratios and the load average: on a shared machine the CPU seconds are
the steadier figure.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import numpy as np
import polars as pl


def _per_cell(task, programs, options):
    """The loop this replaced, rows read as it read them (a filter and a sort of the frame per call)."""
    import ndvm

    ds = task.dataset

    def rows(group):
        frame = ds.frame.filter(pl.col("split") == "train").filter(pl.col(ds.group) == group).sort(ds.x)
        x = frame.get_column(ds.x).cast(pl.Float64).to_numpy() / task.x_scale
        return {"x": x}, frame.get_column(ds.y).cast(pl.Float64).to_numpy()

    by_cell = []
    for group in task.groups():
        inputs, target = rows(group)
        by_cell.append(ndvm.calibrate_many(programs, inputs, target=target, loss="mse", **options))
    return [[cell[i] for cell in by_cell] for i in range(len(programs))]


def _grouped(task, programs, options):
    sources = [p.source for p in programs]
    return [fit.fits for fit in task.fit_batch(programs, sources, sources, **options)]


def _timed(fn, repeats):
    best_wall, best_cpu, out = float("inf"), float("inf"), None
    for _ in range(repeats):
        wall, cpu = time.perf_counter(), time.process_time()
        out = fn()
        best_wall = min(best_wall, time.perf_counter() - wall)
        best_cpu = min(best_cpu, time.process_time() - cpu)
    return best_wall, best_cpu, out


def main(argv: list[str] | None = None) -> int:
    import datasets
    import ndvm
    from datasets.tasks import make_task
    from flows.calibration import CalibrationOptions

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--candidates", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--data-dir", default=None, help="the shared data folder (default ../shared/data)")
    args = parser.parse_args(argv)
    data = Path(
        args.data_dir or os.environ.get("NDVM_SHARED_DATA") or Path(__file__).resolve().parents[2] / "shared/data"
    )
    path = data / "battery" / "severson.csv"
    if not path.is_file():
        print(f"skipped: {path} not found (pass --data-dir or set NDVM_SHARED_DATA)")
        return 0
    task = make_task(datasets.load("battery", path=str(path)))
    sources = task.seed_programs()
    while len(sources) < args.candidates:  # more candidates: the seeds again with another first value
        sources.append(sources[len(sources) % len(task.seed_programs())].replace("1.0", "0.99", 1))
    programs = [ndvm.compile(s) for s in sources[: args.candidates]]
    options = CalibrationOptions().as_kwargs()
    rows = [task.train_target(g).size for g in task.groups()]
    print(
        f"Severson batches 1-2: {len(rows)} cells, {sum(rows)} training rows (min {min(rows)}, max {max(rows)}); "
        f"{len(programs)} candidates; {options['optimizer']} {options['steps']} steps x {options['restarts']} restarts; "
        f"{ndvm._native.hardware_threads()} threads; load before {' '.join(open('/proc/loadavg').read().split()[:3])}"
    )
    _grouped(task, programs[:1], options)  # warm up (and cut the rows once, as a run does)
    loop_wall, loop_cpu, loop = _timed(lambda: _per_cell(task, programs, options), args.repeats)
    grp_wall, grp_cpu, grp = _timed(lambda: _grouped(task, programs, options), args.repeats)
    same = all(
        np.array_equal(a.all_params, b.all_params) for fits_a, fits_b in zip(loop, grp) for a, b in zip(fits_a, fits_b)
    )
    print("| fit_batch | wall s (best) | CPU s (best) |")
    print("| --- | --- | --- |")
    print(f"| per-cell calibrate_many loop | {loop_wall:.2f} | {loop_cpu:.2f} |")
    print(f"| calibrate_groups | {grp_wall:.2f} | {grp_cpu:.2f} |")
    print(f"| ratio | {loop_wall / grp_wall:.2f}x | {loop_cpu / grp_cpu:.2f}x |")
    print(f"same parameters bit for bit: {same}; load after {' '.join(open('/proc/loadavg').read().split()[:3])}")
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
