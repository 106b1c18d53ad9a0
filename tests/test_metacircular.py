"""The meta-circular evaluator (ndvm/scheme/evaluator.scm) and ndvm.metacircular.

Three references check it:
- NDVM itself: every program of tests/metacircular/*.scm run through the evaluator gives the
  value of the direct run exactly, and gradients equal to a relative 1e-12, for one lane
  (the declared parameters) and for 64 lanes (perturbed parameters, so lanes can branch apart);
- the conformance suite (tests/conformance, 277 programs): through the evaluator on NDVM, the
  same value as the direct run (slow: run with -m slow);
- GNU Guile, when installed: the evaluator run by Guile gives Guile's own value on the suite and
  the conformance fixture's expected value on every conformance program. This checks the
  evaluator's Scheme semantics independently of the NDVM runtime.

A suite program is a file of NDVM source. Header comments: ";; inputs: {json}" gives its inputs
(numbers, lists for vectors, lists of lists for matrices); ";; guile: skip" marks programs that
use NDVM-only features (vectors, matrices, sigmoid, loop/recur).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest

import ndvm
import ndvm.metacircular as mc
from ndvm_bench.programs import PROGRAMS as BENCH_PROGRAMS
from ndvm_bench.programs import REGIME_ORDER

ROOT = Path(__file__).resolve().parent.parent
SUITE_DIR = ROOT / "tests" / "metacircular"
CONFORMANCE_FIXTURE = ROOT / "tests" / "conformance" / "expected.jsonl"
GRAD_REL_TOL = 1e-12
LANES = 64


@dataclass(frozen=True)
class SuiteProgram:
    name: str
    source: str
    inputs: dict = field(default_factory=dict)
    guile: bool = True


def load_suite() -> list[SuiteProgram]:
    programs = []
    for path in sorted(SUITE_DIR.glob("*.scm")):
        source = path.read_text()
        header = re.search(r"^;; inputs: (.*)$", source, re.MULTILINE)
        inputs = json.loads(header.group(1)) if header else {}
        programs.append(SuiteProgram(path.stem, source, inputs, ";; guile: skip" not in source))
    return programs


SUITE = load_suite()
SUITE_IDS = [p.name for p in SUITE]


def ndvm_inputs(inputs: dict) -> dict:
    return {
        name: (np.asarray(value, dtype=float) if isinstance(value, list) else value) for name, value in inputs.items()
    }


def perturbed_theta(program, lanes: int, seed: int) -> np.ndarray:
    """theta [lanes, P] around the declared inits (+-10%), inside each parameter's constraint."""
    rng = np.random.default_rng(seed)
    theta = np.empty((lanes, len(program.params)))
    for j, param in enumerate(program.params):
        init = float(param.init)
        spread = 0.1 * abs(init) if init != 0 else 0.1
        column = init + spread * rng.uniform(-1.0, 1.0, size=lanes)
        if isinstance(param.constraint, tuple) and param.constraint[0] == "between":
            lo, hi = float(param.constraint[1]), float(param.constraint[2])
            margin = 1e-3 * (hi - lo)
            column = np.clip(column, lo + margin, hi - margin)
        theta[:, j] = column
    theta[0] = [float(p.init) for p in program.params]  # lane 0: the declared point
    return theta


def same_value(expected, got) -> bool:
    """Exact structural equality of run() values (exactness must agree: 3 is not 3.0)."""
    if isinstance(expected, np.ndarray) or isinstance(got, np.ndarray):
        return (
            isinstance(expected, np.ndarray)
            and isinstance(got, np.ndarray)
            and expected.shape == got.shape
            and np.array_equal(expected, got, equal_nan=True)
        )
    if isinstance(expected, (bool, int, float, str)) or isinstance(got, (bool, int, float, str)):
        if type(expected) is not type(got):
            return False
        if isinstance(expected, float) and np.isnan(expected):
            return np.isnan(got)
        return expected == got
    if isinstance(expected, list):
        return (
            isinstance(got, list) and len(expected) == len(got) and all(same_value(e, g) for e, g in zip(expected, got))
        )
    if hasattr(expected, "car"):  # a dotted pair
        return hasattr(got, "car") and same_value(expected.car, got.car) and same_value(expected.cdr, got.cdr)
    return expected == got


