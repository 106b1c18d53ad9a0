"""A small interpreter of the candidate-corpus language over torch tensors (float64), so that every
program of the shared corpora (ndvm_corpora) has a torch twin with exact autograd gradients.

It covers what the corpora use: numbers, parameters and the input x, `+ - * /` (variadic),
`exp log sqrt sin cos abs tanh square`, `let`, `let*`, `if`, `= < > <= >=`, and the bounded loop
`(loop ((var init) ...) body)` with `(recur expr ...)` in tail position.
"""

from __future__ import annotations

import re

import torch

_TOKEN = re.compile(r"\s*(\(|\)|[^\s()]+)")


def read(source: str):
    tokens = _TOKEN.findall(source)
    pos = 0

    def parse():
        nonlocal pos
        tok = tokens[pos]
        pos += 1
        if tok == "(":
            items = []
            while tokens[pos] != ")":
                items.append(parse())
            pos += 1
            return items
        try:
            return int(tok)
        except ValueError:
            pass
        try:
            return float(tok)
        except ValueError:
            return tok

    datum = parse()
    if pos != len(tokens):
        raise ValueError("trailing tokens")
    return datum


class _Recur:
    def __init__(self, values):
        self.values = values


_UNARY = {
    "exp": torch.exp,
    "log": torch.log,
    "sqrt": torch.sqrt,
    "sin": torch.sin,
    "cos": torch.cos,
    "abs": torch.abs,
    "tanh": torch.tanh,
    "square": lambda v: v * v,
}
_COMPARE = {
    "=": lambda p, q: p == q,
    "<": lambda p, q: p < q,
    ">": lambda p, q: p > q,
    "<=": lambda p, q: p <= q,
    ">=": lambda p, q: p >= q,
}


def _truth(value) -> bool:
    if isinstance(value, torch.Tensor):
        if value.numel() != 1:
            raise ValueError("a comparison of vectors has no single truth value")
        return bool(value)
    return bool(value)


def evaluate(expr, env: dict):
    if isinstance(expr, (int, float)):
        return expr
    if isinstance(expr, str):
        return env[expr]
    head, args = expr[0], expr[1:]
    if isinstance(head, (int, float)):
        raise TypeError(f"attempt to call the number {head}, which is not a procedure")
    if head in ("let", "let*"):
        local = dict(env)
        for name, init in args[0]:
            local[name] = evaluate(init, local if head == "let*" else env)
        return evaluate(args[1], local)
    if head == "if":
        branch = args[1] if _truth(evaluate(args[0], env)) else args[2]
        return evaluate(branch, env)
    if head == "loop":
        names = [b[0] for b in args[0]]
        values = [evaluate(b[1], env) for b in args[0]]
        while True:
            result = evaluate(args[1], {**env, **dict(zip(names, values))})
            if not isinstance(result, _Recur):
                return result
            values = result.values
    if head == "recur":
        return _Recur([evaluate(a, env) for a in args])
    values = [evaluate(a, env) for a in args]
    if head in _UNARY:
        v = values[0]
        return _UNARY[head](v if isinstance(v, torch.Tensor) else torch.tensor(float(v), dtype=torch.float64))
    if head in _COMPARE:
        return _COMPARE[head](values[0], values[1])
    if head == "+":
        out = 0
        for v in values:
            out = out + v
        return out
    if head == "*":
        out = 1
        for v in values:
            out = out * v
        return out
    if head == "-":
        if len(values) == 1:
            return -values[0]
        out = values[0]
        for v in values[1:]:
            out = out - v
        return out
    if head == "/":
        if len(values) == 1:
            return 1.0 / values[0]
        out = values[0]
        for v in values[1:]:
            out = out / v
        return out
    raise ValueError(f"operator {head!r} is not in the corpus language")
