"""Per-element cost of the vector math's ops in the VM's kernels, one lane.

    python scripts/bench_vecmath.py [out.json]       # NDVM_ISA=avx2 (etc.) to force a set

The best time of ``(op x)`` over a data vector of N points minus the best time of ``(abs x)`` (or
``(+ x y)``) on the same points, the call, allocation and conversion overhead, in ns per element.
Run it with two builds' interpreters, back to back, to compare them (BENCHMARKS.md, "expt, tan and
the inverse trigonometric functions off libm").
"""

import json
import sys
import time

import numpy as np

import ndvm
from ndvm import _native

N = 8192
R = 400
rng = np.random.default_rng(0)
x_pos = rng.uniform(0.01, 100.0, N)
cases = {
    "expt x^y (y per element)": ("(expt x y)", {"x": x_pos, "y": rng.uniform(-3, 3, N)}),
    "expt x^2.5 (broadcast y)": ("(expt x 2.5)", {"x": x_pos}),
    "expt x^2 (integer y)": ("(expt x 2.0)", {"x": x_pos}),
    "tan": ("(tan x)", {"x": rng.uniform(-1.5, 1.5, N)}),
    "atan": ("(atan x)", {"x": rng.uniform(-10, 10, N)}),
    "asin": ("(asin x)", {"x": rng.uniform(-1, 1, N)}),
    "acos": ("(acos x)", {"x": rng.uniform(-1, 1, N)}),
    "atan2": ("(atan x y)", {"x": rng.uniform(-10, 10, N), "y": rng.uniform(-10, 10, N)}),
    "exp (reference)": ("(exp x)", {"x": rng.uniform(-10, 10, N)}),
}
th = np.zeros((1, 0))


def best(src, inputs):
    p = ndvm.compile(src)
    p.evaluate(th, inputs)
    b = 1e9
    for _ in range(R):
        t0 = time.perf_counter()
        p.evaluate(th, inputs)
        b = min(b, time.perf_counter() - t0)
    return b


out = {"isa": _native.isa(), "N": N, "loadavg": open("/proc/loadavg").read().split()[:3], "ns_per_element": {}}
for name, (src, inputs) in cases.items():
    over1 = best("(abs x)", inputs) if "y" not in inputs else best("(+ x y)", inputs)
    t = best(src, inputs)
    ns = (t - over1) / N * 1e9
    out["ns_per_element"][name] = ns
    print(
        f"{name:28s} {ns:7.2f} ns/element  ({1e3 / ns:7.1f} M/s; call {t * 1e6:.1f} us, overhead {over1 * 1e6:.1f} us)",
        flush=True,
    )
if len(sys.argv) > 1:
    json.dump(out, open(sys.argv[1], "w"), indent=1)
