"""Replay: a gradient evaluation that repeats with new parameters re-executes the recorded tape.

The contract (README, "Replay"): a replayed evaluation gives the bits of a walked one, values and
gradients; a decision that would now go the other way (a guard), other inputs, other lanes, other
limits or an error fall back to walking the program. These tests compare replayed runs with runs of
a freshly compiled copy of the same program (a new program is never replayed), on generated
programs and on the cases that must fall back.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import ndvm
from ndvm import _native
from ndvm_bench.programs import KALMAN_SOURCE

sys.path.insert(0, str(Path(__file__).resolve().parent))
import genprog  # noqa: E402
from test_differential import COUNTS, report, spread_theta  # noqa: E402


def counts() -> tuple[int, int]:
    """(replayed, fell back) so far on this thread."""
    return tuple(_native.replay_counts())


def outcome(prog: ndvm.Program, theta, **kw):
    """value_and_grad, or the error it raises, in a comparable form."""
    try:
        return prog.value_and_grad(theta, **kw)
    except ndvm.NDVMError as exc:
        return (type(exc).__name__, str(exc))


def same(a, b) -> bool:
    if isinstance(a, tuple) and isinstance(a[0], str) or isinstance(b, tuple) and isinstance(b[0], str):
        return a == b
    return np.array_equal(a[0], b[0], equal_nan=True) and np.array_equal(a[1], b[1], equal_nan=True)


def check_replay(gen: genprog.Generated, seed: int) -> tuple[str | None, bool]:
    """Records at one theta, then evaluates at three others, nearby and far: each must equal a fresh
    program's run. Returns (failure, whether any of them was replayed)."""
    rng = np.random.default_rng(seed)
    kw = {"inputs": gen.inputs()}
    if gen.uses_u and seed % 3 == 0:  # per-lane inputs too
        kw["inputs"].pop("u")
        kw["lane_inputs"] = {"u": rng.uniform(-1.0, 1.5, size=6)}
    base = spread_theta(gen, rng)
    if seed % 2:  # one lane (calibration with one restart), or six that may disagree
        base = base[:1]
        kw.pop("lane_inputs", None)
        if gen.uses_u and "u" not in kw["inputs"]:
            kw["inputs"]["u"] = 0.7
    # nearby points (the next steps of a calibration: mostly replayed) and a far one (often walked)
    near = lambda: base + rng.uniform(-1e-3, 1e-3, size=base.shape)  # noqa: E731
    far = spread_theta(gen, rng)[: base.shape[0]]
    thetas = [base, near(), far, near()]
    # the expected outcomes first: evaluating another program on this thread drops a recording
    dtype = "float32" if seed % 5 == 0 else "float64"  # float32 rounds what the evaluator rounds
    wants = [outcome(ndvm.compile(gen.source, dtype=dtype), theta, **kw) for theta in thetas[1:]]
    prog = ndvm.compile(gen.source, dtype=dtype)
    outcome(prog, thetas[0], **kw)  # records (unless the lanes diverge or it fails)
    replayed = False
    for theta, want in zip(thetas[1:], wants):
        before = counts()
        got = outcome(prog, theta, **kw)
        replayed |= counts()[0] > before[0]
        if not same(got, want):
            return f"seed {seed}: replayed/walked {got!r} vs fresh {want!r}\n{gen.source}", replayed
    return None, replayed


@pytest.mark.parametrize("count", COUNTS)
def test_replayed_runs_equal_fresh_runs_bit_for_bit(count):
    failures, replayed = [], 0
    fell_back = counts()[1]
    for seed in range(count):
        failure, r = check_replay(genprog.generate(seed, "model"), seed)
        replayed += r
        if failure:
            failures.append(failure)
    fell_back = counts()[1] - fell_back
    assert not failures, report(failures, count, "replay")
    # the check means something only if both paths were taken often
    assert replayed >= count // 2, f"only {replayed} of {count} programs were replayed"
    assert fell_back >= count // 10, f"only {fell_back} replays fell back to a walk"


