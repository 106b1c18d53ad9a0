"""Simplification of proposed programs, so that bloat does not crowd the Pareto front.

:func:`simplify` rewrites the S-expression forms of a program (``proposers.sexpr``) until nothing
changes, with three rules that keep the model's values:

1. **Constant folding**: a call of a pure numeric primitive (``+ - * / exp log sqrt sin ...``)
   whose arguments are all number literals, at least one inexact, becomes its value as the runtime
   computes it (evaluated by ``ndvm`` itself, so the bits are the runtime's; non-finite results are
   left alone). Exact-integer arithmetic is left alone too: integers are structure (counts, indices).
   Neutral elements are dropped: ``(+ e 0.0)``, ``(- e 0.0)``, ``(* e 1.0)``, ``(/ e 1.0)`` become
   ``e``, ``(* a 1.0 x)`` becomes ``(* a x)``.
2. **A function of lone parameters becomes a parameter**: when a pure numeric expression ``E``
   uses parameters (and literals) only, and none of those parameters occurs anywhere else, ``E``
   is replaced by its first parameter ``p``, re-declared with initial value E(inits) and the range
   of ``E``'s outermost function as its constraint (``exp``, ``softplus``: positive; ``sigmoid``,
   ``logistic``: unit; ``sin``, ``cos``, ``tanh``: between -1 and 1; otherwise none); the other
   parameters of ``E`` become unused. The model family is the same: the new ``p`` takes exactly the
   values ``E`` could take. ``(* 3.0 p)``, ``(sin phi)``, ``(exp (- k))``, ``(* p1 p2)`` all
   become one parameter.
3. **Unused parameters are dropped**: a declaration no expression refers to.
4. **Identities that hold wherever the value is finite**: inside a pure expression a zero term
   (``(* ... 0.0 ...)``, ``(/ 0.0 ...)``, ``(- u u)``: the mutation engine's "multiply by 0.0"
   leaves them, with their parameters) becomes ``0.0`` and a factor ``(/ u u)`` ``1.0``, when the
   expression still reads every input it read (the shape of its value stays); rule 1 then drops
   the neutral element. ``(exp (log u))`` and ``(log (exp u))`` become ``u``. Two or more constant arguments of a
   sum or product whose parameters occur nowhere else (``(+ a b x)``) are grouped, and rule 2
   makes them one parameter: constants that cannot be told apart are merged.

A parameter that is also bound locally somewhere (a ``let`` or a formal with its name) is left
alone by rule 2: its occurrences are not all the parameter. The outermost such ``E`` is rewritten
first, one at a time, until none is left.

The result carries ``changes`` (what was done) and ``param_map``: for each rewritten parameter,
the expression of the old parameters it stands for, so ``map_params`` turns old parameter values
into new ones (the tests check values before and after at random parameters this way).
"""

from __future__ import annotations

import copy
import functools
import math
from dataclasses import dataclass, field
from typing import Any

from ndvm import language

from .sexpr import Dotted, Node, Sym, symbols_in, to_str

# What the runtime's primitive table (native/src/prims.h) says of each primitive: whether it may
# be evaluated on literals (rule 1, rule 2) and the range of its values (rule 2's constraint).
FOLDABLE = frozenset(name for name, p in language.PRIMITIVE_INFO.items() if p.foldable)
RANGE_CONSTRAINT: dict[str, Node] = {
    name: p.range_constraint for name, p in language.PRIMITIVE_INFO.items() if p.range_constraint is not None
}
BINDERS = frozenset({"let", "let*", "letrec", "letrec*", "lambda", "define", "do", "loop"})


@dataclass
class Simplified:
    forms: list[Node]
    changes: list[str] = field(default_factory=list)
    # new parameter name -> the expression (over the old parameters) whose value it takes
    param_map: dict[str, Node] = field(default_factory=dict)

    @property
    def changed(self) -> bool:
        return bool(self.changes)

    @property
    def param_names(self) -> list[str]:
        """The parameters the simplified program declares, in order."""
        return [str(f[1]) for f in self.forms if _is_param_decl(f)]


def _is_num(node: Node) -> bool:
    return isinstance(node, (int, float)) and not isinstance(node, bool)


def _is_param_decl(form: Node) -> bool:
    return isinstance(form, list) and len(form) >= 3 and form[0] == "param" and isinstance(form[0], Sym)


@functools.lru_cache(maxsize=4096)
def _evaluate(text: str) -> float | None:
    """The runtime's value of a closed numeric expression, or None (error, non-number, non-finite)."""
    import ndvm

    try:
        value = ndvm.compile(text).run()
    except ndvm.NDVMError:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(float(value)):
        return None
    return float(value)


