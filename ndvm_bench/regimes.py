"""Suites ``regimes`` and ``amortization``: value-and-gradient time per program and per lane."""

from __future__ import annotations

import numpy as np

from ndvm_bench import compiled
from ndvm_bench.baselines import eager, tagged
from ndvm_bench.common import BenchConfig, SuiteResult, fmt_ratio, fmt_time, ratio, require_ndvm, time_call
from ndvm_bench.programs import PROGRAMS, REGIME_ORDER


def _max_rel_diff(a: np.ndarray, b: np.ndarray) -> float:
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(np.max(np.abs(a - b) / np.maximum(1.0, np.abs(b))))


def run_regimes(config: BenchConfig) -> SuiteResult:
    ndvm = require_ndvm("compile")
    rows, data, notes = [], {}, []
    for name in REGIME_ORDER:
        p = PROGRAMS[name]
        theta = p.theta_batch(1)
        heavy = name == "kalman2d_T80"
        entry: dict = {}
        prog = ndvm.compile(p.source)
        t_prog, e_prog = tagged.compile(p.source), eager.compile(p.source)
        ref_v, ref_g = prog.value_and_grad(theta, inputs=p.inputs)
        # every baseline must agree with NDVM before its time means anything
        agree = 0.0
        for other in (t_prog, e_prog):
            v, g = other.value_and_grad(theta, p.inputs)
            agree = max(agree, _max_rel_diff(v, ref_v), _max_rel_diff(g, ref_g))
        entry["max_rel_diff_vs_ndvm"] = agree

        entry["tagged"] = time_call(
            lambda: t_prog.value_and_grad(theta, p.inputs),
            min_time=config.pick(3.0 if heavy else 1.0, 0.0),
            max_reps=config.pick(20, 1 if heavy else 3),
            min_reps=config.pick(3, 1),
            warmup=config.pick(1, 0 if heavy else 1),
        )
        entry["eager"] = time_call(
            lambda: e_prog.value_and_grad(theta, p.inputs), min_time=config.pick(1.0, 0.1), min_reps=3
        )
        entry["ndvm"] = time_call(
            lambda: prog.value_and_grad(theta, inputs=p.inputs), min_time=config.pick(1.0, 0.1), min_reps=5
        )
        walker = ndvm.compile(p.source, limits=ndvm.Limits(replay=False))
        entry["ndvm_walked"] = time_call(
            lambda: walker.value_and_grad(theta, inputs=p.inputs), min_time=config.pick(1.0, 0.1), min_reps=5
        )
        entry["compiled_s"] = None
        if heavy:
            try:
                out = compiled.run_kalman(p.inputs["ys"], theta, min_seconds=config.pick(0.5, 0.05))
                entry["compiled_s"] = out["best_seconds_per_call"]
                agree_c = max(_max_rel_diff(out["values"], ref_v), _max_rel_diff(out["grads"], ref_g))
                entry["compiled_max_rel_diff_vs_ndvm"] = agree_c
            except compiled.CompiledUnavailable as e:
                notes.append(f"compiled baseline skipped: {e}")
        t_t, t_e, t_n, t_c = (entry["tagged"].value, entry["eager"].value, entry["ndvm"].value, entry["compiled_s"])
        entry["tagged_over_eager"] = ratio(t_t, t_e)
        entry["eager_over_ndvm"] = ratio(t_e, t_n)
        entry["tagged_over_ndvm"] = ratio(t_t, t_n)
        entry["ndvm_over_compiled"] = ratio(t_n, t_c)
        worst = max(agree, entry.get("compiled_max_rel_diff_vs_ndvm", 0.0))
        if worst > 1e-10:
            notes.append(
                f"WARNING: {name}: a baseline differs from NDVM by {worst:.1e} (relative); "
                "its time is not comparable until that is fixed."
            )
        data[name] = entry
        rows.append(
            [
                name,
                p.regime,
                fmt_time(t_t),
                fmt_time(t_e),
                fmt_time(t_n),
                fmt_time(entry["ndvm_walked"].value),
                fmt_time(t_c),
                fmt_ratio(entry["tagged_over_eager"]),
                fmt_ratio(entry["eager_over_ndvm"]),
                fmt_ratio(entry["ndvm_over_compiled"]),
                fmt_ratio(entry["tagged_over_ndvm"]),
                f"{agree:.1e}",
            ]
        )
    notes += [
        "Times: best of repeated samples of one value-and-gradient call at B=1 (float64), one thread "
        "(medians in the JSON); the tagged baseline gets few repetitions.",
        "tagged/eager: the representation alone (same evaluator); eager/NDVM: native execution; "
        "NDVM/compiled: distance to the hand-written C++ ceiling (kalman2d_T80 only).",
        "NDVM times include the Python call boundary (argument checks, array conversion); the compiled time does not.",
        "NDVM: a repeated call, replayed from the recorded tape (as in calibration, where every step evaluates "
        "the same program again); NDVM walked: Limits(replay=False), every call walks the program (a first "
        "evaluation). Ratios use the replayed time.",
        "agree: max relative difference of values and gradients of tagged and eager against NDVM.",
    ]
    if config.quick:
        notes.append("--quick: the tagged baseline ran once per program (kalman2d_T80 without warm-up).")
    return SuiteResult(
        "regimes",
        "Value and gradient per program (B=1)",
        [
            "program",
            "regime",
            "tagged",
            "eager",
            "NDVM",
            "NDVM walked",
            "compiled",
            "tagged/eager",
            "eager/NDVM",
            "NDVM/compiled",
            "tagged/NDVM",
            "agree",
        ],
        rows,
        notes,
        data,
    )


