"""Niches: candidates kept by structure, so the parents of new proposals come from several families.

A search that always shows its current top few programs as parents soon shows five near-copies of
one program: the best family crowds out every other idea. Here each candidate gets a **descriptor**
of its structure, and the parents are drawn one per descriptor cell.

**Descriptor** (:class:`Niche`), from the candidate's own canonical form (``ndvm.compile`` of the
candidate alone, without a task's driver, so locals are alpha-renamed and a local can never be
mistaken for a primitive):

- a complexity bin: the atoms of the canonical form (:func:`storage.parsimony.complexity_of_canonical`)
  binned at :data:`COMPLEXITY_EDGES` (<= 8, 9-16, 17-32, 33-64, > 64);
- the set of structural features it uses (:data:`FEATURES`): ``recursion`` (a self-calling
  definition, a named ``let``, ``letrec``, ``do``, ``loop``/``recur``), ``state`` (lists and vectors:
  a multi-component state), ``linalg`` (matrices and vector algebra), ``trig``, ``exp_log``,
  ``saturating`` (tanh, sigmoid, softplus) and ``conditional`` (branches, comparisons, min/max,
  abs and the other piecewise functions).

**Archive: MAP-Elites, not islands.** Every cell of the descriptor grid keeps its members in
validation-rank order; its elite is the best. MAP-Elites fits this pipeline because the archive is
a pure function of the store's validated results: it needs no state of its own, survives a
``--resume`` unchanged, and serves every proposer (the LLM's concurrent requests and the mutation
rounds) from the same store. Islands (FunSearch, OpenEvolve) evolve separate populations that
migrate now and then; they need each candidate tagged with its island, and that assignment kept
across resumes and concurrent requests, for the same effect: several families kept alive.

**Selection** (:meth:`NicheArchive.select`): the best program always, then the elites of other
cells, drawn without replacement with rank-based weights over the cells (the k-th best cell
1/k), mixed with weights favouring the cells drawn least often so far as ``explore`` rises from
0 to 1 (the discover flow sets it to the recent duplicate rate: when proposals repeat, the
parents move to the less-visited niches). When there are fewer cells than parents wanted, the
next members of each cell follow in turn. Draws use the archive's own ``random.Random(seed)``:
the same seed and the same sequence of calls give the same parents.

Everything here ranks by the validation score only (the store's leaderboard order); the test
split never reaches it.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from ndvm.language import PRIMITIVE_INFO, Primitive, canonical_tokens

T = TypeVar("T")

# Upper bounds of the complexity bins; a complexity above the last edge is in the last bin.
COMPLEXITY_EDGES: tuple[int, ...] = (8, 16, 32, 64)


def _primitives(test: Callable[[Primitive], bool]) -> frozenset[str]:
    """The runtime's primitives (native/src/prims.h, read through ndvm.language) that pass ``test``."""
    return frozenset(name for name, p in PRIMITIVE_INFO.items() if test(p))


# feature -> the primitives or special forms whose use marks it (recursion has its own rules too).
# State, linear algebra and conditionals come from the primitive table's kinds and flags, so a new
# primitive joins its feature by its line there; the three function families are named here.
FEATURES: dict[str, frozenset[str]] = {
    "recursion": frozenset({"letrec", "letrec*", "do", "loop", "recur", "named-lambda"}),
    # builds a list or vector from its elements, or takes one apart (flag STRUCT)
    "state": _primitives(lambda p: p.structure),
    # linear algebra on whole vectors and matrices (flag LINALG)
    "linalg": _primitives(lambda p: p.linalg),
    "trig": frozenset({"sin", "cos", "tan", "asin", "acos", "atan"}),
    "exp_log": frozenset({"exp", "log", "expt", "sqrt"}),
    "saturating": frozenset({"tanh", "sigmoid", "logistic", "softplus"}),
    # branching forms, decisions on numbers (kind comparison) and functions with kinks or jumps
    # (flag PIECEWISE: abs min max clamp floor round modulo ...)
    "conditional": frozenset({"if", "cond", "case", "when", "unless", "and", "or"})
    | _primitives(lambda p: p.kind == "comparison" or p.piecewise),
}
FEATURE_ORDER: tuple[str, ...] = tuple(FEATURES)


class NicheError(ValueError):
    """A candidate whose structure cannot be described (its text does not compile alone)."""


