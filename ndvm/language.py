"""The NDVM language as the native runtime defines it, and its programs as Python data.

Everything here is read from the native module rather than restated, so that Python cannot drift
from the compiler: the primitives with their arities (native/src/prims.h), the special forms
(native/src/forms.h), the nesting limit (native/src/nesting.h), and the reader itself
(native/src/reader.cc), which :func:`read` exposes as a datum tree:

- a symbol is a :class:`Symbol` (a ``str`` subclass, so it compares with plain strings);
- a number is an ``int`` (an exact literal such as ``3``) or a ``float`` (``3.0``, ``1e-3``,
  ``+inf.0``); an integer literal beyond 64 bits reads as a ``float``, as in the runtime;
- a boolean is ``True`` / ``False`` (``#t`` / ``#f``); check booleans before numbers, since ``bool``
  is a subclass of ``int`` in Python;
- a proper list is a Python ``list``; an improper list such as the formals ``(f . args)`` is a
  :class:`Dotted`;
- ``'x`` reads as ``[Symbol("quote"), x]`` and :func:`to_str` prints it back as ``'x``.

Comments are dropped. Malformed text (unbalanced parentheses, strings, characters, vector
literals, quasiquote) raises :class:`ndvm.ParseError` with the 1-based line and column.

The printer (:func:`to_str`, :func:`to_source`, :func:`format_number`) writes a tree back so that it
reads as the same tree: numbers keep their value and exactness.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import NamedTuple

from . import _native
from .errors import ParseError
from .values import Symbol


@dataclass(frozen=True)
class Dotted:
    """An improper list ``(a b . tail)``: used by lambda and define formals with a rest argument."""

    items: tuple[Node, ...]
    tail: Node


# A datum as read (see the module docstring): recursive through lists and Dotted.
Node = Symbol | int | float | bool | list["Node"] | Dotted


class Arity(NamedTuple):
    """How many arguments a primitive takes; ``max`` is ``None`` for a variadic one."""

    min: int
    max: int | None

    def accepts(self, n: int) -> bool:
        return n >= self.min and (self.max is None or n <= self.max)


class Primitive(NamedTuple):
    """A line of the runtime's primitive table (native/src/prims.h), every column."""

    name: str
    arity: Arity
    # what it computes: "numeric" (elementwise, numbers or broadcasting arrays in, the same shape
    # out), "comparison" (a decision on numbers), "predicate" (another test giving a boolean),
    # "reducer" (one number from an array or a list) or "other"
    kind: str
    foldable: bool  # a pure numeric function: simplification may evaluate it on literals
    range_constraint: Node | None  # the parameter constraint its values satisfy, as read, or None
    index_args: tuple[int, ...]  # positions of arguments that are integer counts or indices
    # the proposers' flags (prims.h): defined on every real argument; has kinks or jumps; another
    # name of the line before it; linear algebra; builds or takes apart a list or vector
    total: bool = False
    piecewise: bool = False
    synonym: bool = False
    linalg: bool = False
    structure: bool = False


# name -> Primitive, in the order of the native table
PRIMITIVE_INFO: dict[str, Primitive] = {
    p.name: Primitive(
        p.name,
        Arity(p.min_args, p.max_args),
        p.kind.name,
        p.foldable,
        None if p.range_constraint is None else _native.read(p.range_constraint, 0)[0],
        tuple(p.index_args),
        total=p.total,
        piecewise=p.piecewise,
        synonym=p.synonym,
        linalg=p.linalg,
        structure=p.structure,
    )
    for p in _native.PRIMITIVES
}
# name -> Arity, in the order of the native table
PRIMITIVES: dict[str, Arity] = {name: p.arity for name, p in PRIMITIVE_INFO.items()}
PRIMITIVE_KINDS: tuple[str, ...] = tuple(_native.PrimKind.__members__)


def primitives_of_kind(kind: str) -> frozenset[str]:
    """The primitives of one kind (see :class:`Primitive`); an unknown kind is an error."""
    if kind not in PRIMITIVE_KINDS:
        raise ValueError(f"unknown primitive kind {kind!r}: the runtime's kinds are {', '.join(PRIMITIVE_KINDS)}")
    return frozenset(name for name, p in PRIMITIVE_INFO.items() if p.kind == kind)


