"""Readable models: a candidate program rendered as a formula (sympy: text and LaTeX).

``render(source, params)`` reads the program (``ndvm.read``, the runtime's own
reader), evaluates it *symbolically*: parameters and inputs become sympy symbols, ``define``d
values and functions and ``let`` bindings are substituted in place, ``if``/``cond`` become
piecewise expressions. The fitted values replace the parameters, rounded to ``digits`` significant
digits, in ``text``/``latex``; ``symbolic`` keeps the parameter names.

- A **curve** program (its last expression is the prediction) gives ``y = ...``.
- A **forecast** candidate (``init``, ``predict``, ``update``) gives three lines: the initial
  state, ``predict(s)`` and ``update(s, y)``, where a list state ``(list a b)`` is written
  ``s = (s_0, s_1)`` and ``(car s)``/``(cadr s)``/``(ref s i)`` are its components.

Programs that cannot be written as a closed formula (loops, recursion, named ``let``, ``do``,
list processing beyond fixed-length states, matrices) give ``Formula(ok=False, reason=...)``
saying why, never an exception.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

FORECAST_FUNCTIONS = ("init", "predict", "update")
X_RENDERED = 8  # the entries of a forecast candidate's x the formula can name (x_0 .. x_7)


class NotRenderable(Exception):
    """The program has a construct that has no closed-form rendering (the message says which)."""


@dataclass(frozen=True)
class Formula:
    ok: bool
    text: str = ""  # fitted values substituted, rounded
    latex: str = ""
    symbolic: str = ""  # with the parameter names
    reason: str = ""  # why it could not be rendered (ok=False)

    def to_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "text": self.text, "latex": self.latex, "symbolic": self.symbolic, "reason": self.reason}


class _Fn:
    """A user-defined function: called by inlining its body with the arguments substituted."""

    def __init__(self, name: str, formals: list[str], body: list, env: dict):
        self.name, self.formals, self.body, self.env = name, formals, body, env


def _sympy():
    import sympy

    return sympy


class _Renderer:
    def __init__(self, params: list[str]):
        self.sp = _sympy()
        self.params = params
        self.calls: list[str] = []  # stack of user functions being inlined (recursion check)

    def symbol(self, name: str):
        return self.sp.Symbol(name.replace("-", "_"), real=True)

    # ---- evaluation --------------------------------------------------------------------
    def ev(self, node: Any, env: dict) -> Any:
        from ndvm.language import Dotted
        from ndvm.language import Symbol as Sym

        sp = self.sp
        if isinstance(node, bool):
            return sp.true if node else sp.false
        if isinstance(node, int):
            return sp.Integer(node)
        if isinstance(node, float):
            return sp.Float(node)
        if isinstance(node, Sym):
            name = str(node)
            if name in env:
                return env[name]
            return self.symbol(name)  # an input
        if isinstance(node, Dotted):
            raise NotRenderable("rest arguments")
        if not isinstance(node, list) or not node:
            raise NotRenderable(f"the expression {node!r}")
        head, args = node[0], node[1:]
        if isinstance(head, Sym) and str(head) in env and isinstance(env[str(head)], _Fn):
            return self.call(env[str(head)], [self.ev(a, env) for a in args])
        if not isinstance(head, Sym):
            raise NotRenderable("a computed function call")
        name = str(head)
        special = getattr(self, "sf_" + name.replace("*", "_star").replace("-", "_"), None)
        if (
            name in ("let", "let*", "if", "cond", "when", "unless", "begin", "lambda", "and", "or", "quote")
            and special is not None
        ):
            return special(args, env)
        if name in ("loop", "recur", "do", "letrec", "letrec*"):
            raise NotRenderable(f"a loop ({name})")
        if name in env:
            raise NotRenderable(f"a call of the value {name}")
        values = [self.ev(a, env) for a in args]
        return self.prim(name, values)

    def call(self, fn: _Fn, values: list) -> Any:
        if fn.name in self.calls:
            raise NotRenderable(f"recursion ({fn.name} calls itself)")
        if len(values) != len(fn.formals):
            raise NotRenderable(f"{fn.name} called with {len(values)} arguments")
        self.calls.append(fn.name)
        try:
            env = dict(fn.env)
            env.update(zip(fn.formals, values))
            return self.body(fn.body, env)
        finally:
            self.calls.pop()

    def body(self, forms: list, env: dict) -> Any:
        env = dict(env)
        result = None
        for form in forms:
            if self.is_define(form):
                self.define(form, env)
            else:
                result = self.ev(form, env)
        if result is None:
            raise NotRenderable("a body without an expression")
        return result

    @staticmethod
    def is_define(form: Any) -> bool:
        from ndvm.language import Symbol as Sym

        return isinstance(form, list) and len(form) >= 3 and isinstance(form[0], Sym) and form[0] == "define"

    def define(self, form: list, env: dict) -> None:
        from ndvm.language import Dotted
        from ndvm.language import Symbol as Sym

        target = form[1]
        if isinstance(target, list):
            if not target or any(not isinstance(t, Sym) for t in target):
                raise NotRenderable("a definition with unusual formals")
            env[str(target[0])] = _Fn(str(target[0]), [str(t) for t in target[1:]], form[2:], env)
            env[str(target[0])].env = env  # top-level functions see each other (not themselves: recursion check)
        elif isinstance(target, Sym):
            value = form[2]
            if isinstance(value, list) and value and value[0] == "lambda":
                formals = value[1]
                if isinstance(formals, Dotted) or not isinstance(formals, list):
                    raise NotRenderable("a lambda with rest arguments")
                env[str(target)] = _Fn(str(target), [str(t) for t in formals], value[2:], env)
            else:
                env[str(target)] = self.ev(value, env)
        else:
            raise NotRenderable("a malformed definition")

    # ---- special forms -----------------------------------------------------------------
    def sf_let(self, args: list, env: dict) -> Any:
        from ndvm.language import Symbol as Sym

        if args and isinstance(args[0], Sym):
            raise NotRenderable(f"a loop (named let {args[0]})")
        bindings, forms = args[0], args[1:]
        new = dict(env)
        for name, value in bindings:
            new[str(name)] = self.ev(value, env)
        return self.body(forms, new)

    def sf_let_star(self, args: list, env: dict) -> Any:
        bindings, forms = args[0], args[1:]
        new = dict(env)
        for name, value in bindings:
            new[str(name)] = self.ev(value, new)
        return self.body(forms, new)

    def sf_begin(self, args: list, env: dict) -> Any:
        return self.body(args, env)

    def sf_if(self, args: list, env: dict) -> Any:
        sp = self.sp
        cond = self.ev(args[0], env)
        yes = self.ev(args[1], env)
        no = self.ev(args[2], env) if len(args) > 2 else None
        if cond is sp.true or cond is True:
            return yes
        if cond is sp.false or cond is False:
            if no is None:
                raise NotRenderable("a one-armed if")
            return no
        if no is None:
            raise NotRenderable("a one-armed if")
        if isinstance(yes, tuple) or isinstance(no, tuple):
            raise NotRenderable("a branch between states")
        return sp.Piecewise((yes, cond), (no, True))

    def sf_cond(self, args: list, env: dict) -> Any:
        from ndvm.language import Symbol as Sym

        sp = self.sp
        pieces = []
        for clause in args:
            if isinstance(clause[0], Sym) and clause[0] == "else":
                pieces.append((self.body(clause[1:], env), True))
                break
            pieces.append((self.body(clause[1:], env), self.ev(clause[0], env)))
        if not pieces or pieces[-1][1] is not True:
            raise NotRenderable("a cond without else")
        return sp.Piecewise(*pieces)

    def sf_and(self, args: list, env: dict) -> Any:
        return self.sp.And(*[self.ev(a, env) for a in args])

    def sf_or(self, args: list, env: dict) -> Any:
        return self.sp.Or(*[self.ev(a, env) for a in args])

    def sf_when(self, args: list, env: dict) -> Any:
        raise NotRenderable("when (a one-armed conditional)")

    sf_unless = sf_when

    def sf_lambda(self, args: list, env: dict) -> Any:
        raise NotRenderable("a lambda used as a value")

    def sf_quote(self, args: list, env: dict) -> Any:
        raise NotRenderable("a quoted datum")

    # ---- primitives ----------------------------------------------------------------------
    def prim(self, name: str, v: list) -> Any:
        sp = self.sp
        if any(isinstance(x, tuple) for x in v) and name not in (
            "car",
            "cdr",
            "cadr",
            "caddr",
            "cadddr",
            "ref",
            "list-ref",
            "list",
            "vec",
            "cons",
        ):
            raise NotRenderable(f"{name} of a list or vector")
        table: dict[str, Callable[..., Any]] = {
            "exp": sp.exp,
            "sqrt": sp.sqrt,
            "sin": sp.sin,
            "cos": sp.cos,
            "tan": sp.tan,
            "tanh": sp.tanh,
            "asin": sp.asin,
            "acos": sp.acos,
            "abs": sp.Abs,
            "square": lambda a: a**2,
            "sigmoid": lambda a: 1 / (1 + sp.exp(-a)),
            "logistic": lambda a: 1 / (1 + sp.exp(-a)),
            "softplus": lambda a: sp.log(1 + sp.exp(a)),
            "expt": lambda a, b: a**b,
            "exact->inexact": lambda a: a,
            "inexact": lambda a: a,
            "floor": sp.floor,
            "ceiling": sp.ceiling,
        }
        if name in table:
            return table[name](*v)
        if name == "+":
            return sp.Add(*v) if v else sp.Integer(0)
        if name == "*":
            return sp.Mul(*v) if v else sp.Integer(1)
        if name == "-":
            return -v[0] if len(v) == 1 else v[0] - sp.Add(*v[1:])
        if name == "/":
            return 1 / v[0] if len(v) == 1 else v[0] / sp.Mul(*v[1:])
        if name == "log":
            return sp.log(v[0]) if len(v) == 1 else sp.log(v[0]) / sp.log(v[1])
        if name == "atan":
            return sp.atan(v[0]) if len(v) == 1 else sp.atan2(v[0], v[1])
        if name in ("min", "max"):
            return (sp.Min if name == "min" else sp.Max)(*v)
        if name in ("<", ">", "<=", ">=", "="):
            ops = {"<": sp.Lt, ">": sp.Gt, "<=": sp.Le, ">=": sp.Ge, "=": sp.Eq}
            return sp.And(*[ops[name](a, b) for a, b in zip(v, v[1:])])
        if name in ("list", "vec"):
            return tuple(v)
        if name == "cons" and isinstance(v[1], tuple):
            return (v[0],) + v[1]
        if name in ("car", "cadr", "caddr", "cadddr"):
            index = {"car": 0, "cadr": 1, "caddr": 2, "cadddr": 3}[name]
            return self.element(v[0], index, name)
        if name == "cdr" and isinstance(v[0], tuple):
            return v[0][1:]
        if name in ("ref", "list-ref") and len(v) == 2 and v[1].is_Integer:
            return self.element(v[0], int(v[1]), name)
        raise NotRenderable(f"the primitive {name}")

    @staticmethod
    def element(value: Any, index: int, name: str) -> Any:
        if not isinstance(value, tuple) or index >= len(value):
            raise NotRenderable(f"{name} of something that is not a fixed-length state")
        return value[index]


def _fmt(sp, expr: Any, values: dict | None, digits: int) -> tuple[str, str]:
    """(text, LaTeX) with ``values`` substituted and every float rounded to ``digits`` significant digits."""
    if values:
        expr = expr.xreplace(values)
    if hasattr(expr, "atoms"):
        expr = expr.xreplace({f: sp.Float(f"{float(f):.{digits}g}") for f in expr.atoms(sp.Float)})
    return sp.sstr(expr, full_prec=False), sp.latex(expr)


def _read_program(source: str, params: dict[str, float] | None) -> tuple[Any, _Renderer, dict, dict, Any]:
    """(sympy, renderer, top-level environment, parameter symbol -> fitted value, the final
    expression or None) of ``source``: its parameters become symbols, its definitions are bound."""
    from ndvm.language import Symbol as Sym
    from ndvm.language import read

    sp = _sympy()
    forms = read(source)
    decls = [f for f in forms if isinstance(f, list) and f and isinstance(f[0], Sym) and f[0] == "param"]
    names = [str(f[1]) for f in decls]
    r = _Renderer(names)
    env: dict[str, Any] = {n: r.symbol(n) for n in names}
    values = {r.symbol(n): sp.Float(params[n]) for n in names if params and n in params}
    top_env = dict(env)
    last = None
    for form in (f for f in forms if f not in decls):
        if r.is_define(form):
            r.define(form, top_env)
        else:
            last = form
    return sp, r, top_env, values, last


def _is_forecast(top_env: dict, last: Any) -> bool:
    defined = {k for k, v in top_env.items() if isinstance(v, _Fn)}
    return last is None and all(fn in defined for fn in FORECAST_FUNCTIONS)


def expressions(source: str, params: dict[str, float] | None = None) -> dict[str, Any]:
    """``source`` as sympy expressions, the fitted ``params`` substituted (not rounded): ``{"y":
    expr}`` for a curve or a table's model, ``{"init", "predict", "update"}`` for a forecast
    candidate (its state ``s`` or ``s_0, s_1, ...``, the observation ``y``, what is observed with
    it ``x_0, x_1, ...``; a list state is a tuple). Raises ``NotRenderable`` (or the reader's ``ParseError``) where ``render`` says why not."""
    sp, r, top_env, values, last = _read_program(source, params)

    def fitted(expr: Any) -> Any:
        if isinstance(expr, tuple):
            return tuple(fitted(e) for e in expr)
        return expr.xreplace(values) if values and hasattr(expr, "xreplace") else expr

    if _is_forecast(top_env, last):
        init, predict, update = _forecast_parts(r, sp, top_env)
        return {"init": fitted(init), "predict": fitted(predict), "update": fitted(update)}
    if last is None:
        raise NotRenderable("no final expression and no init/predict/update functions")
    expr = r.ev(last, top_env)
    if isinstance(expr, tuple):
        raise NotRenderable("a list or vector result")
    return {"y": fitted(expr)}


def render(source: str, params: dict[str, float] | None = None, digits: int = 4) -> Formula:
    """The formula of ``source`` (see the module docstring); ``params`` are the fitted values."""
    from ndvm.errors import ParseError

    try:
        sp, r, top_env, values, last = _read_program(source, params)
        if _is_forecast(top_env, last):
            return _render_forecast(r, sp, top_env, values, digits)
        if last is None:
            raise NotRenderable("no final expression and no init/predict/update functions")
        expr = r.ev(last, top_env)
        if isinstance(expr, tuple):
            raise NotRenderable("a list or vector result")
        text, latex = _fmt(sp, expr, values, digits)
        symbolic = sp.sstr(expr)
        return Formula(True, f"y = {text}", f"y = {latex}", f"y = {symbolic}")
    except NotRenderable as exc:
        return Formula(False, reason=f"not rendered as a formula: {exc}")
    except (ParseError, RecursionError, TypeError, ValueError, AttributeError, IndexError) as exc:
        return Formula(False, reason=f"not rendered as a formula: {type(exc).__name__}: {exc}")


def _forecast_parts(r: _Renderer, sp, env: dict) -> tuple[Any, Any, Any]:
    """(init, predict(s), update(s, y)) of a forecast candidate, over the state symbols."""
    init = r.call(env["init"], [])
    if isinstance(init, tuple):
        state = tuple(sp.Symbol(f"s_{i}", real=True) for i in range(len(init)))
    else:
        state = sp.Symbol("s", real=True)
    y = sp.Symbol("y", real=True)
    predict = r.call(env["predict"], [state])
    # (update s y x): x is the forecast task's vec of what is observed with y (calendar position,
    # covariates; datasets/tasks/forecast_inputs.py), rendered as x_0, x_1, ... (as many as a
    # candidate may read; only those it uses appear)
    takes_x = len(env["update"].formals) == 3
    x = tuple(sp.Symbol(f"x_{i}", real=True) for i in range(X_RENDERED))
    update = r.call(env["update"], [state, y, x] if takes_x else [state, y])
    if isinstance(predict, tuple):
        raise NotRenderable("predict returns a list")
    if isinstance(update, tuple) != isinstance(init, tuple) or (isinstance(update, tuple) and len(update) != len(init)):
        raise NotRenderable("update returns a state of another shape than init")
    return init, predict, update


def _render_forecast(r: _Renderer, sp, env: dict, values: dict, digits: int) -> Formula:
    init, predict, update = _forecast_parts(r, sp, env)
    takes_x = len(env["update"].formals) == 3
    if isinstance(init, tuple):
        state_text = "s = (" + ", ".join(f"s_{i}" for i in range(len(init))) + ")"
    else:
        state_text = "s"

    def fmt(expr):
        if isinstance(expr, tuple):
            parts = [_fmt(sp, e, values, digits) for e in expr]
            return "(" + ", ".join(p[0] for p in parts) + ")", r"\left(" + ", ".join(p[1] for p in parts) + r"\right)"
        return _fmt(sp, expr, values, digits)

    def sym(expr):
        return "(" + ", ".join(sp.sstr(e) for e in expr) + ")" if isinstance(expr, tuple) else sp.sstr(expr)

    (i_t, i_l), (p_t, p_l), (u_t, u_l) = fmt(init), fmt(predict), fmt(update)
    s_latex = (
        r"\left(" + ", ".join(f"s_{{{i}}}" for i in range(len(init))) + r"\right)" if isinstance(init, tuple) else "s"
    )
    args = "s, y, x" if takes_x else "s, y"
    text = f"state {state_text}; init = {i_t}; predict(s) = {p_t}; update({args}) = {u_t}"
    latex = (
        r"\begin{aligned}"
        f"s_{{\\mathrm{{init}}}} &= {i_l}\\\\ \\hat y(s) &= {p_l}\\\\ "
        f"\\mathrm{{update}}({s_latex}, y{', x' if takes_x else ''}) &= {u_l}"
        r"\end{aligned}"
    )
    symbolic = f"init = {sym(init)}; predict(s) = {sym(predict)}; update({args}) = {sym(update)}"
    return Formula(True, text, latex, symbolic)


__all__ = ["expressions", "render", "Formula", "NotRenderable"]
