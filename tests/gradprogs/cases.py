"""Scalar-valued NDVM programs with declared parameters, for the gradient suite (tests/test_gradients.py).

Each case gives the source, a base point (parameter values in declaration order, natural units), the
inputs, how to spread 16 lanes around the point (or the 16 lane points themselves, for programs whose
lanes must take different branches), and for many cases the same model written in torch (float64),
whose autograd gradient NDVM must reproduce. Points stay well away from kinks (branch switches,
floor steps), further than the finite-difference stencil reaches.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch

LANES = 16


@dataclass
class GradCase:
    name: str
    source: str
    point: tuple  # parameter values, declaration order
    inputs: dict = field(default_factory=dict)
    spread: float = 0.2  # lanes: point + spread * U(-1, 1), seeded by the name
    lanes: np.ndarray | None = None  # explicit [16, P] lane points (divergent control flow)
    lane_inputs: dict = field(default_factory=dict)  # name -> array [16, ...], one value per lane
    torch_fn: Callable | None = None  # torch_fn(theta [P] tensor, inputs as tensors) -> scalar tensor


def mixed(values_a, *others) -> np.ndarray:
    """Explicit lane points: column 0 takes values_a (16 values), other columns are constants."""
    a = np.asarray(values_a, dtype=np.float64)
    assert a.shape == (LANES,)
    cols = [a] + [np.full(LANES, float(v)) for v in others]
    return np.stack(cols, axis=1)


# Lane values for a that cross zero, each at least 0.1 from 0 and from +-1.
SIGNS = np.array([-2.3, -1.7, -1.3, -0.8, -0.55, -0.35, -0.2, -0.12, 0.13, 0.22, 0.37, 0.6, 0.85, 1.35, 1.8, 2.4])

X8 = np.linspace(-1.0, 2.5, 8)
Y8 = 1.3 * X8 - 0.4 + 0.1 * np.sin(7 * X8)
T12 = np.linspace(0.0, 3.0, 12)
Y12 = 2.0 * np.exp(-0.7 * T12) + 0.05 * np.cos(5 * T12)
LABELS8 = (np.sin(3 * X8) > 0).astype(np.float64)
SERIES20 = np.cumsum(np.sin(np.arange(20) * 0.9)) * 0.3
YS = np.stack([np.sin(np.arange(15) * 0.5), np.cos(np.arange(15) * 0.3)], axis=1) * 0.8
M3 = np.array([[2.0, 0.3, -0.2], [0.1, 1.5, 0.4], [-0.3, 0.2, 1.8]])
V3 = np.array([0.5, -1.0, 2.0])
PIV3 = np.array([[0.0, 1.0, 2.0], [1.0, 0.0, 3.0], [4.0, 5.0, 0.0]])  # zero diagonal: LU must pivot


def tt(v):
    return torch.as_tensor(v, dtype=torch.float64)


def sigmoid(z):
    return 1.0 / (1.0 + torch.exp(-z))


def softplus(z):
    return torch.log1p(torch.exp(z))


def kalman_torch(q, r, ys):
    eye = torch.eye(2, dtype=torch.float64)
    x = torch.zeros(2, dtype=torch.float64)
    P = eye
    nll = tt(0.0)
    for t in range(ys.shape[0]):
        Pp = P + q * eye
        S = Pp + r * eye
        e = ys[t] - x
        Si = torch.linalg.inv(S)
        K = Pp @ Si
        x = x + K @ e
        P = (eye - K) @ Pp
        nll = nll + torch.logdet(S) + e @ (Si @ e)
    return nll


CASES: list[GradCase] = []


def case(name, source, point, inputs=None, spread=0.2, lanes=None, torch_fn=None, lane_inputs=None):
    CASES.append(
        GradCase(
            name,
            source.strip() + "\n",
            tuple(float(p) for p in point),
            inputs or {},
            spread,
            lanes,
            lane_inputs or {},
            torch_fn,
        )
    )


# ----------------------------------------------------------------------------- arithmetic and math
case(
    "poly-two-params",
    "(param a 0.7) (param b -0.3) (+ (* a a b) (* 3 b) (/ a (+ 2 b)))",
    (0.7, -0.3),
    torch_fn=lambda t, I: t[0] * t[0] * t[1] + 3 * t[1] + t[0] / (2 + t[1]),
)
case(
    "variadic-arith",
    "(param a 1.1) (param b 0.4) (- (+ a b a 1) (* a b 2 b) (/ a b 3))",
    (1.1, 0.4),
    spread=0.1,
    torch_fn=lambda t, I: (t[0] + t[1] + t[0] + 1) - t[0] * t[1] * 2 * t[1] - t[0] / t[1] / 3,
)
case(
    "unary-minus-and-reciprocal",
    "(param a 1.7) (+ (- a) (/ a) (/ 2.0 a a))",
    (1.7,),
    torch_fn=lambda t, I: -t[0] + 1 / t[0] + 2.0 / t[0] / t[0],
)
case(
    "exp-log",
    "(param a 0.5) (param b 0.8) (+ (exp (* a b)) (log (+ 2 (* a a))))",
    (0.5, 0.8),
    torch_fn=lambda t, I: torch.exp(t[0] * t[1]) + torch.log(2 + t[0] * t[0]),
)
case(
    "trig",
    "(param a 0.6) (+ (sin a) (* 2 (cos (* 3 a))) (tan (/ a 2)))",
    (0.6,),
    torch_fn=lambda t, I: torch.sin(t[0]) + 2 * torch.cos(3 * t[0]) + torch.tan(t[0] / 2),
)
case(
    "inverse-trig",
    "(param a 0.3) (+ (asin a) (* 2 (acos (* 0.5 a))) (atan (* 3 a)))",
    (0.3,),
    torch_fn=lambda t, I: torch.asin(t[0]) + 2 * torch.acos(0.5 * t[0]) + torch.atan(3 * t[0]),
)
case(
    "atan-two-args",
    "(param y 0.7) (param x -0.4) (atan y x)",
    (0.7, -0.4),
    spread=0.1,
    torch_fn=lambda t, I: torch.atan2(t[0], t[1]),
)
case(
    "atan-two-args-quadrants",
    "(param y -0.5) (param x 0.9) (+ (atan y x) (atan x y))",
    (-0.5, 0.9),
    spread=0.1,
    torch_fn=lambda t, I: torch.atan2(t[0], t[1]) + torch.atan2(t[1], t[0]),
)
case(
    "tanh-sigmoid-softplus",
    "(param a 0.4) (+ (tanh (* 2 a)) (sigmoid (- a 1)) (softplus (* 3 a)))",
    (0.4,),
    torch_fn=lambda t, I: torch.tanh(2 * t[0]) + sigmoid(t[0] - 1) + softplus(3 * t[0]),
)
case(
    "sqrt-and-square",
    "(param a 2.2) (+ (sqrt a) (square (- a 1)) (sqrt (square a)))",
    (2.2,),
    torch_fn=lambda t, I: torch.sqrt(t[0]) + (t[0] - 1) ** 2 + torch.sqrt(t[0] ** 2),
)
case("expt-param-exponent", "(param b 1.5) (param e 0.7) (expt b e)", (1.5, 0.7), torch_fn=lambda t, I: t[0] ** t[1])
case(
    "expt-integer-exponent",
    "(param a 1.3) (+ (expt a 3) (expt a -2) (expt 2.0 a))",
    (1.3,),
    torch_fn=lambda t, I: t[0] ** 3 + t[0] ** -2 + 2.0 ** t[0],
)
case(
    "abs-away-from-zero",
    "(param a -0.9) (param b 1.2) (+ (abs a) (abs (* a b)) (abs b))",
    (-0.9, 1.2),
    torch_fn=lambda t, I: torch.abs(t[0]) + torch.abs(t[0] * t[1]) + torch.abs(t[1]),
)
case(
    "min-max-distinct",
    "(param a 0.3) (param b 1.4) (+ (min a b 2.0) (* 2 (max a b -1.0)))",
    (0.3, 1.4),
    torch_fn=lambda t, I: torch.min(t[0], t[1]) + 2 * torch.max(t[0], t[1]),
)
case(
    "clamp-data-between-params",
    "(param a 1.2) (param lo -0.3) (param hi 1.5) (vsum (square (clamp (* a x) lo hi)))",
    (1.2, -0.3, 1.5),
    inputs={"x": X8},  # a*x: two elements below lo, three inside, three above hi, all far from both
    spread=0.05,
    torch_fn=lambda t, I: torch.sum(torch.clamp(t[0] * I["x"], min=t[1], max=t[2]) ** 2),
)
case(
    "floor-has-zero-gradient",
    "(param a 2.4) (+ (* 3 a) (floor a) (ceiling (* 2 a)) (round a) (truncate a))",
    (2.4,),
    spread=0.05,
)
case("floor-times-param", "(param a 2.35) (* (floor (* 2 a)) a a)", (2.35,), spread=0.05)
case(
    "exact-inexact-mix",
    "(param a 0.25) (+ (* 3 a) (* 2 (exact->inexact 5)) (/ a 4))",
    (0.25,),
    torch_fn=lambda t, I: 3 * t[0] + 10.0 + t[0] / 4,
)
case(
    "chained-comparison-guard",
    "(param a 0.5) (if (< 0 a 1) (* a a a) (- a))",
    (0.5,),
    spread=0.3,
    torch_fn=lambda t, I: t[0] ** 3,
)
case(
    "many-params",
    "(param a 0.1) (param b 0.2) (param c 0.3) (param d 0.4) (param e 0.5)\n"
    "(+ (* a b) (* b c d) (exp (* d e)) (sin (+ a e)) (/ c (+ 1 (square e))))",
    (0.1, 0.2, 0.3, 0.4, 0.5),
    torch_fn=lambda t, I: (
        t[0] * t[1] + t[1] * t[2] * t[3] + torch.exp(t[3] * t[4]) + torch.sin(t[0] + t[4]) + t[2] / (1 + t[4] ** 2)
    ),
)
case(
    "param-used-in-define",
    "(param a 0.9) (define b (* 2 a)) (define c (+ b 1)) (* a b c)",
    (0.9,),
    torch_fn=lambda t, I: t[0] * (2 * t[0]) * (2 * t[0] + 1),
)
case(
    "let-star-chain",
    "(param a 0.8) (let* ((b (* a a)) (c (sin b)) (d (+ b c))) (* d (exp (- a))))",
    (0.8,),
    torch_fn=lambda t, I: (t[0] ** 2 + torch.sin(t[0] ** 2)) * torch.exp(-t[0]),
)
case("begin-and-when", "(param a 0.6) (begin (when (> a -10) (* 4 a a)))", (0.6,), torch_fn=lambda t, I: 4 * t[0] ** 2)
case(
    "positive-constraint-natural-units",
    "(param k 1.5 positive) (param c 0.2) (+ (* k k c) (log k))",
    (1.5, 0.2),
    torch_fn=lambda t, I: t[0] * t[0] * t[1] + torch.log(t[0]),
)
case(
    "between-constraint-natural-units",
    "(param p 0.3 (between 0 1)) (+ (* p (log p)) (* (- 1 p) (log (- 1 p))))",
    (0.3,),
    spread=0.1,
    torch_fn=lambda t, I: t[0] * torch.log(t[0]) + (1 - t[0]) * torch.log(1 - t[0]),
)
case(
    "gradient-of-unused-param-is-zero",
    "(param a 0.4) (param unused 3.0) (* a a)",
    (0.4, 3.0),
    torch_fn=lambda t, I: t[0] * t[0] + 0 * t[1],
)
case(
    "scalar-input-with-param",
    "(param a 0.4) (* a a s)",
    (0.4,),
    inputs={"s": 2.5},
    torch_fn=lambda t, I: t[0] * t[0] * I["s"],
)
case(
    "long-expression-chain",
    "(param a 0.3)\n(define (f v) (+ (* 0.5 v) (sin v)))\n(f (f (f (f (f (f (f (f a))))))))",
    (0.3,),
    torch_fn=None,
)

case(
    "expt-negative-base-integral-float-exponent",
    "(param a -1.3) (+ (expt a 3.0) (expt a 2))",
    (-1.3,),
    torch_fn=lambda t, I: t[0] ** 3.0 + t[0] ** 2,
)
case(
    "softplus-large-argument",
    "(param a 8.0) (+ (softplus (* 100 a)) (softplus (* -100 a)))",
    (8.0,),
    spread=0.5,
    torch_fn=lambda t, I: torch.logaddexp(100 * t[0], tt(0.0)) + torch.logaddexp(-100 * t[0], tt(0.0)),
)
case(
    "sigmoid-saturated",
    "(param a 8.0) (+ (sigmoid (* 100 a)) (sigmoid (* -100 a)) a)",
    (8.0,),
    spread=0.5,
    torch_fn=lambda t, I: torch.sigmoid(100 * t[0]) + torch.sigmoid(-100 * t[0]) + t[0],
)
case(
    "tanh-saturated",
    "(param a 8.0) (+ (tanh (* 100 a)) (tanh (* -100 a)) a)",
    (8.0,),
    spread=0.5,
    torch_fn=lambda t, I: torch.tanh(100 * t[0]) + torch.tanh(-100 * t[0]) + t[0],
)
case(
    "exp-underflow-times-param",
    "(param a 8.0) (+ (* a (exp (* -200 a))) (square a))",
    (8.0,),
    spread=0.5,
    torch_fn=lambda t, I: t[0] * torch.exp(-200 * t[0]) + t[0] ** 2,
)

case("identity-param-is-the-value", "(param a 1.0) a", (1.0,), torch_fn=lambda t, I: t[0] * 1.0)
case(
    "structural-path-only",
    "(param a 1.0) (param b 2.0) (car (cdr (list b a)))",
    (1.0, 2.0),
    torch_fn=lambda t, I: t[0] + 0.0 * t[1],
)
case("constant-program", "(param a 1.0) 5.0", (1.0,), torch_fn=lambda t, I: tt(5.0) + 0.0 * t[0])
case("exact-integer-result", "(param a 1.0) (if (> a -100) 3 4)", (1.0,), torch_fn=lambda t, I: tt(3.0) + 0.0 * t[0])
case(
    "cond-test-only-clause-value",
    "(param a 0.7) (+ 1.0 (cond ((and (> a 0) (* a a))) (else 0.0)))",
    (0.7,),
    torch_fn=lambda t, I: 1.0 + t[0] * t[0],
)
case(
    "or-and-return-numbers",
    "(param a 0.7) (param b 0.2) (+ (or #f (* a b)) (and #t (exp b)))",
    (0.7, 0.2),
    torch_fn=lambda t, I: t[0] * t[1] + torch.exp(t[1]),
)
case(
    "param-shadowed-by-let",
    "(param a 0.7) (+ a (let ((a (* 3 a))) (* a a)))",
    (0.7,),
    torch_fn=lambda t, I: t[0] + 9 * t[0] ** 2,
)
case(
    "param-used-many-times",
    "(param a 0.7)\n(let loop ((i 0) (acc 0.0)) (if (= i 500) acc (loop (+ i 1) (+ acc (* a 0.001 i)))))",
    (0.7,),
    torch_fn=lambda t, I: t[0] * 0.001 * sum(range(500)),
)
case(
    "deep-recursion-gradient",
    "(param a 1.0)\n(define m (- 1.0 (* 0.0001 a)))\n(define (p n) (if (= n 0) 1.0 (* m (p (- n 1)))))\n(p 5000)",
    (1.0,),
    spread=0.3,
    torch_fn=lambda t, I: (1.0 - 0.0001 * t[0]) ** 5000,
)

# ----------------------------------------------------------------------------- closures and higher order
case(
    "closure-make-adder",
    "(param a 0.5) (define (make-adder n) (lambda (x) (+ x n))) ((make-adder (* 2 a)) (square a))",
    (0.5,),
    torch_fn=lambda t, I: t[0] ** 2 + 2 * t[0],
)
case(
    "closure-captures-param",
    "(param a 1.2) (param b 0.3) (define (scale v) (* a v)) (+ (scale b) (scale (scale b)))",
    (1.2, 0.3),
    torch_fn=lambda t, I: t[0] * t[1] + t[0] * t[0] * t[1],
)
case(
    "closure-compose",
    "(param a 0.7)\n(define (compose f g) (lambda (v) (f (g v))))\n((compose exp (lambda (v) (* a v))) (+ a 1))",
    (0.7,),
    torch_fn=lambda t, I: torch.exp(t[0] * (t[0] + 1)),
)
case(
    "closure-curried",
    "(param a 0.4) (param b 1.1) (define (curry f) (lambda (x) (lambda (y) (f x y)))) (((curry (lambda (x y) (* x (exp y)))) a) b)",
    (0.4, 1.1),
    torch_fn=lambda t, I: t[0] * torch.exp(t[1]),
)
case(
    "closure-apply-n-times",
    "(param a 0.9)\n(define (times n f x) (if (= n 0) x (times (- n 1) f (f x))))\n(times 6 (lambda (v) (+ (* a v) 0.1)) 1.0)",
    (0.9,),
    torch_fn=lambda t, I: _times(6, lambda v: t[0] * v + 0.1, tt(1.0)),
)
case(
    "closure-twice",
    "(param a 0.3) (define (twice f) (lambda (v) (f (f v)))) ((twice (twice (lambda (v) (sin (+ v a))))) a)",
    (0.3,),
    torch_fn=lambda t, I: _times(4, lambda v: torch.sin(v + t[0]), t[0]),
)
case(
    "closure-in-list",
    "(param a 0.6)\n(define fs (list (lambda (v) (* v v)) (lambda (v) (exp v)) sin))\n(apply + (map (lambda (f) (f a)) fs))",
    (0.6,),
    torch_fn=lambda t, I: t[0] ** 2 + torch.exp(t[0]) + torch.sin(t[0]),
)
case(
    "closure-returned-by-let",
    "(param a 0.5) (define g (let ((k (* 3 a))) (lambda (v) (* k v v)))) (g (+ a 1))",
    (0.5,),
    torch_fn=lambda t, I: 3 * t[0] * (t[0] + 1) ** 2,
)
case(
    "closure-rest-args",
    "(param a 0.2) (param b 0.7) (define (sum . xs) (apply + xs)) (* (sum a b a) (sum b))",
    (0.2, 0.7),
    torch_fn=lambda t, I: (2 * t[0] + t[1]) * t[1],
)
case(
    "closure-dotted-args",
    "(param a 0.2) (param b 0.7) (define (f x . more) (* x (length more) (apply * more))) (f a b b 2.0)",
    (0.2, 0.7),
    torch_fn=lambda t, I: t[0] * 3 * t[1] * t[1] * 2.0,
)
case(
    "closure-y-combinator",
    "(param a 0.8)\n(define Y (lambda (f) ((lambda (x) (f (lambda (v) ((x x) v)))) (lambda (x) (f (lambda (v) ((x x) v)))))))\n"
    "(define pw (Y (lambda (self) (lambda (n) (if (= n 0) 1.0 (* a (self (- n 1))))))))\n(pw 5)",
    (0.8,),
    torch_fn=lambda t, I: t[0] ** 5,
)
case(
    "closure-higher-order-derivative-op",
    "(param a 1.3)\n(define (deriv f) (lambda (x) (/ (- (f (+ x 0.001)) (f (- x 0.001))) 0.002)))\n((deriv (lambda (x) (* a x x x))) a)",
    (1.3,),
    torch_fn=lambda t, I: (t[0] * (t[0] + 0.001) ** 3 - t[0] * (t[0] - 0.001) ** 3) / 0.002,
)
case(
    "closure-internal-define-capture",
    "(param a 0.45)\n(define (model x)\n  (define (inner y) (* a y))\n  (define z (inner x))\n  (+ z (inner z)))\n(model 2.0)",
    (0.45,),
    torch_fn=lambda t, I: 2 * t[0] + 2 * t[0] * t[0],
)
case(
    "closure-letrec-mutual",
    "(param a 0.7)\n(letrec ((f (lambda (n) (if (= n 0) 1.0 (* a (g (- n 1))))))\n (g (lambda (n) (if (= n 0) 1.0 (+ a (f (- n 1)))))))\n  (f 5))",
    (0.7,),
    torch_fn=lambda t, I: t[0] * (t[0] + t[0] * (t[0] + t[0] * 1.0)),
)

# ----------------------------------------------------------------------------- recursion and loops
case(
    "recursion-power",
    "(param a 1.1) (define (pw x n) (if (= n 0) 1.0 (* x (pw x (- n 1))))) (pw a 7)",
    (1.1,),
    torch_fn=lambda t, I: t[0] ** 7,
)
case(
    "recursion-taylor-exp",
    "(param a 0.6)\n(define (texp x n term acc) (if (> n 20) acc (texp x (+ n 1) (/ (* term x) n) (+ acc term))))\n(texp a 1 1.0 0.0)",
    (0.6,),
    torch_fn=lambda t, I: sum(t[0] ** k / float(np.prod(np.arange(1, k + 1))) for k in range(0, 20)),
)
case(
    "recursion-fib-weights",
    "(param a 0.5) (param b 0.3)\n(define (f n) (if (< n 2) (if (= n 0) a b) (+ (* 0.5 (f (- n 1))) (* b (f (- n 2))))))\n(f 8)",
    (0.5, 0.3),
    torch_fn=lambda t, I: _fib(8, t[0], t[1]),
)
case(
    "recursion-newton-sqrt",
    "(param a 2.5)\n(define (nsqrt x g k) (if (= k 0) g (nsqrt x (* 0.5 (+ g (/ x g))) (- k 1))))\n(nsqrt a 1.0 8)",
    (2.5,),
    torch_fn=lambda t, I: _newton(t[0], 8),
)
case(
    "recursion-continued-fraction",
    "(param a 1.4)\n(define (cf k) (if (= k 0) a (+ a (/ 1.0 (cf (- k 1))))))\n(cf 10)",
    (1.4,),
    torch_fn=lambda t, I: _cf(t[0], 10),
)
case(
    "recursion-non-tail-sum",
    "(param a 1.0)\n(define (s n) (if (= n 0) 0.0 (+ (sin (* 0.01 a n)) (s (- n 1)))))\n(s 200)",
    (1.0,),
    spread=0.3,
    torch_fn=lambda t, I: sum(torch.sin(0.01 * t[0] * n) for n in range(1, 201)),
)
case(
    "recursion-mutual",
    "(param a 0.9)\n(define (ev n x) (if (= n 0) x (od (- n 1) (* a x))))\n(define (od n x) (if (= n 0) x (ev (- n 1) (+ x a))))\n(ev 9 1.0)",
    (0.9,),
    torch_fn=lambda t, I: _evod(9, tt(1.0), t[0]),
)
case(
    "named-let-accumulate",
    "(param a 0.3)\n(let loop ((i 0) (s 0.0)) (if (= i 10) s (loop (+ i 1) (+ s (* a a i)))))",
    (0.3,),
    torch_fn=lambda t, I: t[0] * t[0] * 45,
)
case(
    "named-let-logistic-map",
    "(param r 2.9)\n(let loop ((k 0) (x 0.3)) (if (= k 12) x (loop (+ k 1) (* r x (- 1 x)))))",
    (2.9,),
    spread=0.05,
    torch_fn=lambda t, I: _times(12, lambda v: t[0] * v * (1 - v), tt(0.3)),
)
case(
    "named-let-euler-ode",
    "(param k 0.8) (param y0 1.5)\n(define h 0.05)\n(let loop ((i 0) (y y0)) (if (= i 40) y (loop (+ i 1) (+ y (* h (- (* k y)))))))",
    (0.8, 1.5),
    torch_fn=lambda t, I: _times(40, lambda y: y + 0.05 * (-(t[0] * y)), t[1]),
)
case(
    "loop-recur-form",
    "(param a 0.7)\n(loop ((i 0) (acc 1.0)) (if (= i 5) acc (recur (+ i 1) (* acc (+ a i)))))",
    (0.7,),
    torch_fn=lambda t, I: t[0] * (t[0] + 1) * (t[0] + 2) * (t[0] + 3) * (t[0] + 4),
)
case(
    "loop-recur-two-accumulators",
    "(param a 0.4) (param b 0.9)\n(loop ((i 0) (x a) (y b)) (if (= i 6) (+ x y) (recur (+ i 1) (+ x (* 0.1 y)) (- y (* 0.2 x)))))",
    (0.4, 0.9),
    torch_fn=lambda t, I: _rot(t[0], t[1], 6),
)
case(
    "do-loop",
    "(param a 0.2)\n(do ((i 0 (+ i 1)) (s 0.0 (+ s (exp (* a i))))) ((= i 8) s))",
    (0.2,),
    torch_fn=lambda t, I: sum(torch.exp(t[0] * i) for i in range(8)),
)
case(
    "do-loop-product",
    "(param a 0.5) (param b 1.2)\n(do ((i 1 (+ i 1)) (p 1.0 (* p (+ b (/ a i))))) ((> i 6) p))",
    (0.5, 1.2),
    torch_fn=lambda t, I: _prod([t[1] + t[0] / i for i in range(1, 7)]),
)
case(
    "tail-loop-long",
    "(param a 0.001)\n(define (go n s) (if (= n 0) s (go (- n 1) (+ s (* a a)))))\n(go 20000 0.0)",
    (0.001,),
    spread=0.0005,
    torch_fn=None,
)
case(
    "recursion-tree-sum",
    "(param a 0.3)\n(define (tree d) (if (= d 0) a (+ (tree (- d 1)) (* 0.5 (tree (- d 1))))))\n(tree 6)",
    (0.3,),
    torch_fn=lambda t, I: t[0] * 1.5**6,
)
case(
    "recursion-depth-from-data",
    "(param a 0.5)\n(define (f n) (if (<= n 0) 1.0 (+ 1.0 (* a (f (- n 2))))))\n(+ (f 7) (f 8))",
    (0.5,),
    torch_fn=lambda t, I: _fdepth(7, t[0]) + _fdepth(8, t[0]),
)

# ----------------------------------------------------------------------------- lists
case(
    "list-map-apply",
    "(param a 0.5) (apply + (map (lambda (v) (* a v v)) '(1 2 3 4)))",
    (0.5,),
    torch_fn=lambda t, I: t[0] * 30,
)
case(
    "list-of-params",
    "(param a 0.5) (param b 1.5) (define l (list a b (* a b))) (+ (car l) (* 2 (cadr l)) (* 3 (caddr l)))",
    (0.5, 1.5),
    torch_fn=lambda t, I: t[0] + 2 * t[1] + 3 * t[0] * t[1],
)
case(
    "list-ref-length",
    "(param a 0.5) (define l (map (lambda (k) (* a k)) '(1 2 3 4 5))) (* (list-ref l 3) (length l))",
    (0.5,),
    torch_fn=lambda t, I: t[0] * 4 * 5,
)
case(
    "list-fold-recursive",
    "(param a 0.3)\n(define (fold f acc l) (if (null? l) acc (fold f (f acc (car l)) (cdr l))))\n(fold (lambda (acc v) (+ (* acc a) v)) 0.0 '(1.0 -2.0 0.5 3.0))",
    (0.3,),
    torch_fn=lambda t, I: ((1.0 * t[0] - 2.0) * t[0] + 0.5) * t[0] + 3.0,
)
case(
    "list-cons-car-cdr",
    "(param a 0.4) (param b 0.6) (define p (cons a (cons b '()))) (* (car p) (car (cdr p)) (exp (car p)))",
    (0.4, 0.6),
    torch_fn=lambda t, I: t[0] * t[1] * torch.exp(t[0]),
)
case(
    "list-reverse-append",
    "(param a 0.4) (param b 0.6)\n(define l (append (list a b) (reverse (list a b))))\n(+ (car l) (* 10 (cadr l)) (* 100 (caddr l)) (* 1000 (car (cdddr l))))",
    (0.4, 0.6),
    torch_fn=lambda t, I: t[0] + 10 * t[1] + 100 * t[1] + 1000 * t[0],
)
case(
    "list-map-two-lists",
    "(param a 0.4) (param b 0.6) (apply + (map * (list a b a) (list b b 2.0)))",
    (0.4, 0.6),
    torch_fn=lambda t, I: t[0] * t[1] + t[1] * t[1] + 2 * t[0],
)
case(
    "list-assq-values",
    "(param a 0.4) (param b 0.6)\n(define table (list (cons 'x a) (cons 'y b)))\n(* (cdr (assq 'y table)) (square (cdr (assq 'x table))))",
    (0.4, 0.6),
    torch_fn=lambda t, I: t[1] * t[0] ** 2,
)
case(
    "list-assoc-member",
    "(param a 0.4)\n(define table (list (list 1 a) (list 2 (* 2 a))))\n(+ (cadr (assoc 2 table)) (car (member 2.0 (list 1.0 2.0))) (car (memv 1 '(0 1))))",
    (0.4,),
    torch_fn=lambda t, I: 2 * t[0] + 3.0,
)
case(
    "list-apply-max",
    "(param a 0.4) (param b 1.6) (apply max (list a b (* a b) -1.0))",
    (0.4, 1.6),
    spread=0.1,
    torch_fn=lambda t, I: t[1],
)
case(
    "list-list-tail-sum",
    "(param a 0.25) (apply + (list-tail (map (lambda (k) (expt a k)) '(1 2 3 4 5)) 2))",
    (0.25,),
    torch_fn=lambda t, I: t[0] ** 3 + t[0] ** 4 + t[0] ** 5,
)
case(
    "list-recursive-build-then-sum",
    "(param a 0.9)\n(define (build n x) (if (= n 0) '() (cons x (build (- n 1) (* x a)))))\n(apply + (build 10 1.0))",
    (0.9,),
    torch_fn=lambda t, I: sum(t[0] ** k for k in range(10)),
)
case(
    "list-sort-by-param",
    "(param a 0.35)\n(define (insert x s) (if (or (null? s) (<= x (car s))) (cons x s) (cons (car s) (insert x (cdr s)))))\n"
    "(define sorted (insert a (list 0.1 0.2 0.5 0.9)))\n(+ (* 1 (car sorted)) (* 2 (cadr sorted)) (* 3 (caddr sorted)) (* 4 (cadr (cddr sorted))))",
    (0.35,),
    spread=0.05,
    torch_fn=lambda t, I: 0.1 + 2 * 0.2 + 3 * t[0] + 4 * 0.5,
)
case(
    "list-quoted-constants",
    "(param a 0.8) (apply + (map (lambda (p) (* (car p) (expt a (cdr p)))) '((2.0 . 1) (3.0 . 2) (-1.0 . 3))))",
    (0.8,),
    torch_fn=lambda t, I: 2 * t[0] + 3 * t[0] ** 2 - t[0] ** 3,
)

# ----------------------------------------------------------------------------- vector inputs
case(
    "vec-linear-mse",
    "(param a 1.0) (param b 0.0) (vsum (square (- y (+ (* a x) b))))",
    (1.0, 0.0),
    inputs={"x": X8, "y": Y8},
    torch_fn=lambda t, I: torch.sum((I["y"] - (t[0] * I["x"] + t[1])) ** 2),
)
case(
    "vec-exp-decay-mse",
    "(param A 1.5) (param k 0.5) (vsum (square (- y (* A (exp (* (- k) t))))))",
    (1.5, 0.5),
    inputs={"t": T12, "y": Y12},
    torch_fn=lambda t, I: torch.sum((I["y"] - t[0] * torch.exp(-t[1] * I["t"])) ** 2),
)
case(
    "vec-gaussian-nll",
    "(param mu 0.1) (param s 0.8 positive)\n(vsum (+ (log s) (* 0.5 (square (/ (- y mu) s)))))",
    (0.1, 0.8),
    inputs={"y": Y8},
    torch_fn=lambda t, I: torch.sum(torch.log(t[1]) + 0.5 * ((I["y"] - t[0]) / t[1]) ** 2),
)
case(
    "vec-logistic-regression",
    "(param w 0.5) (param c -0.2)\n(define p (sigmoid (+ (* w x) c)))\n(- (vsum (+ (* lab (log p)) (* (- 1 lab) (log (- 1 p))))))",
    (0.5, -0.2),
    inputs={"x": X8, "lab": LABELS8},
    torch_fn=lambda t, I: (
        -torch.sum(
            I["lab"] * torch.log(sigmoid(t[0] * I["x"] + t[1]))
            + (1 - I["lab"]) * torch.log(1 - sigmoid(t[0] * I["x"] + t[1]))
        )
    ),
)
case(
    "vec-dot-norm",
    "(param a 0.7) (+ (dot (* a x) y) (norm (+ x a)))",
    (0.7,),
    inputs={"x": X8, "y": Y8},
    torch_fn=lambda t, I: torch.dot(t[0] * I["x"], I["y"]) + torch.linalg.norm(I["x"] + t[0]),
)
case(
    "vec-from-params",
    "(param a 0.3) (param b -0.8) (param c 1.2) (define v (vec a b c)) (+ (dot v v) (ref v 1) (vsum (* v (vec 1 2 3))))",
    (0.3, -0.8, 1.2),
    torch_fn=lambda t, I: torch.dot(t, t) + t[1] + t[0] + 2 * t[1] + 3 * t[2],
)
case(
    "vec-elementwise-math",
    "(param a 0.3) (vsum (+ (sin (* a x)) (exp (* -0.5 (square (- x a)))) (tanh x)))",
    (0.3,),
    inputs={"x": X8},
    torch_fn=lambda t, I: torch.sum(
        torch.sin(t[0] * I["x"]) + torch.exp(-0.5 * (I["x"] - t[0]) ** 2) + torch.tanh(I["x"])
    ),
)
case(
    "vec-division-by-param-vector",
    "(param a 2.0) (vsum (/ (+ x 3.0) (+ a (square x))))",
    (2.0,),
    inputs={"x": X8},
    torch_fn=lambda t, I: torch.sum((I["x"] + 3.0) / (t[0] + I["x"] ** 2)),
)
case(
    "vec-softplus-sigmoid",
    "(param a 0.6) (vsum (* (softplus (* a x)) (sigmoid (- x a))))",
    (0.6,),
    inputs={"x": X8},
    torch_fn=lambda t, I: torch.sum(softplus(t[0] * I["x"]) * sigmoid(I["x"] - t[0])),
)
case(
    "vec-loop-over-series",
    "(param a 0.1)\n(let loop ((i 0) (s 0.0)) (if (= i (size x)) s (loop (+ i 1) (+ s (square (- (ref x i) a))))))",
    (0.1,),
    inputs={"x": X8},
    torch_fn=lambda t, I: torch.sum((I["x"] - t[0]) ** 2),
)
case(
    "vec-ar1-likelihood",
    "(param phi 0.5) (param s 0.7 positive)\n"
    "(let loop ((t 1) (nll 0.0)) (if (= t (size y)) nll\n  (loop (+ t 1) (+ nll (log s) (* 0.5 (square (/ (- (ref y t) (* phi (ref y (- t 1)))) s)))))))",
    (0.5, 0.7),
    inputs={"y": SERIES20},
    torch_fn=lambda t, I: torch.sum(torch.log(t[1]) + 0.5 * ((I["y"][1:] - t[0] * I["y"][:-1]) / t[1]) ** 2),
)
case(
    "vec-exponential-smoothing",
    "(param alpha 0.4 (between 0 1))\n"
    "(let loop ((t 1) (level (ref y 0)) (sse 0.0)) (if (= t (size y)) sse\n  (loop (+ t 1) (+ (* alpha (ref y t)) (* (- 1 alpha) level)) (+ sse (square (- (ref y t) level))))))",
    (0.4,),
    spread=0.1,
    inputs={"y": SERIES20},
    torch_fn=lambda t, I: _ses(t[0], I["y"]),
)
case(
    "vec-scalar-broadcast-both-sides",
    "(param a 0.5) (vsum (- (* 2.0 (+ a x)) (/ (* x a) 3.0)))",
    (0.5,),
    inputs={"x": X8},
    torch_fn=lambda t, I: torch.sum(2.0 * (t[0] + I["x"]) - I["x"] * t[0] / 3.0),
)
case(
    "vec-outer-trace",
    "(param a 0.5) (trace (outer (* a x3) (+ x3 a)))",
    (0.5,),
    inputs={"x3": V3},
    torch_fn=lambda t, I: torch.trace(torch.outer(t[0] * I["x3"], I["x3"] + t[0])),
)
case(
    "vec-zeros-ones",
    "(param a 0.5) (vsum (+ (* a (ones 4)) (zeros 4) (* a a (ones 4))))",
    (0.5,),
    torch_fn=lambda t, I: 4 * t[0] + 4 * t[0] ** 2,
)
case(
    "vec-size-in-arith",
    "(param a 0.5) (* a (size x) (vsum x))",
    (0.5,),
    inputs={"x": X8},
    torch_fn=lambda t, I: t[0] * 8 * torch.sum(I["x"]),
)
case(
    "vec-lane-input",
    "(param a 0.5) (param b 0.2) (vsum (square (- x (+ a (* b w)))))",
    (0.5, 0.2),
    inputs={"w": X8},
    lane_inputs={"x": np.stack([Y8 * (1 + 0.1 * k) for k in range(LANES)])},
    torch_fn=lambda t, I: torch.sum((I["x"] - (t[0] + t[1] * I["w"])) ** 2),
)
case(
    "vec-lane-input-scalar",
    "(param a 0.5) (* a a s)",
    (0.5,),
    lane_inputs={"s": np.linspace(-1.0, 2.0, LANES)},
    torch_fn=lambda t, I: t[0] * t[0] * I["s"],
)

# ----------------------------------------------------------------------------- matrices
case(
    "mat-det-2x2",
    "(param a 1.2) (param b 0.3) (param c -0.4) (param d 0.9) (det (mat (vec a b) (vec c d)))",
    (1.2, 0.3, -0.4, 0.9),
    torch_fn=lambda t, I: torch.det(torch.stack([t[0:2], t[2:4]])),
)
case(
    "mat-det-3x3-param",
    "(param a 0.5) (det (+ M (* a (eye 3))))",
    (0.5,),
    inputs={"M": M3},
    torch_fn=lambda t, I: torch.det(I["M"] + t[0] * torch.eye(3, dtype=torch.float64)),
)
case(
    "mat-logdet-spd",
    "(param a 0.4) (param b 0.2) (logdet (mat (vec (+ 2 a) b) (vec b (+ 1 (square a)))))",
    (0.4, 0.2),
    torch_fn=lambda t, I: torch.logdet(
        torch.stack([torch.stack([2 + t[0], t[1]]), torch.stack([t[1], 1 + t[0] ** 2])])
    ),
)
case(
    "mat-inv-trace",
    "(param a 0.5) (trace (inv (+ M (* a (eye 3)))))",
    (0.5,),
    inputs={"M": M3},
    torch_fn=lambda t, I: torch.trace(torch.linalg.inv(I["M"] + t[0] * torch.eye(3, dtype=torch.float64))),
)
case(
    "mat-inv-entries",
    "(param a 0.5) (param b 0.1) (define Mi (inv (mat (vec 2 a) (vec b 3)))) (+ (ref Mi 0 1) (* 2 (ref Mi 1 0)) (ref Mi 1 1))",
    (0.5, 0.1),
    torch_fn=lambda t, I: _inv2(t)[0, 1] + 2 * _inv2(t)[1, 0] + _inv2(t)[1, 1],
)
case(
    "mat-solve-dot",
    "(param a 0.5) (dot v3 (solve (+ M (* a (eye 3))) v3))",
    (0.5,),
    inputs={"M": M3, "v3": V3},
    torch_fn=lambda t, I: torch.dot(
        I["v3"], torch.linalg.solve(I["M"] + t[0] * torch.eye(3, dtype=torch.float64), I["v3"])
    ),
)
case(
    "mat-solve-param-rhs",
    "(param a 0.5) (param b -0.3) (vsum (solve M (vec a b 1.0)))",
    (0.5, -0.3),
    inputs={"M": M3},
    torch_fn=lambda t, I: torch.sum(torch.linalg.solve(I["M"], torch.stack([t[0], t[1], tt(1.0)]))),
)
case(
    "mat-cholesky-logdiag",
    "(param a 0.6)\n(define L (cholesky (+ (matmul M (transpose M)) (* a (eye 3)))))\n(+ (log (ref L 0 0)) (log (ref L 1 1)) (log (ref L 2 2)) (ref L 2 0))",
    (0.6,),
    inputs={"M": M3},
    torch_fn=lambda t, I: _chol_case(t[0], I["M"]),
)
case(
    "mat-matmul-trace",
    "(param a 0.5) (param b 0.2) (define A (mat (vec a b) (vec (- b) 1.0))) (trace (matmul A (matmul A A)))",
    (0.5, 0.2),
    torch_fn=lambda t, I: torch.trace(_m2(t) @ _m2(t) @ _m2(t)),
)
case(
    "mat-transpose-ref",
    "(param a 0.5) (param b 0.2) (define A (mat (vec a b 1.0) (vec 2.0 (* a b) 3.0))) (+ (ref (transpose A) 1 0) (* 3 (ref (transpose A) 0 1)) (ref (transpose A) 1 1))",
    (0.5, 0.2),
    torch_fn=lambda t, I: t[1] + 3 * 2.0 + t[0] * t[1],
)
case(
    "mat-matvec-norm",
    "(param a 0.5) (norm (matvec (+ M a) v3))",
    (0.5,),
    inputs={"M": M3, "v3": V3},
    torch_fn=lambda t, I: torch.linalg.norm((I["M"] + t[0]) @ I["v3"]),
)
case(
    "mat-quadratic-form",
    "(param s 0.7 positive) (define S (+ (* s (eye 3)) (matmul M (transpose M)))) (dot v3 (matvec (inv S) v3))",
    (0.7,),
    inputs={"M": M3, "v3": V3},
    torch_fn=lambda t, I: (
        I["v3"] @ torch.linalg.inv(t[0] * torch.eye(3, dtype=torch.float64) + I["M"] @ I["M"].T) @ I["v3"]
    ),
)
case(
    "mat-row-ref-and-rows-cols",
    "(param a 0.5) (* (dot (ref M 1) (ref M 2)) a (rows M) (cols M) a)",
    (0.5,),
    inputs={"M": M3},
    torch_fn=lambda t, I: torch.dot(I["M"][1], I["M"][2]) * t[0] * 9 * t[0],
)
case(
    "mat-elementwise-scalar",
    "(param a 0.5) (trace (matmul (* a M) (- M (/ a 2.0))))",
    (0.5,),
    inputs={"M": M3},
    torch_fn=lambda t, I: torch.trace((t[0] * I["M"]) @ (I["M"] - t[0] / 2.0)),
)
case(
    "mat-gaussian-logpdf",
    "(param r 0.3) (param s 1.2)\n(define S (mat (vec s (* r s)) (vec (* r s) s)))\n(+ (logdet S) (dot v2 (solve S v2)))",
    (0.3, 1.2),
    inputs={"v2": np.array([0.4, -0.9])},
    torch_fn=lambda t, I: _gauss2(t, I["v2"]),
)
case(
    "mat-kalman-benchmark",
    """
