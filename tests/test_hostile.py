"""Hostile-input corpus (issue 17): programs built to crash or stall the runtime.

Each case must end, within seconds, in the right value or in the right typed error whose message
names the limit or the problem. The classes: datum comments, deep quotes, deep nesting of every
syntactic form, long flat forms, sizes that overflow 32 bits, huge allocations, runaway work,
deep recursion, long and deep run-time data and their printing, bad numbers, small-stack threads,
the canonical form and the proposers' reader.

Cases run in child processes, a batch per process: the child prints ``START name`` before a case
and ``END {json}`` after it, so a crash (SIGSEGV, abort) or a hang is pinned on the case that
started and never ended; that case fails, and the rest of its batch is run again in a fresh child.
Every child runs under an address-space cap, so an allocation that escapes the memory budget
fails the case rather than the machine.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SANITIZED = os.environ.get("NDVM_SANITIZED") == "1"  # scripts/sanitize.sh: much slower, no time bound
AS_CAP = 12 << 30  # address space of a child: the 1 GiB budget, evaluation stacks, numpy, torch
CASE_SECONDS = 8.0  # a bound with room for a loaded 2-core machine


@dataclass
class Case:
    name: str
    source: str
    kind: str  # "value" or the error class: ParseError, CheckError, EvalError, LimitError, SexprError
    want: str  # value: to_scheme of the result ("~" prefix: a regex it must match); error: regex on the message
    mode: str = "run"  # run | canonical | thread | calibrate_many | sexpr
    limits: dict = field(default_factory=dict)  # keyword arguments of ndvm.Limits
    stack: int = 0  # mode "thread": the thread's stack size in bytes (0: Python's default)
    seconds: float = CASE_SECONDS


def nest(open_: str, close: str, depth: int, leaf: str = "1") -> str:
    return open_ * depth + leaf + close * depth


def flat(template: str, n: int, sep: str = " ") -> str:
    return sep.join(template.format(i=i, j=i - 1) for i in range(n))


NESTING = r"nesting deeper than 2000 levels \(the nesting limit\)"

# Every syntactic form nested: (form, opening, closing, depth that must work, its value).
# Forms with two parentheses per level work to ~1,000 levels, one-parenthesis forms to ~2,000.
FORMS = [
    ("list", "(list ", ")", 1990, "~^" + re.escape("(" * 50)),
    ("if", "(if #t ", " 0)", 1990, "1"),
    ("let", "(let ((x 1)) ", ")", 990, "1"),
    ("let*", "(let* ((x 1) (y x)) ", ")", 660, "1"),
    ("letrec", "(letrec ((f (lambda () 1))) ", ")", 660, "1"),
    ("lambda", "((lambda (x) ", ") 1)", 990, "1"),
    ("begin", "(begin 0 ", ")", 1990, "1"),
    ("and", "(and #t ", ")", 1990, "1"),
    ("or", "(or #f ", ")", 1990, "1"),
    ("when", "(when #t ", ")", 1990, "1"),
    ("unless", "(unless #f ", ")", 1990, "1"),
    ("cond", "(cond (#f 0) (else ", "))", 990, "1"),
    ("case", "(case 1 ((1) ", "))", 990, "1"),
    ("do", "(do ((i 0 (+ i 1))) ((= i 1) ", "))", 660, "1"),
    ("named-let", "(let lp ((i 0)) ", ")", 990, "1"),
    ("loop", "(loop ((i 0)) (if (> i 0) 2 ", " ))", 660, "1"),
    ("define", "(let () (define v ", ") v)", 990, "1"),
    ("quote", "'", "", 1990, "~^\\(quote \\(quote .* 1\\)+$"),
    ("dotted", "(0 . ", ")", 1990, "~^\\(0 0 0 .* 0 \\. 1\\)$"),
    ("vec", "(vsum (vec ", "))", 990, "1.0"),
    ("commutative", "(+ 1 (* 1 ", "))", 990, "991"),
    ("car-cdr", "(car (list ", "))", 990, "1"),
]

CASES: list[Case] = []
for form, o, c, ok_depth, value in FORMS:
    quote = "'" if form == "dotted" else ""  # a quoted (0 . (0 . ... 1))
    CASES.append(Case(f"nest-{form}-{ok_depth}", quote + nest(o, c, ok_depth), "value", value))
    CASES.append(Case(f"nest-{form}-3000", quote + nest(o, c, 3000), "ParseError", NESTING))

CASES += [
    # ---- datum comments and comments --------------------------------------------------------
    Case("datum-comments-300k-one-by-one", "#; 1 " * 300_000 + "42", "value", "42"),
    Case("datum-comments-300k-in-a-run", "#; " * 300_000 + "1 " * 300_000 + "7", "value", "7"),
    Case("datum-comments-in-a-list", "(+ " + "#; " * 200_000 + "1 " * 200_000 + "2 3)", "value", "5"),
    Case("datum-comments-nested-3000", nest("(#;", ")", 3000), "ParseError", NESTING),
    Case("datum-comment-without-datum", "(+ 1 #;)", "ParseError", "#; comment without a datum"),
    Case("block-comments-nested-100k", "#|" * 100_000 + "|#" * 100_000 + " 5", "value", "5"),
    Case("block-comment-unterminated", "#|" * 1000 + " 5", "ParseError", "unterminated block comment"),
    # ---- deep quotes, parentheses ----------------------------------------------------------------
    Case("quotes-100k", "'" * 100_000 + "x", "ParseError", NESTING),
    Case("open-parens-1M", "(" * 1_000_000, "ParseError", NESTING),
    Case("brackets-5000", nest("[", "]", 5000), "ParseError", NESTING),
    Case("quasiquote-deep", "`" * 10_000 + "x", "ParseError", "quasiquote is not supported"),
    # ---- long flat forms: these must work -----------------------------------------------------------
    Case(
        "cond-150k-clauses",
        "(define x 3) (cond " + " ".join(f"((= x {i}) {i})" for i in range(150_000, -1, -1)) + ")",
        "value",
        "3",
    ),
    Case(
        "cond-150k-no-match", "(define x -1) (cond " + flat("((= x {i}) {i})", 150_000) + ")", "value", "#<unspecified>"
    ),
    Case("cond-150k-test-only-clauses", "(cond " + "(#f) " * 150_000 + "(7))", "value", "7"),
    Case("case-100k-clauses", "(case 99999 " + flat("(({i}) {i})", 100_000) + " (else -1))", "value", "99999"),
    Case(
        "let*-150k-bindings",
        "(let* ((a0 0) " + " ".join(f"(a{i} (+ a{i - 1} 1))" for i in range(1, 150_000)) + ") a149999)",
        "value",
        "149999",
    ),
    Case("let-100k-bindings", "(let (" + flat("(a{i} {i})", 100_000) + ") (+ a0 a99999))", "value", "99999"),
    Case("letrec-50k-bindings", "(letrec (" + flat("(f{i} (lambda () {i}))", 50_000) + ") (f49999))", "value", "49999"),
    Case("defines-150k", flat("(define a{i} {i})", 150_000) + " (+ a1 a149999)", "value", "150000"),
    Case(
        "internal-defines-100k", "(define (f) " + flat("(define a{i} {i})", 100_000) + " a99999) (f)", "value", "99999"
    ),
    Case("begin-300k", "(begin " + "1 " * 300_000 + "2)", "value", "2"),
    Case("and-300k", "(and " + "1 " * 300_000 + "#f)", "value", "#f"),
    Case("or-300k", "(or " + "#f " * 300_000 + "3)", "value", "3"),
    Case(
        "lambda-50k-parameters",
        "((lambda (" + flat("p{i}", 50_000) + ") p49999) " + flat("{i}", 50_000) + ")",
        "value",
        "49999",
    ),
    Case("params-20k", flat("(param q{i} 0.5)", 20_000) + " (+ q0 q19999)", "value", "1.0"),
    Case("quoted-list-1M", "(length '(" + "1 " * 1_000_000 + "))", "value", "1000000"),
    Case("quoted-symbols-200k", "(length '(" + flat("s{i}", 200_000) + "))", "value", "200000"),
    Case("vec-literal-200k", "(vsum (vec " + "1.0 " * 200_000 + "))", "value", "200000.0"),
    Case("plus-200k-operands", "(+ " + "1 " * 200_000 + ")", "value", "200000"),
    Case("mat-literal-20k-rows", "(rows (mat " + "(vec 1 2) " * 20_000 + "))", "value", "20000"),
    # ---- sizes that overflow 32 bits, huge allocations (memory budget) -----------------------------
    Case(
        "matmul-2^32-elements", "(matmul (ones 65536 1) (ones 1 65536))", "LimitError", r"memory budget|array too large"
    ),
    Case("outer-2^32-elements", "(outer (ones 65536) (ones 65536))", "LimitError", r"memory budget|array too large"),
    Case("zeros-2^32-rows", "(zeros 4294967296 1)", "LimitError", r"memory budget|array too large"),
    Case("zeros-2^33-square", "(zeros 92682 92682)", "LimitError", r"memory budget|array too large"),
    Case("ones-2^64-overflow", "(ones 4294967296 4294967296)", "LimitError", r"memory budget|array too large"),
    Case("eye-100k", "(eye 100000)", "LimitError", r"memory budget|array too large"),
    Case("inv-eye-20k-scratch", "(inv (eye 20000))", "LimitError", r"memory budget|too large"),
    Case("transpose-2^31", "(transpose (zeros 2 1073741824))", "LimitError", r"memory budget|array too large"),
    Case("zeros-negative", "(zeros -1)", "EvalError", r"zeros"),
    Case("zeros-nan", "(zeros +nan.0)", "EvalError", r"zeros"),
    # ---- compilation under the memory budget (a 4 MB source is a 300 MB syntax tree) -----------------
    Case(
        "compile-budget-while-reading",
        "(vsum (vec " + "1.0 " * 1_000_000 + "))",
        "LimitError",
        r"memory budget \(max_bytes=64 MiB\) exceeded while reading the program",
        limits={"max_bytes": 64 << 20},
    ),
    Case(
        "compile-budget-while-compiling",
        "(vsum (vec " + "1.0 " * 1_000_000 + "))",
        "LimitError",
        r"memory budget \(max_bytes=256 MiB\) exceeded while compiling the program",
        limits={"max_bytes": 256 << 20},
    ),
    # ---- runaway work (work budget, wall-clock limit) ------------------------------------------------
    Case(
        "det-400-in-a-loop",
        "(define m (+ (eye 400) (* 0.001 (ones 400 400)))) (do ((i 0 (+ i 1)) (s 0.0 (+ s (det m)))) (#f s))",
        "LimitError",
        r"work budget \(max_work=",
    ),
    Case(
        "matmul-300-in-a-loop",
        "(define m (ones 300 300)) (let lp ((i 0) (a m)) (lp (+ i 1) (matmul m m)))",
        "LimitError",
        r"work budget",
    ),
    Case(
        "work-budget-small",
        "(vsum (matmul (ones 100 100) (ones 100 100)))",
        "LimitError",
        r"work budget \(max_work=1000 ",
        limits={"max_work": 1000},
    ),
    Case(
        "wall-clock-limit",
        "(let lp ((i 0)) (lp (+ i 1)))",
        "LimitError",
        r"wall-clock limit \(max_seconds=0\.3\)",
        limits={"max_seconds": 0.3, "max_steps": 10**15},
    ),
    Case("step-budget", "(let lp () (lp))", "LimitError", r"step budget"),
    # ---- deep recursion, long and deep data, printing -------------------------------------------------
    Case(
        "non-tail-recursion-1M",
        "(define (f n) (if (= n 0) 0 (+ 1 (f (- n 1))))) (f 1000000)",
        "LimitError",
        r"recursion depth exceeded \(100000 nested calls\)",
    ),
    Case(
        "list-1M-built-and-printed",
        "(let lp ((i 0) (acc '())) (if (= i 1000000) acc (lp (+ i 1) (cons 0 acc))))",
        "value",
        "~^\\((0 ){999999}0\\)$",
        seconds=15,
    ),  # 1M elements through OutValue, Python and to_scheme
    Case(
        "deep-list-1990-printed",
        "(let lp ((i 0) (acc '())) (if (= i 1990) acc (lp (+ i 1) (list acc))))",
        "value",
        "~^\\({1991}\\){1991}$",
    ),
    Case(
        "deep-list-3000-result",
        "(let lp ((i 0) (acc '())) (if (= i 3000) acc (lp (+ i 1) (list acc))))",
        "LimitError",
        r"the result is nested more than 2000 levels deep \(the nesting limit\)",
    ),
    Case(
        "car-chain-100k-result",
        "(let lp ((i 0) (acc 1)) (if (= i 100000) acc (lp (+ i 1) (cons acc 1))))",
        "LimitError",
        r"nested more than 2000 levels",
    ),
    Case(
        "cdr-chain-improper-100k",
        "(let lp ((i 0) (acc 1)) (if (= i 100000) acc (lp (+ i 1) (cons 1 acc))))",
        "value",
        "~^\\(1 1 .* 1 \\. 1\\)$",
    ),
    Case(
        "equal-deep-car-chains",
        "(define (mk i a) (if (= i 0) a (mk (- i 1) (cons a 1)))) (equal? (mk 100000 1) (mk 100000 1))",
        "value",
        "#t",
    ),
    Case(
        "apply-100k-list",
        "(define (mk i a) (if (= i 0) a (mk (- i 1) (cons i a)))) (apply + (mk 100000 '()))",
        "value",
        "5000050000",
    ),
    Case(
        "append-doubling",
        "(let lp ((l '(1))) (lp (append l l)))",
        "LimitError",
        r"memory budget \(max_bytes=256",
        limits={"max_bytes": 256 << 20},
    ),
    Case(
        "map-over-1M",
        "(define (mk i a) (if (= i 0) a (mk (- i 1) (cons i a)))) (length (map + (mk 1000000 '())))",
        "value",
        "1000000",
    ),
    # ---- bad numbers -----------------------------------------------------------------------------
    Case("number-1e999", "1e999", "value", "+inf.0"),
    Case("number-beyond-int64", "99999999999999999999", "value", "1e+20"),
    Case("number-int64-min", "-9223372036854775808", "value", "-9223372036854775808"),
    Case("number-malformed", "(+ 1.2.3 1)", "ParseError", r"malformed number '1\.2\.3'"),
    Case("number-exact-overflow", "(* 9223372036854775807 2)", "value", "1.8446744073709552e+19"),
    Case("quotient-by-zero", "(quotient 1 0)", "EvalError", r"quotient|zero"),
    Case("exact-division-by-zero", "(/ 1 0)", "EvalError", r"zero"),
    # ---- Scheme's integer operations at their edges (issue 28): R7RS wants integers, exact results --
    Case("odd-of-infinity", "(odd? +inf.0)", "EvalError", r"'odd\?': expects an integer"),
    Case("even-of-minus-infinity", "(even? -inf.0)", "EvalError", r"'even\?': expects an integer"),
    Case("odd-of-nan", "(odd? +nan.0)", "EvalError", r"'odd\?': expects an integer"),
    Case("remainder-of-infinity", "(remainder +inf.0 2)", "EvalError", r"'remainder': expects integers"),
    Case("modulo-by-infinity", "(modulo 3.0 -inf.0)", "EvalError", r"'modulo': expects integers"),
    Case("remainder-int64-min-by-minus-one", "(remainder -9223372036854775808 -1)", "value", "0"),
    Case("modulo-int64-min-by-minus-one-exact", "(exact? (modulo -9223372036854775808 -1))", "value", "#t"),
    Case("quotient-int64-min-by-minus-one", "(quotient -9223372036854775808 -1)", "value", "9.223372036854776e+18"),
    # ---- no C hexadecimal numbers: read as symbols, as Guile reads them --------------------------
    Case("hex-literal-is-a-symbol", "(symbol? '0x10)", "value", "#t"),
    Case("hex-float-literal-is-a-symbol", "'-0X1p3", "value", "-0X1p3"),
    Case("hex-literal-unbound", "(+ 0x10 1)", "EvalError", r"missing input '0x10'"),
    Case("number-with-letters", "(+ 1e5x 1)", "ParseError", r"malformed number '1e5x'"),
    # ---- the Python API's edges: option ranges, non-real arrays (mode "python": an expression) ------
    Case(
        "option-steps-10^12",
        "ndvm.calibrate('(param a 1.0) (* a a)', loss='value', steps=10**12)",
        "ValueError",
        r"^steps must be an integer from 1 to 2147483647, got 1000000000000$",
        mode="python",
    ),
    Case(
        "option-patience-10^18",
        "ndvm.calibrate_many(['(param a 1.0) (* a a)'], loss='value', patience=10**18)",
        "ValueError",
        r"^patience must be an integer from 1 to 2147483647",
        mode="python",
    ),
    Case(
        "option-history-too-large",
        "ndvm.calibrate('(param a 1.0) (* a a)', loss='value', steps=10**8, restarts=32)",
        "ValueError",
        r"steps=100000000 with restarts=32 needs a loss history of 3200000000 entries",
        mode="python",
    ),
    Case(
        "option-threads-10^12",
        "ndvm.calibrate_many(['(param a 1.0) (* a a)'], loss='value', threads=10**12)",
        "ValueError",
        r"^threads must be None, 0 \(every core\) or an integer from 1 to 1024",
        mode="python",
    ),
    Case(
        "input-complex",
        "ndvm.compile('(+ x 1)').evaluate(None, {'x': np.array([1 + 1j, 2 - 3j])})",
        "EvalError",
        r"input 'x' is complex \(dtype complex128\)",
        mode="python",
    ),
    Case(
        "input-object",
        "ndvm.compile('(+ x 1)').run(inputs={'x': np.array([1.0, 2.0], dtype=object)})",
        "EvalError",
        r"input 'x' is not numeric \(dtype object\)",
        mode="python",
    ),
    Case(
        "target-complex",
        "ndvm.calibrate('(param a 1.0) (* a x)', {'x': np.ones(2)}, target=np.array([1j, 2j]))",
        "EvalError",
        r"target is complex",
        mode="python",
    ),
    Case(
        "lane-input-complex",
        "ndvm.compile('(+ x 1)').evaluate(np.zeros((2, 0)), lane_inputs={'x': np.ones((2, 3), dtype=np.complex64)})",
        "EvalError",
        r"input 'x' is complex",
        mode="python",
    ),
    Case(
        "native-input-complex",
        "ndvm._native.compile('(+ x 1)').evaluate(np.zeros((1, 0)), {'x': np.array([1j])}, {}, ndvm.Limits().native())",
        "TypeError",
        r"input 'x' is not an array of real numbers \(dtype kind 'c'\)",
        mode="python",
    ),
    # ---- max_seconds inside long primitives and in the result's conversion (issue 28) ----------
    Case(
        "cholesky-3000-wall-clock",
        "(vsum (cholesky (+ (eye 3000) (ones 3000 3000))))",
        "LimitError",
        r"wall-clock limit \(max_seconds=1\)",
        limits={"max_seconds": 1, "max_work": 10**13, "max_bytes": 8 << 30},
        seconds=3,
    ),
    Case(
        "cholesky-gradient-600-wall-clock",
        "p = ndvm.compile('(param a 1.0) (vsum (cholesky (+ (* a (eye 600)) (ones 600 600))))', "
        "limits=ndvm.Limits(max_seconds=0.5, max_work=10**13)); p.value_and_grad(np.ones((4, 1)))",
        "LimitError",
        r"wall-clock limit \(max_seconds=0\.5\)",
        mode="python",
        seconds=3,
    ),
    Case(
        "vec->list-10M-wall-clock",
        "(vec->list (zeros 10000000))",
        "LimitError",
        r"wall-clock limit \(max_seconds=1\)",
        limits={"max_seconds": 1},
        seconds=3,
    ),
    Case(
        "result-conversion-memory-budget",
        "(vec->list (zeros 3000000))",
        "LimitError",
        r"memory budget \(max_bytes=256 MiB\) exceeded while converting the result",
        limits={"max_bytes": 256 << 20},
    ),
    # ---- threads with small stacks, native threads ----------------------------------------------------
    Case(
        "thread-256k-deep-nesting",
        nest("(let ((x 1)) ", ")", 1990, "x"),
        "LimitError",
        r"program nested too deeply for the C stack of this thread",
        mode="thread",
        stack=256 << 10,
    ),
    Case("thread-default-deep-nesting", nest("(+ 1 ", ")", 1990), "value", "1991", mode="thread"),
    Case(
        "thread-256k-deep-recursion",
        "(define (f n) (if (= n 0) 0 (+ 1 (f (- n 1))))) (f 50000)",
        "value",
        "50000",
        mode="thread",
        stack=256 << 10,
    ),
    Case(
        "calibrate-many-deep-recursion",
        "(param a 1.0) (define (f n) (if (= n 0) a (+ a (f (- n 1))))) (f 1000000)",
        "LimitError",
        r"recursion depth exceeded",
        mode="calibrate_many",
    ),
    # ---- the canonical form ---------------------------------------------------------------------------
    Case(
        "canonical-nested-plus-1990", nest("(+ x (* 2 ", "))", 990), "value", "~^\\(params\\) \\(\\+ ", mode="canonical"
    ),
    Case(
        "canonical-cond-150k",
        "(cond " + flat("((= x {i}) 1.5)", 150_000) + ")",
        "value",
        "~^\\(params\\) \\(cond \\(\\(= x 0\\) C\\)",
        mode="canonical",
    ),
    Case(
        "canonical-nested-lambda-990",
        nest("(lambda (x) ", ")", 990, "x"),
        "value",
        "~^\\(params\\) \\(lambda \\(v0\\) ",
        mode="canonical",
    ),
    # ---- the proposers' reader (Python) ---------------------------------------------------------------
    Case("sexpr-datum-comments-100k", "#; " * 100_000 + "1 " * 100_000 + "(+ 1 2)", "value", "(+ 1 2)", mode="sexpr"),
    Case("sexpr-nesting-300", nest("(+ 1 ", ")", 300), "SexprError", r"nesting deeper than 256 levels", mode="sexpr"),
    Case("sexpr-quotes-1000", "'" * 1000 + "x", "SexprError", r"nesting deeper than 256 levels", mode="sexpr"),
]

_CHILD = textwrap.dedent("""
    import json, re, sys, threading, time
    import numpy as np
    import ndvm

    def value_text(v):
        return ndvm.to_scheme(v)

    def run_case(c):
        lim = ndvm.Limits(**c["limits"])
        mode = c["mode"]
        if mode == "run":
            return value_text(ndvm.compile(c["source"], limits=lim).run())
        if mode == "python":  # an expression, or statements ending in one
            *body, last = c["source"].split("; ")
            scope = {"ndvm": ndvm, "np": np}
            for statement in body:
                exec(statement, scope)
            return str(eval(last, scope))
        if mode == "canonical":
            return ndvm.compile(c["source"], limits=lim).canonical_form
        if mode == "sexpr":
            from proposers.sexpr import read_all, to_source
            return to_source(read_all(c["source"]))
        if mode == "thread":
            out = {}
            def go():
                try:
                    out["v"] = value_text(ndvm.compile(c["source"], limits=lim).run())
                except BaseException as e:
                    out["e"] = e
            if c["stack"]:
                threading.stack_size(c["stack"])
            t = threading.Thread(target=go)
            t.start()
            t.join()
            threading.stack_size(0)
            if "e" in out:
                raise out["e"]
            return out["v"]
        if mode == "calibrate_many":
            good = ndvm.compile("(param a 1.0) (* a a)", limits=lim)
            bad = ndvm.compile(c["source"], limits=lim)
            fits = ndvm.calibrate_many([good, bad, good], loss="value", steps=3, restarts=2, threads=2)
            assert fits[0].error is None and fits[2].error is None, (fits[0].error, fits[2].error)
            raise fits[1].error_type(fits[1].error)
        raise ValueError(mode)

    cases = json.loads(sys.stdin.read())
    for c in cases:
        print("START", c["name"], flush=True)
        t0 = time.perf_counter()
        try:
            res = {"kind": "value", "text": run_case(c)}
        except ndvm.NDVMError as e:
            res = {"kind": type(e).__name__, "text": str(e)}
        except Exception as e:
            res = {"kind": type(e).__name__, "text": str(e)[:2000]}
        res["seconds"] = time.perf_counter() - t0
        print("END", json.dumps(res), flush=True)
