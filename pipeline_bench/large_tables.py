"""``ndvm bench --suite large-tables``: ``ndvm discover`` on a ten-million-row table, its memory
and how soon it calibrates (issue 36 part 3).

Two tables, written by this suite into a temporary folder (seeded; ``--quick``: a tenth of the
rows), read by the command a user would type:

- ``one input``: ``y = 2.5 exp(-0.3 x) + 0.1 x`` plus noise (sd 0.01), x uniform in [0, 10]: a
  curve (``--x x --y y``, the temporal split along x);
- ``five inputs``: ``y = a0 a1 / a2^2 + sin(a3) a4`` plus noise (sd 0.01), the inputs uniform in
  [0.5, 3]: a regression table (``--x a0,a1,a2,a3,a4``, the seeded random split).

Each runs ``ndvm discover --minutes 1 --seed 1`` (the offline proposer) in a child process; the
suite samples the resident memory of its whole process tree (the command, Prefect's server, the
worker processes) every 0.1 s and reads the run's status file (``runs/status/<run>.json``, rewritten
every second) for the first calibrated candidate. Table: rows, peak RSS of the tree, seconds from
the command's start to the first calibrated candidate, candidates calibrated, the whole command's
wall time, the champion's test RMSE against the best reference's (from the report card).

How the memory stays bounded: datasets/tasks/sampling.py (the search fits and scores a seeded
sample of a large table; a worker process receives only those rows; finalists are refitted on at
most ``REFIT_MAX_ROWS`` training rows and scored on every test row) and the streamed dataset
digest (storage/fingerprint.py).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

ROWS = 10_000_000
QUICK_ROWS = 1_000_000
MINUTES = 1.0
MEMORY_GOAL_GIB = 3.0


def write_tables(folder: Path, rows: int) -> dict[str, tuple[Path, list[str]]]:
    """The two CSV files (name -> (path, input columns)), seeded."""
    import polars as pl

    rng = np.random.default_rng(0)
    x = rng.uniform(0, 10, rows)
    one = folder / "one_input.csv"
    pl.DataFrame({"x": x, "y": 2.5 * np.exp(-0.3 * x) + 0.1 * x + rng.normal(0, 0.01, rows)}).write_csv(one)
    del x
    a = rng.uniform(0.5, 3, (rows, 5))
    y = a[:, 0] * a[:, 1] / a[:, 2] ** 2 + np.sin(a[:, 3]) * a[:, 4] + rng.normal(0, 0.01, rows)
    five = folder / "five_inputs.csv"
    pl.DataFrame({**{f"a{i}": a[:, i] for i in range(5)}, "y": y}).write_csv(five)
    return {"one input": (one, ["x"]), "five inputs": (five, [f"a{i}" for i in range(5)])}


class TreeMemory(threading.Thread):
    """Samples the summed RSS of a process and its descendants every ``every`` seconds."""

    def __init__(self, pid: int, every: float = 0.1):
        super().__init__(daemon=True)
        self.pid, self.every, self.peak, self.peak_processes = pid, every, 0, 0
        self.stopped = threading.Event()

    def run(self) -> None:
        import psutil

        try:
            root = psutil.Process(self.pid)
        except psutil.Error:
            return
        while not self.stopped.is_set():
            try:
                tree = [root, *root.children(recursive=True)]
            except psutil.Error:  # the command ended
                return
            total = 0
            for process in tree:
                try:
                    total += process.memory_info().rss
                except psutil.Error:  # a child that just ended
                    pass
            if total > self.peak:
                self.peak, self.peak_processes = total, len(tree)
            self.stopped.wait(self.every)


def run_one(name: str, data: Path, inputs: list[str], folder: Path) -> dict[str, Any]:
    """One ``ndvm discover`` on ``data``: peak RSS, first calibration, counts, test scores."""
    script = Path(sys.executable).with_name("ndvm")
    command = [str(script) if script.is_file() else "ndvm", "discover", "--data", str(data), "--y", "y"]
    command += ["--x", ",".join(inputs), "--minutes", f"{MINUTES}", "--seed", "1", "--fresh"]
    command += ["--folder", str(folder)]
    start = time.perf_counter()
    child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    memory = TreeMemory(child.pid)
    memory.start()
    output: list[str] = []
    reader = threading.Thread(target=lambda: output.extend(child.stdout or []), daemon=True)
    reader.start()
    first_calibration = None
    while child.poll() is None:
        if first_calibration is None:
            for status in (folder / "status").glob("*.json"):
                try:
                    if json.loads(status.read_text()).get("calibrated", 0) > 0:
                        first_calibration = time.perf_counter() - start
                except (OSError, ValueError):  # rewritten while read
                    pass
        time.sleep(0.2)
    took = time.perf_counter() - start
    memory.stopped.set()
    memory.join()
    reader.join(timeout=5)
    out: dict[str, Any] = {
        "table": name,
        "returncode": child.returncode,
        "peak_rss_gib": memory.peak / 2**30,
        "processes_at_peak": memory.peak_processes,
        "first_calibration_s": first_calibration,
        "seconds": took,
    }
    reports = sorted((folder / "reports").glob("*/report.json"))
    if child.returncode != 0 or not reports:
        out["error"] = "".join(output).strip().splitlines()[-1:] or ["no report card"]
        return out
    card = json.loads(reports[-1].read_text())
    out["calibrated"] = card.get("counts", {}).get("calibrated")
    out["champion"] = (card["champion"].get("formula") or {}).get("text", card["champion"]["source"])
    out["verdict"] = card.get("verdict")
    return out


def run_large_tables_suite(config: Any) -> Any:
    """The suite (``ndvm_bench.common.SuiteResult``)."""
    from ndvm_bench.common import SuiteResult

    rows_per_table = QUICK_ROWS if config.quick else ROWS
    rows, results = [], []
    with tempfile.TemporaryDirectory(prefix="ndvm-bench-large-") as tmp:
        tables = write_tables(Path(tmp), rows_per_table)
        for name, (path, inputs) in tables.items():
            r = run_one(name, path, inputs, Path(tmp) / f"runs-{len(results)}")
            results.append(r)
            first = r["first_calibration_s"]
            rows.append(
                [
                    name,
                    f"{rows_per_table:,}",
                    f"{r['peak_rss_gib']:.2f}",
                    f"{first:.0f}" if first is not None else "never",
                    r.get("calibrated", "-"),
                    f"{r['seconds']:.0f}",
                    r.get("champion", f"error: {r.get('error')}")[:70],
                ]
            )
            path.unlink()  # (a 1.1 GB file: the disk holds one at a time)
    over = [r["table"] for r in results if r["peak_rss_gib"] >= MEMORY_GOAL_GIB]
    late = [r["table"] for r in results if r["first_calibration_s"] is None or r["first_calibration_s"] > 60]
    notes = [
        f"ndvm discover --minutes {MINUTES:g} --seed 1 on each table; peak RSS: the command and every "
        f"process it started, summed, sampled every 0.1 s; goal: under {MEMORY_GOAL_GIB:g} GiB and a "
        "calibrated candidate within the first minute",
        "goal met on every table"
        if not over and not late
        else f"goal missed: memory on {over or 'none'}, first minute on {late or 'none'}",
    ]
    return SuiteResult(
        name="large-tables",
        title=f"large tables: ndvm discover on {rows_per_table:,} rows, memory and first calibration",
        columns=["table", "rows", "peak RSS GiB", "first calibration s", "calibrated", "seconds", "champion"],
        rows=rows,
        notes=notes,
        data={"results": results},
    )


__all__ = ["run_large_tables_suite", "write_tables", "TreeMemory"]
