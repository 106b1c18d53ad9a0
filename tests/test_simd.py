"""The SIMD elementwise kernels (native/src/simd.h, kernels_simd.inc) under every instruction set
this CPU runs, chosen with NDVM_ISA in a subprocess each:

- B lanes equal B one-lane runs bit for bit (values, losses and gradients) on programs that use
  every vectorized operation (+ - * / expt and two-argument atan, negation, abs square sqrt exp log
  sin cos tan asin acos atan tanh sigmoid softplus; expt with a parameter in the exponent and in
  the base, so both of its adjoints) in every stride pattern (a per-lane scalar against a shared data vector, per-lane data
  vectors, shared vectors, scalars), over 1,003 points: a length that leaves a scalar tail after
  the vector body at every vector width, and a remainder in the blocked sums of broadcast
  parameters' adjoints;
- the instruction sets agree with each other bit for bit (no FMA contraction, one operation order);
- NDVM_ISA: an unknown name fails with a message naming the variable and the supported sets, and
  ``ndvm version`` prints the set in use.
"""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

import ndvm

# Every vectorized op; x: a per-lane scalar times a shared vector (the symbolic-regression
# pattern), y: per-lane data (lane_inputs u) plus shared data, q: a per-lane scalar.
PROGRAM = """
(param a 0.5) (param b 0.3) (param c 1.2) (param d 0.7)
(define x (* a t))
(define y (+ (* b u) t))
(define q (/ (* a c) (- d 3.0)))
(vsum (+ (exp (- x)) (log (+ 1.5 (sin y))) (cos (* c t)) (tanh (/ x (+ 1 (square y))))
         (sigmoid (- y c)) (softplus (* d u)) (sqrt (+ 0.1 (abs y))) (expt (+ 2 (square x)) d)
         (- (- x) y) (* q (exp (* d (sin x)))) (softplus q)
         (tan (* 0.1 y)) (asin (* 0.5 (tanh x))) (acos (* 0.9 (sin y))) (atan (* c y)) (atan y (- x 2.5))
         (expt (+ 1.5 (sin y)) (- 3.0 b)) (expt (+ 0.5 (square a)) 2.5) (expt (+ 3.5 t) -1.5)))
"""
# The symbolic-regression form through calibrate's loss: a prediction against a target (mse).
SKELETON = "(param p0 1.0) (param p1 0.2) (param p2 2.0) (param p3 0.1)\n(+ (* p0 (exp (- (* p1 t))) (cos (+ (* p2 t) p3))) 0.5)"

N_POINTS = 1003
LANE_COUNTS = (5, 16)

_CHILD = r"""
import hashlib, json, sys
import numpy as np
import ndvm
from ndvm import _native
program, skeleton, n_points, lane_counts = json.loads(sys.argv[1])
rng = np.random.default_rng(7)
t = np.linspace(-3.0, 9.0, n_points)
target = np.cos(t) + 0.1 * rng.standard_normal(n_points)
prog, sk = ndvm.compile(program), ndvm.compile(skeleton)
digest = hashlib.sha256()
mismatches = []
for B in lane_counts:
    theta = 1.0 + 0.3 * rng.standard_normal((B, 4))
    u = rng.uniform(-2.0, 2.0, (B, n_points))
    values, grads = prog.value_and_grad(theta, {"t": t}, lane_inputs={"u": u})
    losses, lgrads = sk.loss_and_grad(theta, {"t": t}, target)
    for lane in range(B):
        v1, g1 = prog.value_and_grad(theta[lane : lane + 1], {"t": t}, lane_inputs={"u": u[lane : lane + 1]})
        l1, lg1 = sk.loss_and_grad(theta[lane : lane + 1], {"t": t}, target)
        for what, many, one in (("value", values[lane], v1[0]), ("grad", grads[lane], g1[0]),
                                ("loss", losses[lane], l1[0]), ("loss grad", lgrads[lane], lg1[0])):
            if not np.array_equal(np.asarray(many), np.asarray(one)):
                mismatches.append(f"B={B} lane {lane} {what}: {many!r} vs one-lane {one!r}")
    for a in (values, grads, losses, lgrads):
        assert np.all(np.isfinite(a)), "the test program must stay finite"
        digest.update(np.ascontiguousarray(a).tobytes())
print(json.dumps({"isa": _native.isa(), "digest": digest.hexdigest(), "mismatches": mismatches}))
"""


