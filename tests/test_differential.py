"""Differential checks of the NDVM runtime on programs from the typed generator (tests/genprog.py).

1. Values against a real Scheme (GNU Guile): r7rs-mode programs, and model programs without arrays
   (Guile gets ``param``, ``loop``/``recur``, ``sigmoid``, ``softplus`` from genprog.MODEL_PRELUDE).
   Live when ``guile`` is installed, and always against the committed fixture
   tests/differential/guile_expected.jsonl (Guile's answers for seeds 0..499 of both kinds, written by
   ``python tests/genprog.py --write-guile-fixture``).
2. Gradients against central finite differences (float64, Richardson-extrapolated), at points
   away from kinks: a point where the two step sizes disagree (a branch, ``floor``, ``abs`` or
   ``min`` within the step) is skipped, and the test bounds how many are skipped.
3. B lanes in one batched run equal B separate one-lane runs, bit for bit, on values and
   gradients, with parameters spread so that lanes take different branches (and per-lane inputs);
   values also equal ``Program.run`` of each lane and the values computed while recording the tape.
4. ``ndvm.calibrate_many`` with two threads equals the serial run, bit for bit.

Each check runs 500 programs in the default run and 20,000 in the ``slow`` variant
(``pytest -m slow tests/test_differential.py``). A failure lists the seeds and sources;
``python tests/genprog.py --mode model --seed N`` prints one again.
"""

from __future__ import annotations

import json
import math
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

import ndvm

sys.path.insert(0, str(Path(__file__).resolve().parent))
import genprog  # noqa: E402
from test_conformance import from_python, read_datum, same_datum, write_datum  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
GUILE_FIXTURE = ROOT / "tests" / "differential" / "guile_expected.jsonl"
FIXTURE_SEEDS = 500

DEFAULT_COUNT, SLOW_COUNT = 500, 20_000
# The slow variant needs more than the suite's default 600 s timeout on a loaded 2-core machine.
COUNTS = [DEFAULT_COUNT, pytest.param(SLOW_COUNT, marks=[pytest.mark.slow, pytest.mark.timeout(3600)], id="slow")]

# Finite differences: relative step, and the agreement required between analytic and numeric.
FD_STEP = 1e-5
FD_REL_TOL = 1e-6
KINK_TOL = 1e-4  # two step sizes disagreeing by more than this: a kink inside the step; skip
MAX_SKIPPED_FRACTION = 0.05


def report(failures: list[str], checked: int, what: str) -> str:
    head = f"{len(failures)} of {checked} programs failed the {what} check; first ones:\n"
    return head + "\n\n".join(failures[:5])


# ---------------------------------------------------------------------------------------------
# 1. values against Guile


def guile_binary() -> str | None:
    return shutil.which("guile") or shutil.which("guile3.0")


GUILE_MODES = ("r7rs", "model")


def fixture_records() -> list[dict]:
    return [json.loads(line) for line in GUILE_FIXTURE.read_text().splitlines() if line.strip()]


def test_guile_fixture_matches_the_generator():
    """The fixture was written from the current generator (regenerate it when the generator changes)."""
    records = fixture_records()
    for mode in GUILE_MODES:
        assert [r["seed"] for r in records if r["mode"] == mode] == list(range(FIXTURE_SEEDS))
    stale = [
        (r["mode"], r["seed"])
        for r in records
        if r["source_sha"] != genprog.source_sha(genprog.guile_program(r["seed"], r["mode"]).source)
    ]
    assert not stale, f"generator changed: run `python tests/genprog.py --write-guile-fixture`; stale {stale[:10]}"


def compare_with_guile(mode: str, seeds_and_expected: list[tuple[int, str]]) -> list[str]:
    failures = []
    for seed, expected_text in seeds_and_expected:
        gen = genprog.guile_program(seed, mode)
        source = gen.source
        if expected_text.startswith("#<error"):
            failures.append(
                f"{mode} seed {seed}: Guile raised {expected_text} (the generator must not produce this)\n{source}"
            )
            continue
        try:
            got = from_python(ndvm.compile(source).run(inputs=gen.inputs(u=genprog.MODEL_INPUT_U)))
        except ndvm.NDVMError as exc:
            failures.append(
                f"{mode} seed {seed}: NDVM raised {type(exc).__name__}: {exc}; Guile: {expected_text}\n{source}"
            )
            continue
        if not same_datum(read_datum(expected_text), got):
            failures.append(f"{mode} seed {seed}: NDVM {write_datum(got)} != Guile {expected_text}\n{source}")
    return failures


