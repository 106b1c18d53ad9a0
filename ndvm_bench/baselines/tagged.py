"""The tagged-tensor baseline: the DMCI cost model in eager PyTorch.

Every run-time value (number, boolean, symbol, pair, closure, primitive, nil, vector, matrix) is
one float64 tensor of shape ``[B, 14]``: a 10-way one-hot tag in columns 0-9 and a 4-element
payload in columns 10-13. Numbers carry their value (one per lane) in the payload; structured
values carry heap addresses and sizes. The heap is a write-once Python dictionary from address to
value tensor: a pair occupies two cells (car, cdr), a vector of n numbers n cells, a matrix r*c
cells (row-major), each cell a boxed number. Tail calls run through the shared evaluator's
trampoline; gradients come from torch autograd through the payload columns.

Environments are what a meta-circular evaluator makes them: each frame is an association list
of ``(symbol . value)`` pairs in the heap, and the global frame holds the primitives, so looking
up a name walks heap cells and compares symbol numbers read out of tensors. (A frame's head is
kept in a small Python holder so that ``define`` can prepend a binding without rewriting cells.)

Every primitive therefore reads tags out of tensors, unboxes its arguments and boxes its result;
linear algebra is done element by element on boxed numbers (a 2x2 inverse and log-determinant in
closed form, larger ones by Gauss-Jordan elimination without pivoting, which is sound for the
symmetric positive-definite matrices of the state-space benchmarks). This is deliberately the cost
structure the NDVM design removes; it is a faithful reimplementation of the model, not a tuned
interpreter.

Lanes must agree on control flow (an ``if`` whose test differs across lanes raises
:class:`ndvm.EvalError`): the benchmark programs' branches depend only on counters and data.
"""

from __future__ import annotations

import numpy as np
import torch

from ndvm.errors import EvalError
from ndvm_bench.baselines.interp import BaselineProgram, Closure
from ndvm_bench.baselines.reader import Symbol

(TAG_NIL, TAG_BOOL, TAG_INT, TAG_FLOAT, TAG_SYMBOL, TAG_PAIR, TAG_CLOSURE, TAG_PRIMITIVE, TAG_VECTOR, TAG_MATRIX) = (
    range(10)
)
TAG_NAMES = ["nil", "boolean", "integer", "number", "symbol", "pair", "closure", "primitive", "vector", "matrix"]
WIDTH = 14  # 10-way one-hot tag + 4-element payload
P0 = 10  # first payload column
_F64 = torch.float64


