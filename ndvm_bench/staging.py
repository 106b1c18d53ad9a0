"""Suite ``staging``: what a new program costs before its first gradient step.

NDVM compiles a program (source to executable) in microseconds; a staging framework traces and
compiles each new program (here JAX: ``jit(vmap(value_and_grad(f)))``). Per program the table
gives both costs, the steady-state time of one gradient step in each, and the crossover: the
number of gradient steps after which staging has paid for itself (never, when NDVM's step is
also faster). JAX is optional; without it the suite reports NDVM's compile times only.
"""

from __future__ import annotations

import math
import statistics

import numpy as np

from ndvm_bench.baselines import jax_baseline
from ndvm_bench.common import BenchConfig, SuiteResult, SuiteSkipped, fmt_num, fmt_time, require_ndvm, time_call
from ndvm_bench.programs import PROGRAMS, REGIME_ORDER


def crossover_steps(compile_ndvm: float, step_ndvm: float, stage_jax: float, step_jax: float) -> float | None:
    """Gradient steps n after which compile_ndvm + n step_ndvm > stage_jax + n step_jax; None: never."""
    if step_ndvm <= step_jax:
        return None
    return max(0.0, (stage_jax - compile_ndvm) / (step_ndvm - step_jax))


def run_staging(config: BenchConfig) -> SuiteResult:
    ndvm = require_ndvm("compile")
    rows, data, notes = [], {"programs": {}}, []

    # the compile-time target of the runtime issue: median over the co-search corpus
    try:
        from ndvm_bench.cosearch import load_task

        task = load_task(config)
    except SuiteSkipped as e:
        task = None
        notes.append(str(e))
    if task is not None:
        sources = task.sources if not config.quick else task.sources[:50]
        times = [time_call(lambda s=s: ndvm.compile(s), min_time=0.0, min_reps=5).value for s in sources]
        data["corpus_compile_median_s"] = statistics.median(times)
        data["corpus_compile_p90_s"] = float(np.percentile(times, 90))
        data["corpus_programs"] = len(sources)
        notes.append(
            f"NDVM compile over {len(sources)} co-search candidates: median "
            f"{fmt_time(data['corpus_compile_median_s'])}, p90 {fmt_time(data['corpus_compile_p90_s'])} "
            "(target: median at most 20 µs)."
        )

    have_jax = jax_baseline.available()
    if not have_jax:
        notes.append("JAX is not installed: staging times skipped (pip install 'ndvm-discovery[jax]').")
    data["jax_available"] = have_jax

    cases = []
    for name in REGIME_ORDER:
        if config.quick and name == "kalman2d_T80":
            continue  # JAX unrolls the 80 steps: tens of seconds to stage
        p = PROGRAMS[name]
        cases.append((name, p.source, p.inputs, None))
    if task is not None:
        for i in range(config.pick(10, 3)):
            cases.append((f"cosearch[{i}]", task.sources[i], {"x": task.x_train}, task.y_train))

    for name, source, inputs, target in cases:
        entry = {}
        entry["ndvm_compile_s"] = time_call(
            lambda: ndvm.compile(source), min_time=config.pick(0.2, 0.02), min_reps=5
        ).value
        prog = ndvm.compile(source)
        theta = np.array([[p.init for p in prog.params]])
        if target is None:
            step = time_call(lambda: prog.value_and_grad(theta, inputs=inputs), min_time=config.pick(0.5, 0.05)).value
        else:  # vector-valued model: the MSE gradient step inside the native calibration loop
            steps = 50
            # Adam with no stopping rule runs exactly `steps` evaluations, so t / steps is one step
            t = time_call(
                lambda: ndvm.calibrate(
                    prog,
                    inputs,
                    target=target,
                    loss="mse",
                    optimizer="adam",
                    steps=steps,
                    lr=0.05,
                    restarts=1,
                    threads=1,
                    gtol=0,
                ),
                min_time=config.pick(0.5, 0.05),
            ).value
            step = t / steps
        entry["ndvm_step_s"] = step
        entry["jax_stage_s"] = entry["jax_step_s"] = entry["crossover_steps"] = None
        if have_jax:
            staged = jax_baseline.stage(source, inputs, target)
            staged.value_and_grad(theta)
            entry["jax_stage_s"] = staged.staging_seconds
            entry["jax_step_s"] = time_call(lambda: staged.value_and_grad(theta), min_time=config.pick(0.5, 0.05)).value
            entry["crossover_steps"] = crossover_steps(
                entry["ndvm_compile_s"], step, entry["jax_stage_s"], entry["jax_step_s"]
            )
        data["programs"][name] = entry
        cross = entry["crossover_steps"]
        rows.append(
            [
                name,
                fmt_time(entry["ndvm_compile_s"]),
                fmt_time(entry["jax_stage_s"]),
                fmt_time(step),
                fmt_time(entry["jax_step_s"]),
                ("never" if cross is None else fmt_num(math.ceil(cross))) if have_jax else "—",
            ]
        )
    notes += [
        "Gradient step: one value-and-gradient at B=1 (regime programs, through the Python API) or one Adam step "
        "on the training MSE inside ndvm.calibrate (co-search candidates); JAX: one call of the staged function.",
        "crossover: gradient steps after which JAX's staging is repaid by faster steps ('never' when NDVM's step "
        "is not slower).",
    ]
    return SuiteResult(
        "staging",
        "Per new program: NDVM compile vs JAX staging",
        ["program", "NDVM compile", "JAX staging", "NDVM step", "JAX step", "crossover (steps)"],
        rows,
        notes,
        data,
    )


__all__ = ["crossover_steps", "run_staging"]
