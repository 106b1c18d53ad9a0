"""A typed random generator of NDVM programs, deterministic for a seed.

Two modes:

* ``"r7rs"``: programs inside the R7RS part of the language (no parameters, inputs, matrices,
  ``loop``/``recur``, ``sigmoid``/``softplus``), so a real Scheme (Guile) can run them and the values
  must agree. The generator avoids the few places where NDVM deliberately departs from R7RS:
  ``/`` never sees two exact integers (NDVM has no rationals), transcendental functions only see
  inexact arguments (Guile returns exact ``(exp 0) = 1``), ``*`` never mixes an exact integer with
  an inexact number (Guile returns exact ``(* 0 1.5) = 0``), and exact integers stay small (NDVM
  has no bignums).
* ``"model"``: scalar-valued model programs with declared parameters (free, ``positive``,
  ``(between lo hi)``), a scalar input ``u`` and a vector input ``x``, small well-conditioned
  matrices (SPD by construction wherever ``inv``/``solve``/``logdet``/``cholesky`` need it), and
  comparisons of parameters against literals so that lanes diverge. Used for gradients against
  finite differences, lanes against one-lane runs and threaded calibration against serial.
  ``result="vector"`` makes the final expression a vector over the data ``x`` (for ``mse`` fits).

Every program covers, with some probability: top-level and internal ``define``, closures that
capture variables, higher-order functions (functions taking and returning procedures, ``map``,
``apply``), rest arguments, named ``let``, ``do``, tail and non-tail recursion with a bounded
depth, ``let``/``let*``/``letrec``, ``cond``/``case``/``when``/``and``/``or``, lists of known length,
quoted data and association lists.

    python tests/genprog.py --mode model --seed 3        # print one program
    python tests/genprog.py --mode r7rs --count 5        # print five

Types are tuples: ``REAL`` (inexact), ``INT`` (exact, small), ``BOOL``, ``SYM``,
``("list", elem, n)`` (proper list of known length n), ``("vec", n)``, ``("mat", n)`` (n x n),
``("fn", (arg types...), result)``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import re
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

REAL, INT, BOOL, SYM = "real", "int", "bool", "sym"
SYMBOLS = ("alpha", "beta", "gamma", "delta")
X_LEN = 4  # length of the vector input x in model mode
PARAM_CONSTRAINTS = (None, "positive", ("between", -1.0, 2.0))
# How model programs compare a parameter against a literal (lanes diverge there).
PARAM_COMPARISON = re.compile(r"\((<=|>=|<|>) (th\d+) (-?\d+\.\d+)\)")
GUILE_FIXTURE = Path(__file__).resolve().parent / "differential" / "guile_expected.jsonl"
GUILE_FIXTURE_SEEDS = 500


def list_t(elem, n: int):
    return ("list", elem, n)


def vec_t(n: int):
    return ("vec", n)


def mat_t(n: int):
    return ("mat", n)


def fn_t(args: tuple, ret):
    return ("fn", tuple(args), ret)


def kind(t) -> str:
    return t if isinstance(t, str) else t[0]


@dataclass
class Generated:
    """One generated program and what the differential checks need to run it."""

    source: str
    mode: str
    seed: int
    params: list[tuple[str, float, object]] = field(default_factory=list)  # (name, init, constraint)
    uses_x: bool = False
    uses_u: bool = False

    def inputs(self, x=None, u: float = 0.7) -> dict:
        """Inputs for the program: ``x`` a vector of X_LEN points, ``u`` a scalar."""
        import numpy as np

        out = {}
        if self.uses_x:
            out["x"] = np.linspace(-0.8, 1.1, X_LEN) if x is None else x
        if self.uses_u:
            out["u"] = u
        return out


class _Gen:
    def __init__(self, rng: random.Random, mode: str, max_depth: int, arrays: bool = True):
        self.rng = rng
        self.mode = mode
        self.model = mode == "model"
        self.arrays = self.model and arrays  # vectors, matrices and the vector input x
        self.max_depth = max_depth
        self.counter = 0
        self.params: list[tuple[str, float, object]] = []
        self.uses_x = False
        self.uses_u = False
        self.hofs: list[str] = []  # globals (f g y) -> (g (g y))
        self.composers: list[str] = []  # globals (f g h) -> closure (lambda (y) (g (h y)))
        self.rest_fns: list[str] = []  # globals (f . xs) -> (apply + 0.0 xs)

    # ---- helpers ------------------------------------------------------------------------------
    def fresh(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"

    def chance(self, p: float) -> bool:
        return self.rng.random() < p

    def real_lit(self, lo: float = -2.0, hi: float = 2.0) -> str:
        value = round(self.rng.uniform(lo, hi), self.rng.choice((1, 2, 3)))
        text = repr(float(value))
        return "0.0" if text == "-0.0" else text

    def int_lit(self, lo: int = -4, hi: int = 9) -> str:
        return str(self.rng.randint(lo, hi))

    def vars_of(self, env: list, t) -> list[str]:
        return [name for name, vt in env if vt == t]

    # ---- entry point --------------------------------------------------------------------------
    def expr(self, t, env: list, depth: int) -> str:
        k = kind(t)
        if k == REAL:
            return self.real(env, depth)
        if k == INT:
            return self.int_(env, depth)
        if k == BOOL:
            return self.bool_(env, depth)
        if k == SYM:
            return self.sym(env, depth)
        if k == "list":
            return self.list_(t, env, depth)
        if k == "vec":
            return self.vec(t[1], env, depth)
        if k == "mat":
            return self.mat(t[1], env, depth)
        if k == "fn":
            return self.fn(t, env, depth)
        raise ValueError(f"unknown type {t!r}")

    def leaf_real(self, env: list) -> str:
        choices = self.vars_of(env, REAL)
        if self.model:
            choices = choices + [p[0] for p in self.params] * 2
            if self.chance(0.15):
                self.uses_u = True
                return "u"
        if choices and self.chance(0.75):
            return self.rng.choice(choices)
        return self.real_lit()

    # ---- REAL ---------------------------------------------------------------------------------
    def real(self, env: list, depth: int) -> str:
        if depth <= 0 or self.chance(0.2):
            return self.leaf_real(env)
        d = depth - 1
        r = lambda: self.real(env, d)  # noqa: E731
        options = [
            (6, lambda: f"(+ {r()} {r()})"),
            (2, lambda: f"(+ {r()} {r()} {r()})"),
            (4, lambda: f"(- {r()} {r()})"),
            (1, lambda: f"(- {r()})"),
            (5, lambda: f"(* {r()} {r()})"),
            (3, lambda: f"(/ {r()} {self.rng.choice(['(+ 1.5 (square ', '(+ 2.0 (abs '])}{r()})))"),
            (2, lambda: f"({self.rng.choice(['sin', 'cos', 'atan', 'tanh'])} {r()})"),
            (2, lambda: f"(exp ({self.rng.choice(['tanh', 'sin', 'cos'])} {r()}))"),
            (1, lambda: f"(exp (- (abs {r()})))"),
            (2, lambda: f"(log (+ 1.0 (square {r()})))"),
            (2, lambda: f"(sqrt (+ 0.5 (square {r()})))"),
            (2, lambda: f"(square {r()})"),
            (1, lambda: f"(abs {r()})"),
            (
                1,
                lambda: (
                    f"(expt (+ 1.0 (abs {r()})) {self.rng.choice(['0.5', '1.5', '2.0', '-1.0', '(tanh ' + r() + ')'])})"
                ),
            ),
            (1, lambda: f"(atan {r()} (+ 1.0 (square {r()})))"),
            (2, lambda: f"({self.rng.choice(['min', 'max'])} {r()} {r()})"),
            (1, lambda: f"({self.rng.choice(['floor', 'ceiling', 'round', 'truncate'])} {r()})"),
            (1, lambda: f"(exact->inexact {self.int_(env, d)})"),
            (4, lambda: f"(if {self.bool_(env, d)} {r()} {r()})"),
            (2, lambda: self.cond_form(REAL, env, d)),
            (1, lambda: self.case_form(REAL, env, d)),
            (4, lambda: self.let_form(REAL, env, d)),
            (2, lambda: self.lambda_app(REAL, env, d)),
            (2, lambda: self.named_let_real(env, d)),
            (1, lambda: self.do_real(env, d)),
            (2, lambda: self.list_reduce(env, d)),
            (2, lambda: self.list_access(REAL, env, d)),
            (3, lambda: self.call_fn(REAL, env, d)),
            (1, lambda: f"(if {self.bool_(env, d)} (when #t {r()}) {r()})"),
            (1, lambda: f"(begin {self.int_(env, 0)} {r()})"),
        ]
        if self.model:
            options += [
                (4, lambda: self.param_branch(env, d)),
                (2, lambda: f"({self.rng.choice(['sigmoid', 'softplus'])} {r()})"),
                (2, lambda: self.loop_recur(env, d)),
            ]
            if self.arrays:
                options += [(3, lambda: self.vec_to_real(env, d)), (2, lambda: self.mat_to_real(env, d))]
        return self.pick(options)

    def pick(self, options):
        total = sum(w for w, _ in options)
        x = self.rng.uniform(0, total)
        for w, f in options:
            x -= w
            if x <= 0:
                return f()
        return options[-1][1]()

    def param_branch(self, env: list, d: int) -> str:
        """A comparison of a parameter against a literal: lanes at different parameters diverge."""
        op = self.rng.choice(["<", ">", "<=", ">="])
        return f"(if ({op} {self.param_threshold()}) {self.real(env, d)} {self.real(env, d)})"

    def param_threshold(self) -> str:
        """`PARAM LITERAL` with the literal near the parameter's init, where lanes straddle it."""
        name, init, _ = self.rng.choice(self.params)
        return f"{name} {round(init + self.rng.uniform(-0.4, 0.4), 2)!r}"

    def loop_recur(self, env: list, d: int) -> str:
        i, acc = self.fresh("i"), self.fresh("acc")
        n = self.rng.randint(0, 5)
        inner = env + [(i, INT), (acc, REAL)]
        step = self.real(inner, min(d, 2))
        recur = self.in_tail_context(f"(recur (+ {i} 1) {step})", acc)
        return f"(loop (({i} 0) ({acc} {self.real(env, d)})) (if (>= {i} {n}) {acc} {recur}))"

    # R7RS tail contexts a `recur` (or any tail call) may sit in.
    TAIL_CONTEXTS = (
        "{}",
        "(begin 0 {})",
        "(let ((z 1)) {})",
        "(let* ((z 1)) {})",
        "(letrec ((z 1)) {})",
        "(when #t {})",
        "(unless #f {})",
        "(cond (#f {acc}) (else {}))",
        "(and #t {})",
        "(or #f {})",
        "(case 1 ((1) {}) (else {acc}))",
        "(if #t {} {acc})",
        "(do ((k 0 (+ k 1))) ((= k 1) {}))",
        "(let lp ((z 0)) {})",
    )

    def in_tail_context(self, call: str, acc: str) -> str:
        for _ in range(self.rng.randint(0, 2)):
            call = self.rng.choice(self.TAIL_CONTEXTS).replace("{acc}", acc).replace("{}", call)
        return call

    def named_let_real(self, env: list, d: int) -> str:
        name, i, acc = self.fresh("lp"), self.fresh("i"), self.fresh("acc")
        if not self.model and self.chance(0.3):
            # the idiom that shadows the `loop` form (r7rs mode only: model programs use `loop` forms)
            name = "loop"
        n = self.rng.randint(0, 6)
        inner = env + [(i, INT), (acc, REAL)]
        step = self.real(inner, min(d, 2))
        return f"(let {name} (({i} 0) ({acc} {self.real(env, d)})) (if (= {i} {n}) {acc} ({name} (+ {i} 1) {step})))"

    def do_real(self, env: list, d: int) -> str:
        i, acc = self.fresh("i"), self.fresh("acc")
        n = self.rng.randint(0, 5)
        inner = env + [(i, INT), (acc, REAL)]
        return (
            f"(do (({i} 0 (+ {i} 1)) ({acc} {self.real(env, d)} {self.real(inner, min(d, 2))})) ((>= {i} {n}) {acc}))"
        )

    def list_reduce(self, env: list, d: int) -> str:
        n = self.rng.randint(1, 4)
        lst = self.list_(list_t(REAL, n), env, d)
        style = self.rng.randrange(4)
        if style == 0:
            return f"(apply + {lst})"
        if style == 1:
            return f"(apply {self.rng.choice(['max', 'min', '*'])} {self.real(env, 0)} {lst})"
        if style == 2:  # a fold written as a named let over the list
            name, var, acc = self.fresh("fold"), self.fresh("l"), self.fresh("acc")
            head = self.fresh("h")
            inner = env + [(acc, REAL), (head, REAL)]
            body = self.real(inner, min(d, 2))
            return (
                f"(let {name} (({var} {lst}) ({acc} {self.real_lit()})) (if (null? {var}) {acc} "
                f"(let (({head} (car {var}))) ({name} (cdr {var}) {body}))))"
            )
        # non-tail recursion over the list
        f, var = self.fresh("sum"), self.fresh("l")
        return f"(letrec (({f} (lambda ({var}) (if (null? {var}) 0.0 (+ (car {var}) ({f} (cdr {var}))))))) ({f} {lst}))"

    def list_access(self, t, env: list, d: int) -> str:
        n = self.rng.randint(1, 4)
        lst = self.list_(list_t(t, n), env, d)
        k = self.rng.randrange(n)
        style = self.rng.randrange(3)
        if style == 0 or k == 0:
            return f"(list-ref {lst} {k})" if style else f"(car {lst})"
        if style == 1 and k == 1:
            return f"(cadr {lst})"
        if k == 2 and self.chance(0.5):
            return f"(caddr {lst})"
        return f"(car (list-tail {lst} {k}))"

    # ---- INT ----------------------------------------------------------------------------------
    def int_(self, env: list, depth: int) -> str:
        vars_ = self.vars_of(env, INT)
        if depth <= 0 or self.chance(0.25):
            if vars_ and self.chance(0.6):
                return self.rng.choice(vars_)
            return self.int_lit()
        d = depth - 1
        i = lambda: self.int_(env, d)  # noqa: E731
        divisor = lambda: self.rng.choice(["2", "3", "-2", "5", f"(+ 1 (abs {i()}))"])  # noqa: E731
        return self.pick(
            [
                (4, lambda: f"(+ {i()} {i()})"),
                (3, lambda: f"(- {i()} {i()})"),
                (2, lambda: f"(* {i()} {self.int_lit(-3, 3)})"),
                (1, lambda: f"(abs {i()})"),
                (3, lambda: f"({self.rng.choice(['quotient', 'remainder', 'modulo'])} {i()} {divisor()})"),
                (1, lambda: f"({self.rng.choice(['min', 'max'])} {i()} {i()})"),
                (
                    2,
                    lambda: (
                        f"(length {self.list_(list_t(self.rng.choice([REAL, INT, SYM]), self.rng.randint(0, 4)), env, d)})"
                    ),
                ),
                (3, lambda: f"(if {self.bool_(env, d)} {i()} {i()})"),
                (1, lambda: self.case_form(INT, env, d)),
                (2, lambda: self.let_form(INT, env, d)),
                (1, lambda: self.call_fn(INT, env, d)),
                (1, lambda: self.list_access(INT, env, d)),
                (1, lambda: self.count_up()),
            ]
        )

    def count_up(self) -> str:
        """A named let counting an exact integer up to a bound."""
        name, k = self.fresh("cnt"), self.fresh("k")
        return f"(let {name} (({k} {self.int_lit(0, 4)})) (if (>= {k} 6) {k} ({name} (+ {k} 1))))"

    # ---- BOOL ---------------------------------------------------------------------------------
    def bool_(self, env: list, depth: int) -> str:
        vars_ = self.vars_of(env, BOOL)
        if depth <= 0 or self.chance(0.1):
            if vars_ and self.chance(0.5):
                return self.rng.choice(vars_)
            if self.model and self.params and self.chance(0.7):
                return f"({self.rng.choice(['>', '<'])} {self.param_threshold()})"
            return self.rng.choice(["#t", "#f"])
        d = depth - 1
        r = lambda: self.real(env, d)  # noqa: E731
        i = lambda: self.int_(env, d)  # noqa: E731
        b = lambda: self.bool_(env, d)  # noqa: E731
        options = [
            (6, lambda: f"({self.rng.choice(['<', '>', '<=', '>='])} {r()} {r()})"),
            (1, lambda: f"(< {r()} {r()} {r()})"),
            (3, lambda: f"({self.rng.choice(['=', '<', '>='])} {i()} {i()})"),
            (2, lambda: f"(not {b()})"),
            (2, lambda: f"(and {b()} {b()})"),
            (2, lambda: f"(or {b()} {b()})"),
            (2, lambda: f"({self.rng.choice(['even?', 'odd?', 'zero?'])} {i()})"),
            (1, lambda: f"({self.rng.choice(['positive?', 'negative?'])} {r()})"),
            (1, lambda: f"(null? {self.list_(list_t(INT, self.rng.randint(0, 2)), env, d)})"),
            (1, lambda: f"(pair? {self.list_(list_t(SYM, self.rng.randint(0, 2)), env, d)})"),
            (2, lambda: f"(eq? {self.sym(env, d)} {self.sym(env, d)})"),
            (1, lambda: f"(eqv? {i()} {i()})"),
            (1, lambda: f"(equal? {self.list_(list_t(INT, 2), env, d)} {self.list_(list_t(INT, 2), env, d)})"),
            (1, lambda: f"(if (memv {i()} '({' '.join(self.int_lit() for _ in range(3))})) #t #f)"),
            (1, lambda: f"(if (member {self.sym(env, d)} '({' '.join(self.rng.sample(SYMBOLS, 2))})) #t #f)"),
            (
                1,
                lambda: (
                    f"({self.rng.choice(['number?', 'boolean?', 'symbol?', 'procedure?', 'list?'])} "
                    f"{self.expr(self.rng.choice([REAL, BOOL, SYM, list_t(INT, 1)]), env, d)})"
                ),
            ),
        ]
        return self.pick(options)

    # ---- SYM ----------------------------------------------------------------------------------
    def sym(self, env: list, depth: int) -> str:
        vars_ = self.vars_of(env, SYM)
        if depth <= 0 or self.chance(0.35):
            if vars_ and self.chance(0.5):
                return self.rng.choice(vars_)
            return f"'{self.rng.choice(SYMBOLS)}"
        d = depth - 1
        return self.pick(
            [
                (3, lambda: f"(if {self.bool_(env, d)} {self.sym(env, d)} {self.sym(env, d)})"),
                (2, lambda: self.case_form(SYM, env, d)),
                (2, lambda: self.list_access(SYM, env, d)),
                (2, lambda: self.assoc_lookup(env, d)),
                (1, lambda: self.let_form(SYM, env, d)),
            ]
        )

    def assoc_lookup(self, env: list, d: int) -> str:
        keys = self.rng.sample(SYMBOLS, 3)
        alist = " ".join(f"({k} . {self.rng.choice(SYMBOLS)})" for k in keys)
        fn = self.rng.choice(["assq", "assv", "assoc"])
        return f"(cdr ({fn} '{self.rng.choice(keys)} '({alist})))"

    # ---- LIST ---------------------------------------------------------------------------------
    def list_(self, t, env: list, depth: int) -> str:
        _, elem, n = t
        vars_ = self.vars_of(env, t)
        if vars_ and self.chance(0.4):
            return self.rng.choice(vars_)
        d = max(depth - 1, 0)
        e = lambda: self.expr(elem, env, min(d, 2))  # noqa: E731
        options = [(4, lambda: f"(list {' '.join(e() for _ in range(n))})" if n else "(list)")]
        if n == 0:
            options.append((2, lambda: "'()"))
        if elem in (INT, SYM):
            lit = (lambda: self.int_lit()) if elem == INT else (lambda: self.rng.choice(SYMBOLS))
            options.append((2, lambda: f"'({' '.join(lit() for _ in range(n))})"))
        if elem == REAL:
            options.append((1, lambda: f"'({' '.join(self.real_lit() for _ in range(n))})"))
        if depth > 0:
            if n >= 1:
                options.append((2, lambda: f"(cons {e()} {self.list_(list_t(elem, n - 1), env, d)})"))
            options += [
                (2, lambda: f"(reverse {self.list_(t, env, d)})"),
                (1, lambda: f"(cdr {self.list_(list_t(elem, n + 1), env, d)})"),
                (1, lambda: f"(if {self.bool_(env, d)} {self.list_(t, env, d)} {self.list_(t, env, d)})"),
                (1, lambda: self.let_form(t, env, d)),
            ]
            if n >= 1:
                k = self.rng.randint(0, n)
                options.append(
                    (
                        2,
                        lambda: (
                            f"(append {self.list_(list_t(elem, k), env, d)} {self.list_(list_t(elem, n - k), env, d)})"
                        ),
                    )
                )
                options.append((1, lambda: f"(list-tail {self.list_(list_t(elem, n + 1), env, d)} 1)"))
                options.append((1, lambda: f"(cddr {self.list_(list_t(elem, n + 2), env, d)})"))
            if elem == REAL:
                options.append((3, lambda: self.map_form(t, env, d)))
        return self.pick(options)

    def map_form(self, t, env: list, d: int) -> str:
        n = t[2]
        a = self.fresh("a")
        if self.chance(0.6):
            body = self.real(env + [(a, REAL)], min(d, 2))
            return f"(map (lambda ({a}) {body}) {self.list_(list_t(REAL, n), env, d)})"
        b = self.fresh("b")
        body = self.real(env + [(a, REAL), (b, INT)], min(d, 2))
        return (
            f"(map (lambda ({a} {b}) {body}) {self.list_(list_t(REAL, n), env, d)} "
            f"{self.list_(list_t(INT, n), env, d)})"
        )

    # ---- VEC / MAT (model mode) ---------------------------------------------------------------
    def vec(self, n: int, env: list, depth: int) -> str:
        vars_ = self.vars_of(env, vec_t(n))
        d = max(depth - 1, 0)
        r = lambda: self.real(env, min(d, 2))  # noqa: E731
        if vars_ and self.chance(0.4):
            return self.rng.choice(vars_)
        if n == X_LEN and self.chance(0.5):
            self.uses_x = True
            if depth <= 0 or self.chance(0.3):
                return "x"
        if depth <= 0:
            return f"(vec {' '.join(r() for _ in range(n))})"
        v = lambda: self.vec(n, env, d)  # noqa: E731
        options = [
            (3, lambda: f"(vec {' '.join(r() for _ in range(n))})"),
            (3, lambda: f"(+ {v()} {v()})"),
            (2, lambda: f"(- {v()} {r()})"),
            (3, lambda: f"(* {r()} {v()})"),
            (2, lambda: f"(* {v()} {v()})"),
            (1, lambda: f"(/ {v()} (+ 1.5 (square {r()})))"),
            (2, lambda: f"({self.rng.choice(['sin', 'tanh', 'sigmoid', 'softplus'])} {v()})"),
            (1, lambda: f"(exp (tanh {v()}))"),
            (1, lambda: f"(sqrt (+ 0.5 (square {v()})))"),
            (1, lambda: f"(if {self.bool_(env, d)} {v()} {v()})"),
            (1, lambda: self.let_form(vec_t(n), env, d)),
        ]
        if n <= 3:
            options += [
                (2, lambda: f"(matvec {self.mat(n, env, d)} {v()})"),
                (1, lambda: f"(solve {self.spd(n, env, d)} {v()})"),
                (1, lambda: f"(ref {self.mat(n, env, d)} {self.rng.randrange(n)})"),
            ]
        return self.pick(options)

    def mat(self, n: int, env: list, depth: int) -> str:
        vars_ = self.vars_of(env, mat_t(n))
        if vars_ and self.chance(0.4):
            return self.rng.choice(vars_)
        d = max(depth - 1, 0)
        r = lambda: self.real(env, min(d, 1))  # noqa: E731
        if depth <= 0:
            return self.rng.choice(
                [
                    f"(eye {n})",
                    f"(* {r()} (eye {n}))",
                    f"(mat {' '.join('(vec ' + ' '.join(r() for _ in range(n)) + ')' for _ in range(n))})",
                ]
            )
        m = lambda: self.mat(n, env, d)  # noqa: E731
        return self.pick(
            [
                (3, lambda: f"(mat {' '.join('(vec ' + ' '.join(r() for _ in range(n)) + ')' for _ in range(n))})"),
                (1, lambda: f"(mat {' '.join('(list ' + ' '.join(r() for _ in range(n)) + ')' for _ in range(n))})"),
                (2, lambda: f"(+ {m()} {m()})"),
                (2, lambda: f"(* {r()} {m()})"),
                (2, lambda: f"(matmul {m()} {m()})"),
                (1, lambda: f"(transpose {m()})"),
                (1, lambda: f"(outer {self.vec(n, env, d)} {self.vec(n, env, d)})"),
                (1, lambda: f"(inv {self.spd(n, env, d)})"),
                (1, lambda: f"(cholesky {self.spd(n, env, d)})"),
                (1, lambda: f"(- {m()} (eye {n}))"),
            ]
        )

    def spd(self, n: int, env: list, d: int) -> str:
        """A symmetric positive definite matrix with eigenvalues >= 1: (+ (* c I) (M^T M))."""
        m = self.mat(n, env, min(d, 1))
        return f"(+ (* (+ 1.0 (square {self.real(env, 0)})) (eye {n})) (matmul (transpose {m}) {m}))"

    def vec_to_real(self, env: list, d: int) -> str:
        n = X_LEN if self.chance(0.5) else self.rng.choice([2, 3])
        v = lambda: self.vec(n, env, d)  # noqa: E731
        return self.pick(
            [
                (3, lambda: f"(vsum {v()})"),
                (2, lambda: f"(dot {v()} {v()})"),
                (1, lambda: f"(norm (+ {v()} (* 0.1 (ones {n}))))"),
                (1, lambda: f"(ref {v()} {self.rng.randrange(n)})"),
                (1, lambda: f"(exact->inexact (size {v()}))"),
            ]
        )

    def mat_to_real(self, env: list, d: int) -> str:
        n = self.rng.choice([2, 3])
        return self.pick(
            [
                (2, lambda: f"(trace {self.mat(n, env, d)})"),
                (1, lambda: f"(det {self.mat(n, env, d)})"),
                (2, lambda: f"(logdet {self.spd(n, env, d)})"),
                (2, lambda: f"(ref {self.mat(n, env, d)} {self.rng.randrange(n)} {self.rng.randrange(n)})"),
                (1, lambda: f"(dot {self.vec(n, env, d)} (solve {self.spd(n, env, d)} {self.vec(n, env, d)}))"),
            ]
        )

    # ---- binding forms, functions -------------------------------------------------------------
    def let_form(self, t, env: list, d: int) -> str:
        style = self.rng.choice(["let", "let", "let*", "letrec", "internal"])
        nb = self.rng.randint(1, 3)
        names, inits, inner = [], [], list(env)
        for _ in range(nb):
            vt = self.rng.choice([REAL, REAL, INT, BOOL, SYM, list_t(REAL, self.rng.randint(0, 3))])
            if self.arrays and self.chance(0.2):
                vt = self.rng.choice([vec_t(2), mat_t(2), vec_t(X_LEN)])
            if style == "letrec" and self.chance(0.6):
                vt = fn_t((REAL,), REAL)
            name = self.fresh("v" if kind(vt) != "fn" else "f")
            scope = inner if style in ("let*", "internal") else env
            inits.append(self.expr(vt, scope, min(d, 3)))
            names.append(name)
            inner = inner + [(name, vt)]
        body = self.expr(t, inner, d)
        if style == "internal":  # internal defines in a lambda body, called at once
            defs = " ".join(f"(define {n} {i})" for n, i in zip(names, inits))
            return f"((lambda () {defs} {body}))"
        bindings = " ".join(f"({n} {i})" for n, i in zip(names, inits))
        return f"({style} ({bindings}) {body})"

    def lambda_app(self, t, env: list, d: int) -> str:
        a = self.fresh("p")
        at = self.rng.choice([REAL, INT])
        body = self.expr(t, env + [(a, at)], d)
        return f"((lambda ({a}) {body}) {self.expr(at, env, min(d, 2))})"

    def fn(self, t, env: list, depth: int) -> str:
        """A procedure value of type t: a variable, a lambda that may capture, or a composition."""
        vars_ = self.vars_of(env, t)
        if vars_ and self.chance(0.5):
            return self.rng.choice(vars_)
        _, args, ret = t
        names = [self.fresh("p") for _ in args]
        body = self.expr(ret, env + list(zip(names, args)), min(max(depth - 1, 0), 3))
        return f"(lambda ({' '.join(names)}) {body})"

    def call_fn(self, t, env: list, d: int) -> str:
        fns = [(name, ft) for name, ft in env if kind(ft) == "fn" and ft[2] == t]
        if not fns:
            return self.expr(t, env, 0) if t != REAL else self.leaf_real(env)
        name, ft = self.rng.choice(fns)
        args = " ".join(self.expr(a, env, min(d, 2)) for a in ft[1])
        return f"({name} {args})" if args else f"({name})"

    def cond_form(self, t, env: list, d: int) -> str:
        clauses = " ".join(f"({self.bool_(env, d)} {self.expr(t, env, d)})" for _ in range(self.rng.randint(1, 3)))
        return f"(cond {clauses} (else {self.expr(t, env, d)}))"

    def case_form(self, t, env: list, d: int) -> str:
        if self.chance(0.5):
            key = self.int_(env, min(d, 2))
            data = [str(v) for v in self.rng.sample(range(-3, 7), 4)]
        else:
            key = self.sym(env, min(d, 2))
            data = list(SYMBOLS)
        self.rng.shuffle(data)
        clauses = f"(({data[0]} {data[1]}) {self.expr(t, env, d)}) (({data[2]}) {self.expr(t, env, d)})"
        return f"(case {key} {clauses} (else {self.expr(t, env, d)}))"

    # ---- top level ----------------------------------------------------------------------------
    def toplevel_defs(self, env: list) -> list[str]:
        """Global definitions: values, plain functions, recursive ones, higher-order ones."""
        forms = []
        for _ in range(self.rng.randint(0, 4)):
            style = self.rng.choice(["value", "fn1", "fn2", "tailrec", "rec", "hof", "compose", "rest", "internal"])
            name = self.fresh("g")
            if style == "value":
                vt = self.rng.choice([REAL, INT, list_t(REAL, 2)] + ([vec_t(X_LEN), mat_t(2)] if self.arrays else []))
                forms.append(f"(define {name} {self.expr(vt, env, 3)})")
                env.append((name, vt))
            elif style in ("fn1", "fn2"):
                args = [self.fresh("y") for _ in range(1 if style == "fn1" else 2)]
                at = [REAL] * len(args) if style == "fn1" else [REAL, self.rng.choice([REAL, INT])]
                body = self.real(env + list(zip(args, at)), 3)
                forms.append(f"(define ({name} {' '.join(args)}) {body})")
                env.append((name, fn_t(tuple(at), REAL)))
            elif style == "tailrec":  # tail recursion with a counter: (f n acc)
                n, acc = self.fresh("n"), self.fresh("acc")
                body = self.real(env + [(n, INT), (acc, REAL)], 2)
                forms.append(f"(define ({name} {n} {acc}) (if (<= {n} 0) {acc} ({name} (- (min {n} 5) 1) {body})))")
                env.append((name, fn_t((INT, REAL), REAL)))
            elif style == "rec":  # non-tail recursion
                n = self.fresh("n")
                base = self.real(env, 1)
                step = self.real(env + [(n, INT)], 2)
                forms.append(
                    f"(define ({name} {n}) (if (<= {n} 0) {base} (+ (* 0.5 {step}) ({name} (- (min {n} 6) 1)))))"
                )
                env.append((name, fn_t((INT,), REAL)))
            elif style == "hof":  # takes a procedure
                g, y = self.fresh("fun"), self.fresh("y")
                forms.append(f"(define ({name} {g} {y}) ({g} ({g} {y})))")
                self.hofs.append(name)
            elif style == "compose":  # returns a closure
                f1, f2, y = self.fresh("fun"), self.fresh("fun"), self.fresh("y")
                forms.append(f"(define ({name} {f1} {f2}) (lambda ({y}) ({f1} ({f2} {y}))))")
                self.composers.append(name)
            elif style == "rest":
                xs = self.fresh("xs")
                forms.append(f"(define ({name} . {xs}) (apply + 0.0 {xs}))")
                self.rest_fns.append(name)
            else:  # a function with internal defines and a closure over its argument
                y, h, w = self.fresh("y"), self.fresh("h"), self.fresh("w")
                inner = env + [(y, REAL)]
                forms.append(
                    f"(define ({name} {y}) (define {w} {self.real(inner, 2)}) "
                    f"(define ({h} z) (+ z {w})) ({h} {self.real(inner + [(w, REAL)], 2)}))"
                )
                env.append((name, fn_t((REAL,), REAL)))
        return forms

    def special_calls(self, env: list) -> str | None:
        """A REAL expression through the higher-order, composing or rest-argument globals."""
        r1 = fn_t((REAL,), REAL)
        options = []
        if self.hofs:
            options.append(lambda: f"({self.rng.choice(self.hofs)} {self.fn(r1, env, 2)} {self.real(env, 2)})")
        if self.composers:
            options.append(
                lambda: (
                    f"(({self.rng.choice(self.composers)} {self.fn(r1, env, 2)} {self.fn(r1, env, 2)}) {self.real(env, 2)})"
                )
            )
        if self.rest_fns:
            options.append(
                lambda: (
                    f"({self.rng.choice(self.rest_fns)} {' '.join(self.real(env, 1) for _ in range(self.rng.randint(0, 3)))})"
                )
            )
        return self.rng.choice(options)() if options else None


