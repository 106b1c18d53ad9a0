"""Resource limits and robustness of the runtime: what an overnight run on LLM-written programs needs.

* Runaway programs (infinite loops, runaway recursion, runaway allocation) end with
  ``ndvm.LimitError`` within RUNAWAY_WALL_S seconds at the default limits. Each runs in its own
  child process with an address-space cap (the default memory budget plus headroom), so a program
  that escapes its budget cannot take the machine down with it; the child is killed after
  RUNAWAY_WALL_S + a margin.
* Custom ``ndvm.Limits`` take effect (steps, depth, bytes), and legitimate deep work passes.
* Memory stays flat over 100,000 evaluations of one program (resident set size measured from
  /proc/self/statm in a child process, after a warm-up).
* No input crashes the process: malformed sources, bad shapes, singular matrices, bad inputs and
  bad theta arrays run in a child whose exit status must be 0, and each must give a value or an
  ``ndvm.NDVMError`` (never another exception type).

Cases that fail because of a known bug are marked ``xfail(strict=True)`` with the bug: they turn
into failures (to be unmarked) as soon as it is fixed. The bugs this file found (heap not charged
to the memory budget, a 6 MiB C-stack cap on recursion, ``(apply f)`` undefined behaviour,
``calibrate_many`` failing a whole batch on a non-program item) are fixed and their cases are plain
regression tests now.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

import ndvm

# Under scripts/sanitize.sh (NDVM_SANITIZED=1) the runtime is 2-5x slower and ASan reserves terabytes
# of address space, so wall-time and RSS assertions and address-space caps are left out there.
SANITIZED = bool(os.environ.get("NDVM_SANITIZED"))
RUNAWAY_WALL_S = 8.0  # "within a few seconds" (measured 0.3-4.4 s, see docs) with room for a loaded shared machine
KILL_MARGIN_S = 3.0
# Address-space cap of a child: the payload arena and its adjoint buffer grow by doubling
# (realloc), so reaching the 2 GiB default budget legitimately needs about three times the budget
# of address space, plus Python itself.
CHILD_AS_BYTES = None if SANITIZED else 3 * ndvm.DEFAULT_LIMITS.max_bytes + (1 << 30)

CHILD_ENV = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def run_child(code: str, timeout_s: float, as_bytes: int | None = CHILD_AS_BYTES) -> subprocess.CompletedProcess:
    """Runs `code` in a fresh interpreter with an address-space cap; returns the finished process
    (or raises subprocess.TimeoutExpired after killing it)."""
    prelude = ""
    if as_bytes:
        prelude = f"import resource\nresource.setrlimit(resource.RLIMIT_AS, ({as_bytes}, {as_bytes}))\n"
    return subprocess.run(
        [sys.executable, "-c", prelude + textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        env=CHILD_ENV,
    )


# ---------------------------------------------------------------------------------------------
# runaway programs at the default limits

RUNAWAY_CHILD = """
import json, sys, time
import ndvm
source = sys.argv[1] if len(sys.argv) > 1 else SOURCE
t0 = time.perf_counter()
try:
    ndvm.compile(source).run()
    outcome = {"error": None}
except BaseException as exc:
    outcome = {"error": type(exc).__name__, "message": str(exc)[:300]}