def test_a_decision_that_changes_falls_back_to_a_walk():
    prog = ndvm.compile("(param a 1.0) (if (< a 0) (* a a) (* 3 a))")
    prog.value_and_grad([[1.0]])
    r0, f0 = counts()
    v, g = prog.value_and_grad([[2.0]])  # same branch: replayed
    assert (v[0], g[0, 0]) == (6.0, 3.0) and counts() == (r0 + 1, f0)
    v, g = prog.value_and_grad([[-1.0]])  # the guard fails: walked
    assert (v[0], g[0, 0]) == (1.0, -2.0) and counts() == (r0 + 1, f0 + 1)
    v, g = prog.value_and_grad([[-3.0]])  # the walk recorded the other branch: replayed
    assert (v[0], g[0, 0]) == (9.0, -6.0) and counts() == (r0 + 2, f0 + 1)


def test_lanes_that_come_to_disagree_are_split_as_in_a_walk():
    prog = ndvm.compile("(param a 1.0) (if (< a 0) (* a a) (* 3 a))")
    prog.value_and_grad([[1.0], [2.0]])  # one group: recorded
    v, g = prog.value_and_grad([[1.0], [-2.0]])  # now the lanes disagree
    np.testing.assert_array_equal(v, [3.0, 4.0])
    np.testing.assert_array_equal(g, [[3.0], [-4.0]])


def test_piecewise_constant_operations_are_recomputed():
    src = "(param a 1.3) (* (floor (* 10 a)) (quotient (round (* 4 a)) 2.0) a)"
    points = (1.47, 2.26, 0.61)
    wants = [ndvm.compile(src).value_and_grad([[a]]) for a in points]
    prog = ndvm.compile(src)
    prog.value_and_grad([[1.3]])
    for a, want in zip(points, wants):
        r0 = counts()[0]
        got = prog.value_and_grad([[a]])
        assert counts()[0] == r0 + 1, "expected a replay"
        assert same(got, want), (a, got, want)


def test_an_error_on_replay_is_reported_by_the_walk_with_its_location():
    prog = ndvm.compile("(param a 1.0)\n(quotient 7.0 (floor a))")
    prog.value_and_grad([[1.5]])
    with pytest.raises(ndvm.EvalError, match="division by zero") as info:
        prog.value_and_grad([[0.5]])
    assert info.value.line == 2


def test_other_inputs_limits_or_lane_counts_are_walked():
    prog = ndvm.compile("(param k 1.0) (vsum (* k (exp (* k x))))")
    x = np.linspace(0, 1, 5)
    prog.value_and_grad([[0.5]], {"x": x})
    r0, _ = counts()
    prog.value_and_grad([[0.7]], {"x": x})
    assert counts()[0] == r0 + 1
    for call in (
        lambda: prog.value_and_grad([[0.7]], {"x": x + 1.0}),  # other data
        lambda: prog.value_and_grad([[0.7], [0.8]], {"x": x + 1.0}),
    ):  # other lane count
        r1 = counts()[0]
        got = call()
        assert counts()[0] == r1
    got = prog.value_and_grad([[0.7], [0.8]], {"x": x + 1.0})  # now recorded at two lanes: replayed
    want = ndvm.compile(prog.source).value_and_grad([[0.7], [0.8]], {"x": x + 1.0})
    assert same(got, want)
    strict = ndvm.compile(prog.source, limits=ndvm.Limits(max_steps=1_000_000))
    strict.value_and_grad([[0.7]], {"x": x})
    r2 = counts()[0]
    ndvm.compile(prog.source, limits=ndvm.Limits(max_steps=1_000_000, replay=False)).value_and_grad([[0.7]], {"x": x})
    assert counts()[0] == r2