def generate(
    seed: int, mode: str = "r7rs", result: str | None = None, max_depth: int = 4, arrays: bool = True
) -> Generated:
    """One program for ``seed``. ``result``: in r7rs mode a type name (None: random); in model mode
    ``"scalar"`` (default) or ``"vector"`` (one value per point of the input x). ``arrays=False``
    (model mode) leaves out vectors, matrices and the input x, so that Guile can run the program
    with the MODEL_PRELUDE (``param``, ``loop``/``recur``, ``sigmoid``, ``softplus``)."""
    if mode not in ("r7rs", "model"):
        raise ValueError(f"mode must be 'r7rs' or 'model', got {mode!r}")
    if result == "vector" and not arrays:
        raise ValueError("a vector result needs arrays=True")
    rng = random.Random(f"{mode}:{seed}" if arrays else f"{mode}-scalar:{seed}")
    g = _Gen(rng, mode, max_depth, arrays)
    forms: list[str] = []
    if mode == "model":
        for _ in range(rng.randint(1, 3)):
            name = g.fresh("th")
            constraint = rng.choice(PARAM_CONSTRAINTS)
            if constraint is None:
                init = round(rng.uniform(-1.0, 1.5), 2)
                forms.append(f"(param {name} {init!r})")
            elif constraint == "positive":
                init = round(rng.uniform(0.2, 2.0), 2)
                forms.append(f"(param {name} {init!r} positive)")
            else:
                init = round(rng.uniform(-0.5, 1.5), 2)
                forms.append(f"(param {name} {init!r} (between -1 2))")
            g.params.append((name, init, constraint))
    env: list = []
    forms += g.toplevel_defs(env)
    if mode == "model":
        if (result or "scalar") == "vector":
            g.uses_x = True
            final = f"(+ {g.vec(X_LEN, env, max_depth)} (* {g.rng.choice(g.params)[0]} x))"
        else:
            final = g.real(env, max_depth)
            if rng.random() < 0.6:
                final = f"(+ {final} {g.param_branch(env, 2)})"
            special = g.special_calls(env)
            if special is not None:
                final = f"(+ {final} {special})"
    else:
        t = {None: None, "real": REAL, "int": INT, "bool": BOOL, "sym": SYM, "list": list_t(REAL, 2)}[result]
        if t is None:
            t = rng.choice(
                [
                    REAL,
                    REAL,
                    REAL,
                    INT,
                    INT,
                    BOOL,
                    SYM,
                    list_t(REAL, rng.randint(0, 3)),
                    list_t(INT, rng.randint(1, 3)),
                    list_t(SYM, 2),
                ]
            )
        final = g.expr(t, env, max_depth)
        for _ in range(4):  # a bare literal or variable as the program's value checks little
            if final.startswith("(") and not final.startswith("(quote"):
                break
            final = g.expr(t, env, max_depth)
        if kind(t) == REAL:
            special = g.special_calls(env)
            if special is not None:
                final = f"(+ {final} {special})"
    forms.append(final)
    return Generated(
        source="\n".join(forms) + "\n", mode=mode, seed=seed, params=list(g.params), uses_x=g.uses_x, uses_u=g.uses_u
    )