(param q 0.3 positive) (param r 0.3 positive)
(define I (eye 2))
(let loop ((t 0) (x (zeros 2)) (P I) (nll 0.0))
  (if (= t (rows ys)) nll
      (let* ((Pp (+ P (* q I))) (S (+ Pp (* r I))) (e (- (ref ys t) x)) (Si (inv S)) (K (matmul Pp Si)))
        (loop (+ t 1) (+ x (matvec K e)) (matmul (- I K) Pp) (+ nll (logdet S) (dot e (matvec Si e)))))))
""",
    (0.3, 0.3),
    inputs={"ys": YS},
    spread=0.1,
    torch_fn=lambda t, I: kalman_torch(t[0], t[1], I["ys"]),
)
case(
    "mat-kalman-per-lane-series",
    """
(param q 0.3 positive) (param r 0.3 positive)
(define I (eye 2))
(let loop ((t 0) (x (zeros 2)) (P I) (nll 0.0))
  (if (= t (rows ys)) nll
      (let* ((Pp (+ P (* q I))) (S (+ Pp (* r I))) (e (- (ref ys t) x)) (Si (inv S)) (K (matmul Pp Si)))
        (loop (+ t 1) (+ x (matvec K e)) (matmul (- I K) Pp) (+ nll (logdet S) (dot e (matvec Si e)))))))
