"""Parsimony: the complexity of a candidate, the Pareto front of complexity vs loss, a recommended model.

**Complexity** is the number of atoms in the candidate's canonical form (``ndvm`` canonical form:
locals alpha-renamed, parameters renamed in order of use, inexact literals abstracted to ``C``),
not counting the ``(params ...)`` header. Every operator, special-form keyword, variable,
parameter occurrence, input and literal counts one; parentheses count nothing. So
``(+ a (* b x))`` has complexity 5 (the same count PySR gives its expression tree), a parameter
used twice counts twice, and a forecast candidate's ``(define (predict s) (* phi s))`` counts
``define``, the name, ``lambda``, ``s``, ``*``, ``phi``, ``s`` = 7. The complexity is of the
candidate as proposed: a task's driver (the forecast task appends one) is not part of it.

**Pareto front** (as PySR's hall of fame): for each complexity, the candidate with the lowest
validation loss, kept only if its loss is strictly lower than that of every simpler candidate.

**Recommended model**: PySR's "best" rule. Along the front (increasing complexity), the score of
entry i is -d log(loss) / d complexity = (log L_{i-1} - log L_i) / (c_i - c_{i-1}) (0 for the
simplest entry); among the front entries whose loss is within ``tolerance`` (default 10%) of the
best loss, the one with the highest score is recommended (ties: the simpler). It picks the model
after which extra complexity stops paying for itself in loss.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

from ndvm.language import canonical_tokens

DEFAULT_TOLERANCE = 0.10


def complexity_of_canonical(canonical_form: str) -> int:
    """Atoms of a canonical form, outside a leading ``(params ...)`` header."""
    depth, count, in_header, header_depth = 0, 0, False, -1
    previous = None
    for token in canonical_tokens(canonical_form):
        if token == "(":
            depth += 1
        elif token == ")":
            if in_header and depth == header_depth:
                in_header = False
            depth -= 1
        else:
            if token == "params" and previous == "(" and depth == 1:
                in_header, header_depth = True, depth
            elif not in_header:
                count += 1
        previous = token
    return count


def complexity(source: str) -> int:
    """Complexity of a candidate's source (compiled by ndvm alone, without any task driver)."""
    import ndvm

    return complexity_of_canonical(ndvm.compile(source).canonical_form)


def candidate_complexity(source: str, program: Any = None, wrapped: bool = False) -> int | None:
    """Complexity for the store: of ``program`` (already compiled) when it is the candidate itself,
    else of the candidate ``source`` compiled alone (a task's driver is not the model's complexity).
    None when the candidate alone does not compile."""
    import ndvm

    try:
        if program is not None and not wrapped:
            return complexity_of_canonical(program.canonical_form)
        return complexity_of_canonical(ndvm.compile(source).canonical_form)
    except ndvm.NDVMError:
        return None


@dataclass(frozen=True)
class FrontEntry:
    hash: str
    complexity: int
    loss: float
    score: float  # -d log(loss) / d complexity from the previous front entry (0 for the first)
    recommended: bool = False
    extra: Any = None  # the caller's row (source, parameters, ...), passed through

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("extra")
        return d


def pareto_front(rows: Iterable[tuple[str, int, float, Any]], tolerance: float = DEFAULT_TOLERANCE) -> list[FrontEntry]:
    """The front of ``(hash, complexity, loss, extra)`` rows (lower loss is better; non-finite
    losses are ignored), in increasing complexity, with the recommended entry marked."""
    if not (tolerance >= 0):
        raise ValueError(f"tolerance must be >= 0, got {tolerance!r}")
    best_at: dict[int, tuple[float, str, Any]] = {}
    for digest, c, loss, extra in rows:
        if c is None or loss is None or not math.isfinite(loss):
            continue
        c = int(c)
        if c not in best_at or (loss, digest) < best_at[c][:2]:
            best_at[c] = (float(loss), digest, extra)
    front: list[FrontEntry] = []
    for c in sorted(best_at):
        loss, digest, extra = best_at[c]
        if front and not loss < front[-1].loss:
            continue
        if not front:
            score = 0.0
        elif loss > 0 and front[-1].loss > 0:
            score = (math.log(front[-1].loss) - math.log(loss)) / (c - front[-1].complexity)
        else:  # a zero loss (exact fit) after a positive one: infinitely better
            score = math.inf
        front.append(FrontEntry(digest, c, loss, score, False, extra))
    if not front:
        return front
    best_loss = front[-1].loss
    eligible = [i for i, e in enumerate(front) if e.loss <= best_loss * (1 + tolerance) or e.loss == best_loss]
    pick = max(eligible, key=lambda i: (front[i].score, -front[i].complexity))
    front[pick] = FrontEntry(
        front[pick].hash, front[pick].complexity, front[pick].loss, front[pick].score, True, front[pick].extra
    )
    return front


def run_front(store: Any, run_id: str, tolerance: float = DEFAULT_TOLERANCE) -> list[FrontEntry]:
    """The front of a run's calibrated candidates in a ``storage.CandidateStore`` (validation
    score as the loss, stored complexity); each entry's ``extra`` is its ``store.top`` row."""
    rows = store.top(10**9, run_id=run_id)
    complexities = store.complexities(rows.get_column("hash").to_list()) if not rows.is_empty() else {}
    return pareto_front(
        [(r["hash"], complexities.get(r["hash"]), r["score"], r) for r in rows.iter_rows(named=True)],
        tolerance=tolerance,
    )


__all__ = [
    "complexity",
    "candidate_complexity",
    "complexity_of_canonical",
    "pareto_front",
    "run_front",
    "FrontEntry",
    "DEFAULT_TOLERANCE",
]