def source_sha(source: str) -> str:
    return hashlib.sha256(source.encode()).hexdigest()[:16]


# Guile runs a whole batch in one process: each entry `(SEED MODE form ...)` is evaluated form by
# form in a fresh module, like the top level of a file, and `SEED value` (or `SEED #<error KEY>`) is
# written. R7RS `square` is not in Guile's default environment, so it is defined first; model
# programs (arrays=False) also get MODEL_PRELUDE: NDVM's `param`, `loop`/`recur`, `sigmoid`,
# `softplus` written in Scheme, and the scalar input u.
MODEL_INPUT_U = 0.7
MODEL_PRELUDE = f"""
(define-syntax param (syntax-rules () ((_ name init . constraint) (define name init))))
(define-syntax loop
  (lambda (stx)
    (syntax-case stx ()
      ((k bindings body ...)
       (with-syntax ((recur (datum->syntax #'k 'recur)))
         #'(let recur bindings body ...))))))
(define (sigmoid z) (/ 1.0 (+ 1.0 (exp (- z)))))
(define (softplus z) (if (> z 0) (+ z (log (+ 1.0 (exp (- z))))) (log (+ 1.0 (exp z)))))
(define u {MODEL_INPUT_U!r})
"""
GUILE_BATCH_DRIVER = r"""
(define model-prelude (let ((port (open-input-file (caddr (command-line)))))
  (let loop ((acc '())) (let ((form (read port))) (if (eof-object? form) (reverse acc) (loop (cons form acc)))))))
(define (run-one mode forms)
  (let ((module (make-fresh-user-module)))
    (eval '(define (square x) (* x x)) module)
    (if (eq? mode 'model) (for-each (lambda (form) (eval form module)) model-prelude))
    (let loop ((forms forms) (last #f))
      (if (null? forms) last (loop (cdr forms) (eval (car forms) module))))))
(define port (open-input-file (cadr (command-line))))
(let next ()
  (let ((entry (read port)))
    (unless (eof-object? entry)
      (write (car entry))
      (display " ")
      (catch #t
        (lambda () (write (run-one (cadr entry) (cddr entry))))
        (lambda (key . args) (display "#<error ") (write key) (display ">")))
      (newline)
      (next))))
"""