def _bound_names(node: Node, out: set[str]) -> None:
    """Every name bound locally anywhere (let/lambda/define formals and names, loop variables)."""
    if isinstance(node, Dotted):
        for x in node.items:
            _bound_names(x, out)
        return
    if not isinstance(node, list) or not node:
        return
    head = node[0]
    if isinstance(head, Sym) and head in BINDERS and len(node) >= 2:
        spec = node[1]
        if isinstance(spec, Sym):
            out.add(str(spec))
            spec = node[2] if head == "let" and len(node) > 2 else None  # named let: bindings next
        if isinstance(spec, (list, Dotted)):
            items = spec.items if isinstance(spec, Dotted) else spec
            for item in items:
                if isinstance(item, Sym):
                    out.add(str(item))
                elif isinstance(item, list) and item and isinstance(item[0], Sym):
                    out.add(str(item[0]))
            if isinstance(spec, Dotted) and isinstance(spec.tail, Sym):
                out.add(str(spec.tail))
    for x in node:
        _bound_names(x, out)


def _pure(node: Node, shadowed: set[str]) -> bool:
    """A pure numeric expression: literals, names and calls of pure numeric primitives on them."""
    if isinstance(node, Sym) or _is_num(node):
        return True
    return (
        isinstance(node, list)
        and bool(node)
        and isinstance(node[0], Sym)
        and node[0] in FOLDABLE
        and str(node[0]) not in shadowed
        and all(_pure(x, shadowed) for x in node[1:])
    )


def _call_of(node: Node, head: str, shadowed: set[str]) -> bool:
    return (
        isinstance(node, list) and bool(node) and node[0] == head and isinstance(node[0], Sym) and head not in shadowed
    )


def _is_zero_term(node: Node, shadowed: set[str]) -> bool:
    """``(* ... 0.0 ...)``, ``(/ 0.0 ...)`` and ``(- u u)`` of pure expressions: zero wherever finite."""
    if not _pure(node, shadowed) or not isinstance(node, list) or len(node) < 3:
        return False
    if _call_of(node, "*", shadowed) and any(isinstance(a, float) and a == 0.0 for a in node[1:]):
        return True
    if _call_of(node, "/", shadowed) and isinstance(node[1], float) and node[1] == 0.0:
        return True
    return _call_of(node, "-", shadowed) and len(node) == 3 and to_str(node[1]) == to_str(node[2])


def _is_one_factor(node: Node, shadowed: set[str]) -> bool:
    """``(/ u u)`` of a pure expression: one wherever finite."""
    return (
        _call_of(node, "/", shadowed)
        and len(node) == 3  # type: ignore[arg-type]
        and _pure(node, shadowed)
        and to_str(node[1]) == to_str(node[2])  # type: ignore[index]
    )


def _reads(node: Node, params: frozenset[str]) -> set[str]:
    """The names ``node`` reads besides parameters and primitives: inputs and locals (vectors, maybe)."""
    return {n for n in symbols_in(node) if n not in params and n not in FOLDABLE}


def _outermost_pure(node: Node, path: tuple, shadowed: set[str]):
    """(path, expression) of every pure call not inside a larger pure one."""
    if not isinstance(node, list) or not node:
        return
    if _pure(node, shadowed) and isinstance(node[0], Sym):
        yield path, node
        return
    for i, x in enumerate(node):
        yield from _outermost_pure(x, path + (i,), shadowed)


def _constant_identity(forms: list[Node], shadowed: set[str], changes: list[str], params: frozenset[str]) -> bool:
    """Replace one zero term (``(* ... 0.0 ...)``, ``(/ 0.0 ...)``, ``(- u u)``) by 0.0 or one
    factor ``(/ u u)`` by 1.0 inside a pure expression that still reads every input it read
    afterwards: the value is the same wherever it was finite and its shape (the broadcast of the
    inputs read) is kept. Constant folding then drops the neutral element, and rule 3 the
    parameters that went with the term."""
    for j, form in enumerate(forms):
        if _is_param_decl(form):
            continue
        for root_path, root in _outermost_pure(form, (j,), shadowed):
            reads = _reads(root, params)
            for path, expr in _paths(root, ()):
                if not path:
                    continue  # the whole expression: its value (and shape) is all there is
                value = 0.0 if _is_zero_term(expr, shadowed) else 1.0 if _is_one_factor(expr, shadowed) else None
                if value is None:
                    continue
                trial = copy.deepcopy(root)
                _set(trial, path, value)
                if _reads(trial, params) != reads:
                    continue
                _set(forms, root_path + path, value)
                changes.append(f"{to_str(expr)} became {value!r}")
                return True
    return False


