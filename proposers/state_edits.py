"""Edits that grow a state-space forecaster: the mutation proposer's ``state_term`` operator.

A forecast candidate defines ``(init)``, ``(predict s)`` and ``(update s y)`` or ``(update s y x)``
(datasets/tasks/forecast.py; ``x`` holds the calendar position and the declared covariates,
datasets/tasks/forecast_inputs.py). The grammar operators edit numbers inside these functions but
cannot give the state a new element, so from a reference parent (AR(p), damped persistence,
seasonal AR) they never reach AR(p+1), a persistence that follows the season, or a covariate term.
:func:`grow_state` does, in one edit that keeps the three functions consistent:

- ``lag``: the state keeps one more past value (the oldest lag, delayed once more) and ``predict``
  adds ``p * lag``: AR(p) -> AR(p+1), damped persistence -> an AR(2) around its level;
- ``calendar``: the state keeps the calendar position of the last observation, ``(ref x i)``, and
  ``predict`` adds a seasonal term ``a cos(b + 2 pi c / period)``, or multiplies the newest value by
  it (a lag-1 coefficient that follows the season, ENSO's seasonal growth rate);
- ``covariate``: the state keeps a covariate observed with the last value and ``predict`` adds
  ``p * covariate``;
- ``damp``: ``predict`` becomes ``m + d (forecast - m)``, ``d`` in (0, 1): multi-step forecasts
  decay toward a level ``m``.

A state built by ``(list ...)`` in both ``init`` and ``update`` gets the new element appended, so
every existing position keeps its meaning; any other state (a number, a ``cons``) becomes
``(list old new)``, the old state read as ``(car s)``. New coefficients start at 0 (amplitudes at a
small value, so the phase has a gradient): the edited program starts from its parent's forecasts.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass

from .sexpr import Node, Sym, symbols_in

# Forms that bind names: a state parameter rebound inside a body cannot be rewritten safely.
_BINDERS = ("let", "let*", "letrec", "letrec*", "lambda", "define", "do", "loop")
# (car s), (cadr s), (caddr s), (cadddr s): positions 0..3 of a list state
_CXR = {"car": 0, "cadr": 1, "caddr": 2, "cadddr": 3}
VARIANTS = ("lag", "calendar", "covariate", "damp")


@dataclass
class _Function:
    """One of the three functions: its form, its parameter names, its (single) body."""

    form: list
    params: list[str]

    @property
    def body(self) -> Node:
        return self.form[2]

    @body.setter
    def body(self, value: Node) -> None:
        self.form[2] = value


def _function(forms: list[Node], name: str, arities: tuple[int, ...]) -> _Function | None:
    for form in forms:
        if (
            isinstance(form, list)
            and len(form) == 3  # one body expression (internal defines: left alone)
            and form[0] == Sym("define")
            and isinstance(form[1], list)
            and form[1]
            and form[1][0] == Sym(name)
            and all(isinstance(p, Sym) for p in form[1][1:])
        ):
            params = [str(p) for p in form[1][1:]]
            return _Function(form, params) if len(params) in arities else None
    return None


def _rebinds(node: Node, name: str) -> bool:
    """Whether ``name`` is bound anywhere inside ``node`` (a let, a lambda, an internal define)."""
    if not isinstance(node, list) or not node:
        return False
    if isinstance(node[0], Sym) and str(node[0]) in _BINDERS and len(node) > 1 and name in symbols_in(node[1]):
        return True
    return any(_rebinds(x, name) for x in node)


def _substitute(node: Node, name: str, value: Node) -> Node:
    if isinstance(node, Sym) and str(node) == name:
        return _copy(value)
    if isinstance(node, list):
        return [_substitute(x, name, value) for x in node]
    return node


def _copy(node: Node) -> Node:
    return [_copy(x) for x in node] if isinstance(node, list) else node


def _is_list(node: Node) -> bool:
    return isinstance(node, list) and bool(node) and node[0] == Sym("list")


def _position(node: Node, state: str) -> int | None:
    """The list position ``node`` reads from the state ``state``: (car s), (cadr s), (list-ref s k)."""
    if not (isinstance(node, list) and node and isinstance(node[0], Sym)):
        return None
    head = str(node[0])
    if head in _CXR and len(node) == 2 and node[1] == Sym(state):
        return _CXR[head]
    if head in ("list-ref", "ref") and len(node) == 3 and node[1] == Sym(state):
        k = node[2]
        if isinstance(k, int) and not isinstance(k, bool) and k >= 0:
            return k
    return None


def _lag_depths(elements: list[Node], state: str, y: str) -> dict[int, int]:
    """Which new-state elements are past values of the series and how old: 0 for ``y`` itself,
    d + 1 for a copy of an element of depth d (a chain y, (car s), (cadr s) ... of an AR state)."""
    depths: dict[int, int] = {i: 0 for i, e in enumerate(elements) if e == Sym(y)}
    changed = True
    while changed:
        changed = False
        for i, e in enumerate(elements):
            j = _position(e, state)
            if i not in depths and j is not None and j in depths:
                depths[i] = depths[j] + 1
                changed = True
    return depths


@dataclass
class StateEdit:
    """What :func:`grow_state` did (for the proposer's statistics and the tests)."""

    variant: str
    flat: bool  # the new element was appended to a (list ...) state (False: the state was wrapped)


def grow_state(
    forms: list[Node],
    rng: random.Random,
    observed_x: list[tuple[str, int | None]],
    fresh_param: Callable[[float], Sym],
    bounded_param: Callable[[float, float, float], Sym],
    variant: str | None = None,
) -> StateEdit | None:
    """Edit ``forms`` (a forecaster's top-level forms, changed in place) with one ``state_term``
    edit (see the module docstring); ``variant`` forces one, else one that applies is drawn.
    ``observed_x``: ``TaskSpec.observed_x``. ``fresh_param(init)`` and ``bounded_param(init, lo,
    hi)`` declare new parameters. Returns None (forms untouched) when the program is not a
    forecaster this can edit or the variant does not apply."""
    init = _function(forms, "init", (0,))
    predict = _function(forms, "predict", (1,))
    update = _function(forms, "update", (2, 3))
    if init is None or predict is None or update is None:
        return None
    s_pred, s_upd, y = predict.params[0], update.params[0], update.params[1]
    flat = (
        _is_list(init.body)
        and _is_list(update.body)
        and len(init.body) == len(update.body) >= 2
        and not _rebinds(update.body, s_upd)
    )
    if flat:
        elements = update.body[1:]
        depths = _lag_depths(elements, s_upd, y)
        newest = next((i for i, d in depths.items() if d == 0), None)
    else:
        # a state that is not a (list ...): wrapped into (list old new), the old one read as (car s)
        if _rebinds(predict.body, s_pred) or _rebinds(update.body, s_upd):
            return None
        depths = {0: 0} if update.body == Sym(y) else {}
        newest = 0 if depths else None
    calendar = [i for i, (_, period) in enumerate(observed_x) if period]
    covariates = [i for i, (_, period) in enumerate(observed_x) if not period]
    x_name = update.params[2] if len(update.params) == 3 else "x"
    can_take_x = len(update.params) == 3 or "x" not in symbols_in(forms)
    applicable = [
        v
        for v, ok in (
            ("lag", bool(depths)),
            ("calendar", bool(calendar) and can_take_x),
            ("covariate", bool(covariates) and can_take_x),
            ("damp", True),
        )
        if ok
    ]
    if variant is None:
        variant = rng.choice(applicable)
    elif variant not in applicable:
        return None

    if variant == "damp":
        level, damping = fresh_param(0.0), bounded_param(0.99, 0.0, 1.0)
        predict.body = [Sym("+"), level, [Sym("*"), damping, [Sym("-"), predict.body, level]]]
        return StateEdit(variant, flat)

    # the new element: its value in init, its update (what it keeps), and how predict reads it
    if variant == "lag":
        oldest = max(depths, key=lambda i: (depths[i], -i))
        if flat:
            new_init, new_update = _copy(init.body[1 + oldest]), [Sym("list-ref"), Sym(s_upd), oldest]
        else:  # the scalar state is the last value: keep the one before it too
            new_init, new_update = _copy(init.body), Sym(s_upd)
    elif variant == "calendar":
        new_init, new_update = 1.0, [Sym("ref"), Sym(x_name), rng.choice(calendar)]
    else:
        new_init, new_update = 0.0, [Sym("ref"), Sym(x_name), rng.choice(covariates)]
    if flat:
        k = len(init.body) - 1
        init.body = [*init.body, new_init]
        update.body = [*update.body, new_update]
        new_read: Node = [Sym("list-ref"), Sym(s_pred), k]
        newest_read = None if newest is None else [Sym("list-ref"), Sym(s_pred), newest]
    else:
        old_update = _substitute(update.body, s_upd, [Sym("car"), Sym(s_upd)])
        if isinstance(new_update, Sym):  # (the lag of a scalar state: the old state itself)
            new_update = [Sym("car"), Sym(s_upd)]
        init.body = [Sym("list"), init.body, new_init]
        update.body = [Sym("list"), old_update, new_update]
        predict.body = _substitute(predict.body, s_pred, [Sym("car"), Sym(s_pred)])
        new_read = [Sym("cadr"), Sym(s_pred)]
        newest_read = None if newest is None else [Sym("car"), Sym(s_pred)]
    if variant in ("calendar", "covariate") and len(update.params) == 2:
        update.form[1] = [*update.form[1], Sym(x_name)]

    if variant == "calendar":
        period = observed_x[new_update[2]][1] or 1  # type: ignore[index]
        season: Node = [
            Sym("cos"),
            [Sym("+"), fresh_param(0.0), [Sym("*"), 2 * math.pi / period, new_read]],
        ]
        term: Node = [Sym("*"), fresh_param(0.01), season]
        if newest_read is not None and rng.random() < 0.5:  # persistence that follows the season
            term.append(newest_read)
    else:
        term = [Sym("*"), fresh_param(0.0), new_read]
    predict.body = [Sym("+"), predict.body, term]
    return StateEdit(variant, flat)


__all__ = ["VARIANTS", "StateEdit", "grow_state"]
