"""Random well-formed programs in the subset NDVM shares with R7RS, for differential runs against Guile.

Each program is one expression `(list INT FLOAT BOOL LIST NUMBER)` built from typed generators, so
that every program is valid in both languages and its value is plain data: exact integer arithmetic
(quotient/remainder/modulo with either sign, min/max, abs, expt with small exponents, named-let
loops), inexact arithmetic (trigonometry, exp/log/sqrt on safe domains, rounding, exactness
contagion), chained comparisons, predicates, eqv?/equal?, and list operations (map, append, reverse,
list-tail, memv, rest arguments). Nothing divides exact integers with `/` (NDVM has no rationals).
"""

from __future__ import annotations

import random
import subprocess
import tempfile
from pathlib import Path

# Guile reads one expression a line and writes each value on its own line ("ERROR" when it raises).
GUILE_BATCH_DRIVER = r"""
(define (square x) (* x x))
(define port (open-input-file (cadr (command-line))))
(let loop ()
  (let ((form (read port)))
    (unless (eof-object? form)
      (catch #t
        (lambda () (write (eval form (interaction-environment))))
        (lambda (key . args) (display "ERROR")))
      (newline)
      (loop))))
"""

_FLOATS = ["0.5", "-1.25", "2.0", "3.75", "-0.1", "1e-3", "10.5", "-7.0", "0.0", "2.5", "-2.5", "1.5"]
_LISTS = ["'()", "'(1 2 3)", "'(2.5 -1 0)", "(list 1 2.0)"]