@pytest.mark.parametrize("mode", GUILE_MODES)
def test_values_equal_guile_fixture(mode):
    records = [r for r in fixture_records() if r["mode"] == mode]
    failures = compare_with_guile(mode, [(r["seed"], r["expected"]) for r in records])
    assert not failures, report(failures, len(records), f"Guile {mode} (fixture)")


@pytest.mark.parametrize("mode", GUILE_MODES)
@pytest.mark.parametrize("count", COUNTS)
def test_values_equal_live_guile(count, mode):
    guile = guile_binary()
    if guile is None:
        pytest.skip("guile is not installed (apt-get install guile-3.0); the fixture test still ran")
    seeds = list(range(FIXTURE_SEEDS, FIXTURE_SEEDS + count))  # seeds beyond the fixture's
    expected = genprog.run_guile(seeds, guile, mode=mode)
    failures = compare_with_guile(mode, [(s, expected[s]) for s in seeds])
    assert not failures, report(failures, count, f"Guile {mode} (live)")


# ---------------------------------------------------------------------------------------------
# 2. gradients against finite differences


def point_near_init(gen: genprog.Generated, rng: np.random.Generator) -> np.ndarray:
    """A parameter row near the declared inits, inside each constraint."""
    row = []
    for _, init, constraint in gen.params:
        value = init + rng.uniform(-0.3, 0.3)
        if constraint == "positive":
            value = max(value, 0.05)
        elif isinstance(constraint, tuple):
            value = min(max(value, constraint[1] + 0.05), constraint[2] - 0.05)
        row.append(value)
    return np.array([row])


def check_gradient(gen: genprog.Generated, seed: int) -> tuple[str | None, int, int]:
    """(failure or None, parameters checked, parameters skipped at kinks)."""
    prog = ndvm.compile(gen.source)
    inputs = gen.inputs()
    theta = point_near_init(gen, np.random.default_rng(seed))
    values, grads = prog.value_and_grad(theta, inputs=inputs)
    if not (np.isfinite(values).all() and np.isfinite(grads).all()):
        return None, 0, len(gen.params)
    rows, steps = [], []
    for j in range(theta.shape[1]):
        h = FD_STEP * max(1.0, abs(theta[0, j]))
        steps.append(h)
        for delta in (h, -h, h / 2, -h / 2):
            row = theta[0].copy()
            row[j] += delta
            rows.append(row)
    shifted = prog.evaluate(np.array(rows), inputs=inputs)
    checked = skipped = 0
    problems = []
    for j, h in enumerate(steps):
        fp, fm, fp2, fm2 = shifted[4 * j : 4 * j + 4]
        coarse, fine = (fp - fm) / (2 * h), (fp2 - fm2) / h
        if not np.isfinite([coarse, fine]).all() or abs(coarse - fine) > KINK_TOL * max(1.0, abs(coarse), abs(fine)):
            skipped += 1
            continue
        numeric = (4 * fine - coarse) / 3  # Richardson: cancels the h^2 term
        analytic = grads[0, j]
        checked += 1
        if abs(numeric - analytic) > FD_REL_TOL * max(1.0, abs(numeric), abs(analytic)):
            problems.append(f"d/d{prog.param_names[j]}: reverse mode {analytic!r}, finite differences {numeric!r}")
    if problems:
        return f"seed {seed} at theta={theta[0].tolist()}: " + "; ".join(problems) + "\n" + gen.source, checked, skipped
    return None, checked, skipped


@pytest.mark.parametrize("count", COUNTS)
def test_gradients_equal_finite_differences(count):
    failures, checked, skipped = [], 0, 0
    for seed in range(count):
        gen = genprog.generate(seed, "model")
        failure, c, s = check_gradient(gen, seed)
        checked += c
        skipped += s
        if failure:
            failures.append(failure)
    assert not failures, report(failures, count, "gradient")
    assert checked >= count, f"only {checked} partial derivatives checked over {count} programs"
    assert skipped <= MAX_SKIPPED_FRACTION * (checked + skipped), (
        f"{skipped} of {checked + skipped} points skipped as kinks"
    )