def assert_grads_close(expected: np.ndarray, got: np.ndarray) -> None:
    scale = np.maximum(np.abs(expected), np.finfo(float).tiny)
    with np.errstate(invalid="ignore"):  # equal infinities: no difference
        difference = np.where(got == expected, 0.0, np.abs(got - expected))
    worst = float(np.max(difference / scale)) if expected.size else 0.0
    assert worst <= GRAD_REL_TOL, f"gradients differ: worst relative error {worst:.3e}"


# -------------------------------------------------------------------------------------------
# The suite through the evaluator on NDVM equals the direct run


def test_suite_is_large_enough_and_covers_each_area():
    assert len(SUITE) >= 60
    for prefix in ("regime_", "basic_", "let_", "closure_", "rec_", "tail_", "ho_", "list_", "vec_"):
        assert sum(p.name.startswith(prefix) for p in SUITE) >= 2, prefix
    assert sum(p.name.startswith("tail_") and p.name.endswith("100k") for p in SUITE) >= 5


@pytest.mark.parametrize("program", SUITE, ids=SUITE_IDS)
def test_program_through_evaluator_equals_direct_run(program: SuiteProgram):
    inputs = ndvm_inputs(program.inputs)
    direct = ndvm.compile(program.source)
    meta = mc.compile(program.source)
    assert meta.param_names == direct.param_names
    assert [(p.name, p.init, p.constraint) for p in meta.host.params] == [
        (p.name, p.init, p.constraint) for p in direct.params
    ]
    assert sorted(meta.inputs) == sorted(direct.inputs) == sorted(program.inputs)

    expected = direct.run(inputs=inputs)
    got = meta.run(inputs=inputs)
    assert same_value(expected, got), f"direct {expected!r} != through the evaluator {got!r}"

    numeric = isinstance(expected, (float, int, np.ndarray)) and not isinstance(expected, bool)
    if not (direct.param_names and numeric):
        return
    seed = zlib.crc32(program.name.encode())
    for theta in (perturbed_theta(direct, 1, seed), perturbed_theta(direct, LANES, seed)):
        np.testing.assert_array_equal(meta.evaluate(theta, inputs=inputs), direct.evaluate(theta, inputs=inputs))
        if np.ndim(expected) == 0:
            values_direct, grads_direct = direct.value_and_grad(theta, inputs=inputs)
            values_meta, grads_meta = meta.value_and_grad(theta, inputs=inputs)
            np.testing.assert_array_equal(values_meta, values_direct)
            assert grads_meta.shape == grads_direct.shape == theta.shape
            assert_grads_close(grads_direct, grads_meta)


@pytest.mark.parametrize("name", REGIME_ORDER)
def test_benchmark_regime_program_through_evaluator(name):
    """The benchmark's regime programs (ndvm_bench.programs) at 64 distinct lanes."""
    bench = BENCH_PROGRAMS[name]
    direct, meta = ndvm.compile(bench.source), mc.compile(bench.source)
    theta = bench.theta_batch(LANES, spread=0.1)
    values_direct, grads_direct = direct.value_and_grad(theta, inputs=bench.inputs)
    values_meta, grads_meta = meta.value_and_grad(theta, inputs=bench.inputs)
    np.testing.assert_array_equal(values_meta, values_direct)
    assert_grads_close(grads_direct, grads_meta)


def test_overhead_measurement_checks_agreement():
    from ndvm_bench.metacircular import measure_overhead

    rows = measure_overhead(["scalar_mul_add", "logistic_map_loop"], lanes=4, repeats=1)
    assert [row["program"] for row in rows] == ["scalar_mul_add", "logistic_map_loop"]
    for row in rows:
        assert row["values_equal"] and row["max_grad_rel_diff"] <= GRAD_REL_TOL
        assert row["direct_s"] > 0 and row["metacircular_s"] > 0 and row["overhead"] > 0


TAIL_PROGRAMS = [p for p in SUITE if p.name.startswith("tail_") and p.name.endswith("100k")]


@pytest.mark.parametrize("program", TAIL_PROGRAMS, ids=[p.name for p in TAIL_PROGRAMS])
def test_interpreted_tail_calls_run_in_constant_host_stack(program: SuiteProgram):
    """100,000 interpreted tail calls under a host depth limit of 100 nested calls."""
    shallow = ndvm.Limits(max_depth=100)
    got = mc.compile(program.source, limits=shallow).run(inputs=ndvm_inputs(program.inputs))
    assert same_value(ndvm.compile(program.source).run(inputs=ndvm_inputs(program.inputs)), got)


