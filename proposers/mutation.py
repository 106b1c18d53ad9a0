"""The offline proposer: mutation and crossover of programs over the grammar of the language.

It needs no network and is deterministic for a seed: the same seed, the same parents and the same
sequence of calls give the same proposals.

Operators (each works on the S-expression AST of :mod:`proposers.sexpr` and only edits numeric
sub-expressions of class ``scalar``/``data`` that are not loop control, see
:mod:`proposers.language`):

- ``subtree``: replace a sub-expression by a random term of the grammar;
- ``crossover``: replace a sub-expression by one taken from another parent (its parameters come
  with it);
- ``swap``: swap an arithmetic operator (+ - * /, min/max) or a unary function (sin, tanh, ...);
- ``constant``: perturb a float literal or a parameter's initial value;
- ``insert_term``: ``e -> (+ e (* pN term))`` and similar, with a new parameter;
- ``insert_param``: ``e -> (* pN e)``, ``(+ e pN)``, or lift a float literal into a parameter;
- ``wrap``: wrap a sub-expression in a smooth helper (sigmoid, softplus, tanh, exp of a negative);
- ``hoist``: replace a sub-expression by one of its own sub-expressions (keeps sizes in check);
- ``grow``: a new random program, used when there is no parent at all;
- ``state_term`` (forecasters only: ``TaskSpec.state_space``): one more element of the state and
  its use in ``predict``: a further lag, the calendar position (a seasonal term or a persistence
  that follows the season), a covariate, or a damping toward a level (:mod:`proposers.state_edits`),
  so a reference parent (AR(p), damped persistence) grows into AR(p+1), a cyclostationary AR...;
- ``sr_term`` (tables only: ``TaskSpec.table_inputs``, every input a column over the same rows):
  ``e -> (+ e (* pN f))`` with ``f`` a feature of any inputs: an input, a product or ratio of two,
  a square or cube, a unary form (sin, cos, exp, tanh, sqrt|a|, log|a|) of a scaled input, or an
  input times such a form. On a table, any data sub-expression may also take any input (elsewhere
  a data site keeps the inputs it uses, so a vector keeps its shape).

After each edit the parameter declarations are made consistent (unused ones removed, new ones
declared), then the program must pass the static checks and, when ``validate`` is on,
``ndvm.compile``; an edit that fails is retried with another operator.
"""

from __future__ import annotations

import dataclasses
import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field

from ndvm.language import PRIMITIVE_INFO

from .base import Failure, Origin, Proposal, ProposalContext, Proposer, ProposerTraits
from .language import NUMERIC_OPS, SPECIAL_FORMS, Analysis, Site, _arith_uses, analyze, static_problems, structure_key
from .niches import NicheArchive, rank_weights
from .sexpr import Node, SexprError, Sym, copy_node, count_nodes, read_all, symbols_in, to_source
from .simplify import simplify as simplify_forms
from .state_edits import grow_state
from .validate import require_compile

DEFAULT_WEIGHTS: dict[str, float] = {
    "subtree": 2.0,
    "crossover": 1.5,
    "swap": 1.5,
    "constant": 0.5,
    "insert_term": 2.0,
    "insert_param": 1.0,
    "wrap": 1.5,
    "hoist": 1.0,
    # a table's feature term (``_op_sr_term``): weight 0 unless the task's inputs are a table's
    # columns (TaskSpec.table_inputs), where it takes TABLE_SR_WEIGHT
    "sr_term": 0.0,
    # a forecaster's state grown by a lag, the calendar, a covariate or a damping
    # (``proposers.state_edits``): weight 0 unless the task's candidates are state-space forecasters
    # (TaskSpec.state_space), where it takes STATE_TERM_WEIGHT
    "state_term": 0.0,
}
TABLE_SR_WEIGHT = 3.0
STATE_TERM_WEIGHT = 2.0
STATE_TERM_GROWTH = 40  # nodes a state edit may add (a seasonal term in predict, its state element, x)
SR_UNARY = ("sin", "cos", "exp", "tanh", "sqrt-abs", "log-abs")
SWAP_BINARY = ("+", "-", "*", "/")
# The unary functions an edit may wrap around any term or swap for another, from the runtime's
# primitive table (native/src/prims.h, in its order): numeric, foldable, one argument, defined on
# every real (TOTAL), one name each (no SYNONYM). New terms take the smooth ones (no PIECEWISE: abs).
SWAP_UNARY: tuple[str, ...] = tuple(
    name
    for name, p in PRIMITIVE_INFO.items()
    if p.kind == "numeric" and p.foldable and p.total and not p.synonym and p.arity.min == p.arity.max == 1
)
GEN_UNARY: tuple[str, ...] = tuple(name for name in SWAP_UNARY if not PRIMITIVE_INFO[name].piecewise)
WRAPPERS = ("sigmoid", "softplus", "tanh", "exp-neg", "gauss", "softsign")
CONSTANTS = (0.5, 1.0, 2.0, -1.0, 0.1, 0.25, 3.0)