@dataclass(frozen=True)
class Niche:
    """One cell of the descriptor grid. ``complexity_bin`` is None for a candidate that does not
    compile alone (a task may accept text that needs its driver): such candidates share one cell."""

    complexity_bin: int | None
    features: tuple[str, ...]  # in FEATURE_ORDER

    def label(self) -> str:
        """Short and stable, e.g. ``c2:state+trig`` or ``c0:plain``."""
        size = "c?" if self.complexity_bin is None else f"c{self.complexity_bin}"
        return f"{size}:{'+'.join(self.features) or 'plain'}"


UNDESCRIBED = Niche(None, ())


def complexity_bin(complexity: int) -> int:
    """The bin of a complexity: 0 for <= COMPLEXITY_EDGES[0], ..., len(COMPLEXITY_EDGES) above the last."""
    if complexity < 0:
        raise ValueError(f"complexity must be >= 0, got {complexity}")
    for i, edge in enumerate(COMPLEXITY_EDGES):
        if complexity <= edge:
            return i
    return len(COMPLEXITY_EDGES)


def features_of_canonical(canonical_form: str) -> tuple[str, ...]:
    """The structural features a canonical form uses, in FEATURE_ORDER."""
    tokens = canonical_tokens(canonical_form)
    used = set(tokens)
    found = {name for name, marks in FEATURES.items() if used & marks}
    if "recursion" not in found and _self_reference(tokens):
        found.add("recursion")
    return tuple(name for name in FEATURE_ORDER if name in found)


def _self_reference(tokens: list[str]) -> bool:
    """A named ``let`` (``(let vN (...``), or a top-level ``(define vN ...)`` that uses vN inside
    itself. Canonical forms rename every local and definition to vN, so a name token is never a
    primitive and the scan needs no reader."""
    depth = 0
    defining: str | None = None
    define_depth = 0
    for i, token in enumerate(tokens):
        if token == "(":
            depth += 1
            continue
        if token == ")":
            if defining is not None and depth == define_depth:
                defining = None
            depth -= 1
            continue
        previous = tokens[i - 1] if i else ""
        if token == "let" and previous == "(" and i + 1 < len(tokens) and tokens[i + 1] != "(":
            return True
        if token == "define" and previous == "(" and i + 1 < len(tokens):
            defining, define_depth = tokens[i + 1], depth
            continue
        if defining is not None and token == defining and previous != "define":
            return True
    return False


def describe_canonical(canonical_form: str) -> Niche:
    """The niche of a candidate, from its own canonical form (not one with a task's driver appended)."""
    # imported here: importing the storage package loads DuckDB
    from storage.parsimony import complexity_of_canonical

    return Niche(complexity_bin(complexity_of_canonical(canonical_form)), features_of_canonical(canonical_form))


def describe(source: str) -> Niche:
    """The niche of a candidate's source, compiled alone; NicheError when it does not compile."""
    import ndvm

    try:
        program = ndvm.compile(source)
    except ndvm.NDVMError as exc:
        raise NicheError(f"cannot describe the candidate: it does not compile alone ({exc})") from exc
    return describe_canonical(program.canonical_form)


def rank_weights(niches: Sequence[Niche]) -> list[float]:
    """Selection weights for programs given in rank order (best first) with their niches: the k-th
    niche (by its best member) gets 1/k, shared equally by its members. The rank-based pressure of
    1, 1/2, 1/3... works over niches instead of programs, so five near-copies of the best program
    weigh as much as the best alone, and the next families keep their share."""
    order: dict[Niche, int] = {}
    for niche in niches:
        order.setdefault(niche, len(order))
    sizes = Counter(niches)
    return [1.0 / (order[niche] + 1) / sizes[niche] for niche in niches]