outcome["seconds"] = time.perf_counter() - t0
rss = int(open("/proc/self/statm").read().split()[1]) * 4096
outcome["peak_rss_mib"] = max(rss, 0) >> 20
# VmHWM: the peak RSS of this process image (ru_maxrss would include the forking parent's peak)
hwm_kib = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM:"))
outcome["max_rss_mib"] = hwm_kib >> 10
print(json.dumps(outcome))
"""

RUNAWAY = [
    pytest.param("(let loop () (loop))", id="named-let-forever"),
    pytest.param("(define (spin) (spin)) (spin)", id="tail-call-forever"),
    pytest.param("(do ((i 0 (+ i 1))) (#f i))", id="do-forever"),
    pytest.param("(let loop ((i 0)) (loop (+ i 1)))", id="counting-forever"),
    pytest.param("(loop ((i 0) (s 0.0)) (recur (+ i 1) (+ s 1.5)))", id="loop-recur-forever"),
    pytest.param("(define (f n) (g n)) (define (g n) (f n)) (f 1)", id="mutual-tail-forever"),
    pytest.param("(define (f n) (+ 1 (f n))) (f 1)", id="non-tail-recursion"),
    pytest.param("(define (f n) (* 2.0 (f (+ n 1)) (f (+ n 2)))) (f 0)", id="tree-recursion"),
    pytest.param("(define (build n) (cons n (build (+ n 1)))) (build 0)", id="non-tail-list-building"),
    pytest.param("(let loop ((l '())) (loop (cons 1.0 l)))", id="list-growth"),
    pytest.param("(let loop ((v (zeros 1000))) (loop (+ v 1.0)))", id="vector-growth"),
    pytest.param("(let loop ((l (list 1 2))) (loop (append l l)))", id="append-doubling"),
    pytest.param(
        "(let loop ((m (eye 2)) (k 0)) (loop (outer (vec k k k k k k k k) (ones 2000)) (+ k 1)))", id="matrix-growth"
    ),
]


@pytest.mark.skipif(SANITIZED, reason="wall time and RSS are not meaningful under the sanitizers")
@pytest.mark.parametrize("source", RUNAWAY)
def test_runaway_program_ends_with_limit_error_within_seconds(source):
    t0 = time.perf_counter()
    try:
        proc = run_child(RUNAWAY_CHILD.replace("SOURCE", repr(source)), RUNAWAY_WALL_S + KILL_MARGIN_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"still running after {RUNAWAY_WALL_S + KILL_MARGIN_S:.0f} s (killed): {source}")
    wall = time.perf_counter() - t0
    assert proc.returncode == 0, f"child died (exit {proc.returncode}): {proc.stderr[-1500:]}"
    outcome = json.loads(proc.stdout.strip().splitlines()[-1])
    assert outcome["error"] == "LimitError", f"{source}: {outcome}"
    assert outcome["seconds"] < RUNAWAY_WALL_S, (
        f"{source}: LimitError only after {outcome['seconds']:.1f} s ({outcome})"
    )
    assert outcome["max_rss_mib"] < (ndvm.DEFAULT_LIMITS.max_bytes >> 20) + 600, f"{source}: {outcome}"
    assert wall < RUNAWAY_WALL_S + KILL_MARGIN_S


# ---------------------------------------------------------------------------------------------
# custom limits


def test_custom_step_limit():
    prog = ndvm.compile("(let loop ((i 0)) (if (= i 1000000) i (loop (+ i 1))))", limits=ndvm.Limits(max_steps=10_000))
    t0 = time.perf_counter()
    with pytest.raises(ndvm.LimitError, match="step"):
        prog.run()
    assert time.perf_counter() - t0 < 0.5
    # the same program under the defaults finishes
    assert ndvm.compile("(let loop ((i 0)) (if (= i 100000) i (loop (+ i 1))))").run() == 100000


def test_custom_depth_limit_and_legitimate_deep_recursion():
    deep = "(define (f n) (if (= n 0) 0 (+ 1 (f (- n 1))))) (f 4000)"
    assert ndvm.compile(deep).run() == 4000  # thousands of nested non-tail calls are fine by default
    with pytest.raises(ndvm.LimitError, match="depth"):
        ndvm.compile(deep, limits=ndvm.Limits(max_depth=1000)).run()


@pytest.mark.skipif(SANITIZED, reason="tens of MB of stack under ASan")
def test_raising_max_depth_allows_deeper_recursion():
    """Non-tail recursion is bounded by Limits.max_depth, not by a small C stack (found by this suite:
    it once stopped near 7,000 calls whatever max_depth said)."""
    deep = "(define (f n) (if (= n 0) 0 (+ 1 (f (- n 1))))) (f 20000)"
    assert ndvm.compile(deep, limits=ndvm.Limits(max_depth=1_000_000)).run() == 20000


def test_custom_memory_limit():
    prog = ndvm.compile("(let loop ((v (zeros 1000))) (loop (+ v 1.0)))", limits=ndvm.Limits(max_bytes=16 << 20))
    t0 = time.perf_counter()
    with pytest.raises(ndvm.LimitError, match="memory"):
        prog.run()
    assert time.perf_counter() - t0 < 1.0


def test_limits_apply_to_batched_gradients_and_calibration():
    prog = ndvm.compile("(param a 1.0) (let loop ((s a)) (loop (* s 1.0001)))", limits=ndvm.Limits(max_steps=50_000))
    with pytest.raises(ndvm.LimitError):
        prog.value_and_grad([[1.0], [2.0], [3.0]])
    fits = ndvm.calibrate_many([prog, "(param a 1.0) (* a a)"], loss="value", steps=3, restarts=2, threads=2)
    assert fits[0].status == "error" and fits[0].error_type is ndvm.LimitError
    assert fits[1].status != "error"


def test_limit_error_after_limit_leaves_the_runtime_usable():
    """A LimitError in one evaluation must not poison the per-thread VM for the next one."""
    with pytest.raises(ndvm.LimitError):
        ndvm.compile("(let loop ((v (zeros 1000))) (loop (+ v 1.0)))", limits=ndvm.Limits(max_bytes=8 << 20)).run()
    prog = ndvm.compile("(param a 0.5) (define (f x) (* a x x)) (f 3.0)")
    values, grads = prog.value_and_grad([[0.5], [2.0]])
    assert values.tolist() == [4.5, 18.0] and grads.tolist() == [[9.0], [9.0]]


# ---------------------------------------------------------------------------------------------
# memory stays flat over 100,000 evaluations

FLAT_MEMORY_CHILD = """
import json
import numpy as np
import ndvm

def rss_bytes():
    return int(open("/proc/self/statm").read().split()[1]) * 4096

source = '''
(param q 0.3 positive) (param r 0.5 positive) (param a 0.2)
(define (step x y) (+ (* (- 1.0 q) x) (* q y)))
(define smoothed (let loop ((t 0) (x 0.0) (acc '()))
  (if (= t (size ys)) (reverse acc) (let ((x2 (step x (ref ys t)))) (loop (+ t 1) x2 (cons x2 acc))))))
(define M (mat (vec (+ 1.0 r) a) (vec a (+ 1.0 r))))
(+ (apply + (map (lambda (s y) (square (- s y))) smoothed (vec->list ys)))
   (logdet M) (if (> a 0.1) (dot (solve M (vec 1.0 a)) (vec a 1.0)) (sin a)))
'''
source = source.replace("(vec->list ys)", "(let loop ((i (- (size ys) 1)) (l '())) (if (< i 0) l (loop (- i 1) (cons (ref ys i) l))))")
prog = ndvm.compile(source)
inputs = {"ys": np.sin(np.arange(12) / 3.0)}
theta = np.array([[0.3, 0.5, 0.2], [0.4, 0.6, 0.05], [0.2, 0.1, 0.3]])
def one_round(i):
    if i % 3 == 0:
        prog.evaluate(theta, inputs=inputs)
    elif i % 3 == 1:
        prog.value_and_grad(theta, inputs=inputs)
    else:
        prog.run(inputs=inputs)
for i in range(3000):  # warm-up: arenas reach their working size
    one_round(i)
