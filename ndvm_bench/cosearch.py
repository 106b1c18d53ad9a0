"""Suites ``cosearch`` and ``multicore``: replay of LLM-proposed candidates through calibration.

The task (the calibration issue's co-search replay): the 247 closed-form candidates of
``ndvm_corpora/cosearch_candidates_valid.jsonl`` (parameters among ``a b c d``, input ``x``),
target y = exp(-0.3 x) cos(2 x) + 0.02 N(0, 1) on 64 points of [0.1, 6], a random 70/30 split
(seed 0), 50 Adam steps at lr 0.05 on the training MSE from inits 0.3 N(0, 1); a candidate
succeeds when its held-out R^2 exceeds 0.9.
"""

from __future__ import annotations

import json
import math
import os
import time
from dataclasses import dataclass

import numpy as np

from ndvm_bench.baselines import tagged
from ndvm_bench.baselines.calibrate import calibrate as baseline_calibrate
from ndvm_bench.baselines.calibrate import warm_up
from ndvm_bench.common import (
    BenchConfig,
    SuiteResult,
    SuiteSkipped,
    find_data_dir,
    fmt_num,
    fmt_ratio,
    fmt_time,
    ratio,
    require_ndvm,
)

STEPS, LR, SUCCESS_R2 = 50, 0.05, 0.9
# How every candidate is fitted, in the sequential loop and in the batched one alike.
FIT_OPTIONS = dict(loss="mse", optimizer="adam", steps=STEPS, lr=LR, restarts=1)


@dataclass
class CosearchTask:
    sources: list[str]
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray


def load_task(config: BenchConfig, seed: int = 0) -> CosearchTask:
    data = find_data_dir(config)
    path = data / "ndvm_corpora" / "cosearch_candidates_valid.jsonl" if data else None
    if path is None or not path.exists():
        raise SuiteSkipped(
            "the co-search corpus (ndvm_corpora/cosearch_candidates_valid.jsonl) was not found; "
            "set NDVM_SHARED_DATA to the shared data folder"
        )
    rng = np.random.default_rng(seed)
    x = np.linspace(0.1, 6.0, 64)
    y = np.exp(-0.3 * x) * np.cos(2.0 * x) + 0.02 * rng.normal(size=64)
    perm = rng.permutation(64)
    n_train = round(0.7 * 64)
    tr, te = np.sort(perm[:n_train]), np.sort(perm[n_train:])
    sources = []
    for i, line in enumerate(path.read_text().splitlines()):
        cand = json.loads(line)
        inits = 0.3 * np.random.default_rng([seed, i]).normal(size=len(cand["params"]))
        decls = "".join(f"(param {name} {float(v)!r})\n" for name, v in zip(cand["params"], inits))
        sources.append(decls + cand["src"] + "\n")
    return CosearchTask(sources, x[tr], y[tr], x[te], y[te])


def r_squared(pred, y) -> float:
    pred = np.asarray(pred, dtype=np.float64).reshape(-1)
    if pred.shape != y.shape or not np.all(np.isfinite(pred)):
        return -math.inf
    ss_res = float(np.sum((y - pred) ** 2))
    ss_tot = float(np.sum((y - y.mean()) ** 2))
    return 1.0 - ss_res / ss_tot


def replay_ndvm(task: CosearchTask, budget_s: float = math.inf) -> dict:
    """Calibrate candidates one after another (compile included), as a search loop would."""
    ndvm = require_ndvm("compile", "calibrate")
    t0 = time.perf_counter()
    first_success, best, done, failed = None, -math.inf, 0, 0
    for src in task.sources:
        if time.perf_counter() - t0 > budget_s:
            break
        try:
            prog = ndvm.compile(src)
            fit = ndvm.calibrate(
                prog,
                {"x": task.x_train},
                target=task.y_train,
                threads=1,
                **FIT_OPTIONS,
            )
            r2 = r_squared(fit.predict({"x": task.x_test}), task.y_test) if fit.error is None else -math.inf
        except ndvm.NDVMError:
            r2 = -math.inf
        done += 1
        failed += r2 == -math.inf
        best = max(best, r2)
        if first_success is None and r2 > SUCCESS_R2:
            first_success = time.perf_counter() - t0
    total = time.perf_counter() - t0
    return {
        "calibrations": done,
        "failed": failed,
        "seconds": total,
        "per_second": done / total,
        "first_success_s": first_success,
        "best_r2": best,
    }


def replay_tagged(task: CosearchTask, budget_s: float) -> dict:
    """The same replay through the tagged baseline, stopped after ``budget_s`` seconds."""
    warm_up()
    t0 = time.perf_counter()
    first_success, best, done, failed = None, -math.inf, 0, 0
    for src in task.sources:
        if time.perf_counter() - t0 > budget_s:
            break
        prog = tagged.compile(src)
        fit = baseline_calibrate(prog, {"x": task.x_train}, target=task.y_train, loss="mse", steps=STEPS, lr=LR)
        r2 = -math.inf
        if fit.error is None:
            theta = np.array([[fit.params[n] for n in prog.param_names]])
            r2 = r_squared(prog.evaluate(theta, {"x": task.x_test}), task.y_test)
        done += 1
        failed += r2 == -math.inf
        best = max(best, r2)
        if first_success is None and r2 > SUCCESS_R2:
            first_success = time.perf_counter() - t0
    total = time.perf_counter() - t0
    return {
        "calibrations": done,
        "failed": failed,
        "seconds": total,
        "per_second": done / total,
        "first_success_s": first_success,
        "best_r2": best,
    }