AMORTIZATION_BATCHES = [1, 4, 16, 64, 256, 1024]


def run_amortization(config: BenchConfig) -> SuiteResult:
    ndvm = require_ndvm("compile")
    batches = config.pick(AMORTIZATION_BATCHES, [1, 16, 256])
    rows, data = [], {}
    for name in ("kalman2d_T80", "logistic_map_loop"):
        p = PROGRAMS[name]
        prog = ndvm.compile(p.source)
        e_prog, t_prog = eager.compile(p.source), tagged.compile(p.source)
        per_prog = {}
        for B in batches:
            theta = p.theta_batch(B, spread=0.1)
            heavy = name == "kalman2d_T80"
            entry = {"B": B}
            entry["ndvm"] = time_call(
                lambda: prog.value_and_grad(theta, inputs=p.inputs), min_time=config.pick(0.5, 0.05), min_reps=3
            ).value
            entry["eager"] = time_call(
                lambda: e_prog.value_and_grad(theta, p.inputs),
                min_time=config.pick(0.5, 0.0),
                min_reps=config.pick(3, 1),
            ).value
            run_tagged = not heavy or (not config.quick and B in (1, 1024))
            entry["tagged"] = (
                time_call(
                    lambda: t_prog.value_and_grad(theta, p.inputs), min_time=0.0, min_reps=config.pick(2, 1), warmup=0
                ).value
                if run_tagged
                else None
            )
            entry["compiled"] = None
            if heavy:
                try:
                    entry["compiled"] = compiled.run_kalman(p.inputs["ys"], theta, min_seconds=config.pick(0.3, 0.05))[
                        "best_seconds_per_call"
                    ]
                except compiled.CompiledUnavailable:
                    pass
            per_lane = {
                k: (entry[k] / B if entry[k] is not None else None) for k in ("tagged", "eager", "ndvm", "compiled")
            }
            entry["per_lane"] = per_lane
            entry["ndvm_over_compiled"] = ratio(per_lane["ndvm"], per_lane["compiled"])
            per_prog[B] = entry
            rows.append(
                [
                    name,
                    B,
                    fmt_time(per_lane["tagged"]),
                    fmt_time(per_lane["eager"]),
                    fmt_time(per_lane["ndvm"]),
                    fmt_time(per_lane["compiled"]),
                    fmt_ratio(entry["ndvm_over_compiled"]),
                ]
            )
        data[name] = per_prog
    notes = [
        "Per-lane time = best time of one batched value-and-gradient call / B; lanes have distinct parameters "
        "(theta scaled by 0.9..1.1).",
        "The tagged baseline's kalman2d_T80 runs only at B=1 and B=1024 (seconds per call); '—' elsewhere.",
        "Target (runtime issue): NDVM per lane at B=256 at most 2x the compiled C++.",
    ]
    return SuiteResult(
        "amortization",
        "Per-lane value-and-gradient time vs batch width B",
        ["program", "B", "tagged", "eager", "NDVM", "compiled", "NDVM/compiled"],
        rows,
        notes,
        data,
    )


__all__ = ["run_amortization", "run_regimes"]