before = rss_bytes()
for i in range(100_000):
    one_round(i)
after = rss_bytes()
print(json.dumps({"before": before, "after": after, "evaluations": 100_000}))
"""


@pytest.mark.skipif(SANITIZED, reason="RSS is not meaningful under ASan (quarantine, shadow memory)")
def test_memory_stays_flat_over_100000_evaluations():
    proc = run_child(FLAT_MEMORY_CHILD, timeout_s=120, as_bytes=None)
    assert proc.returncode == 0, proc.stderr[-2000:]
    m = json.loads(proc.stdout.strip().splitlines()[-1])
    growth_mib = (m["after"] - m["before"]) / 2**20
    assert growth_mib < 3.0, f"RSS grew by {growth_mib:.2f} MiB over {m['evaluations']} evaluations ({m})"


FLAT_CALIBRATION_CHILD = """
import json
import numpy as np
import ndvm
def rss_bytes():
    return int(open("/proc/self/statm").read().split()[1]) * 4096
x = np.linspace(0, 1, 20)
y = 2.0 * np.exp(-1.3 * x)
sources = ["(param a 1.0) (param k 1.0 positive) (* a (exp (- (* k x))))",
           "(param a 1.0) (param b 0.0) (+ (* a x) b)",
           "(param a 1.0) (if (> a 0.5) (* a x) (+ x a))",
           "(param a 1.0) (car x)"]  # the last one fails every time (type error): errors must not leak either
def one_round():
    ndvm.calibrate_many(sources, inputs={"x": x}, target=y, steps=20, restarts=4, threads=2)
for _ in range(30):
    one_round()
before = rss_bytes()
for _ in range(600):
    one_round()
print(json.dumps({"before": before, "after": rss_bytes(), "rounds": 600}))
"""


@pytest.mark.skipif(SANITIZED, reason="RSS is not meaningful under ASan (quarantine, shadow memory)")
def test_memory_stays_flat_over_repeated_calibrations_and_errors():
    proc = run_child(FLAT_CALIBRATION_CHILD, timeout_s=120, as_bytes=None)
    assert proc.returncode == 0, proc.stderr[-2000:]
    m = json.loads(proc.stdout.strip().splitlines()[-1])
    growth_mib = (m["after"] - m["before"]) / 2**20
    assert growth_mib < 3.0, f"RSS grew by {growth_mib:.2f} MiB over {m['rounds']} calibrate_many rounds ({m})"


# ---------------------------------------------------------------------------------------------
# no input crashes the process

NASTY_SOURCES = [
    "",
    " ",
    ";; only a comment",
    "(",
    ")",
    "(()",
    "())",
    "#",
    "#(1 2)",
    "`(a ,b)",
    '"string"',
    "#\\a",
    "\x00",
    "(+ 1 \x00 2)",
    "(λ x)",
    "(" * 5000,
    "(+ 1 " * 3000 + "1" + ")" * 3000,
    "'" * 5000 + "a",
    "1.2.3",
    "--1",
    "+",
    "1e999",
    "-1e999",
    "(+ 1e308 1e308)",
    "(- 0.0)",
    "(* 1e-320 1e-320)",
    "(. 1)",
    "(1 .)",
    "(1 . 2 . 3)",
    "'(1 . 2 . 3)",
    "#t#f",
    "(quote)",
    "(quote 1 2)",
    "(define)",
    "(define x)",
    "(define 1 2)",
    "(define (f) )",
    "(lambda)",
    "(lambda x)",
    "(lambda (1) 1)",
    "((lambda (x x) x) 1 2)",
    "(let ((x)) x)",
    "(let ((1 2)) 1)",
    "(let loop)",
    "(let* x)",
    "(letrec ((f)) f)",
    "(if)",
    "(if 1 2 3 4)",
    "(cond)",
    "(cond (else))",
    "(case)",
    "(case 1 (2 3))",
    "(do)",
    "(do ((i 0)) )",
    "(loop)",
    "(recur 1)",
    "(loop ((i 0)) (+ 1 (recur i)))",
    "(loop ((i 0)) (recur 1 2))",
    "(begin)",
    "(param)",
    "(param a)",
    "(param a x)",
    "(param a 1 weird)",
    "(param a 1 (between 2 1))",
    "(param a 1) (param a 2) a",
    "(define (f) (param b 1) b) (f)",
    "(param 1 2)",
    "(define x 1) (define x 2) x",
    "(1 2 3)",
    "((lambda (x) x) 1 2)",
    "((lambda (x . y) y))",
    "(car)",
    "(car 1 2)",
    "(car 1.0)",
    "(cdr '())",
    "(car (cdr '(1)))",
    "(+ 'a 1)",
    "(< 1 'a)",
    "(- 'a)",
    "(length '(1 . 2))",
    "(length 5)",
    "(map car '(1 2))",
    "(map)",
    "(map + '(1 2) '(1))",
    "(apply)",
    "(apply +)",
    "(apply + 1)",
    "(apply + 1 2)",
    "(apply 34)",
    "(apply car)",
    "(apply 34 '())",
    "(apply (lambda (x) x) '(1 2))",
    "(list-ref '(1 2) 5)",
    "(list-ref '(1 2) -1)",
    "(list-ref '(1 2) 1.5)",
    "(list-tail '(1) 3)",
    "(reverse '(1 . 2))",
    "(append '(1) 2 '(3))",
    "(assq 'a 5)",
    "(memq 'a '(b . c))",
    "(quotient 1 0)",
    "(modulo 1 0)",
    "(remainder 5 0)",
    "(quotient 1.5 2)",
    "(/ 1 0)",
    "(/ 0 0)",
    "(/ 1.0 0)",
    "(expt 0 -1)",
    "(expt 0.0 -1.0)",
    "(expt -8 1/3)",
    "(log 0)",
    "(log -1)",
    "(sqrt -1)",
    "(asin 2)",
    "(atan 0 0)",
    "(exact->inexact 'a)",
    "(even? 1.5)",
    "(round 'a)",
    "(floor 1e308)",
    "(* 99999999999 99999999999 99999999999)",
    "(vec)",
    "(vec 'a)",
    "(vec (vec 1 2))",
    "(mat)",
    "(mat 1 2)",
    "(mat (vec 1 2) (vec 1))",
    "(mat (vec) (vec))",
    "(ref (vec 1 2) -1)",
    "(ref (vec 1 2) 2)",
    "(ref (vec 1 2) 1.5)",
    "(ref (eye 2) 0 5)",
    "(ref (eye 2) 5)",
    "(ref 1 0)",
    "(inv (mat (vec 1 2) (vec 2 4)))",
    "(inv (ones 2 3))",
    "(inv (zeros 2 2))",
    "(det (ones 2 3))",
    "(logdet (mat (vec -1 0) (vec 0 -1)))",
    "(cholesky (mat (vec -1 0) (vec 0 -1)))",
    "(cholesky (ones 2 3))",
    "(solve (eye 2) (vec 1 2 3))",
    "(solve (zeros 2 2) (vec 1 2))",
    "(matmul (eye 2) (eye 3))",
    "(matvec (eye 2) (vec 1 2 3))",
    "(dot (vec 1 2) (vec 1 2 3))",
    "(outer 1 2)",
    "(+ (vec 1 2) (vec 1 2 3))",
    "(+ (eye 2) (vec 1 2))",
    "(transpose 1)",
    "(trace (ones 2 3))",
    "(vsum 1)",
    "(zeros -1)",
    "(zeros 0)",
    "(zeros 1e10)",
    "(zeros 100000 100000)",
    "(eye 0)",
    "(eye -3)",
    "(eye 2.5)",
    "(ones 'a)",
    "(rows 1)",
    "(cols (vec 1 2))",
    "(size 'a)",
    "(norm (zeros 3))",
    "(sigmoid 'a)",
    "(softplus 1e308)",
    "(define (f . 1) 1)",
    "(define ((f a) b) a)",
    "(let loop ((i 0)) (if (< i 5) (loop) i))",
    "(when)",
    "(unless)",
    "(and . 1)",
    "(or 1 . 2)",
    "(+ . 1)",
    "(if . 1)",
    "(define . x)",
    "(define (f x) (define y 1)) (f 1)",
    "(lambda (x) (define y 1))",
    "x",
    "(+ x y z)",
    "(param a 1) (car a)",
]

NASTY_CHILD = """
import json, sys
import numpy as np
import ndvm
sources = json.loads(sys.stdin.read())
out = []
def outcome(fn):
    try:
        fn()
        return "value"
    except ndvm.NDVMError as exc:
        return "NDVMError"
    except (ValueError, TypeError) as exc:
        return "python:" + type(exc).__name__ + ":" + str(exc)[:120]
    except BaseException as exc:
        return "other:" + type(exc).__name__ + ":" + str(exc)[:120]