class TaggedValues:
    """One evaluation's values and heap (created fresh for each run, so the heap is reset)."""

    def __init__(self, B: int):
        self.B = B
        self.heap: dict[int, torch.Tensor] = {}
        self.next_addr = 0
        self.closures: list[Closure] = []
        self.symbols: dict[str, int] = {}
        self.symbol_names: list[str] = []
        eye = torch.eye(10, dtype=_F64)
        self._tag_rows = [eye[t].expand(B, 10) for t in range(10)]
        self._zeros3 = torch.zeros(B, 3, dtype=_F64)
        self._prims = _PRIMITIVES

    # -- boxing ------------------------------------------------------------------------------
    def box_number(self, value: torch.Tensor, tag: int = TAG_FLOAT) -> torch.Tensor:
        """Box a lane vector [B] (or a 0-d tensor) as a tagged number [B, 14]."""
        if value.dim() == 0:
            value = value.expand(self.B)
        return torch.cat([self._tag_rows[tag], value.unsqueeze(1), self._zeros3], dim=1)

    def box_struct(self, tag: int, a: float = 0.0, b: float = 0.0, c: float = 0.0) -> torch.Tensor:
        payload = torch.tensor([[a, b, c, 0.0]], dtype=_F64).expand(self.B, 4)
        return torch.cat([self._tag_rows[tag], payload], dim=1)

    @staticmethod
    def tag(v: torch.Tensor) -> int:
        return int(torch.argmax(v[0, :P0]))

    def num(self, v: torch.Tensor, who: str) -> torch.Tensor:
        """Unbox a number (the lane vector [B] of its payload), checking the tag."""
        t = self.tag(v)
        if t != TAG_FLOAT and t != TAG_INT:
            raise EvalError(f"{who}: expected a number, got a {TAG_NAMES[t]}")
        return v[:, P0]

    def alloc(self, cells: list[torch.Tensor]) -> int:
        base = self.next_addr
        for i, cell in enumerate(cells):
            if base + i in self.heap:  # pragma: no cover - guarded by construction
                raise EvalError("write-once heap violated")
            self.heap[base + i] = cell
        self.next_addr += len(cells)
        return base

    # -- the Representation protocol ---------------------------------------------------------
    def number(self, x):
        if isinstance(x, bool):
            return self.boolean(x)
        tag = TAG_INT if isinstance(x, int) else TAG_FLOAT
        return self.box_number(torch.tensor(float(x), dtype=_F64), tag)

    def boolean(self, b: bool):
        return self.box_struct(TAG_BOOL, 1.0 if b else 0.0)

    def nil(self):
        return self.box_struct(TAG_NIL)

    def symbol(self, name: str):
        if name not in self.symbols:
            self.symbols[name] = len(self.symbol_names)
            self.symbol_names.append(name)
        return self.box_struct(TAG_SYMBOL, float(self.symbols[name]))

    def cons(self, car, cdr):
        return self.box_struct(TAG_PAIR, float(self.alloc([car, cdr])))

    def make_list(self, values: list):
        out = self.nil()
        for v in reversed(values):
            out = self.cons(v, out)
        return out

    def quote(self, datum):
        if isinstance(datum, Symbol):
            return self.symbol(datum)
        if isinstance(datum, list):
            return self.make_list([self.quote(d) for d in datum])
        if isinstance(datum, bool):
            return self.boolean(datum)
        return self.number(datum)

    def make_closure(self, closure: Closure):
        self.closures.append(closure)
        return self.box_struct(TAG_CLOSURE, float(len(self.closures) - 1))

    def primitive(self, name: str):
        return self.box_struct(TAG_PRIMITIVE, float(_PRIMITIVE_IDS[name]))

    # -- environments: association lists in the heap ------------------------------------------
    def extend(self, env, names: list[str], values: list):
        if env is None:  # the global frame: primitives first, then the program's bindings
            env = TaggedFrame(self.nil(), None)
            for name in _PRIMITIVE_NAMES:
                self.define(env, name, self.primitive(name))
        frame = TaggedFrame(self.nil(), env)
        for name, value in zip(names, values):
            self.define(frame, name, value)
        return frame

    def define(self, env: TaggedFrame, name: str, value) -> None:
        entry = self.cons(self.symbol(name), value)
        env.head = self.cons(entry, env.head)

    def _find(self, env: TaggedFrame, name: str):
        sid = self.symbols.get(name)
        if sid is None:  # a name never interned cannot be bound
            return None
        while env is not None:
            cell = env.head
            while self.tag(cell) == TAG_PAIR:
                addr = int(cell[0, P0])
                entry = self.heap[addr]
                entry_addr = int(entry[0, P0])
                if int(self.heap[entry_addr][0, P0]) == sid:
                    return self.heap[entry_addr + 1]
                cell = self.heap[addr + 1]
            env = env.parent
        return None

    def lookup(self, env, name: str):
        return self._find(env, name)

    def bound(self, env, name: str) -> bool:
        # Special-form names are never primitives, so any binding found was made by the program.
        return self._find(env, name) is not None

    def callable(self, v):
        t = self.tag(v)
        if t == TAG_CLOSURE:
            return "closure", self.closures[int(v[0, P0])]
        if t == TAG_PRIMITIVE:
            name = _PRIMITIVE_NAMES[int(v[0, P0])]
            fn = self._prims[name]
            return "primitive", lambda args: fn(self, args)
        raise EvalError(f"cannot apply a {TAG_NAMES[t]}")

    def truthy(self, v) -> bool:
        if self.tag(v) != TAG_BOOL:
            return True  # only #f is false
        lanes = v[:, P0]
        if bool(torch.all(lanes != 0)):
            return True
        if bool(torch.all(lanes == 0)):
            return False
        raise EvalError("lanes diverge at a branch; the tagged baseline needs uniform control flow")

    def param(self, column: torch.Tensor):
        return self.box_number(column)

    def input(self, value):
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return self.number(value)
        arr = np.asarray(value, dtype=np.float64)
        if arr.ndim == 0:
            return self.number(float(arr))
        cells = [self.box_number(torch.tensor(x, dtype=_F64)) for x in arr.reshape(-1)]
        base = self.alloc(cells)
        if arr.ndim == 1:
            return self.box_struct(TAG_VECTOR, base, arr.shape[0])
        if arr.ndim == 2:
            return self.box_struct(TAG_MATRIX, base, arr.shape[0], arr.shape[1])
        raise EvalError(f"inputs must be scalars, vectors or matrices, got shape {arr.shape}")

    def output(self, v) -> torch.Tensor:
        t = self.tag(v)
        if t in (TAG_FLOAT, TAG_INT):
            return v[:, P0]
        if t in (TAG_VECTOR, TAG_MATRIX):
            return torch.stack([c[:, P0] for c in self.elements(v)], dim=1)
        raise EvalError(f"the program returned a {TAG_NAMES[t]}, not a number or array")

    # -- arrays --------------------------------------------------------------------------------
    def shape(self, v) -> tuple[int, ...]:
        """() for a number, (n,) for a vector, (r, c) for a matrix (read from the payload)."""
        t = self.tag(v)
        if t in (TAG_FLOAT, TAG_INT):
            return ()
        if t == TAG_VECTOR:
            return (int(v[0, P0 + 1]),)
        if t == TAG_MATRIX:
            return (int(v[0, P0 + 1]), int(v[0, P0 + 2]))
        raise EvalError(f"expected a number, vector or matrix, got a {TAG_NAMES[t]}")

    def elements(self, v) -> list[torch.Tensor]:
        base = int(v[0, P0])
        n = 1
        for d in self.shape(v):
            n *= d
        return [self.heap[base + i] for i in range(n)]

    def make_array(self, shape: tuple[int, ...], cells: list[torch.Tensor]):
        base = self.alloc(cells)
        if len(shape) == 1:
            return self.box_struct(TAG_VECTOR, base, shape[0])
        return self.box_struct(TAG_MATRIX, base, shape[0], shape[1])

    def matrix_rows(self, m) -> list[list[torch.Tensor]]:
        r, c = self.shape(m)
        cells = self.elements(m)
        return [cells[i * c : (i + 1) * c] for i in range(r)]