def guile_program(seed: int, mode: str) -> Generated:
    """The program Guile runs for (seed, mode): r7rs, or model without arrays."""
    return generate(seed, "r7rs") if mode == "r7rs" else generate(seed, "model", arrays=False)


def run_guile(
    seeds: list[int], guile: str = "guile", timeout_s: float = 600.0, mode: str = "r7rs", batch_size: int = 2000
) -> dict[int, str]:
    """Guile's `write` of the value of each program (see guile_program), keyed by seed; one Guile
    process per batch of `batch_size` programs, each batch within `timeout_s`."""
    out: dict[int, str] = {}
    for start in range(0, len(seeds), batch_size):
        out.update(_run_guile_batch(seeds[start : start + batch_size], guile, timeout_s, mode))
    return out


def _run_guile_batch(seeds: list[int], guile: str, timeout_s: float, mode: str) -> dict[int, str]:
    with tempfile.TemporaryDirectory() as tmp:
        driver = Path(tmp) / "driver.scm"
        driver.write_text(GUILE_BATCH_DRIVER)
        prelude = Path(tmp) / "model_prelude.scm"
        prelude.write_text(MODEL_PRELUDE)
        batch = Path(tmp) / "batch.scm"
        batch.write_text("".join(f"({seed} {mode}\n{guile_program(seed, mode).source})\n" for seed in seeds))
        proc = subprocess.run(
            [guile, "--no-auto-compile", "-s", str(driver), str(batch), str(prelude)],
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )
    if proc.returncode != 0:
        raise RuntimeError(f"guile failed (exit {proc.returncode}): {proc.stderr.strip()[-800:]}")
    out: dict[int, str] = {}
    for line in proc.stdout.splitlines():
        seed, _, value = line.partition(" ")
        out[int(seed)] = value
    missing = [s for s in seeds if s not in out]
    if missing:
        raise RuntimeError(f"guile printed no value for seeds {missing[:10]}")
    return out


