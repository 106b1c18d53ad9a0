"""Random differentiable programs, each rendered twice: as NDVM source and as a torch function.

An expression tree over two parameters (a, b), a shared input vector x and local names is built
from smooth operations (arithmetic, sin/cos/tanh/exp/log/sqrt on safe domains, sigmoid, softplus,
expt, square), lambda applications, let bindings, fixed-length named-let loops, list map/apply,
vector operations (vsum, dot, elementwise math over x) and branches on the sign of a parameter
expression (so lanes diverge). The torch rendering follows the same tree, branch by branch per lane,
so NDVM's value and gradient must equal torch autograd's.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

import torch

UNARY = {
    "sin": torch.sin,
    "cos": torch.cos,
    "tanh": torch.tanh,
    "sigmoid": torch.sigmoid,
    "softplus": lambda z: torch.logaddexp(z, torch.zeros_like(z)),
    "square": lambda z: z * z,
}


@dataclass
class Model:
    source: str
    torch_fn: Callable  # (theta [2] tensor, x tensor) -> scalar tensor


class ModelGenerator:
    def __init__(self, seed: int):
        self.rng = random.Random(seed)
        self.locals: list[str] = []
        self.counter = 0

    def fresh(self) -> str:
        self.counter += 1
        return f"v{self.counter}"

    # Each generator returns (scheme source, torch builder env -> tensor). env maps names to tensors.
    def scalar(self, depth: int):
        r = self.rng
        if depth <= 0 or r.random() < 0.15:
            choice = r.randrange(4 + (1 if self.locals else 0))
            if choice == 0:
                return "a", lambda env: env["a"]
            if choice == 1:
                return "b", lambda env: env["b"]
            if choice == 2:
                c = round(r.uniform(-2, 2), 2)
                return repr(c), lambda env, c=c: torch.tensor(c, dtype=torch.float64)
            if choice == 3:
                return "(vsum x)", lambda env: torch.sum(env["x"])
            name = r.choice(self.locals)
            return name, lambda env, name=name: env[name]
        d = depth - 1
        choice = r.randrange(16)
        if choice <= 2:
            op = "+-*"[choice]
            (s1, f1), (s2, f2) = self.scalar(d), self.scalar(d)
            fn = {"+": lambda p, q: p + q, "-": lambda p, q: p - q, "*": lambda p, q: p * q}[op]
            return f"({op} {s1} {s2})", lambda env: fn(f1(env), f2(env))
        if choice == 3:
            (s1, f1), (s2, f2) = self.scalar(d), self.scalar(d)
            return f"(/ {s1} (+ 1.5 (square {s2})))", lambda env: f1(env) / (1.5 + f2(env) ** 2)
        if choice == 4:
            name = r.choice(list(UNARY))
            s1, f1 = self.scalar(d)
            return f"({name} {s1})", lambda env: UNARY[name](f1(env))
        if choice == 5:
            s1, f1 = self.scalar(d)
            return f"(exp (sin {s1}))", lambda env: torch.exp(torch.sin(f1(env)))
        if choice == 6:
            s1, f1 = self.scalar(d)
            return f"(log (+ 1.0 (square {s1})))", lambda env: torch.log(1.0 + f1(env) ** 2)
        if choice == 7:
            s1, f1 = self.scalar(d)
            return f"(sqrt (+ 0.25 (square {s1})))", lambda env: torch.sqrt(0.25 + f1(env) ** 2)
        if choice == 8:
            k = r.randint(2, 4)
            s1, f1 = self.scalar(d)
            return f"(expt {s1} {k})", lambda env: f1(env) ** k
        if choice == 9:  # let binding
            name = self.fresh()
            s1, f1 = self.scalar(d)
            self.locals.append(name)
            s2, f2 = self.scalar(d)
            self.locals.pop()
            return f"(let (({name} {s1})) {s2})", lambda env: f2({**env, name: f1(env)})
        if choice == 10:  # lambda application
            name = self.fresh()
            self.locals.append(name)
            s_body, f_body = self.scalar(d)
            self.locals.pop()
            s_arg, f_arg = self.scalar(d)
            return f"((lambda ({name}) {s_body}) {s_arg})", lambda env: f_body({**env, name: f_arg(env)})
        if choice == 11:  # branch on a sign: lanes diverge
            (sc, fc), (s1, f1), (s2, f2) = self.scalar(d), self.scalar(d), self.scalar(d)
            return f"(if (> {sc} 0) {s1} {s2})", lambda env: f1(env) if fc(env) > 0 else f2(env)
        if choice == 12:  # fixed-length loop
            n = r.randint(1, 4)
            acc, i = self.fresh(), self.fresh()
            s0, f0 = self.scalar(d)
            self.locals.append(acc)
            s_step, f_step = self.scalar(d)
            self.locals.pop()

            def run_loop(env, f0=f0, f_step=f_step, n=n, acc=acc):
                value = f0(env)
                for _ in range(n):
                    value = 0.5 * value + 0.5 * torch.tanh(f_step({**env, acc: value}))
                return value

            return (
                f"(let loop (({i} 0) ({acc} {s0})) (if (= {i} {n}) {acc} "
                f"(loop (+ {i} 1) (+ (* 0.5 {acc}) (* 0.5 (tanh {s_step}))))))"
            ), run_loop
        if choice == 13:  # list map / apply
            (s1, f1), (s2, f2) = self.scalar(d), self.scalar(d)
            return (
                f"(apply + (map (lambda (t) (* t t)) (list {s1} {s2} 0.5)))",
                lambda env: f1(env) ** 2 + f2(env) ** 2 + 0.25,
            )
        if choice == 14:  # vector expression reduced to a scalar
            (s1, f1) = self.scalar(d)
            return (
                f"(/ (vsum (sin (+ (* {s1} x) b))) (size x))",
                lambda env: torch.sum(torch.sin(f1(env) * env["x"] + env["b"])) / env["x"].shape[0],
            )
        (s1, f1), (s2, f2) = self.scalar(d), self.scalar(d)
        return (f"(dot (vec {s1} {s2}) (vec 0.5 -1.5))", lambda env: 0.5 * f1(env) - 1.5 * f2(env))

    def model(self, depth: int = 4) -> Model:
        self.locals, self.counter = [], 0
        source, fn = self.scalar(depth)
        program = f"(param a 0.3) (param b -0.4)\n{source}\n"

        def torch_fn(theta, x, fn=fn):
            return fn({"a": theta[0], "b": theta[1], "x": x}) * torch.ones((), dtype=torch.float64)

        return Model(program, torch_fn)


def generate(seed: int, count: int) -> list[Model]:
    gen = ModelGenerator(seed)
    return [gen.model() for _ in range(count)]
