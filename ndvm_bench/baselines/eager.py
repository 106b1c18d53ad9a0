"""The eager split baseline: structure as Python objects, only numbers as torch tensors.

Same evaluator as the tagged baseline (:mod:`ndvm_bench.baselines.interp`), different representation:
exact integers are Python ``int``; inexact numbers are float64 tensors of shape ``[B]`` (one
value per lane; literals are 0-d tensors that broadcast); booleans are Python ``bool`` or, when
they come from comparing lane values, boolean tensors ``[B]``; symbols, pairs, closures and
environments are plain Python objects; vectors and matrices are :class:`Vec`/:class:`Mat`
wrappers around tensors ``[..., n]`` / ``[..., r, c]`` and use torch's batched linear algebra.
Gradients come from torch autograd. This is the structural/numeric split of NDVM, but executed
eagerly from Python: the ratio tagged/eager isolates the cost of boxing every value.
"""

from __future__ import annotations

import numpy as np
import torch

from ndvm.errors import EvalError
from ndvm_bench.baselines.interp import BaselineProgram, Closure, Env
from ndvm_bench.baselines.reader import Symbol

_F64 = torch.float64


class Vec:
    __slots__ = ("t",)

    def __init__(self, t: torch.Tensor):
        self.t = t  # [..., n]


class Mat:
    __slots__ = ("t",)

    def __init__(self, t: torch.Tensor):
        self.t = t  # [..., r, c]


class Pair:
    __slots__ = ("car", "cdr")

    def __init__(self, car, cdr):
        self.car, self.cdr = car, cdr


NIL = ()


class Primitive:
    __slots__ = ("name", "fn")

    def __init__(self, name, fn):
        self.name, self.fn = name, fn


def _is_number(v) -> bool:
    return (isinstance(v, int) and not isinstance(v, bool)) or isinstance(v, torch.Tensor) and v.dtype == _F64


def _num(v, who):
    if not _is_number(v):
        raise EvalError(f"{who}: expected a number, got {type(v).__name__}")
    return v


def _to_tensor(v) -> torch.Tensor:
    return v if isinstance(v, torch.Tensor) else torch.tensor(float(v), dtype=_F64)


def _lift(x, kind):
    """A scalar (int or [B] tensor) shaped to broadcast against a Vec (kind 1) or Mat (kind 2)."""
    t = _to_tensor(x)
    return t.reshape(t.shape + (1,) * kind)


_OPS = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b, "/": lambda a, b: a / b}


def _arith(op, a, b):
    f = _OPS[op]
    if isinstance(a, (Vec, Mat)) or isinstance(b, (Vec, Mat)):
        kind = 2 if isinstance(a, Mat) or isinstance(b, Mat) else 1
        wrap = Mat if kind == 2 else Vec
        ta = a.t if isinstance(a, (Vec, Mat)) else _lift(_num(a, op), kind)
        tb = b.t if isinstance(b, (Vec, Mat)) else _lift(_num(b, op), kind)
        if isinstance(a, (Vec, Mat)) and isinstance(b, (Vec, Mat)):
            if type(a) is not type(b) or a.t.shape[-kind:] != b.t.shape[-kind:]:
                raise EvalError(f"{op}: shape mismatch")
        return wrap(f(ta, tb))
    _num(a, op)
    _num(b, op)
    if isinstance(a, int) and isinstance(b, int):
        if op == "/":
            return torch.tensor(a / b, dtype=_F64)
        return f(a, b)  # exact integer arithmetic stays exact
    return f(a, b)  # at least one float64 tensor: torch promotes the int


def _variadic(op, unit):
    def prim(args):
        if not args:
            if op in ("+", "*"):
                return unit
            raise EvalError(f"{op}: needs at least one argument")
        if len(args) == 1 and op in ("-", "/"):
            return _arith(op, unit, args[0])
        acc = args[0]
        for x in args[1:]:
            acc = _arith(op, acc, x)
        return acc

    return prim


def _compare(op):
    fns = {
        "=": lambda a, b: a == b,
        "<": lambda a, b: a < b,
        ">": lambda a, b: a > b,
        "<=": lambda a, b: a <= b,
        ">=": lambda a, b: a >= b,
    }
    f = fns[op]

    def prim(args):
        if len(args) < 2:
            raise EvalError(f"{op}: needs at least two arguments")
        result = True
        for a, b in zip(args, args[1:]):
            r = f(_num(a, op), _num(b, op))
            result = r if result is True else (result & r)
        return result

    return prim


