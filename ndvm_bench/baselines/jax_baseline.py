"""The JAX staging baseline (optional: ``pip install 'ndvm-discovery[jax]'``).

Each program is traced once into a JAX function of its parameter vector (the shared evaluator runs
over JAX arrays, so control flow that depends only on exact integers and data unrolls at trace
time) and staged as ``jax.jit(jax.vmap(jax.value_and_grad(f)))``. The first call pays the
staging (trace + XLA compile); later calls run the compiled program. This is what a framework
that compiles each candidate into its own graph costs, per new program.

Importing this module does not import JAX; :func:`available` says whether it can be used and
:func:`stage` raises :class:`JaxUnavailable` with the install hint when it cannot.
"""

from __future__ import annotations

import importlib.util
import time

import numpy as np

from ndvm.errors import EvalError
from ndvm_bench.baselines.interp import Closure, Env, Evaluator
from ndvm_bench.baselines.reader import Symbol


class JaxUnavailable(RuntimeError):
    """JAX is not installed."""


def available() -> bool:
    return importlib.util.find_spec("jax") is not None


def _jax():
    if not available():
        raise JaxUnavailable("JAX is not installed; install the optional extra: pip install 'ndvm-discovery[jax]'")
    import jax

    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp

    return jax, jnp


class _Vec:
    __slots__ = ("t",)

    def __init__(self, t):
        self.t = t


class _Mat:
    __slots__ = ("t",)

    def __init__(self, t):
        self.t = t


class _Pair:
    __slots__ = ("car", "cdr")

    def __init__(self, car, cdr):
        self.car, self.cdr = car, cdr


class _Prim:
    __slots__ = ("fn",)

    def __init__(self, fn):
        self.fn = fn


_NIL = ()


class JaxValues:
    """One lane's values during tracing: exact ints stay Python ints, other numbers are JAX scalars."""

    def __init__(self, jnp):
        self.B = 1
        self.jnp = jnp
        self.prims = _primitives(jnp)

    def number(self, x):
        if isinstance(x, bool):
            return x
        return x if isinstance(x, int) else self.jnp.asarray(float(x), dtype=self.jnp.float64)

    def boolean(self, b):
        return bool(b)

    def quote(self, datum):
        if isinstance(datum, list):
            return self.make_list([self.quote(d) for d in datum])
        if isinstance(datum, (Symbol, bool)):
            return datum
        return self.number(datum)

    def make_list(self, values):
        out = _NIL
        for v in reversed(values):
            out = _Pair(v, out)
        return out

    def make_closure(self, closure: Closure):
        return closure

    def truthy(self, v) -> bool:
        if v is False:
            return False
        if isinstance(v, bool) or not hasattr(v, "dtype"):
            return True
        if v.dtype == bool:
            try:
                return bool(v)
            except Exception as e:  # a traced boolean: data-dependent control flow cannot be staged
                raise EvalError("the JAX baseline cannot stage a branch on a parameter-dependent value") from e
        return True

    def callable(self, v):
        if isinstance(v, Closure):
            return "closure", v
        if isinstance(v, _Prim):
            return "primitive", v.fn
        raise EvalError(f"cannot apply a {type(v).__name__}")

    def extend(self, env, names, values):
        return Env(dict(zip(names, values)), env)

    def define(self, env, name, value):
        env.vars[name] = value

    def lookup(self, env, name):
        frame = env.find(name)
        if frame is not None:
            return frame.vars[name]
        return self.prims.get(name)

    def bound(self, env, name):
        return env.find(name) is not None

    def param(self, column):
        return column

    def input(self, value):
        jnp = self.jnp
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return self.number(value)
        arr = np.asarray(value, dtype=np.float64)
        if arr.ndim == 0:
            return jnp.asarray(float(arr))
        if arr.ndim == 1:
            return _Vec(jnp.asarray(arr))
        return _Mat(jnp.asarray(arr))

    def output(self, v):
        if isinstance(v, (_Vec, _Mat)):
            return v.t.reshape(-1)
        return self.jnp.asarray(v, dtype=self.jnp.float64)