@dataclass
class MutationStats:
    """Counters of the generator since construction."""

    attempts: int = 0
    produced: int = 0
    no_site: int = 0  # the operator found nothing to edit in that parent
    size_rejects: int = 0  # too many nodes or parameters, or no parameter left
    lost_inputs: int = 0  # the edit removed every use of the task's inputs
    static_rejects: int = 0
    compile_rejects: int = 0
    duplicates: int = 0
    by_operator: dict[str, int] = field(default_factory=dict)


@dataclass
class _Parent:
    source: str
    forms: list[Node]
    analysis: Analysis
    canonical_hash: str | None
    weight: float


class _Edit:
    """A program being edited: deep-copied forms plus the parameters it will have to declare."""

    def __init__(self, parent: _Parent, rng: random.Random, reserved: set[str]):
        self.forms = [copy_node(f) for f in parent.forms]
        self.rng = rng
        self.reserved = reserved | symbols_in(self.forms)
        self.new_params: list[tuple[str, float]] = []
        self.imported_params: list[list] = []  # full (param ...) forms from a crossover donor

    def fresh_param(self, init: float) -> Sym:
        name = self._fresh_name()
        self.new_params.append((name, float(init)))
        return Sym(name)

    def bounded_param(self, init: float, lo: float, hi: float) -> Sym:
        """A new parameter constrained to (lo, hi)."""
        name = self._fresh_name()
        self.imported_params.append([Sym("param"), Sym(name), float(init), [Sym("between"), float(lo), float(hi)]])
        return Sym(name)

    def _fresh_name(self) -> str:
        k = 1
        while f"p{k}" in self.reserved:
            k += 1
        name = f"p{k}"
        self.reserved.add(name)
        return name

    def get(self, path: tuple[int, ...]) -> Node:
        node: Node = self.forms
        for i in path:
            node = node[i]
        return node

    def set(self, path: tuple[int, ...], value: Node) -> None:
        container: Node = self.forms
        for i in path[:-1]:
            container = container[i]
        container[path[-1]] = value

    def finish(self) -> list[Node]:
        """Drop dead let bindings, declare new parameters, drop declarations nothing uses any more."""
        decls = self.imported_params + [[Sym("param"), Sym(name), init] for name, init in self.new_params]
        forms = [_prune_dead_bindings(f) for f in self.forms] + decls
        used = analyze(forms).used_params
        kept = []
        for form in forms:
            if isinstance(form, list) and form and form[0] == "param" and isinstance(form[0], Sym):
                if str(form[1]) not in used:
                    continue
            kept.append(form)
        # parameter declarations first, in a stable order, then the rest as it was
        params = [f for f in kept if isinstance(f, list) and f and isinstance(f[0], Sym) and f[0] == "param"]
        rest = [f for f in kept if not (isinstance(f, list) and f and isinstance(f[0], Sym) and f[0] == "param")]
        return params + rest


def _prune_dead_bindings(node: Node) -> Node:
    """Remove ``let``/``let*`` bindings that nothing refers to any more (an edit may have removed
    the last use); a parameter used only there would otherwise stay declared but have no effect."""
    if not isinstance(node, list):
        return node
    node = [_prune_dead_bindings(x) for x in node]
    if (
        len(node) >= 3
        and isinstance(node[0], Sym)
        and node[0] in ("let", "let*")
        and isinstance(node[1], list)
        and all(isinstance(b, list) and len(b) == 2 for b in node[1])
    ):
        bindings, body = node[1], node[2:]
        kept: list = []
        used = set().union(*(symbols_in(x) for x in body)) if body else set()
        for binding in reversed(bindings):  # a binding is live if the body or a later init uses it
            if str(binding[0]) in used:
                kept.append(binding)
                if node[0] == "let*":
                    used |= symbols_in(binding[1])
        kept.reverse()  # (in a plain let the inits see only the outer scope: nothing to add)
        if not kept and len(body) == 1:
            return body[0]
        return [node[0], kept] + body
    return node