def test_the_shallow_host_limit_does_bite_on_non_tail_recursion():
    shallow = ndvm.Limits(max_depth=100)
    meta = mc.compile("(define (f n) (if (= n 0) 0 (+ 1 (f (- n 1))))) (f 1000)", limits=shallow)
    with pytest.raises(ndvm.LimitError):
        meta.run()


def test_gradients_are_not_trivially_zero():
    """The suite's gradient checks mean something: most scalar programs have nonzero gradients."""
    nonzero = 0
    for name in ("regime_affine", "regime_logistic_map16", "closure_church_numerals", "tail_define_100k"):
        program = next(p for p in SUITE if p.name == name)
        meta = mc.compile(program.source)
        theta = perturbed_theta(meta, 4, 0)
        _, grads = meta.value_and_grad(theta, inputs=ndvm_inputs(program.inputs))
        nonzero += bool(np.all(np.abs(grads) > 0))
    assert nonzero == 4


def test_lane_inputs_pass_through():
    source = "(param a 0.5) (param b 1.0) (+ (* a x) b)"
    direct, meta = ndvm.compile(source), mc.compile(source)
    theta = perturbed_theta(direct, 8, 1)
    lane_inputs = {"x": np.linspace(-1.0, 1.0, 8)}
    np.testing.assert_array_equal(
        meta.evaluate(theta, lane_inputs=lane_inputs), direct.evaluate(theta, lane_inputs=lane_inputs)
    )


def test_program_like_interface():
    source = "(param k 1.0 positive) (param p 0.3 (between 0 1)) (param c -2.5) (* k p c y)"
    direct, meta = ndvm.compile(source), mc.compile(source)
    assert meta.params == direct.params
    assert meta.param_names == ["k", "p", "c"]
    assert meta.inputs == direct.inputs == ["y"]
    assert meta.canonical_hash == direct.canonical_hash
    assert "(mc-run '(" in meta.host_source
    assert meta.run(params={"k": 2.0}, inputs={"y": 3.0}) == direct.run(params={"k": 2.0}, inputs={"y": 3.0})


def test_calibration_through_the_tower_equals_direct_calibration():
    bench = BENCH_PROGRAMS["michaelis_menten"]
    S = np.linspace(0.1, 2.0, 12)
    target = 1.7 * S / (0.6 + S)
    # every parameter searched: through the tower the program is an interpreter, whose result is not
    # affine in Vmax as the direct program's is, so only searching takes both the same path
    kwargs = dict(inputs={"S": S}, target=target, optimizer="adam", steps=60, restarts=4, seed=3, solve_linear=False)
    fit_direct = ndvm.calibrate(ndvm.compile(bench.source), **kwargs)
    fit_meta = ndvm.calibrate(mc.compile(bench.source), **kwargs)
    assert fit_meta.error is None and fit_direct.error is None
    assert fit_meta.loss == pytest.approx(fit_direct.loss, rel=1e-12, abs=1e-300)
    assert list(fit_meta.params) == list(fit_direct.params) == ["Vmax", "Km"]
    for name in fit_direct.params:
        assert fit_meta.params[name] == pytest.approx(fit_direct.params[name], rel=1e-10)
    np.testing.assert_allclose(fit_meta.history, fit_direct.history, rtol=1e-10)
    many = ndvm.calibrate_many([mc.compile(bench.source), bench.source], **kwargs)
    assert [fit.status for fit in many] == ["ok", "ok"]
    assert many[0].params == many[1].params == fit_direct.params


def test_float32_through_the_tower_equals_direct_float32():
    source = BENCH_PROGRAMS["damped_oscillator"].source
    direct, meta = ndvm.compile(source, dtype="float32"), mc.compile(source, dtype="float32")
    assert meta.host.dtype == "float32"
    theta = BENCH_PROGRAMS["damped_oscillator"].theta_batch(LANES, spread=0.1)
    inputs = BENCH_PROGRAMS["damped_oscillator"].inputs
    values_direct, grads_direct = direct.value_and_grad(theta, inputs=inputs)
    values_meta, grads_meta = meta.value_and_grad(theta, inputs=inputs)
    np.testing.assert_array_equal(values_meta, values_direct)
    np.testing.assert_array_equal(grads_meta, grads_direct)


# -------------------------------------------------------------------------------------------
# Errors of the interpreted program surface as ndvm errors


def run_quoted(program_text: str):
    """Run the evaluator directly on quoted forms, with no bindings (to reach its own checks)."""
    return ndvm.compile(mc.evaluator_source() + f"\n(mc-run '(\n{program_text}\n) '())\n").run()