def _run_child(isa: str) -> dict:
    env = {**os.environ, "NDVM_ISA": isa}
    args = json.dumps([PROGRAM, SKELETON, N_POINTS, list(LANE_COUNTS)])
    out = subprocess.run([sys.executable, "-c", _CHILD, args], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_lanes_equal_one_lane_runs_under_every_instruction_set():
    isas = ndvm.build_info()["isas"]
    assert isas[0] == "baseline"
    results = {isa: _run_child(isa) for isa in isas}
    for isa, r in results.items():
        assert r["isa"] == isa
        assert not r["mismatches"], f"{isa}: {len(r['mismatches'])} lanes differ; first: {r['mismatches'][0]}"
    digests = {isa: r["digest"] for isa, r in results.items()}
    assert len(set(digests.values())) == 1, f"the instruction sets disagree: {digests}"


def test_in_process_isa_is_the_best_supported_unless_forced():
    info = ndvm.build_info()
    forced = os.environ.get("NDVM_ISA")
    assert info["isa"] == (forced or info["isas"][-1])
    assert ndvm._native.isa() == info["isa"]


def test_unknown_isa_is_a_clear_error():
    env = {**os.environ, "NDVM_ISA": "sse9"}
    out = subprocess.run([sys.executable, "-c", "import ndvm._native"], env=env, capture_output=True, text=True)
    assert out.returncode != 0
    assert "NDVM_ISA='sse9' is not an instruction set: expected baseline, avx2 or avx512" in out.stderr
    assert "this CPU supports baseline" in out.stderr


def test_version_prints_the_instruction_set():
    for isa in ndvm.build_info()["isas"]:
        env = {**os.environ, "NDVM_ISA": isa}
        out = subprocess.run(
            [sys.executable, "-m", "ndvm.cli", "version"], env=env, capture_output=True, text=True, timeout=60
        )
        assert out.returncode == 0, out.stderr
        assert f"instruction set of the kernels: {isa} (this CPU runs " in out.stdout


@pytest.mark.parametrize("n", [1, 2, 7, 8, 9, 17, 1003])
def test_broadcast_parameter_adjoint_sums_in_blocked_order(n):
    """The adjoint of a parameter broadcast over n points is the sum of n contributions in eight
    interleaved partial sums (element i into sum i mod 8), added pairwise: pinned against numpy
    in that order, bit for bit, one lane and lanes alike."""
    rng = np.random.default_rng(n)
    t = rng.uniform(-2.0, 2.0, n)
    prog = ndvm.compile("(param a 0.5) (vsum (* a t))")
    theta = rng.normal(size=(3, 1))
    _, grads = prog.value_and_grad(theta, {"t": t})
    acc = np.zeros(8)
    for i in range(n):
        acc[i % 8] += 1.0 * t[i]  # the cotangent of every point is 1
    want = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]))
    want = 0.0 + want
    for lane in range(3):
        assert grads[lane, 0] == want
        _, g1 = prog.value_and_grad(theta[lane : lane + 1], {"t": t})
        assert g1[0, 0] == want


def test_new_vector_math_in_tiled_replay_equals_whole_vector_replay():
    """expt, two-argument atan, tan, asin, acos and atan in a point-wise tape: the tiled replay
    (which takes atan2 records now that the SIMD kernels compute them) gives the bits of the
    whole-vector replay, and each lane those of its one-lane run."""
    t = np.linspace(0.1, 5.0, 3001)
    target = np.sin(t)
    source = (
        "(param a 0.5) (param b 1.3) (param c 0.2)\n"
        "(+ (* a (atan (* b t) (+ 1 c))) (expt (+ 0.5 t) b) (tan (* c t)) (asin (* 0.1 (tanh (* a t))))"
        " (atan (* c t)) (acos (* 0.1 (sin t))))"
    )
    tiled = ndvm.compile(source, limits=ndvm.Limits(tiled=True))
    whole = ndvm.compile(source, limits=ndvm.Limits(tiled=False))
    before = ndvm._native.tiled_replay_count()
    for lanes in (1, 8):
        theta = np.array([0.5, 1.3, 0.2]) * np.linspace(0.9, 1.1, lanes)[:, None]
        for _ in range(3):  # the first call walks, the next ones replay
            loss_t, grad_t = tiled.loss_and_grad(theta, {"t": t}, target)
            loss_w, grad_w = whole.loss_and_grad(theta, {"t": t}, target)
        assert np.array_equal(loss_t, loss_w) and np.array_equal(grad_t, grad_w)
        for lane in range(lanes):
            loss_1, grad_1 = tiled.loss_and_grad(theta[lane : lane + 1], {"t": t}, target)
            assert np.array_equal(loss_1[0], loss_t[lane]) and np.array_equal(grad_1[0], grad_t[lane])
    assert ndvm._native.tiled_replay_count() > before