for src in sources:
    def go():
        prog = ndvm.compile(src)
        inputs = {name: 0.5 for name in prog.inputs}
        prog.run(inputs=inputs)
    result = outcome(go)
    if result == "value":  # also batched with gradients
        def grad():
            prog = ndvm.compile(src)
            inputs = {name: 0.5 for name in prog.inputs}
            theta = np.tile(prog.theta(), (3, 1)) + np.arange(3)[:, None] * 0.5
            prog.value_and_grad(theta, inputs=inputs)
        g = outcome(grad)
        result = "value" if g in ("value", "NDVMError") else g
    out.append(result)
print(json.dumps(out))
"""

# Inputs that are not programs but bad data handed to a valid program: every one must raise a
# typed error (NDVMError, or ValueError/TypeError for a malformed Python argument) and never crash.
NASTY_API_CHILD = """
import json
import numpy as np
import ndvm
prog = ndvm.compile("(param a 1.0) (param b 0.5 positive) (+ (* a x) b)")
mat_prog = ndvm.compile("(param a 1.0) (logdet (+ (* a (eye 2)) m))")
cases = {
    "string input": lambda: prog.evaluate(inputs={"x": "abc"}),
    "3-d input": lambda: prog.evaluate(inputs={"x": np.zeros((2, 2, 2))}),
    "empty input": lambda: prog.evaluate(inputs={"x": []}),
    "ragged input": lambda: prog.evaluate(inputs={"x": [[1, 2], [3]]}),
    "missing input": lambda: prog.evaluate(),
    "nan input": lambda: prog.evaluate(inputs={"x": [np.nan, 1.0]}),
    "object input": lambda: prog.evaluate(inputs={"x": object()}),
    "lane input wrong lanes": lambda: prog.evaluate([[1.0, 0.5]] * 3, lane_inputs={"x": np.zeros((2, 4))}),
    "lane input no lane axis": lambda: prog.evaluate([[1.0, 0.5]], lane_inputs={"x": 1.0}),
    "lane inputs ragged shapes": lambda: prog.evaluate([[1.0, 0.5]] * 2, lane_inputs={"x": [[1.0, 2.0], [1.0]]}),
    "theta wrong width": lambda: prog.evaluate([[1.0, 0.5, 3.0]], inputs={"x": 1.0}),
    "theta 3-d": lambda: prog.evaluate(np.zeros((1, 2, 2)), inputs={"x": 1.0}),
    "theta nan": lambda: prog.value_and_grad([[np.nan, 0.5]], inputs={"x": 1.0}),
    "theta empty": lambda: prog.evaluate(np.zeros((0, 2)), inputs={"x": 1.0}),
    "theta strings": lambda: prog.evaluate([["a", "b"]], inputs={"x": 1.0}),
    "vector result grad": lambda: prog.value_and_grad([[1.0, 0.5]], inputs={"x": [1.0, 2.0]}),
    "unknown param": lambda: prog.run(params={"zzz": 1.0}, inputs={"x": 1.0}),
    "matrix input wrong shape": lambda: mat_prog.evaluate(inputs={"m": np.ones((3, 3))}),
    "matrix input singular": lambda: mat_prog.value_and_grad([[-1.0]], inputs={"m": np.eye(2)}),
    "calibrate target wrong length": lambda: ndvm.calibrate(prog, {"x": [1.0, 2.0]}, target=[1.0, 2.0, 3.0], steps=2, restarts=2),
    "calibrate nan target": lambda: ndvm.calibrate(prog, {"x": [1.0, 2.0]}, target=[np.nan, 1.0], steps=2, restarts=2),
    "calibrate_many junk": lambda: ndvm.calibrate_many(["(", "(car 1)", 42], {"x": [1.0]}, target=[1.0], steps=2, restarts=2),
    "compile bytes": lambda: ndvm.compile(b"(+ 1 2)"),
    "compile None": lambda: ndvm.compile(None),
    "huge lanes": lambda: prog.evaluate(np.zeros((200000, 2)), inputs={"x": np.ones(50)}),
}
out = {}
for name, fn in cases.items():
    try:
        fn()
        out[name] = "value"
    except ndvm.NDVMError:
        out[name] = "NDVMError"
    except (ValueError, TypeError) as exc:
        out[name] = "python:" + type(exc).__name__
    except BaseException as exc:
        out[name] = "other:" + type(exc).__name__ + ":" + str(exc)[:120]