class TaggedFrame:
    """A frame of the tagged environment: ``head`` is an association list in the heap."""

    __slots__ = ("head", "parent")

    def __init__(self, head: torch.Tensor, parent: TaggedFrame | None):
        self.head, self.parent = head, parent


# -- scalar arithmetic on boxed numbers (every result is boxed) -------------------------------
def _arith(vals: TaggedValues, op: str, a, b, who: str):
    ta, tb = vals.tag(a), vals.tag(b)
    if ta not in (TAG_FLOAT, TAG_INT) or tb not in (TAG_FLOAT, TAG_INT):
        raise EvalError(f"{who}: expected numbers, got {TAG_NAMES[ta]} and {TAG_NAMES[tb]}")
    x, y = a[:, P0], b[:, P0]
    if op == "+":
        r = x + y
    elif op == "-":
        r = x - y
    elif op == "*":
        r = x * y
    else:
        r = x / y
    exact = ta == TAG_INT and tb == TAG_INT and op != "/"
    return vals.box_number(r, TAG_INT if exact else TAG_FLOAT)


def _elementwise(vals: TaggedValues, op: str, a, b, who: str):
    sa, sb = vals.shape(a), vals.shape(b)
    if not sa and not sb:
        return _arith(vals, op, a, b, who)
    if not sa:
        return vals.make_array(sb, [_arith(vals, op, a, e, who) for e in vals.elements(b)])
    if not sb:
        return vals.make_array(sa, [_arith(vals, op, e, b, who) for e in vals.elements(a)])
    if sa != sb:
        raise EvalError(f"{who}: shape mismatch {sa} vs {sb}")
    return vals.make_array(sa, [_arith(vals, op, x, y, who) for x, y in zip(vals.elements(a), vals.elements(b))])