def _unary(name, fn):
    def prim(args):
        if len(args) != 1:
            raise EvalError(f"{name}: expected 1 argument, got {len(args)}")
        a = args[0]
        if isinstance(a, (Vec, Mat)):
            return type(a)(fn(a.t))
        return fn(_to_tensor(_num(a, name)))

    return prim


def _index(v, who) -> int:
    if not isinstance(v, int) or isinstance(v, bool):
        raise EvalError(f"{who}: index must be an exact integer")
    return v


def _p_ref(args):
    a, i = args[0], _index(args[1], "ref")
    if isinstance(a, Vec):
        return a.t[..., i]
    if isinstance(a, Mat):
        if len(args) == 2:
            return Vec(a.t[..., i, :])
        return a.t[..., i, _index(args[2], "ref")]
    raise EvalError("ref: expected a vector or a matrix")


def _p_vec(args):
    parts = [_to_tensor(_num(a, "vec")) for a in args]
    return Vec(torch.stack(torch.broadcast_tensors(*parts), dim=-1))


def _p_mat(args):
    rows = [r.t if isinstance(r, Vec) else _p_vec(_list_items(r)).t for r in args]
    return Mat(torch.stack(torch.broadcast_tensors(*rows), dim=-2))


def _list_items(v) -> list:
    items = []
    while isinstance(v, Pair):
        items.append(v.car)
        v = v.cdr
    if v is not NIL:
        raise EvalError("expected a proper list")
    return items


def _mat(v, who) -> torch.Tensor:
    if not isinstance(v, Mat):
        raise EvalError(f"{who}: expected a matrix")
    return v.t


def _vec(v, who) -> torch.Tensor:
    if not isinstance(v, Vec):
        raise EvalError(f"{who}: expected a vector")
    return v.t


def _fill(args, value, who):
    dims = [_index(a, who) for a in args]
    t = torch.full(tuple(dims), value, dtype=_F64)
    return Vec(t) if len(dims) == 1 else Mat(t)


def _car(args):
    if not isinstance(args[0], Pair):
        raise EvalError("car: expected a pair")
    return args[0].car


def _cdr(args):
    if not isinstance(args[0], Pair):
        raise EvalError("cdr: expected a pair")
    return args[0].cdr


def _minmax(fn):
    def prim(args):
        acc = _to_tensor(args[0])
        for a in args[1:]:
            acc = fn(acc, _to_tensor(a))
        return acc

    return prim


def _make_list(values):
    out = NIL
    for v in reversed(values):
        out = Pair(v, out)
    return out


_PRIMITIVE_FNS = {
    "+": _variadic("+", 0),
    "-": _variadic("-", 0),
    "*": _variadic("*", 1),
    "/": _variadic("/", 1),
    "=": _compare("="),
    "<": _compare("<"),
    ">": _compare(">"),
    "<=": _compare("<="),
    ">=": _compare(">="),
    "exp": _unary("exp", torch.exp),
    "log": _unary("log", torch.log),
    "sqrt": _unary("sqrt", torch.sqrt),
    "sin": _unary("sin", torch.sin),
    "cos": _unary("cos", torch.cos),
    "tan": _unary("tan", torch.tan),
    "tanh": _unary("tanh", torch.tanh),
    "abs": _unary("abs", torch.abs),
    "square": _unary("square", torch.square),
    "atan": _unary("atan", torch.atan),
    "sigmoid": _unary("sigmoid", torch.sigmoid),
    "softplus": _unary("softplus", lambda x: torch.logaddexp(x, torch.zeros_like(x))),
    "min": _minmax(torch.minimum),
    "max": _minmax(torch.maximum),
    "not": lambda args: args[0] is False,
    "cons": lambda args: Pair(args[0], args[1]),
    "car": _car,
    "cdr": _cdr,
    "list": lambda args: _make_list(list(args)),
    "null?": lambda args: args[0] is NIL,
    "pair?": lambda args: isinstance(args[0], Pair),
    "length": lambda args: len(_list_items(args[0])),
    "vec": _p_vec,
    "mat": _p_mat,
    "ref": _p_ref,
    "rows": lambda args: args[0].t.shape[-1] if isinstance(args[0], Vec) else _mat(args[0], "rows").shape[-2],
    "cols": lambda args: _mat(args[0], "cols").shape[-1],
    "size": lambda args: _vec(args[0], "size").shape[-1],
    "eye": lambda args: Mat(torch.eye(_index(args[0], "eye"), dtype=_F64)),
    "zeros": lambda args: _fill(args, 0.0, "zeros"),
    "ones": lambda args: _fill(args, 1.0, "ones"),
    "dot": lambda args: (_vec(args[0], "dot") * _vec(args[1], "dot")).sum(-1),
    "matvec": lambda args: Vec((_mat(args[0], "matvec") @ _vec(args[1], "matvec").unsqueeze(-1)).squeeze(-1)),
    "matmul": lambda args: Mat(_mat(args[0], "matmul") @ _mat(args[1], "matmul")),
    "transpose": lambda args: Mat(_mat(args[0], "transpose").transpose(-1, -2)),
    "outer": lambda args: Mat(_vec(args[0], "outer").unsqueeze(-1) * _vec(args[1], "outer").unsqueeze(-2)),
    "trace": lambda args: torch.diagonal(_mat(args[0], "trace"), dim1=-2, dim2=-1).sum(-1),
    "inv": lambda args: Mat(torch.linalg.inv(_mat(args[0], "inv"))),
    "det": lambda args: torch.linalg.det(_mat(args[0], "det")),
    "logdet": lambda args: torch.linalg.slogdet(_mat(args[0], "logdet"))[1],
    "vsum": lambda args: _vec(args[0], "vsum").sum(-1),
}
_PRIMITIVES = {name: Primitive(name, fn) for name, fn in _PRIMITIVE_FNS.items()}