print(json.dumps(out))
"""

# Sources whose outcome is currently not an NDVMError because of a runtime bug (see the report).
KNOWN_NON_NDVM: dict[str, str] = {}


def test_no_source_crashes_the_process():
    proc = subprocess.run(
        [sys.executable, "-c", NASTY_CHILD],
        input=json.dumps(NASTY_SOURCES),
        capture_output=True,
        text=True,
        timeout=120,
        env=CHILD_ENV,
    )
    assert proc.returncode == 0, f"the process died (exit {proc.returncode}): {proc.stderr[-2000:]}"
    outcomes = dict(zip(NASTY_SOURCES, json.loads(proc.stdout.strip().splitlines()[-1])))
    bad = {src[:80]: o for src, o in outcomes.items() if o not in ("value", "NDVMError") and src not in KNOWN_NON_NDVM}
    assert not bad, f"inputs that raised something other than an NDVMError: {bad}"
    # most of them are errors; the rest are legitimate values (inf, nan, an empty program, a free input)
    assert sum(o == "NDVMError" for o in outcomes.values()) > 0.7 * len(NASTY_SOURCES)


def test_apply_without_list_is_a_typed_error():
    """Found by the fuzzer: `(apply f)` once built a std::vector from a reversed range (UB) and leaked
    std::length_error to Python as ValueError."""
    for source in ("(apply +)", "(apply 34)", "(apply car)"):
        with pytest.raises(ndvm.NDVMError):
            ndvm.compile(source).run()


# Bad arguments whose outcome is currently an unexpected exception type because of a known bug.
KNOWN_API_BUGS: dict[str, str] = {}


def test_no_bad_argument_crashes_the_process():
    proc = run_child(NASTY_API_CHILD, timeout_s=120, as_bytes=None)
    assert proc.returncode == 0, f"the process died (exit {proc.returncode}): {proc.stderr[-2000:]}"
    outcomes = json.loads(proc.stdout.strip().splitlines()[-1])
    others = {k: v for k, v in outcomes.items() if v.startswith("other:") and k not in KNOWN_API_BUGS}
    assert not others, f"bad arguments that raised an unexpected exception type: {others}"
    silent = {k for k, v in outcomes.items() if v == "value"} - {
        "nan input",
        "theta nan",
        "calibrate nan target",
        "calibrate_many junk",
        "huge lanes",
        "matrix input singular",
    }
    assert not silent, f"bad arguments accepted silently: {sorted(silent)}"


def test_calibrate_many_turns_a_non_program_item_into_a_fit_error():
    """Found by this file: an int among the programs once raised AttributeError for the whole batch."""
    fits = ndvm.calibrate_many(["(param a 1.0) (* a x)", 42], {"x": [1.0]}, target=[1.0], steps=2, restarts=2)
    assert fits[0].status != "error" and fits[1].status == "error"


# ---------------------------------------------------------------------------------------------
# issue 17: sizes in 64 bits, linear-algebra scratch in the memory budget, the work budget and the
# wall-clock limit (docs/reliability.md, "Limits"). Cases that crashed the process before the fix
# run in a child, so a crash fails the test rather than the suite.

SIZES_CHILD = """
import json, sys
import numpy as np
import ndvm
cases = json.loads(sys.stdin.read())
out = []
for source, limits, lanes in cases:
    try:
        prog = ndvm.compile(source, limits=ndvm.Limits(**limits))
        if lanes:
            prog.evaluate(np.linspace(0.5, 1.5, lanes)[:, None])
        else:
            prog.run()
        out.append({"error": None})
    except BaseException as exc:
        out.append({"error": type(exc).__name__, "message": str(exc)})