def _variadic(op: str, unit: int):
    def prim(vals: TaggedValues, args):
        if not args:
            if op in ("+", "*"):
                return vals.number(unit)
            raise EvalError(f"{op}: needs at least one argument")
        if len(args) == 1 and op in ("-", "/"):
            return _elementwise(vals, op, vals.number(unit), args[0], op)
        acc = args[0]
        for x in args[1:]:
            acc = _elementwise(vals, op, acc, x, op)
        return acc

    return prim


def _compare(op):
    fns = {"=": torch.eq, "<": torch.lt, ">": torch.gt, "<=": torch.le, ">=": torch.ge}
    fn = fns[op]

    def prim(vals: TaggedValues, args):
        if len(args) < 2:
            raise EvalError(f"{op}: needs at least two arguments")
        result = None
        for a, b in zip(args, args[1:]):
            r = fn(vals.num(a, op), vals.num(b, op))
            result = r if result is None else (result & r)
        return vals.box_number(result.to(_F64), TAG_BOOL)

    return prim


def _unary(name, fn):
    def scalar(vals: TaggedValues, a):
        return vals.box_number(fn(vals.num(a, name)))

    def prim(vals: TaggedValues, args):
        if len(args) != 1:
            raise EvalError(f"{name}: expected 1 argument, got {len(args)}")
        a = args[0]
        shape = vals.shape(a)
        if not shape:
            return scalar(vals, a)
        return vals.make_array(shape, [scalar(vals, e) for e in vals.elements(a)])

    return prim


def _check_args(name, args, n):
    if len(args) not in (n if isinstance(n, tuple) else (n,)):
        raise EvalError(f"{name}: expected {n} arguments, got {len(args)}")


def _index(vals, v, who) -> int:
    if vals.tag(v) != TAG_INT:
        raise EvalError(f"{who}: index must be an exact integer")
    return int(v[0, P0])


def _sum(vals, cells, who):
    acc = cells[0]
    for c in cells[1:]:
        acc = _arith(vals, "+", acc, c, who)
    return acc


def _p_vec(vals, args):
    for a in args:
        vals.num(a, "vec")
    return vals.make_array((len(args),), list(args))


def _p_mat(vals, args):
    rows = []
    for row in args:
        t = vals.tag(row)
        if t == TAG_VECTOR:
            rows.append(vals.elements(row))
        elif t in (TAG_PAIR, TAG_NIL):
            rows.append(_list_items(vals, row))
        else:
            raise EvalError("mat: each row must be a vec or a list")
    if len({len(r) for r in rows}) != 1:
        raise EvalError("mat: rows of different lengths")
    return vals.make_array((len(rows), len(rows[0])), [c for r in rows for c in r])


def _p_ref(vals, args):
    _check_args("ref", args, (2, 3))
    shape = vals.shape(args[0])
    cells = vals.elements(args[0])
    i = _index(vals, args[1], "ref")
    if not 0 <= i < shape[0]:
        raise EvalError(f"ref: index {i} out of range for size {shape[0]}")
    if len(shape) == 1:
        return cells[i]
    c = shape[1]
    if len(args) == 2:  # a row of a matrix: a vector over the same (write-once) cells
        return vals.box_struct(TAG_VECTOR, int(args[0][0, P0]) + i * c, c)
    j = _index(vals, args[2], "ref")
    if not 0 <= j < c:
        raise EvalError(f"ref: column {j} out of range for {c} columns")
    return cells[i * c + j]


def _p_rows(vals, args):
    return vals.number(vals.shape(args[0])[0])


def _p_cols(vals, args):
    s = vals.shape(args[0])
    if len(s) != 2:
        raise EvalError("cols: expected a matrix")
    return vals.number(s[1])


def _fill(vals, args, value, who):
    dims = [_index(vals, a, who) for a in args]
    n = dims[0] if len(dims) == 1 else dims[0] * dims[1]
    return vals.make_array(tuple(dims), [vals.number(value) for _ in range(n)])