@pytest.mark.parametrize("optimizer", ["adam", "lbfgs"])
def test_calibration_is_the_same_with_and_without_replay(optimizer):
    src = """(param q 0.3 positive) (param r 0.3 positive)
(let loop ((t 0) (x 0.0) (p 1.0) (nll 0.0))
  (if (= t (vsize ys)) nll
      (let* ((pp (+ p q)) (s (+ pp r)) (e (- (ref ys t) x)) (k (/ pp s)))
        (loop (+ t 1) (+ x (* k e)) (* (- 1 k) pp) (+ nll (log s) (/ (* e e) s))))))""".replace(
        "(vsize ys)", "(size ys)"
    )
    ys = np.cumsum(np.random.default_rng(3).normal(size=60)) * 0.3
    fits = []
    for replay in (True, False):
        prog = ndvm.compile(src, limits=ndvm.Limits(replay=replay))
        fits.append(
            ndvm.calibrate(prog, {"ys": ys}, loss="value", optimizer=optimizer, steps=60, restarts=4, threads=1)
        )
    a, b = fits
    np.testing.assert_array_equal(a.all_params, b.all_params)
    np.testing.assert_array_equal(a.history, b.history)
    assert a.loss == b.loss and np.isfinite(a.loss)


def test_threaded_calibrate_many_is_the_same_with_and_without_replay():
    sources = [
        "(param a 1.0) (param b 0.5) (+ (* a (exp (* -1 b x))) 0.1)",
        "(param a 1.0) (param b 0.5) (if (< b 0.3) (* a x) (+ (* a x) (* b x x)))",
        "(param k 2.0 positive) (* k (floor (* 3 x)))",
    ]
    x = np.linspace(0, 2, 25)
    y = 1.3 * np.exp(-0.7 * x) + 0.1
    runs = []
    for replay in (True, False):
        progs = [ndvm.compile(src, limits=ndvm.Limits(replay=replay)) for src in sources]
        runs.append(ndvm.calibrate_many(progs, {"x": x}, target=y, steps=40, restarts=8, threads=2))
    for a, b in zip(*runs):
        np.testing.assert_array_equal(a.all_params, b.all_params)
        np.testing.assert_array_equal(a.all_losses, b.all_losses)