# ---------------------------------------------------------------------------------------------
# 3. B lanes == B one-lane runs, bit for bit

LANES = 6


def spread_theta(gen: genprog.Generated, rng: np.random.Generator) -> np.ndarray:
    """LANES rows spread +-0.6 around the inits so that comparisons against literals diverge."""
    rows = np.array([[init for _, init, _ in gen.params]] * LANES, dtype=np.float64)
    rows += rng.uniform(-0.6, 0.6, size=rows.shape)
    for j, (_, _, constraint) in enumerate(gen.params):
        if constraint == "positive":
            rows[:, j] = np.maximum(rows[:, j], 0.05)
        elif isinstance(constraint, tuple):
            rows[:, j] = np.clip(rows[:, j], constraint[1] + 0.01, constraint[2] - 0.01)
    return rows


def check_lanes(gen: genprog.Generated, seed: int) -> str | None:
    prog = ndvm.compile(gen.source)
    rng = np.random.default_rng(seed)
    theta = spread_theta(gen, rng)
    inputs = gen.inputs()
    lane_inputs = {}
    if gen.uses_u and seed % 2 == 0:  # every other program: u given per lane
        inputs.pop("u")
        lane_inputs["u"] = rng.uniform(-1.0, 1.5, size=LANES)
    one = lambda i: {k: v[i] for k, v in lane_inputs.items()}  # noqa: E731
    batch_values = prog.evaluate(theta, inputs=inputs, lane_inputs=lane_inputs)
    batch_vg = prog.value_and_grad(theta, inputs=inputs, lane_inputs=lane_inputs)
    for i in range(LANES):
        lane_values = prog.evaluate(theta[i : i + 1], inputs={**inputs, **one(i)})
        lane_vg = prog.value_and_grad(theta[i : i + 1], inputs={**inputs, **one(i)})
        lane_run = prog.run(params=dict(zip(prog.param_names, theta[i])), inputs={**inputs, **one(i)})
        same = (
            np.array_equal(batch_values[i], lane_values[0], equal_nan=True)
            and np.array_equal(batch_values[i], np.float64(lane_run), equal_nan=True)  # the one-lane `run` path
            and np.array_equal(batch_values[i], batch_vg[0][i], equal_nan=True)  # with and without the tape
            and np.array_equal(batch_vg[0][i], lane_vg[0][0], equal_nan=True)
            and np.array_equal(batch_vg[1][i], lane_vg[1][0], equal_nan=True)
        )
        if not same:
            return (
                f"seed {seed}, lane {i} of {LANES}, theta={theta[i].tolist()}, lane inputs={one(i)}: batched "
                f"value {batch_vg[0][i]!r} grad {batch_vg[1][i].tolist()} vs alone value {lane_vg[0][0]!r} "
                f"grad {lane_vg[1][0].tolist()}\n{gen.source}"
            )
    return None


@pytest.mark.parametrize("count", COUNTS)
def test_lanes_equal_one_lane_runs_bit_for_bit(count):
    failures = [f for f in (check_lanes(genprog.generate(seed, "model"), seed) for seed in range(count)) if f]
    assert not failures, report(failures, count, "lane")


def test_generated_lanes_really_diverge():
    """The lane check means something only if lanes take different branches: count programs whose
    lanes disagree on at least one comparison of a parameter (seen as differing branch results)."""
    diverging = 0
    for seed in range(200):
        gen = genprog.generate(seed, "model")
        if "(if (" not in gen.source:
            continue
        theta = spread_theta(gen, np.random.default_rng(seed))
        params = dict(zip([p[0] for p in gen.params], theta.T))
        for match in genprog.PARAM_COMPARISON.finditer(gen.source):
            op, name, literal = match.group(1), match.group(2), float(match.group(3))
            outcomes = {"<": np.less, ">": np.greater, "<=": np.less_equal, ">=": np.greater_equal}[op](
                params[name], literal
            )
            if outcomes.any() and not outcomes.all():
                diverging += 1
                break
    assert diverging >= 80, f"only {diverging} of 200 programs have lanes on both sides of a parameter comparison"


