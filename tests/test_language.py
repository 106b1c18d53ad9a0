"""The language is defined once, natively (native/src/prims.h, forms.h, error.h, optim.h,
program.h), and Python reads it through the binding: these tests fail when a Python mirror of a
native table comes back or drifts, and pin ndvm.read (the runtime's reader as Python data)."""

from __future__ import annotations

import ast
import math
import pickle
from pathlib import Path

import pytest

import ndvm
from ndvm import _native, language
from ndvm.language import Dotted, Symbol
from proposers import language as checks
from proposers import simplify
from proposers.sexpr import SexprError, read_all

ROOT = Path(__file__).resolve().parents[1]


# ---- primitives and special forms -------------------------------------------------------------


def test_every_native_primitive_is_known_to_the_static_checks_with_its_native_arity():
    native = {p.name: (p.min_args, p.max_args) for p in _native.PRIMITIVES}
    assert len(native) > 100 and native["apply"] == (2, None)  # prims.h: X(APPLY, "apply", 2, -1)
    assert checks.PRIMITIVE_ARITY == native
    assert {name: tuple(a) for name, a in language.PRIMITIVES.items()} == native


@pytest.mark.parametrize(
    "name,lo,hi", [(p.name, p.min_args, -1 if p.max_args is None else p.max_args) for p in _native.PRIMITIVES]
)
def test_each_arity_is_the_compilers_and_the_checks(name, lo, hi):
    """One argument too few (and one too many for a fixed arity): the compiler refuses the call
    statically and the proposers' checks report it; the edges of the arity are accepted by both."""

    def call(n):
        return f"({name} {' '.join(['1.0'] * n)})"

    bad = ([lo - 1] if lo > 0 else []) + ([hi + 1] if hi >= 0 else [])
    for n in bad:
        with pytest.raises(ndvm.CheckError, match="argument"):
            ndvm.compile(call(n))
        assert any(f"'{name}' takes" in p for p in checks.static_problems(read_all(call(n)))), (name, n)
    for n in {lo, hi if hi >= 0 else lo + 3}:
        assert not any(f"'{name}' takes" in p for p in checks.static_problems(read_all(call(n)))), (name, n)


def test_special_forms_come_from_the_compilers_table():
    native = dict(_native.SPECIAL_FORMS)
    assert language.SPECIAL_FORMS == set(native)
    assert language.RESERVED_FORMS == {name for name, ok in native.items() if not ok}
    assert checks.SPECIAL_FORMS == set(native) | checks.AUXILIARY_KEYWORDS
    assert not set(native) & set(checks.PRIMITIVE_ARITY)


@pytest.mark.parametrize("form", sorted(dict(_native.SPECIAL_FORMS)))
def test_each_special_form_is_handled_by_the_compiler(form):
    """A supported form never reaches the "not supported" refusal (its case in Compiler::form
    exists); a reserved one always does. Either way it is no primitive and no input."""
    supported = dict(_native.SPECIAL_FORMS)[form]
    try:
        ndvm.compile(f"({form} 1.0 2.0)")
        refused = None
    except (ndvm.CheckError, ndvm.EvalError) as exc:
        refused = str(exc)
    assert (refused is not None and "is not supported" in refused) == (not supported), refused
    with pytest.raises(ndvm.CheckError):
        ndvm.compile(f"(param {form} 1.0) 1.0" if form != "param" else "(param param 1.0) 1.0")