@pytest.mark.parametrize("lanes", [257, 600, 1024])
def test_a_wide_batch_runs_in_chunks_that_replay_with_every_lane_its_own_bits(lanes):
    """Past 256 lanes a replayable batch runs in equal chunks (the last padded): the first walks,
    the others replay its tape; every lane equals its one-lane run, bit for bit, also on the calls
    after (all chunks replayed), and a lane that diverges is split off inside its chunk."""
    rng = np.random.default_rng(lanes)
    ys = np.cumsum(rng.normal(size=(12, 2)), axis=0)
    theta = rng.uniform(0.1, 1.0, size=(lanes, 2))
    prog = ndvm.compile(KALMAN_SOURCE)
    chunks = -(-lanes // 256)
    r0 = counts()[0]
    v1, g1 = prog.value_and_grad(theta, {"ys": ys})
    assert counts()[0] == r0 + chunks - 1  # the first chunk walked and was recorded
    r1 = counts()[0]
    v2, g2 = prog.value_and_grad(theta, {"ys": ys})
    assert counts()[0] == r1 + chunks
    for lane in (0, 255, 256, lanes // 2, lanes - 1):
        one = ndvm.compile(KALMAN_SOURCE).value_and_grad(theta[lane : lane + 1], {"ys": ys})
        for v, g in ((v1, g1), (v2, g2)):
            assert v[lane] == one[0][0] and np.array_equal(g[lane], one[1][0])
    branchy = ndvm.compile("(param a 1.0) (if (< a 0) (* a a) (* 3 a))")
    a = np.linspace(-1.0, 1.0, lanes).reshape(-1, 1)
    for _ in range(2):
        v, g = branchy.value_and_grad(a)
        np.testing.assert_array_equal(v, np.where(a[:, 0] < 0, a[:, 0] ** 2, 3 * a[:, 0]))
        np.testing.assert_array_equal(g[:, 0], np.where(a[:, 0] < 0, 2 * a[:, 0], 3.0))


def test_a_wide_batch_with_per_lane_inputs_is_not_chunked():
    """Chunks of other per-lane data could not replay each other's tape: such a batch runs whole."""
    prog = ndvm.compile("(param k 1.0) (vsum (* k (exp (* k x))))")
    x = np.linspace(0, 1, 5) + np.arange(300)[:, None] * 1e-3
    theta = np.full((300, 1), 0.5)
    v, g = prog.value_and_grad(theta, lane_inputs={"x": x})
    r0 = counts()[0]
    v2, g2 = prog.value_and_grad(theta, lane_inputs={"x": x})
    assert counts()[0] == r0 + 1 and np.array_equal(v, v2) and np.array_equal(g, g2)
    one = ndvm.compile(prog.source).value_and_grad(theta[7:8], {"x": x[7]})
    assert v[7] == one[0][0] and g[7, 0] == one[1][0, 0]


@pytest.mark.parametrize("count", COUNTS)
def test_one_lane_runs_with_the_decoded_tape_equal_runs_without_replay(count):
    """A one-lane tape kept for replay is decoded once (a kernel per record); the walk's own
    backward and every replay then run through it. Both must give the bits of a program that never
    keeps a tape (Limits(replay=False): the general record-by-record path), values and gradients, on
    generated programs, and the Kalman-like one of small-matrix records."""
    failures, replayed = [], 0
    sources = [(genprog.generate(seed, "model"), seed) for seed in range(count)]
    for gen, seed in [*sources, (None, -1)]:
        rng = np.random.default_rng(seed + 1)
        if gen is None:
            source, kw = KALMAN_SOURCE, {"inputs": {"ys": np.cumsum(rng.normal(size=(12, 2)), axis=0)}}
            thetas = [rng.uniform(0.1, 1.0, size=(1, 2)) for _ in range(3)]
        else:
            source, kw = gen.source, {"inputs": gen.inputs()}
            thetas = [spread_theta(gen, rng)[:1] for _ in range(3)]
        never = ndvm.compile(source, limits=ndvm.Limits(replay=False))
        wants = [outcome(never, theta, **kw) for theta in thetas]
        prog = ndvm.compile(source)
        for theta, want in zip(thetas, wants):
            before = counts()[0]
            got = outcome(prog, theta, **kw)
            replayed += counts()[0] > before
            if not same(got, want):
                failures.append(f"seed {seed}: {got!r} vs without replay {want!r}\n{source}")
    assert not failures, report(failures, count + 1, "decoded-tape")
    assert replayed >= count // 2, f"only {replayed} evaluations were replayed"


SCALED_ADDS = [
    KALMAN_SOURCE,  # (+ P (* q I)) with P uniform at the first step, then lane-varying
    "(param q 0.3) (param r 0.2) (let ((T (* q (eye 2)))) (vsum (+ (+ (* r (ones 2 2)) T) T)))",  # T read twice
    "(param q 0.3) (param r 0.2) (vsum (* r (+ (vec 1.0 2.0 3.0) (* q (vec 0.5 -1.0 2.0)))))",  # three elements
    "(param q 0.3) (param r 0.2) (logdet (+ (* r (eye 2)) (* q (mat (vec 1.0 0.0) (vec 0.0 0.0)))))",
    "(param q 0.3) (dot (vec 1.0 3.0) (+ (vec 1.0 2.0) (* q (vec 0.0 -0.0))))",  # zeros in U
]


@pytest.mark.parametrize("source", SCALED_ADDS)
def test_scaled_adds_run_as_one_pass_keep_every_lanes_bits(source):
    """A pair (* s U) (+ X that) of a per-lane scalar and a constant matrix runs as one pass over the
    lanes on replay (and in the walk's backward): values and gradients equal a program that never
    keeps a tape, and every lane equals its one-lane run."""
    rng = np.random.default_rng(len(source))
    ys = np.cumsum(rng.normal(size=(12, 2)), axis=0)
    inputs = {"ys": ys} if "ys" in source else {}
    prog = ndvm.compile(source)
    theta = rng.uniform(0.1, 1.0, size=(7, len(prog.param_names)))
    never = ndvm.compile(source, limits=ndvm.Limits(replay=False))
    for _ in range(3):
        theta = theta * rng.uniform(0.9, 1.1, size=theta.shape)
        v, g = prog.value_and_grad(theta, inputs)
        wv, wg = never.value_and_grad(theta, inputs)
        assert np.array_equal(v, wv) and np.array_equal(g, wg)
        for lane in (0, 3, 6):
            one = ndvm.compile(source).value_and_grad(theta[lane : lane + 1], inputs)
            assert v[lane] == one[0][0] and np.array_equal(g[lane], one[1][0])