def _p_eye(vals, args):
    n = _index(vals, args[0], "eye")
    return vals.make_array((n, n), [vals.number(1.0 if i == j else 0.0) for i in range(n) for j in range(n)])


def _p_dot(vals, args):
    a, b = args
    if vals.shape(a) != vals.shape(b) or len(vals.shape(a)) != 1:
        raise EvalError("dot: expected two vectors of the same length")
    return _sum(vals, [_arith(vals, "*", x, y, "dot") for x, y in zip(vals.elements(a), vals.elements(b))], "dot")


def _p_matvec(vals, args):
    m, v = args
    rows = vals.matrix_rows(m)
    xs = vals.elements(v)
    if len(rows[0]) != len(xs):
        raise EvalError("matvec: shape mismatch")
    out = [_sum(vals, [_arith(vals, "*", a, x, "matvec") for a, x in zip(row, xs)], "matvec") for row in rows]
    return vals.make_array((len(out),), out)


def _p_matmul(vals, args):
    a, b = args
    ra, rb = vals.matrix_rows(a), vals.matrix_rows(b)
    if len(ra[0]) != len(rb):
        raise EvalError("matmul: shape mismatch")
    cols = len(rb[0])
    cells = []
    for row in ra:
        for j in range(cols):
            cells.append(_sum(vals, [_arith(vals, "*", row[k], rb[k][j], "matmul") for k in range(len(rb))], "matmul"))
    return vals.make_array((len(ra), cols), cells)


def _p_transpose(vals, args):
    rows = vals.matrix_rows(args[0])
    r, c = len(rows), len(rows[0])
    return vals.make_array((c, r), [rows[i][j] for j in range(c) for i in range(r)])


def _p_outer(vals, args):
    a, b = vals.elements(args[0]), vals.elements(args[1])
    return vals.make_array((len(a), len(b)), [_arith(vals, "*", x, y, "outer") for x in a for y in b])


def _p_trace(vals, args):
    rows = vals.matrix_rows(args[0])
    return _sum(vals, [rows[i][i] for i in range(len(rows))], "trace")


def _square_rows(vals, m, who):
    rows = vals.matrix_rows(m)
    if len(rows) != len(rows[0]):
        raise EvalError(f"{who}: expected a square matrix")
    return rows


def _eliminate(vals, rows, who):
    """Gauss-Jordan elimination without pivoting on boxed numbers: returns (pivots, inverse rows)."""
    n = len(rows)
    a = [list(r) for r in rows]
    inv = [[vals.number(1.0 if i == j else 0.0) for j in range(n)] for i in range(n)]
    pivots = []
    for k in range(n):
        p = a[k][k]
        if bool(torch.any(vals.num(p, who) == 0)):
            raise EvalError(f"{who}: zero pivot (singular matrix or one that needs pivoting)")
        pivots.append(p)
        a[k] = [_arith(vals, "/", x, p, who) for x in a[k]]
        inv[k] = [_arith(vals, "/", x, p, who) for x in inv[k]]
        for i in range(n):
            if i == k:
                continue
            f = a[i][k]
            a[i] = [_arith(vals, "-", x, _arith(vals, "*", f, y, who), who) for x, y in zip(a[i], a[k])]
            inv[i] = [_arith(vals, "-", x, _arith(vals, "*", f, y, who), who) for x, y in zip(inv[i], inv[k])]
    return pivots, inv


def _det2(vals, rows, who):
    (a, b), (c, d) = rows
    return _arith(vals, "-", _arith(vals, "*", a, d, who), _arith(vals, "*", b, c, who), who)


def _p_inv(vals, args):
    rows = _square_rows(vals, args[0], "inv")
    n = len(rows)
    if n == 2:  # closed form: adj(S) / det(S)
        (a, b), (c, d) = rows
        det = _det2(vals, rows, "inv")
        zero = vals.number(0.0)
        cells = [
            _arith(vals, "/", d, det, "inv"),
            _arith(vals, "/", _arith(vals, "-", zero, b, "inv"), det, "inv"),
            _arith(vals, "/", _arith(vals, "-", zero, c, "inv"), det, "inv"),
            _arith(vals, "/", a, det, "inv"),
        ]
        return vals.make_array((2, 2), cells)
    _, inv = _eliminate(vals, rows, "inv")
    return vals.make_array((n, n), [c for r in inv for c in r])


