"""What the proposers know about the NDVM language: primitives with their arities and special forms
(both read from the runtime, :mod:`ndvm.language`), and a scope analysis over the datum trees of
:mod:`proposers.sexpr`.

The analysis serves two purposes:

- :func:`analyze` finds the parameter declarations, the free inputs and every *expression site*
  of a program, with the local variables in scope there and a rough value class, so the
  mutation proposer can edit numeric sub-expressions without breaking scoping;
- :func:`static_problems` reports what is certainly wrong (unknown input names, undeclared or
  unused parameters, wrong arity for a primitive, a malformed special form). It is a cheap
  pre-filter, not a replacement for ``ndvm.compile``, which stays the authority.

Value classes (ordered): ``scalar`` (a number the same for every data point: literals, parameters,
loop counters), ``data`` (broadcasts elementwise with the data-point vectors, e.g. ``(* a x)``),
``other`` (anything else: matrices, lists, procedures, booleans, unknown). Mutations only touch
``scalar`` and ``data`` sites, which keeps shapes compatible in closed-form and iterated-map
programs and leaves the matrix plumbing of state-space models alone.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ndvm import language

from .sexpr import Dotted, Node, Sym

# name -> (min arity, max arity or None for variadic): the runtime's table (native/src/prims.h),
# read through the binding, so the static checks cannot drift from the compiler's arity checks.
PRIMITIVE_ARITY: dict[str, tuple[int, int | None]] = {name: (a.min, a.max) for name, a in language.PRIMITIVES.items()}
PRIMITIVES = frozenset(PRIMITIVE_ARITY)

# The primitives' semantic columns, read from the same table (prims.h's kind and flags):
# elementwise numeric primitives, whose arguments and results are numbers or broadcast arrays;
NUMERIC_OPS = language.primitives_of_kind("numeric")
# primitives whose result is one number whatever the shape of their arguments;
SCALAR_REDUCERS = language.primitives_of_kind("reducer")
# decisions on numbers, whose arguments are tested;
COMPARISONS = language.primitives_of_kind("comparison")
# (primitive, argument indices that are integer counts or indices, not model quantities)
INDEX_ARGS: dict[str, tuple[int, ...]] = {
    name: p.index_args for name, p in language.PRIMITIVE_INFO.items() if p.index_args
}

# The runtime's special-form keywords (native/src/forms.h, reserved ones included, so a program
# using them is reported), plus the auxiliary keywords of cond and case, which are no forms of
# their own but are never inputs either.
AUXILIARY_KEYWORDS = frozenset({"else", "=>"})
SPECIAL_FORMS = language.SPECIAL_FORMS | AUXILIARY_KEYWORDS

CLASS_ORDER = {"scalar": 0, "data": 1, "other": 2}


def join_class(*classes: str) -> str:
    """The least specific of the given value classes (scalar < data < other)."""
    return max(classes, key=CLASS_ORDER.__getitem__) if classes else "scalar"


@dataclass
class ParamDecl:
    name: str
    init: float
    constraint: Node | None  # None, Sym("positive") or [Sym("between"), lo, hi]
    form_index: int


@dataclass
class Site:
    """One expression position of a program."""

    path: tuple[int, ...]  # index of the top-level form, then child indices
    node: Node
    env: dict[str, str]  # local names in scope -> value class ("proc" for procedures)
    context: str  # "value" | "numeric" | "test" | "index" | "head"
    klass: str  # value class of the node
    binds: str | None = None  # the variable this expression initialises (let/loop binding), if any
    in_loop_control: bool = False  # True when the node is part of loop control (see analyze)


@dataclass
class Analysis:
    forms: list[Node]
    params: dict[str, ParamDecl]
    free: set[str]  # free names that are not params nor primitives: inputs
    sites: list[Site]
    control_vars: set[str] = field(default_factory=set)
    problems: list[str] = field(default_factory=list)
    used_params: set[str] = field(default_factory=set)


def _is_sym(node: Node, name: str | None = None) -> bool:
    return isinstance(node, Sym) and (name is None or node == name)


def _formal_names(formals: Node) -> list[str]:
    if isinstance(formals, Sym):
        return [str(formals)]
    if isinstance(formals, list):
        return [str(f) for f in formals if isinstance(f, Sym)]
    if isinstance(formals, Dotted):
        return [str(f) for f in formals.items if isinstance(f, Sym)] + (
            [str(formals.tail)] if isinstance(formals.tail, Sym) else []
        )
    return []


def _mentions(node: Node, names: set[str]) -> bool:
    if isinstance(node, Sym):
        return str(node) in names
    if isinstance(node, list):
        return any(_mentions(x, names) for x in node)
    if isinstance(node, Dotted):
        return any(_mentions(x, names) for x in node.items) or _mentions(node.tail, names)
    return False


def _arith_uses(node: Node, out: set[str]) -> None:
    """Collect symbols used directly as arguments of elementwise numeric primitives."""
    if isinstance(node, list) and node:
        head = node[0]
        if isinstance(head, Sym) and head in NUMERIC_OPS:
            for arg in node[1:]:
                if isinstance(arg, Sym):
                    out.add(str(arg))
        for child in node:
            _arith_uses(child, out)


class _Walker:
    """Walks a program once, recording sites, free names and problems."""

    def __init__(self, forms: list[Node], data_inputs: set[str] | None, require_expression: bool = True):
        self.forms = forms
        self.require_expression = require_expression
        self.params: dict[str, ParamDecl] = {}
        self.free: set[str] = set()
        self.sites: list[Site] = []
        self.problems: list[str] = []
        self.used_params: set[str] = set()
        self.control_vars: set[str] = set()
        self.data_inputs = data_inputs  # None: any free name used in arithmetic counts as data

    # -- classes ---------------------------------------------------------------------------
    def klass(self, node: Node, env: dict[str, str]) -> str:
        if isinstance(node, bool):
            return "other"
        if isinstance(node, (int, float)):
            return "scalar"
        if isinstance(node, Sym):
            name = str(node)
            if name in env:
                return env[name] if env[name] != "proc" else "other"
            if name in self.params:
                return "scalar"
            if name in PRIMITIVES or name in SPECIAL_FORMS:
                return "other"
            if self.data_inputs is None or name in self.data_inputs:
                return "data"
            return "other"
        if isinstance(node, list) and node and isinstance(node[0], Sym) and node[0] not in env:
            head = str(node[0])
            if head in NUMERIC_OPS:
                return join_class(*(self.klass(a, env) for a in node[1:])) if len(node) > 1 else "scalar"
            if head in SCALAR_REDUCERS:
                return "scalar"
        return "other"

    # -- walking ---------------------------------------------------------------------------
    def site(self, path, node, env, context):
        self.sites.append(Site(path, node, dict(env), context, self.klass(node, env)))

    def binding_init(self, name: str, node: Node, path, env) -> None:
        """Walk the initial value of a let/loop binding and remember which variable it initialises."""
        before = len(self.sites)
        self.expr(node, path, env, "value")
        for site in self.sites[before:]:
            if site.path == path:
                site.binds = name

    def ref(self, name: str, env: dict[str, str]) -> None:
        if name in env:
            return
        if name in self.params:
            self.used_params.add(name)
            return
        if name in PRIMITIVES:
            return
        if name in SPECIAL_FORMS:
            self.problems.append(f"special form keyword '{name}' used as a variable")
            return
        self.free.add(name)

    def body(
        self, exprs: list[Node], base_path: tuple[int, ...], start: int, env: dict[str, str], context: str
    ) -> None:
        """A lambda/let body: internal defines first (letrec* scope), then expressions."""
        env = dict(env)
        for expr in exprs:
            if isinstance(expr, list) and len(expr) >= 2 and _is_sym(expr[0], "define"):
                target = expr[1]
                if isinstance(target, Sym):
                    env[str(target)] = "other"
                elif isinstance(target, (list, Dotted)):
                    names = _formal_names(target)
                    if names:
                        env[names[0]] = "proc"
        for k, expr in enumerate(exprs):
            last = k == len(exprs) - 1
            self.expr(expr, base_path + (start + k,), env, context if last else "value")
        if not exprs:
            self.problems.append("empty body")

    def bindings(self, spec: Node, where: str) -> list[list]:
        if not isinstance(spec, list) or not all(
            isinstance(b, list) and len(b) >= 1 and isinstance(b[0], Sym) for b in spec
        ):
            self.problems.append(f"malformed binding list in {where}")
            return []
        return spec

    def lambda_env(self, formals: Node, body: list[Node], env: dict[str, str]) -> dict[str, str]:
        names = _formal_names(formals)
        uses: set[str] = set()
        for b in body:
            _arith_uses(b, uses)
        inner = dict(env)
        for name in names:
            # a formal used in arithmetic is treated as broadcastable data; others are unknown
            inner[name] = "data" if name in uses else "other"
        return inner

    def expr(self, node: Node, path: tuple[int, ...], env: dict[str, str], context: str) -> None:
        if isinstance(node, Sym):
            self.ref(str(node), env)
            self.site(path, node, env, context)
            return
        if not isinstance(node, list):
            if isinstance(node, Dotted):
                self.problems.append("dotted list used as an expression")
            else:
                self.site(path, node, env, context)
            return
        if not node:
            self.problems.append("empty combination ()")
            return
        head = node[0]
        if isinstance(head, Sym) and str(head) not in env and str(head) in SPECIAL_FORMS:
            self.special(str(head), node, path, env, context)
            return
        # a call
        self.site(path, node, env, context)
        if isinstance(head, Sym):
            name = str(head)
            if name not in env and name in self.params:
                self.problems.append(f"'{name}' is a parameter (a number), not a procedure")
            elif name not in env and name not in PRIMITIVE_ARITY:
                self.problems.append(f"unknown operator '{name}'")
            self.ref(name, env)
            if name not in env and name in PRIMITIVE_ARITY:
                lo, hi = PRIMITIVE_ARITY[name]
                n = len(node) - 1
                if n < lo or (hi is not None and n > hi):
                    want = f"{lo}" if lo == hi else (f"at least {lo}" if hi is None else f"{lo} to {hi}")
                    self.problems.append(f"'{name}' takes {want} argument(s), got {n}")
                arg_context = "numeric" if name in NUMERIC_OPS else "test" if name in COMPARISONS else "value"
                index_args = INDEX_ARGS.get(name, ())
                for k, arg in enumerate(node[1:], start=1):
                    self.expr(arg, path + (k,), env, "index" if (k - 1) in index_args else arg_context)
                return
        else:
            self.expr(head, path + (0,), env, "head")
        for k, arg in enumerate(node[1:], start=1):
            self.expr(arg, path + (k,), env, "value")

    def special(self, name: str, node: list, path, env, context) -> None:
        n = len(node)
        if name == "quote":
            if n != 2:
                self.problems.append("quote takes one datum")
            return
        if name in ("else", "=>", "param"):
            self.problems.append(f"'{name}' used out of place")
            return
        if name == "if":
            if n not in (3, 4):
                self.problems.append("if takes a test, a consequent and an optional alternative")
            for k in range(1, n):
                self.expr(node[k], path + (k,), env, "test" if k == 1 else context)
            return
        if name in ("when", "unless"):
            if n < 3:
                self.problems.append(f"{name} needs a test and a body")
            if n >= 2:
                self.expr(node[1], path + (1,), env, "test")
            for k in range(2, n):
                self.expr(node[k], path + (k,), env, context if k == n - 1 else "value")
            return
        if name in ("and", "or"):
            for k in range(1, n):
                self.expr(node[k], path + (k,), env, "test")
            return
        if name == "begin":
            for k in range(1, n):
                self.expr(node[k], path + (k,), env, context if k == n - 1 else "value")
            return
        if name == "cond":
            for k in range(1, n):
                clause = node[k]
                if not isinstance(clause, list) or not clause:
                    self.problems.append("malformed cond clause")
                    continue
                if not _is_sym(clause[0], "else"):
                    self.expr(clause[0], path + (k, 0), env, "test")
                for j in range(1, len(clause)):
                    self.expr(clause[j], path + (k, j), env, context)
            return
        if name == "case":
            if n < 2:
                self.problems.append("case needs a key")
                return
            self.expr(node[1], path + (1,), env, "test")
            for k in range(2, n):
                clause = node[k]
                if not isinstance(clause, list) or len(clause) < 2:
                    self.problems.append("malformed case clause")
                    continue
                for j in range(1, len(clause)):
                    self.expr(clause[j], path + (k, j), env, context)
            return
        if name == "lambda":
            if n < 3:
                self.problems.append("lambda needs formals and a body")
                return
            inner = self.lambda_env(node[1], node[2:], env)
            self.site(path, node, env, context)
            self.body(node[2:], path, 2, inner, "value")
            return
        if name == "define":
            # internal defines are handled by body(); here: a define in expression position
            self.define(node, path, env)
            return
        if name in ("let", "let*", "letrec", "letrec*"):
            if n >= 2 and isinstance(node[1], Sym) and name == "let":  # named let
                loop_name = str(node[1])
                specs = self.bindings(node[2] if n > 2 else None, "named let")
                inner = dict(env)
                for j, b in enumerate(specs):
                    if len(b) == 2:
                        self.binding_init(str(b[0]), b[1], path + (2, j, 1), env)
                for b in specs:
                    inner[str(b[0])] = self.klass(b[1], env) if len(b) == 2 else "other"
                inner[loop_name] = "proc"
                self.body(node[3:], path, 3, inner, context)
                return
            if n < 3:
                self.problems.append(f"{name} needs bindings and a body")
                return
            specs = self.bindings(node[1], name)
            inner = dict(env)
            if name in ("letrec", "letrec*"):
                for b in specs:
                    inner[str(b[0])] = "other"
            for j, b in enumerate(specs):
                if len(b) != 2:
                    self.problems.append(f"binding of {b[0]} in {name} needs exactly one value")
                    continue
                scope = inner if name != "let" else env
                self.binding_init(str(b[0]), b[1], path + (1, j, 1), scope)
                if name != "letrec" and name != "letrec*":
                    inner[str(b[0])] = self.klass(b[1], scope)
            self.body(node[2:], path, 2, inner, context)
            return
        if name == "loop":
            if n < 3:
                self.problems.append("loop needs bindings and a body")
                return
            specs = self.bindings(node[1], "loop")
            inner = dict(env)
            for j, b in enumerate(specs):
                if len(b) != 2:
                    self.problems.append("loop binding needs exactly one value")
                    continue
                self.binding_init(str(b[0]), b[1], path + (1, j, 1), env)
                inner[str(b[0])] = self.klass(b[1], env)
            self.body(node[2:], path, 2, inner, context)
            return
        if name == "recur":
            for k in range(1, n):
                self.expr(node[k], path + (k,), env, "value")
            return
        if name == "do":
            if n < 3 or not isinstance(node[2], list) or not node[2]:
                self.problems.append("malformed do")
                return
            specs = self.bindings(node[1], "do")
            inner = dict(env)
            for j, b in enumerate(specs):
                if len(b) >= 2:
                    self.expr(b[1], path + (1, j, 1), env, "value")
                inner[str(b[0])] = "other"
            for j, b in enumerate(specs):
                if len(b) == 3:
                    self.expr(b[2], path + (1, j, 2), inner, "value")
            self.expr(node[2][0], path + (2, 0), inner, "test")
            for j in range(1, len(node[2])):
                self.expr(node[2][j], path + (2, j), inner, context)
            for k in range(3, n):
                self.expr(node[k], path + (k,), inner, "value")
            return
        self.problems.append(f"the special form '{name}' is not supported by the language")

    def define(self, node: list, path, env) -> None:
        if len(node) < 3:
            self.problems.append("define needs a name and a value")
            return
        target = node[1]
        if isinstance(target, Sym):
            if len(node) != 3:
                self.problems.append(f"define of {target} takes exactly one value")
            self.expr(node[2], path + (2,), env, "value")
            return
        names = _formal_names(target)
        if not names:
            self.problems.append("malformed define")
            return
        formals = Dotted(tuple(target.items[1:]), target.tail) if isinstance(target, Dotted) else target[1:]
        inner = self.lambda_env(formals, node[2:], env)
        inner[names[0]] = "proc"
        self.body(node[2:], path, 2, inner, "value")

    # -- top level -------------------------------------------------------------------------
    def top_level(self) -> list[tuple[tuple[int, ...], Node]]:
        """(path, form) of every top-level form, with top-level ``begin`` spliced as in R7RS."""
        out: list[tuple[tuple[int, ...], Node]] = []

        def visit(form: Node, path: tuple[int, ...]) -> None:
            if isinstance(form, list) and form and _is_sym(form[0], "begin"):
                for k, sub in enumerate(form[1:], start=1):
                    visit(sub, path + (k,))
            else:
                out.append((path, form))

        for i, form in enumerate(self.forms):
            visit(form, (i,))
        return out

    def program(self) -> None:
        top_env: dict[str, str] = {}
        forms = self.top_level()
        for path, form in forms:
            if isinstance(form, list) and form and _is_sym(form[0], "param"):
                if len(path) > 1:
                    self.problems.append("param declarations are only allowed at top level")
                self.param(form, path[0])
        for _, form in forms:
            if isinstance(form, list) and len(form) >= 2 and _is_sym(form[0], "define"):
                target = form[1]
                if isinstance(target, Sym):
                    top_env[str(target)] = "other"
                else:
                    names = _formal_names(target)
                    if names:
                        top_env[names[0]] = "proc"
        # classes of top-level value defines, in order (a define of a numeric expression is usable)
        body_forms = [(path, f) for path, f in forms if not (isinstance(f, list) and f and _is_sym(f[0], "param"))]
        if not body_forms and self.require_expression:
            self.problems.append("the program has no expression to compute")
        for k, (path, form) in enumerate(body_forms):
            last = k == len(body_forms) - 1
            if isinstance(form, list) and form and _is_sym(form[0], "define"):
                self.define(form, path, top_env)
                if isinstance(form[1], Sym) and len(form) == 3:
                    top_env[str(form[1])] = self.klass(form[2], top_env)
                if last and self.require_expression:
                    self.problems.append("the last top-level form is a define: the program computes nothing")
            else:
                self.expr(form, path, top_env, "value")

    def param(self, form: list, index: int) -> None:
        # a trailing `shared` (one value for every group of a grouped fit) is kept on the form as is
        if len(form) in (4, 5) and _is_sym(form[-1], "shared"):
            form = form[:-1]
        if (
            len(form) not in (3, 4)
            or not isinstance(form[1], Sym)
            or isinstance(form[2], bool)
            or not isinstance(form[2], (int, float))
        ):
            self.problems.append(f"malformed parameter declaration {form!r}: use (param name init [constraint])")
            return
        name = str(form[1])
        if name in self.params:
            self.problems.append(f"parameter {name} declared twice")
        constraint = form[3] if len(form) == 4 else None
        self.params[name] = ParamDecl(name, float(form[2]), constraint, index)


def analyze(forms: list[Node], data_inputs: set[str] | None = None, require_expression: bool = True) -> Analysis:
    """Scope analysis of a read program (see module docstring).

    ``require_expression=False`` accepts a program of definitions only: a candidate that a task
    wraps with its own driver (the forecast task appends the expression that uses the definitions).
    """
    walker = _Walker(forms, data_inputs, require_expression)
    walker.program()
    control: set[str] = set()
    for site in walker.sites:
        if site.context in ("test", "index"):
            _collect_locals(site.node, site.env, control)
    # A site is loop control when it mentions a counter/index variable, initialises one, or is an
    # operand next to one (the 1 of (+ k 1)): editing those would break termination or indexing.
    by_path = {site.path: site.node for site in walker.sites}
    for site in walker.sites:
        parent = by_path.get(site.path[:-1])
        site.in_loop_control = (
            _mentions(site.node, control)
            or (site.binds is not None and site.binds in control)
            or (isinstance(parent, list) and any(isinstance(x, Sym) and str(x) in control for x in parent[1:]))
        )
    return Analysis(forms, walker.params, walker.free, walker.sites, control, walker.problems, walker.used_params)


def _collect_locals(node: Node, env: dict[str, str], out: set[str]) -> None:
    if isinstance(node, Sym):
        if str(node) in env:
            out.add(str(node))
    elif isinstance(node, list):
        for x in node:
            _collect_locals(x, env, out)


def static_problems(forms: list[Node], inputs: set[str] | None = None, require_expression: bool = True) -> list[str]:
    """What is certainly wrong with a program, as messages (empty when nothing was found).

    ``inputs``: the task's input names; when given, any other free name is reported as undeclared.
    Declared but unused parameters are reported too: they cannot be identified from data.
    ``require_expression``: see :func:`analyze`.
    """
    result = analyze(forms, require_expression=require_expression)
    problems = list(result.problems)
    if inputs is not None:
        for name in sorted(result.free - set(inputs)):
            problems.append(
                f"undeclared name '{name}': declare it with (param {name} <init>) "
                f"or use only the inputs {sorted(inputs)}"
            )
    for name in sorted(set(result.params) - result.used_params):
        problems.append(f"parameter {name} is declared but never used")
    return problems


__all__ = [
    "PRIMITIVE_ARITY",
    "PRIMITIVES",
    "NUMERIC_OPS",
    "SCALAR_REDUCERS",
    "COMPARISONS",
    "INDEX_ARGS",
    "SPECIAL_FORMS",
    "ParamDecl",
    "Site",
    "Analysis",
    "analyze",
    "static_problems",
    "join_class",
    "structure_key",
]


def structure_key(forms: list[Node]) -> str:
    """An approximate canonical form, for deduplication where ndvm's canonical hash is unavailable.

    Like ndvm's canonical form, inexact literals are abstracted (exact integers are structure: loop
    bounds, indices) and parameters renamed in order of first use with their constraints kept;
    unlike it, local variables keep their names and commutative operands are not reordered, so it
    may tell apart programs that ndvm would call equal (rarely the reverse).
    """
    params = {str(f[1]): f for f in forms if isinstance(f, list) and len(f) >= 3 and _is_sym(f[0], "param")}
    renamed: dict[str, str] = {}

    def walk(node: Node) -> str:
        if isinstance(node, bool):
            return "#t" if node else "#f"
        if isinstance(node, float):
            return "C"
        if isinstance(node, int):
            return str(node)
        if isinstance(node, Sym):
            name = str(node)
            if name in params:
                if name not in renamed:
                    decl = params[name]
                    shared = len(decl) >= 4 and _is_sym(decl[-1], "shared")
                    body = decl[:-1] if shared else decl
                    constraint = walk(body[3]) if len(body) == 4 else ""
                    constraint += " shared" if shared else ""
                    renamed[name] = f"P{len(renamed)}{':' + constraint if constraint else ''}"
                return renamed[name]
            return name
        if isinstance(node, list):
            return "(" + " ".join(walk(x) for x in node) + ")"
        if isinstance(node, Dotted):
            return "(" + " ".join(walk(x) for x in node.items) + " . " + walk(node.tail) + ")"
        return str(node)

    return " ".join(walk(f) for f in forms if not (isinstance(f, list) and f and _is_sym(f[0], "param")))