def run_cosearch(config: BenchConfig) -> SuiteResult:
    task = load_task(config)
    # the NDVM replay takes a fraction of a second: run it a few times and keep the fastest pass
    ndvm_res = min((replay_ndvm(task) for _ in range(config.pick(3, 1))), key=lambda r: r["seconds"])
    tagged_budget = config.pick(60.0, 5.0)
    tagged_res = replay_tagged(task, tagged_budget)
    rows = []
    for name, res in (("NDVM", ndvm_res), ("tagged", tagged_res)):
        rows.append(
            [
                name,
                res["calibrations"],
                fmt_time(res["seconds"]),
                fmt_num(res["per_second"]),
                fmt_time(res["first_success_s"]) if res["first_success_s"] is not None else "not reached",
                fmt_num(res["best_r2"]),
            ]
        )
    speed = ratio(ndvm_res["per_second"], tagged_res["per_second"])
    rows.append(["NDVM/tagged", "", "", fmt_ratio(speed), "", ""])
    notes = [
        f"{len(task.sources)} candidates, {len(task.x_train)} training / {len(task.x_test)} held-out points, "
        f"{STEPS} Adam steps at lr {LR}, one restart, one thread; times include compiling each candidate; "
        f"NDVM: the fastest of {config.pick(3, 1)} passes.",
        f"The tagged baseline replays candidates in the same order for a budget of {tagged_budget:.0f} s; "
        "its 'first R^2 > 0.9' and 'best R^2' are within that budget.",
        "Targets (calibration issue): at least 500 calibrations per second per core; first success under 1 s.",
    ]
    return SuiteResult(
        "cosearch",
        "Co-search replay (247 LLM-proposed candidates)",
        ["runtime", "calibrations", "time", "calibrations/s", "first R^2>0.9", "best R^2"],
        rows,
        notes,
        {"ndvm": ndvm_res, "tagged": tagged_res, "ndvm_over_tagged": speed},
    )


def run_multicore(config: BenchConfig) -> SuiteResult:
    ndvm = require_ndvm("compile", "calibrate_many")
    task = load_task(config)
    repeat = config.pick(8, 1)
    programs = [ndvm.compile(s) for s in task.sources] * repeat
    cores = os.cpu_count() or 1
    counts = sorted({1, 2, cores} | {c for c in (4, 8, 16, 32) if c <= cores})
    counts = [c for c in counts if c <= cores]
    rows, data, reference = [], {}, None
    base_time = None
    for threads in counts:
        runs, fits = [], None
        for _ in range(config.pick(3, 1)):
            c0, t0 = os.times(), time.perf_counter()
            fits = ndvm.calibrate_many(
                programs,
                {"x": task.x_train},
                target=task.y_train,
                threads=threads,
                **FIT_OPTIONS,
            )
            wall, c1 = time.perf_counter() - t0, os.times()
            runs.append((wall, (c1.user - c0.user) + (c1.system - c0.system)))
        t, cpu = min(runs)  # best of the runs: the load of other processes only adds time
        losses = np.array([f.loss if f.error is None else np.nan for f in fits])
        if reference is None:
            reference, base_time = losses, t
        identical = bool(np.array_equal(losses, reference, equal_nan=True))
        speedup = base_time / t
        # CPU seconds per wall second: how many cores the process actually obtained. At 2 threads a
        # value near 1 means the machine was too busy to give it a second core.
        data[threads] = {
            "seconds": t,
            "cpu_seconds": cpu,
            "cores_obtained": cpu / t,
            "calibrations_per_s": len(programs) / t,
            "speedup": speedup,
            "identical_to_1_thread": identical,
        }
        rows.append(
            [
                threads,
                len(programs),
                fmt_time(t),
                fmt_num(len(programs) / t),
                fmt_ratio(speedup),
                f"{speedup / threads:.0%}",
                f"{cpu / t:.2f}",
                "yes" if identical else "NO",
            ]
        )
    notes = [
        f"calibrate_many over the co-search corpus x{repeat} ({len(programs)} calibrations, 50 Adam steps each); "
        f"machine has {cores} cores; best of {config.pick(3, 1)} runs.",
        "identical: the final losses equal the 1-thread run bit for bit. cores obtained: process CPU "
        "seconds / wall seconds (below the thread count when other processes hold the cores).",
        "Target (calibration issue): at least 1.8x on 2 cores.",
    ]
    return SuiteResult(
        "multicore",
        "calibrate_many scaling with threads",
        ["threads", "calibrations", "time", "calibrations/s", "speedup", "efficiency", "cores obtained", "identical"],
        rows,
        notes,
        data,
    )


__all__ = ["CosearchTask", "load_task", "r_squared", "replay_ndvm", "replay_tagged", "run_cosearch", "run_multicore"]
