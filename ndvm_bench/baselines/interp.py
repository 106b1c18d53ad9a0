"""The tree-walking evaluator shared by the Python baselines.

Both baselines (``tagged`` and ``eager``) walk the program with this same evaluator; they differ
only in the *representation* of run-time values, supplied as a :class:`Representation`. So the
ratio of their times measures the representation alone (boxing every value into a tagged tensor
versus keeping structure as Python objects), not two different interpreters.

The evaluator is a plain environment-passing interpreter over the reader's nested lists:
environments belong to the representation (Python dictionaries for ``eager``, association lists
in the tagged heap for ``tagged``, as in a meta-circular evaluator), special forms are recognised by name (unless a
local binding shadows the name), applications in tail position return a :class:`TailCall` that
:meth:`Evaluator.apply` runs in a trampoline loop, so loops of any length use constant Python
stack.

Supported subset (what the benchmark programs and the co-search corpus use): ``param``,
``define`` (top level and internal, ``(define (f . args) ...)``), ``lambda`` (fixed and rest
arguments), ``let``, named ``let``, ``let*``, ``letrec``, ``letrec*``, ``loop``/``recur``, ``if``,
``cond`` (with ``else``), ``and``, ``or``, ``when``, ``unless``, ``begin``, ``quote``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import torch

from ndvm.errors import CheckError, EvalError, LimitError
from ndvm_bench.baselines.reader import Symbol, read_all


@dataclass(frozen=True)
class BaselineParam:
    """A ``(param NAME INIT [constraint])`` declaration as the baselines read it."""

    name: str
    init: float
    constraint: Any = None


class Closure:
    """A user procedure: parameter names, an optional rest name, a body, the defining environment."""

    __slots__ = ("params", "rest", "body", "env", "name")

    def __init__(self, params: list[str], rest: str | None, body: list, env: Env, name: str = "lambda"):
        self.params, self.rest, self.body, self.env, self.name = params, rest, body, env, name


class TailCall:
    """A call in tail position, returned to the trampoline in :meth:`Evaluator.apply`."""

    __slots__ = ("fn", "args")

    def __init__(self, fn, args: list):
        self.fn, self.args = fn, args


class Env:
    """One lexical frame: a dictionary of bindings and the enclosing frame."""

    __slots__ = ("vars", "parent")

    def __init__(self, bindings: dict, parent: Env | None):
        self.vars, self.parent = bindings, parent

    def find(self, name: str) -> Env | None:
        env = self
        while env is not None:
            if name in env.vars:
                return env
            env = env.parent
        return None


class Representation(Protocol):
    """How one baseline stores run-time values. ``B`` is the number of lanes."""

    B: int

    def number(self, x: int | float): ...
    def boolean(self, b: bool): ...
    def quote(self, datum): ...
    def make_list(self, values: list): ...
    def make_closure(self, closure: Closure): ...
    def truthy(self, v) -> bool: ...
    def callable(self, v) -> tuple[str, Any]: ...
    def extend(self, env, names: list[str], values: list): ...  # a new frame binding names to values
    def define(self, env, name: str, value) -> None: ...  # add a binding to an existing frame
    def lookup(self, env, name: str): ...  # the bound value (primitives included), or None when unbound
    def bound(self, env, name: str) -> bool: ...  # bound by the program? (then it shadows a special form)
    def param(self, column: torch.Tensor): ...
    def input(self, value): ...
    def output(self, v) -> torch.Tensor: ...


SPECIAL_FORMS = frozenset(
    "quote if define lambda let let* letrec letrec* loop cond and or when unless begin param".split()
)


def split_toplevel(forms: list) -> tuple[list[BaselineParam], list]:
    """Separate the ``(param ...)`` declarations from the rest of a program."""
    params: list[BaselineParam] = []
    body: list = []
    for form in forms:
        if isinstance(form, list) and form and form[0] == "param":
            if len(form) not in (3, 4) or not isinstance(form[1], Symbol) or not isinstance(form[2], (int, float)):
                raise CheckError(f"bad param declaration {form!r}: expected (param NAME INIT [constraint])")
            constraint = None
            if len(form) == 4:
                c = form[3]
                if c == "positive":
                    constraint = "positive"
                elif isinstance(c, list) and len(c) == 3 and c[0] == "between":
                    constraint = ("between", float(c[1]), float(c[2]))
                else:
                    raise CheckError(f"unknown constraint {c!r} in param {form[1]}")
            params.append(BaselineParam(str(form[1]), float(form[2]), constraint))
        else:
            body.append(form)
    if not body:
        raise CheckError("the program has no expression to evaluate")
    return params, body


class Evaluator:
    """Runs one program's source under a given representation."""

    def __init__(self, source: str, step_limit: int = 50_000_000):
        self.source = source
        self.params, self.body = split_toplevel(read_all(source))
        self.param_names = [p.name for p in self.params]
        self.step_limit = step_limit
        self.steps = 0

    # -- entry point -------------------------------------------------------------------------
    def run(self, rep, param_columns: list[torch.Tensor], inputs: dict):
        """Evaluate the program once for all lanes; returns a value of ``rep``."""
        self.rep = rep
        self.steps = 0
        names, values = [], []
        for p, col in zip(self.params, param_columns):
            names.append(p.name)
            values.append(rep.param(col))
        for name, value in (inputs or {}).items():
            names.append(name)
            values.append(rep.input(value))
        env = rep.extend(None, names, values)
        result = None
        for form in self.body:
            result = self.eval(form, env, False)
        return result

    # -- the walk ----------------------------------------------------------------------------
    def eval(self, x, env: Env, tail: bool):
        self.steps += 1
        if self.steps > self.step_limit:
            raise LimitError(f"step budget of {self.step_limit} exceeded")
        if isinstance(x, Symbol):
            return self.lookup(x, env)
        if isinstance(x, bool):
            return self.rep.boolean(x)
        if isinstance(x, (int, float)):
            return self.rep.number(x)
        if not isinstance(x, list) or not x:
            raise CheckError(f"cannot evaluate {x!r}")
        head = x[0]
        if isinstance(head, Symbol) and head in SPECIAL_FORMS and not self.rep.bound(env, head):
            return getattr(self, _FORM_METHODS[head])(x, env, tail)
        fn = self.eval(head, env, False)
        args = [self.eval(a, env, False) for a in x[1:]]
        if tail:
            return TailCall(fn, args)
        return self.apply(fn, args)

    def lookup(self, name: str, env):
        value = self.rep.lookup(env, name)
        if value is None:
            raise EvalError(f"unbound name '{name}'")
        return value

    def apply(self, fn, args: list):
        """Call ``fn``; tail calls made by closures are run here, in a loop (the trampoline)."""
        while True:
            kind, obj = self.rep.callable(fn)
            if kind == "primitive":
                return obj(args)
            env = self.bind(obj, args)
            result = self.eval_body(obj.body, env, True)
            if isinstance(result, TailCall):
                fn, args = result.fn, result.args
                continue
            return result

    def bind(self, c: Closure, args: list) -> Env:
        n = len(c.params)
        if len(args) < n or (c.rest is None and len(args) != n):
            raise EvalError(f"{c.name}: expected {n}{'+' if c.rest else ''} arguments, got {len(args)}")
        names, values = list(c.params), list(args[:n])
        if c.rest is not None:
            names.append(c.rest)
            values.append(self.rep.make_list(args[n:]))
        return self.rep.extend(c.env, names, values)

    def eval_body(self, body: list, env: Env, tail: bool):
        if not body:
            raise CheckError("empty body")
        for form in body[:-1]:
            self.eval(form, env, False)
        return self.eval(body[-1], env, tail)

    # -- special forms -----------------------------------------------------------------------
    def form_quote(self, x, env, tail):
        return self.rep.quote(x[1])

    def form_if(self, x, env, tail):
        if len(x) not in (3, 4):
            raise CheckError("if: expected (if test then [else])")
        if self.rep.truthy(self.eval(x[1], env, False)):
            return self.eval(x[2], env, tail)
        if len(x) == 4:
            return self.eval(x[3], env, tail)
        return self.rep.boolean(False)

    def form_define(self, x, env, tail):
        target = x[1]
        if isinstance(target, list):
            name = target[0]
            self.rep.define(env, str(name), self.rep.make_closure(self.make_lambda(target[1:], x[2:], env, str(name))))
        else:
            self.rep.define(env, str(target), self.eval(x[2], env, False))
        return self.rep.boolean(False)

    def make_lambda(self, formals, body, env, name="lambda") -> Closure:
        if isinstance(formals, Symbol):
            return Closure([], str(formals), body, env, name)
        params, rest = [], None
        for i, f in enumerate(formals):
            if f == ".":
                rest = str(formals[i + 1])
                break
            params.append(str(f))
        return Closure(params, rest, body, env, name)

    def form_lambda(self, x, env, tail):
        return self.rep.make_closure(self.make_lambda(x[1], x[2:], env))

    def form_let(self, x, env, tail):
        if isinstance(x[1], Symbol):  # named let: a recursive procedure bound in its own frame
            return self._loop(str(x[1]), x[2], x[3:], env, tail)
        values = [self.eval(b[1], env, False) for b in x[1]]
        return self.eval_body(x[2:], self.rep.extend(env, [str(b[0]) for b in x[1]], values), tail)

    def form_loop(self, x, env, tail):
        return self._loop("recur", x[1], x[2:], env, tail)

    def _loop(self, name, bindings, body, env, tail):
        inits = [self.eval(b[1], env, False) for b in bindings]
        loop_env = self.rep.extend(env, [], [])
        closure = self.make_lambda([b[0] for b in bindings], body, loop_env, name)
        fn = self.rep.make_closure(closure)
        self.rep.define(loop_env, name, fn)
        if tail:
            return TailCall(fn, inits)
        return self.apply(fn, inits)

    def form_let_star(self, x, env, tail):
        for b in x[1]:
            env = self.rep.extend(env, [str(b[0])], [self.eval(b[1], env, False)])
        return self.eval_body(x[2:], self.rep.extend(env, [], []), tail)

    def form_letrec(self, x, env, tail):
        new = self.rep.extend(env, [], [])
        for b in x[1]:
            self.rep.define(new, str(b[0]), self.eval(b[1], new, False))
        return self.eval_body(x[2:], new, tail)

    def form_cond(self, x, env, tail):
        for clause in x[1:]:
            if clause[0] == "else":
                return self.eval_body(clause[1:], env, tail)
            test = self.eval(clause[0], env, False)
            if self.rep.truthy(test):
                if len(clause) == 1:
                    return test
                return self.eval_body(clause[1:], env, tail)
        return self.rep.boolean(False)

    def form_and(self, x, env, tail):
        if len(x) == 1:
            return self.rep.boolean(True)
        for e in x[1:-1]:
            v = self.eval(e, env, False)
            if not self.rep.truthy(v):
                return v
        return self.eval(x[-1], env, tail)

    def form_or(self, x, env, tail):
        if len(x) == 1:
            return self.rep.boolean(False)
        for e in x[1:-1]:
            v = self.eval(e, env, False)
            if self.rep.truthy(v):
                return v
        return self.eval(x[-1], env, tail)

    def form_when(self, x, env, tail):
        if self.rep.truthy(self.eval(x[1], env, False)):
            return self.eval_body(x[2:], env, tail)
        return self.rep.boolean(False)

    def form_unless(self, x, env, tail):
        if not self.rep.truthy(self.eval(x[1], env, False)):
            return self.eval_body(x[2:], env, tail)
        return self.rep.boolean(False)

    def form_begin(self, x, env, tail):
        return self.eval_body(x[1:], env, tail)

    def form_param(self, x, env, tail):
        raise CheckError("param declarations are allowed only at top level")