def _fold(node: Node, shadowed: set[str], changes: list[str], params: frozenset[str] = frozenset()) -> Node:
    if not isinstance(node, list) or not node:
        return node
    if node[0] == "quote" and isinstance(node[0], Sym):
        return node
    node = [node[0]] + [_fold(x, shadowed, changes, params) for x in node[1:]]
    head = node[0]
    if not (isinstance(head, Sym) and head in FOLDABLE and str(head) not in shadowed):
        return node
    args = node[1:]
    if args and all(_is_num(a) for a in args) and any(isinstance(a, float) for a in args):
        value = _evaluate(to_str(node))
        if value is not None:
            changes.append(f"folded {to_str(node)} -> {value!r}")
            return value
        return node
    # inexact neutral elements: 0.0 in + (anywhere) and - (after the first argument), 1.0 in * and /
    neutral = {"+": 0.0, "-": 0.0, "*": 1.0, "/": 1.0}.get(str(head))
    if neutral is not None and len(args) >= 2:
        first = 0 if head in ("+", "*") else 1  # (- 0.0 e) negates, (/ 1.0 e) inverts: keep those
        kept = args[:first] + [a for a in args[first:] if not (isinstance(a, float) and a == neutral)]
        # something must stay that is not a literal, so exactness and shape come from it
        if len(kept) < len(args) and kept and any(not _is_num(a) for a in kept):
            changes.append(f"dropped the neutral {neutral!r} of {head}")
            return kept[0] if len(kept) == 1 else [head] + kept
    # exp(log u) and log(exp u): u wherever they are finite
    inverse = {"exp": "log", "log": "exp"}.get(str(head))
    if inverse is not None and len(args) == 1 and _call_of(args[0], inverse, shadowed) and len(args[0]) == 2:  # type: ignore[arg-type]
        changes.append(f"{head} of {inverse} u became u")
        return args[0][1]  # type: ignore[index]
    return node


def _occurrences(node: Node, name: str) -> int:
    if isinstance(node, Sym):
        return int(node == name)
    if isinstance(node, list):
        return sum(_occurrences(x, name) for x in node)
    if isinstance(node, Dotted):
        return sum(_occurrences(x, name) for x in node.items) + _occurrences(node.tail, name)
    return 0


def _pure_params(node: Node, params: set[str], shadowed: set[str]) -> set[str] | None:
    """The parameters of ``node`` when it is a pure numeric expression of parameters and literals
    only (no input, no local variable), else None."""
    if isinstance(node, Sym):
        return {str(node)} if str(node) in params else None
    if _is_num(node):
        return set()
    if (
        isinstance(node, list)
        and node
        and isinstance(node[0], Sym)
        and node[0] in FOLDABLE
        and str(node[0]) not in shadowed
    ):
        out: set[str] = set()
        for x in node[1:]:
            sub = _pure_params(x, params, shadowed)
            if sub is None:
                return None
            out |= sub
        return out
    return None


def _paths(node: Node, path: tuple):
    """Every list sub-expression with its path, outermost first."""
    if isinstance(node, list) and node:
        yield path, node
        for i, x in enumerate(node):
            yield from _paths(x, path + (i,))


def _set(forms: list, path: tuple, value: Node) -> None:
    node: Any = forms
    for i in path[:-1]:
        node = node[i]
    node[path[-1]] = value


def _substitute(node: Node, mapping: dict[str, Node]) -> Node:
    if isinstance(node, Sym) and str(node) in mapping:
        return copy.deepcopy(mapping[str(node)])
    if isinstance(node, list):
        return [_substitute(x, mapping) for x in node]
    return node


def _lone_parameter(forms: list[Node], shadowed: set[str], changes: list[str], param_map: dict[str, Node]) -> bool:
    """Rewrite the outermost pure expression E of parameters that occur nowhere outside E into
    one parameter (the first of them in declaration order); the others become unused."""
    decls = {str(f[1]): k for k, f in enumerate(forms) if _is_param_decl(f) and str(f[1]) not in shadowed}
    if not decls:
        return False
    totals = {name: sum(_occurrences(f, name) for k, f in enumerate(forms) if k != decls[name]) for name in decls}
    for j, form in enumerate(forms):
        if _is_param_decl(form):
            continue
        for path, expr in _paths(form, (j,)):
            used = _pure_params(expr, set(decls), shadowed)
            if not used or any(_occurrences(expr, p) != totals[p] for p in used):
                continue
            inits = {}
            for p in used:
                init = forms[decls[p]][2]
                if not _is_num(init):
                    break
                inits[p] = float(init)
            else:
                value = _evaluate(to_str(_substitute(expr, inits)))
                constraint = RANGE_CONSTRAINT.get(str(expr[0]))
                if (
                    value is None
                    or (constraint == Sym("positive") and not value > 0)
                    or (constraint == Sym("unit") and not 0 < value < 1)
                    or (isinstance(constraint, list) and not -1 < value < 1)
                ):
                    continue
                name = min(used, key=lambda p: decls[p])
                before = to_str(expr)
                # the new parameter stands for expr of the old ones (composed with earlier rewrites)
                param_map[name] = _substitute(expr, {p: param_map.get(p, Sym(p)) for p in used})
                for p in used - {name}:
                    param_map.pop(p, None)
                _set(forms, path, Sym(name))
                forms[decls[name]] = [Sym("param"), Sym(name), value] + (
                    [copy.deepcopy(constraint)] if constraint is not None else []
                )
                what = (
                    "lone parameter"
                    if len(used) == 1
                    else "parameters " + ", ".join(sorted(used)) + " (used nowhere else)"
                )
                changes.append(f"{before} of the {what} became the parameter {name}")
                return True
    return False