# Every keyword the compiler treats as a special form; RESERVED_FORMS are those it refuses with a
# CheckError ("the special form 'guard' is not supported").
SPECIAL_FORMS: frozenset[str] = frozenset(name for name, _ in _native.SPECIAL_FORMS)
RESERVED_FORMS: frozenset[str] = frozenset(name for name, supported in _native.SPECIAL_FORMS if not supported)
# Levels of nesting the runtime reads and compiles.
MAX_NESTING: int = _native.MAX_NESTING


def read(text: str, max_nesting: int | None = None) -> list[Node]:
    """Every top-level datum of ``text``, read by the runtime's reader.

    ``max_nesting`` lowers the nesting limit (default :data:`MAX_NESTING`) for a caller whose own
    walks over the tree recurse in Python. Raises :class:`ndvm.ParseError` on malformed text.
    """
    if not isinstance(text, str):
        raise TypeError(f"ndvm.read expects source text (str), got {type(text).__name__}")
    if max_nesting is not None and (
        isinstance(max_nesting, bool) or not isinstance(max_nesting, int) or not 0 < max_nesting <= MAX_NESTING
    ):
        raise ValueError(f"max_nesting must be an integer from 1 to {MAX_NESTING}, got {max_nesting!r}")
    try:
        return _native.read(text, max_nesting or 0)
    except TypeError:  # the binding cannot encode a lone surrogate: find it and say where
        error = surrogate_error(text)
        if error is None:
            raise
        raise error from None


def surrogate_error(text: str) -> ParseError | None:
    """The ParseError for text the binding refused because of a lone surrogate, saying where it
    is; None when the text has none (the refusal was something else)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        line = text.count("\n", 0, exc.start) + 1
        column = exc.start - (text.rfind("\n", 0, exc.start) + 1) + 1
        return ParseError(
            f"unreadable character U+{ord(text[exc.start]):04X} (a lone surrogate, not valid Unicode text)",
            line,
            column,
        )
    return None


# ---- printing ---------------------------------------------------------------------------------


def format_number(value: int | float) -> str:
    """Print a number so that it reads back as the same value and the same exactness."""
    if isinstance(value, bool):
        return "#t" if value else "#f"
    if isinstance(value, int):
        return str(value)
    if math.isnan(value):
        return "+nan.0"
    if math.isinf(value):
        return "+inf.0" if value > 0 else "-inf.0"
    return repr(float(value))  # repr always has '.' or 'e' for floats, so exactness is kept


def to_str(node: Node) -> str:
    """Print one datum on a single line."""
    if isinstance(node, bool):
        return "#t" if node else "#f"
    if isinstance(node, (int, float)):
        return format_number(node)
    if isinstance(node, Symbol):
        return str(node)
    if isinstance(node, Dotted):
        return "(" + " ".join(to_str(x) for x in node.items) + " . " + to_str(node.tail) + ")"
    if isinstance(node, list):
        if len(node) == 2 and node[0] == "quote" and isinstance(node[0], Symbol):
            return "'" + to_str(node[1])
        return "(" + " ".join(to_str(x) for x in node) + ")"
    if isinstance(node, str):  # a plain str used as a symbol by a caller
        return node
    raise TypeError(f"cannot print {type(node).__name__} {node!r} as an S-expression")


def to_source(forms: list[Node]) -> str:
    """Print a whole program: one top-level form per line."""
    return "\n".join(to_str(f) for f in forms)


# A canonical form (Program.canonical_form) has no comments, strings or quote marks, and every
# local renamed vN: parentheses and whitespace-separated atoms are all there is to it.
_CANONICAL_TOKEN = re.compile(r"[()]|[^\s()]+")


def canonical_tokens(canonical_form: str) -> list[str]:
    """The parentheses and atoms of a canonical form, in order: what structural scans of stored
    programs (complexity, niche features) walk without building a tree."""
    return _CANONICAL_TOKEN.findall(canonical_form)


__all__ = [
    "canonical_tokens",
    "Symbol",
    "Dotted",
    "Node",
    "Arity",
    "Primitive",
    "PRIMITIVES",
    "PRIMITIVE_INFO",
    "PRIMITIVE_KINDS",
    "primitives_of_kind",
    "SPECIAL_FORMS",
    "RESERVED_FORMS",
    "MAX_NESTING",
    "read",
    "format_number",
    "to_str",
    "to_source",
]