class ProgramGenerator:
    def __init__(self, seed: int):
        self.rng = random.Random(seed)
        self.int_vars: list[str] = []
        self.float_vars: list[str] = []

    def integer(self, depth: int) -> str:
        r = self.rng
        if depth <= 0 or r.random() < 0.2:
            return r.choice(self.int_vars) if self.int_vars and r.random() < 0.5 else str(r.randint(-20, 20))
        d = depth - 1
        choice = r.randrange(18)
        if choice == 14:
            return (
                f"(case {self.integer(d)} ((0 1 2) {self.integer(d)}) ((-1 -2 3) {self.integer(d)}) "
                f"(else {self.integer(d)}))"
            )
        if choice == 15:
            return f"(cond ({self.boolean(d)} {self.integer(d)}) ({self.boolean(d)} {self.integer(d)}) (else {self.integer(d)}))"
        if choice == 16:
            return (
                f"(do ((k 0 (+ k 1)) (acc {self.integer(d)} (+ acc (* k {r.randint(-3, 3)})))) "
                f"((= k {r.randint(0, 6)}) acc))"
            )
        if choice == 17:
            return f"(list-ref (list {self.integer(d)} {self.integer(d)} {self.integer(d)}) {r.randint(0, 2)})"
        if choice == 0:
            return f"(+ {self.integer(d)} {self.integer(d)} {self.integer(d)})"
        if choice == 1:
            return f"(- {self.integer(d)} {self.integer(d)})"
        if choice == 2:
            return f"(* {r.randint(-20, 20)} {self.integer(d)})"
        if choice == 3:
            divisor = f"(+ 1 (abs {self.integer(d)}))"
            divisor = divisor if r.random() < 0.5 else f"(- {divisor})"
            return f"({r.choice(['quotient', 'remainder', 'modulo'])} {self.integer(d)} {divisor})"
        if choice == 4:
            return f"(abs {self.integer(d)})"
        if choice == 5:
            return f"({r.choice(['min', 'max'])} {self.integer(d)} {self.integer(d)})"
        if choice == 6:
            return f"(if {self.boolean(d)} {self.integer(d)} {self.integer(d)})"
        if choice == 7:
            return f"(length {self.list_(d)})"
        if choice == 8:
            name, value = f"i{len(self.int_vars)}", self.integer(d)
            self.int_vars.append(name)
            body = self.integer(d)
            self.int_vars.pop()
            return f"(let (({name} {value})) {body})"
        if choice == 9:
            return f"(apply + (list {self.integer(d)} {self.integer(d)}))"
        if choice == 10:
            return f"({r.choice(['round', 'floor', 'ceiling', 'truncate'])} {self.integer(d)})"
        if choice == 11:
            return f"(square {r.randint(-20, 20)})"
        if choice == 12:
            return f"(expt {r.randint(-3, 3)} {r.randint(0, 5)})"
        return f"(let loop ((k {r.randint(0, 5)}) (acc {self.integer(d)})) (if (= k 0) acc (loop (- k 1) (+ acc k))))"

    def inexact(self, depth: int) -> str:
        r = self.rng
        if depth <= 0 or r.random() < 0.2:
            return r.choice(self.float_vars) if self.float_vars and r.random() < 0.5 else r.choice(_FLOATS)
        d = depth - 1
        choice = r.randrange(16)
        if choice == 0:
            return f"(+ {self.inexact(d)} {self.integer(d)})"
        if choice == 1:
            return f"(- {self.inexact(d)} {self.inexact(d)})"
        if choice == 2:
            return f"(* {self.inexact(d)} {self.inexact(d)})"
        if choice == 3:
            return f"(/ {self.inexact(d)} (+ 1.5 (abs {self.inexact(d)})))"
        if choice == 4:
            return f"({r.choice(['sin', 'cos', 'atan', 'tanh'])} {self.inexact(d)})"
        if choice == 5:
            return f"(exp (sin {self.inexact(d)}))"
        if choice == 6:
            return f"(sqrt (+ 0.25 (abs {self.inexact(d)})))"
        if choice == 7:
            return f"({r.choice(['round', 'floor', 'ceiling', 'truncate'])} {self.inexact(d)})"
        if choice == 8:
            return f"({r.choice(['min', 'max'])} {self.inexact(d)} {self.integer(d)})"
        if choice == 9:
            return f"(exact->inexact {self.integer(d)})"
        if choice == 10:
            return f"(if {self.boolean(d)} {self.inexact(d)} {self.inexact(d)})"
        if choice == 11:
            name, value = f"f{len(self.float_vars)}", self.inexact(d)
            self.float_vars.append(name)
            body = self.inexact(d)
            self.float_vars.pop()
            return f"(let* (({name} {value}) ({name} (* 2 {name}))) {body})"
        if choice == 12:
            return f"(log (+ 1.0 (abs {self.inexact(d)})))"
        if choice == 13:
            return f"(abs {self.inexact(d)})"
        if choice == 14:
            return f"(apply max (list {self.inexact(d)} {self.integer(d)} {self.inexact(d)}))"
        return f"((lambda (a . r) (+ a (length r))) {self.inexact(d)} {self.integer(d)})"

    def number(self, depth: int) -> str:
        return self.integer(depth) if self.rng.random() < 0.5 else self.inexact(depth)

    def boolean(self, depth: int) -> str:
        r = self.rng
        if depth <= 0 or r.random() < 0.15:
            return r.choice(["#t", "#f"])
        d = depth - 1
        choice = r.randrange(13)
        if choice == 11:
            return f"(if (memq '{r.choice('abc')} (list 'a '{r.choice('bcd')} (if {self.boolean(d)} 'c 'e))) #t #f)"
        if choice == 12:
            return f"(let ((f (lambda (v . rest) (if (null? rest) {self.boolean(d)} (> v (length rest)))))) (f {self.integer(d)} 1 2))"
        if choice == 0:
            return f"({r.choice(['<', '>', '<=', '>=', '='])} {self.number(d)} {self.number(d)} {self.number(d)})"
        if choice == 1:
            return f"({r.choice(['even?', 'odd?'])} {self.integer(d)})"
        if choice == 2:
            return f"({r.choice(['zero?', 'positive?', 'negative?'])} {self.number(d)})"
        if choice == 3:
            return f"(not {self.boolean(d)})"
        if choice == 4:
            return f"(and {self.boolean(d)} {self.boolean(d)})"
        if choice == 5:
            return f"(or {self.boolean(d)} {self.boolean(d)})"
        if choice == 6:
            return f"({r.choice(['null?', 'pair?', 'list?'])} {self.list_(d)})"
        if choice == 7:
            return f"({r.choice(['eqv?', 'equal?'])} {self.number(d)} {self.number(d)})"
        if choice == 8:
            return f"(equal? {self.list_(d)} {self.list_(d)})"
        if choice == 9:
            return f"(if (memv {self.number(d)} {self.list_(d)}) #t #f)"
        return f"(number? {self.number(d)})"

    def list_(self, depth: int) -> str:
        r = self.rng
        if depth <= 0 or r.random() < 0.2:
            return r.choice(_LISTS)
        d = depth - 1
        choice = r.randrange(12)
        if choice == 8:
            return f"(let ((l {self.list_(d)})) (map + l l))"
        if choice == 9:
            return f"(apply list {self.number(d)} {self.list_(d)})"
        if choice == 10:
            return (
                f"(let ((hit (assv {self.integer(d)} (list (cons 1 {self.list_(d)}) (cons 2 {self.list_(d)}) "
                f"(cons 0 {self.list_(d)}))))) (if hit (cdr hit) '(-99)))"
            )
        if choice == 11:
            return (
                f"(let loop ((k {r.randint(0, 4)}) (acc {self.list_(d)})) "
                f"(if (= k 0) acc (loop (- k 1) (cons (* k {self.number(d)}) acc))))"
            )
        if choice == 0:
            return f"(list {self.number(d)} {self.number(d)})"
        if choice == 1:
            return f"(cons {self.number(d)} {self.list_(d)})"
        if choice == 2:
            return f"(reverse {self.list_(d)})"
        if choice == 3:
            return f"(append {self.list_(d)} {self.list_(d)})"
        if choice == 4:
            return f"(map (lambda (x) (* x {self.number(d)})) {self.list_(d)})"
        if choice == 5:
            return f"(map abs {self.list_(d)})"
        if choice == 6:
            return f"(let ((l {self.list_(d)})) (if (null? l) l (cdr l)))"
        return f"(if {self.boolean(d)} {self.list_(d)} {self.list_(d)})"

    def program(self) -> str:
        body = f"(list {self.integer(4)} {self.inexact(4)} {self.boolean(4)} {self.list_(4)} {self.number(5)})"
        if self.rng.random() < 0.5:
            return body
        # Internal definitions: helpers (fixed and rest arguments, a tail-recursive one) called from the body.
        self.int_vars[:] = ["a", "b"]
        int_helper = self.integer(3)
        self.int_vars[:] = ["n"]
        step = self.integer(2)
        self.int_vars[:] = []
        self.float_vars[:] = ["u"]
        float_helper = self.inexact(3)
        self.float_vars[:] = []
        self.int_vars[:] = []
        calls = [
            f"(ih {self.integer(2)} {self.integer(2)})",
            f"(fh {self.inexact(2)})",
            f"(fh {self.inexact(2)} 1 2)",
            f"(rec {self.rng.randint(0, 30)} 0)",
            f"(apply ih (list {self.integer(1)} {self.integer(1)}))",
            "(map ih '(1 2 3) '(4 5 6))",
        ]
        return (
            f"(let () (define (ih a b) {int_helper}) "
            f"(define (fh u . rest) (+ (length rest) {float_helper})) "
            f"(define (rec n acc) (if (<= n 0) acc (rec (- n 1) (+ acc {step})))) "
            f"(list {body} {self.rng.choice(calls)} {self.rng.choice(calls)}))"
        )


def generate(seed: int, count: int) -> list[str]:
    gen = ProgramGenerator(seed)
    return [gen.program() for _ in range(count)]


def run_guile_batch(programs: list[str], guile: str, timeout_s: float = 120.0) -> list[str]:
    """Guile's `write` of each program's value ("ERROR" where Guile raises), in order."""
    with tempfile.TemporaryDirectory() as tmp:
        driver, source = Path(tmp) / "driver.scm", Path(tmp) / "programs.scm"
        driver.write_text(GUILE_BATCH_DRIVER)
        source.write_text("\n".join(programs) + "\n")
        proc = subprocess.run(
            [guile, "--no-auto-compile", "-s", str(driver), str(source)],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=True,
        )
    lines = proc.stdout.splitlines()
    if len(lines) != len(programs):
        raise RuntimeError(f"guile wrote {len(lines)} values for {len(programs)} programs")
    return lines