def test_evaluator_runs_quoted_program_directly():
    assert run_quoted("(define (f x) (* x x)) (f 7)") == 49


@pytest.mark.parametrize(
    "program_text, message",
    [
        ("(+ 1 nope)", "error: unbound-variable nope"),
        ("(define a b) (define b 1.0) a", "error: unbound-variable b"),
        ("(define (f g) (g 1)) (f 2.0)", "error: not-a-procedure 2"),
        ("(define (f x) x) (f 1 2)", "error: too-many-arguments expected 1 got 2"),
        ("(define (f x y) x) (f 1)", "error: too-few-arguments expected 2 got 1"),
        ("(define (f x . rest) x) (f)", "error: too-few-arguments missing x"),
        ("(let loop ((i 0)) (loop))", "error: too-few-arguments expected 1 got 0"),
        ("(+ 1 (define x 2))", "error: definition-in-expression-context x"),
    ],
)
def test_interpreted_errors_name_their_kind(program_text, message):
    with pytest.raises(ndvm.EvalError) as caught:
        run_quoted(program_text)
    assert caught.value.message == message


def test_interpreted_primitive_error_is_an_eval_error():
    meta = mc.compile("(define (f v) (car v)) (f 1.5)")
    with pytest.raises(ndvm.EvalError):
        meta.run()


def test_applying_a_number_through_compile_raises_ndvm_error():
    meta = mc.compile("(param a 0.5) (define (f g) (g a)) (f 2.0)")
    with pytest.raises(ndvm.NDVMError) as caught:
        meta.run()
    assert "not-a-procedure" in str(caught.value)


def test_malformed_source_raises_like_ndvm_compile():
    with pytest.raises(ndvm.ParseError):
        mc.compile("(+ 1")


def test_missing_input_raises():
    meta = mc.compile("(param a 0.5) (* a x)")
    with pytest.raises(ndvm.NDVMError):
        meta.run()


def test_names_clashing_with_the_evaluator_are_refused():
    with pytest.raises(ndvm.CheckError, match="mc-run"):
        mc.compile("(param mc-run 0.5) (* 2 mc-run)")


def test_deep_non_tail_recursion_is_a_limit_error_not_a_crash():
    meta = mc.compile("(define (f n) (if (= n 0) 0 (+ 1 (f (- n 1))))) (f 10000000)")
    with pytest.raises(ndvm.LimitError):
        meta.run()


# -------------------------------------------------------------------------------------------
# The conformance suite through the evaluator on NDVM


CONFORMANCE = [json.loads(line) for line in CONFORMANCE_FIXTURE.read_text().splitlines() if line.strip()]


def scheme_text(value) -> str:
    """Guile's `write` notation of a run() value (plain data only)."""
    if isinstance(value, bool):
        return "#t" if value else "#f"
    if isinstance(value, float):
        return {float("inf"): "+inf.0", float("-inf"): "-inf.0"}.get(value, "+nan.0" if value != value else repr(value))
    if isinstance(value, (int, str)):
        return str(value)
    if isinstance(value, list):
        return "(" + " ".join(scheme_text(item) for item in value) + ")"
    if hasattr(value, "car"):
        items, tail = [], value
        while hasattr(tail, "car"):
            items.append(scheme_text(tail.car))
            tail = tail.cdr
        inner = " ".join(items)
        return f"({inner})" if tail == [] else f"({inner} . {scheme_text(tail)})"
    raise TypeError(f"no Scheme notation for {value!r}")


@pytest.mark.slow
@pytest.mark.parametrize("record", CONFORMANCE, ids=[r["name"] for r in CONFORMANCE])
def test_conformance_program_through_evaluator_equals_direct_run(record):
    """Through the tower, the direct run's value; where the direct run fails (a runtime
    deviation from Guile), the tower fails too or gives Guile's value."""
    meta = mc.compile(record["source"])
    try:
        expected = ndvm.compile(record["source"]).run()
    except ndvm.NDVMError:
        try:
            got = meta.run()
        except ndvm.NDVMError:
            return
        assert scheme_text(got) == record["expected"]
        return
    got = meta.run()
    assert same_value(expected, got), f"direct {expected!r} != through the evaluator {got!r}"


# -------------------------------------------------------------------------------------------
# Guile runs the evaluator: its Scheme semantics, independently of the NDVM runtime

GUILE = shutil.which("guile") or shutil.which("guile3.0")