def _group_lone_arguments(forms: list[Node], shadowed: set[str], changes: list[str]) -> None:
    """``(+ a b x)`` with ``a`` and ``b`` used nowhere else becomes ``(+ (+ a b) x)`` (likewise
    for ``*``), which rule 2 then makes one parameter: two constants of a sum cannot be told apart."""
    decls = {str(f[1]): k for k, f in enumerate(forms) if _is_param_decl(f) and str(f[1]) not in shadowed}
    if len(decls) < 2:
        return
    totals = {name: sum(_occurrences(f, name) for k, f in enumerate(forms) if k != decls[name]) for name in decls}
    for j, form in enumerate(forms):
        if _is_param_decl(form):
            continue
        for path, expr in list(_paths(form, (j,))):
            if not (_call_of(expr, "+", shadowed) or _call_of(expr, "*", shadowed)) or len(expr) < 4:
                continue
            group = [a for a in expr[1:] if _pure_params(a, set(decls), shadowed)]
            used = set().union(*(_pure_params(a, set(decls), shadowed) or set() for a in group)) if group else set()
            inside = {p: sum(_occurrences(a, p) for a in group) for p in used}
            if len(group) < 2 or len(group) == len(expr) - 1 or any(inside[p] != totals[p] for p in used):
                continue
            rest = [a for a in expr[1:] if not any(a is g for g in group)]
            _set(forms, path, [expr[0], [expr[0], *group], *rest])
            changes.append(f"grouped the constant arguments {', '.join(map(to_str, group))} of {expr[0]}")
            return


def simplify(forms: list[Node], max_rounds: int = 20) -> Simplified:
    """Simplify a program's top-level forms (a new list; the input is not modified)."""
    forms = copy.deepcopy(list(forms))
    changes: list[str] = []
    param_map: dict[str, Node] = {}
    for _ in range(max_rounds):
        before = len(changes)
        shadowed: set[str] = set()
        for f in forms:
            _bound_names(f, shadowed)
        # names defined at top level (define f ...) shadow primitives too
        params = frozenset(str(f[1]) for f in forms if _is_param_decl(f))
        forms = [f if _is_param_decl(f) else _fold(f, shadowed, changes, params) for f in forms]
        while _constant_identity(forms, shadowed, changes, params):
            pass
        _group_lone_arguments(forms, shadowed, changes)
        while _lone_parameter(forms, shadowed, changes, param_map):
            pass
        used: set[str] = set()
        for f in forms:
            if not _is_param_decl(f):
                used |= symbols_in(f)
        kept = []
        for f in forms:
            if _is_param_decl(f) and str(f[1]) not in used:
                changes.append(f"dropped the unused parameter {f[1]}")
                param_map.pop(str(f[1]), None)
                continue
            kept.append(f)
        forms = kept
        if len(changes) == before:
            break
    return Simplified(forms, changes, param_map)


def map_params(result: Simplified, old: dict[str, float]) -> dict[str, float]:
    """New parameter values that make the simplified program compute what the old one did at ``old``."""
    new_names = [str(f[1]) for f in result.forms if _is_param_decl(f)]
    out: dict[str, float] = {}
    for name in new_names:
        if name in result.param_map:
            expr = _substitute(result.param_map[name], {k: float(v) for k, v in old.items()})
            value = _evaluate(to_str(expr))
            if value is None:
                raise ValueError(f"parameter {name}: {to_str(result.param_map[name])} has no finite value at {old}")
            out[name] = value
        else:
            out[name] = float(old[name])
    return out


def simplify_source(source: str) -> tuple[str, Simplified | None]:
    """(the simplified text, the result) of a candidate's source; (source, None) when it does not
    read (the store records it invalid with the runtime's error) or nothing changes."""
    from .sexpr import SexprError, read_all, to_source

    try:
        result = simplify(read_all(source))
    except (SexprError, RecursionError, ValueError, TypeError, IndexError):  # (a form the rules do not expect:
        return source, None  # the text goes to the store unchanged, which compiles it or records why not)
    if not result.changed:
        return source, None
    return to_source(result.forms), result


__all__ = ["simplify", "simplify_source", "Simplified", "map_params", "FOLDABLE", "RANGE_CONSTRAINT"]