""",
    (0.3, 0.3),
    spread=0.1,
    lane_inputs={"ys": np.stack([YS * (1.0 + 0.05 * k) + 0.01 * k for k in range(LANES)])},
    torch_fn=lambda t, I: kalman_torch(t[0], t[1], I["ys"]),
)
case(
    "mat-det-needs-pivoting",
    "(param a 0.3) (param b -0.2) (det (+ P (* a (outer (vec 1 0 0) (vec 0 0 1))) (* b (eye 3))))",
    (0.3, -0.2),
    inputs={"P": PIV3},
    spread=0.1,
    torch_fn=lambda t, I: torch.det(
        I["P"] + t[0] * torch.outer(tt([1.0, 0, 0]), tt([0, 0, 1.0])) + t[1] * torch.eye(3, dtype=torch.float64)
    ),
)
case(
    "mat-inv-needs-pivoting",
    "(param a 0.3) (vsum (* (inv (+ P (* a (eye 3)))) P))",
    (0.3,),
    inputs={"P": PIV3},
    spread=0.1,
    torch_fn=lambda t, I: torch.sum(torch.linalg.inv(I["P"] + t[0] * torch.eye(3, dtype=torch.float64)) * I["P"]),
)
case(
    "mat-logdet-nonsymmetric",
    "(param a 0.3) (logdet (+ P (* a (ones 3 3))))",
    (0.3,),
    inputs={"P": PIV3},
    spread=0.1,
    torch_fn=lambda t, I: torch.logdet(I["P"] + t[0] * torch.ones(3, 3, dtype=torch.float64)),
)
case(
    "mat-solve-matrix-rhs",
    "(param a 0.3) (trace (solve (+ P (* a (eye 3))) (+ (eye 3) (* a (ones 3 3)))))",
    (0.3,),
    inputs={"P": PIV3},
    spread=0.1,
    torch_fn=lambda t, I: torch.trace(
        torch.linalg.solve(
            I["P"] + t[0] * torch.eye(3, dtype=torch.float64),
            torch.eye(3, dtype=torch.float64) + t[0] * torch.ones(3, 3, dtype=torch.float64),
        )
    ),
)
case(
    "mat-elementwise-max-expt-sigmoid",
    "(param a 0.25) (vsum (+ (max (* a M) 0.3) (expt (+ M 2.0) a) (sigmoid (* a M))))",
    (0.25,),
    inputs={"M": M3},
    spread=0.04,  # max kinks at a = 0.15, 0.167, 0.2, 0.75: outside [0.21, 0.29]
    torch_fn=lambda t, I: torch.sum(
        torch.clamp(t[0] * I["M"], min=0.3) + (I["M"] + 2.0) ** t[0] + torch.sigmoid(t[0] * I["M"])
    ),
)
case(
    "mat-norm-frobenius",
    "(param a 0.3) (norm (+ M (* a (eye 3))))",
    (0.3,),
    inputs={"M": M3},
    torch_fn=lambda t, I: torch.linalg.norm(I["M"] + t[0] * torch.eye(3, dtype=torch.float64)),
)
case(
    "mat-ones-zeros-eye",
    "(param a 0.5) (det (+ (eye 2) (* a (ones 2 2)) (zeros 2 2)))",
    (0.5,),
    torch_fn=lambda t, I: torch.det(torch.eye(2, dtype=torch.float64) + t[0] * torch.ones(2, 2, dtype=torch.float64)),
)
case(
    "mat-from-lists",
    "(param a 0.5) (param b 0.25) (det (mat (list a 1.0) (list b 2.0)))",
    (0.5, 0.25),
    torch_fn=lambda t, I: 2 * t[0] - t[1],
)
case(
    "mat-power-loop",
    "(param a 0.3)\n(define A (mat (vec 0.9 a) (vec (- a) 0.8)))\n(let loop ((k 0) (P (eye 2))) (if (= k 6) (trace P) (loop (+ k 1) (matmul P A))))",
    (0.3,),
    torch_fn=lambda t, I: torch.trace(
        torch.linalg.matrix_power(torch.stack([torch.stack([tt(0.9), t[0]]), torch.stack([-t[0], tt(0.8)])]), 6)
    ),
)

# ----------------------------------------------------------------------------- divergent control flow across lanes
case(
    "diverge-if-square-or-neg",
    "(param a 0.5) (if (> a 0) (* a a) (- a))",
    (0.5,),
    lanes=mixed(SIGNS),
    torch_fn=lambda t, I: torch.where(t[0] > 0, t[0] * t[0], -t[0]),
)
case(
    "diverge-cond-three-regions",
    "(param a 0.5) (param b 0.7)\n(cond ((< a -1) (* b a a)) ((< a 1) (sin (* a b))) (else (exp (* b (- a 1)))))",
    (0.5, 0.7),
    lanes=mixed(SIGNS, 0.7),
    torch_fn=lambda t, I: _three(t[0], t[1]),
)
case(
    "diverge-abs-relu",
    "(param a 0.5) (param b 0.3) (+ (abs a) (max a 0) (* b (min a 0.0)))",
    (0.5, 0.3),
    lanes=mixed(SIGNS, 0.3),
    torch_fn=lambda t, I: torch.abs(t[0]) + torch.clamp(t[0], min=0) + t[1] * torch.clamp(t[0], max=0),
)
case(
    "diverge-loop-length",
    "(param a 0.5)\n(let loop ((i 0) (s 1.0)) (if (= i (if (> a 0) 3 6)) s (loop (+ i 1) (* s (+ 1 (* a 0.5))))))",
    (0.5,),
    lanes=mixed(SIGNS),
    torch_fn=lambda t, I: (1 + 0.5 * t[0]) ** (3 if t[0] > 0 else 6),
)
case(
    "diverge-data-dependent-iterations",
    "(param a 0.5)\n(let loop ((x (+ 1.1 (abs a))) (n 0)) (if (> x 10) (+ n (* 0.01 x)) (loop (* x 1.7) (+ n 1))))",
    (0.5,),
    lanes=mixed(SIGNS),
    torch_fn=lambda t, I: _iter17(t[0]),
)
case(
    "diverge-recursion-depth",
    "(param a 0.5)\n(define (f x d) (if (or (> x 3) (> d 30)) (* x d) (f (+ x (* x x) 0.1) (+ d 1))))\n(f (* 0.2 a) 0)",
    (0.5,),
    lanes=mixed(
        np.array([-2.2, -1.6, -1.2, -0.8, -0.55, -0.35, -0.2, -0.12, 0.13, 0.22, 0.37, 0.6, 0.85, 1.35, 1.8, 2.4])
    ),
    torch_fn=lambda t, I: _fdiv(0.2 * t[0]),
)
case(
    "diverge-when-unless",
    "(param a 0.5)\n(define (g x) (+ (* 2 x) (cond ((> x 0) (when #t (* x x))) (else (unless #f (exp x))))))\n(g a)",
    (0.5,),
    lanes=mixed(SIGNS),
    torch_fn=lambda t, I: 2 * t[0] + (t[0] ** 2 if t[0] > 0 else torch.exp(t[0])),
)
case(
    "diverge-and-or",
    "(param a 0.5) (param b 0.4)\n(if (or (and (> a 0) (< a 1)) (< a -1.5)) (* a b) (+ a (* b b)))",
    (0.5, 0.4),
    lanes=mixed(SIGNS, 0.4),
    torch_fn=lambda t, I: t[0] * t[1] if ((0 < t[0] < 1) or t[0] < -1.5) else t[0] + t[1] ** 2,
)
case(
    "diverge-case-on-branch-index",
    "(param a 0.5)\n(define k (cond ((< a -1) 0) ((< a 0) 1) ((< a 1) 2) (else 3)))\n(case k ((0) (* a a a)) ((1) (sin a)) ((2) (exp a)) (else (sqrt a)))",
    (0.5,),
    lanes=mixed(SIGNS),
    torch_fn=lambda t, I: _case4(t[0]),
)
case(
    "diverge-lists-different-lengths",
    "(param a 0.5) (param b 0.8)\n(apply + (map (lambda (v) (* v v)) (if (> a 0) (list a b) (list b a b a))))",
    (0.5, 0.8),
    lanes=mixed(SIGNS, 0.8),
    torch_fn=lambda t, I: (t[0] ** 2 + t[1] ** 2) * (1 if t[0] > 0 else 2),
)
case(
    "diverge-closure-choice",
    "(param a 0.5)\n(define f (if (> a 0) (lambda (v) (* v (exp v))) (lambda (v) (- (square v) v))))\n(f (* 2 a))",
    (0.5,),
    lanes=mixed(SIGNS),
    torch_fn=lambda t, I: 2 * t[0] * torch.exp(2 * t[0]) if t[0] > 0 else (2 * t[0]) ** 2 - 2 * t[0],
)
case(
    "diverge-matrix-branch",
    "(param a 0.5)\n(define A (mat (vec 2.0 a) (vec a 1.5)))\n(if (> a 0) (logdet A) (trace (inv A)))",
    (0.5,),
    lanes=mixed(SIGNS * 0.5),
    torch_fn=lambda t, I: _matbranch(t[0]),
)
case(
    "diverge-recursive-fn-sign",
    "(param a 0.5)\n(define (pw x n) (if (= n 0) 1.0 (* x (pw x (- n 1)))))\n(if (negative? a) (pw a 3) (pw a 4))",
    (0.5,),
    lanes=mixed(SIGNS),
    torch_fn=lambda t, I: t[0] ** 3 if t[0] < 0 else t[0] ** 4,
)
case(
    "diverge-vector-input-branch",
    "(param a 0.5)\n(if (> a 0) (vsum (square (- x a))) (vsum (* a x)))",
    (0.5,),
    inputs={"x": X8},
    lanes=mixed(SIGNS),
    torch_fn=lambda t, I: torch.sum((I["x"] - t[0]) ** 2) if t[0] > 0 else torch.sum(t[0] * I["x"]),
)
case(
    "diverge-nested-in-loop",
    "(param a 0.5)\n(let loop ((i 0) (s 0.0)) (if (= i 8) s (loop (+ i 1) (+ s (if (> (* a (- i 3.5)) 0) (* a i) (- (* a a)))))))",
    (0.5,),
    lanes=mixed(SIGNS),
    torch_fn=lambda t, I: _nested(t[0]),
)
case(
    "diverge-two-params-quadrants",
    "(param a 0.5) (param b -0.5)\n(cond ((and (> a 0) (> b 0)) (* a b)) ((> a 0) (- a b)) ((> b 0) (+ (* a a) b)) (else (* a b b)))",
    (0.5, -0.5),
    lanes=np.stack([SIGNS, -SIGNS[::-1] * 0.9], axis=1),
    torch_fn=lambda t, I: _quad(t[0], t[1]),
)
case(
    "diverge-early-exit-in-do",
    "(param a 0.5)\n(do ((i 0 (+ i 1)) (s 0.0 (+ s (* a i)))) ((or (= i 10) (> s 3.0)) (+ s i)))",
    (0.5,),
    lanes=mixed(
        np.array([-2.3, -1.7, -1.31, -0.8, -0.55, -0.35, -0.2, -0.12, 0.13, 0.22, 0.37, 0.61, 0.87, 1.35, 1.8, 2.4])
    ),
    torch_fn=lambda t, I: _doexit(t[0]),
)
case(
    "diverge-between-param",
    "(param p 0.3 (between 0 1)) (if (< p 0.5) (* p p) (sqrt p))",
    (0.3,),
    lanes=mixed(np.linspace(0.05, 0.95, 16)),
    torch_fn=lambda t, I: t[0] ** 2 if t[0] < 0.5 else torch.sqrt(t[0]),
)
case(
    "diverge-symbol-dispatch",
    "(param a 0.5)\n(define mode (if (> a 0) 'grow 'decay))\n(case mode ((grow) (exp a)) ((decay) (exp (- (* 2 a)))) (else 0.0))",
    (0.5,),
    lanes=mixed(SIGNS),
    torch_fn=lambda t, I: torch.exp(t[0]) if t[0] > 0 else torch.exp(-2 * t[0]),
)
case(
    "diverge-loop-count-from-lane-input",
    "(param a 0.5)\n(let loop ((i 0) (s 0.0)) (if (>= i n) s (loop (+ i 1) (+ s (* a a i)))))",
    (0.5,),
    lane_inputs={"n": np.arange(LANES, dtype=np.float64) % 7 + 0.5},
    torch_fn=lambda t, I: t[0] * t[0] * sum(range(int(np.ceil(float(I["n"]))))),
)
case(
    "diverge-eq-on-lists",
    "(param a 0.5)\n(define tag (if (> a 0) (list 1 2) (list 1 3)))\n(if (equal? tag '(1 2)) (* 3 a) (* a a))",
    (0.5,),
    lanes=mixed(SIGNS),
    torch_fn=lambda t, I: 3 * t[0] if t[0] > 0 else t[0] ** 2,
)


# ----------------------------------------------------------------------------- torch helpers
def _times(n, f, x):
    for _ in range(n):
        x = f(x)
    return x


def _fib(n, a, b):
    if n < 2:
        return a if n == 0 else b
    return 0.5 * _fib(n - 1, a, b) + b * _fib(n - 2, a, b)


def _newton(x, k):
    g = tt(1.0)
    for _ in range(k):
        g = 0.5 * (g + x / g)
    return g


def _cf(a, k):
    return a if k == 0 else a + 1.0 / _cf(a, k - 1)


def _evod(n, x, a):
    even = True
    while n > 0:
        x = a * x if even else x + a
        even, n = not even, n - 1
    return x


def _rot(x, y, n):
    for _ in range(n):
        x, y = x + 0.1 * y, y - 0.2 * x
    return x + y


def _prod(xs):
    p = tt(1.0)
    for x in xs:
        p = p * x
    return p


def _fdepth(n, a):
    return tt(1.0) if n <= 0 else 1.0 + a * _fdepth(n - 2, a)


def _ses(alpha, y):
    level, sse = y[0], tt(0.0)
    for t in range(1, y.shape[0]):
        sse = sse + (y[t] - level) ** 2
        level = alpha * y[t] + (1 - alpha) * level
    return sse


def _inv2(t):
    return torch.linalg.inv(torch.stack([torch.stack([tt(2.0), t[0]]), torch.stack([t[1], tt(3.0)])]))


def _m2(t):
    return torch.stack([torch.stack([t[0], t[1]]), torch.stack([-t[1], tt(1.0)])])


def _chol_case(a, M):
    L = torch.linalg.cholesky(M @ M.T + a * torch.eye(3, dtype=torch.float64))
    return torch.log(L[0, 0]) + torch.log(L[1, 1]) + torch.log(L[2, 2]) + L[2, 0]


def _gauss2(t, v):
    r, s = t[0], t[1]
    S = torch.stack([torch.stack([s, r * s]), torch.stack([r * s, s])])
    return torch.logdet(S) + v @ torch.linalg.solve(S, v)


def _three(a, b):
    if a < -1:
        return b * a * a
    if a < 1:
        return torch.sin(a * b)
    return torch.exp(b * (a - 1))


def _iter17(a):
    x, n = 1.1 + torch.abs(a), 0
    while not x > 10:
        x, n = x * 1.7, n + 1
    return n + 0.01 * x


def _fdiv(x):
    d = 0
    while not (x > 3 or d > 30):
        x, d = x + x * x + 0.1, d + 1
    return x * d


def _case4(a):
    if a < -1:
        return a**3
    if a < 0:
        return torch.sin(a)
    if a < 1:
        return torch.exp(a)
    return torch.sqrt(a)


def _matbranch(a):
    A = torch.stack([torch.stack([tt(2.0), a]), torch.stack([a, tt(1.5)])])
    return torch.logdet(A) if a > 0 else torch.trace(torch.linalg.inv(A))


def _nested(a):
    s = tt(0.0)
    for i in range(8):
        s = s + (a * i if a * (i - 3.5) > 0 else -(a * a))
    return s


def _quad(a, b):
    if a > 0 and b > 0:
        return a * b
    if a > 0:
        return a - b
    if b > 0:
        return a * a + b
    return a * b * b


def _doexit(a):
    i, s = 0, tt(0.0)
    while not (i == 10 or s > 3.0):
        s, i = s + a * i, i + 1
    return s + i