def _round(value: float) -> float:
    """Four significant digits, so printed constants stay short."""
    if value == 0 or not math.isfinite(value):
        return 0.0
    digits = 3 - int(math.floor(math.log10(abs(value))))
    return float(round(value, digits))


class MutationProposer(Proposer):
    """Offline proposer over the language's grammar (see the module docstring).

    Args:
        seed: the random seed; proposals are a deterministic function of it and of the calls.
        seed_programs: parent programs to start from (sources); the context's best programs and
            ``context.task.seed_programs`` are added at each call.
        inputs: the task's input names; default: ``context.task.inputs``.
        data_inputs: the inputs that broadcast elementwise in arithmetic (vectors of data points);
            default: those the parents use directly in arithmetic, or all inputs without parents.
        weights: operator -> relative weight (default :data:`DEFAULT_WEIGHTS`).
        max_nodes, max_params, min_params: size limits of a proposal (the node limit is at
            least the parent's size + 24) (a program without any
            parameter has nothing to calibrate, hence ``min_params=1``).
        simplify: simplify each proposal (:mod:`proposers.simplify`: constant folding, a function
            of a lone parameter becomes a parameter, unused parameters dropped).
        validate: check each proposal with ``ndvm.compile`` (recommended; the measured rate of
            the raw generator is in docs/proposers.md).
        attempts: edits tried per returned proposal before giving up on it; when they run out,
            ``propose`` returns fewer than ``n`` (``stats`` tells why the edits were rejected).

    One instance serves one call at a time (its random state and duplicate set are shared by
    successive calls, which is what makes a run reproducible); use one instance per thread.
    """

    name = "mutation"
    traits = ProposerTraits(offline=True, round_size=16)

    def __init__(
        self,
        seed: int = 0,
        seed_programs: list[str] | tuple[str, ...] = (),
        *,
        inputs: list[str] | None = None,
        data_inputs: list[str] | None = None,
        weights: dict[str, float] | None = None,
        max_nodes: int = 80,
        max_params: int = 8,
        min_params: int = 1,
        validate: bool = True,
        dedup: bool = True,
        attempts: int = 30,
        simplify: bool = True,
    ):
        super().__init__()
        unknown = set(weights or {}) - set(DEFAULT_WEIGHTS)
        if unknown:
            raise ValueError(f"unknown mutation operators {sorted(unknown)}; known: {sorted(DEFAULT_WEIGHTS)}")
        self.seed = seed
        self.rng = random.Random(seed)
        self.seed_programs = list(seed_programs)
        self.inputs = list(inputs) if inputs is not None else None
        self.data_inputs = list(data_inputs) if data_inputs is not None else None
        self.weights = dict(weights) if weights is not None else dict(DEFAULT_WEIGHTS)
        self.max_nodes = max_nodes
        self.max_params = max_params
        self.min_params = min_params
        self.validate = validate
        self.dedup = dedup
        self.attempts = attempts
        self.simplify = simplify
        self.traits = dataclasses.replace(type(self).traits, simplifies=simplify)  # (the admit stage skips it)
        self.stats = MutationStats()
        self._seen: set[str] = set()
        self._parent_cache: dict[str, _Parent | None] = {}
        self.niches = NicheArchive(seed)  # the parents' niches (its descriptor cache)
        self._compile = require_compile() if validate else None
        self._table = False  # this call's task gives a table's columns (set by propose)
        self._state_space = False  # this call's candidates are forecasters (set by propose)
        self._observed_x: list[tuple[str, int | None]] = []  # what their (ref x i) holds

    # -- parents ---------------------------------------------------------------------------
    def _parent(
        self, source: str, weight: float, known_hash: str | None, wrapper: Callable[[str], str] | None
    ) -> _Parent | None:
        if source not in self._parent_cache:
            try:
                forms = read_all(source)
            except SexprError as exc:
                self.record_failure(Failure("parse", f"parent not readable: {exc}", source, self.name))
                self._parent_cache[source] = None
                return None
            self._parent_cache[source] = _Parent(
                source, forms, analyze(forms), known_hash or self._hash(source, wrapper), weight
            )
        parent = self._parent_cache[source]
        if parent is None:
            return None
        return _Parent(parent.source, parent.forms, parent.analysis, known_hash or parent.canonical_hash, weight)

    def _hash(self, source: str, wrapper: Callable[[str], str] | None) -> str | None:
        """The parent's canonical hash as the store computes it (of the wrapped text, if wrapped)."""
        if self._compile is None:
            return None
        import ndvm

        try:
            return getattr(self._compile(source if wrapper is None else wrapper(source)), "canonical_hash", None)
        except (ndvm.NDVMError, ValueError):
            return None

    def _parents(self, context: ProposalContext | None) -> list[_Parent]:
        wrapper = context.task.program_source if context is not None else None
        parents: list[_Parent] = []
        seen: set[str] = set()
        best = list(context.best) if context else []
        for scored in best:
            if scored.source not in seen:
                seen.add(scored.source)
                p = self._parent(scored.source, 1.0, scored.canonical_hash, wrapper)
                if p:
                    parents.append(p)
        # Rank-based selection pressure (1, 1/2, 1/3...) over niches, not programs: near-copies of
        # the best share its weight instead of crowding out the other families (proposers/niches.py).
        for p, weight in zip(parents, rank_weights([self.niches.niche_of(p.source) for p in parents])):
            p.weight = weight
        seeds = self.seed_programs + (list(context.task.seed_programs) if context else [])
        for source in seeds:
            if source not in seen:
                seen.add(source)
                p = self._parent(source, 0.5 if best else 1.0, None, wrapper)
                if p:
                    parents.append(p)
        return parents

    # -- public ----------------------------------------------------------------------------
    def propose(self, context: ProposalContext | None, n: int) -> list[Proposal]:
        parents = self._parents(context)
        self._table = bool(context is not None and getattr(context.task, "table_inputs", False))
        self._state_space = bool(context is not None and getattr(context.task, "state_space", False))
        self._observed_x = list(getattr(context.task, "observed_x", []) or []) if context is not None else []
        inputs = self.inputs
        if inputs is None and context is not None:
            inputs = list(context.task.inputs)
        if inputs is None:
            inputs = sorted(set().union(*(p.analysis.free for p in parents))) if parents else []
        if not inputs and not parents:
            raise ValueError("MutationProposer needs parents (seed programs or context.best) or the task's inputs")
        data = self.data_inputs
        if data is None and self._table:
            data = list(inputs)  # a table's columns are all per-row vectors, used or not
        if data is None:
            uses: set[str] = set()
            for p in parents:
                for form in p.forms:
                    _arith_uses(form, uses)
            data = sorted(set(inputs) & uses) if parents else list(inputs)
        input_set, data_set = set(inputs), set(data)
        wrapper = context.task.program_source if context is not None else None
        # re-analyse parents with the data inputs known, so value classes are right
        parents = [_Parent(p.source, p.forms, analyze(p.forms, data_set), p.canonical_hash, p.weight) for p in parents]
        for p in parents:
            if p.canonical_hash:
                self._seen.add(p.canonical_hash)
            self._seen.add(structure_key(p.forms))

        out: list[Proposal] = []
        for _ in range(n):
            proposal = self._one(parents, input_set, data_set, wrapper)
            if proposal is not None:
                out.append(proposal)
        return out

    # -- one proposal ----------------------------------------------------------------------
    def _one(
        self, parents: list[_Parent], inputs: set[str], data: set[str], wrapper: Callable[[str], str] | None
    ) -> Proposal | None:
        ops = list(self.weights)
        op_weights = [self.weights[o] for o in ops]
        if self._table and "sr_term" in self.weights and self.weights["sr_term"] == 0.0:
            op_weights[ops.index("sr_term")] = TABLE_SR_WEIGHT
        if self._state_space and "state_term" in self.weights and self.weights["state_term"] == 0.0:
            op_weights[ops.index("state_term")] = STATE_TERM_WEIGHT
        for _ in range(self.attempts):
            self.stats.attempts += 1
            if parents:
                op = self.rng.choices(ops, op_weights)[0]
                parent = self.rng.choices(parents, [p.weight for p in parents])[0]
                edit = _Edit(parent, self.rng, set(inputs))
                used_parents = [parent]
                parent_size = sum(count_nodes(f) for f in parent.forms)
                parent_inputs = parent.analysis.free & inputs
                ok = getattr(self, f"_op_{op}")(edit, parent, parents, data, used_parents)
            else:
                op, used_parents, parent_size, parent_inputs = "grow", [], 0, set()
                edit = _Edit(_Parent("", [], analyze([]), None, 1.0), self.rng, set(inputs))
                ok = self._op_grow(edit, data or inputs)
            if not ok:
                self.stats.no_site += 1
                continue
            forms = edit.finish()
            if self.simplify:  # fold constants, lone-parameter functions: no bloat on the Pareto front
                forms = simplify_forms(forms).forms
            size = sum(count_nodes(f) for f in forms)
            n_params = sum(1 for f in forms if isinstance(f, list) and f and f[0] == "param")
            # the size cap grows with the parent, so large seed programs can still be edited (a
            # state edit touches three functions and declares up to two parameters at once)
            max_size = max(self.max_nodes, parent_size + (STATE_TERM_GROWTH if op == "state_term" else 24))
            if size > max_size or n_params > self.max_params or n_params < self.min_params:
                self.stats.size_rejects += 1
                continue
            # a model that used the data must still use it (a hoist or a subtree can drop x)
            if used_parents and parent_inputs and not (symbols_in(forms) & parent_inputs):
                self.stats.lost_inputs += 1
                continue
            if static_problems(forms, inputs, require_expression=wrapper is None):
                self.stats.static_rejects += 1
                continue
            source = to_source(forms)
            key = structure_key(forms)  # replaced by ndvm's canonical hash when validating
            chash = None
            names: list[str] = []
            if self._compile is not None:
                import ndvm

                try:
                    program = self._compile(source if wrapper is None else wrapper(source))
                except (ndvm.NDVMError, ValueError):  # ValueError: the task's contract check
                    self.stats.compile_rejects += 1
                    continue
                chash = getattr(program, "canonical_hash", None)
                names = list(program.param_names)
                key = chash or source
            if self.dedup and key in self._seen:
                self.stats.duplicates += 1
                continue
            self._seen.add(key)
            self.stats.produced += 1
            self.stats.by_operator[op] = self.stats.by_operator.get(op, 0) + 1
            return Proposal(
                source=source,
                origin=Origin(self.name, None, tuple(p.canonical_hash for p in used_parents if p.canonical_hash), op),
                canonical_hash=chash,
                param_names=names or [str(f[1]) for f in forms if isinstance(f, list) and f and f[0] == "param"],
            )
        return None

    # -- site selection --------------------------------------------------------------------
    @staticmethod
    def _editable(site: Site) -> bool:
        return (
            site.klass in ("scalar", "data")
            and site.context in ("numeric", "value")
            and not site.in_loop_control
            and len(site.path) >= 1
            # exact integers are structure (counts, sizes, keys), as in ndvm's canonical form
            and not (isinstance(site.node, int) and not isinstance(site.node, bool))
            and not (isinstance(site.node, list) and site.node and site.node[0] == "quote")
        )

    def _targets(self, parent: _Parent) -> list[Site]:
        return [s for s in parent.analysis.sites if self._editable(s)]

    def _pick(self, sites: list[Site]) -> Site | None:
        return self.rng.choice(sites) if sites else None

    @staticmethod
    def _elementwise_path(site: Site, parent: _Parent) -> bool:
        """True when the value at ``site`` reaches the result through elementwise arithmetic and
        special forms only; a call of another primitive (outer, matvec, list, ref...) or of a
        user procedure on the way means its shape matters, so it must keep its class."""
        node: Node = parent.forms
        for i in site.path[:-1]:
            node = node[i]
            if isinstance(node, list) and node and isinstance(node[0], Sym):
                head = str(node[0])
                if head in SPECIAL_FORMS and head not in site.env:
                    continue
                if head in NUMERIC_OPS and head not in site.env:
                    continue
                return False
        return True

    def _leaves(self, site: Site, parent: _Parent, data: set[str]) -> tuple[list[str], list[str]]:
        """(data-like names, scalar names) that a new term at ``site`` may use.

        A ``data`` site keeps its shape: new terms there use the data names it already uses. A
        ``scalar`` site may become data only on an elementwise path to the result.
        """
        control = parent.analysis.control_vars
        data_names = sorted(data - set(site.env))  # an input shadowed by a local is not visible
        scalars = sorted(parent.analysis.params)
        for name, klass in sorted(site.env.items()):
            if name in control:
                continue
            if klass == "data":
                data_names.append(name)
            elif klass == "scalar":
                scalars.append(name)
        if site.klass == "data" and not self._table:
            own = [name for name in data_names if name in symbols_in(site.node)]
            data_names = own or data_names
        elif not self._elementwise_path(site, parent):
            data_names = []
        return data_names, scalars

    def _keep_class(self, edit: _Edit, site: Site, term: Node, data_names: list[str]) -> Node:
        """``term``, made to use the data when it replaces a data site (so the shape is kept)."""
        if site.klass == "data" and data_names and not (symbols_in(term) & set(data_names)):
            return [Sym("+"), term, [Sym("*"), edit.fresh_param(0.5), Sym(self.rng.choice(data_names))]]
        return term

    # -- the grammar -----------------------------------------------------------------------
    def _leaf(self, edit: _Edit, data_names: list[str], scalars: list[str]) -> Node:
        r = self.rng.random()
        if data_names and r < 0.55:
            return Sym(self.rng.choice(data_names))
        if r < 0.72:
            return edit.fresh_param(self.rng.choice((0.1, 0.5, 1.0, -0.5)))
        if scalars and r < 0.88:
            return Sym(self.rng.choice(scalars))
        return self.rng.choice(CONSTANTS)

    def _term(self, edit: _Edit, data_names, scalars, depth: int) -> Node:
        if depth <= 0 or self.rng.random() < 0.25:
            return self._leaf(edit, data_names, scalars)
        r = self.rng.random()
        if r < 0.45:
            op = self.rng.choice(("+", "-", "*", "*", "/"))
            return [
                Sym(op),
                self._term(edit, data_names, scalars, depth - 1),
                self._term(edit, data_names, scalars, depth - 1),
            ]
        if r < 0.75:
            return [Sym(self.rng.choice(GEN_UNARY)), self._term(edit, data_names, scalars, depth - 1)]
        # a scaled term: the most useful shape for a model (p * f(...))
        return [
            Sym("*"),
            edit.fresh_param(self.rng.choice((0.1, 0.5, 1.0))),
            self._term(edit, data_names, scalars, depth - 1),
        ]

    def _wrap(self, edit: _Edit, node: Node) -> Node:
        kind = self.rng.choice(WRAPPERS)
        if kind == "exp-neg":
            return [Sym("exp"), [Sym("-"), node]]
        if kind == "gauss":
            return [Sym("exp"), [Sym("-"), [Sym("square"), node]]]
        if kind == "softsign":
            return [Sym("/"), node, [Sym("+"), 1.0, [Sym("abs"), node]]]
        return [Sym(kind), node]

    # -- operators -------------------------------------------------------------------------
    def _op_subtree(self, edit, parent, parents, data, used) -> bool:
        site = self._pick(self._targets(parent))
        if site is None:
            return False
        data_names, scalars = self._leaves(site, parent, data)
        term = self._term(edit, data_names, scalars, self.rng.randint(1, 3))
        edit.set(site.path, self._keep_class(edit, site, term, data_names))
        return True

    def _op_crossover(self, edit, parent, parents, data, used) -> bool:
        donors = [p for p in parents if p is not parent] or [parent]
        donor = self.rng.choice(donors)
        site = self._pick(self._targets(parent))
        if site is None:
            return False
        # a donor sub-expression must not depend on the donor's local variables
        candidates = [
            s for s in self._targets(donor) if not (symbols_in(s.node) & (set(s.env) | donor.analysis.control_vars))
        ]
        visible_locals = set(site.env)
        candidates = [s for s in candidates if not (symbols_in(s.node) & visible_locals)]
        # shapes: a data site takes a piece that uses the same data; a scalar site off an
        # elementwise path takes a scalar piece
        if site.klass == "data":
            own = symbols_in(site.node) & data
            candidates = [s for s in candidates if s.klass == "data" and symbols_in(s.node) & data <= own]
        elif not self._elementwise_path(site, parent):
            candidates = [s for s in candidates if s.klass == "scalar"]
        donor_site = self._pick(candidates)
        if donor_site is None:
            return False
        piece = copy_node(donor_site.node)
        declared = set(parent.analysis.params)
        parent_names = symbols_in(parent.forms)
        for name in sorted(symbols_in(piece) & set(donor.analysis.params)):
            if name not in declared and name in parent_names:
                return False  # the donor's parameter name means something else in this parent
            if name not in declared:
                decl = donor.forms[donor.analysis.params[name].form_index]
                edit.imported_params.append(copy_node(decl))
                edit.reserved.add(name)
        edit.set(site.path, piece)
        if donor is not parent:
            used.append(donor)
        return True

    def _op_swap(self, edit, parent, parents, data, used) -> bool:
        sites = [
            s
            for s in self._targets(parent)
            if isinstance(s.node, list)
            and s.node
            and isinstance(s.node[0], Sym)
            and (
                s.node[0] in SWAP_BINARY
                and len(s.node) >= 3
                or s.node[0] in SWAP_UNARY + ("log", "sqrt")
                or s.node[0] in ("min", "max")
            )
        ]
        site = self._pick(sites)
        if site is None:
            return False
        node = edit.get(site.path)
        head = str(node[0])
        if head in ("min", "max"):
            node[0] = Sym("max" if head == "min" else "min")
        elif head in SWAP_BINARY:
            node[0] = Sym(self.rng.choice([o for o in SWAP_BINARY if o != head]))
        else:
            node[0] = Sym(self.rng.choice([o for o in SWAP_UNARY if o != head]))
        return True

    def _op_constant(self, edit, parent, parents, data, used) -> bool:
        literals = [s for s in self._targets(parent) if isinstance(s.node, float)]
        params = list(parent.analysis.params.values())
        if not literals and not params:
            return False
        if literals and (not params or self.rng.random() < 0.5):
            site = self.rng.choice(literals)
            value = site.node
            edit.set(
                site.path, _round(value * math.exp(self.rng.gauss(0, 0.5)) if value != 0 else self.rng.gauss(0, 0.5))
            )
            return True
        decl = self.rng.choice(params)
        form = edit.forms[decl.form_index]
        init = decl.init
        constraint = decl.constraint
        bounds = None
        if isinstance(constraint, Sym) and constraint == "unit":
            bounds = (0.0, 1.0)
        elif isinstance(constraint, list) and len(constraint) == 3 and constraint[0] == "between":
            bounds = (float(constraint[1]), float(constraint[2]))
        if constraint is None or (isinstance(constraint, Sym) and constraint == "free"):
            new = init * math.exp(self.rng.gauss(0, 0.5)) if init != 0 else self.rng.gauss(0, 0.5)
            if self.rng.random() < 0.2:
                new = -new
        elif isinstance(constraint, Sym) and constraint == "positive":
            new = (init if init > 0 else 0.5) * math.exp(self.rng.gauss(0, 0.5))
        elif bounds is not None:
            lo, hi = bounds
            new = min(max(init + self.rng.gauss(0, 0.2) * (hi - lo), lo + 0.01 * (hi - lo)), hi - 0.01 * (hi - lo))
        else:
            return False
        new = _round(new)
        # the runtime wants positive inits > 0 and bounded inits strictly inside their interval
        if new == init or (constraint == "positive" and new <= 0) or (bounds and not bounds[0] < new < bounds[1]):
            return False
        form[2] = new
        return True

    def _op_insert_term(self, edit, parent, parents, data, used) -> bool:
        site = self._pick(self._targets(parent))
        if site is None:
            return False
        data_names, scalars = self._leaves(site, parent, data)
        node = copy_node(site.node)
        term = [Sym("*"), edit.fresh_param(0.1), self._term(edit, data_names, scalars, self.rng.randint(0, 2))]
        shape = self.rng.random()
        if shape < 0.5:
            new: Node = [Sym("+"), node, term]
        elif shape < 0.75:
            new = [Sym("-"), node, term]
        else:
            new = [Sym("*"), node, [Sym("+"), 1.0, term]]
        edit.set(site.path, new)
        return True

    def _op_insert_param(self, edit, parent, parents, data, used) -> bool:
        targets = self._targets(parent)
        literals = [s for s in targets if isinstance(s.node, float)]
        if literals and self.rng.random() < 0.3:
            site = self.rng.choice(literals)
            edit.set(site.path, edit.fresh_param(site.node))
            return True
        site = self._pick(targets)
        if site is None:
            return False
        node = copy_node(site.node)
        if self.rng.random() < 0.5:
            edit.set(site.path, [Sym("*"), edit.fresh_param(1.0), node])
        else:
            edit.set(site.path, [Sym("+"), node, edit.fresh_param(0.0)])
        return True

    def _op_wrap(self, edit, parent, parents, data, used) -> bool:
        site = self._pick(self._targets(parent))
        if site is None:
            return False
        edit.set(site.path, self._wrap(edit, copy_node(site.node)))
        return True

    def _op_hoist(self, edit, parent, parents, data, used) -> bool:
        targets = self._targets(parent)
        calls = [
            s
            for s in targets
            if isinstance(s.node, list) and s.node and isinstance(s.node[0], Sym) and s.node[0] in NUMERIC_OPS
        ]
        site = self._pick(calls)
        if site is None:
            return False
        n = len(site.path)
        inner = [
            s
            for s in targets
            if len(s.path) > n
            and s.path[:n] == site.path
            and set(s.env) == set(site.env)  # same scope: no variable escapes its binder
            and (s.klass == site.klass or self._elementwise_path(site, parent))
        ]
        choice = self._pick(inner)
        if choice is None:
            return False
        edit.set(site.path, copy_node(choice.node))
        return True

    def _feature(self, edit: _Edit, names: list[str]) -> Node:
        """A feature of a table's inputs (see ``sr_term`` in the module docstring)."""
        a, b = Sym(self.rng.choice(names)), Sym(self.rng.choice(names))
        r = self.rng.random()
        if r < 0.15:
            return a
        if r < 0.35:
            return [Sym("*"), a, b]
        if r < 0.5:
            return [Sym("/"), a, [Sym("+"), edit.fresh_param(1.0), [Sym("abs"), b]]] if a == b else [Sym("/"), a, b]
        if r < 0.62:
            return [Sym("*"), a, a] if self.rng.random() < 0.6 else [Sym("*"), a, a, a]
        kind = self.rng.choice(SR_UNARY)
        inner: Node = [Sym("*"), edit.fresh_param(self.rng.choice((0.5, 1.0))), b]
        if kind == "sqrt-abs":
            unary: Node = [Sym("sqrt"), [Sym("abs"), b]]
        elif kind == "log-abs":
            unary = [Sym("log"), [Sym("+"), 1e-3, [Sym("abs"), b]]]
        elif kind == "exp":
            unary = [Sym("exp"), [Sym("-"), inner]]
        else:
            unary = [Sym(kind), inner]
        return [Sym("*"), a, unary] if r > 0.85 else unary

    def _op_sr_term(self, edit, parent, parents, data, used) -> bool:
        names = sorted(data)
        sites = [s for s in self._targets(parent) if s.klass == "data" or self._elementwise_path(s, parent)]
        site = self._pick(sites)
        if site is None or not names:
            return False
        term = [Sym("*"), edit.fresh_param(0.1), self._feature(edit, names)]
        edit.set(site.path, [Sym("+"), copy_node(site.node), term])
        return True

    def _op_state_term(self, edit, parent, parents, data, used) -> bool:
        edited = grow_state(edit.forms, self.rng, self._observed_x, edit.fresh_param, edit.bounded_param)
        return edited is not None

    def _op_grow(self, edit: _Edit, data: list[str] | set[str]) -> bool:
        data_names = sorted(data)
        term = self._term(edit, data_names, [], self.rng.randint(2, 4))
        # a model must depend on the data and on at least one parameter
        if data_names and not (symbols_in(term) & set(data_names)):
            term = [Sym("+"), term, [Sym("*"), edit.fresh_param(0.5), Sym(self.rng.choice(data_names))]]
        if not edit.new_params:
            term = [Sym("*"), edit.fresh_param(1.0), term]
        edit.forms = [term]
        return True


__all__ = ["MutationProposer", "MutationStats", "DEFAULT_WEIGHTS", "STATE_TERM_WEIGHT"]