print(json.dumps(out))
"""

HUGE = {"max_bytes": 2**62, "max_work": 2**62}  # budgets that do not stop a size: the size checks must
# Each: source, Limits fields, lanes (0: run one lane), words the LimitError message must contain.
SIZE_CASES = [
    # rows * cols past 32 bits: once a wrapped size, a small buffer and a SIGSEGV
    ("(vsum (outer (ones 70000) (ones 70000)))", {}, 0, ["'outer'"]),
    ("(vsum (outer (ones 65536) (ones 65537)))", HUGE, 0, ["'outer'", "array too large"]),
    ("(vsum (matmul (ones 70000 1) (ones 1 70000)))", HUGE, 0, ["'matmul'", "array too large"]),
    ("(vsum (outer (ones 70000) (ones 70000)))", {"max_bytes": 64 << 30}, 0, ["'outer'"]),
    # huge make-vector / make-matrix: a dimension past 32 bits was truncated by a cast
    ("(vsum (zeros 4294967297))", {}, 0, ["'zeros'", "memory budget (max_bytes=1024 MiB"]),
    ("(vsum (zeros 4294967297))", HUGE, 0, ["'zeros'", "past 2^32"]),
    ("(vsum (ones 100000 100000))", {}, 0, ["'ones'", "memory budget"]),
    ("(vsum (eye 3037000500))", HUGE, 0, ["'eye'", "more than 2^64 bytes"]),
    # lane buffers: a lane-varying 2000 x 2000 matrix in 300 lanes is 9.6 GB
    ("(param a 1.0) (vsum (outer (* a (ones 2000)) (ones 2000)))", {}, 300, ["'outer'", "memory budget"]),
    # a result the same in every lane, copied out for each of 200 lanes (16 GB)
    ("(param a 1.0) (+ (ones 10000000) 0.0)", {}, 200, ["the result", "memory budget"]),
    # linear-algebra scratch counts against the budget: the 2000 x 2000 matrix and its inverse fit
    # in 70 MiB, the four n x n work matrices of the inversion do not
    (
        "(vsum (inv (eye 2000)))",
        {"max_bytes": 70 << 20, "max_work": 10**11},
        0,
        ["'inv'", "memory budget (max_bytes=70 MiB"],
    ),
    ("(det (eye 2000))", {"max_bytes": 40 << 20, "max_work": 10**11}, 0, ["'det'", "memory budget (max_bytes=40 MiB"]),
    ("(vsum (cholesky (eye 2000)))", {"max_bytes": 70 << 20, "max_work": 10**11}, 0, ["'cholesky'", "memory budget"]),
    (
        "(vsum (solve (eye 2000) (ones 2000 2000)))",
        {"max_bytes": 70 << 20, "max_work": 10**11},
        0,
        ["'solve'", "memory budget"],
    ),
]


def test_sizes_are_checked_in_64_bits_before_allocating():
    cases = [[src, lim, lanes] for src, lim, lanes, _ in SIZE_CASES]
    proc = subprocess.run(
        [sys.executable, "-c", SIZES_CHILD],
        input=json.dumps(cases),
        capture_output=True,
        text=True,
        timeout=120,
        env=CHILD_ENV,
    )
    assert proc.returncode == 0, f"the process died (exit {proc.returncode}): {proc.stderr[-2000:]}"
    outcomes = json.loads(proc.stdout.strip().splitlines()[-1])
    for (src, lim, lanes, words), got in zip(SIZE_CASES, outcomes):
        assert got["error"] == "LimitError", f"{src} {lim} lanes={lanes}: {got}"
        for word in words:
            assert word in got["message"], f"{src} {lim}: {word!r} not in {got['message']!r}"


def test_sizes_just_inside_the_budget_still_work():
    """The checks refuse what is too large, not what is large: an 8,000 x 8,000 product (512 MB) and
    linear algebra whose scratch fits pass at the defaults."""
    assert ndvm.compile("(vsum (outer (ones 8000) (ones 8000)))").run() == 64_000_000.0
    assert ndvm.compile("(det (eye 500))").run() == 1.0
    assert ndvm.compile("(trace (inv (eye 300)))", limits=ndvm.Limits(max_bytes=8 << 20)).run() == 300.0


WORK_RUNAWAY = [
    # the determinant of a 400 x 400 matrix at every step: 20M steps at 64M operations each were
    # hours of work under a step budget alone
    pytest.param(
        "(let ((m (+ (eye 400) (ones 400 400)))) (let loop ((i 0) (s 0.0)) (loop (+ i 1) (+ s (det m)))))",
        "'det'",
        id="det-400-loop",
    ),
    pytest.param(
        "(let ((m (eye 300))) (let loop ((x (ones 300))) (loop (solve m x))))", "'solve'", id="solve-300-loop"
    ),
    pytest.param(
        "(let ((m (ones 600 600))) (let loop ((k 0)) (matmul m m) (loop (+ k 1))))", "'matmul'", id="matmul-600-loop"
    ),
    pytest.param("(let ((v (ones 1000000))) (let loop ((s 0.0)) (loop (+ s (vsum v)))))", "'vsum'", id="vsum-1e6-loop"),
    pytest.param(
        "(let ((l (vec->list (ones 100000)))) (let loop ((i 0)) (loop (+ i (length l)))))",
        "'length'",
        id="length-1e5-loop",
    ),
    pytest.param(
        "(let ((l (vec->list (ones 100000)))) (let loop ((i 0)) (if (memv 2.0 l) 0 (loop (+ i 1)))))",
        "'memv'",
        id="memv-miss-loop",
    ),
]


@pytest.mark.skipif(SANITIZED, reason="wall time is not meaningful under the sanitizers")
@pytest.mark.parametrize("source,where", WORK_RUNAWAY)
def test_runaway_work_ends_with_the_work_budget_within_seconds(source, where):
    try:
        proc = run_child(RUNAWAY_CHILD.replace("SOURCE", repr(source)), RUNAWAY_WALL_S + KILL_MARGIN_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"still running after {RUNAWAY_WALL_S + KILL_MARGIN_S:.0f} s (killed): {source}")
    assert proc.returncode == 0, f"child died (exit {proc.returncode}): {proc.stderr[-1500:]}"
    outcome = json.loads(proc.stdout.strip().splitlines()[-1])
    assert outcome["error"] == "LimitError", f"{source}: {outcome}"
    assert f"work budget (max_work={ndvm.DEFAULT_LIMITS.max_work} element operations) exceeded" in outcome["message"]
    assert outcome["message"].startswith(where), outcome["message"]
    assert outcome["seconds"] < RUNAWAY_WALL_S, f"{source}: LimitError only after {outcome['seconds']:.1f} s"


def test_work_budget_is_configurable_and_counts_linear_algebra_at_its_cost():
    det = "(det (eye 100))"  # 100^3 = 1e6 operations
    assert ndvm.compile(det, limits=ndvm.Limits(max_work=2_000_000)).run() == 1.0
    with pytest.raises(ndvm.LimitError, match=r"work budget \(max_work=900000 element operations\)"):
        ndvm.compile(det, limits=ndvm.Limits(max_work=900_000)).run()
    # a matrix product counts m*k*n: 200 x 200 by 200 x 200 is 8e6, its inputs and output 120,000
    prod = "(vsum (matmul (ones 200 200) (ones 200 200)))"
    assert ndvm.compile(prod, limits=ndvm.Limits(max_work=9_000_000)).run() == 200.0 * 40_000
    with pytest.raises(ndvm.LimitError, match="'matmul': work budget"):
        ndvm.compile(prod, limits=ndvm.Limits(max_work=7_000_000)).run()
    # elementwise work counts every element: 100 additions of a 10,000-vector are 1e6
    loop = "(let loop ((i 0) (v (zeros 10000))) (if (= i 100) (vsum v) (loop (+ i 1) (+ v 1.0))))"
    assert ndvm.compile(loop, limits=ndvm.Limits(max_work=1_100_000)).run() == 1000000.0
    with pytest.raises(ndvm.LimitError, match="work budget"):
        ndvm.compile(loop, limits=ndvm.Limits(max_work=900_000)).run()


def test_max_seconds_stops_a_long_loop():
    # under the default step and work budgets this loop takes tens of seconds; 0.5 s of wall clock ends it
    src = "(let loop ((i 0) (s 0.0)) (if (= i 3000000000) s (loop (+ i 1) (+ s 1.0))))"
    limits = ndvm.Limits(max_steps=10**15, max_work=10**15, max_seconds=0.5)
    t0 = time.perf_counter()
    with pytest.raises(ndvm.LimitError, match=r"wall-clock limit \(max_seconds=0.5\) exceeded after 0\.\d\d s"):
        ndvm.compile(src, limits=limits).run()
    took = time.perf_counter() - t0
    assert 0.5 <= took < 3.0, took
    # the same limit on gradients over lanes
    grad_src = "(param a 1.0) (let loop ((i 0) (s a)) (if (= i 3000000000) s (loop (+ i 1) (+ s (* a 1e-9)))))"
    t0 = time.perf_counter()
    with pytest.raises(ndvm.LimitError, match="wall-clock limit"):
        ndvm.compile(grad_src, limits=limits).value_and_grad([[1.0], [2.0]])
    assert time.perf_counter() - t0 < 3.0


def test_max_seconds_is_checked_inside_long_linear_algebra():
    """One determinant of a 3,000 x 3,000 matrix is a single step of 10-20 s (2e10 multiply-adds):
    the clock is polled inside the LU factorization, so 0.3 s of wall clock ends it long before."""
    limits = ndvm.Limits(max_work=10**12, max_seconds=0.3)
    t0 = time.perf_counter()
    with pytest.raises(ndvm.LimitError, match=r"wall-clock limit \(max_seconds=0.3\)"):
        ndvm.compile("(det (eye 3000))", limits=limits).run()
    assert time.perf_counter() - t0 < 5.0


def test_limits_fields_are_keywords_with_the_native_defaults():
    native = ndvm._native.Limits()  # the C++ struct's defaults (native/src/program.h)
    default = ndvm.Limits()
    for name in ("max_steps", "max_depth", "max_bytes", "replay", "max_work"):
        assert getattr(default, name) == getattr(native, name), name
    assert native.max_seconds == 0 and default.max_seconds is None  # off, in each side's spelling
    custom = ndvm.Limits(1000, 10, 1 << 20, max_work=77, max_seconds=2.5, replay=False).native()
    assert (
        custom.max_steps,
        custom.max_depth,
        custom.max_bytes,
        custom.max_work,
        custom.max_seconds,
        custom.replay,
    ) == (1000, 10, 1 << 20, 77, 2.5, False)
    assert ndvm.Limits(1000, 10, 1 << 20).max_bytes == 1 << 20  # the first three still by position
    with pytest.raises(TypeError):
        ndvm.Limits(1000, 10, 1 << 20, False)  # the others are keyword-only
    for bad in (
        {"max_work": 0},
        {"max_work": -5},
        {"max_steps": 1.5},
        {"max_seconds": 0},
        {"max_seconds": -1.0},
        {"max_seconds": float("nan")},
        {"max_seconds": "1"},
        {"max_bytes": True},
        {"max_bytes": 2**64},
    ):
        with pytest.raises(ValueError, match=f"Limits.{next(iter(bad))}|out of range"):
            ndvm.Limits(**bad)


REPLAY_SRC = """
(param q 0.5 positive)
(define F (mat (vec 1.0 0.1) (vec 0.0 1.0)))
(let loop ((t 0) (x (vec 0.0 1.0)) (P (eye 2)) (acc 0.0))
  (if (= t 50) acc
      (let* ((x2 (matvec F x)) (P2 (+ (matmul (matmul F P) (transpose F)) (* q (eye 2))))
             (S (+ (ref P2 0 0) 1.0)))
        (loop (+ t 1) x2 (- P2 (/ (outer (vec (ref P2 0 0) (ref P2 1 0)) (vec (ref P2 0 0) (ref P2 0 1))) S))
              (+ acc (logdet P2) (/ (square (- (ref x2 0) 0.3)) S))))))