def _primitives(jnp) -> dict:
    def num_or_arr(v):
        return v.t if isinstance(v, (_Vec, _Mat)) else v

    def wrap_like(a, b, t):
        for v in (a, b):
            if isinstance(v, (_Vec, _Mat)):
                return type(v)(t)
        return t

    def arith(op):
        f = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b, "/": lambda a, b: a / b}[op]
        unit = 1 if op in ("*", "/") else 0

        def prim(args):
            if len(args) == 1 and op in ("-", "/"):
                args = [unit] + list(args)
            if not args:
                return unit
            acc = args[0]
            for b in args[1:]:
                if isinstance(acc, int) and isinstance(b, int) and op != "/":
                    acc = f(acc, b)
                else:
                    acc = wrap_like(acc, b, f(num_or_arr(acc), num_or_arr(b)))
            if isinstance(acc, float):
                acc = jnp.asarray(acc)
            return acc

        return prim

    def compare(op):
        f = {
            "=": lambda a, b: a == b,
            "<": lambda a, b: a < b,
            ">": lambda a, b: a > b,
            "<=": lambda a, b: a <= b,
            ">=": lambda a, b: a >= b,
        }[op]

        def prim(args):
            result = True
            for a, b in zip(args, args[1:]):
                r = f(a, b)
                result = r if result is True else (result & r)
            return result

        return prim

    def unary(fn):
        return lambda args: type(args[0])(fn(args[0].t)) if isinstance(args[0], (_Vec, _Mat)) else fn(args[0])

    def ref(args):
        a, i = args[0], args[1]
        if isinstance(a, _Vec):
            return a.t[i]
        if len(args) == 2:
            return _Vec(a.t[i])
        return a.t[i, args[2]]

    def vec(args):
        return _Vec(jnp.stack([jnp.asarray(a, dtype=jnp.float64) for a in args]))

    def mat(args):
        return _Mat(jnp.stack([r.t for r in args]))

    def fill(value):
        def prim(args):
            t = jnp.full(tuple(args), value, dtype=jnp.float64)
            return _Vec(t) if len(args) == 1 else _Mat(t)

        return prim

    table = {op: arith(op) for op in "+-*/"}
    table.update({op: compare(op) for op in ("=", "<", ">", "<=", ">=")})
    for name, fn in {
        "exp": jnp.exp,
        "log": jnp.log,
        "sqrt": jnp.sqrt,
        "sin": jnp.sin,
        "cos": jnp.cos,
        "tan": jnp.tan,
        "tanh": jnp.tanh,
        "abs": jnp.abs,
        "square": jnp.square,
        "atan": jnp.arctan,
        "sigmoid": lambda x: 1.0 / (1.0 + jnp.exp(-x)),
        "softplus": lambda x: jnp.logaddexp(x, 0.0),
    }.items():
        table[name] = unary(fn)
    table.update(
        {
            "vec": vec,
            "mat": mat,
            "ref": ref,
            "rows": lambda args: args[0].t.shape[0],
            "cols": lambda args: args[0].t.shape[1],
            "size": lambda args: args[0].t.shape[0],
            "eye": lambda args: _Mat(jnp.eye(args[0], dtype=jnp.float64)),
            "zeros": fill(0.0),
            "ones": fill(1.0),
            "dot": lambda args: jnp.dot(args[0].t, args[1].t),
            "matvec": lambda args: _Vec(args[0].t @ args[1].t),
            "matmul": lambda args: _Mat(args[0].t @ args[1].t),
            "transpose": lambda args: _Mat(args[0].t.T),
            "outer": lambda args: _Mat(jnp.outer(args[0].t, args[1].t)),
            "trace": lambda args: jnp.trace(args[0].t),
            "inv": lambda args: _Mat(jnp.linalg.inv(args[0].t)),
            "det": lambda args: jnp.linalg.det(args[0].t),
            "logdet": lambda args: jnp.linalg.slogdet(args[0].t)[1],
            "vsum": lambda args: jnp.sum(args[0].t),
            "min": lambda args: jnp.min(jnp.stack(args)),
            "max": lambda args: jnp.max(jnp.stack(args)),
        }
    )
    return {name: _Prim(fn) for name, fn in table.items()}


class StagedProgram:
    """A program staged by JAX: ``jit(vmap(value_and_grad(f)))`` of its parameter vector.

    With a ``target``, f is the mean squared error between the program's output and the target
    (what calibration differentiates for vector-valued models); without, the program's value.
    """

    def __init__(self, source: str, inputs: dict, target=None):
        jax, jnp = _jax()
        self.evaluator = Evaluator(source)
        self.param_names = self.evaluator.param_names
        rep = JaxValues(jnp)
        target_j = None if target is None else jnp.asarray(np.asarray(target, dtype=np.float64))

        def f(theta_row):
            out = rep.output(self.evaluator.run(rep, [theta_row[j] for j in range(len(self.param_names))], inputs))
            if target_j is not None:
                return jnp.mean((out - target_j) ** 2)
            return out.reshape(())

        self._fn = jax.jit(jax.vmap(jax.value_and_grad(f)))
        self.staging_seconds: float | None = None

    def value_and_grad(self, theta) -> tuple[np.ndarray, np.ndarray]:
        """The first call stages (its duration is kept in ``staging_seconds``)."""
        t0 = time.perf_counter()
        v, g = self._fn(np.asarray(theta, dtype=np.float64))
        v.block_until_ready()
        g.block_until_ready()
        if self.staging_seconds is None:
            self.staging_seconds = time.perf_counter() - t0
        return np.asarray(v), np.asarray(g)


def stage(source: str, inputs: dict, target=None) -> StagedProgram:
    return StagedProgram(source, inputs, target)


__all__ = ["JaxUnavailable", "StagedProgram", "available", "stage"]
