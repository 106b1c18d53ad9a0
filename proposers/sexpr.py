"""Programs as Python data for the proposers: the runtime's reader with the proposers' nesting
limit, the printer, and small tree helpers.

Reading is done by the native reader (:func:`ndvm.language.read`), so the proposers see exactly the
trees the compiler sees; this module only lowers the nesting limit (see :data:`MAX_NESTING`) and
raises :class:`SexprError`, a :class:`ndvm.ParseError`, so that callers can tell a candidate the
proposers cannot read from one the runtime rejects later. The data shapes (``Sym``, ``Dotted``,
numbers, booleans, lists) and the printer are :mod:`ndvm.language`'s.
"""

from __future__ import annotations

from ndvm.errors import ParseError
from ndvm.language import Dotted, Node, format_number, read, to_source, to_str
from ndvm.values import Symbol as Sym


class SexprError(ParseError, ValueError):
    """The text is not a readable program of the language (unbalanced parentheses, bad token,
    nesting beyond :data:`MAX_NESTING`); carries the 1-based ``line`` and ``column``."""


# Levels of nesting the proposers accept. The walkers over datums (to_str, count_nodes, the
# mutation operators) recurse per level, one or two Python frames each, under Python's default
# recursion limit of 1,000; deeper candidates are rejected by the reader with a SexprError rather
# than failing later with RecursionError. (The runtime itself accepts ndvm.language.MAX_NESTING.)
MAX_NESTING = 256


def read_all(text: str) -> list[Node]:
    """Read every top-level datum of ``text``; raise :class:`SexprError` on malformed input."""
    try:
        return read(text, max_nesting=MAX_NESTING)
    except ParseError as exc:
        raise SexprError(exc.message, exc.line, exc.column) from None


def count_nodes(node: Node) -> int:
    """Number of atoms and lists in ``node`` (a size measure for mutation limits)."""
    if isinstance(node, list):
        return 1 + sum(count_nodes(x) for x in node)
    if isinstance(node, Dotted):
        return 1 + sum(count_nodes(x) for x in node.items) + count_nodes(node.tail)
    return 1


def copy_node(node: Node) -> Node:
    """A copy of ``node`` whose lists are all new (an edit may change them in place); atoms are
    immutable and shared. What ``copy.deepcopy`` gives for a datum as read, at a fraction of its
    cost (the mutation proposer copies its parent for every attempt)."""
    if isinstance(node, list):
        return [copy_node(x) for x in node]
    if isinstance(node, Dotted):
        return Dotted(tuple(copy_node(x) for x in node.items), copy_node(node.tail))
    return node


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


__all__ = [
    "Sym",
    "copy_node",
    "Dotted",
    "Node",
    "SexprError",
    "MAX_NESTING",
    "read_all",
    "to_str",
    "to_source",
    "format_number",
    "count_nodes",
    "symbols_in",
]