class NicheArchive:
    """MAP-Elites over the descriptor grid, fed from programs in validation-rank order.

    Holds only a cache of descriptors (by canonical hash, else by source), the number of times
    each niche was drawn from (``visits``) and the random generator; the members and elites are
    recomputed from the programs given to each call, so a resumed run sees the same archive.
    """

    def __init__(self, seed: int = 0):
        self.seed = seed
        self.rng = random.Random(seed)
        self.visits: Counter[Niche] = Counter()
        self._cache: dict[str, Niche] = {}

    def niche_of(self, source: str, canonical_hash: str | None = None) -> Niche:
        """The candidate's niche (cached); one that does not compile alone is UNDESCRIBED."""
        key = canonical_hash or source
        niche = self._cache.get(key)
        if niche is None:
            try:
                niche = describe(source)
            except NicheError:
                niche = UNDESCRIBED
            self._cache[key] = niche
        return niche

    def cells(
        self,
        programs: Iterable[T],
        source: Callable[[T], str] = lambda p: p.source,
        digest: Callable[[T], str | None] = lambda p: getattr(p, "canonical_hash", None),
    ) -> dict[Niche, list[T]]:
        """Niche -> its members in the given (rank) order; niches in the order of their elites."""
        out: dict[Niche, list[T]] = {}
        for program in programs:
            out.setdefault(self.niche_of(source(program), digest(program)), []).append(program)
        return out

    def select(
        self,
        programs: Sequence[T],
        k: int,
        explore: float = 0.0,
        source: Callable[[T], str] = lambda p: p.source,
        digest: Callable[[T], str | None] = lambda p: getattr(p, "canonical_hash", None),
    ) -> list[T]:
        """Up to ``k`` parents from ``programs`` (best first): the best, then one elite per other
        niche (see the module docstring), returned in the given rank order.

        ``explore`` (0..1): 0 draws the other niches by rank only; 1 by how rarely they were drawn.
        """
        if k < 1:
            raise ValueError(f"k (parents wanted) must be >= 1, got {k}")
        if not 0.0 <= explore <= 1.0:
            raise ValueError(f"explore must be between 0 and 1, got {explore}")
        if not programs:
            return []
        cells = self.cells(programs, source, digest)
        order = list(cells)
        chosen: list[tuple[Niche, int]] = [(order[0], 0)]  # (niche, index among its members)
        others = order[1:]
        while len(chosen) < k and others:
            pick = self._draw(others, explore)
            chosen.append((others.pop(pick), 0))
        depth = 1  # fewer niches than k: the next member of each niche in turn
        while len(chosen) < k and any(len(members) > depth for members in cells.values()):
            for niche in order:
                if len(chosen) < k and len(cells[niche]) > depth:
                    chosen.append((niche, depth))
            depth += 1
        for niche, _ in chosen:
            self.visits[niche] += 1
        picked = {id(cells[niche][i]) for niche, i in chosen}
        return [p for p in programs if id(p) in picked]

    def _draw(self, niches: list[Niche], explore: float) -> int:
        """Index of one niche drawn from ``niches`` (in rank order of their elites)."""
        by_rank = [1.0 / (i + 2) for i in range(len(niches))]  # the best niche (rank 1) is already in
        unvisited = [1.0 / (1 + self.visits[n]) for n in niches]
        total_rank, total_new = sum(by_rank), sum(unvisited)
        weights = [(1.0 - explore) * r / total_rank + explore * u / total_new for r, u in zip(by_rank, unvisited)]
        return self.rng.choices(range(len(niches)), weights)[0]


def store_programs(store: Any, run_id: str, limit: int | None = None) -> list[Any]:
    """The run's calibrated candidates as ``ScoredProgram`` in validation-rank order (the store's
    leaderboard: validation split only), with their fitted parameters."""
    import json

    from .base import ScoredProgram

    rows = store.top(limit if limit is not None else 10**9, run_id=run_id)
    return [
        ScoredProgram(
            row["source"], float(row["score"]), canonical_hash=row["hash"], params=json.loads(row["parameters"] or "{}")
        )
        for row in rows.iter_rows(named=True)
    ]


def niche_summary(
    programs: Sequence[T],
    archive: NicheArchive | None = None,
    source: Callable[[T], str] = lambda p: p.source,
    digest: Callable[[T], str | None] = lambda p: getattr(p, "canonical_hash", None),
) -> list[tuple[Niche, int, T]]:
    """(niche, members, elite) per filled niche, in the rank order of the elites."""
    cells = (archive or NicheArchive()).cells(programs, source, digest)
    return [(niche, len(members), members[0]) for niche, members in cells.items()]


__all__ = [
    "COMPLEXITY_EDGES",
    "FEATURES",
    "UNDESCRIBED",
    "Niche",
    "NicheArchive",
    "NicheError",
    "complexity_bin",
    "describe",
    "describe_canonical",
    "features_of_canonical",
    "niche_summary",
    "rank_weights",
    "store_programs",
]