def write_guile_fixture(guile: str = "guile") -> Path:
    """Writes Guile's answers for seeds 0..GUILE_FIXTURE_SEEDS-1 of both modes (reviewed and committed)."""
    seeds = list(range(GUILE_FIXTURE_SEEDS))
    version = subprocess.run([guile, "--version"], capture_output=True, text=True, check=True).stdout.splitlines()[0]
    GUILE_FIXTURE.parent.mkdir(parents=True, exist_ok=True)
    with GUILE_FIXTURE.open("w") as f:
        for mode in ("r7rs", "model"):
            answers = run_guile(seeds, guile, mode=mode)
            for seed in seeds:
                record = {
                    "seed": seed,
                    "mode": mode,
                    "source_sha": source_sha(guile_program(seed, mode).source),
                    "expected": answers[seed],
                    "guile": version,
                }
                f.write(json.dumps(record) + "\n")
    return GUILE_FIXTURE


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="print generated NDVM programs")
    parser.add_argument("--mode", choices=("r7rs", "model"), default="r7rs")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--count", type=int, default=1)
    parser.add_argument("--result", default=None)
    parser.add_argument(
        "--write-guile-fixture",
        action="store_true",
        help=f"run seeds 0..{GUILE_FIXTURE_SEEDS - 1} (r7rs mode) through Guile into {GUILE_FIXTURE.name}",
    )
    args = parser.parse_args(argv)
    if args.write_guile_fixture:
        path = write_guile_fixture()
        print(f"wrote {GUILE_FIXTURE_SEEDS} Guile answers per mode (r7rs, model) to {path}")
        return 0
    for seed in range(args.seed, args.seed + args.count):
        print(f";;; seed {seed}")
        print(generate(seed, args.mode, args.result).source)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
