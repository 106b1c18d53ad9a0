"""Suite ``calibration``: Kalman maximum likelihood, calibrations per core-hour.

Protocol (calibration issue): the ``kalman2d_T80`` program, ``loss="value"`` (the program returns
its negative log-likelihood), 30 Adam steps at lr 0.08 from q = r = 0.3, one thread. NDVM runs the
fused native loop at restarts = 1, 32 and 256 (a restart is a lane; lane-calibrations are counted).
The tagged and eager baselines run the same loop with torch Adam; the tagged one is too slow to
run 30 steps inside the benchmark's time budget, so it runs a few steps and its rate is
extrapolated linearly in the number of steps (each step costs one value and gradient), which the
table says.
"""

from __future__ import annotations

import time

from ndvm_bench.baselines import eager, tagged
from ndvm_bench.baselines.calibrate import calibrate as baseline_calibrate
from ndvm_bench.baselines.calibrate import warm_up
from ndvm_bench.common import BenchConfig, SuiteResult, fmt_num, fmt_ratio, fmt_time, ratio, require_ndvm, time_call
from ndvm_bench.programs import PROGRAMS

STEPS, LR = 30, 0.08


def run_calibration(config: BenchConfig) -> SuiteResult:
    ndvm = require_ndvm("compile", "calibrate")
    p = PROGRAMS["kalman2d_T80"]
    prog = ndvm.compile(p.source)
    rows, data = [], {}
    restarts_list = config.pick([1, 32, 256], [1, 32])
    for R in restarts_list:
        fits = []

        def once():
            fits.append(
                ndvm.calibrate(
                    prog, p.inputs, loss="value", optimizer="adam", steps=STEPS, lr=LR, restarts=R, seed=0, threads=1
                )
            )

        t = time_call(once, min_time=config.pick(2.0, 0.2), min_reps=3).value
        per_hour = R * 3600.0 / t
        fit = fits[-1]
        data[f"ndvm_restarts_{R}"] = {
            "seconds": t,
            "lane_calibrations_per_core_hour": per_hour,
            "loss": fit.loss,
            "params": fit.params,
        }
        rows.append([f"NDVM, restarts={R}", fmt_time(t), fmt_num(per_hour), fmt_num(fit.loss), "measured"])

    # eager baseline: the whole 30-step loop, measured
    warm_up()
    e_prog = eager.compile(p.source)
    e_fit = baseline_calibrate(e_prog, p.inputs, loss="value", steps=STEPS, lr=LR)
    data["eager"] = {"seconds": e_fit.seconds, "calibrations_per_core_hour": 3600.0 / e_fit.seconds, "loss": e_fit.loss}
    rows.append(
        [
            "eager (torch Adam)",
            fmt_time(e_fit.seconds),
            fmt_num(3600.0 / e_fit.seconds),
            fmt_num(e_fit.loss),
            "measured",
        ]
    )

    # tagged baseline: a few steps, extrapolated to 30
    measured_steps = config.pick(3, 1)
    t_prog = tagged.compile(p.source)
    t0 = time.perf_counter()
    t_fit = baseline_calibrate(t_prog, p.inputs, loss="value", steps=measured_steps, lr=LR)
    per_step = (time.perf_counter() - t0) / measured_steps
    t_cal = per_step * STEPS
    data["tagged"] = {
        "measured_steps": measured_steps,
        "seconds_per_step": per_step,
        "seconds_per_calibration_extrapolated": t_cal,
        "calibrations_per_core_hour": 3600.0 / t_cal,
        "first_losses": t_fit.history.tolist(),
    }
    rows.append(
        [
            "tagged (torch Adam)",
            fmt_time(t_cal),
            fmt_num(3600.0 / t_cal),
            "—",
            f"extrapolated from {measured_steps} step(s)",
        ]
    )
    # agreement of the baselines' first steps with NDVM's optimizer is not required (different Adam
    # implementations); the value at the start is: all start from the same NLL.
    ndvm1 = data[f"ndvm_restarts_{restarts_list[0]}"]["lane_calibrations_per_core_hour"]
    speedup = ratio(ndvm1, data["tagged"]["calibrations_per_core_hour"])
    data["ndvm_over_tagged_restarts_1"] = speedup
    data["ndvm_over_eager_restarts_1"] = ratio(ndvm1, data["eager"]["calibrations_per_core_hour"])
    rows.append(["NDVM (restarts=1) / tagged", "", fmt_ratio(speedup), "", ""])
    rows.append(["NDVM (restarts=1) / eager", "", fmt_ratio(data["ndvm_over_eager_restarts_1"]), "", ""])
    notes = [
        f"kalman2d_T80 MLE, {STEPS} Adam steps at lr {LR} from q = r = 0.3, one thread; per core-hour = "
        "restarts x 3600 s / seconds per calibrate call (NDVM: best of repeated calls).",
        "Targets: NDVM at least 1,400,000 per core-hour at restarts=1 (published native interpreter: "
        "138,769 on a faster processor); NDVM at least 10,000x tagged.",
        "The baselines' Adam is torch.optim.Adam over softplus-unconstrained q, r; final losses can differ in "
        "the last digits from NDVM's native Adam.",
    ]
    return SuiteResult(
        "calibration",
        "Kalman MLE calibrations per core-hour",
        ["runtime", "time per calibration", "calibrations / core-hour", "final NLL", "how"],
        rows,
        notes,
        data,
    )


__all__ = ["run_calibration"]
