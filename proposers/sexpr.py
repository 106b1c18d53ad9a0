"""A small S-expression reader and printer for the NDVM language, used by the offline proposers.

The proposers manipulate programs as Python data (the runtime's own reader lives in C++ and is not
exposed as data), so this module gives them a faithful round trip:

- a symbol is a :class:`Sym` (a ``str`` subclass, so it compares with plain strings);
- a number is an ``int`` (exact literal such as ``3``) or a ``float`` (``3.0``, ``1e-3``);
- a boolean is ``True`` / ``False`` (``#t`` / ``#f``); check booleans before numbers, since ``bool``
  is a subclass of ``int`` in Python;
- a proper list is a Python ``list``; an improper list such as the formals ``(f . args)`` is a
  :class:`Dotted`;
- ``'x`` reads as ``[quote, x]`` and prints back as ``'x``.

Comments (``;`` to end of line, ``#| ... |#`` block comments, ``#;`` datum comments) are dropped.
The language has no strings, characters or vector literals, so they are rejected with a
:class:`SexprError` that carries the 1-based line and column.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Union


class Sym(str):
    """A Scheme symbol. Distinct from ``str`` only by type, so ``Sym("x") == "x"`` holds."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"Sym({str.__repr__(self)})"


@dataclass(frozen=True)
class Dotted:
    """An improper list ``(a b . tail)``: used by lambda and define formals with a rest argument."""

    items: tuple
    tail: object


Node = Union[Sym, int, float, bool, list, Dotted]


class SexprError(ValueError):
    """The text is not a readable program of the language (unbalanced parentheses, bad token...)."""

    def __init__(self, message: str, line: int | None = None, column: int | None = None):
        self.message = message
        self.line = line
        self.column = column
        where = f" (line {line}, column {column})" if line else ""
        super().__init__(f"{message}{where}")


_TOKEN = re.compile(
    r"""
    (?P<ws>\s+)
  | (?P<comment>;[^\n]*)
  | (?P<block>\#\|)
  | (?P<datum_comment>\#;)
  | (?P<open>[(\[])
  | (?P<close>[)\]])
  | (?P<quote>')
  | (?P<unsupported>[`,"]|\#\\|\#\()
  | (?P<atom>[^\s()\[\]';"`,]+)
    """,
    re.VERBOSE,
)

_NUMBER = re.compile(r"[+-]?(\d+\.?\d*([eE][+-]?\d+)?|\.\d+([eE][+-]?\d+)?)$|[+-](inf|nan)\.0$")
_INTEGER = re.compile(r"[+-]?\d+$")


def _atom(text: str, line: int, column: int) -> Node:
    low = text.lower()
    if low in ("#t", "#true"):
        return True
    if low in ("#f", "#false"):
        return False
    if _INTEGER.match(text):
        return int(text)
    if _NUMBER.match(text):
        return float(text.replace(".0", "")) if text[1:] in ("inf.0", "nan.0") else float(text)
    if text.startswith("#"):
        raise SexprError(f"unsupported literal {text!r}", line, column)
    return Sym(text)


def _tokens(text: str):
    """Yield (kind, value, line, column) for every significant token of ``text``."""
    pos, line, line_start = 0, 1, 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        column = pos - line_start + 1
        if m is None:  # cannot happen with the catch-all atom pattern, kept as a guard
            raise SexprError(f"unreadable character {text[pos]!r}", line, column)
        kind, value = m.lastgroup, m.group()
        if kind == "block":  # block comments nest, as in R7RS
            depth, end = 1, m.end()
            while depth:
                opening, closing = text.find("#|", end), text.find("|#", end)
                if closing < 0:
                    raise SexprError("unterminated block comment", line, column)
                if 0 <= opening < closing:
                    depth, end = depth + 1, opening + 2
                else:
                    depth, end = depth - 1, closing + 2
            value = text[pos:end]
            pos = end
        else:
            pos = m.end()
        if kind == "unsupported":
            raise SexprError(f"unsupported syntax {value!r} (no strings, characters, vectors or quasiquote)",
                             line, column)
        if kind not in ("ws", "comment", "block"):
            yield kind, value, line, column
        newlines = value.count("\n")
        if newlines:
            line += newlines
            line_start = pos - (len(value) - value.rfind("\n") - 1)


# Levels of nesting the proposers accept. The walkers over datums (to_str, count_nodes, the
# mutation operators) recurse per level, one or two Python frames each, under Python's default
# recursion limit of 1,000; deeper candidates are rejected here with a SexprError rather than
# failing later with RecursionError. (The native runtime accepts 2,000 levels.)
MAX_NESTING = 256


