"""The proposers' reading (the runtime's reader at the proposers' nesting limit), printing and
scope analysis."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import shared_file

import ndvm
from proposers.language import analyze, static_problems, structure_key
from proposers.sexpr import Dotted, SexprError, Sym, read_all, to_source, to_str

KALMAN = """(param q 0.3 positive) (param r 0.3 positive)
(define I (eye 2))
(let loop ((t 0) (x (zeros 2)) (P I) (nll 0.0))
  (if (= t (rows ys)) nll
      (let* ((Pp (+ P (* q I))) (S (+ Pp (* r I))) (e (- (ref ys t) x)) (Si (inv S)) (K (matmul Pp Si)))
        (loop (+ t 1) (+ x (matvec K e)) (matmul (- I K) Pp) (+ nll (logdet S) (dot e (matvec Si e)))))))"""


def corpus_sources():
    for name in ("cosearch_candidates_valid.jsonl", "cosearch_rec_candidates_valid.jsonl"):
        for line in shared_file(f"ndvm_corpora/{name}").read_text().splitlines():
            yield json.loads(line)


def test_atoms_and_exactness():
    forms = read_all("3 -2 3.0 1e-3 .5 -0.25 #t #f #true x a->b ; comment\n #| block |# 'y")
    assert forms[:3] == [3, -2, 3.0]
    assert type(forms[0]) is int and type(forms[2]) is float
    assert forms[3] == 0.001 and forms[4] == 0.5 and forms[5] == -0.25
    assert forms[6] is True and forms[7] is False and forms[8] is True
    assert forms[9] == "x" and isinstance(forms[9], Sym) and forms[10] == "a->b"
    assert forms[11] == [Sym("quote"), Sym("y")]
    assert to_source(forms) == "3\n-2\n3.0\n0.001\n0.5\n-0.25\n#t\n#f\n#t\nx\na->b\n'y"


def test_dotted_formals_and_datum_comment():
    (form,) = read_all("(define (f a . rest) #;(ignored) (apply + a rest))")
    assert form[1] == Dotted((Sym("f"), Sym("a")), Sym("rest"))
    assert to_str(form) == "(define (f a . rest) (apply + a rest))"


# The messages are the runtime reader's (native/src/reader.cc): the proposers read with it.
@pytest.mark.parametrize(
    "text,fragment,line,column",
    [
        ("(+ 1 2", "unbalanced '(': missing ')'", 1, 1),
        ("(+ 1 2))", "unexpected ')'", 1, 8),
        ('(f "s")', "strings are not supported", 1, 4),
        ("(vector #(1 2))", "vector literals #( ... ) are not supported", 1, 9),
        ("(+ 1\n  #xFF)", "unreadable token '#xFF'", 2, 3),
        ("[+ 1 2)", "'[' closed by ')'", 1, 7),
    ],
)
def test_read_errors_have_positions(text, fragment, line, column):
    with pytest.raises(SexprError) as info:  # a ParseError of the runtime, named for the proposers
        read_all(text)
    assert isinstance(info.value, ndvm.ParseError)
    with pytest.raises(ndvm.ParseError) as native:
        ndvm.compile(text)
    assert (native.value.message, native.value.line, native.value.column) == (
        info.value.message,
        info.value.line,
        info.value.column,
    )
    assert fragment in info.value.message
    assert (info.value.line, info.value.column) == (line, column)


def test_round_trip_of_both_corpora():
    count = 0
    for record in corpus_sources():
        forms = read_all(record["src"])
        printed = to_source(forms)
        assert read_all(printed) == forms
        assert to_source(read_all(printed)) == printed
        count += 1
    assert count == 327


def test_corpus_programs_pass_static_checks_once_declared():
    for record in corpus_sources():
        src = "".join(f"(param {p} 0.1)" for p in record["params"]) + record["src"]
        assert static_problems(read_all(src), {"x"}) == [], src
        # without declarations the parameters are undeclared names
        if record["params"]:
            assert any("undeclared name" in p for p in static_problems(read_all(record["src"]), {"x"}))


def test_analysis_of_the_kalman_filter():
    result = analyze(read_all(KALMAN), {"x"})
    assert set(result.params) == {"q", "r"} and result.free == {"ys"}
    assert result.problems == [] and result.used_params == {"q", "r"}
    assert result.control_vars == {"t"}
    editable = {
        to_str(s.node)
        for s in result.sites
        if s.klass in ("scalar", "data") and not s.in_loop_control and s.context in ("numeric", "value")
    }
    # the counter, its init and its step are loop control; the matrix plumbing is class "other"
    assert "0" not in editable and "1" not in editable and "(+ t 1)" not in editable
    assert "(* q I)" not in editable and "P" not in editable
    assert {"q", "r", "nll", "(logdet S)"} <= editable


@pytest.mark.parametrize(
    "src,fragment",
    [
        ("(param a 1.0) (* a y)", "undeclared name 'y'"),
        ("(param a 1.0) (param b 2.0) (* a x)", "parameter b is declared but never used"),
        ("(param a 1.0) (exp a x)", "'exp' takes 1 argument(s), got 2"),
        ("(param a 1.0) (if a)", "if takes a test"),
        ("(param a 1.0) (let ((z)) (* a x))", "needs exactly one value"),
        ("(param a) (* a x)", "malformed parameter declaration"),
        ("(param a 1.0)", "no expression"),
        ("(param a 1.0) (define z (* a x))", "last top-level form is a define"),
    ],
)
def test_static_problems(src, fragment):
    problems = static_problems(read_all(src), {"x"})
    assert any(fragment in p for p in problems), problems


def test_scoping_of_locals_and_internal_defines():
    src = """(param a 1.0)
    (define (f u) (define (g v) (* a v)) (g (+ u 1.0)))
    (let* ((z (f x)) (w (* z z))) (loop ((s w) (k 0)) (if (= k 3) s (recur (* a s) (+ k 1)))))"""
    assert static_problems(read_all(src), {"x"}) == []
    assert analyze(read_all(src)).free == {"x"}


def test_structure_key_abstracts_constants_and_parameter_names():
    a = structure_key(read_all("(param a 1.0) (param b 2.0) (+ (* a x) b 3.0)"))
    b = structure_key(read_all("(param k 5.0) (param m -1) (+ (* k x) m 7.5)"))
    c = structure_key(read_all("(param k 5.0 positive) (param m -1) (+ (* k x) m 7.5)"))
    assert a == b != c


@pytest.mark.parametrize(
    "src,fragment",
    [
        ("(param a 1.0) (logistc (* a x))", "unknown operator 'logistc'"),
        ("(param a 1.0) (a x)", "'a' is a parameter (a number), not a procedure"),
        ("(param a 1.0) (let ((y 1.0)) (set! y 2.0) (* a x y))", "special form 'set!' is not supported"),
    ],
)
def test_static_problems_the_runtime_also_reports(src, fragment):
    assert any(fragment in p for p in static_problems(read_all(src), {"x"}))


CONFORMANCE = Path(__file__).with_name("conformance") / "expected.jsonl"


def conformance_sources() -> list[str]:
    return [json.loads(line)["source"] for line in CONFORMANCE.read_text().splitlines()]


@pytest.mark.skipif(not __import__("proposers").runtime_available(), reason="ndvm runtime not built")
def test_reader_printer_and_checks_agree_with_the_runtime_on_the_conformance_suite():
    """For every conformance program: our print of our read compiles to the same canonical hash,
    and the static checks report nothing on a program the runtime accepts (no false positives)."""
    import ndvm

    sources = conformance_sources()
    assert len(sources) >= 300
    for src in sources:
        original = ndvm.compile(src)
        forms = read_all(src)
        assert ndvm.compile(to_source(forms)).canonical_hash == original.canonical_hash, src
        assert static_problems(forms, set(original.inputs)) == [], src


def test_copy_node_is_a_deep_copy_of_the_lists_sharing_only_atoms():
    """What the mutation proposer copies its parent with: equal to copy.deepcopy of the datum, no
    list (nor a list inside a dotted tail) shared with the original, so an edit in place leaves
    the parent as it was."""
    import copy

    from proposers.sexpr import copy_node, read_all

    forms = read_all("(param phi 0.9 (between -1 1)) (define (f x . rest) (+ (* phi x) (apply + rest))) '(1 #t 2.5)")
    copied = [copy_node(f) for f in forms]
    assert copied == copy.deepcopy(forms) == forms

    def lists(node, out):
        if isinstance(node, list):
            out.append(node)
            for x in node:
                lists(x, out)
        elif hasattr(node, "items"):
            for x in node.items:
                lists(x, out)
            lists(node.tail, out)
        return out

    originals = {id(x) for f in forms for x in lists(f, [])}
    assert not originals & {id(x) for f in copied for x in lists(f, [])}
    copied[1][2][0] = "edited"
    assert forms[1][2][0] == "+"