"""


def test_budgets_hold_alike_for_walked_and_replayed_evaluations():
    """Replayed work counts: a replay is charged as its walk was, so a budget between a walk's work
    and less fails both ways and a budget that fits lets every later (replayed) call pass."""
    walked = ndvm.compile(REPLAY_SRC, limits=ndvm.Limits(replay=False))
    walked.value_and_grad([[0.5], [0.7]])
    walk_work = ndvm._native.last_usage()["work"]
    assert walk_work > 1000
    fits = ndvm.compile(REPLAY_SRC, limits=ndvm.Limits(max_work=walk_work))
    replayed0 = ndvm._native.replay_counts()[0]
    for k in range(4):
        fits.value_and_grad([[0.5 + 0.01 * k], [0.7]])
    assert ndvm._native.replay_counts()[0] == replayed0 + 3  # the first call walked, the others replayed
    replay_work = ndvm._native.last_usage()["work"]
    assert 0.5 * walk_work < replay_work <= walk_work
    for replay in (True, False):
        tight = ndvm.compile(REPLAY_SRC, limits=ndvm.Limits(max_work=walk_work - 1, replay=replay))
        for _ in range(2):
            with pytest.raises(ndvm.LimitError, match="work budget"):
                tight.value_and_grad([[0.5], [0.7]])


RUNAWAY_WORK = "(param a 1.0) (let ((m (+ (eye 400) (ones 400 400)))) (let loop ((s a)) (loop (+ s (det m)))))"
RUNAWAY_CLOCK = "(param a 1.0) (let loop ((i 0) (s a)) (if (= i 3000000000) s (loop (+ i 1) (* s 1.0))))"


def test_calibrate_many_reports_a_program_over_its_budgets_without_disturbing_the_others():
    x = np.linspace(0.0, 1.0, 30)
    y = 1.5 * np.exp(-0.7 * x)
    good = ["(param a 1.0) (param k 1.0 positive) (* a (exp (- (* k x))))", "(param a 1.0) (param b 0.0) (+ (* a x) b)"]
    options = {"inputs": {"x": x}, "target": y, "steps": 15, "restarts": 4, "threads": 2}
    alone = ndvm.calibrate_many(good, **options)
    mixed = ndvm.calibrate_many([good[0], RUNAWAY_WORK + " x", good[1]], **options)
    assert mixed[1].status == "error" and mixed[1].error_type is ndvm.LimitError
    assert "work budget" in mixed[1].error
    for a, m in zip(alone, (mixed[0], mixed[2])):
        assert m.status == a.status != "error"
        assert np.array_equal(m.all_losses, a.all_losses) and np.array_equal(m.all_params, a.all_params)
    # the wall clock too (a loop that would run for minutes under the step and work budgets)
    clock = ndvm.Limits(max_steps=10**15, max_work=10**15, max_seconds=0.3)
    progs = [ndvm.compile(s, limits=clock) for s in (good[0], RUNAWAY_CLOCK + " (* a x)", good[1])]
    t0 = time.perf_counter()
    fits = ndvm.calibrate_many(progs, **options)
    assert time.perf_counter() - t0 < 10.0
    assert fits[1].status == "error" and fits[1].error_type is ndvm.LimitError and "wall-clock limit" in fits[1].error
    assert np.array_equal(fits[0].all_losses, alone[0].all_losses)
    assert np.array_equal(fits[2].all_losses, alone[1].all_losses)


def test_calibrate_of_a_program_over_its_budget_raises_limit_error():
    with pytest.raises(ndvm.LimitError, match="work budget"):
        ndvm.calibrate(RUNAWAY_WORK, loss="value", steps=3, restarts=2)


def test_calibrate_many_runs_each_program_under_its_own_limits():
    """The native batch takes one Limits; programs with different ones are batched apart, so a tight
    budget on one program neither stops nor protects its batch-mates (it used to be the first
    program's Limits for all)."""
    x = np.linspace(0.0, 1.0, 30)
    y = 1.5 * np.exp(-0.7 * x)
    source = "(param a 1.0) (param k 1.0 positive) (* a (exp (- (* k x))))"
    options = {"inputs": {"x": x}, "target": y, "steps": 15, "restarts": 4, "threads": 2}
    tight = ndvm.Limits(max_work=100)  # one evaluation of the model over 30 points is ~150
    alone = ndvm.calibrate_many([source], **options)[0]
    fits = ndvm.calibrate_many(
        [
            ndvm.compile(source, limits=tight),
            ndvm.compile(source),
            ndvm.compile(RUNAWAY_WORK + " x", limits=tight),
            source,
        ],
        **options,
    )
    assert fits[0].status == "error" and fits[0].error_type is ndvm.LimitError and "work budget" in fits[0].error
    assert fits[2].status == "error" and fits[2].error_type is ndvm.LimitError and "work budget" in fits[2].error
    for fit in (fits[1], fits[3]):
        assert fit.status != "error" and np.array_equal(fit.all_losses, alone.all_losses)
    # source text takes the batch's limits= argument
    under = ndvm.calibrate_many([source, source], limits=tight, **options)
    assert all(f.status == "error" and f.error_type is ndvm.LimitError for f in under)
