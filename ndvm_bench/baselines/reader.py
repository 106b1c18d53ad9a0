"""A small S-expression reader shared by the Python baselines.

The baselines interpret the same source text as NDVM, so they need their own reader: this one turns
the text into nested Python lists of :class:`Symbol`, ``int``, ``float`` and ``bool``. It covers the
syntax the benchmark programs use (lists, numbers, symbols, booleans, ``'x`` quote, ``;`` comments).
Errors raise :class:`ndvm.errors.ParseError` with the line and column of the problem.
"""

from __future__ import annotations

import re

from ndvm.errors import ParseError


class Symbol(str):
    """A symbol of the language (a ``str`` subclass so it can key dictionaries directly)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"Symbol({str(self)!r})"


_TOKEN = re.compile(r"""\s+|;[^\n]*|(?P<tok>\(|\)|\[|\]|'|[^\s()\[\]';]+)""")
_NUMBER = re.compile(r"^[+-]?(\d+\.?\d*([eE][+-]?\d+)?|\.\d+([eE][+-]?\d+)?)$")
_INT = re.compile(r"^[+-]?\d+$")


def _tokens(text: str):
    line, line_start, pos = 1, 0, 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:  # pragma: no cover - the pattern matches every character class
            raise ParseError(f"unreadable character {text[pos]!r}", line, pos - line_start + 1)
        tok = m.group("tok")
        if tok is not None:
            yield tok, line, m.start() - line_start + 1
        chunk = m.group(0)
        newlines = chunk.count("\n")
        if newlines:
            line += newlines
            line_start = m.start() + chunk.rindex("\n") + 1
        pos = m.end()


def _atom(tok: str, line: int, col: int):
    if _INT.match(tok):
        return int(tok)
    if _NUMBER.match(tok):
        return float(tok)
    if tok in ("#t", "#true"):
        return True
    if tok in ("#f", "#false"):
        return False
    if tok.startswith("#") or tok.startswith('"'):
        raise ParseError(f"unsupported literal {tok!r}", line, col)
    return Symbol(tok)


def read_all(text: str) -> list:
    """Read every top-level datum of ``text``; returns them as a list."""
    stack: list[list] = [[]]
    opened: list[tuple[int, int]] = []
    quote_pending: list[int] = [0]
    for tok, line, col in _tokens(text):
        if tok in ("(", "["):
            stack.append([])
            opened.append((line, col))
            quote_pending.append(0)
        elif tok in (")", "]"):
            if len(stack) == 1:
                raise ParseError("unexpected ')'", line, col)
            if quote_pending[-1]:
                raise ParseError("quote with nothing after it", line, col)
            datum = stack.pop()
            opened.pop()
            quote_pending.pop()
            _push(stack, quote_pending, datum)
        elif tok == "'":
            quote_pending[-1] += 1
        else:
            _push(stack, quote_pending, _atom(tok, line, col))
    if len(stack) != 1:
        line, col = opened[-1]
        raise ParseError("unbalanced parentheses: '(' is never closed", line, col)
    if quote_pending[0]:
        raise ParseError("quote with nothing after it")
    return stack[0]


def _push(stack: list[list], quote_pending: list[int], datum) -> None:
    while quote_pending[-1]:
        datum = [Symbol("quote"), datum]
        quote_pending[-1] -= 1
    stack[-1].append(datum)


__all__ = ["Symbol", "read_all"]