# ---------------------------------------------------------------------------------------------
# 4. threaded calibrate_many == serial


def fit_signature(fit: ndvm.Fit) -> tuple:
    return (
        fit.status,
        fit.error,
        fit.loss,
        fit.history,
        fit.all_params,
        fit.all_losses,
        tuple(sorted(fit.params.items())),
    )


def same_fit(a: ndvm.Fit, b: ndvm.Fit) -> bool:
    for x, y in zip(fit_signature(a), fit_signature(b)):
        if isinstance(x, np.ndarray) or isinstance(y, np.ndarray):
            if not np.array_equal(np.asarray(x), np.asarray(y), equal_nan=True):
                return False
        elif isinstance(x, float) and isinstance(y, float) and math.isnan(x) and math.isnan(y):
            continue
        elif x != y:
            return False
    return True


@pytest.mark.parametrize("count", COUNTS)
def test_threaded_calibrate_many_equals_serial(count):
    x = np.linspace(-0.8, 1.1, genprog.X_LEN)
    target = np.sin(2.0 * x) + 0.3 * x
    sources = [genprog.generate(seed, "model", result="vector").source for seed in range(count)]
    chunk = 250  # several batches, each spread over the pool
    for start in range(0, count, chunk):
        part = sources[start : start + chunk]
        options = dict(inputs={"x": x, "u": 0.7}, target=target, steps=8, restarts=3, seed=start)
        serial = ndvm.calibrate_many(part, threads=1, **options)
        threaded = ndvm.calibrate_many(part, threads=2, **options)
        assert len(serial) == len(threaded) == len(part)
        failures = [
            f"seed {start + i}: serial loss {s.loss!r} history {s.history[-3:]}, threaded loss {t.loss!r} "
            f"history {t.history[-3:]} (status {s.status}/{t.status}, errors {s.error}/{t.error})\n{part[i]}"
            for i, (s, t) in enumerate(zip(serial, threaded))
            if not same_fit(s, t)
        ]
        assert not failures, report(failures, len(part), "threaded calibrate_many")
        errors = [f"seed {start + i}: {s.error}" for i, s in enumerate(serial) if s.status == "error"]
        assert not errors, f"generated programs must calibrate: {errors[:5]}"


def test_python_threads_sharing_programs_equal_serial():
    """Programs are shared across Python threads (the GIL is released in native code; each thread has
    its own VM): 4 threads evaluating the same programs concurrently give the serial bits."""
    from concurrent.futures import ThreadPoolExecutor

    gens = [genprog.generate(seed, "model") for seed in range(DEFAULT_COUNT)]
    progs = [ndvm.compile(g.source) for g in gens]
    thetas = [spread_theta(g, np.random.default_rng(seed)) for seed, g in enumerate(gens)]

    def work(i: int):
        return progs[i].value_and_grad(thetas[i], inputs=gens[i].inputs())

    serial = [work(i) for i in range(len(gens))]
    with ThreadPoolExecutor(4) as pool:
        concurrent = list(pool.map(work, list(range(len(gens))) * 2))
    failures = [
        f"seed {i % len(gens)}\n{gens[i % len(gens)].source}"
        for i, (v, g) in enumerate(concurrent)
        if not (
            np.array_equal(v, serial[i % len(gens)][0], equal_nan=True)
            and np.array_equal(g, serial[i % len(gens)][1], equal_nan=True)
        )
    ]
    assert not failures, report(failures, len(concurrent), "concurrent Python threads")


RECUR_WITH_LAMBDA = [
    "(loop ((i 0)) (if (>= i 3) i (let lp ((z 0)) (recur (+ i ((lambda () 1)))))))",
    "(loop ((i 0)) (if (>= i 3) i (let lp ((z 0)) (let ((f (lambda () 1))) (recur (+ i (f)))))))",
    "(loop ((i 0)) (if (>= i 3) i (do ((k 0 (+ k 1))) ((= k 1) (recur (+ i ((lambda () 1))))))))",
]


@pytest.mark.parametrize("source", RECUR_WITH_LAMBDA)
def test_recur_under_named_let_or_do_with_a_lambda(source):
    """Found by the generator (model seed 878): recur in a named-let body or a do result was once
    rejected as not in tail position when a lambda appeared there."""
    assert ndvm.compile(source).run() == 3