# What Guile lacks of the NDVM primitives the evaluator's table names. The linear algebra is
# NDVM-only (suite programs that use it are marked "guile: skip"); `param` declarations are
# no-ops in Guile because the driver binds each parameter to its declared value.
GUILE_SHIM = """
(define (sigmoid x) (/ 1 (+ 1 (exp (- x)))))
(define (softplus x) (log (+ 1 (exp x))))
(define (square x) (* x x))
(define (logistic x) (/ 1 (+ 1 (exp (- x)))))
(define (inexact x) (exact->inexact x))
(define (exact x) (inexact->exact x))
(define (fold-left f init xs) (if (null? xs) init (fold-left f (f init (car xs)) (cdr xs))))
(define (fold-right f init xs) (if (null? xs) init (f (car xs) (fold-right f init (cdr xs)))))
(define (reduce f init xs) (if (null? xs) init (fold-left f (car xs) (cdr xs))))
(define (ndvm-only . args) (error 'ndvm-only-primitive args))
(define vec ndvm-only) (define mat ndvm-only) (define ref ndvm-only) (define dot ndvm-only)
(define outer ndvm-only) (define matvec ndvm-only) (define matmul ndvm-only)
(define transpose ndvm-only) (define trace ndvm-only) (define eye ndvm-only)
(define zeros ndvm-only) (define ones ndvm-only) (define vsum ndvm-only) (define norm ndvm-only)
(define inv ndvm-only) (define solve ndvm-only) (define det ndvm-only) (define logdet ndvm-only)
(define cholesky ndvm-only) (define rows ndvm-only) (define cols ndvm-only) (define size ndvm-only)
(define vec->list ndvm-only) (define list->vec ndvm-only)
(define-syntax param (syntax-rules () ((_ . rest) #f)))
"""


def run_guile_batch(cases: list[str]) -> list[str]:
    """Runs each case (an expression) in one Guile process; its `write` output or ERROR ..."""
    parts = [GUILE_SHIM, mc.evaluator_source()]
    for index, expression in enumerate(cases):
        parts.append(
            f'(display "@@{index} ")\n'
            f"(catch #t (lambda () (write {expression}))"
            f' (lambda args (display "ERROR ") (write args)))\n(newline)\n'
        )
    proc = subprocess.run(
        [GUILE, "-q", "--no-auto-compile", "-c", "\n".join(parts)], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    answers = {}
    for line in proc.stdout.splitlines():
        if line.startswith("@@"):
            index, _, answer = line[2:].partition(" ")
            answers[int(index)] = answer
    return [answers.get(i, "MISSING") for i in range(len(cases))]


def guile_bindings(program: SuiteProgram) -> tuple[str, str]:
    """(definitions of the params and inputs, the association list binding them)."""
    declared = re.findall(r"^\(param ([^\s()]+) ([^\s()]+)", program.source, re.MULTILINE)
    values = dict(declared) | {name: repr(value) for name, value in program.inputs.items()}
    definitions = " ".join(f"({name} {value})" for name, value in values.items())
    alist = "(list " + " ".join(f"(cons '{name} {name})" for name in values) + ")"
    return definitions, alist


@pytest.mark.skipif(GUILE is None, reason="guile is not installed (apt-get install -y guile-3.0)")
def test_guile_runs_the_evaluator_like_guile_runs_the_suite():
    programs = [p for p in SUITE if p.guile]
    cases = []
    for program in programs:
        definitions, alist = guile_bindings(program)
        cases.append(
            f"(let* ({definitions}) (let ((direct (let () {program.source}\n))"
            f" (meta (mc-run '(\n{program.source}\n) {alist})))"
            f" (if (equal? direct meta) (list 'same meta) (list 'differ direct meta))))"
        )
    answers = run_guile_batch(cases)
    mismatches = [(p.name, a) for p, a in zip(programs, answers) if not a.startswith("(same ")]
    assert not mismatches
    assert len(programs) >= 60


@pytest.mark.skipif(GUILE is None, reason="guile is not installed (apt-get install -y guile-3.0)")
def test_guile_runs_the_evaluator_to_the_conformance_fixture():
    answers = run_guile_batch([f"(mc-run '(\n{r['source']}\n) '())" for r in CONFORMANCE])
    mismatches = [(r["name"], r["expected"], a) for r, a in zip(CONFORMANCE, answers) if a != r["expected"]]
    assert not mismatches
    assert len(CONFORMANCE) >= 277