def _literal_name_sets(path: Path) -> list[tuple[int, set[str]]]:
    """Every dict, set, tuple or list literal of string constants in ``path`` with its line."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        items = (
            node.keys
            if isinstance(node, ast.Dict)
            else node.elts
            if isinstance(node, (ast.Set, ast.Tuple, ast.List))
            else None
        )
        if items:
            names = {k.value for k in items if isinstance(k, ast.Constant) and isinstance(k.value, str)}
            out.append((node.lineno, names))
    return out


def test_no_python_mirror_of_the_native_tables():
    """No module of the product spells out a large part of the primitive or special-form table
    (the baselines in ndvm_bench keep their own language on purpose: an independent oracle)."""
    prims, forms = set(checks.PRIMITIVE_ARITY), set(language.SPECIAL_FORMS)
    offenders = []
    for package in ("ndvm", "proposers", "datasets", "storage", "flows"):
        for path in sorted((ROOT / package).rglob("*.py")):
            for line, names in _literal_name_sets(path):
                if len(names & prims) > 25 or len(names & forms) > 12:
                    offenders.append(f"{path.relative_to(ROOT)}:{line}")
    assert offenders == []


def test_the_mirror_scan_would_catch_the_old_table(tmp_path):
    old = tmp_path / "old.py"
    old.write_text("ARITY = {" + ", ".join(f"{n!r}: (1, 1)" for n in list(checks.PRIMITIVE_ARITY)[:40]) + "}\n")
    assert any(len(names & set(checks.PRIMITIVE_ARITY)) > 25 for _, names in _literal_name_sets(old))


# ---- the primitives' semantic columns (prims.h: kind and flags) ---------------------------------

INFO = language.PRIMITIVE_INFO
FOLDABLE = sorted(name for name, p in INFO.items() if p.foldable)
RANGED = sorted(name for name, p in INFO.items() if p.range_constraint is not None)
INDEXED = sorted(name for name, p in INFO.items() if p.index_args)
# Categories as sets of names, for the mirror scan: the kinds and the flags.
CATEGORIES = {kind: language.primitives_of_kind(kind) for kind in language.PRIMITIVE_KINDS if kind != "other"} | {
    "foldable": frozenset(FOLDABLE),
    "ranged": frozenset(RANGED),
    "index-taking": frozenset(INDEXED),
}
# Names a Python copy of a category was (or would be) kept under.
CATEGORY_NAMES = {
    "NUMERIC_OPS",
    "NUMERIC_UNARY",
    "NUMERIC_BINARY",
    "NUMERIC_VARIADIC",
    "SCALAR_REDUCERS",
    "COMPARISONS",
    "PREDICATES",
    "INDEX_ARGS",
    "FOLDABLE",
    "RANGE_CONSTRAINT",
}


def test_every_primitive_exports_its_columns():
    kinds = set(_native.PrimKind.__members__)
    assert kinds == set(language.PRIMITIVE_KINDS) == {"numeric", "comparison", "predicate", "reducer", "other"}
    for p in _native.PRIMITIVES:
        info = INFO[p.name]
        assert info.kind in kinds and info.arity == (p.min_args, p.max_args)
        assert info.foldable == p.foldable and info.index_args == tuple(p.index_args)
        assert (info.range_constraint is None) == (p.range_constraint is None)
    assert INFO["sin"].range_constraint == [Symbol("between"), -1, 1] and INFO["exp"].range_constraint == "positive"
    assert INFO["ref"].index_args == (1, 2) and INFO["+"].foldable and not INFO["floor"].foldable
    with pytest.raises(ValueError, match="unknown primitive kind 'unary'"):
        language.primitives_of_kind("unary")


def test_the_proposers_categories_are_the_runtimes_columns():
    assert checks.NUMERIC_OPS == language.primitives_of_kind("numeric")
    assert checks.SCALAR_REDUCERS == language.primitives_of_kind("reducer")
    assert checks.COMPARISONS == language.primitives_of_kind("comparison")
    assert checks.INDEX_ARGS == {name: INFO[name].index_args for name in INDEXED}
    assert simplify.FOLDABLE == set(FOLDABLE)
    assert simplify.RANGE_CONSTRAINT == {name: INFO[name].range_constraint for name in RANGED}


def _category_mirrors(path: Path) -> list[str]:
    """Literal copies of a primitive category in ``path``: a module-level name of a category bound
    to a literal, or any literal whose primitive names are (nearly) all of one category and cover
    most of it. Tables of another purpose (the formula printer's, the niches' feature groups, the
    mutation operators' choices) mix categories or take a few of one, and are not copies."""
    prims = set(language.PRIMITIVES)
    out = []
    tree = ast.parse(path.read_text(), str(path))
    for node in tree.body:
        target = (
            node.targets[0]
            if isinstance(node, ast.Assign)
            else node.target
            if isinstance(node, ast.AnnAssign)
            else None
        )
        if isinstance(target, ast.Name) and target.id in CATEGORY_NAMES:
            value = node.value
            if isinstance(value, ast.Call) and value.args:  # frozenset({...})
                value = value.args[0]
            if isinstance(value, (ast.Set, ast.Dict, ast.List, ast.Tuple)):
                out.append(f"{path.name}:{node.lineno} {target.id}")
    for line, names in _literal_name_sets(path):
        named = names & prims
        for category, members in CATEGORIES.items():
            inside = named & members
            if len(inside) >= 4 and len(inside) >= 0.9 * len(named) and len(inside) >= 0.6 * len(members):
                out.append(f"{path.name}:{line} {category}")
    return out


def test_no_python_mirror_of_a_primitive_category():
    offenders = []
    for package in ("ndvm", "proposers", "datasets", "storage", "flows"):
        for path in sorted((ROOT / package).rglob("*.py")):
            offenders += [f"{path.parent.name}/{o}" for o in _category_mirrors(path)]
    assert offenders == []


def test_the_category_scan_would_catch_a_copy(tmp_path):
    for category, members in CATEGORIES.items():
        copy = tmp_path / f"{category}.py"
        copy.write_text(f"SOME_SET = frozenset({sorted(members)!r})\n")
        assert _category_mirrors(copy), category
    old = tmp_path / "old.py"  # the small copies proposers/language.py kept before the columns
    old.write_text('NUMERIC_VARIADIC = frozenset({"+", "-", "*", "/", "min", "max"})\nINDEX_ARGS = {"ref": (1, 2)}\n')
    assert len(_category_mirrors(old)) == 2


def _same(x, y):
    return (math.isnan(x) and math.isnan(y)) or x == y


@pytest.mark.parametrize("name", sorted(language.primitives_of_kind("numeric")))
def test_a_numeric_primitive_maps_numbers_to_numbers_elementwise(name):
    """Numbers in, a number out; over a vector, the numbers of each element (a primitive that
    takes scalars only refuses the vector with an EvalError naming it)."""
    n = max(INFO[name].arity.min, 1)
    rest = " 2.0" * (n - 1)
    scalar = [ndvm.compile(f"({name} {x}{rest})").run() for x in ("3.0", "-2.0")]
    assert all(type(v) in (float, int) for v in scalar), scalar
    try:
        vector = ndvm.compile(f"({name} (vec 3.0 -2.0){rest})").run()
    except ndvm.EvalError as exc:
        assert f"'{name}'" in str(exc)
        return
    assert vector.shape == (2,) and all(_same(v, s) for v, s in zip(vector, scalar)), (vector, scalar)


@pytest.mark.parametrize(
    "name", sorted(language.primitives_of_kind("comparison") | language.primitives_of_kind("predicate"))
)
def test_comparisons_and_predicates_give_booleans(name):
    n = max(INFO[name].arity.min, 1)
    assert type(ndvm.compile(f"({name}{' 3.0' * n})").run()) is bool


# One call of each reducer; a new reducer needs its line here.
REDUCER_CALLS = {
    "dot": "(dot (vec 1.0 2.0) (vec 3.0 4.0))",
    "logdet": "(logdet (mat (vec 2.0 0.0) (vec 0.0 3.0)))",
    "det": "(det (mat (vec 2.0 1.0) (vec 1.0 3.0)))",
    "trace": "(trace (mat (vec 2.0 1.0) (vec 1.0 3.0)))",
    "vsum": "(vsum (mat (vec 2.0 1.0) (vec 1.0 3.0)))",
    "norm": "(norm (vec 3.0 4.0))",
    "rows": "(rows (mat (vec 2.0 1.0 0.0) (vec 1.0 3.0 0.0)))",
    "cols": "(cols (mat (vec 2.0 1.0 0.0) (vec 1.0 3.0 0.0)))",
    "size": "(size (mat (vec 2.0 1.0 0.0) (vec 1.0 3.0 0.0)))",
    "length": "(length (list 1 2 3))",
}


def test_reducers_give_one_number():
    assert set(REDUCER_CALLS) == language.primitives_of_kind("reducer")
    for name, call in REDUCER_CALLS.items():
        assert type(ndvm.compile(call).run()) in (float, int), name


@pytest.mark.parametrize("name", FOLDABLE)
def test_a_foldable_primitive_folds_to_what_the_vm_computes(name):
    """Simplification replaces the call on literals by a literal with the runtime's bits, and
    that literal is the value the same call computes on a parameter (the model is unchanged)."""
    assert INFO[name].kind == "numeric"
    n = max(INFO[name].arity.min, 1)
    literals = " ".join(["0.5", "0.25", "0.75"][:n])
    folded = simplify.simplify(read_all(f"(* x ({name} {literals}))"))
    assert folded.changed and folded.forms[0][:2] == ["*", "x"]
    value = folded.forms[0][2]
    assert type(value) is float and value == ndvm.compile(f"({name} {literals})").run()
    params = " ".join(f"(param a{k} {v})" for k, v in enumerate(literals.split()))
    on_params = ndvm.compile(f"{params} ({name} {' '.join(f'a{k}' for k in range(n))})")
    assert on_params.evaluate([[float(v) for v in literals.split()]])[0] == value


@pytest.mark.parametrize("name", sorted(language.primitives_of_kind("numeric") - set(FOLDABLE)))
def test_a_primitive_not_foldable_is_left_alone(name):
    n = max(INFO[name].arity.min, 1)
    assert not simplify.simplify(read_all(f"(* x ({name}{' 0.5' * n}))")).changed


@pytest.mark.parametrize("name", RANGED)
def test_a_ranged_primitive_stays_in_its_range(name):
    """Its values over a grid lie in the range its constraint names, and the constraint is one a
    parameter declaration accepts."""
    constraint = language.to_str(INFO[name].range_constraint)
    ndvm.compile(f"(param p 0.5 {constraint}) p")
    grid = ndvm.compile(f"(param a 0.0) ({name} a)").evaluate([[x] for x in range(-30, 31)] + [[0.1], [-0.1]])
    lo, hi = {"positive": (0, math.inf), "unit": (0, 1), "(between -1 1)": (-1, 1)}[constraint]
    assert all(lo <= v <= hi for v in grid) and not all(v == grid[0] for v in grid)
    if constraint != "(between -1 1)":  # open ranges: the end is not reached on the grid
        assert all(lo < v < hi for v in grid)


# A valid call of each index-taking primitive, with ARG where an index goes.
INDEX_CALLS = {
    "ref": ["(ref (vec 1.0 2.0) ARG)", "(ref (mat (vec 1.0 2.0)) 0 ARG)"],
    "list-ref": ["(list-ref (list 1 2) ARG)"],
    "list-tail": ["(list-tail (list 1 2) ARG)"],
    "eye": ["(eye ARG)"],
    "zeros": ["(zeros ARG)", "(zeros 1 ARG)"],
    "ones": ["(ones ARG)", "(ones 1 ARG)"],
}


@pytest.mark.parametrize("name", INDEXED)
def test_an_index_argument_must_be_an_integer(name):
    assert len(INDEX_CALLS[name]) == len(INFO[name].index_args)
    for call in INDEX_CALLS[name]:
        ndvm.compile(call.replace("ARG", "1")).run()
        with pytest.raises(ndvm.EvalError, match=f"'{name}': an? (index|size) must be an integer"):
            ndvm.compile(call.replace("ARG", "0.5")).run()


def test_every_index_taking_primitive_has_a_call():
    assert set(INDEX_CALLS) == set(INDEXED)


# ---- error kinds, lane statuses, Limits ------------------------------------------------------


def test_every_native_error_kind_has_its_exception_class():
    kinds = _native.ErrorKind.__members__
    assert set(kinds) == {"Parse", "Check", "Eval", "Limit"}
    for name in kinds:
        cls = getattr(ndvm, name + "Error")
        assert issubclass(cls, ndvm.NDVMError)
    with pytest.raises(ndvm.ParseError):
        ndvm.compile("(+ 1")
    with pytest.raises(ndvm.CheckError):
        ndvm.compile("(car)")


def test_calibrate_many_reports_a_native_error_kind_as_its_class():
    fits = ndvm.calibrate_many(
        ["(param a 1.0) (car a)", "(param a 1.0) (* a x)"], {"x": [1.0, 2.0]}, target=[2.0, 4.0], steps=5, restarts=2
    )
    assert fits[0].status == "error" and fits[0].error_type is ndvm.EvalError
    assert fits[1].status == "ok" and set(fits[1].lane_status) <= set(_native.LaneStatus.__members__)


def test_lane_statuses_are_the_native_enum():
    assert {name: int(v) for name, v in _native.LaneStatus.__members__.items()} == {
        "ok": 0,
        "nonfinite": 1,
        "converged": 2,
    }
    fit = ndvm.calibrate(
        "(param a 1.0) (* a x)",
        {"x": [1.0, 2.0]},
        target=[2.0, 4.0],
        optimizer="lbfgs",
        steps=200,
        restarts=2,
        tol=1e-12,
    )
    assert fit.lane_status == ["converged", "converged"]


def test_limits_defaults_are_the_native_struct_and_travel_as_it():
    native = _native.Limits()
    default = ndvm.Limits()
    assert (default.max_steps, default.max_depth, default.max_bytes, default.replay, default.max_work) == (
        native.max_steps,
        native.max_depth,
        native.max_bytes,
        native.replay,
        native.max_work,
    )
    tight = ndvm.Limits(max_steps=50)
    with pytest.raises(ndvm.LimitError, match="max_steps"):
        ndvm.compile("(let loop ((i 0)) (loop (+ i 1)))", limits=tight).run()
    copy = pickle.loads(pickle.dumps(tight))  # the cached native struct does not travel
    assert copy == tight and copy.native().max_steps == 50


# ---- ndvm.read -------------------------------------------------------------------------------


def test_read_gives_the_datum_tree():
    forms = ndvm.read("(define (f a . rest) 'x [+ 1 2.5] #t #f -7 1e400) ; c\n #| b |# #;(gone) sym")
    assert forms == [
        [
            Symbol("define"),
            Dotted((Symbol("f"), Symbol("a")), Symbol("rest")),
            [Symbol("quote"), Symbol("x")],
            [Symbol("+"), 1, 2.5],
            True,
            False,
            -7,
            math.inf,
        ],
        Symbol("sym"),
    ]
    define = forms[0]
    assert type(define[0]) is Symbol and type(define[3][1]) is int and type(define[3][2]) is float
    assert define[4] is True and type(define[6]) is int
    assert type(ndvm.read("99999999999999999999")[0]) is float  # beyond 64 bits: inexact, as the runtime
    assert language.to_source(forms) == "(define (f a . rest) 'x (+ 1 2.5) #t #f -7 +inf.0)\nsym"


def test_read_errors_are_the_runtimes_with_positions():
    with pytest.raises(ndvm.ParseError) as info:
        ndvm.read("(+ 1\n  (* 2 3)")
    assert (info.value.line, info.value.column) == (1, 1) and "missing ')'" in info.value.message
    with pytest.raises(ndvm.ParseError, match="strings are not supported"):
        ndvm.read('(f "s")')
    with pytest.raises(ndvm.ParseError, match="lone surrogate") as info:
        ndvm.read("(+ 1 \ud800)")
    assert (info.value.line, info.value.column) == (1, 6)
    with pytest.raises(TypeError):
        ndvm.read(b"(+ 1 2)")


def test_read_errors_name_the_bracket_written():
    # a list opened with '[' closes with ']': the messages name the bracket in the text
    with pytest.raises(ndvm.ParseError, match="unexpected ']'") as info:
        ndvm.read("(+ 1 2)]")
    assert (info.value.line, info.value.column) == (1, 8)
    with pytest.raises(ndvm.ParseError, match="expected ']' after the dotted tail"):
        ndvm.read("[a . b c]")
    with pytest.raises(ndvm.ParseError, match="expected '\\)' after the dotted tail"):
        ndvm.read("(a . b c)")


def test_read_nesting_limits():
    deep = "(" * language.MAX_NESTING + ")" * language.MAX_NESTING
    assert ndvm.read(deep)  # the runtime's limit itself is readable
    with pytest.raises(ndvm.ParseError, match=f"nesting deeper than {language.MAX_NESTING} levels"):
        ndvm.read("(" * (language.MAX_NESTING + 2) + "x" + ")" * (language.MAX_NESTING + 2))
    with pytest.raises(ndvm.ParseError, match="nesting deeper than 10 levels"):
        ndvm.read("(" * 12 + ")" * 12, max_nesting=10)
    for bad in (0, -1, language.MAX_NESTING + 1, True, 2.5):
        with pytest.raises(ValueError, match="max_nesting"):
            ndvm.read("x", max_nesting=bad)
    for bad in (-1, language.MAX_NESTING + 1):  # the native reader holds the same bounds itself
        with pytest.raises(ValueError, match="max_nesting"):
            _native.read("x", bad)
    with pytest.raises(SexprError, match="nesting deeper than 256 levels"):  # the proposers' limit
        read_all("(" * 300 + ")" * 300)


def test_read_agrees_with_the_compiler_on_every_conformance_program():
    """What ndvm.read gives, printed back, compiles to the program the source compiles to."""
    import json

    sources = [
        json.loads(line)["source"]
        for line in (ROOT / "tests" / "conformance" / "expected.jsonl").read_text().splitlines()
    ]
    assert len(sources) >= 300
    for src in sources:
        assert ndvm.compile(language.to_source(ndvm.read(src))).canonical_hash == ndvm.compile(src).canonical_hash, src