def _p_det(vals, args):
    rows = _square_rows(vals, args[0], "det")
    if len(rows) == 2:
        return _det2(vals, rows, "det")
    pivots, _ = _eliminate(vals, rows, "det")
    acc = pivots[0]
    for p in pivots[1:]:
        acc = _arith(vals, "*", acc, p, "det")
    return acc


def _p_logdet(vals, args):
    rows = _square_rows(vals, args[0], "logdet")
    log = _unary("log", torch.log)
    if len(rows) == 2:
        return log(vals, [_det2(vals, rows, "logdet")])
    pivots, _ = _eliminate(vals, rows, "logdet")
    return _sum(vals, [log(vals, [p]) for p in pivots], "logdet")


def _list_items(vals, v) -> list:
    items = []
    while vals.tag(v) == TAG_PAIR:
        addr = int(v[0, P0])
        items.append(vals.heap[addr])
        v = vals.heap[addr + 1]
    if vals.tag(v) != TAG_NIL:
        raise EvalError("expected a proper list")
    return items


def _pair_cell(vals, v, offset, who):
    if vals.tag(v) != TAG_PAIR:
        raise EvalError(f"{who}: expected a pair, got a {TAG_NAMES[vals.tag(v)]}")
    return vals.heap[int(v[0, P0]) + offset]


def _minmax(name, fn):
    def prim(vals, args):
        acc = vals.num(args[0], name)
        for a in args[1:]:
            acc = fn(acc, vals.num(a, name))
        return vals.box_number(acc)

    return prim


_PRIMITIVES = {
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
    "min": _minmax("min", torch.minimum),
    "max": _minmax("max", torch.maximum),
    "not": lambda vals, args: vals.boolean(not vals.truthy(args[0])),
    "cons": lambda vals, args: vals.cons(args[0], args[1]),
    "car": lambda vals, args: _pair_cell(vals, args[0], 0, "car"),
    "cdr": lambda vals, args: _pair_cell(vals, args[0], 1, "cdr"),
    "list": lambda vals, args: vals.make_list(list(args)),
    "null?": lambda vals, args: vals.boolean(vals.tag(args[0]) == TAG_NIL),
    "pair?": lambda vals, args: vals.boolean(vals.tag(args[0]) == TAG_PAIR),
    "length": lambda vals, args: vals.number(len(_list_items(vals, args[0]))),
    "vec": _p_vec,
    "mat": _p_mat,
    "ref": _p_ref,
    "rows": _p_rows,
    "cols": _p_cols,
    "size": lambda vals, args: vals.number(vals.shape(args[0])[0]),
    "eye": _p_eye,
    "zeros": lambda vals, args: _fill(vals, args, 0.0, "zeros"),
    "ones": lambda vals, args: _fill(vals, args, 1.0, "ones"),
    "dot": _p_dot,
    "matvec": _p_matvec,
    "matmul": _p_matmul,
    "transpose": _p_transpose,
    "outer": _p_outer,
    "trace": _p_trace,
    "inv": _p_inv,
    "det": _p_det,
    "logdet": _p_logdet,
    "vsum": lambda vals, args: _sum(vals, vals.elements(args[0]), "vsum"),
}
_PRIMITIVE_NAMES = sorted(_PRIMITIVES)
_PRIMITIVE_IDS = {name: i for i, name in enumerate(_PRIMITIVE_NAMES)}


class TaggedProgram(BaselineProgram):
    """A program run by the tagged-tensor baseline (see the module docstring)."""

    representation = TaggedValues


def compile(source: str) -> TaggedProgram:  # noqa: A001 - mirrors ndvm.compile
    """Read a program for the tagged baseline."""
    return TaggedProgram(source)


__all__ = ["TaggedProgram", "TaggedValues", "compile", "WIDTH", "TAG_NAMES"]