class EagerValues:
    """The split representation for one evaluation of ``B`` lanes."""

    def __init__(self, B: int):
        self.B = B

    def number(self, x):
        if isinstance(x, bool):
            return x
        return x if isinstance(x, int) else torch.tensor(float(x), dtype=_F64)

    def boolean(self, b: bool):
        return bool(b)

    def quote(self, datum):
        if isinstance(datum, list):
            return _make_list([self.quote(d) for d in datum])
        if isinstance(datum, Symbol) or isinstance(datum, bool):
            return datum
        return self.number(datum)

    def make_list(self, values):
        return _make_list(values)

    def make_closure(self, closure: Closure):
        return closure

    def truthy(self, v) -> bool:
        if v is False:
            return False
        if isinstance(v, torch.Tensor) and v.dtype == torch.bool:
            if bool(v.all()):
                return True
            if not bool(v.any()):
                return False
            raise EvalError("lanes diverge at a branch; the eager baseline needs uniform control flow")
        return True

    def callable(self, v):
        if isinstance(v, Closure):
            return "closure", v
        if isinstance(v, Primitive):
            return "primitive", v.fn
        raise EvalError(f"cannot apply a {type(v).__name__}")

    def extend(self, env, names, values):
        return Env(dict(zip(names, values)), env)

    def define(self, env: Env, name, value) -> None:
        env.vars[name] = value

    def lookup(self, env: Env, name):
        frame = env.find(name)
        if frame is not None:
            return frame.vars[name]
        return _PRIMITIVES.get(name)

    def bound(self, env: Env, name) -> bool:
        return env.find(name) is not None

    def param(self, column: torch.Tensor):
        return column

    def input(self, value):
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return self.number(value)
        arr = np.asarray(value, dtype=np.float64)
        if arr.ndim == 0:
            return torch.tensor(float(arr), dtype=_F64)
        t = torch.from_numpy(arr.copy())
        if arr.ndim == 1:
            return Vec(t)
        if arr.ndim == 2:
            return Mat(t)
        raise EvalError(f"inputs must be scalars, vectors or matrices, got shape {arr.shape}")

    def output(self, v) -> torch.Tensor:
        if isinstance(v, (Vec, Mat)):
            t = v.t
            lead = t.dim() - (1 if isinstance(v, Vec) else 2)
            t = t.reshape(t.shape[:lead] + (-1,))
            return t.expand(self.B, t.shape[-1]) if lead == 0 else t
        if not _is_number(v):
            raise EvalError(f"the program returned a {type(v).__name__}, not a number or array")
        return _to_tensor(v).expand(self.B)


class EagerProgram(BaselineProgram):
    """A program run by the eager split baseline (see the module docstring)."""

    representation = EagerValues


def compile(source: str) -> EagerProgram:  # noqa: A001 - mirrors ndvm.compile
    """Read a program for the eager baseline."""
    return EagerProgram(source)


__all__ = ["EagerProgram", "EagerValues", "Mat", "Vec", "compile"]