def read_all(text: str) -> list[Node]:
    """Read every top-level datum of ``text``; raise :class:`SexprError` on malformed input."""
    tokens = list(_tokens(text))
    index = 0
    depth = 0

    def datum() -> Node:
        skip_datum_comments()
        return one()

    def skip_datum_comments() -> None:
        """Drop every datum a run of "#;" comments covers ("#; #; a b" drops a and b): counted in
        a loop, so a long run costs no recursion."""
        nonlocal index
        pending = 0
        while True:
            while index < len(tokens) and tokens[index][0] == "datum_comment":
                index += 1
                pending += 1
            if not pending:
                return
            if index >= len(tokens) or tokens[index][0] == "close":
                line, column = tokens[index - 1][2:]
                raise SexprError("'#;' comment without a datum", line, column)
            one()
            pending -= 1

    def one() -> Node:
        """The datum that starts at the current token (not a "#;")."""
        nonlocal index, depth
        if index >= len(tokens):
            raise SexprError("unexpected end of input (missing ')'?)", *(tokens[-1][2:] if tokens else (None, None)))
        kind, value, line, column = tokens[index]
        index += 1
        if kind in ("open", "quote"):
            depth += 1
            if depth > MAX_NESTING:
                raise SexprError(f"nesting deeper than {MAX_NESTING} levels (the proposers' nesting limit)", line, column)
            try:
                return compound(kind, line, column)
            finally:
                depth -= 1
        if kind == "close":
            raise SexprError("unbalanced parenthesis: unexpected ')'", line, column)
        return _atom(value, line, column)

    def compound(kind: str, line: int, column: int) -> Node:
        nonlocal index
        if kind == "open":
            items: list = []
            while True:
                if index >= len(tokens):
                    raise SexprError("unbalanced parenthesis: '(' is never closed", line, column)
                k, v, ln, col = tokens[index]
                if k == "close":
                    index += 1
                    return items
                if k == "atom" and v == ".":
                    index += 1
                    if not items:
                        raise SexprError("'.' at the start of a list", ln, col)
                    tail = datum()
                    if index >= len(tokens) or tokens[index][0] != "close":
                        raise SexprError("expected ')' after the tail of a dotted list", ln, col)
                    index += 1
                    return Dotted(tuple(items), tail)
                if k == "datum_comment":
                    skip_datum_comments()
                    continue
                items.append(one())
        return [Sym("quote"), datum()]  # kind == "quote"

    out = []
    while index < len(tokens):
        # a trailing "#;" comment with nothing after it is tolerated
        if tokens[index][0] == "datum_comment" and index + 1 >= len(tokens):
            break
        if tokens[index][0] == "datum_comment":
            skip_datum_comments()
            continue
        out.append(one())
    return out


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
    text = repr(float(value))
    return text  # repr always has '.' or 'e' for floats, so exactness is kept


def to_str(node: Node) -> str:
    """Print one datum on a single line."""
    if isinstance(node, bool):
        return "#t" if node else "#f"
    if isinstance(node, (int, float)):
        return format_number(node)
    if isinstance(node, Sym):
        return str(node)
    if isinstance(node, Dotted):
        return "(" + " ".join(to_str(x) for x in node.items) + " . " + to_str(node.tail) + ")"
    if isinstance(node, list):
        if len(node) == 2 and node[0] == "quote" and isinstance(node[0], Sym):
            return "'" + to_str(node[1])
        return "(" + " ".join(to_str(x) for x in node) + ")"
    if isinstance(node, str):  # a plain str used as a symbol by a caller
        return node
    raise SexprError(f"cannot print {type(node).__name__} {node!r} as an S-expression")


def to_source(forms: list[Node]) -> str:
    """Print a whole program: one top-level form per line."""
    return "\n".join(to_str(f) for f in forms)


def count_nodes(node: Node) -> int:
    """Number of atoms and lists in ``node`` (a size measure for mutation limits)."""
    if isinstance(node, list):
        return 1 + sum(count_nodes(x) for x in node)
    if isinstance(node, Dotted):
        return 1 + sum(count_nodes(x) for x in node.items) + count_nodes(node.tail)
    return 1


def symbols_in(node: Node) -> set[str]:
    """Every symbol that occurs anywhere in ``node`` (bound or free, operators included)."""
    if isinstance(node, Sym):
        return {str(node)}
    if isinstance(node, list):
        out: set[str] = set()
        for x in node:
            out |= symbols_in(x)
        return out
    if isinstance(node, Dotted):
        out = set()
        for x in node.items:
            out |= symbols_in(x)
        return out | symbols_in(node.tail)
    return set()


__all__ = ["Sym", "Dotted", "Node", "SexprError", "read_all", "to_str", "to_source", "format_number",
           "count_nodes", "symbols_in"]