_FORM_METHODS = {
    "quote": "form_quote",
    "if": "form_if",
    "define": "form_define",
    "lambda": "form_lambda",
    "let": "form_let",
    "let*": "form_let_star",
    "letrec": "form_letrec",
    "letrec*": "form_letrec",
    "loop": "form_loop",
    "cond": "form_cond",
    "and": "form_and",
    "or": "form_or",
    "when": "form_when",
    "unless": "form_unless",
    "begin": "form_begin",
    "param": "form_param",
}


class BaselineProgram:
    """A program run by one baseline: the common API of ``tagged`` and ``eager``.

    ``value_and_grad(theta, inputs)`` mirrors ``ndvm.Program.value_and_grad``: ``theta`` is
    ``[B, P]`` in natural units, the result is ``(values [B], grads [B, P])`` as float64 numpy
    arrays; gradients come from torch autograd through the representation.
    """

    representation: Callable[[int], Representation]

    def __init__(self, source: str):
        self.evaluator = Evaluator(source)
        self.source = source
        self.params = self.evaluator.params
        self.param_names = self.evaluator.param_names

    def _theta(self, theta, requires_grad: bool) -> torch.Tensor:
        if theta is None:
            theta = np.array([[p.init for p in self.params]], dtype=np.float64)
        t = torch.as_tensor(np.asarray(theta, dtype=np.float64)).reshape(-1, len(self.params)).clone()
        return t.requires_grad_(requires_grad)

    def evaluate(self, theta=None, inputs: dict | None = None) -> np.ndarray:
        """Values only, ``[B]`` or ``[B, n]`` (no gradient recorded)."""
        t = self._theta(theta, False)
        with torch.no_grad():
            rep = self.representation(t.shape[0])
            out = rep.output(self.evaluator.run(rep, list(t.unbind(1)), inputs or {}))
        return out.detach().numpy()

    def value_and_grad(self, theta=None, inputs: dict | None = None) -> tuple[np.ndarray, np.ndarray]:
        t = self._theta(theta, True)
        rep = self.representation(t.shape[0])
        out = rep.output(self.evaluator.run(rep, list(t.unbind(1)), inputs or {}))
        if out.dim() != 1:
            raise EvalError(f"value_and_grad needs a scalar program; the result has shape {tuple(out.shape[1:])}")
        out.sum().backward()  # lanes are independent, so d(sum)/d theta[b] is lane b's gradient
        grad = t.grad if t.grad is not None else torch.zeros_like(t)
        return out.detach().numpy().copy(), grad.numpy().copy()

    def loss_and_grad_torch(self, t: torch.Tensor, inputs: dict) -> torch.Tensor:
        """The program's output as a torch tensor that backpropagates into ``t`` (for torch optimizers)."""
        rep = self.representation(t.shape[0])
        return rep.output(self.evaluator.run(rep, list(t.unbind(1)), inputs))


__all__ = [
    "BaselineParam",
    "BaselineProgram",
    "Closure",
    "Env",
    "Evaluator",
    "Representation",
    "TailCall",
    "split_toplevel",
]