""")


def _run_batch(cases: list[Case]) -> dict[str, dict]:
    """Runs cases in one child; a crash or a hang is recorded on its case and the rest rerun."""
    results: dict[str, dict] = {}
    pending = list(cases)
    # ASan reserves terabytes of shadow address space: no cap under the sanitizer (as test_limits)
    prelude = "" if SANITIZED else f"import resource\nresource.setrlimit(resource.RLIMIT_AS, ({AS_CAP}, {AS_CAP}))\n"
    while pending:
        payload = json.dumps(
            [
                {"name": c.name, "source": c.source, "mode": c.mode, "limits": c.limits, "stack": c.stack}
                for c in pending
            ]
        )
        budget = sum(c.seconds for c in pending) * (20 if SANITIZED else 3) + 30
        try:
            proc = subprocess.run(
                [sys.executable, "-c", prelude + _CHILD],
                input=payload,
                capture_output=True,
                text=True,
                timeout=budget,
                cwd=ROOT,
            )
            out, err, code = proc.stdout, proc.stderr, proc.returncode
        except subprocess.TimeoutExpired as exc:
            out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
            err, code = "timed out", "timeout"
        started = None
        for line in out.splitlines():
            if line.startswith("START "):
                started = line[6:]
            elif line.startswith("END ") and started is not None:
                results[started] = json.loads(line[4:])
                started = None
        done = {c.name for c in pending if c.name in results}
        if started is not None:  # died or hung inside this case
            results[started] = {"kind": f"crash ({code})", "text": err[-3000:], "seconds": None}
            done.add(started)
        elif len(done) < len(pending):  # died between cases (at start-up): blame the next one
            nxt = next(c.name for c in pending if c.name not in done)
            results[nxt] = {"kind": f"crash ({code})", "text": err[-3000:], "seconds": None}
            done.add(nxt)
        pending = [c for c in pending if c.name not in done]
    return results


_RESULTS: dict[str, dict] = {}
_STACK_BOUND = r"for the C stack of this thread|recursion too deep for the evaluation stack"


def _result(case: Case) -> dict:
    if case.name not in _RESULTS:
        # one child per batch of neighbouring cases: start-up is paid a few times, not 100 times
        i = CASES.index(case)
        batch = CASES[i : i + 12]
        _RESULTS.update(_run_batch([c for c in batch if c.name not in _RESULTS]))
    return _RESULTS[case.name]


def test_corpus_is_large_and_names_are_unique():
    assert len(CASES) >= 40
    assert len({c.name for c in CASES}) == len(CASES)


@pytest.mark.timeout(600)
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_hostile(case: Case):
    res = _result(case)
    got, text = res["kind"], res["text"]
    if SANITIZED and got == "LimitError" and re.search(_STACK_BOUND, text):
        # ASan makes frames several times larger and caps the evaluation stack at 48 MiB, so deep
        # cases may end on the C-stack bound instead; what the sanitizer run checks is that they
        # end cleanly (no report, no crash). Release builds must give the exact outcome.
        return
    assert got == case.kind, f"{case.name}: expected {case.kind}, got {got}: {text[:600]}"
    if case.kind == "value":
        if case.want.startswith("~"):
            assert re.search(case.want[1:], text, re.S), (
                f"{case.name}: value {text[:300]!r} does not match {case.want!r}"
            )
        else:
            assert text == case.want, f"{case.name}: value {text[:300]!r} != {case.want!r}"
    else:
        assert re.search(case.want, text), f"{case.name}: message {text[:600]!r} does not name {case.want!r}"
    if not SANITIZED:
        assert res["seconds"] < case.seconds, f"{case.name}: took {res['seconds']:.1f} s (bound {case.seconds} s)"


def test_fuzz_dictionary_is_generated_and_has_the_operators():
    """native/fuzz/ndvm.dict is what scripts/gen_fuzz_dict.py writes; `*` is an entry (a shell loop
    once expanded it into the names of the files in the working directory)."""
    check = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gen_fuzz_dict.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert check.returncode == 0, check.stderr
    entries = re.findall(r'^\w+="(.*)"$', (ROOT / "native" / "fuzz" / "ndvm.dict").read_text(), re.M)
    for op in ("*", "+", "-", "/", "cond", "#;", "matmul", "4294967296"):
        assert op in entries, op
    files = {p.name for p in ROOT.iterdir()}
    assert not files & set(entries), files & set(entries)


# ---- the native pool across fork() and Ctrl-C (issue 28): each in its own process, hard timeout ----
_SLOW_FIT = (
    "(param a 1.0) (param b 0.5) "
    "(define (f i acc) (if (= i 0) acc (f (- i 1) (+ acc (* a (sin (* b i))))))) (square (- (f 2000 0.0) 3.0))"
)


def _child(code: str, timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=timeout * (20 if SANITIZED else 1),
        cwd=ROOT,
    )


@pytest.mark.timeout(120)
def test_calibrate_many_works_in_a_forked_child():
    """After the parent's pool has run (threads=2), a forked child's calibrate_many gets a pool of
    its own (pthread_atfork) instead of waiting forever for workers that do not exist there; so does
    a default (fork) multiprocessing pool."""
    code = """
        import multiprocessing, os, ndvm
        SRC = "(param a 1.0) (square (- a 3.0))"
        def fit(_):
            fits = ndvm.calibrate_many([SRC] * 4, loss="value", steps=50, restarts=2, threads=2)
            return [round(f.params["a"], 6) for f in fits]
        parent = fit(0)
        pid = os.fork()
        if pid == 0:
            os._exit(0 if fit(0) == parent else 3)
        _, status = os.waitpid(pid, 0)
        print("child", os.waitstatus_to_exitcode(status))
        with multiprocessing.get_context("fork").Pool(2) as pool:
            print("pool", pool.map(fit, range(2)) == [parent, parent])
    """
    proc = _child(code, 60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["child", "0", "pool", "True"], proc.stdout + proc.stderr[-2000:]


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    "call", ["calibrate_many", "calibrate_groups", "calibrate", "calibrate-one-thread", "calibrate_shared"]
)
def test_ctrl_c_stops_a_native_calibration_within_a_second(call):
    """SIGINT during a long batch on the native pool: KeyboardInterrupt within a second, and the
    process calibrates again at once (the pool is idle, nothing is left running)."""
    calls = {
        "calibrate_many": "ndvm.calibrate_many([SRC] * 400, loss='value', steps=200, restarts=8, threads=2)",
        "calibrate_groups": "ndvm.calibrate_groups([SRC] * 100, [({}, None)] * 4, loss='value', steps=200, restarts=8, threads=2)",
        "calibrate": "ndvm.calibrate(SRC, loss='value', optimizer='adam', gtol=0, steps=10**5, restarts=64, threads=2)",
        # one chunk of lanes (threads=1, or fewer than 8 restarts a thread): issue 36 found it deaf
        "calibrate-one-thread": "ndvm.calibrate(SRC, loss='value', optimizer='adam', gtol=0, steps=10**5, restarts=4, threads=1)",
        "calibrate_shared": "ndvm.calibrate_shared([SRC.replace('(param a 1.0)', '(param a 1.0 shared)')] * 8, "
        "[({}, None)] * 4, loss='value', optimizer='adam', gtol=0, steps=10**5, restarts=4, threads=2)",
    }
    code = f"""
        import os, signal, threading, time, ndvm
        SRC = {_SLOW_FIT!r}
        threading.Timer(1.0, lambda: os.kill(os.getpid(), signal.SIGINT)).start()
        t0 = time.perf_counter()
        try:
            {calls[call]}
            print("finished", time.perf_counter() - t0)
        except KeyboardInterrupt:
            print("interrupted", time.perf_counter() - t0 - 1.0)
        fits = ndvm.calibrate_many(["(param a 1.0) (square (- a 3.0))"] * 4, loss="value", steps=50, restarts=2, threads=2)
        print("usable", all(abs(f.params["a"] - 3.0) < 1e-3 for f in fits))
    """
    proc = _child(code, 60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    words = proc.stdout.split()
    assert words[0] == "interrupted", proc.stdout
    if not SANITIZED:
        assert float(words[1]) < 1.0, f"KeyboardInterrupt {float(words[1]):.2f} s after SIGINT"
    assert words[2:] == ["usable", "True"], proc.stdout


def test_nan_lanes_equal_their_one_lane_runs_bit_for_bit():
    """Every NaN leaves the runtime as the one quiet NaN: a lane's gradient NaN was once negative
    (x86's default NaN of inf - inf) where the same lane alone gave a positive one."""
    import numpy as np

    import ndvm

    def bits(a):
        return np.ascontiguousarray(a, dtype=np.float64).view(np.uint64).tolist()

    theta = np.array([[1.0], [-1.0], [0.0], [np.inf], [np.nan], [-np.inf], [2.0], [-0.0], [0.5]])
    cases = [
        ("(param a 1.0) (* (/ a) (ones 3))", {}),
        ("(param a 1.0) (* (/ 2 a) (ones 3))", {}),
        ("(param a 1.0) (expt a x)", {"x": np.array([1.0, np.inf, -1.0])}),
    ]
    canonical = 0x7FF8000000000000
    for source, inputs in cases:
        program = ndvm.compile(source)
        batch = program._native.value_and_grad(theta, inputs, {}, program.limits.native(), [], "mse", np.ones(3))
        for lane in range(len(theta)):
            one = program._native.value_and_grad(
                theta[lane : lane + 1].copy(), inputs, {}, program.limits.native(), [], "mse", np.ones(3)
            )
            for k in range(3):  # values, losses, gradients
                assert bits(batch[k][lane]) == bits(one[k][0]), (source, lane, k)
        grads = np.asarray(batch[2])
        assert all(b == canonical for b in bits(grads[np.isnan(grads)])), source
