"""Just enough reading of NDVM source text for the tasks: split top-level forms, find what they define.

The tasks need to know which names a candidate defines (``init``, ``predict``, ...) and which
symbols it mentions, before handing the full program to ``ndvm.compile`` (which does the real
checking). This reader handles comments (``;`` to end of line, ``#| ... |#``, ``#;`` datum comments
are treated as plain text) and parentheses/brackets; the language has no strings.
"""
from __future__ import annotations

import re

from .errors import CandidateError

_TOKEN = re.compile(r"""\s+|;[^\n]*|#\|.*?\|#|[()\[\]]|'|[^\s()\[\]';]+""", re.S)


def tokens(source: str) -> list[tuple[str, int]]:
    """Tokens with their offsets, comments and whitespace dropped."""
    out = []
    for m in _TOKEN.finditer(source):
        text = m.group(0)
        if text.isspace() or text.startswith(";") or text.startswith("#|"):
            continue
        out.append((text, m.start()))
    return out


def top_level_forms(source: str) -> list[str]:
    """The source text of each top-level form, in order. Raises CandidateError on unbalanced parens."""
    forms, depth, start = [], 0, None
    for text, pos in tokens(source):
        if text in "([":
            if depth == 0 and start is None:
                start = pos
            depth += 1
        elif text in ")]":
            depth -= 1
            if depth < 0:
                raise CandidateError(f"unbalanced ')' at offset {pos}")
            if depth == 0:
                forms.append(source[start : pos + 1])
                start = None
        elif depth == 0:
            if text == "'":
                start = pos if start is None else start  # a quote prefix waiting for its datum
                continue
            forms.append(source[start : pos + len(text)] if start is not None else text)  # a top-level atom
            start = None
    if depth != 0:
        raise CandidateError("unbalanced parentheses: a form is not closed")
    return forms


def defined_names(source: str) -> dict[str, str]:
    """Top-level ``define``/``param`` names -> "function" | "value" | "param"."""
    names: dict[str, str] = {}
    for form in top_level_forms(source):
        toks = [t for t, _ in tokens(form)]
        if len(toks) < 3 or toks[0] not in "([":
            continue
        head = toks[1]
        if head == "define":
            if toks[2] in "([":
                names[toks[3]] = "function"
            else:
                names[toks[2]] = "value"
        elif head == "param":
            names[toks[2]] = "param"
    return names


def symbols(source: str) -> set[str]:
    return {t for t, _ in tokens(source) if t not in "()[]'"}


def last_form_is_expression(source: str) -> bool:
    forms = top_level_forms(source)
    if not forms:
        return False
    toks = [t for t, _ in tokens(forms[-1])]
    return not (len(toks) > 1 and toks[0] in "([" and toks[1] in ("define", "param"))
