"""The overhead of the meta-circular evaluator (:mod:`ndvm.metacircular`) over direct runs, on the
benchmark's regime programs: ``python -m ndvm_bench.metacircular`` (docs/metacircular.md)."""

from __future__ import annotations

import ndvm
from ndvm.metacircular import compile

# A deep tail loop (100,000 interpreted tail calls), measured beside the benchmark's regimes.
TAIL_LOOP_SOURCE = """\
(param a 1e-5)
(let loop ((i 0) (acc 0.0))
  (if (= i 100000) acc (loop (+ i 1) (+ acc a))))
"""


def measure_overhead(
    names: list[str] | None = None, lanes: int = 64, repeats: int = 200, spread: float = 0.1
) -> list[dict]:
    """Times ``value_and_grad`` at ``lanes`` lanes of each benchmark program (``ndvm_bench``'s
    regime programs) directly and through the evaluator: ``repeats`` calls after one warm-up
    call, alternating direct and meta-circular; the best call (the one least disturbed by other
    load on the machine) and the median. Each row also states that the values agree exactly
    and the worst relative gradient difference, so a fast but wrong tower cannot report an
    overhead."""
    import statistics
    import time

    import numpy as np

    from ndvm_bench.programs import PROGRAMS, REGIME_ORDER, BenchProgram

    programs = dict(PROGRAMS)
    programs["tail_loop_100k"] = BenchProgram("tail_loop_100k", "deep tail loop", TAIL_LOOP_SOURCE, {}, (1e-5,))

    def timed(fn) -> float:
        start = time.perf_counter()
        fn()
        return time.perf_counter() - start

    rows = []
    for name in names or REGIME_ORDER:
        bench = programs[name]
        theta = bench.theta_batch(lanes, spread)
        start = time.perf_counter()
        direct = ndvm.compile(bench.source)
        direct_compile = time.perf_counter() - start
        start = time.perf_counter()
        meta = compile(bench.source)
        meta_compile = time.perf_counter() - start
        values_direct, grads_direct = direct.value_and_grad(theta, inputs=bench.inputs)
        values_meta, grads_meta = meta.value_and_grad(theta, inputs=bench.inputs)
        scale = np.maximum(np.abs(grads_direct), np.finfo(float).tiny)
        run_direct = lambda: direct.value_and_grad(theta, inputs=bench.inputs)  # noqa: E731
        run_meta = lambda: meta.value_and_grad(theta, inputs=bench.inputs)  # noqa: E731
        direct_times, meta_times = [], []
        for _ in range(repeats):
            direct_times.append(timed(run_direct))
            meta_times.append(timed(run_meta))
        direct_s, meta_s = min(direct_times), min(meta_times)
        rows.append(
            {
                "program": name,
                "regime": bench.regime,
                "lanes": lanes,
                "direct_s": direct_s,
                "metacircular_s": meta_s,
                "overhead": meta_s / direct_s,
                "direct_median_s": statistics.median(direct_times),
                "metacircular_median_s": statistics.median(meta_times),
                "direct_compile_s": direct_compile,
                "metacircular_compile_s": meta_compile,
                "values_equal": bool(np.array_equal(values_direct, values_meta)),
                "max_grad_rel_diff": float(np.max(np.abs(grads_meta - grads_direct) / scale)),
            }
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    """``python -m ndvm_bench.metacircular``: prints the tower overhead table (and --json rows)."""
    import argparse
    import json

    parser = argparse.ArgumentParser(
        description="Overhead of the meta-circular evaluator on NDVM (value_and_grad, meta-circular vs direct)"
    )
    parser.add_argument("--lanes", type=int, nargs="+", default=[1, 64])
    parser.add_argument("--repeats", type=int, default=200)
    parser.add_argument(
        "--programs",
        nargs="+",
        default=None,
        help="ndvm_bench regime programs, or tail_loop_100k (default: the regimes)",
    )
    parser.add_argument("--json", default=None, help="also write the rows to this file")
    args = parser.parse_args(argv)
    rows = [row for lanes in args.lanes for row in measure_overhead(args.programs, lanes=lanes, repeats=args.repeats)]
    print(f"value_and_grad per call, best of {args.repeats} (median in parentheses)")
    print(
        f"{'program':<20} {'lanes':>5} {'direct':>20} {'meta-circular':>22} {'overhead':>9} "
        f"{'values':>7} {'grad rel diff':>14}"
    )
    for row in rows:
        direct = f"{row['direct_s'] * 1e6:.1f}us ({row['direct_median_s'] * 1e6:.1f})"
        meta = f"{row['metacircular_s'] * 1e6:.1f}us ({row['metacircular_median_s'] * 1e6:.1f})"
        print(
            f"{row['program']:<20} {row['lanes']:>5} {direct:>20} {meta:>22} {row['overhead']:>8.1f}x "
            f"{'equal' if row['values_equal'] else 'DIFFER':>7} {row['max_grad_rel_diff']:>14.1e}"
        )
    if args.json:
        with open(args.json, "w") as out:
            json.dump(rows, out, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
