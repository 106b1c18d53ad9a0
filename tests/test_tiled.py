"""Tiled replay (native/src/tiled.cc): a replayed point-wise tape runs tile by tile over the points.

The contract (docs/runtime.md, "Tiled replay"): the tiled path gives the bits of the whole-vector
replay, losses and gradients, lane for lane (so every lane of a batch equals its one-lane run), on
every instruction set; the loss sums (y - t)^2 in eight interleaved partial sums (element i into sum
i mod 8, added pairwise) in both paths; programs it does not cover keep the whole-vector path; the
budgets hold on it. Lengths leave a partial last tile and a scalar tail after the vector body
(2,061 points: tiles of 1,024 / lanes rounded down to a multiple of 8).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

import ndvm
from ndvm import _native

N_POINTS = 2061
LANE_COUNTS = (1, 5, 8, 16)

# Skeletons covering every way a tiled backward sums: a parameter broadcast into + - * / (the
# direct chain sums, each operand side), into expt (summed through the elementwise kernels), the
# vector-math unary ops and a C-library one (atan), scalar parameter code before the points (k), a
# guard on a parameter, a unary op of a point record, a shared data vector and a point record
# squared (both operands the same record).
SKELETONS = {
    "exp_cos": "(param p0 1.0) (param p1 0.2) (param p2 2.0) (param p3 0.1)\n"
    "(+ (* p0 (exp (- (* p1 t))) (cos (+ (* p2 t) p3))) 0.5)",
    "rational": "(param p0 1.0) (param p1 0.5) (param p2 2.0) (param p3 0.3)\n"
    "(+ (/ (* p0 t) (+ p1 (square t))) (/ p2 (+ 1.5 (exp (* p3 t)))) (/ t (+ 3.0 p1)))",
    "sub_both_sides": "(param p0 0.4) (param p1 1.2) (param p2 0.7)\n(- (- p0 (* p1 t)) (- (* t t) p2))",
    "pow_atan": "(param p0 1.1) (param p1 0.6) (param p2 0.8)\n"
    "(+ (expt (+ 1.5 (sin t)) p2) (atan (* p0 t)) (* p1 (tanh t)))",
    "scalar_code_guard": "(param p0 0.9) (param p1 0.4) (param p2 0.2)\n"
    "(define k (* p0 (+ p1 1.0)))\n(define s (if (> p2 0) (* p2 2.0) (- p2)))\n"
    "(+ (* k (sigmoid (* s t))) (softplus (- (* p1 t) k)) (* (* p2 t) (* p2 t)))",
}


def data(n: int = N_POINTS, seed: int = 3) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    t = np.linspace(0.05, 4.0, n)
    return t, np.cos(t) + 0.1 * rng.standard_normal(n)


def tiled_runs() -> int:
    return int(_native.tiled_replay_count())


def replayed(source: str, theta: np.ndarray, tiled: bool, loss: str = "mse", n: int = N_POINTS):
    """Loss and gradient at three nearby points after a first (walked) run: replays of the recorded
    tape, tiled or whole-vector. Returns the three results and how many ran tiled."""
    t, target = data(n)
    prog = ndvm.compile(source, limits=ndvm.Limits(tiled=tiled))
    prog.loss_and_grad(theta, {"t": t}, target, loss=loss)
    before = tiled_runs()
    out = [prog.loss_and_grad(theta * (1 + 1e-3 * k), {"t": t}, target, loss=loss) for k in range(1, 4)]
    return out, tiled_runs() - before


def theta_for(source: str, lanes: int, seed: int = 11) -> np.ndarray:
    P = len(ndvm.compile(source).param_names)
    return 0.5 + 0.5 * np.random.default_rng(seed).random((lanes, P))


@pytest.mark.parametrize("name", sorted(SKELETONS))
@pytest.mark.parametrize("lanes", LANE_COUNTS)
def test_tiled_equals_whole_vector_replay_bit_for_bit(name, lanes):
    theta = theta_for(SKELETONS[name], lanes)
    tiled, n_tiled = replayed(SKELETONS[name], theta, True)
    whole, n_whole = replayed(SKELETONS[name], theta, False)
    assert n_tiled == 3 and n_whole == 0, "the tiled path must be the one taken (and only when on)"
    for (lt, gt), (lw, gw) in zip(tiled, whole):
        assert np.array_equal(lt, lw) and np.array_equal(gt, gw)
        assert np.all(np.isfinite(lt)) and np.all(np.isfinite(gt))


@pytest.mark.parametrize("name", sorted(SKELETONS))
def test_every_lane_of_a_tiled_run_equals_its_one_lane_run(name):
    source = SKELETONS[name]
    theta = theta_for(source, 8)
    many, _ = replayed(source, theta, True)
    for lane in range(8):
        one, n_tiled = replayed(source, theta[lane : lane + 1], True)
        assert n_tiled == 3
        for (lm, gm), (l1, g1) in zip(many, one):
            assert lm[lane] == l1[0] and np.array_equal(gm[lane], g1[0])


@pytest.mark.parametrize("lanes", (1, 8))
def test_gaussian_likelihood_with_sigma_is_tiled_and_identical(lanes):
    source = "(param p0 1.0) (param p1 0.3) (param sigma 0.5 positive)\n(* p0 (exp (* p1 (sin t))))"
    theta = theta_for(source, lanes)
    tiled, n_tiled = replayed(source, theta, True, loss="gaussian_nll")
    whole, _ = replayed(source, theta, False, loss="gaussian_nll")
    assert n_tiled == 3
    for (lt, gt), (lw, gw) in zip(tiled, whole):
        assert np.array_equal(lt, lw) and np.array_equal(gt, gw)


@pytest.mark.parametrize("n", (16, 17, 1024, 1031, 4099))
def test_loss_is_summed_in_eight_interleaved_chains(n):
    """The mse is sum_i (y_i - t_i)^2 / n with element i in partial sum i mod 8, the sums added
    pairwise (the order of simd.h): pinned against numpy in that order, bit for bit; the gradient
    of a shared offset is the same order over 2 (y - t) / n."""
    t, target = data(n)
    source = "(param c 0.25) (+ (sin t) c)"
    prog = ndvm.compile(source)
    theta = np.array([[0.25], [0.75]])
    prog.loss_and_grad(theta, {"t": t}, target)  # recorded; the next run is tiled
    before = tiled_runs()
    losses, grads = prog.loss_and_grad(theta, {"t": t}, target)
    assert tiled_runs() - before == 1
    for lane, c in enumerate(theta[:, 0]):
        d = (np.sin(t) + c) - target
        acc, gacc = np.zeros(8), np.zeros(8)
        for i in range(n):
            acc[i % 8] += d[i] * d[i]
            gacc[i % 8] += 0.0 + 2.0 * d[i] / n
        pairwise = lambda a: ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]))  # noqa: E731
        assert losses[lane] == pairwise(acc) / n
        assert grads[lane, 0] == 0.0 + pairwise(gacc)
        assert losses[lane] == pytest.approx(np.mean(d * d), rel=1e-13)


@pytest.mark.parametrize(
    "source",
    [
        "(param a 1.0) (param b 0.5) (* (vsum (* a t)) (+ b t))",  # a reduction mid-program
        "(param a 1.0) (param b 0.5) (min (* a t) (+ b t))",  # min: not one of the SIMD kernels' ops
        "(param a 1.0) a",  # the result is a parameter, not a point record
    ],
)
def test_programs_beyond_point_work_keep_the_whole_vector_replay(source):
    t, target = data(64)
    if source.endswith(" a"):
        target = target[:1]
    prog = ndvm.compile(source)
    theta = np.array([[1.0, 0.5]])[:, : len(prog.param_names)]
    prog.loss_and_grad(theta, {"t": t}, target)
    before, replays = tiled_runs(), _native.replay_counts()[0]
    prog.loss_and_grad(theta * 1.01, {"t": t}, target)
    assert tiled_runs() == before
    assert _native.replay_counts()[0] == replays + 1  # still replayed, as a whole


def test_a_wide_batch_runs_its_chunks_tiled_with_the_same_values_and_bits():
    """Past 256 lanes run_batch evaluates chunks of lanes (the first walks, the others replay): the
    tiled chunks give the values, losses and gradients of the whole-vector ones."""
    t, target = data(203)
    source = SKELETONS["exp_cos"]
    theta = theta_for(source, 300)
    results = {}
    for tiled in (True, False):
        prog = ndvm.compile(source, limits=ndvm.Limits(tiled=tiled))
        before = tiled_runs()
        prog.loss_and_grad(theta, {"t": t}, target)
        # the native call returns the values too (loss_and_grad drops them)
        values, losses, grads, _ = prog._native.value_and_grad(
            theta * 1.001, {"t": t}, {}, prog.limits.native(), [], "mse", target
        )
        results[tiled] = (values, losses, grads)
        assert (tiled_runs() - before > 0) == tiled
    for a, b in zip(results[True], results[False]):
        assert np.array_equal(a, b)
    assert results[True][0].shape == (300, 203)


def test_calibration_is_the_same_with_and_without_tiling():
    # every parameter searched: a projected calibration walks the basis program, which is not tiled
    t, target = data()
    source = SKELETONS["exp_cos"]
    fits = []
    for tiled in (True, False):
        prog = ndvm.compile(source, limits=ndvm.Limits(tiled=tiled))
        before = tiled_runs()
        fit = ndvm.calibrate(prog, {"t": t}, target=target, restarts=4, seed=5, threads=1, solve_linear=False)
        fits.append((fit, tiled_runs() - before))
    (a, n_a), (b, n_b) = fits
    assert n_a > 0 and n_b == 0
    assert np.array_equal(a.all_losses, b.all_losses) and np.array_equal(a.all_params, b.all_params)
    assert np.array_equal(a.history, b.history, equal_nan=True)


def test_a_calibration_keeps_its_width_until_half_its_lanes_stop():
    """From 8 starts whose lanes stop at different times, the batch is walked at most four times
    (widths 8, 4, 2, 1: stopped lanes' places filled by copies of a running lane until half stop),
    every other evaluation a tiled replay; each lane's fit equals its one-start fit, bit for bit.
    Every parameter searched (a projected calibration is not tiled)."""
    t, target = data()
    source = SKELETONS["exp_cos"]
    prog = ndvm.compile(source)
    init = 0.5 + np.random.default_rng(2).random((8, 4))
    replayed0, tiled0 = _native.replay_counts()[0], tiled_runs()
    fit = ndvm.calibrate(prog, {"t": t}, target=target, restarts=8, init=init, threads=1, solve_linear=False)
    replayed, tiled = _native.replay_counts()[0] - replayed0, tiled_runs() - tiled0
    assert len(set(fit.lane_evaluations.tolist())) > 1, "the lanes must stop at different times"
    walks = fit.evaluations - replayed  # (and a value-only walk scoring the last step, if the budget ended)
    assert 1 <= walks <= 5 and tiled == replayed
    for lane in range(8):
        one = ndvm.calibrate(
            prog, {"t": t}, target=target, restarts=1, init=init[lane : lane + 1], threads=1, solve_linear=False
        )
        assert one.all_losses[0] == fit.all_losses[lane]
        assert np.array_equal(one.all_params[0], fit.all_params[lane])
        assert one.lane_evaluations[0] == fit.lane_evaluations[lane]


def test_budgets_hold_on_the_tiled_path():
    """A tiled replay is charged the walk's work (the same figure as the whole-vector replay), and a
    replay past the work budget gives up: the walk it falls back to raises LimitError."""
    t, target = data()
    source = SKELETONS["rational"]
    theta = theta_for(source, 4)
    used = {}
    for tiled in (True, False):
        prog = ndvm.compile(source, limits=ndvm.Limits(tiled=tiled))
        prog.loss_and_grad(theta, {"t": t}, target)
        prog.loss_and_grad(theta * 1.01, {"t": t}, target)
        used[tiled] = _native.last_usage()["work"]
    assert used[True] == used[False] > 0
    tight = ndvm.compile(source, limits=ndvm.Limits(max_work=used[True] - 1))
    with pytest.raises(ndvm.LimitError, match="max_work"):
        tight.loss_and_grad(theta, {"t": t}, target)


def test_limits_tiled_must_be_a_bool():
    with pytest.raises(ValueError, match="Limits.tiled must be True or False"):
        ndvm.Limits(tiled="yes")


_CHILD = r"""
import hashlib, json, sys
import numpy as np
sys.path.insert(0, sys.argv[2])
import test_tiled as tt
from ndvm import _native
digest = hashlib.sha256()
for name in sorted(tt.SKELETONS):
    for lanes in (1, 8):
        theta = tt.theta_for(tt.SKELETONS[name], lanes)
        for tiled in (True, False):
            out, n = tt.replayed(tt.SKELETONS[name], theta, tiled)
            assert n == (3 if tiled else 0)
            for loss, grad in out:
                if tiled:
                    digest.update(np.ascontiguousarray(loss).tobytes() + np.ascontiguousarray(grad).tobytes())
            if tiled:
                first = out
            else:
                assert all(np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1]) for a, b in zip(first, out)), name
print(json.dumps({"isa": _native.isa(), "digest": digest.hexdigest()}))
"""


def test_every_instruction_set_gives_the_same_bits():
    results = {}
    here = os.path.dirname(os.path.abspath(__file__))
    for isa in ndvm.build_info()["isas"]:
        env = {**os.environ, "NDVM_ISA": isa}
        out = subprocess.run(
            [sys.executable, "-c", _CHILD, "", here], env=env, capture_output=True, text=True, timeout=300
        )
        assert out.returncode == 0, out.stderr
        r = json.loads(out.stdout.strip().splitlines()[-1])
        assert r["isa"] == isa
        results[isa] = r["digest"]
    assert len(set(results.values())) == 1, f"the instruction sets disagree: {results}"
